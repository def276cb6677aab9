"""Gemma, Gemma 2 and Gemma 3 (text) against ``transformers``: tiny random models saved as
Hugging Face folders and loaded with ``load_pretrained``; every layer, every head, the logits,
greedy generation and the cache; and each of Gemma's choices shown to matter (the wrong one
misses the reference)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from family_checks import (
    PROMPT,
    attentions,
    check_changes_fail,
    loaded_family,
    parity_test,
    residuals,
)

from transformer.core.modern import RMSNorm
from transformer.core.rotary import RotaryEmbedding
from transformer.core.run import TRACE

pytest.importorskip("transformers")

SLIDING, FULL = "sliding_attention", "full_attention"
WINDOW = 5  # shorter than the 11-token prompt

GEMMA2 = dict(
    head_dim=16,
    query_pre_attn_scalar=24,  # the score scale 1/√24, not 1/√d_head
    sliding_window=WINDOW,
    layer_types=[SLIDING, FULL, SLIDING],
    attn_logit_softcapping=1.5,  # small caps and large weights: the caps bite
    final_logit_softcapping=2.0,
)
GEMMA3 = dict(
    head_dim=16,
    query_pre_attn_scalar=16,
    sliding_window=WINDOW,
    layer_types=[SLIDING, SLIDING, FULL],
    rope_parameters={
        SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
        FULL: {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
    },
)
CASES = {
    # name: (transformers family, its config over the tiny shape, matrices' scale, bfloat16)
    "gemma-gqa-tied": ("gemma", dict(head_dim=16), None, False),
    "gemma2-gqa-tied-capped": ("gemma2", GEMMA2, 0.25, False),
    "gemma2-mqa-untied": (
        "gemma2",
        GEMMA2 | dict(num_key_value_heads=1, tie_word_embeddings=False),
        0.25,
        False,
    ),
    "gemma2-bf16": ("gemma2", GEMMA2, 0.25, True),
    "gemma3-gqa-tied": ("gemma3_text", GEMMA3, None, False),
    "gemma3-wide-heads": (
        "gemma3_text",
        GEMMA3 | dict(head_dim=24, num_key_value_heads=1),
        None,
        False,
    ),
}


def build(folder: Path, name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    family, shape, matrices, bf16 = CASES[name]
    dtype = torch.bfloat16 if bf16 else None
    return loaded_family(folder, family, seed=len(name), matrices=matrices, dtype=dtype, **shape)


def _gemma(folder: Path, name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    model, reference = build(folder, name)
    config = model.config
    assert config.norm_offset == 1.0 and config.scale_embeddings
    assert config.post_sublayer_norm == (not name.startswith("gemma-"))
    return model, reference


test_gemma_equals_transformers = parity_test(_gemma, CASES)


@pytest.fixture
def gemma2(tmp_path: Path):
    return build(tmp_path, "gemma2-gqa-tied-capped")


@pytest.fixture
def gemma3(tmp_path: Path):
    return build(tmp_path, "gemma3-gqa-tied")


def test_the_caps_bite(gemma2) -> None:
    """The test model's scores and logits reach into the caps' curved part (else dropping a
    cap could not be told from keeping it)."""
    model, _ = gemma2
    trace = model(tgt=torch.tensor([PROMPT]), call=TRACE)
    scores = trace.decoder_layers[0].self_attention.scores
    assert scores[scores.isfinite()].abs().max() > 0.8 * model.config.attention_softcap
    assert trace.logits.abs().max() > 0.8 * model.config.final_logit_softcap


def test_local_and_global_layers_alternate_in_the_mask(gemma2) -> None:
    model, _ = gemma2
    trace = model(tgt=torch.tensor([PROMPT]), call=TRACE)
    n = len(PROMPT)
    band = torch.tensor([[0 <= i - j < WINDOW for j in range(n)] for i in range(n)])
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for layer, kind in zip(trace.decoder_layers, GEMMA2["layer_types"], strict=True):
        assert torch.equal(layer.self_attention.mask[0, 0], band if kind == SLIDING else causal)
    cache = model.new_cache()
    with torch.no_grad():
        model.decode(torch.tensor([PROMPT]), cache=cache)
    held = [layer.self_attention.keys.shape[2] for layer in cache.layers]
    assert held == [WINDOW - 1, n, WINDOW - 1]  # only the local layers' caches are bounded


def _qk_norms_dropped(model: torch.nn.Module) -> list[tuple[object, str, object]]:
    return [(a, name, None) for a in attentions(model) for name in ("q_norm", "k_norm")]


WRONG_CHOICES: dict[str, tuple[str, Callable[[Any], list[tuple[object, str, object]]]]] = {
    # name: (the case it is tried on, the attributes it sets: (target, attribute, value) each)
    "w instead of 1 + w": (
        "gemma3-gqa-tied",
        lambda model: [(n, "offset", 0.0) for n in model.modules() if isinstance(n, RMSNorm)],
    ),
    "embeddings unscaled": ("gemma3-gqa-tied", lambda model: [(model.tgt_embedding, "scale", 1.0)]),
    "attention soft cap dropped": (
        "gemma2-gqa-tied-capped",
        lambda model: [(a, "softcap", None) for a in attentions(model)],
    ),
    "final logit soft cap dropped": (
        "gemma2-gqa-tied-capped",
        lambda model: [(model.generator, "softcap", None)],
    ),
    # 1/√d_head instead of 1/√query_pre_attn_scalar
    "score scale by head width": (
        "gemma2-gqa-tied-capped",
        lambda model: [(a, "scale_dim", None) for a in attentions(model)],
    ),
    "post-sublayer norms dropped": (
        "gemma2-gqa-tied-capped",
        lambda model: [(r, "post_norm", None) for r in residuals(model)],
    ),
    "Gemma 3's QK-norm dropped": ("gemma3-gqa-tied", _qk_norms_dropped),
}
"""Each of Gemma's choices whose wrong form must miss the reference."""


