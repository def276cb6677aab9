"""A figure redrawn for a narrow screen (a phone, 390 px): panels stacked, titles wrapped.

The builders lay figures out for a laptop: two heat maps side by side, a colour bar between them,
a one-line title, margins of 70 px. On a phone each panel kept a sixth of the screen, panel
titles ran into each other, colour bars sat on the maps and titles were cut at the edge.
:func:`fit_width` takes any builder's figure and the width it will be drawn at, and returns a
new figure laid out for that width; the figure given is left as it is (a shared cached view).

Pure: plotly and numbers in, a plotly figure out, as every builder here.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from .common import text_width, without_tags, wrap_words

NARROW_WIDTH = 600
"""Screens narrower than this (in CSS pixels) get :func:`fit_width`'s layout: phones."""

# The plotly toolbar (about 25 px) sits in the figure's top right corner: on a phone a title
# reaches under it, so the title starts below it.
TOOLBAR_ROOM = 50
# Where the project's figures keep their left margin for labels, a narrow figure keeps at least
# this much (plotly's automargin widens it for long labels).
NARROW_LEFT = 40
COLORBAR_THICKNESS = 12

_AXIS = re.compile(r"([xy])axis(\d*)$")


def is_narrow(width: float | None) -> bool:
    """Whether a screen ``width`` px wide (None: unknown) gets the narrow layout."""
    return width is not None and 0 < width < NARROW_WIDTH


def fit_width(fig: go.Figure, width: float) -> go.Figure:
    """``fig`` laid out anew for a screen ``width`` px wide (the figure's own width there).

    - side-by-side panels (each x axis with its own y axis, one row) are stacked, each at the
      full width and its own height, its title above it and its colour bar beside it;
    - colour bars are thin and beside their own panel, never over another, their titles along
      them;
    - the title is wrapped onto as many lines as the width needs and starts below the toolbar;
    - the margins shrink (automargin still widens them for long labels), and a bar chart's
      numbers printed past its bars get room on the right.

    A figure whose width is unknown or not narrow (see :func:`is_narrow`) is returned as is."""
    if not is_narrow(width):
        return fig
    spec = fig.to_dict()
    layout: dict[str, Any] = spec.get("layout", {})
    data: list[dict[str, Any]] = spec.get("data", [])
    margin = layout.setdefault("margin", {})
    size = float((layout.get("font") or {}).get("size") or 13)
    if _automargin_left(layout):
        margin["l"] = min(int(margin.get("l", 80)), NARROW_LEFT)
    margin["r"] = min(int(margin.get("r", 80)), 20)
    if any(_bar_numbers_outside(trace) for trace in data):
        margin["r"] = max(margin["r"], int(4.2 * size))  # "98.9%" past the longest bar
    if not _stack_panels(layout, data, size):
        _widen_shared_rows(layout, data)
    _shrink_fixed_labels(layout, width, size)
    for trace in data:
        if trace.get("type") == "heatmap" and (trace.get("texttemplate") or trace.get("text")):
            trace["textfont"] = {**(trace.get("textfont") or {}), "size": size - 3}
    for trace in data:
        bar = _colorbar(trace, layout)
        if bar is not None:
            bar.setdefault("thickness", COLORBAR_THICKNESS)
            bar["thickness"] = min(bar["thickness"], COLORBAR_THICKNESS)
            bar.setdefault("xpad", 4)
            title = bar.get("title")
            if isinstance(title, dict) and title.get("text"):
                # Along the bar: above it, the title reached over the panels' own titles.
                title["side"] = "right"
    _fit_captions(layout, width, size)
    _wrap_title(layout, width, size)
    return go.Figure(data=data, layout=layout, skip_invalid=False, _validate=False)


def _automargin_left(layout: dict[str, Any]) -> bool:
    """Whether the left margin is left to plotly's automargin (the builder did not fit it)."""
    axis = layout.get("yaxis") or {}
    return axis.get("automargin", True) is not False


def _bar_numbers_outside(trace: dict[str, Any]) -> bool:
    return (
        trace.get("type") == "bar"
        and trace.get("orientation") == "h"
        and trace.get("textposition") == "outside"
    )


