"""The Positions tab draws a rotary model's own rotation: its scaled frequencies (Llama 3.x,
YaRN, linear) and only the dimensions that turn (GPT-NeoX/Pythia, Phi), against
``transformers``' rotary embeddings; plain RoPE over every dimension is shown to miss."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from transformer import figures
from transformer.core.config import ModelConfig
from ui.tabs import positions

transformers = pytest.importorskip("transformers")

D_MODEL, N_HEADS, BASE = 64, 4, 10_000.0
D_HEAD = D_MODEL // N_HEADS
POSITIONS = list(range(0, 48, 3))

VARIANTS: dict[str, tuple[str, dict[str, Any], float]] = {
    # name: (transformers family, rope_parameters beyond rope_theta, partial_rotary_factor)
    "llama3": (
        "llama",
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
        1.0,
    ),
    "linear": ("llama", {"rope_type": "linear", "factor": 4.0}, 1.0),
    "yarn": (
        "llama",
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        1.0,
    ),
    "partial": ("gpt_neox", {"rope_type": "default"}, 0.25),
}


def _reference(variant: str, q: torch.Tensor, k: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """transformers' q·k over ``POSITIONS`` × ``POSITIONS`` and its frequencies ``inv_freq``."""
    family, rope, fraction = VARIANTS[variant]
    parameters = {"rope_theta": BASE, **rope}
    if family == "llama":
        from transformers.models.llama import modeling_llama as modeling

        config = transformers.LlamaConfig(
            hidden_size=D_MODEL,
            num_attention_heads=N_HEADS,
            max_position_embeddings=64,
            rope_parameters=parameters,
        )
        embedding = modeling.LlamaRotaryEmbedding(config)
    else:
        from transformers.models.gpt_neox import modeling_gpt_neox as modeling

        parameters["partial_rotary_factor"] = fraction
        config = transformers.GPTNeoXConfig(
            hidden_size=D_MODEL, num_attention_heads=N_HEADS, rope_parameters=parameters
        )
        embedding = modeling.GPTNeoXRotaryEmbedding(config)
    places = torch.tensor([POSITIONS])
    x = torch.zeros(1, len(POSITIONS), D_HEAD, dtype=torch.float64)
    cos, sin = embedding(x, places)  # (1, P, d_rotary), times the attention scaling
    d_rotary = cos.shape[-1]

    def placed(v: torch.Tensor) -> torch.Tensor:  # (1, 1, P, d_head): v at every position
        return v.reshape(1, 1, 1, -1).expand(1, 1, len(POSITIONS), D_HEAD)

    q_rot, k_rot = modeling.apply_rotary_pos_emb(
        placed(q)[..., :d_rotary], placed(k)[..., :d_rotary], cos.double(), sin.double()
    )
    q_all = torch.cat([q_rot, placed(q)[..., d_rotary:]], dim=-1)[0, 0]
    k_all = torch.cat([k_rot, placed(k)[..., d_rotary:]], dim=-1)[0, 0]
    return (q_all @ k_all.T).numpy(), embedding.inv_freq.numpy()


def _config(variant: str) -> ModelConfig:
    _family, rope, fraction = VARIANTS[variant]
    return ModelConfig(
        architecture="decoder-only",
        positional="rotary",
        d_model=D_MODEL,
        n_heads=N_HEADS,
        n_encoder_layers=0,
        norm="pre",
        norm_kind="rms",
        max_len=64,
        rope_base=BASE,
        rotary_fraction=fraction,
        rope_scaling=None if rope["rope_type"] == "default" else rope,
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_q_dot_k_is_the_models_own_and_plain_rope_misses(variant: str) -> None:
    generator = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, D_HEAD, generator=generator, dtype=torch.float64)
    expected, _ = _reference(variant, q, k)
    config = _config(variant)
    rope = {"rotary_dims": config.rotary_dims, "scaling": config.rope_scaling_dict}
    got = figures.rotary_scores(q, k, POSITIONS, POSITIONS, BASE, **rope)
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, atol=1e-5 * scale)
    plain = figures.rotary_scores(q, k, POSITIONS, POSITIONS, BASE)  # every dimension, unscaled
    assert float(np.abs(plain - expected).max()) > 1e-2 * scale


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_tab_draws_the_models_angles_and_says_what_differs(variant: str) -> None:
    config = _config(variant)
    generator = torch.Generator().manual_seed(3)
    _, inv_freq = _reference(variant, *torch.randn(2, D_HEAD, generator=generator))
    n = 12
    heatmap, _scores, caption = positions.rotary_positions("tiny", config, n, False)
    angles = np.asarray(heatmap.data[0].customdata, dtype=np.float64)
    assert angles.shape == (n, config.rotary_dims // 2)
    np.testing.assert_allclose(angles, np.arange(n)[:, None] * inv_freq[None, :], rtol=1e-6)
    if config.rotary_dims < config.d_head:
        assert f"first {config.rotary_dims} of each head's {config.d_head}" in caption
    if config.rope_scaling is not None:
        assert f"({VARIANTS[variant][1]['rope_type']}" in caption


def test_the_rotating_pair_turns_by_the_scaled_frequency() -> None:
    config = _config("llama3")
    generator = torch.Generator().manual_seed(4)
    q, k = torch.randn(2, D_HEAD, generator=generator)
    _, inv_freq = _reference("llama3", q.double(), k.double())
    pair = config.rotary_dims // 2 - 1  # the slowest pair: the one scaling changes most
    step = 1_000  # the slow pair turns 4e-5 rad a position: steps of 1,000 read in float32
    figure = figures.rotary_pair_figure(
        q,
        k,
        pair,
        range(0, 4 * step, step),
        BASE,
        rotary_dims=config.rotary_dims,
        scaling=config.rope_scaling_dict,
    )
    q_tips = next(t for t in figure.data if t.name == "q")
    turned = np.unwrap(np.arctan2(np.asarray(q_tips.y), np.asarray(q_tips.x)))
    np.testing.assert_allclose(np.diff(turned) / step, inv_freq[pair], rtol=1e-3)
    plain = BASE ** (-2 * pair / config.rotary_dims)  # the unscaled frequency: not what it turns
    assert abs(plain - inv_freq[pair]) > 0.5 * plain
