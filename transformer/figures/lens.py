"""The logit lens (each layer read through the generator) and the residual stream's norms.

Pure plotly: records of :mod:`transformer.generation.lens` in, figures out. Layers are numbered from 1
(0 = the embedding input); rows go up through the stack, the last layer on top.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ..generation.lens import LogitLens, ResidualNorms
from .common import (
    HIGHLIGHT_COLOR,
    MASKED_GREY,
    WEIGHTS_COLORSCALE,
    base_layout,
    category_axis,
    check_labels,
    figure,
    font_size,
    panel_title,
    plot_text,
    probability_bars,
    steady_left_margin,
    to_numpy,
)

MAX_PIECE_CHARS = 10  # a cell shows at most this much of a token's text (hover has it all)


def _short(piece: str) -> str:
    piece = piece.replace("\n", "⏎")
    return piece if len(piece) <= MAX_PIECE_CHARS else piece[: MAX_PIECE_CHARS - 1] + "…"


def layer_name(number: int) -> str:
    """``"layer 3"``, or ``"embeddings"`` for row 0 (the stack's input)."""
    return "embeddings" if number == 0 else f"layer {number}"


def _lens_cells(
    ids: np.ndarray, probs: np.ndarray, name: Callable[[int], str], chosen: int | None
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Each ``(L, k)`` cell's text (the token, bold where it is the chosen one, and its
    probability) and hover, and the (row, column) of the chosen token's cells."""
    n_rows, k = ids.shape
    texts = np.empty((n_rows, k), dtype=object)
    hover = np.empty((n_rows, k), dtype=object)
    outline = []
    for r in range(n_rows):
        for j in range(k):
            token = name(int(ids[r, j]))
            cell = plot_text(_short(token))
            if chosen is not None and int(ids[r, j]) == chosen:
                cell = f"<b>{cell}</b>"
                outline.append((r, j))
            texts[r, j] = f"{cell}<br>{probs[r, j]:.0%}"
            hover[r, j] = f"{plot_text(token)} #{int(ids[r, j])}"
    return texts, hover, outline


def _chosen_bar(
    chosen_probs: np.ndarray, rows: list[str], split: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The bars of the chosen token's probability at every layer, and their x axis right of
    the heatmap (which ends at ``split``)."""
    bar = probability_bars(
        chosen_probs,
        rows,
        "p(chosen)",
        digits=0,
        xaxis="x2",
        yaxis="y",
        marker={"color": HIGHLIGHT_COLOR},
        showlegend=False,
    )
    axis = {
        "domain": [split + 0.05, 1.0],
        "range": [0, 1.3],
        "tickvals": [0, 0.5, 1],
        "tickformat": ".0%",
        "title": {"text": "p(chosen)"},
        "gridcolor": "#eee",
        "anchor": "y",
    }
    return bar, axis


def _outline(r: int, j: int) -> dict[str, Any]:
    """A highlighted frame around cell (``r``, ``j``)."""
    return {
        "type": "rect",
        "xref": "x",
        "yref": "y",
        "x0": j - 0.5,
        "x1": j + 0.5,
        "y0": r - 0.5,
        "y1": r + 0.5,
        "line": {"color": HIGHLIGHT_COLOR, "width": 3},
    }


def logit_lens_figure(
    lens: LogitLens,
    piece: Callable[[int], str] | None = None,
    *,
    position_label: str | None = None,
    chosen_label: str | None = None,
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """The logit lens at one position: one row per layer (the last on top), its ``k`` most
    probable next tokens coloured by probability, and, beside it, the probability of the chosen
    token at every layer; each row's label gives the chosen token's rank there
    (``"layer 3 · chosen #2"``). The chosen token's cells are outlined.

    Args:
        lens: a :class:`~transformer.generation.lens.LogitLens` (``top_ids``/``top_probs`` ``(L, k)``).
        piece: ``id -> text`` to name the tokens (None: ``"#id"``).
        position_label: the position read, e.g. ``"5:sees"``, for the title.
        chosen_label: the chosen token's text, for the title.
    """
    ids = to_numpy(lens.top_ids, np.int64)
    probs = to_numpy(lens.top_probs)
    if ids.ndim != 2 or ids.shape != probs.shape or ids.shape[0] != len(lens.layers):
        raise ValueError("top_ids and top_probs must be (layers, k), one row per layer")
    n_rows, k = ids.shape
    name = piece if piece is not None else (lambda i: f"#{i}")
    chosen = lens.chosen
    ranks = to_numpy(lens.chosen_rank, np.int64) if lens.chosen_rank is not None else None
    chosen_probs = to_numpy(lens.chosen_prob) if lens.chosen_prob is not None else None
    rows = []
    for r, number in enumerate(lens.layers):
        label = layer_name(number)
        rows.append(label if ranks is None else f"{label} · chosen #{int(ranks[r])}")
    columns = [f"top {j + 1}" for j in range(k)]
    texts, hover, outline = _lens_cells(ids, probs, name, chosen)
    size = font_size(large_font)
    heatmap = dict(
        type="heatmap",
        z=probs,
        x=columns,
        y=rows,
        text=texts,
        customdata=hover,
        texttemplate="%{text}",
        textfont={"size": size - 1},
        coloraxis="coloraxis",
        xgap=2,
        ygap=2,
        hovertemplate="%{y}<br>%{x}: %{customdata}<br>p = %{z:.4f}<extra></extra>",
    )
    traces: list[Any] = [heatmap]
    has_bars = chosen_probs is not None
    split = 0.74 if has_bars else 1.0
    layout_extra: dict[str, Any] = {}
    if chosen_probs is not None:
        bar, layout_extra["xaxis2"] = _chosen_bar(chosen_probs, rows, split)
        traces.append(bar)
    shapes = [_outline(r, j) for r, j in outline]
    where = f" at {position_label}" if position_label else ""
    what = f" · chosen: {chosen_label}" if chosen_label else ""
    row_height = 58 if large_font else 36
    layout = base_layout(
        f"Logit lens: what each layer{where} would predict next{what}",
        height or int(max(260, 130 + row_height * n_rows + (30 if large_font else 0))),
        large_font,
        xaxis={**category_axis("", columns, large_font), "domain": [0, split], "side": "top"},
        yaxis=category_axis("", rows, large_font),
        coloraxis={
            "colorscale": WEIGHTS_COLORSCALE,
            "cmin": 0.0,
            "cmax": 1.0,
            "showscale": False,
        },
        shapes=shapes,
        showlegend=False,
        **layout_extra,
    )
    layout["margin"] = {**layout["margin"], "t": layout["margin"]["t"] + 20, "b": 50}
    steady_left_margin(layout, rows, large_font, titled=False)  # redrawn at every step
    return figure(traces, layout)


_SUBLAYER_SHORT = {"self-attention": "attn", "cross-attention": "cross", "feed-forward": "FFN"}


def stage_label(stage: str) -> str:
    """A short axis label for a stage name: ``"L2 feed-forward"`` → ``"L2 FFN"``."""
    if stage == "input":
        return "embeddings"
    layer, _, part = stage.partition(" ")
    return f"{layer} {_SUBLAYER_SHORT.get(part, part)}"


def _norms_height(n_stages: int, positions: Sequence[str], large_font: bool) -> int:
    """Room for every stage's row and for the position labels below (plotly turns long labels
    upright, and they take their height from the plot's)."""
    size = font_size(large_font)
    longest = min(max((len(p) for p in positions), default=1), 20)
    labels = int(longest * size * 0.62) if len(positions) > 6 else 2 * size
    return int(min(1100, max(300, 150 + labels + (32 if large_font else 20) * n_stages)))


def _cell_format(values: np.ndarray, key: str = "z") -> str:
    """A cell text template with three significant digits for the panel's largest value:
    ``76.6``, ``4.1`` beside it; ``0.183`` for a panel of small norms (read from ``key``)."""
    finite = values[np.isfinite(values)]
    top = float(np.abs(finite).max()) if finite.size else 1.0
    decimals = int(np.clip(2 - np.floor(np.log10(max(top, 1e-12))), 0, 4))
    return f"%{{{key}:.{decimals}f}}"


def _norm_axis(scale: dict[str, Any], note: str, name: str, bar: dict[str, Any]) -> dict[str, Any]:
    """A colour axis of norms: :func:`norm_scale`'s limits and ticks on the shared colour bar
    placement ``bar``, titled ``name`` (and the note)."""
    colorbar = {**bar, "xanchor": "left", "title": {"text": name + note}}
    colorbar.update(scale.get("colorbar", {}))
    axis = {k: v for k, v in scale.items() if k != "colorbar"}
    return {"colorscale": WEIGHTS_COLORSCALE, "colorbar": colorbar, **axis}


# Norms this many times their panel's median or more (a pre-norm model's first position, whose
# stream SmolLM2 carries at about 22,700 against 2 to 900 elsewhere) would paint every other cell
# one colour on a linear scale: the panel's colours then follow log10 of the norm instead.
LOG_SPREAD = 30.0


def norm_scale(values: np.ndarray) -> tuple[np.ndarray, dict[str, Any], str]:
    """How one panel of norms (any shape, NaN ignored, positive) is coloured: ``(z, colour
    axis settings, colour-bar note)``. Linear from 0 (``z`` the norms) unless the largest norm
    is :data:`LOG_SPREAD` times the median or more; then ``z`` is ``log10`` of the norms, the
    colour bar is ticked in norms at powers of ten, and the note says "log scale"."""
    finite = values[np.isfinite(values) & (values > 0)]
    if not finite.size or float(finite.max()) < LOG_SPREAD * float(np.median(finite)):
        return values, {"cmin": 0.0}, ""
    low, high = np.floor(np.log10(finite.min())), np.log10(finite.max())
    powers = np.arange(low, np.floor(high) + 1)
    with np.errstate(invalid="ignore"):  # NaN (no update at the input) stays NaN
        # a norm of 0 (a head switched off) has no logarithm: the bottom of the scale
        z = np.log10(np.where(values > 0, values, 10**low))
    ticks = {
        "tickvals": powers.tolist(),
        "ticktext": [f"{10**p:,.0f}" if p >= 0 else f"{10**p:g}" for p in powers],
    }
    return (
        z,
        {"cmin": float(low), "cmax": float(high), "colorbar": ticks},
        "<br><sup>log scale</sup>",
    )


def _norm_map(
    z: np.ndarray,
    values: np.ndarray,
    note: str,
    formatted: np.ndarray,
    numbers: bool,
    placement: dict[str, Any],
    hover: str,
    axis: str = "coloraxis",
) -> dict[str, Any]:
    """One panel's heatmap of norms: coloured by ``z`` (the ``values`` or, where ``note``
    says log scale, their logarithms), the norms themselves in hover (after ``hover``) and,
    with ``numbers``, in the cells (to the digits ``formatted``'s largest needs)."""
    data, key = ({}, "z") if not note else ({"customdata": values}, "customdata")
    heatmap: dict[str, Any] = dict(
        type="heatmap", z=z, texttemplate=_cell_format(formatted, key) if numbers else ""
    )
    heatmap.update(placement)
    heatmap.update(coloraxis=axis, hovertemplate=f"{hover}%{{{key}:.3f}}<extra></extra>")
    heatmap.update(data)
    return heatmap


def residual_norms_figure(
    norms: ResidualNorms,
    position_labels: Sequence[str] | None = None,
    *,
    large_font: bool = False,
    height: int | None = None,
    numbers: bool | None = None,
) -> go.Figure:
    """Two heatmaps over (stage, position): left, the norm ``‖x‖`` of the residual stream at
    the stack's input and after every sub-layer; right, the norm ``‖Δ‖`` of what each
    sub-layer added (its output before the residual add). Stages go up the stack (the embeddings at the bottom).
    Each panel is coloured linearly from 0, or by log10 of the norm where a few norms dwarf the
    rest (:func:`norm_scale`); hover and cell text give the norms either way.

    Args:
        norms: a :class:`~transformer.generation.lens.ResidualNorms` (``stream`` ``(S, T)``, ``added``
            ``(S - 1, T)``).
        position_labels: ``T`` unique labels, e.g. ``token_labels(pieces)``.
        numbers: write each value in its cell (default: when the cells are wide enough for
            it in a full-width figure: at most 14 positions, 10 in large font, and 30 stages).
    """
    stream = to_numpy(norms.stream)
    added = to_numpy(norms.added)
    n_stages, n_positions = stream.shape
    if added.shape != (n_stages - 1, n_positions):
        raise ValueError("added must have one row fewer than stream (no update at the input)")
    positions = check_labels(position_labels, n_positions, "position")
    stages = [stage_label(s) for s in norms.stages]
    # The input has no update: a grey row keeps both panels on the same rows.
    added_rows = np.vstack([np.full((1, n_positions), np.nan, np.float32), added])
    if numbers is None:
        numbers = n_positions <= (10 if large_font else 14) and n_stages <= 30
    size = font_size(large_font)
    common = dict(x=positions, y=stages, xgap=1, ygap=1, hoverongaps=False)
    common["textfont"] = {"size": size - 3}
    stream_z, stream_axis, stream_note = norm_scale(stream)
    added_z, added_axis, added_note = norm_scale(added_rows)
    stream_map = _norm_map(
        stream_z, stream, stream_note, stream, numbers, {}, "position %{x}<br>after %{y}<br>‖x‖ = "
    )
    added_map = _norm_map(
        added_z,
        added_rows,
        added_note,
        added,
        numbers,
        {"xaxis": "x2"},
        "position %{x}<br>%{y} added ‖Δ‖ = ",
        axis="coloraxis2",
    )
    stream_map.update(common)
    added_map.update(common)
    gap = 0.1
    left, right = [0.0, 0.5 - gap / 2], [0.5 + gap / 2, 1.0]
    bar = {"thickness": 12, "len": 0.9, "y": 0.45, "yanchor": "middle"}
    placement = "post-LN" if norms.norm == "post" else "pre-LN"
    layout = base_layout(
        f"Residual stream of the {norms.stack}, per position ({placement})",
        height or _norms_height(n_stages, positions, large_font),
        large_font,
        plot_bgcolor=MASKED_GREY,
        xaxis={**category_axis("position", positions, large_font), "domain": left},
        xaxis2={
            **category_axis("position", positions, large_font),
            "domain": right,
            "anchor": "y",
        },
        yaxis=category_axis("", stages, large_font),
        coloraxis=_norm_axis(stream_axis, stream_note, "‖x‖", {**bar, "x": left[1] + 0.01}),
        coloraxis2=_norm_axis(added_axis, added_note, "‖Δ‖", {**bar, "x": 1.01}),
        annotations=[
            panel_title("‖x‖: the stream after each step", left, large_font),
            panel_title("‖Δ‖: what each sub-layer added", right, large_font),
        ],
    )
    layout["margin"] = {**layout["margin"], "r": 60, "t": layout["margin"]["t"] + 10}
    return figure([stream_map, added_map], layout)