def _colorbar(trace: dict[str, Any], layout: dict[str, Any]) -> dict[str, Any] | None:
    """The trace's colour bar settings (on its colour axis in ``layout``, the trace or its
    marker), None when it shows none."""
    if trace.get("showscale") is False:
        return None
    shared = trace.get("coloraxis") or (trace.get("marker") or {}).get("coloraxis")
    if isinstance(shared, str):
        axis = layout.get(shared)
        if not isinstance(axis, dict) or axis.get("showscale") is False:
            return None
        return axis.setdefault("colorbar", {})
    if "colorbar" in trace or trace.get("type") in {"heatmap", "contour"}:
        return trace.setdefault("colorbar", {})
    marker = trace.get("marker") or {}
    if "colorbar" in marker and marker.get("showscale", False):
        return marker["colorbar"]
    return None


def _panels(layout: dict[str, Any], data: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The ``(x axis, y axis)`` layout keys of side-by-side panels that can be stacked, row by
    row and left to right: at least two, each x axis with a y axis of its own, in rows that do
    not overlap, at least one row of two or more. [] otherwise."""
    pairs: dict[str, set[str]] = {}
    for trace in data:
        x, y = trace.get("xaxis", "x"), trace.get("yaxis", "y")
        pairs.setdefault(x, set()).add(y)
    if len(pairs) < 2 or any(len(ys) != 1 for ys in pairs.values()):
        return []
    keys = [(f"xaxis{x[1:]}", f"yaxis{next(iter(ys))[1:]}") for x, ys in pairs.items()]
    if len({y for _, y in keys}) != len(keys):
        return []
    domains = [list((layout.get(x) or {}).get("domain", [0, 1])) for x, _ in keys]
    heights = [tuple((layout.get(y) or {}).get("domain", [0, 1])) for _, y in keys]
    # A grid (the score parts' two columns of three rows) is read row by row, top first.
    rows: dict[tuple[float, ...], list[int]] = {}
    for index, row in enumerate(heights):
        rows.setdefault(row, []).append(index)
    if all(len(members) == 1 for members in rows.values()):
        return []  # one column (Inside a layer's blocks): already stacked
    order: list[int] = []
    tops = sorted(rows, key=lambda row: -row[1])
    for upper, lower in itertools.pairwise(tops):
        if lower[1] > upper[0] + 1e-6:  # overlapping rows: not a grid
            return []
    for row in tops:
        members = sorted(rows[row], key=lambda i: domains[i][0])
        for before, after in itertools.pairwise(members):
            if domains[before][1] > domains[after][0] + 1e-6:  # overlapping: not side by side
                return []
        order += members
    return [keys[i] for i in order]


def _tick_room(axis: dict[str, Any], size: float) -> float:
    """Pixels an x axis's tick labels and title take below its panel (labels turned upright
    when crowded, as plotly turns them)."""
    labels = axis.get("categoryarray") or axis.get("ticktext") or []
    longest = max((text_width(str(label), size - 1) for label in labels), default=2 * size)
    room = min(longest, 9 * size) + 10
    title = axis.get("title") or {}
    if isinstance(title, dict) and title.get("text"):
        room += 1.6 * size
    return room


def _stack_panels(layout: dict[str, Any], data: list[dict[str, Any]], size: float) -> bool:
    """Stack side-by-side panels one above the other (see :func:`fit_width`); False when the
    figure has none."""
    panels = _panels(layout, data)
    if not panels:
        return False
    margin = layout["margin"]
    height = float(layout.get("height") or 450)
    top, bottom = float(margin.get("t", 100)), float(margin.get("b", 80))
    area = height - top - bottom
    rows = [list((layout.get(y) or {}).get("domain", [0, 1])) for _, y in panels]
    # Each panel keeps the height it had (a whole row's, for one row of panels).
    panel_heights = [max(area * (high - low), 160.0) for low, high in rows]
    old = [list((layout.get(x) or {}).get("domain", [0, 1])) for x, _ in panels]
    # Below each panel but the last: its tick labels and axis title, then the next one's title.
    gaps = [_tick_room(layout.get(x) or {}, size) + 2.2 * size for x, _ in panels[:-1]]
    plot = sum(panel_heights) + sum(gaps)
    layout["height"] = round(top + bottom + plot)
    start = 0.0
    domains = []
    for index, (x, y) in enumerate(panels):
        upper = 1 - start / plot
        lower = 1 - (start + panel_heights[index]) / plot
        domains.append([max(0.0, lower), min(1.0, upper)])
        layout[x] = {**(layout.get(x) or {}), "domain": [0.0, 1.0]}
        layout[y] = {**(layout.get(y) or {}), "domain": domains[-1]}
        # Stacked, every panel shows its keys (a grid showed them under its last row only).
        if layout[x].get("showticklabels") is False:
            layout[x]["showticklabels"] = True
        if layout[y].get("showticklabels") is False:
            layout[y]["showticklabels"] = True
        if index < len(gaps):
            start += panel_heights[index] + gaps[index]
    for note in layout.get("annotations") or []:
        _move_panel_title(note, old, domains, [top for _, top in rows])
    axis_of = {x[5:]: i for i, (x, _) in enumerate(panels)}
    for trace in data:
        panel = axis_of.get(trace.get("xaxis", "x")[1:])
        bar = _colorbar(trace, layout)
        if panel is None or bar is None:
            continue
        low, high = domains[panel]
        bar.update(x=1.02, xanchor="left", y=(low + high) / 2, yanchor="middle")
        bar.update(len=0.95 * (high - low), lenmode="fraction")
    return True


# Beside a panel whose rows it shares (the logit lens's bars of p(chosen)), a second panel keeps
# this share of a narrow figure's width: the rows' cells are what the figure is read by.
SIDE_PANEL = 0.16


def _widen_shared_rows(layout: dict[str, Any], data: Sequence[dict[str, Any]]) -> None:
    """Two panels side by side on one y axis, the right one of bars: that one narrowed to
    :data:`SIDE_PANEL`."""
    pairs = {(t.get("xaxis", "x"), t.get("yaxis", "y")) for t in data}
    if len(pairs) != 2 or len({y for _, y in pairs}) != 1:
        return
    keys = sorted(f"xaxis{x[1:]}" for x, _ in pairs)
    domains = [list((layout.get(k) or {}).get("domain", [0, 1])) for k in keys]
    left, right = sorted(range(2), key=lambda i: domains[i][0])
    side = keys[right].replace("axis", "")
    if domains[left][1] > domains[right][0] or not all(
        t.get("type") == "bar" for t in data if t.get("xaxis", "x") == side
    ):
        return
    layout[keys[left]] = {**layout[keys[left]], "domain": [0.0, 1 - SIDE_PANEL - 0.03]}
    layout[keys[right]] = {**layout[keys[right]], "domain": [1 - SIDE_PANEL, 1.0]}


def _shrink_fixed_labels(layout: dict[str, Any], width: float, size: float) -> None:
    """A left margin the builder fitted to its labels (automargin off) that takes more than
    30 % of a narrow figure: its labels (and the margin) at most a fifth smaller."""
    margin = layout["margin"]
    left = float(margin.get("l", 80))
    if _automargin_left(layout) or left <= 0.3 * width:
        return
    factor = max(0.8, 0.3 * width / left)
    axis = layout.get("yaxis") or {}
    tick = axis.get("tickfont") or {}
    axis["tickfont"] = {**tick, "size": max(9, round(float(tick.get("size") or size - 1) * factor))}
    layout["yaxis"] = axis
    margin["l"] = math.ceil(left * factor)


def _move_panel_title(
    note: dict[str, Any],
    old: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    tops: Sequence[float] | None = None,
) -> None:
    """A panel title (an annotation on the paper just above a panel: over one of the old
    side-by-side ``old`` domains, at its row's top ``tops``, 1 by default) moved above its
    stacked panel's ``new`` domain."""
    if note.get("xref", "x") != "paper" or note.get("yref", "y") != "paper":
        return
    x, y = note.get("x"), note.get("y")
    if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
        return
    for (left, right), (_, high), top in zip(old, new, tops or [1.0] * len(old), strict=True):
        above = y >= top - 0.02 and (top >= 1.0 - 1e-6 or y <= top + 0.1)
        if above and left - 1e-6 <= x <= right + 1e-6:
            note.update(x=0.5, xanchor="center", y=high, yanchor="bottom")
            return


def _wrap_title(layout: dict[str, Any], width: float, size: float) -> None:
    """Wrap the title to ``width``, start it below the toolbar, and grow the top margin (and
    the figure, so the plot keeps its height) by what that takes."""
    title = layout.get("title")
    if not isinstance(title, dict) or not title.get("text"):
        return
    font = title.setdefault("font", {})
    built_size = float(font.get("size") or round(size * 1.25))
    title_size = min(built_size, round(size * 1.15))
    font["size"] = title_size
    # A title its builder wrapped already has the room for its lines (`base_layout`).
    had = 1.3 * built_size * title["text"].count("<br>")
    lines = wrap_words(title["text"], title_size, width - 24)
    title["text"] = "<br>".join(lines)
    extra = TOOLBAR_ROOM + (len(lines) - 1) * 1.3 * title_size - had
    margin = layout["margin"]
    margin["t"] = round(float(margin.get("t", 100)) + extra)
    height = round(float(layout.get("height") or 450) + extra)
    layout["height"] = height
    title.update(x=0.01, xanchor="left", yref="container", y=1 - TOOLBAR_ROOM / height)
    title["yanchor"] = "top"


# A caption is made smaller down to this share of its size to fit a narrow figure's width.
SMALLEST_CAPTION = 0.8
# What separates the parts of a caption (name, formula, which slice): a narrow figure's caption
# keeps the parts that fit and ends with "…".
CAPTION_PARTS = "   "


def _fit_captions(layout: dict[str, Any], width: float, size: float) -> None:
    """Captions written from the plot's left edge (Inside a layer's, one per block) that would
    run past the figure's right edge: their font made smaller, as far as
    :data:`SMALLEST_CAPTION` of its size, then their last parts left out (each line ends "…"
    where it lost some). They are not wrapped: the builder laid out their places in pixels."""
    margin = layout["margin"]
    room = width - float(margin.get("l", 80)) - 6
    for note in layout.get("annotations") or []:
        if note.get("xref") != "paper" or note.get("xanchor") != "left" or note.get("x") != 0:
            continue
        font = note.setdefault("font", {})
        own = float(font.get("size") or size)
        lines = re.split(r"<br\s*/?>", str(note.get("text", "")))
        widest = max(text_width(without_tags(line), own) for line in lines)
        if widest <= room:
            continue
        font["size"] = max(round(own * SMALLEST_CAPTION), math.floor(own * room / widest))
        note["text"] = "<br>".join(_cut_line(line, font["size"], room) for line in lines)


def _cut_line(line: str, size: float, room: float) -> str:
    """``line`` without its last :data:`CAPTION_PARTS`-separated parts (and, where its first
    part alone is too long, that part's last words), to fit ``room`` px at ``size``; "…" where
    something was left out."""
    if text_width(without_tags(line), size) <= room:
        return line
    parts = line.split(CAPTION_PARTS)
    kept = parts[:1]
    for part in parts[1:]:
        if text_width(without_tags(CAPTION_PARTS.join([*kept, part, "…"])), size) > room:
            break
        kept.append(part)
    cut = CAPTION_PARTS.join(kept)
    if text_width(without_tags(cut + " …"), size) > room:  # the first part alone: cut at a word
        words = cut.split(" ")
        while len(words) > 1 and text_width(without_tags(" ".join(words) + " …"), size) > room:
            words.pop()
        cut = " ".join(words)
    for tag in ("b", "i"):  # a bold or italic run cut short is closed
        if cut.count(f"<{tag}>") > cut.count(f"</{tag}>"):
            cut += f"</{tag}>"
    return cut + " …"
