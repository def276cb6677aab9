"""Figures of one layer's steps (``transformer.lab.inside``): one figure per section of the layer.

Vectors (d_model, d_head, d_ff wide) are one-row heatmap strips with hover values, never walls
of numbers; keys × d_head matrices are small heatmaps with the key tokens on their rows; the
per-key steps (q·k, ÷√d_k, the mask, exp, the weights) are one table with a bar chart of the
weights beside it, masked keys in grey. Every strip has its own symmetric colour scale (its
numbers are in the hover), saturating at the 98th percentile of its |values|, so a LayerNorm's
±3, a residual's ±30 and a vector with one outlier dimension are all readable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from .common import (
    HIGHLIGHT_COLOR,
    MASKED_GREY,
    SIGNED_COLORSCALE,
    figure,
    font_size,
    plot_text,
    short_label,
    to_numpy,
)

_GREY_SCALE = [[0.0, MASKED_GREY], [1.0, MASKED_GREY]]
_GAP = 8  # pixels between blocks
# Short column headers of the per-key table, by the step key's last part.
_HEADERS = {
    "dot": "q·k",
    "scaled": "÷√d_k",
    "masked": "masked",
    "exp": "exp",
    "weights": "weight",
}


def _sizes(large_font: bool) -> dict[str, int]:
    if large_font:
        return {"caption": 30, "strip": 36, "row": 22, "cell": 30, "header": 34, "top": 16}
    return {"caption": 22, "strip": 26, "row": 14, "cell": 22, "header": 26, "top": 10}


def _blocks(steps: Sequence[Any]) -> list[list[Any]]:
    """Consecutive per-key steps form one table block; every other step is a block alone."""
    blocks: list[list[Any]] = []
    for step in steps:
        if blocks and _joins(blocks[-1], step):
            blocks[-1].append(step)
        else:
            blocks.append([step])
    return blocks


def _joins(block: list[Any], step: Any) -> bool:
    """Whether ``step`` joins ``block``: per-key steps make one table. Every matrix has the
    width to itself (two side by side drew their captions over each other: a rotation's
    formula is long)."""
    return bool(step.per_key and block[0].per_key)


def _number(value: float) -> str:
    if math.isinf(value):
        return "−∞" if value < 0 else "∞"
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:.4g}"


# Past this many characters a caption puts its grey tail (which slice, its shape) on a line of
# its own: plotly does not wrap annotations, and at 1280×800 a line of about 110 characters
# reaches the figure's right edge, where it was cut off.
_ONE_LINE = 100


def _caption(number: int, steps: Sequence[Any]) -> str:
    """A block's caption: number(s) and name(s) in bold, the formula of a lone step, then in
    grey which slice of the tensor is drawn, with its shape."""
    if len(steps) == 1:
        (step,) = steps
        head, formula, tail = f"{number}. {step.name}", step.formula, step.shown
    else:
        names = " → ".join(step.name for step in steps)
        head, formula = f"{number}–{number + len(steps) - 1}. {names}", ""
        tail = steps[0].shown.split(";")[0]
    wraps = len(head) + len(formula) + len(tail) > _ONE_LINE
    text = f"<b>{plot_text(head)}</b>" + (f"   {plot_text(formula)}" if formula else "")
    return (
        text + ("<br>" if wraps else "   ") + f"<span style='color:#777'>{plot_text(tail)}</span>"
    )


def section_figure(
    steps: Sequence[Any],
    first_number: int = 1,
    title: str = "",
    *,
    large_font: bool = False,
) -> go.Figure:
    """The steps of one section (``transformer.lab.inside.Step``), stacked top to bottom.

    Args:
        steps: the section's steps in order; vectors ``(n,)``, matrices ``(rows, n)`` with
            ``labels`` per row, per-key vectors ``(Tk,)`` with ``labels`` per key.
        first_number: the number of the first step in the whole walkthrough (captions count on).
        title: the figure's title ("" for none).
        large_font: bigger fonts and rows, for projecting.
    """
    size = _sizes(large_font)
    font = font_size(large_font)
    top = (
        size["top"] + 24 + (40 if title else 0)
    )  # room for plotly's mode bar above the first caption
    traces: list[Any] = []
    layout: dict[str, Any] = {}
    annotations: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    # block, its caption, y top, y bottom (px)
    placed: list[tuple[list[Any], str, float, float]] = []
    y = 0.0
    number = first_number
    for block in _blocks(steps):
        caption = _caption(number, block)
        y += size["caption"] * (1 + caption.count("<br>"))
        if block[0].per_key:
            n_keys = block[0].values.numel()
            # A row per key (up to 16; the table scrolls past them), one spare for a wrapped label.
            height = 2 * size["header"] + size["cell"] * (min(n_keys, 16) + 1)
        elif block[0].values.dim() == 2:
            height = min(320, max(3 * size["row"], size["row"] * block[0].values.size(0) + 6))
        else:
            height = size["strip"]
        placed.append((block, caption, y, y + height))
        y += height + _GAP
        number += len(block)
    plot_height = max(y, 1.0)
    height_px = int(plot_height + top + 10)

    def frac(px: float) -> float:
        return max(0.0, min(1.0, 1.0 - px / plot_height))

    for axis_index, (block, caption, y0, y1) in enumerate(placed, start=1):
        domain = [frac(y1), frac(y0)]
        caption_y = frac(y0 - 2)  # the caption sits just above its block
        if block[0].per_key:
            _per_key_block(block, domain, axis_index, large_font, traces, layout)
        else:
            (step,) = block
            _heatmap_block(step, domain, axis_index, large_font, traces, layout, shapes)
        annotations.append(_annotation(caption, caption_y, font))

    layout.update(
        template="none",
        height=height_px,
        font={"size": font},
        margin={"l": 110 if large_font else 80, "r": 20, "t": top, "b": 10},
        hoverlabel={"font": {"size": font}},
        annotations=annotations,
        shapes=shapes,
        showlegend=False,
    )
    if title:
        layout["title"] = {"text": title, "font": {"size": round(font * 1.2)}, "x": 0.01}
    return figure(traces, layout)


def _annotation(text: str, y: float, font: int) -> dict[str, Any]:
    """A caption at the figure's left edge, its bottom at ``y`` (paper units)."""
    return {
        "text": text,
        "x": 0,
        "y": y,
        "xref": "paper",
        "yref": "paper",
        "xanchor": "left",
        "yanchor": "bottom",
        "align": "left",
        "showarrow": False,
        "font": {"size": font - 1},
    }


