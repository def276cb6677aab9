"""Over HTTP, ordered by events: big models' uncached passes held in the costly pool do not
delay a small model's call of the same event, a pass past the pool's places is told to try
again, and a pass over the limit is refused with what to do.

The bundled translation model stands in for a big one: the costly threshold is lowered so that
its pass over a long sentence counts as costly and over "the cat" does not."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ui.serving import limits
from ui.serving import state as serving_state

pytestmark = pytest.mark.slow

ATTENTION = ["encoder self-attention", 1, 1, 1, [], False, "none (the correct pass)"]
WORDS = ["the", "small", "cat", "sees", "a", "red", "ball", "and", "the", "big", "dog"]


def _long(n: int) -> str:
    """A long sentence of the bundled vocabulary, a different one for each ``n``."""
    return " ".join(WORDS[(n + i) % len(WORDS)] for i in range(24))


def _attention(client: Any, sentence: str) -> Any:
    return client.submit(sentence, "translate", *ATTENTION, api_name="/attention")


def test_small_calls_pass_big_uncached_passes_held_in_the_costly_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from serving import api_client

    import app
    from ui.testing import launched

    demo = app.build_demo("cpu", (), preload=False)
    registry = demo.model_registry
    checkpoint = registry.checkpoint("translate", None)
    params = sum(p.numel() for p in checkpoint.model.parameters())
    monkeypatch.setattr(limits, "COSTLY_PASS_COST", params * 12)  # "the cat": 3 tokens
    release = threading.Event()
    held: list[str] = []
    original = serving_state.analyse

    def analyse(model: Any, tokenizer: Any, planned: Any, *rest: Any, **named: Any) -> Any:
        first = planned.sentences[0]  # the registry hands on its checked pass_input
        if len(first.split()) > 12:  # a big pass: held until the test releases it
            held.append(first)
            assert release.wait(180)
        return original(model, tokenizer, planned, *rest, **named)

    monkeypatch.setattr(serving_state, "analyse", analyse)
    capacity = registry.passes.capacity
    try:
        with launched(demo) as url:
            clients = [api_client(url) for _ in range(capacity + 2)]
            # As many big passes as the pool has places (more than a cheap event's own
            # workers): one runs, held; the others sleep on the pool.
            big = [_attention(clients[i], _long(i)) for i in range(capacity)]
            for _ in range(1800):
                if registry.passes.waiting == capacity:
                    break
                threading.Event().wait(0.1)
            assert registry.passes.waiting == capacity and len(held) == 1
            # One more is told to come back: no place is left.
            refused = _attention(clients[capacity], _long(capacity))
            with pytest.raises(Exception, match="try again in a few seconds"):
                refused.result(timeout=180)
            # A small model's call of the same event is answered while they are held.
            small = _attention(clients[capacity + 1], "the cat")
            assert small.result(timeout=180) is not None
            assert not release.is_set() and not any(job.done() for job in big)
            # A pass over the limit is refused before it runs, with what to do.
            monkeypatch.setattr(limits, "MAX_PASS_COST", params * 5)
            too_big = _attention(clients[capacity + 1], "the big dog sees a red ball")
            with pytest.raises(Exception, match="Shorten the text to at most 5 tokens"):
                too_big.result(timeout=180)
            monkeypatch.setattr(limits, "MAX_PASS_COST", 10**15)
            release.set()
            for job in big:
                assert job.result(timeout=180) is not None
            assert registry.passes.waiting == 0
            assert (registry.passes.handed, registry.passes.refused) == (capacity, 1)
    finally:
        release.set()
