"""Figures of attention at scale: the layers × heads overview coloured by one statistic, one
head downsampled, a query window with its top-k keys as edges, and rollout for one token.

Numeric axes (positions), not token categories: at 2,000 tokens a category axis is unreadable
and plotly merges repeated labels; the token of each position is in the hover text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from .common import (
    WEIGHTS_COLORSCALE,
    base_layout,
    font_size,
    plot_text,
    short_piece,
    to_numpy,
    token_labels,
)

PATTERN_MARKS = {
    "first-token": "F",
    "previous-token": "P",
    "same-token": "S",
    "local": "L",
    "broad": "B",
    "mixed": "·",
}


def head_overview_figure(
    values: object,
    patterns: Sequence[Sequence[str]],
    statistic: str,
    description: str,
    all_stats: Mapping[str, object] | None = None,
    *,
    selected: tuple[int, int] | None = None,
    large_font: bool = False,
) -> go.Figure:
    """``(L, H)`` ``values`` of one statistic as a layers × heads heatmap, each cell marked with
    its pattern's letter (:data:`PATTERN_MARKS`); ``all_stats`` ``{name: (L, H)}`` go into the
    hover; ``selected`` (layer, head), 0-based, is outlined."""
    grid = to_numpy(values)
    n_layers, n_heads = grid.shape
    marks = [[PATTERN_MARKS.get(p, "?") for p in row] for row in patterns]
    custom = np.array(patterns, dtype=object)
    hover = f"layer %{{y}}, head %{{x}}<br>{statistic}: %{{z:.3f}}<br>%{{customdata}}"
    if all_stats:
        names = list(all_stats)
        stacked = np.stack([to_numpy(all_stats[n]) for n in names], axis=-1)
        labels = [
            [
                f"{patterns[i][j]}<br>"
                + "<br>".join(f"{n}: {stacked[i, j, k]:.3f}" for k, n in enumerate(names))
                for j in range(n_heads)
            ]
            for i in range(n_layers)
        ]
        custom = np.array(labels, dtype=object)
    heat = go.Heatmap(
        z=grid,
        x=np.arange(1, n_heads + 1),
        y=np.arange(1, n_layers + 1),
        text=marks,
        texttemplate="%{text}",
        textfont={"size": font_size(large_font) - 2},
        customdata=custom,
        hovertemplate=hover + "<extra></extra>",
        colorscale=WEIGHTS_COLORSCALE,
        colorbar={"title": {"text": statistic}},
    )
    shapes = []
    if selected is not None:
        layer, head = selected
        shapes.append(
            {
                "type": "rect",
                "x0": head + 0.5,
                "x1": head + 1.5,
                "y0": layer + 0.5,
                "y1": layer + 1.5,
                "line": {"color": "#d62728", "width": 3},
            }
        )
    height = min(1100, max(320, 140 + (28 if large_font else 20) * n_layers))
    layout = base_layout(
        f"Every head: {description}",
        height,
        large_font,
        xaxis={"title": {"text": "head"}, "dtick": 1},
        yaxis={"title": {"text": "layer"}, "dtick": 1 if n_layers <= 16 else 2},
        shapes=shapes,
    )
    return go.Figure(heat, layout)


def downsampled_head_figure(
    pooled: object,
    block: int,
    length: int,
    title: str,
    *,
    window: tuple[int, int] | None = None,
    large_font: bool = False,
) -> go.Figure:
    """One head's ``(Tq/b, Tk/b)`` block-averaged weights over ``length`` tokens (``block`` =
    b), the query ``window`` (first, count) outlined."""
    grid = to_numpy(pooled)
    centres_q = np.minimum(np.arange(grid.shape[0]) * block + (block - 1) / 2, length - 1)
    centres_k = np.minimum(np.arange(grid.shape[1]) * block + (block - 1) / 2, length - 1)
    heat = go.Heatmap(
        z=grid,
        x=centres_k.astype(np.float32),
        y=centres_q.astype(np.float32),
        colorscale=WEIGHTS_COLORSCALE,
        hovertemplate="queries ≈ %{y:.0f}, keys ≈ %{x:.0f}<br>mean weight %{z:.4f}<extra></extra>",
        colorbar={"title": {"text": "mean weight"}},
    )
    shapes = []
    if window is not None:
        first, count = window
        shapes.append(
            {
                "type": "rect",
                "x0": -0.5,
                "x1": length - 0.5,
                "y0": first - 0.5,
                "y1": first + count - 0.5,
                "line": {"color": "#d62728", "width": 2},
            }
        )
    note = f" (each cell the mean of {block} × {block} weights)" if block > 1 else ""
    layout = base_layout(
        title + note,
        520 if large_font else 440,
        large_font,
        xaxis={"title": {"text": "key position"}},
        yaxis={"title": {"text": "query position"}, "autorange": "reversed"},
        shapes=shapes,
    )
    return go.Figure(heat, layout)


# Edges binned by weight: one trace per bin (one line width and opacity each).
_EDGE_BINS = (
    (0.5, 1.01, 4.0, 0.9),
    (0.2, 0.5, 2.5, 0.7),
    (0.05, 0.2, 1.5, 0.5),
    (0, 0.05, 1, 0.25),
)


def _top_key_edges(full: np.ndarray, first: int, top_k: int) -> list[go.Scatter]:
    """The top-``top_k`` keys of each query (rows of ``full`` ``(n, T)``, from query
    ``first``) as edges query → key, one trace per weight bin that has any."""
    n = full.shape[0]
    k = min(top_k, full.shape[1])
    order = np.argsort(-full, axis=1)[:, :k]  # (n, k)
    traces = []
    for low, high, width, opacity in _EDGE_BINS:
        xs: list[float | None] = []
        ys: list[float | None] = []
        for row in range(n):
            for key in order[row]:
                w = float(full[row, key])
                if low <= w < high:
                    xs += [0.0, 1.0, None]
                    ys += [float(first + row), float(key), None]
        if xs:
            traces.append(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={"width": width, "color": "#1f77b4"},
                    opacity=opacity,
                    name=f"weight {low:g}–{min(high, 1):g}",
                    hoverinfo="skip",
                    xaxis="x2",
                    yaxis="y2",
                )
            )
    return traces


def _query_ticks(queries: list[int], pieces: Sequence[str]) -> dict[str, Any]:
    """Each query row labelled by its position and piece."""
    return {
        "tickvals": queries,
        "ticktext": [plot_text(f"{q}:{short_piece(pieces[q])}") for q in queries],
    }


def window_figure(
    weights: object,
    first: int,
    key_range: tuple[int, int],
    pieces: Sequence[str],
    title: str,
    *,
    top_k: int = 0,
    full_weights: object | None = None,
    large_font: bool = False,
) -> go.Figure:
    """Queries ``first .. first+n−1`` of one head: their ``(n, K)`` ``weights`` over keys
    ``key_range`` = (start, stop) as a heatmap beside the top-``top_k`` keys of each query
    (taken from ``full_weights`` ``(n, T)``, every key) drawn as edges query → key."""
    grid = to_numpy(weights)
    n = grid.shape[0]
    start, stop = key_range
    queries = np.arange(first, first + n)
    keys = np.arange(start, stop)
    # No text per cell (128 × 384 strings would ship megabytes): the query rows are labelled.
    heat = go.Heatmap(
        z=grid,
        x=keys,
        y=queries,
        colorscale=WEIGHTS_COLORSCALE,
        zmin=0,
        hovertemplate="query %{y} → key %{x}<br>weight %{z:.4f}<extra></extra>",
        colorbar={"title": {"text": "weight"}, "x": 0.44},
        xaxis="x",
        yaxis="y",
    )
    traces: list[go.BaseTraceType] = [heat]
    if top_k and full_weights is not None:
        traces += _top_key_edges(to_numpy(full_weights), first, top_k)
    layout = base_layout(
        title,
        560 if large_font else 480,
        large_font,
        xaxis={"title": {"text": "key position"}, "domain": [0, 0.42]},
        yaxis={
            "title": {"text": "query"},
            "autorange": "reversed",
            **(_query_ticks(queries.tolist(), pieces) if n <= 40 else {}),
            "automargin": True,
        },
        xaxis2={
            "domain": [0.55, 1.0],
            "tickvals": [0, 1],
            "ticktext": ["query", "key"],
            "range": [-0.1, 1.1],
            "anchor": "y2",
        },
        yaxis2={
            "title": {"text": f"position (top-{top_k} keys of each query)"},
            "autorange": "reversed",
            "anchor": "x2",
        },
        showlegend=bool(top_k),
        # Under the edges, not over them (at the top right it hid the first queries' edges).
        legend={
            "orientation": "h",
            "x": 0.55,
            "xanchor": "left",
            "y": -0.1,
            "yanchor": "top",
            "title": {"text": "edge width:"},
        },
    )
    layout["margin"]["b"] = max(layout["margin"].get("b", 0), 110 if large_font else 95)
    return go.Figure(traces, layout)


def rollout_figure(
    row: object, token: int, pieces: Sequence[str], *, large_font: bool = False
) -> go.Figure:
    """Rollout of one token: a bar per input position, its ``(T,)`` share in what token
    ``token``'s final representation draws on."""
    values = to_numpy(row)
    positions = np.arange(values.shape[0])
    labels = [plot_text(label) for label in token_labels(pieces)]
    # One position holding most of the share (a long text's first token, an attention sink)
    # flattens every other bar to nothing: its share is stated and cut off, and the scale
    # fits the others.
    top = int(np.argmax(values)) if values.size else 0
    others = np.delete(values, top) if values.size > 1 else values[:0]
    rest = float(others.max()) if others.size else 0.0
    dominant = values.size > 1 and values[top] >= 0.5 and values[top] > 5 * rest and rest > 0
    colors = ["#1f77b4"] * values.shape[0]
    if dominant:
        colors[top] = "#9e9e9e"
    bar = go.Bar(
        x=positions,
        y=values,
        customdata=labels,
        hovertemplate="%{customdata}<br>rollout %{y:.4f}<extra></extra>",
        marker={"color": colors},
    )
    title = (
        f"Attention rollout of token {token}:{short_piece(pieces[token])!r}: "
        "which input tokens it draws on"
    )
    yaxis: dict[str, object] = {"title": {"text": "share (sums to 1)"}}
    annotations = []
    if dominant:
        share = f"{values[top]:.0%}"
        title += f" · token {top} holds {share}; the scale fits the others"
        yaxis["range"] = [0, rest * 1.25]
        annotations.append(
            {
                "x": top,
                "y": rest * 1.18,
                "text": plot_text(f"{token_labels(pieces)[top]}: {share} (bar cut)"),
                "showarrow": False,
                "xanchor": "left" if top < values.shape[0] / 2 else "right",
                "font": {"color": "#616161"},
            }
        )
    layout = base_layout(
        title,
        380 if large_font else 320,
        large_font,
        xaxis={"title": {"text": "input position"}},
        yaxis=yaxis,
        bargap=0,
        annotations=annotations,
    )
    return go.Figure(bar, layout)
