"""Embeddings and positions: the sinusoidal table, its curves and similarity, and what enters
the first layer (token embedding × √d_model + positional encoding) for one sentence.

Tables are ``(positions, d_model)``: rows are positions, columns dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go

from .common import (
    BASE_COLOR,
    GREEN,
    HIGHLIGHT_COLOR,
    MUTED_COLOR,
    SIGNED_COLORSCALE,
    base_layout,
    category_axis,
    check_labels,
    heatmap_height,
    panel_domains,
    panel_title,
    to_numpy,
)


def _table(table: Any) -> np.ndarray:
    t = to_numpy(table)
    if t.ndim != 2:
        raise ValueError(f"expected a (positions, d_model) table, got shape {t.shape}")
    return t


def positional_encoding_figure(
    table: Any,
    *,
    title: str = "Sinusoidal positional encoding PE[pos, dim]",
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """The positional-encoding table as a heatmap: positions down, dimensions across.

    Args:
        table: ``(T, d_model)`` encodings, e.g. ``sinusoidal_table(T, d_model)``. Even dimensions
            are sines, odd ones cosines; wavelengths grow from left to right.
    """
    z = _table(table)
    trace = go.Heatmap(
        z=z,
        colorscale=SIGNED_COLORSCALE,
        zmin=-1.0,
        zmax=1.0,
        colorbar={"title": {"text": "value"}},
        hovertemplate="position %{y}<br>dimension %{x}<br>PE %{z:.3f}<extra></extra>",
    )
    layout = base_layout(
        title,
        height or heatmap_height(min(z.shape[0], 40), large_font),
        large_font,
        xaxis={"title": {"text": "dimension"}, "showgrid": False, "zeroline": False},
        yaxis={
            "title": {"text": "position"},
            "autorange": "reversed",
            "showgrid": False,
            "zeroline": False,
        },
    )
    return go.Figure(trace, layout)


def _dimension_name(dim: int, d_model: int) -> str:
    i = dim // 2
    wavelength = 2 * np.pi * 10000 ** (2 * i / d_model)
    return f"dim {dim} ({'sin' if dim % 2 == 0 else 'cos'}, wavelength {wavelength:.3g})"


def positional_curves_figure(
    table: Any,
    dims: Sequence[int] = (0, 1, 4, 10),
    *,
    title: str = "Positional encoding: chosen dimensions over position",
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """Chosen dimensions of the encoding as curves over position.

    Args:
        table: ``(T, d_model)`` sinusoidal encodings (``sinusoidal_table``).
        dims: dimension indices to draw; the legend names each one's sin/cos and wavelength
            (``2π · 10000^(2i/d_model)`` for dimensions ``2i`` and ``2i+1``).
    """
    t = _table(table)
    n_positions, d_model = t.shape
    bad = [d for d in dims if not 0 <= d < d_model]
    if bad:
        raise ValueError(f"dimensions {bad} are outside 0..{d_model - 1}")
    positions = np.arange(n_positions, dtype=np.int32)
    traces = [
        go.Scatter(
            x=positions,
            y=t[:, d],
            mode="lines",
            name=_dimension_name(d, d_model),
            hovertemplate=f"dim {d}<br>position %{{x}}<br>PE %{{y:.3f}}<extra></extra>",
        )
        for d in dims
    ]
    layout = base_layout(
        title,
        height or (520 if large_font else 420),
        large_font,
        xaxis={"title": {"text": "position"}, "showgrid": True, "gridcolor": "#eee"},
        yaxis={"title": {"text": "PE value"}, "range": [-1.1, 1.1], "gridcolor": "#eee"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
    )
    layout["margin"]["t"] += 30
    return go.Figure(traces, layout)


def positional_similarity(table: Any, metric: Literal["cosine", "dot"] = "cosine") -> np.ndarray:
    """``(T, T)`` similarity between the encodings of every pair of positions.

    Args:
        table: ``(T, d_model)`` encodings.
        metric: ``"dot"`` for ``PE·PEᵀ`` or ``"cosine"`` for the dot product of unit vectors.
    """
    t = _table(table).astype(np.float64)
    if metric == "cosine":
        norms = np.linalg.norm(t, axis=1, keepdims=True)
        t = t / np.where(norms == 0, 1.0, norms)
    elif metric != "dot":
        raise ValueError(f"metric must be 'cosine' or 'dot', got {metric!r}")
    return (t @ t.T).astype(np.float32)


def positional_similarity_figure(
    table: Any,
    metric: Literal["cosine", "dot"] = "cosine",
    *,
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """Similarity of every position's encoding to every other's: high near the diagonal and
    depending only on the distance between positions.

    Args:
        table: ``(T, d_model)`` encodings.
        metric: ``"cosine"`` (range -1..1) or ``"dot"`` (``PE·PEᵀ``, diagonal = d_model/2).
    """
    z = positional_similarity(table, metric)
    half = float(np.abs(z).max()) or 1.0
    trace = go.Heatmap(
        z=z,
        colorscale=SIGNED_COLORSCALE,
        zmin=-half,
        zmax=half,
        colorbar={"title": {"text": metric}},
        hovertemplate=f"position %{{y}} · position %{{x}}<br>{metric} %{{z:.3f}}<extra></extra>",
    )
    axis = {"showgrid": False, "zeroline": False}
    layout = base_layout(
        f"Positional encodings compared: {'cosine similarity' if metric == 'cosine' else 'dot product PE·PEᵀ'}",
        height or (620 if large_font else 520),
        large_font,
        xaxis={**axis, "title": {"text": "position"}, "constrain": "domain"},
        yaxis={
            **axis,
            "title": {"text": "position"},
            "autorange": "reversed",
            "scaleanchor": "x",
        },
    )
    return go.Figure(trace, layout)


def _embedding_inputs(token_embedding: Any, positional: Any) -> tuple[np.ndarray, np.ndarray]:
    emb, pe = to_numpy(token_embedding), to_numpy(positional)
    if emb.ndim != 2 or emb.shape != pe.shape:
        raise ValueError(
            f"token_embedding {emb.shape} and positional {pe.shape} must both be (T, d_model)"
        )
    return emb, pe


def embedding_sum_figure(
    token_embedding: Any,
    positional: Any,
    labels: Sequence[str] | None = None,
    *,
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """Token embedding, positional encoding and their sum (what enters the first layer), side by
    side on one shared colour scale, so their magnitudes compare honestly.

    Args:
        token_embedding: ``(T, d_model)`` token embeddings already × √d_model
            (``StackInput.token_embedding[b]``).
        positional: ``(T, d_model)`` encodings (``StackInput.positional``).
        labels: ``T`` unique token labels (see :func:`token_labels`).
    """
    emb, pe = _embedding_inputs(token_embedding, positional)
    total = emb + pe
    tokens = check_labels(labels, emb.shape[0], "token")
    panels = {
        "token embedding × √d_model": emb,
        "+ positional encoding": pe,
        "= input to layer 0": total,
    }
    domains = panel_domains(3, gap=0.03)
    half = float(max(np.abs(a).max() for a in panels.values())) or 1.0
    traces, axes = [], {}
    for i, (name, z) in enumerate(panels.items()):
        suffix = "" if i == 0 else str(i + 1)
        traces.append(
            go.Heatmap(
                z=z,
                y=tokens,
                xaxis=f"x{suffix}",
                yaxis=f"y{suffix}",
                coloraxis="coloraxis",
                hovertemplate=f"{name}<br>token %{{y}}<br>dim %{{x}}<br>%{{z:.3f}}<extra></extra>",
            )
        )
        axes[f"xaxis{suffix}"] = {
            "title": {"text": "dimension"},
            "domain": domains[i],
            "anchor": f"y{suffix}",
            "showgrid": False,
            "zeroline": False,
        }
        y_axis = {**category_axis("token", tokens, large_font), "autorange": "reversed"}
        if i:
            y_axis.update(title=None, showticklabels=False, matches="y", anchor=f"x{suffix}")
        axes[f"yaxis{suffix}"] = y_axis
    layout = base_layout(
        "What enters the first layer: embedding + position",
        height or heatmap_height(emb.shape[0], large_font, maximum=700) + 40,
        large_font,
        coloraxis={"colorscale": SIGNED_COLORSCALE, "cmin": -half, "cmax": half},
        annotations=[
            panel_title(name, domain, large_font)
            for name, domain in zip(panels, domains, strict=True)
        ],
        **axes,
    )
    layout["margin"]["t"] += 30
    return go.Figure(traces, layout)


def embedding_norms_figure(
    token_embedding: Any,
    positional: Any,
    labels: Sequence[str] | None = None,
    *,
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """Per-token vector lengths: why embeddings are multiplied by √d_model.

    Args:
        token_embedding: ``(T, d_model)`` token embeddings already × √d_model
            (``StackInput.token_embedding[b]``); the unscaled length is this / √d_model.
        positional: ``(T, d_model)`` encodings; a sinusoidal row has length √(d_model/2).
        labels: ``T`` unique token labels.

    Without the scale, small initial embeddings would be drowned by the positional encoding.
    """
    emb, pe = _embedding_inputs(token_embedding, positional)
    tokens = check_labels(labels, emb.shape[0], "token")
    d_model = emb.shape[1]
    scaled = np.linalg.norm(emb, axis=1)
    series = [
        ("embedding (unscaled)", scaled / np.sqrt(d_model), MUTED_COLOR),
        ("embedding × √d_model", scaled, BASE_COLOR),
        ("positional encoding", np.linalg.norm(pe, axis=1), HIGHLIGHT_COLOR),
        ("sum (input to layer 0)", np.linalg.norm(emb + pe, axis=1), GREEN),
    ]
    traces = [
        go.Bar(
            x=tokens,
            y=values.astype(np.float32),
            name=name,
            marker_color=color,
            hovertemplate=f"{name}<br>token %{{x}}<br>length %{{y:.3f}}<extra></extra>",
        )
        for name, values, color in series
    ]
    layout = base_layout(
        f"Vector length per token (L2 norm) · √d_model = {np.sqrt(d_model):.2f}",
        height or (520 if large_font else 420),
        large_font,
        barmode="group",
        xaxis=category_axis("token", tokens, large_font),
        yaxis={"title": {"text": "length"}, "gridcolor": "#eee", "rangemode": "tozero"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
    )
    layout["margin"]["t"] += 30
    return go.Figure(traces, layout)
