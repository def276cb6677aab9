"""Figures of the methods researchers use to ask which part of a model made a prediction:
activation patching and head ablation (layers × positions or heads), direct logit attribution
(a bar per part), input attribution (a bar per input token), why a head attends (a heat map per
part of the score) and two models side by side (grouped attention, loss per group, next-token
distributions).

Layers and heads are numbered from 1, as everywhere in the app; rows are layers, top to bottom
in the order the pass runs them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from .common import (
    BASE_COLOR,
    HIGHLIGHT_COLOR,
    SIGNED_COLORSCALE,
    WEIGHTS_COLORSCALE,
    base_layout,
    category_axis,
    check_labels,
    figure,
    font_size,
    heatmap_height,
    panel_title,
    plot_text,
    to_numpy,
)

FIRST_COLOR = BASE_COLOR  # blue: the first model, and what pushes towards a token
SECOND_COLOR = HIGHLIGHT_COLOR  # orange: the second model, and what pushes against it


def _layer_labels(n: int) -> list[str]:
    return [f"layer {i + 1}" for i in range(n)]


def _signed_limit(z: np.ndarray) -> float:
    finite = np.abs(z[np.isfinite(z)])
    return float(finite.max()) if finite.size and finite.max() > 0 else 1.0


def layer_map_figure(
    values: Any,
    columns: Sequence[str],
    title: str,
    colour_title: str,
    large_font: bool = False,
    *,
    column_title: str = "position",
    fixed_range: tuple[float, float] | None = None,
) -> go.Figure:
    """A ``(layers, columns)`` heat map (patching or ablation): one row a layer from the first
    down, one column a position (labels ``"3:cat"``) or a head; a signed colour scale centred
    on 0 (``fixed_range`` pins its ends, e.g. ``(-1, 1)`` for a normalised metric)."""
    z = to_numpy(values)
    if z.ndim != 2:
        raise ValueError(f"expected (layers, columns) values, got shape {z.shape}")
    labels = check_labels(columns, z.shape[1], column_title)
    rows = _layer_labels(z.shape[0])
    limit = _signed_limit(z)
    low, high = fixed_range if fixed_range is not None else (-limit, limit)
    if fixed_range is not None:  # a value past the pinned ends widens them rather than saturate
        low, high = min(low, float(np.nanmin(z))), max(high, float(np.nanmax(z)))
        limit = max(abs(low), abs(high))
        low, high = -limit, limit
    trace = {
        "type": "heatmap",
        "z": z,
        "x": labels,
        "y": rows,
        "zmin": low,
        "zmax": high,
        "zmid": 0.0,
        "colorscale": SIGNED_COLORSCALE,
        "colorbar": {"title": {"text": plot_text(colour_title), "side": "right"}},
        "hovertemplate": f"%{{y}}, {column_title} %{{x}}<br>{colour_title}: %{{z:.3f}}"
        "<extra></extra>",
        "hoverongaps": False,
    }
    layout = base_layout(title, heatmap_height(z.shape[0], large_font), large_font)
    layout["xaxis"] = category_axis(column_title, labels, large_font)
    layout["yaxis"] = {
        **category_axis("", rows, large_font),
        "autorange": "reversed",
    }
    return figure([trace], layout)


def parts_bar_figure(
    names: Sequence[str],
    values: Any,
    title: str,
    value_title: str,
    large_font: bool = False,
    *,
    total: float | None = None,
    total_name: str = "the real logit",
) -> go.Figure:
    """One bar per named part (direct logit attribution: the embedding, every head, every
    MLP), in the model's order, positive bars blue and negative orange; with ``total``, a
    dashed line at the sum of the parts and a marker at ``total`` beside it."""
    v = to_numpy(values).reshape(-1)
    labels = check_labels(names, v.size, "part")
    colours = [FIRST_COLOR if x >= 0 else SECOND_COLOR for x in v]
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "x": labels,
            "y": v,
            "marker": {"color": colours},
            "hovertemplate": "%{x}: %{y:.3f}<extra></extra>",
            "name": "parts",
        }
    ]
    layout = base_layout(title, 380 if not large_font else 520, large_font, showlegend=False)
    layout["xaxis"] = {**category_axis("part", labels, large_font), "tickangle": -60}
    if v.size > 40:  # hundreds of heads: every label cannot be read, the hover names each
        layout["xaxis"]["showticklabels"] = False
        layout["xaxis"]["title"] = {"text": "part (hover a bar for its name)"}
    layout["yaxis"] = {"title": {"text": plot_text(value_title)}, "zeroline": True}
    if total is not None:
        annotation = f"sum of the parts {float(v.sum()):.3f} · {total_name} {total:.3f}"
        layout["annotations"] = [
            {
                "text": plot_text(annotation),
                "xref": "paper",
                "yref": "paper",
                "x": 0.0,
                "y": 1.0,
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": font_size(large_font) - 1},
            }
        ]
    return figure(data, layout)


def token_bars_figure(
    pieces: Sequence[str],
    scores: Any,
    title: str,
    value_title: str,
    large_font: bool = False,
) -> go.Figure:
    """One bar per input token (``pieces``, labelled ``"3:cat"``), signed colours."""
    v = to_numpy(scores).reshape(-1)
    labels = check_labels([f"{i}:{p}" for i, p in enumerate(pieces)], v.size, "token")
    colours = [FIRST_COLOR if x >= 0 else SECOND_COLOR for x in v]
    data = [
        {
            "type": "bar",
            "x": labels,
            "y": v,
            "marker": {"color": colours},
            "hovertemplate": "%{x}: %{y:.4f}<extra></extra>",
        }
    ]
    layout = base_layout(title, 360 if not large_font else 500, large_font, showlegend=False)
    layout["xaxis"] = {**category_axis("input token", labels, large_font), "tickangle": -45}
    layout["yaxis"] = {"title": {"text": plot_text(value_title)}, "zeroline": True}
    return figure(data, layout)


def score_parts_figure(
    parts: Mapping[str, Any],
    queries: Sequence[str],
    keys: Sequence[str],
    title: str,
    large_font: bool = False,
    *,
    columns: int = 2,
) -> go.Figure:
    """A heat map per part of the attention scores (``parts``: name → ``(queries, keys)``),
    ``columns`` to a row, one shared signed colour scale, so that a part's share of the score
    reads as its colour's strength; masked cells (``-inf`` or ``nan``) are left blank."""
    names = list(parts)
    if not names:
        raise ValueError("no parts to draw")
    matrices = [to_numpy(parts[name]).copy() for name in names]  # masked cells set to nan
    for matrix in matrices:
        matrix[~np.isfinite(matrix)] = np.nan
    n_q, n_k = matrices[0].shape
    q_labels = check_labels(queries, n_q, "query")
    k_labels = check_labels(keys, n_k, "key")
    columns = max(1, min(columns, len(names)))
    rows = math.ceil(len(names) / columns)
    gap_x, gap_y = 0.08, (0.16 if rows > 1 else 0.0)
    width = (1 - gap_x * (columns - 1)) / columns
    height_each = (1 - gap_y * (rows - 1)) / rows
    limit = max(_signed_limit(m) for m in matrices)
    data: list[dict[str, Any]] = []
    annotations = []
    layout = base_layout(
        title,
        rows * (heatmap_height(n_q, large_font, minimum=260, maximum=420) + 30),
        large_font,
        coloraxis={
            "colorscale": SIGNED_COLORSCALE,
            "cmin": -limit,
            "cmax": limit,
            "cmid": 0.0,
            "colorbar": {"title": {"text": "score part"}},
        },
    )
    layout["margin"]["t"] += 20
    for index, (name, matrix) in enumerate(zip(names, matrices, strict=True)):
        row, column = divmod(index, columns)
        x0 = column * (width + gap_x)
        y1 = 1 - row * (height_each + gap_y)
        suffix = "" if index == 0 else str(index + 1)
        data.append(_panel_heatmap(matrix, k_labels, q_labels, name, suffix))
        layout[f"xaxis{suffix}"] = {
            **category_axis("key" if row == rows - 1 else "", k_labels, large_font),
            "domain": [x0, min(1.0, x0 + width)],
            "anchor": f"y{suffix}",
            "showticklabels": row == rows - 1,
        }
        layout[f"yaxis{suffix}"] = {
            **category_axis("query" if column == 0 else "", q_labels, large_font),
            "domain": [max(0.0, y1 - height_each), min(1.0, y1)],
            "anchor": f"x{suffix}",
            "autorange": "reversed",
            "showticklabels": column == 0,
        }
        annotations.append(panel_title(name, [x0, x0 + width], large_font) | {"y": y1})
    layout["annotations"] = annotations
    return figure(data, layout)


