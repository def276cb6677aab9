"""Mistral (sliding-window attention) and OLMo 2 (norms after the sub-layers, QK-norm over
the whole projection) against ``transformers``: tiny random models saved as Hugging Face
folders and loaded with ``load_pretrained``; every layer, every head, the logits, greedy
generation and the cache; and the wrong choice shown to fail."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from family_checks import (
    PROMPT,
    attentions,
    check_changes_fail,
    check_wrong_choice_fails,
    load_case,
    loaded_family,
    parity_test,
    residuals,
)

from transformer.core import stacks
from transformer.core.modern import RMSNorm
from transformer.core.run import TRACE

pytest.importorskip("transformers")

WINDOW = 5  # shorter than the 11-token prompt: the band under the causal triangle bites

MISTRAL_CASES = {
    "gqa-untied": dict(num_key_value_heads=2, sliding_window=WINDOW),
    "mqa-tied": dict(num_key_value_heads=1, sliding_window=WINDOW, tie_word_embeddings=True),
    "window-3-bf16": dict(num_key_value_heads=2, sliding_window=3),
    "no-window": dict(num_key_value_heads=4, sliding_window=None),
}


def _mistral(folder: Path, name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    shape = MISTRAL_CASES[name]
    config, model, reference = load_case(folder, "mistral", name, shape)
    assert config.sliding_window == shape["sliding_window"]
    return model, reference


test_mistral_equals_transformers = parity_test(_mistral, MISTRAL_CASES)


@pytest.fixture
def windowed(tmp_path: Path):
    return loaded_family(tmp_path, "mistral", seed=11, sliding_window=WINDOW)


def test_the_window_is_in_the_recorded_mask(windowed) -> None:
    """What the mask panel draws: query i may read key j exactly when 0 ≤ i − j < window."""
    model, _ = windowed
    trace = model(tgt=torch.tensor([PROMPT]), call=TRACE)
    n = len(PROMPT)
    expected = torch.tensor([[0 <= i - j < WINDOW for j in range(n)] for i in range(n)])
    for layer in trace.decoder_layers:
        assert torch.equal(layer.self_attention.mask[0, 0], expected)
        weights = layer.self_attention.weights[0]
        assert bool((weights[:, ~expected] == 0).all())


def test_the_cache_holds_no_more_than_the_window(windowed) -> None:
    model, _ = windowed
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        cache = model.new_cache()
        model.decode(ids[:, :8], cache=cache)
        for t in range(8, len(PROMPT)):
            model.decode(ids[:, t : t + 1], cache=cache)
            for layer in cache.layers:
                assert layer.self_attention.keys.shape[2] == WINDOW - 1
    assert cache.length == len(PROMPT)


def test_rewinding_past_the_window_recomputes_the_text(windowed) -> None:
    """A rewind into positions the window let go empties the cache; the next step then
    computes the text again from its start, with the same logits as an uncached pass."""
    model, _ = windowed
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        cache = model.new_cache()
        model.decode(ids, cache=cache)
        cache.truncate(3)  # positions 0..2 were let go (the cache holds the last 4)
        assert cache.length == 0
        again = model.decode(ids[:, :6], cache=cache).logits
        full = model(tgt=ids[:, :6])
    assert (again - full).abs().max().item() <= 1e-5


def _banded(window_of) -> contextlib.AbstractContextManager[None]:
    @contextlib.contextmanager
    def swap() -> Iterator[None]:
        original = stacks.sliding_window_mask

        def wrong(mask, window, first_query, n_queries, n_keys):
            return original(mask, window_of(window), first_query, n_queries, n_keys)

        stacks.sliding_window_mask = wrong
        try:
            yield
        finally:
            stacks.sliding_window_mask = original

    return swap()


def test_the_window_ignored_fails(windowed) -> None:
    model, reference = windowed
    check_wrong_choice_fails(model, reference, lambda: _banded(lambda w: 10_000))


def test_a_window_one_wider_fails(windowed) -> None:
    """``query − key ≤ window`` (one key too many) instead of ``< window``."""
    model, reference = windowed
    check_wrong_choice_fails(model, reference, lambda: _banded(lambda w: w + 1))


# -- OLMo 2 --------------------------------------------------------------------------------------

OLMO2_CASES = {
    "gqa-untied": dict(num_key_value_heads=2),
    "mqa-tied": dict(num_key_value_heads=1, tie_word_embeddings=True),
    "mha-bf16": dict(num_key_value_heads=4),
}


def _olmo2(folder: Path, name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    config, model, reference = load_case(folder, "olmo2", name, OLMO2_CASES[name])
    assert config.norm == "output" and config.qk_norm == "projection"
    return model, reference


test_olmo2_equals_transformers = parity_test(_olmo2, OLMO2_CASES)


@pytest.fixture
def olmo(tmp_path: Path):
    return loaded_family(tmp_path, "olmo2", seed=13)


def test_olmo2_norms_before_the_sublayers_fail(olmo, monkeypatch) -> None:
    """The same norms on the sub-layers' inputs (Llama's place) instead of their outputs."""
    model, reference = olmo
    moved = (("pre_norm", True), ("output_norm", False))
    changes = [(r, name, value) for r in residuals(model) for name, value in moved]
    check_changes_fail(model, reference, monkeypatch, changes)


class HeadByHead(torch.nn.Module):
    """The gains of a whole-projection RMSNorm applied after normalising each head alone."""

    def __init__(self, whole: RMSNorm, d_head: int) -> None:
        super().__init__()
        self.norm = RMSNorm(d_head, whole.eps)
        self.gain = whole.weight.detach()
        self.d_head = d_head

    def forward(
        self, x: torch.Tensor, run: object = None
    ) -> torch.Tensor:  # (B, T, heads · d_head)
        """Called as the model calls its norms, ``norm(x, run)``; a stand-in, it swaps nothing."""
        shape = x.shape
        heads = self.norm(x.view(*shape[:-1], shape[-1] // self.d_head, self.d_head))
        return heads.reshape(shape) * self.gain


def test_olmo2_qk_norm_per_head_fails(olmo, monkeypatch) -> None:
    """Each head normalised alone (Qwen3's QK-norm) instead of the whole projection at once,
    with the same learned gains."""
    model, reference = olmo
    changes = [
        (a, name, HeadByHead(getattr(a, name), a.d_head))
        for a in attentions(model)
        for name in ("q_norm", "k_norm")
    ]
    check_changes_fail(model, reference, monkeypatch, changes)


def test_the_cache_view_checks_a_sliding_window_cache(windowed) -> None:
    """The key/value-cache view's check (a cached next step against an uncached pass) on a
    cache the window has already bounded."""
    from transformer.generation.cache_stats import check_next_step

    model, _ = windowed
    ids = torch.tensor([PROMPT])
    cache = model.new_cache()
    with torch.no_grad():
        model.decode(ids[:, :-1], cache=cache)
    assert cache.layers[0].self_attention.dropped > 0
    check = check_next_step(model, ids, cache=cache, repeats=1)
    assert check.cached_positions == 1 and check.max_abs_difference <= 1e-5
    assert cache.length == len(PROMPT) - 1  # the view's check leaves the cache as it was
