"""A generation is weighed before it runs (``ui/serving/costly.py``'s ``decoding_cost``): the
estimate against the bytes a real decoding holds at its end, counted here by walking its key/value
cache and its records; refused with a message past the limit; and every session's decodings
kept within a bound in all (``ui/serving/state.py``'s ``HeldDecodings``), the least recently
used let go first, never one a request is using."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from conftest import TINY_GQA

from transformer.core.model import Transformer
from transformer.generation import DecodingSession, DecodingSettings
from ui.serving import limits
from ui.serving.costly import decoding_cost
from ui.serving.state import GenerationState, HeldDecodings, ModelRegistry, SessionModels
from ui.tabs.generate import handlers


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


def _held_bytes(value: object, seen: set[int] | None = None) -> int:
    """Every tensor's and array's bytes reachable from ``value`` through attributes, lists,
    tuples and dicts (each object once; modules, whose weights are the model's, skipped)."""
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, torch.nn.Module | str | bytes | int | float):
        return 0
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return value.untyped_storage().nbytes()
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_held_bytes(v, seen) for v in value.values())
    if isinstance(value, list | tuple | set):
        return sum(_held_bytes(v, seen) for v in value)
    return sum(_held_bytes(v, seen) for v in getattr(value, "__dict__", {}).values())


def _gqa_model() -> Transformer:
    config = TINY_GQA.replace(n_decoder_layers=3, tgt_vocab_size=50, src_vocab_size=50)
    return Transformer(config).eval()


@pytest.mark.parametrize("beams", [1, 3])
def test_the_estimate_is_what_a_decoding_holds_at_its_end(beams):
    model = _gqa_model()
    settings = DecodingSettings(
        strategy="beam" if beams > 1 else "greedy",
        beam_width=beams,
        max_new_tokens=12,
        capture_attention=True,
    )
    decoding = DecodingSession(model, [5, 6, 7, 8], settings, eos_id=None)
    for _ in decoding.run():
        pass
    cache_held = _held_bytes(decoding.loop.cache)
    rows_held = sum(
        r.self_attention.nbytes for r in decoding.records if r.self_attention is not None
    )
    cost = decoding_cost(model.config, beams, len(decoding.prefix), decoding.max_steps)
    # The cache holds kv_heads (2), not n_heads (6): the estimate that used n_heads would be 3x.
    assert cost.cache_bytes == pytest.approx(cache_held, rel=0.1)
    assert cost.record_bytes == pytest.approx(rows_held, rel=0.1)


def _run_args(model: str, beams: int, tokens: int, text: str = "the small cat") -> list:
    strategy = "beam" if beams > 1 else "greedy"
    return [text, model, strategy, 1.0, 0, 1.0, beams, tokens, 0, 1, 1, False]


def test_a_generation_over_the_limit_is_refused_before_its_first_step(registry, monkeypatch):
    small = decoding_cost(registry.checkpoint("continue", None).config, 3, 8, 40)
    monkeypatch.setattr(limits, "MAX_DECODING_BYTES", small.bytes // 2)
    state = GenerationState()
    with pytest.raises(gr_error()) as refused:
        list(handlers.run(registry, *_run_args("continue", 3, 40), SessionModels(), state))
    message = str(refused.value)
    assert "too big" in message and "fewer new tokens" in message and "beam" in message
    assert "Traceback" not in message
    assert state.decoding is None  # nothing of it kept
    # Smaller, it runs.
    drawn = handlers.step(registry, *_run_args("continue", 1, 4), SessionModels(), state)
    assert drawn[-1].decoding is not None and drawn[-1].decoding.records


def gr_error() -> type[Exception]:
    import gradio as gr

    return gr.Error


def test_every_sessions_decodings_stay_within_their_bound(registry, monkeypatch):
    one = decoding_cost(registry.checkpoint("continue", None).config, 1, 6, 8).bytes
    # Room for about three sessions' decodings.
    monkeypatch.setattr(limits, "DECODINGS_BYTES", 3 * one + one // 2)
    registry.decodings = HeldDecodings()
    states = []
    for n in range(10):  # ten sessions take a step each and never come back
        state = GenerationState()
        handlers.step(registry, *_run_args("continue", 1, 8, f"word {n}"), SessionModels(), state)
        states.append(state)
    holding = [s for s in states if s.decoding is not None]
    assert len(holding) <= 4
    assert registry.decodings.bytes <= limits.DECODINGS_BYTES
    assert states[-1].decoding is not None  # the newest kept, the oldest let go
    assert states[0].decoding is None
    held = sum(_held_bytes(s.decoding) for s in holding)
    every = sum(_held_bytes(s.decoding) for s in states)
    assert every == held
    # A session let go starts again from its prompt at its next step: no error.
    drawn = handlers.step(
        registry, *_run_args("continue", 1, 8, "word 0"), SessionModels(), states[0]
    )
    assert states[0].decoding is not None and len(states[0].decoding.records) == 1
    del drawn


def test_a_decoding_in_use_is_never_let_go(monkeypatch):
    held = HeldDecodings()
    busy, idle, new = GenerationState(), GenerationState(), GenerationState()
    for state in (busy, idle, new):
        state.decoding = object()  # type: ignore[assignment]
    held.hold(busy, 60)
    held.hold(idle, 60)
    monkeypatch.setattr(limits, "DECODINGS_BYTES", 100)
    with busy.lock:  # a request is stepping it
        assert held.hold(new, 60) == 1
    assert busy.decoding is not None and idle.decoding is None and new.decoding is not None
    del busy
    gc.collect()
    assert len(held) == 1  # a collected session's entry goes with it
