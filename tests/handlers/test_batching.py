"""Batched serving: students pressing Step at once, each with their own decoding (other prompt,
other cache length, other strategy), get from the Generate handler exactly what they get with
batching off, while their steps ran as shared forward passes."""

from __future__ import annotations

import base64
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import llama_folder

from ui.serving.batching import Batcher, StepBatcher, batching_enabled
from ui.serving.state import GenerationState, ModelRegistry, SessionModels
from ui.tabs.generate import handlers

pytest.importorskip("transformers")

NAME = "tinybatch"
# Each student: their prompt and strategy (beam width 2 where they search).
STUDENTS = [
    ("w3 w4", "greedy"),
    ("w5 w6 w7 w8 w9 w10", "sample"),
    ("w11", "beam"),
    ("w12 w13 w14", "greedy"),
    ("w15 w16", "sample"),
]
ROUNDS = 4


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ModelRegistry:
    folder: Path = tmp_path_factory.mktemp("models") / NAME
    llama_folder(folder, 64, seed=4, specials=["<unk>", "<s>"], num_hidden_layers=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VISUALISER_BATCH", "1")  # the CPU batches only when asked to
        registry = ModelRegistry("cpu", [str(folder)])
    assert registry.steps is not None
    return registry


def _inputs(source: str, strategy: str, session: SessionModels, state: GenerationState) -> list:
    # source, model, strategy, temperature, top-k, top-p, beam, max tokens, seed, layer, head,
    # large font, then the session's models and the generation state
    return [source, NAME, strategy, 1.0, 0, 1.0, 2, 10, 7, 1, 1, False, session, state]


def _classroom(registry: ModelRegistry) -> list[list[Any]]:
    """Every student presses Step ``ROUNDS`` times, all at once each round (one thread each):
    their outputs, per student and round."""
    people = [(SessionModels(), GenerationState()) for _ in STUDENTS]
    outputs: list[list[Any]] = [[] for _ in STUDENTS]
    for _ in range(ROUNDS):
        start = threading.Barrier(len(STUDENTS))

        def press(i: int, start: threading.Barrier = start) -> None:
            source, strategy = STUDENTS[i]
            session, state = people[i]
            start.wait()
            outputs[i].append(handlers.step(registry, *_inputs(source, strategy, session, state)))

        threads = [threading.Thread(target=press, args=(i,)) for i in range(len(STUDENTS))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for i, (_, state) in enumerate(people):
        assert state.decoding is not None and len(state.decoding.records) == ROUNDS, i
    return outputs


def _same(ours: Any, theirs: Any, where: str = "output") -> None:
    """Equal outputs: the same text and structure, numbers equal to float rounding (a batched
    step multiplies matrices of another shape)."""
    if hasattr(theirs, "to_plotly_json"):
        ours, theirs = ours.to_plotly_json(), theirs.to_plotly_json()
    if isinstance(theirs, GenerationState):
        return  # each run's own session state
    if isinstance(theirs, np.ndarray) or isinstance(ours, np.ndarray):
        a, b = np.asarray(ours), np.asarray(theirs)
        assert a.shape == b.shape, where
        if b.dtype.kind in "fc":
            assert np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True), where
        else:
            assert np.array_equal(a, b), where
        return
    if isinstance(theirs, dict) and "bdata" in theirs:  # plotly's typed array, base64
        _same(_array(ours), _array(theirs), where)
        return
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and ours.keys() == theirs.keys(), where
        for key in theirs:
            _same(ours[key], theirs[key], f"{where}.{key}")
        return
    if isinstance(theirs, list | tuple):
        assert isinstance(ours, list | tuple) and len(ours) == len(theirs), where
        for n, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _same(a, b, f"{where}[{n}]")
        return
    if isinstance(theirs, float) and not isinstance(ours, bool):
        assert math.isclose(ours, theirs, rel_tol=1e-5, abs_tol=1e-6) or (
            math.isnan(ours) and math.isnan(theirs)
        ), where
        return
    assert ours == theirs, where


def _array(typed: dict) -> np.ndarray:
    values = np.frombuffer(base64.b64decode(typed["bdata"]), dtype=np.dtype(typed["dtype"]))
    shape = typed.get("shape")  # "3, 4" where plotly gives one
    if shape is None:
        return values
    dims = [int(n) for n in shape.split(",")] if isinstance(shape, str) else list(shape)
    return values.reshape(dims)


def test_concurrent_steps_batched_equal_steps_alone(registry: ModelRegistry) -> None:
    """Five students step four times, at once: with batching on (a window long enough that
    their steps meet) every output equals the one batching off gives them."""
    assert registry.steps is not None
    batched = StepBatcher(window=0.5)
    try:
        registry.steps = None
        alone = _classroom(registry)
        registry.steps = batched
        together = _classroom(registry)
    finally:
        registry.steps = batched
    assert max(batched.sizes) > 1, "no two steps shared a pass"
    assert sum(batched.sizes) == len(STUDENTS) * ROUNDS
    for i, (mine, theirs) in enumerate(zip(together, alone, strict=True)):
        for step, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            _same(a, b, f"student {i} step {step}")


def test_batching_follows_the_device_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VISUALISER_BATCH", raising=False)
    assert batching_enabled("cuda") and not batching_enabled("cpu")
    monkeypatch.setenv("VISUALISER_BATCH", "1")
    assert batching_enabled("cpu")
    monkeypatch.setenv("VISUALISER_BATCH", "0")
    assert not batching_enabled(torch.device("cuda"))


def test_each_caller_gets_its_own_result_or_its_own_error() -> None:
    """The batcher itself: items arriving together run as one call; an item's error reaches its
    caller only; a call that fails altogether reaches every caller of its batch."""
    calls: list[list[int]] = []

    def together(items: list[int]) -> list[int | BaseException]:
        calls.append(items)
        if 13 in items and len(items) == 2:
            raise RuntimeError("the whole batch failed")
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]

    batcher: Batcher[int, int] = Batcher(together, lambda i: i * 10, window=0.3, max_batch=4)
    results: dict[int, object] = {}

    def ask(item: int) -> None:
        try:
            results[item] = batcher.submit("model", item)
        except Exception as error:
            results[item] = error

    threads = [threading.Thread(target=ask, args=(i,)) for i in (1, 2, -3, 4, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results[1] == 10 and results[2] == 20 and results[4] == 40 and results[5] == 50
    assert isinstance(results[-3], ValueError) and "bad -3" in str(results[-3])
    assert sum(batcher.sizes) == 5 and 1 < max(batcher.sizes) <= 4  # bounded batches
    threads = [threading.Thread(target=ask, args=(i,)) for i in (13, 14)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert isinstance(results[13], RuntimeError) and isinstance(results[14], RuntimeError)


SENTENCES = [["w3 w4 w5"], ["w6", "w7 w8 w9 w10 w11"], ["w12 w13"], ["w14 w15 w16 w17", "w18"]]


def _analyses(registry: ModelRegistry) -> list[Any]:
    """Every student asks for the analysis of their own sentences at once (one thread each)."""
    with registry._cache_lock:  # each run computes its own: nothing from the run before
        registry._analyses.clear()
    checkpoint = registry.checkpoint(NAME, None)
    start = threading.Barrier(len(SENTENCES))
    out: list[Any] = [None] * len(SENTENCES)

    def ask(i: int) -> None:
        start.wait()
        out[i] = registry.analysis(NAME, checkpoint, SENTENCES[i])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(SENTENCES))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def test_concurrent_analyses_batched_equal_analyses_alone(registry: ModelRegistry) -> None:
    """Four students ask for the attention of their own sentences at once: with batching on,
    each analysis (pieces, predictions, every layer's and head's weights) equals its own."""
    batches = registry.analysis_batches
    assert batches is not None
    try:
        registry.analysis_batches = None
        alone = _analyses(registry)
        registry.analysis_batches = type(batches)(window=0.5)
        together = _analyses(registry)
        sizes = registry.analysis_batches.sizes
    finally:
        registry.analysis_batches = batches
    assert max(sizes) > 1, "no two analyses shared a pass"
    for mine, theirs in zip(together, alone, strict=True):
        assert mine.target_pieces == theirs.target_pieces
        assert mine.outputs == theirs.outputs and mine.predicted == theirs.predicted
        a = mine.trace.attention_weights("decoder_self")
        b = theirs.trace.attention_weights("decoder_self")
        assert a.shape == b.shape
        assert float((a - b).abs().max()) <= 1e-6
        assert torch.allclose(mine.trace.logits, theirs.trace.logits, rtol=1e-5, atol=1e-5)