@pytest.mark.parametrize("wrong", sorted(WRONG_CHOICES))
def test_the_wrong_choice_fails(wrong: str, tmp_path: Path, monkeypatch) -> None:
    case, changes = WRONG_CHOICES[wrong]
    model, reference = build(tmp_path, case)
    check_changes_fail(model, reference, monkeypatch, changes(model))


def test_one_rotary_base_for_local_and_global_layers_fails(gemma3, monkeypatch) -> None:
    """Gemma 3's local layers turn with base 10,000, the global ones with 1,000,000 (scaled);
    the global table in every layer misses the reference."""
    model, reference = gemma3
    layers = attentions(model)
    global_rotary = layers[-1].rotary
    assert isinstance(global_rotary, RotaryEmbedding) and layers[0].rotary is not global_rotary
    changes = [(a, "rotary", global_rotary) for a in layers]
    check_changes_fail(model, reference, monkeypatch, changes)


def test_a_generation_step_records_every_position_of_local_and_global_layers(gemma2) -> None:
    """Each step's last-query attention rows, one per layer (what Generate draws): a local
    layer's cache holds only its window, and the positions it let go get weight 0."""
    from transformer.generation import DecodingSession, DecodingSettings

    model, _ = gemma2
    settings = DecodingSettings(strategy="greedy", max_new_tokens=3, capture_attention=True)
    session = DecodingSession(model, PROMPT, settings, eos_id=None)
    for _ in session.run():
        pass
    for step, record in enumerate(session.records):
        rows = record.self_attention  # (L, H, positions so far)
        assert rows.shape[2] == len(PROMPT) + step
        for layer, kind in enumerate(GEMMA2["layer_types"]):
            far = rows[layer, :, : rows.shape[2] - WINDOW]
            assert (far == 0).all() if kind == SLIDING else (far > 0).all()
            assert abs(rows[layer].sum(-1) - 1).max() < 1e-5