def _panel_heatmap(
    z: Any, keys: list[str], queries: list[str], name: str, suffix: str
) -> dict[str, Any]:
    """One panel's ``(Tq, Tk)`` heat map ``z`` on the figure's shared colour axis, drawn on the
    axes ``x{suffix}``/``y{suffix}``, its hover naming the panel."""
    return {
        "type": "heatmap",
        "z": z,
        "x": keys,
        "y": queries,
        "coloraxis": "coloraxis",
        "xaxis": f"x{suffix}",
        "yaxis": f"y{suffix}",
        "hovertemplate": f"{plot_text(name)}<br>query %{{y}}, key %{{x}}: %{{z:.3f}}"
        "<extra></extra>",
        "hoverongaps": False,
    }


def paired_heatmaps_figure(
    left: Any,
    right: Any,
    labels: Sequence[str],
    names: tuple[str, str],
    title: str,
    large_font: bool = False,
) -> go.Figure:
    """Two ``(G, G)`` attention maps over the same groups side by side (query rows, key
    columns), one colour scale 0..1; empty cells (a group one model has no token in) blank."""
    z_left, z_right = to_numpy(left), to_numpy(right)
    n = z_left.shape[0]
    group_labels = check_labels(labels, n, "group")
    data, annotations = [], []
    layout = base_layout(
        title,
        heatmap_height(n, large_font, minimum=340, maximum=620) + 30,
        large_font,
        coloraxis={
            "colorscale": WEIGHTS_COLORSCALE,
            "cmin": 0.0,
            "cmax": 1.0,
            "colorbar": {"title": {"text": "weight"}},
        },
    )
    layout["margin"]["t"] += 20
    for index, (z, name) in enumerate(((z_left, names[0]), (z_right, names[1]))):
        suffix = "" if index == 0 else "2"
        domain = [0.0, 0.46] if index == 0 else [0.54, 1.0]
        data.append(_panel_heatmap(z, group_labels, group_labels, name, suffix))
        layout[f"xaxis{suffix}"] = {
            **category_axis("key", group_labels, large_font),
            "domain": domain,
            "anchor": f"y{suffix}",
        }
        layout[f"yaxis{suffix}"] = {
            **category_axis("query" if index == 0 else "", group_labels, large_font),
            "anchor": f"x{suffix}",
            "autorange": "reversed",
            "showticklabels": index == 0,
        }
        annotations.append(panel_title(name, domain, large_font))
    layout["annotations"] = annotations
    return figure(data, layout)


