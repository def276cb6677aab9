"""A big model's uncached pass: its cost estimated before it runs, refused over the limit with
what to do, and handed to the costly pool, whose places are bounded and whose order is kept.

Ordered by events (a pass held until the test releases it), never by timing."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from transformer.lab.inspection import pass_input
from ui.serving import limits
from ui.serving.costly import CostlyPasses, PoolFull, admit
from ui.serving.errors import InputError
from ui.serving.state import ModelRegistry

LONG = "the small cat sees a red ball and the big dog sees the small cat"


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


def test_the_cost_is_parameters_times_the_tokens_read(
    registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = registry.checkpoint("translate", None)
    model, cpu = checkpoint.model, torch.device("cpu")
    # The reference: the model's tensors counted by hand, each storage once, and the ids its
    # tokenizer gives the sentence, plus the one token of a translation's answer.
    storages = {p.untyped_storage().data_ptr(): p.numel() for p in model.parameters()}
    params = sum(storages.values())
    tokens = len(checkpoint.tokenizer.encoding(LONG).ids) + 1
    assert pass_input(model, checkpoint.tokenizer, [LONG]).tokens == tokens
    # Admitted up to the limit exactly (outside any event: run in place), refused one past it.
    monkeypatch.setattr(limits, "MAX_PASS_COST", params * tokens)
    assert admit("translate", model, tokens, cpu) is False
    with pytest.raises(InputError, match=f"Shorten the text to at most {tokens} tokens"):
        admit("translate", model, tokens + 1, cpu)


def test_tied_weights_are_counted_once() -> None:
    from ui.serving.costly import parameters

    tied = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    tied[1].weight = tied[0].weight
    assert parameters(tied) == 40


def test_a_pass_over_the_limit_is_refused_with_what_to_do(
    registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = registry.checkpoint("translate", None)
    params = sum(p.numel() for p in checkpoint.model.parameters())
    monkeypatch.setattr(limits, "MAX_PASS_COST", params * 6)
    with pytest.raises(InputError) as refused:
        registry.analysis("translate", checkpoint, [LONG])
    text = str(refused.value)
    assert "too long for translate" in text
    assert "Shorten the text to at most 6 tokens" in text and "smaller model" in text
    # A short one is answered, and what is cached already costs nothing.
    assert registry.analysis("translate", checkpoint, ["the cat"]).trace is not None
    monkeypatch.setattr(limits, "MAX_PASS_COST", 0)
    assert registry.analysis("translate", checkpoint, ["the cat"]).trace is not None


def _held(pool: CostlyPasses, key: Any, release: threading.Event, started: threading.Event):
    def compute() -> str:
        started.set()
        assert release.wait(60)
        return f"pass {key}"

    return lambda: pool.run(key, compute, "SmolLM2")


def test_the_pool_runs_one_at_a_time_keeps_its_places_and_refuses_past_them() -> None:
    pool = CostlyPasses(workers=1, capacity=3)
    release = threading.Event()
    started = {key: threading.Event() for key in "abc"}
    results: dict[str, str] = {}

    def ask(key: str) -> threading.Thread:
        run = _held(pool, key, release, started[key])
        thread = threading.Thread(target=lambda: results.update({key: run()}))
        thread.start()
        return thread

    try:
        first = ask("a")
        assert started["a"].wait(30)
        second = ask("b")
        joiner = ask("a")  # the same pass asked for again: joined, not run twice
        while pool.waiting < 3:
            threading.Event().wait(0.01)
        assert not started["b"].is_set()  # one at a time: "b" waits for "a"
        with pytest.raises(PoolFull, match="try again in a few seconds"):
            pool.run("c", lambda: "never", "SmolLM2")
        assert not started["c"].is_set() and pool.refused == 1
    finally:
        release.set()
    for thread in (first, second, joiner):
        thread.join(60)
    assert results == {"a": "pass a", "b": "pass b"}
    assert (pool.handed, pool.joined, pool.waiting) == (2, 1, 0)
    # With its places free again, the pool takes the next one.
    assert pool.run("c", lambda: "pass c", "SmolLM2") == "pass c"
    pool.shutdown()


def test_a_failing_pass_fails_its_caller_and_frees_its_place() -> None:
    pool = CostlyPasses(workers=1, capacity=1)

    def fail() -> None:
        raise InputError("sentence 1 is too long")

    with pytest.raises(InputError, match="too long"):
        pool.run("x", fail, "SmolLM2")
    assert pool.waiting == 0 and pool.run("x", lambda: 1, "SmolLM2") == 1
    pool.shutdown()


def test_a_big_prompts_first_step_runs_in_the_pool_when_a_cheap_event_asks(
    registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A generation's first step reads the whole prompt; with the key/value cache the next
    reads one token. Asked for by a cheap event's thread, the first goes to the pool."""
    from types import SimpleNamespace

    from gradio.context import LocalContext

    model = registry.checkpoint("continue", None).model
    params = sum(p.numel() for p in model.parameters())
    monkeypatch.setattr(limits, "COSTLY_PASS_COST", params * 10)
    ran_on: list[str] = []

    def step() -> str:
        ran_on.append(threading.current_thread().name)
        return "record"

    decoding = SimpleNamespace(
        prefix=list(range(12)),
        records=[],
        settings=SimpleNamespace(use_cache=True),
        width=1,
        model=model,
        step=step,
    )
    # The thread answers an event of a cheap queue (its own id), as gradio sets it.
    queue = SimpleNamespace(event_ids_to_events={"e": SimpleNamespace(concurrency_id="17")})
    blocks = LocalContext.blocks.set(SimpleNamespace(_queue=queue))  # type: ignore[arg-type]
    event = LocalContext.event_id.set("e")
    try:
        handed = registry.passes.handed
        assert registry.decode_step("continue", decoding) == "record"  # 12 tokens: costly
        assert ran_on[-1].startswith("costly-pass") and registry.passes.handed == handed + 1
        decoding.records.append("record")
        registry.decode_step("continue", decoding)  # one token, from the cache: in place
        assert ran_on[-1] == threading.current_thread().name
        # The same step asked for by a costly queue's event runs in place too.
        queue.event_ids_to_events["e"].concurrency_id = "costly"
        decoding.records.clear()
        registry.decode_step("continue", decoding)
        assert ran_on[-1] == threading.current_thread().name
        assert registry.passes.handed == handed + 1
    finally:
        LocalContext.event_id.reset(event)
        LocalContext.blocks.reset(blocks)
