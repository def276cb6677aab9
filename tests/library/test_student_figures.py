"""What a student reads in the long-input figures: rollout with one token holding most of the
share (its share stated, the scale fitting the others), the head grid's pad-row bars named, the
window's edge legend out of the edges' way."""

from __future__ import annotations

import numpy as np
import torch

from transformer.figures.attention_scale import rollout_figure, window_figure


def test_rollout_states_the_first_token_s_share_and_scales_to_the_others() -> None:
    """At 1,801 tokens nearly all of rollout's mass is on token 0: drawn on a 0..1 scale, the
    other bars were invisible."""
    n = 50
    row = np.full(n, 0.08 / (n - 1))
    row[0] = 0.92
    row[7] = 0.004  # the largest of the others
    row /= row.sum()
    pieces = [f"w{i}" for i in range(n)]
    figure = rollout_figure(row, n - 1, pieces)
    low, high = figure.layout.yaxis.range
    others = np.delete(row, 0)
    assert low == 0 and others.max() <= high < 2 * others.max()  # the scale fits the others
    text = figure.layout.title.text + " ".join(a.text for a in figure.layout.annotations)
    assert f"{row[0]:.0%}" in text and "token 0" in text


def test_rollout_without_a_dominant_token_keeps_its_own_scale() -> None:
    row = np.linspace(1, 2, 10)
    figure = rollout_figure(row / row.sum(), 9, [f"w{i}" for i in range(10)])
    assert figure.layout.yaxis.range is None and not figure.layout.annotations


def test_the_window_s_edge_legend_sits_below_the_edges() -> None:
    weights = torch.rand(6, 12).softmax(-1)
    figure = window_figure(
        weights, 0, (0, 12), [f"w{i}" for i in range(12)], "window", top_k=3, full_weights=weights
    )
    legend = figure.layout.legend
    assert figure.layout.showlegend
    assert legend.y < 0 and legend.yanchor == "top"  # under the plot, not over its edges


def test_the_head_grid_names_its_pad_row_bars() -> None:
    from transformer.figures.attention import attention_grid

    layers, heads, n = 2, 2, 4
    weights = torch.rand(layers, heads, n, n).softmax(-1)
    masked = np.zeros((layers, n, n), dtype=bool)
    padded = np.array([False, False, False, True])
    labels = [f"{i}:w{i}" for i in range(n)]
    figure = attention_grid(weights, masked, labels, labels, padded_queries=padded, title="grid")
    assert "[PAD] query rows" in figure.layout.title.text
    plain = attention_grid(weights, masked, labels, labels, title="grid")
    assert "[PAD]" not in plain.layout.title.text