def paired_bars_figure(
    labels: Sequence[str],
    first: Any,
    second: Any,
    names: tuple[str, str],
    title: str,
    value_title: str,
    large_font: bool = False,
) -> go.Figure:
    """Two models' values per group, bars side by side (the loss of each group's characters)."""
    group_labels = check_labels(labels, len(labels), "group")
    data = [
        {
            "type": "bar",
            "x": group_labels,
            "y": to_numpy(values).reshape(-1),
            "name": plot_text(name),
            "marker": {"color": colour},
            "hovertemplate": f"{plot_text(name)}<br>%{{x}}: %{{y:.3f}}<extra></extra>",
        }
        for values, name, colour in (
            (first, names[0], FIRST_COLOR),
            (second, names[1], SECOND_COLOR),
        )
    ]
    layout = base_layout(
        title,
        380 if not large_font else 520,
        large_font,
        barmode="group",
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
    )
    layout["margin"]["t"] += 30
    layout["xaxis"] = {**category_axis("", group_labels, large_font), "tickangle": -45}
    layout["yaxis"] = {"title": {"text": plot_text(value_title)}}
    return figure(data, layout)


def next_tokens_figure(
    first: Sequence[tuple[str, float]],
    second: Sequence[tuple[str, float]],
    names: tuple[str, str],
    title: str,
    large_font: bool = False,
) -> go.Figure:
    """Each model's most likely next tokens (piece, probability), best at the top, two panels."""
    data, annotations = [], []
    rows = max(len(first), len(second), 1)
    layout = base_layout(
        title, 120 + 26 * rows if not large_font else 180 + 36 * rows, large_font, showlegend=False
    )
    layout["margin"]["t"] += 20
    for index, (tops, name, colour) in enumerate(
        ((first, names[0], FIRST_COLOR), (second, names[1], SECOND_COLOR))
    ):
        suffix = "" if index == 0 else "2"
        domain = [0.0, 0.42] if index == 0 else [0.58, 1.0]
        pieces = [f"{rank + 1}:{piece}" for rank, (piece, _) in enumerate(tops)]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "x": np.asarray([p for _, p in tops], dtype=np.float32),
                "y": [plot_text(p) for p in pieces],
                "marker": {"color": colour},
                "xaxis": f"x{suffix}",
                "yaxis": f"y{suffix}",
                "hovertemplate": "%{y}: %{x:.3f}<extra></extra>",
            }
        )
        layout[f"xaxis{suffix}"] = {
            "title": {"text": "probability"},
            "domain": domain,
            "anchor": f"y{suffix}",
            "range": [0, 1],
        }
        layout[f"yaxis{suffix}"] = {
            **category_axis("", [plot_text(p) for p in pieces], large_font),
            "anchor": f"x{suffix}",
            "autorange": "reversed",
        }
        annotations.append(panel_title(name, domain, large_font))
    layout["annotations"] = annotations
    return figure(data, layout)


__all__ = [
    "layer_map_figure",
    "next_tokens_figure",
    "paired_bars_figure",
    "paired_heatmaps_figure",
    "parts_bar_figure",
    "score_parts_figure",
    "token_bars_figure",
]
