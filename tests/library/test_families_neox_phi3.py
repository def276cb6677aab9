"""GPT-NeoX / Pythia (parallel attention and feed-forward, partial rotary, LayerNorm with bias,
q/k/v interleaved per head) and Phi-3 / Phi-4-mini (fused projections, partial rotary,
longrope) against ``transformers``: tiny random models saved as Hugging Face folders and loaded
with ``load_pretrained``; every layer, every head, the logits, greedy generation and the cache;
and the wrong choice shown to fail."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from family_checks import (
    check_changes_fail,
    check_wrong_choice_fails,
    load_case,
    loaded_family,
    parity_test,
)

pytest.importorskip("transformers")


def _rope(fraction: float, theta: float = 10000.0, **scaling: object) -> dict[str, object]:
    kind = scaling.pop("rope_type", "default")
    return {"rope_type": kind, "rope_theta": theta, "partial_rotary_factor": fraction, **scaling}


NEOX_CASES = {
    # Pythia: a quarter of each head turns, attention and feed-forward in parallel
    "pythia-quarter": dict(rope_parameters=_rope(0.25)),
    "half-sequential": dict(rope_parameters=_rope(0.5), use_parallel_residual=False),
    "full-tied": dict(rope_parameters=_rope(1.0), tie_word_embeddings=True),
    "quarter-bf16": dict(rope_parameters=_rope(0.25)),
}


def _neox(folder: Path, name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    shape = NEOX_CASES[name]
    config, model, reference = load_case(folder, "gpt_neox", name, shape)
    assert config.rotary_fraction == shape["rope_parameters"]["partial_rotary_factor"]
    assert config.parallel_residual == shape.get("use_parallel_residual", True)
    return model, reference


test_neox_equals_transformers = parity_test(_neox, NEOX_CASES)


@pytest.fixture
def pythia(tmp_path: Path):
    return loaded_family(tmp_path, "gpt_neox", seed=21, rope_parameters=_rope(0.25))


def test_neox_sequential_instead_of_parallel_fails(pythia, monkeypatch) -> None:
    model, reference = pythia
    changes = [(layer, "parallel", False) for layer in model.decoder.layers]
    check_changes_fail(model, reference, monkeypatch, changes)


def test_neox_rotating_the_whole_head_fails(pythia, monkeypatch) -> None:
    """Rotary over every dimension of the head instead of its first quarter."""
    model, reference = pythia
    rotary = model.decoder.layers[0].self_attention.rotary
    from transformer.core.rotary import rotary_cos_sin

    cos, sin = rotary_cos_sin(torch.arange(rotary.cos.shape[0]), rotary.d_head)
    changes = [(rotary, "rotary_dims", rotary.d_head), (rotary, "cos", cos), (rotary, "sin", sin)]
    check_changes_fail(model, reference, monkeypatch, changes)


def test_neox_query_key_value_read_as_three_blocks_fails(pythia) -> None:
    """The fused rows are ``[q₀ k₀ v₀ q₁ k₁ v₁ …]`` per head; reading them as ``[q; k; v]``
    (Phi-3's layout) gives other q, k and v."""
    model, reference = pythia

    @contextlib.contextmanager
    def blocks() -> Iterator[None]:
        saved = {}
        with torch.no_grad():
            for i, layer in enumerate(model.decoder.layers):
                fused = reference.gpt_neox.layers[i].attention.query_key_value
                attention = layer.self_attention
                saved[i] = [(w.weight.clone(), w.bias.clone()) for w in _qkv(attention)]
                for w, weight, bias in zip(
                    _qkv(attention), fused.weight.chunk(3), fused.bias.chunk(3), strict=True
                ):
                    w.weight.copy_(weight)
                    w.bias.copy_(bias)
        yield
        with torch.no_grad():
            for i, layer in enumerate(model.decoder.layers):
                for w, (weight, bias) in zip(_qkv(layer.self_attention), saved[i], strict=True):
                    w.weight.copy_(weight)
                    w.bias.copy_(bias)

    check_wrong_choice_fails(model, reference, blocks)


def _qkv(attention: torch.nn.Module) -> list[torch.nn.Linear]:
    return [attention.w_q, attention.w_k, attention.w_v]


# -- Phi-3 / Phi-4-mini --------------------------------------------------------------------------

LONGROPE = dict(
    rope_type="longrope",
    short_factor=[1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
    long_factor=[2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
)
PHI3_CASES = {
    "phi3-mini-untied": dict(num_key_value_heads=4, rope_parameters=_rope(1.0)),
    "phi4-mini-gqa-tied": dict(
        num_key_value_heads=2, tie_word_embeddings=True, rope_parameters=_rope(0.75)
    ),
    "mqa-window": dict(num_key_value_heads=1, sliding_window=6, rope_parameters=_rope(1.0)),
    # 0.75 of 16 dimensions: 12 turn, six frequencies; trained on 32 positions, stretched to 128
    "longrope": dict(
        num_key_value_heads=2,
        max_position_embeddings=128,
        original_max_position_embeddings=32,
        rope_parameters=_rope(0.75, **LONGROPE),
    ),
    "bf16": dict(num_key_value_heads=2, rope_parameters=_rope(0.75)),
}


def _phi3(folder: Path, name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    shape = PHI3_CASES[name]
    config, model, reference = load_case(folder, "phi3", name, shape)
    assert config.rotary_fraction == shape["rope_parameters"]["partial_rotary_factor"]
    return model, reference


test_phi3_equals_transformers = parity_test(_phi3, PHI3_CASES)


def test_phi3_gate_and_up_halves_swapped_fail(tmp_path: Path, monkeypatch) -> None:
    """``gate_up_proj`` holds the gate's rows first, then the up projection's."""
    model, reference = loaded_family(tmp_path, "phi3", seed=31, rope_parameters=_rope(0.75))
    layers = [layer.feed_forward for layer in model.decoder.layers]
    changes = [(ff, "w_gate", ff.w_up) for ff in layers] + [
        (ff, "w_up", ff.w_gate) for ff in layers
    ]
    check_changes_fail(model, reference, monkeypatch, changes)