def _axis_names(index: int) -> tuple[str, str, str, str]:
    suffix = "" if index == 1 else str(index)
    return f"x{suffix}", f"y{suffix}", f"xaxis{suffix}", f"yaxis{suffix}"


def _strip_limit(z: np.ndarray) -> float:
    """Where a strip's colours saturate: the 98th percentile of |value|, so that one outlier
    dimension (BERT has some) does not wash out the rest (the hover gives every exact value)."""
    finite = np.abs(z[np.isfinite(z)])
    limit = float(np.percentile(finite, 98)) if finite.size else 0.0
    return (
        limit if limit > 0 else (float(finite.max()) if finite.size and finite.max() > 0 else 1.0)
    )


def _greyed(step: Any, values: np.ndarray) -> dict[str, Any]:
    """A grey heatmap over the strip's cells the step switched off (``step.off``)."""
    off = to_numpy(step.off, dtype=bool)
    grey = np.where(off, values, np.nan).astype(np.float32)[None, :]
    # What grey means, as the step says it ("grey = switched off", "grey = nearly closed").
    meaning = step.shown.split("grey = ", 1)[1] if "grey = " in step.shown else "switched off"
    return dict(
        type="heatmap",
        z=grey,
        colorscale=_GREY_SCALE,
        showscale=False,
        hovertemplate=f"index %{{x}}: %{{z:.4f}} ({meaning})<extra></extra>",
        hoverongaps=False,
    )


def _highlight(columns: tuple[int, int], x_ref: str, y_ref: str) -> dict[str, Any]:
    """A frame around the (start, stop) ``columns`` of a strip: the chosen head's."""
    start, stop = columns
    return {
        "type": "rect",
        "xref": x_ref,
        "yref": f"{y_ref} domain",
        "x0": start - 0.5,
        "x1": stop - 0.5,
        "y0": -0.08,
        "y1": 1.08,
        "line": {"color": HIGHLIGHT_COLOR, "width": 3},
    }


