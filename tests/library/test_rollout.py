"""Attention rollout (Abnar & Zuidema, 2020) against a direct re-implementation written out
here: per layer ``0.5 · mean over heads + 0.5 · I``, rows renormalised, multiplied layer by
layer."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_transformer

from transformer.core.run import TRACE
from transformer.lab.attention_stats import long_pass, rollout, rollout_row


def _reference(weights: list[torch.Tensor]) -> torch.Tensor:
    """Rollout of ``(H, T, T)`` per-layer weights, element by element with loops."""
    n = weights[0].shape[-1]
    result = torch.eye(n, dtype=torch.float64)
    for layer in weights:
        mean = layer.double().mean(0)
        mixed = torch.zeros(n, n, dtype=torch.float64)
        for i in range(n):
            row = [0.5 * float(mean[i, j]) + (0.5 if i == j else 0.0) for j in range(n)]
            total = sum(row)
            for j in range(n):
                mixed[i, j] = row[j] / total
        product = torch.zeros(n, n, dtype=torch.float64)
        for i in range(n):
            for j in range(n):
                product[i, j] = sum(mixed[i, m] * result[m, j] for m in range(n))
        result = product
    return result


@pytest.mark.parametrize("causal", [False, True])
def test_rollout_equals_reference(causal: bool) -> None:
    n, heads, layers = 7, 3, 4
    weights = []
    for _ in range(layers):
        scores = torch.randn(heads, n, n)
        if causal:
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        weights.append(scores.softmax(-1))
    means = torch.stack([w.mean(0) for w in weights])
    got = rollout(means)
    expected = _reference(weights)
    assert torch.allclose(got.double(), expected, atol=1e-5)
    assert torch.allclose(got.sum(-1), torch.ones(n), atol=1e-5)
    if causal:
        assert bool((got.triu(1) == 0).all())
    for token in (0, 3, n - 1):
        assert torch.allclose(rollout_row(means, token), got[token], atol=1e-5)


@pytest.mark.parametrize("architecture", ["decoder-only", "encoder-only"])
def test_rollout_of_a_long_pass_equals_reference_on_full_weights(architecture: str) -> None:
    model = tiny_transformer(architecture=architecture).eval()
    ids = torch.randint(4, 30, (9,))
    reduced = long_pass(model, ids)
    if architecture == "decoder-only":
        records = model(tgt=ids[None], call=TRACE).attention_records("decoder_self")
    else:
        records = model(src=ids[None], call=TRACE).attention_records("encoder_self")
    expected = _reference([r.weights[0] for r in records])
    for token in range(9):
        # The pass keeps the head-means in float16: rollout agrees to about 1e-3.
        assert torch.allclose(reduced.rollout_row(token).double(), expected[token], atol=2e-3)
    if architecture == "decoder-only":
        assert bool((reduced.rollout_row(2)[3:] == 0).all())
