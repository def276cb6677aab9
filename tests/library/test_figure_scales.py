"""Colour scales that show the data, and one unit for attention weights.

A long input spreads attention thin (403 tokens: most weights near 1/403), a learned position
table has one position with a huge norm, and a few embedding dimensions of MiniLM are outliers:
a scale set by the largest value paints all the rest one colour. The checks below measure what
a student sees, the spread of the cells over the colour range, against numpy's percentiles.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from transformer.core.embeddings import sinusoidal_table
from transformer.core.trace import AttentionRecord
from transformer.figures import (
    attention_grid,
    attention_heatmap,
    embedding_sum_figure,
    masks_figure,
    positional_similarity,
    positional_similarity_figure,
    scores_and_weights_figure,
)
from transformer.figures.attention import weights_beside_figure

LONG = 403  # a long input that a student pasted


def colour_spread(z: np.ndarray, low: float, high: float) -> float:
    """How much of the colour range the middle 90 % of the finite cells cover (0..1)."""
    values = np.asarray(z, np.float64)
    values = values[np.isfinite(values)]
    position = np.clip((values - low) / (high - low), 0.0, 1.0)
    return float(np.percentile(position, 95) - np.percentile(position, 5))


def long_attention(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(1, 2, T, T)`` scores and weights of a long input: thin attention, three sharp rows."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(1, 2, LONG, LONG, generator=g)
    scores[..., :3, 0] = 50.0  # three queries put all their weight on the first key
    return scores, torch.softmax(scores, -1)


def test_long_input_weights_spread_over_the_colour_range() -> None:
    scores, weights = long_attention()
    mask = torch.ones(1, 1, LONG, LONG, dtype=torch.bool)
    record = AttentionRecord("encoder_self", 0, scores, weights, mask)
    figure = scores_and_weights_figure(record, 0, 1)
    axis = figure.layout.coloraxis2
    w = weights[0, 1].numpy()
    assert colour_spread(w, axis.cmin, axis.cmax) > 0.25, (axis.cmin, axis.cmax)
    assert (w > axis.cmax).mean() <= 0.011  # only the outliers saturate
    assert "99th" in axis.colorbar.title.text  # the clipped scale is stated on the colour bar
    single = attention_heatmap(w)
    trace = single.data[0]
    assert colour_spread(w, trace.zmin, trace.zmax) > 0.25
    assert "99th" in trace.colorbar.title.text


def test_short_input_weights_keep_the_zero_to_one_scale() -> None:
    g = torch.Generator().manual_seed(1)
    scores = 3 * torch.randn(1, 1, 7, 7, generator=g)
    record = AttentionRecord(
        "encoder_self", 0, scores, torch.softmax(scores, -1), torch.ones(1, 1, 7, 7, dtype=bool)
    )
    axis = scores_and_weights_figure(record, 0, 0).layout.coloraxis2
    assert (axis.cmin, axis.cmax) == (0.0, 1.0) and axis.colorbar.title.text == "weight"


def test_long_input_grid_spreads_over_the_colour_range() -> None:
    _, weights = long_attention(2)
    figure = attention_grid(weights.expand(2, 2, LONG, LONG))  # 2 layers × 2 heads, pooled
    axis = figure.layout.coloraxis
    z = np.asarray(figure.data[0].z, np.float64)
    rows = figure.data[0].y
    tile = z[: sum(1 for r in rows if r.startswith("layer 1 · query")), :]
    tile = tile[:, : sum(1 for c in figure.data[0].x if c.startswith("head 1 · key"))]
    assert colour_spread(tile, axis.cmin, axis.cmax) > 0.25, (axis.cmin, axis.cmax)
    assert "99th" in axis.colorbar.title.text
    largest = float(axis.colorbar.title.text.split("max ")[1].split(")")[0])
    assert largest == pytest.approx(z.max() / 1000, abs=1e-3)  # a weight, not thousandths


def test_long_masks_have_no_gaps_that_hide_the_colour() -> None:
    real = np.ones(LONG, bool)
    real[-40:] = False
    causal = np.tril(np.ones((LONG, LONG), bool))
    figure = masks_figure(real, causal=causal)
    for trace in figure.data:
        assert not trace.xgap and not trace.ygap  # 1-px gaps at 1 px a cell: nothing left
    small = masks_figure(np.ones(7, bool), causal=np.tril(np.ones((7, 7), bool)))
    assert all(t.xgap == 1 and t.ygap == 1 for t in small.data)  # small maps keep their grid


def test_learned_position_dot_similarity_is_not_one_flat_colour() -> None:
    table = sinusoidal_table(256, 64).numpy()  # smooth, like a learned table
    table[0] *= 40  # one position with a huge norm (MiniLM's first): 0.8 % of the cells
    figure = positional_similarity_figure(table, "dot")
    trace = figure.data[0]
    z = table.astype(np.float64) @ table.T.astype(np.float64)  # independent of the builder
    np.testing.assert_allclose(positional_similarity(table, "dot"), z, rtol=1e-4, atol=1e-5)
    # Off the diagonal most dot products are small: 0.2 of the range (1e-4 with the outlier's)
    assert colour_spread(z, trace.zmin, trace.zmax) > 0.15, (trace.zmin, trace.zmax)
    assert trace.zmax == pytest.approx(np.percentile(np.abs(z), 99), rel=1e-4)
    assert "99th" in trace.colorbar.title.text


def test_embedding_panels_with_outlier_dimensions_are_not_near_white() -> None:
    rng = np.random.default_rng(4)
    emb = rng.normal(size=(40, 384)).astype(np.float32) * 0.05  # MiniLM's width
    emb[:, [5, 77]] = 8.0  # a few outlier dimensions
    pe = rng.normal(size=(40, 384)).astype(np.float32) * 0.05
    figure = embedding_sum_figure(emb, pe)
    axis = figure.layout.coloraxis
    rest = np.delete(emb, [5, 77], axis=1)
    assert colour_spread(rest, axis.cmin, axis.cmax) > 0.25, (axis.cmin, axis.cmax)
    assert "99th" in axis.colorbar.title.text


def weight_bars(figure: go.Figure) -> list[tuple[dict, float]]:
    """Every weight colour bar of a figure with the unit its data are in (z per weight 1)."""
    found = []
    for name in ("coloraxis", "coloraxis2"):
        axis = figure.layout[name] if name in figure.layout.to_plotly_json() else None
        title = axis.colorbar.title.text if axis is not None else None
        if title and title.startswith("weight"):
            found.append((axis, 1000.0 if axis.cmax and axis.cmax > 1 else 1.0))
    for trace in figure.data:
        bar = getattr(trace, "colorbar", None)
        if bar is not None and bar.title.text and bar.title.text.startswith("weight"):
            found.append((trace, 1.0))
    return found


def test_every_weight_colour_bar_reads_in_one_unit() -> None:
    """Once 0..1 in one head and ‰ in the grid and the snapshots: now one unit, weights 0..1."""
    scores, _ = long_attention(5)
    short_scores, short_weights = scores[..., :9, :9], torch.softmax(scores[..., :9, :9], -1)
    mask = torch.ones(1, 1, 9, 9, dtype=torch.bool)
    record = AttentionRecord("encoder_self", 0, short_scores, short_weights, mask)
    figures = [
        scores_and_weights_figure(record, 0, 0),
        attention_heatmap(short_weights[0, 0]),
        weights_beside_figure(short_weights[0, 0], short_weights[0, 1]),
        attention_grid(short_weights.expand(3, 2, 9, 9)),  # the Attention tab's and snapshots'
    ]
    for figure in figures:
        bars = weight_bars(figure)
        assert bars, figure.layout.title.text
        for bar, unit in bars:
            assert "‰" not in bar.colorbar.title.text
            ticks = [float(t) for t in bar.colorbar.ticktext]
            assert ticks[0] == 0 and ticks[-1] == pytest.approx(1.0)  # read as weights 0..1
            np.testing.assert_allclose(np.asarray(bar.colorbar.tickvals) / unit, ticks)
        for trace in figure.data:
            assert "‰" not in (trace.hovertemplate or "")
    grid = figures[-1]
    z = np.asarray(grid.data[0].z, np.float64)
    np.testing.assert_allclose(z[:9, :9] / 1000, short_weights[0, 0].numpy(), atol=6e-4)