def _heatmap_block(
    step: Any,
    domain: list[float],
    index: int,
    large_font: bool,
    traces: list[Any],
    layout: dict[str, Any],
    shapes: list[dict[str, Any]],
) -> None:
    """One vector as a one-row strip, or one matrix with its row labels."""
    x_ref, y_ref, x_key, y_key = _axis_names(index)
    values = to_numpy(step.values)
    matrix = values.ndim == 2
    z = values if matrix else values[None, :]
    limit = _strip_limit(z)
    columns = np.arange(z.shape[1])
    if matrix and step.labels:
        rows = [plot_text(short_label(label)) for label in step.labels]
    else:
        rows = [plot_text(step.name)]
    if matrix:
        hover = "key %{y}, dim %{x}: %{z:.4f}<extra></extra>"
    else:
        hover = "index %{x}: %{z:.4f}<extra></extra>"
    traces.append(
        dict(
            type="heatmap",
            z=z.astype(np.float32),
            x=columns,
            y=rows,
            xaxis=x_ref,
            yaxis=y_ref,
            colorscale=SIGNED_COLORSCALE,
            zmin=-limit,
            zmax=limit,
            showscale=False,
            hovertemplate=hover,
            hoverongaps=False,
        )
    )
    if step.off is not None and not matrix and bool(step.off.any()):
        grey = _greyed(step, values)
        traces.append(dict(grey, x=columns, y=rows, xaxis=x_ref, yaxis=y_ref))
    small = 14 if large_font else 10  # one label per key row, none thinned out
    layout[x_key] = {
        "domain": [0.0, 1.0],
        "anchor": y_ref,
        "showticklabels": False,
        "ticks": "",
        "showgrid": False,
        "zeroline": False,
        "range": [-0.5, z.shape[1] - 0.5],
    }
    layout[y_key] = {
        "domain": domain,
        "anchor": x_ref,
        "type": "category",
        "autorange": "reversed",
        "showticklabels": matrix,
        "ticks": "",
        "tickfont": {"size": small},
        "showgrid": False,
        "zeroline": False,
    }
    if step.highlight is not None:
        shapes.append(_highlight(step.highlight, x_ref, y_ref))


def _key_table(
    steps: list[Any],
    labels: list[str],
    off_list: list[bool],
    notes: list[str],
    domain: list[float],
    large_font: bool,
) -> dict[str, Any]:
    """The per-key steps as a table: a row per key (grey where masked), a column per step,
    and why a masked key is masked."""
    size = _sizes(large_font)
    font = font_size(large_font)
    columns = [labels]
    headers = ["key"]
    for step in steps:
        headers.append(_HEADERS.get(step.key.rsplit(".", 1)[-1], step.name))
        columns.append([_number(float(v)) for v in to_numpy(step.values)])
    headers.append("reason")
    columns.append([note.split(":")[0] if note else "—" for note in notes])  # "causal", "padding"
    fill = ["#ececec" if masked else "white" for masked in off_list]
    return dict(
        type="table",
        domain={"x": [0, 0.64], "y": domain},
        columnwidth=[1.3] + [1.0] * len(steps) + [1.1],
        header={
            "values": [f"<b>{h}</b>" for h in headers],
            "height": size["header"],
            "font": {"size": font - 1},
            "fill": {"color": "#f2f4f8"},
            "align": "left",
        },
        cells={
            "values": columns,
            "height": size["cell"],
            "font": {"size": font - 1, "color": [["#222"] * len(labels)]},
            "fill": {"color": [fill]},
            "align": "left",
        },
    )


def _per_key_block(
    steps: list[Any],
    domain: list[float],
    index: int,
    large_font: bool,
    traces: list[Any],
    layout: dict[str, Any],
) -> None:
    """The per-key steps as one table (a column per step) and the weights as bars beside it."""
    x_ref, y_ref, x_key, y_key = _axis_names(index)
    font = font_size(large_font)
    labels = [plot_text(short_label(label)) for label in steps[0].labels]
    off = next((s.off for s in steps if s.off is not None), None)
    off_list = [False] * len(labels) if off is None else [bool(v) for v in off]
    notes = next((s.notes for s in steps if s.notes is not None), None) or [""] * len(labels)
    traces.append(_key_table(steps, labels, off_list, notes, domain, large_font))
    weights = to_numpy(steps[-1].values)
    text = [
        f"masked ({note.split(':')[0]})" if masked else f"{w:.3f}"
        for w, masked, note in zip(weights, off_list, notes, strict=True)
    ]
    colors = [MASKED_GREY if masked else HIGHLIGHT_COLOR for masked in off_list]
    traces.append(
        dict(
            type="bar",
            x=weights.astype(np.float32),
            y=labels,
            orientation="h",
            xaxis=x_ref,
            yaxis=y_ref,
            marker={"color": colors},
            text=text,
            textposition="outside",
            cliponaxis=False,
            hovertemplate="key %{y}: weight %{x:.4f}<extra></extra>",
        )
    )
    layout[x_key] = {
        "domain": [0.72, 0.93],
        "anchor": y_ref,
        "range": [0, max(1e-6, float(weights.max())) * 1.05],
        "showgrid": False,
        "tickfont": {"size": font - 3},
        "title": {"text": "weight", "font": {"size": font - 2}, "standoff": 2},
    }
    layout[y_key] = {
        "domain": domain,
        "anchor": x_ref,
        "type": "category",
        "categoryorder": "array",
        "categoryarray": labels,
        "autorange": "reversed",
        "tickfont": {"size": font - 3},
        "automargin": True,
    }
