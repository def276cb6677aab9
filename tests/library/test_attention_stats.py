"""Per-head statistics and pattern names (transformer.lab.attention_stats) against direct
re-implementations written out here, and the reduced long pass against a full capture."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_transformer

from transformer.core.run import TRACE
from transformer.lab.attention_stats import (
    block_average,
    head_statistics,
    long_pass,
    pattern_name,
)


def _random_weights(heads: int, length: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    allowed = torch.ones(length, length, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    scores = torch.randn(heads, length, length).masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1), allowed


def _loops(weights: torch.Tensor, allowed: torch.Tensor) -> dict[str, list[float]]:
    """Each statistic written out with Python loops over heads, queries and keys."""
    heads, n = weights.shape[0], weights.shape[1]
    out: dict[str, list[float]] = {
        k: [] for k in ("entropy", "distance", "first", "previous", "same")
    }
    for h in range(heads):
        ent = dist = first = prev = same = 0.0
        for q in range(n):
            for k in range(n):
                w = float(weights[h, q, k])
                if w > 0:
                    ent -= w * math.log(w)
                dist += w * abs(q - k)
            first += float(weights[h, q, 0])
            same += float(weights[h, q, q])
            if q > 0:
                prev += float(weights[h, q, q - 1])
        out["entropy"].append(ent / n)
        out["distance"].append(dist / n)
        out["first"].append(first / n)
        out["previous"].append(prev / (n - 1))
        out["same"].append(same / n)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_statistics_equal_loops(causal: bool) -> None:
    weights, allowed = _random_weights(3, 9, causal)
    got = head_statistics(weights, allowed)
    expected = _loops(weights, allowed)
    for name, values in expected.items():
        assert torch.allclose(got[name], torch.tensor(values), atol=1e-5), name
    uniform = sum(math.log(int(allowed[q].sum())) for q in range(9)) / 9
    assert torch.allclose(got["uniform_entropy"], torch.full((3,), uniform), atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_mean_distance_at_length_equals_the_distance_table(causal: bool) -> None:
    """At 1,500 tokens (where float32 sums of ``q·Σw − Σw·k`` could cancel badly) the mean
    distance equals ``Σ w·|q − k|`` over a written-out table of distances, in float64."""
    torch.manual_seed(0)
    weights, allowed = _random_weights(2, 1500, causal)
    got = head_statistics(weights, allowed)["distance"]
    positions = torch.arange(1500, dtype=torch.float64)
    table = (positions[:, None] - positions[None, :]).abs()
    expected = (weights.double() * table).sum(-1).mean(-1)
    assert torch.allclose(got.double(), expected, rtol=1e-5, atol=1e-4)


def _named(weights: torch.Tensor, allowed: torch.Tensor) -> str:
    stats = head_statistics(weights[None], allowed)
    return pattern_name({k: float(v[0]) for k, v in stats.items()})


def test_pattern_names_of_constructed_heads() -> None:
    n = 12
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    sink = torch.zeros(n, n)
    sink[:, 0] = 1.0
    assert _named(sink, allowed) == "first-token"
    previous = torch.zeros(n, n)
    previous[0, 0] = 1.0
    for q in range(1, n):
        previous[q, q - 1] = 1.0
    assert _named(previous, allowed) == "previous-token"
    same = torch.eye(n)
    assert _named(same, allowed) == "same-token"
    # Local: spread over the three keys 1..3 back (none of them half the mass).
    local = torch.zeros(n, n)
    for q in range(n):
        keys = [k for k in range(q - 3, q + 1) if 1 <= k <= q] or [0]
        for k in keys:
            local[q, k] = 1.0 / len(keys)
    assert _named(local, allowed) == "local"
    # Broad: uniform over every key of a 40-token encoder input (mean distance about 13).
    everything = torch.ones(40, 40, dtype=torch.bool)
    assert _named(torch.full((40, 40), 1.0 / 40), everything) == "broad"
    # Mixed: all mass on one far key, not the first.
    far = torch.zeros(40, 40)
    far[:, 39] = 1.0
    assert _named(far, everything) == "mixed"


@pytest.mark.parametrize("architecture", ["decoder-only", "encoder-only", "encoder-decoder"])
def test_long_pass_stops_after_its_last_layer(architecture: str, monkeypatch) -> None:
    """Nothing after the last observed attention is computed: the generator (the ``(T, V)``
    logits) never runs, and every layer is still kept."""
    model = tiny_transformer(architecture=architecture).eval()

    def refuse(*_: object) -> None:
        raise AssertionError("the long pass computed logits it never draws")

    monkeypatch.setattr(model.generator, "forward", refuse)
    reduced = long_pass(model, torch.randint(4, 30, (9,)))
    expected = (
        model.config.n_decoder_layers
        if architecture == "decoder-only"
        else model.config.n_encoder_layers
    )
    assert len(reduced.layers) == expected


def test_block_average_equals_mean_of_blocks() -> None:
    matrix = torch.rand(10, 7)
    pooled, block = block_average(matrix, 4)
    assert block == 3 and pooled.shape == (4, 3)
    for i in range(4):
        for j in range(3):
            piece = matrix[3 * i : 3 * i + 3, 3 * j : 3 * j + 3]
            assert torch.isclose(pooled[i, j], piece.mean(), atol=1e-6)


@pytest.mark.parametrize(
    ("architecture", "shape"),
    [
        ("decoder-only", {}),
        ("decoder-only", {"n_kv_heads": 2, "positional": "rotary"}),
        ("encoder-only", {}),
    ],
)
def test_long_pass_keeps_what_a_full_capture_shows(architecture: str, shape: dict) -> None:
    model = tiny_transformer(architecture=architecture, **shape).eval()
    ids = torch.randint(4, 30, (11,))
    reduced = long_pass(model, ids)
    if architecture == "decoder-only":
        trace = model(tgt=ids[None], call=TRACE)
        records = trace.attention_records("decoder_self")
    else:
        trace = model(src=ids[None], call=TRACE)
        records = trace.attention_records("encoder_self")
    assert len(reduced.layers) == len(records)
    for layer, record in enumerate(records):
        full = record.weights[0]  # (H, T, T)
        for head in range(full.shape[0]):
            assert torch.allclose(reduced.head_weights(layer, head), full[head], atol=1e-6)
            window = reduced.head_weights(layer, head, first=4, count=3)
            assert torch.allclose(window, full[head, 4:7], atol=1e-6)
        assert torch.allclose(reduced.layers[layer].head_mean.float(), full.mean(0), atol=1e-3)
        # The kept statistics are those of the full weights, recomputed here by loops.
        expected = _loops(full, torch.ones(11, 11, dtype=torch.bool))
        for name in ("first", "previous", "same"):
            assert torch.allclose(
                reduced.statistic(name)[layer], torch.tensor(expected[name]), atol=1e-5
            )
