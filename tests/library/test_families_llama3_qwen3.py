"""Llama 3.x (rotary frequency scaling) and Qwen3 (QK-norm) against ``transformers``: tiny
random models saved as Hugging Face folders and loaded with ``load_pretrained``; every layer,
every head, the logits, greedy generation and the cache; and the wrong choice shown to fail."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import family_folder
from family_checks import (
    check_wrong_choice_fails,
    load_case,
    parity_test,
)

from transformer.core import rotary as rotary_module
from transformer.core.rotary import RotaryEmbedding
from transformer.pretrained import load_pretrained

pytest.importorskip("transformers")

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
LINEAR = {"rope_type": "linear", "factor": 3.0}
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0}

LLAMA_CASES = {
    # name: (rope scaling, transformers config over the tiny shape, bfloat16 file)
    "llama3-gqa-untied": (LLAMA3, dict(num_key_value_heads=2, rope_theta=500000.0), False),
    "llama3-mqa-tied": (LLAMA3, dict(num_key_value_heads=1, tie_word_embeddings=True), False),
    "llama3-bf16": (LLAMA3, dict(num_key_value_heads=2), True),
    "yarn": (YARN, dict(num_key_value_heads=2), False),
    "linear": (LINEAR, dict(num_key_value_heads=4), False),
    "dynamic": (DYNAMIC, dict(num_key_value_heads=2), False),
}


def _llama3(folder: Path, name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    scaling, case, bf16 = LLAMA_CASES[name]
    shape = dict(case)  # the case is shared: every test that loads it reads its own rope_theta
    parameters = {**scaling, "rope_theta": shape.pop("rope_theta", 10000.0)}
    reference = family_folder(
        folder,
        "llama",
        seed=len(name),
        rope_parameters=parameters,
        dtype=torch.bfloat16 if bf16 else None,
        **shape,
    )
    checkpoint = load_pretrained(folder)
    assert dict(checkpoint.config.rope_scaling or {})["rope_type"] == scaling["rope_type"]
    return checkpoint.model, reference


test_llama3_equals_transformers = parity_test(_llama3, LLAMA_CASES)


def test_rope_scaling_ignored_fails(tmp_path: Path) -> None:
    """The scaled frequencies matter: plain RoPE tables in their place miss the reference."""
    reference = family_folder(
        tmp_path, "llama", seed=3, rope_parameters={**LLAMA3, "rope_theta": 10000.0}
    )
    model = load_pretrained(tmp_path).model

    @contextlib.contextmanager
    def plain_rope() -> Iterator[None]:
        tables = {}
        for module in model.modules():
            if isinstance(module, RotaryEmbedding):
                tables[module] = (module.cos, module.sin)
                n = module.cos.shape[0]
                module.cos, module.sin = rotary_module.rotary_cos_sin(
                    torch.arange(n), module.d_head, module.base
                )
        yield
        for module, (cos, sin) in tables.items():
            module.cos, module.sin = cos, sin

    check_wrong_choice_fails(model, reference, plain_rope)


def test_llama3_frequencies_against_the_formula_written_out() -> None:
    """Llama 3's scaling written out from its release (Meta's ``apply_scaling``): wavelengths
    beyond ``original / low_freq_factor`` divided by the factor, below ``original /
    high_freq_factor`` kept, the ones between blended."""
    import math

    d, base = 16, 500000.0
    scaling = {**LLAMA3, "original_max_position_embeddings": 8192}
    theirs = []
    for i in range(0, d, 2):
        freq = 1.0 / base ** (i / d)
        wavelen = 2 * math.pi / freq
        if wavelen < 8192 / 4.0:
            theirs.append(freq)
        elif wavelen > 8192 / 1.0:
            theirs.append(freq / 8.0)
        else:
            smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
            theirs.append((1 - smooth) * freq / 8.0 + smooth * freq)
    ours, factor = rotary_module.scaled_frequencies(d, base, scaling)
    assert factor == 1.0
    torch.testing.assert_close(ours, torch.tensor(theirs, dtype=torch.float32), rtol=1e-6, atol=0)


# -- Qwen3 ---------------------------------------------------------------------------------------

QWEN3_CASES = {
    "gqa-untied": dict(num_key_value_heads=2, head_dim=16),
    "mqa-tied": dict(num_key_value_heads=1, head_dim=16, tie_word_embeddings=True),
    # Qwen3's heads are not hidden_size / heads wide (128 at every size): here 24 × 4 ≠ 64.
    "wide-heads": dict(num_key_value_heads=2, head_dim=24),
    "bf16": dict(num_key_value_heads=2, head_dim=16),
}


def _qwen3(folder: Path, name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    shape = QWEN3_CASES[name]
    config, model, reference = load_case(folder, "qwen3", name, shape)
    assert config.qk_norm == "head" and config.d_head == shape["head_dim"]
    return model, reference


test_qwen3_equals_transformers = parity_test(_qwen3, QWEN3_CASES)


def test_qwen3_qk_norm_after_rotation_fails(tmp_path: Path, monkeypatch) -> None:
    """QK-norm normalises q and k *before* they are rotated; normalising the rotated ones
    instead (rotation keeps each pair's length, not each dimension's, so the learned gain
    lands on other numbers) misses the reference."""
    reference = family_folder(tmp_path, "qwen3", seed=5, head_dim=16)
    model = load_pretrained(tmp_path).model

    @contextlib.contextmanager
    def norm_after_rotation() -> Iterator[None]:
        with monkeypatch.context() as patch:
            original = RotaryEmbedding.forward
            for layer in model.decoder.layers:
                attention = layer.self_attention
                q_norm, k_norm = attention.q_norm, attention.k_norm
                patch.setattr(attention, "q_norm", None)
                patch.setattr(attention, "k_norm", None)
                norms = (q_norm, k_norm)

            def rotate_then_norm(self, q, k, positions=None, offset=0):
                q, k = original(self, q, k, positions, offset)
                return norms[0](q), norms[1](k)

            patch.setattr(RotaryEmbedding, "forward", rotate_then_norm)
            yield

    # Every layer's norms are the same module type; one layer's pair shows the rule.
    for layer in model.decoder.layers[1:]:
        layer.self_attention.q_norm.weight.data.copy_(
            model.decoder.layers[0].self_attention.q_norm.weight
        )
        layer.self_attention.k_norm.weight.data.copy_(
            model.decoder.layers[0].self_attention.k_norm.weight
        )
    for layer in reference.model.layers[1:]:
        layer.self_attn.q_norm.weight.data.copy_(reference.model.layers[0].self_attn.q_norm.weight)
        layer.self_attn.k_norm.weight.data.copy_(reference.model.layers[0].self_attn.k_norm.weight)
    check_wrong_choice_fails(model, reference, norm_after_rotation)


def test_qwen3_without_qk_norm_fails(tmp_path: Path, monkeypatch) -> None:
    reference = family_folder(tmp_path, "qwen3", seed=6, head_dim=16)
    model = load_pretrained(tmp_path).model

    @contextlib.contextmanager
    def no_qk_norm() -> Iterator[None]:
        with monkeypatch.context() as patch:
            for layer in model.decoder.layers:
                patch.setattr(layer.self_attention, "q_norm", None)
                patch.setattr(layer.self_attention, "k_norm", None)
            yield

    check_wrong_choice_fails(model, reference, no_qk_norm)
