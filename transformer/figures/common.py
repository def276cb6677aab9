"""Shared pieces of every figure: labels, array conversion, fonts, the masked-cell colour.

Figure builders are pure functions (arrays or trace records in, ``plotly`` figures out); they
import plotly and numpy, torch only to accept tensors, and never the UI.

Text given to a builder (labels, titles, token pieces) is plain text: the builder passes it
through :func:`plot_text` before plotly sees it, and only markup the builder writes itself
(``<b>``, ``<br>``) is read as markup.
"""

from __future__ import annotations

import functools
import html
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.validator_cache import ValidatorCache

# An axis label is a piece as every view writes it: the text layer cuts and numbers it.
from ..text.display import short_piece
from ..text.display import token_labels as token_labels

# One grey for "the mask removed this cell" in every figure; no colour scale used here has it.
MASKED_GREY = "#b0b0b0"
# Weights are sequential (0 → 1); scores, differences and encodings are signed (diverging).
WEIGHTS_COLORSCALE = "Viridis"
SIGNED_COLORSCALE = "RdBu_r"
# Colours of bar and line charts: Tableau 10's first six, blue and orange first (a colour-blind
# safe pair). Every figure takes its colours from here.
PALETTE: tuple[str, ...] = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2")
BASE_COLOR, HIGHLIGHT_COLOR, GREEN = PALETTE[0], PALETTE[1], PALETTE[2]
MUTED_COLOR = "#bab0ac"  # Tableau 10's grey: a series shown for reference only

_FONT_SIZE = {False: 13, True: 20}


def plot_text(text: str) -> str:
    """``text`` as plotly shows it literally: ``&``, ``<`` and ``>`` as entities.

    Plotly reads a subset of HTML in every text it draws (titles, tick labels, hovers, cells):
    ``<b>``, ``<i>``, ``<s>``, ``<u>``, ``<br>``, ``<a href>``... A piece ``"</s>"`` (Marian's end
    of sentence) or ``"<s>"`` (Llama's start) drew as nothing, ``"<b>x</b>"`` as a bold x and
    ``"&amp;"`` as ``&``. Plotly decodes the entities back, so the label reads as written.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plain_text(text: str) -> str:
    """The text a :func:`plot_text` label shows (its entities decoded): for measuring it and
    cutting it short without splitting an entity."""
    return html.unescape(text)


def short_label(label: str) -> str:
    """A ``"index:piece"`` label with its piece cut by :func:`short_piece` (the index, which
    keeps labels unique, stays whole)."""
    index, colon, piece = label.partition(":")
    return f"{index}:{short_piece(piece)}" if colon and index.isdigit() else short_piece(label)


def to_numpy(values: Any, dtype: type = np.float32) -> np.ndarray:
    """A torch tensor, numpy array or nested list as a numpy array of ``dtype`` (float32 default).

    Float32 halves the payload of float64: plotly ships numpy arrays as base64 typed arrays.
    """
    if hasattr(values, "detach"):  # a torch tensor, without importing torch here
        values = values.detach().cpu()
        if dtype is not bool:
            values = values.float()
        values = values.numpy()
    return np.asarray(values, dtype=dtype)


VALIDATE = False
"""Whether :func:`figure` has plotly validate what it is given (tests switch it on to check
that a builder's figure is the one plotly's validation would make, byte for byte)."""

# plotly's own reading of a colour scale's name (what validating a heatmap's would do)
_COLORSCALE = ValidatorCache.get_validator("heatmap", "colorscale")
_LAYOUT_ARRAYS = ("annotations", "shapes", "images", "selections", "sliders", "updatemenus")


def figure(data: Sequence[dict[str, Any]], layout: dict[str, Any]) -> go.Figure:
    """A figure of trace dicts (each with its ``type``) and a layout dict, built without
    plotly's validation of every property, which took most of a figure's time (a Generate
    step's five figures spent about 40 ms in it, an Inside section's heatmaps 30 ms each).

    What validation would change is done here: a named colour scale (``"RdBu_r"``, which
    plotly.js does not know) becomes its list of colours, and the template (``"none"``, or
    plotly's default where none is named) its definition; so the JSON is what a validated
    ``go.Figure(data=data, layout=layout)`` writes, but for the order of keys (``tests/library/test_figures_unvalidated``
    checks each builder). A misspelt property is not caught here: that test builds each figure
    with :data:`VALIDATE` on, where plotly refuses it."""
    if VALIDATE:
        return go.Figure(data=list(data), layout=layout)
    layout = _resolved(layout)
    for key in _LAYOUT_ARRAYS:  # validation leaves an empty list of shapes out
        if layout.get(key) == []:
            del layout[key]
    template = layout.get("template", pio.templates.default)
    if isinstance(template, str):
        layout["template"] = pio.templates[template]
    built = go.Figure(data=[_resolved(trace) for trace in data], layout=layout, _validate=False)
    # What a caller changes later (a title set on a grid) is validated as plotly always does:
    # unvalidated, a title given as a string would reach plotly.js as one, which it ignores.
    for part in (built, built.layout, *built.data):
        _validating(part)
    return built


def _validating(part: Any) -> None:
    """``part`` (a plotly figure or object) and its sub-objects validate their changes again."""
    part._validate = True
    for child in getattr(part, "_compound_props", {}).values():
        if child is not None:
            _validating(child)
    for children in getattr(part, "_compound_array_props", {}).values():
        for child in children or ():
            _validating(child)


def _resolved(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with every named colour scale in it (at any depth) as its list of colours; the
    dicts on the way copied, the rest (arrays, labels) shared."""
    out = dict(spec)
    for key, value in spec.items():
        if key == "colorscale" and isinstance(value, str):
            out[key] = [list(pair) for pair in _named_colorscale(value)]
        elif isinstance(value, dict):
            out[key] = _resolved(value)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            out[key] = [_resolved(item) if isinstance(item, dict) else item for item in value]
    return out


@functools.cache
def _named_colorscale(name: str) -> tuple[tuple[float, str], ...]:
    return tuple(tuple(pair) for pair in _COLORSCALE.validate_coerce(name))


def font_size(large_font: bool) -> int:
    """Base font size: larger for lecturers projecting in a hall."""
    return _FONT_SIZE[bool(large_font)]


def base_layout(
    title: str, height: int, large_font: bool, *, narrowest: float | None = None, **extra: Any
) -> dict[str, Any]:
    """The project's layout as a plain dict: title, fixed height (``gr.Plot`` has none), font.
    ``title`` is plain text (see :func:`plot_text`). ``narrowest``: the least width in px a page
    gives the figure (one of two side by side); a title longer than that is wrapped there, the
    figure growing by its extra lines (plotly never wraps a title: it runs past the figure's
    edge, which cuts it).

    Builders pass the whole layout to ``go.Figure`` once: plotly validates on every
    ``update_*``/``add_*`` call, and building piece by piece is several times slower.
    ``template="none"`` drops plotly's default template, about 6 KB of every figure's JSON.
    """
    size = font_size(large_font)
    layout: dict[str, Any] = {
        "template": "none",
        "title": {"text": plot_text(title), "font": {"size": round(size * 1.25)}, "x": 0.01},
        "height": height,
        "font": {"size": size},
        "margin": {"l": 70, "r": 20, "t": 60 + (20 if large_font else 0), "b": 60},
        "hoverlabel": {"font": {"size": size}},
    }
    layout.update(extra)
    if narrowest is not None:
        _wrap_title(layout, narrowest)
    return layout


# What a title keeps clear at a figure's sides: plotly's own padding and the title's ``x``.
TITLE_PADDING = 24
TITLE_SEPARATOR = " · "


def _wrap_title(layout: dict[str, Any], width: float) -> None:
    """Wrap ``layout``'s title to ``width`` px; its top margin and height grow by the lines
    added, so that the plot keeps its size."""
    title = layout["title"]
    size, room = title["font"]["size"], width - TITLE_PADDING
    # Lines end between the title's parts ("… from ▁ball · layer 6 · grey = masked"), a part
    # longer than a line at its words.
    lines: list[str] = []
    for part in title["text"].split(TITLE_SEPARATOR):
        joined = f"{lines[-1]}{TITLE_SEPARATOR}{part}" if lines else part
        if lines and text_width(without_tags(joined), size) <= room:
            lines[-1] = joined
        else:
            lines.extend(wrap_words(part, size, room))
    if len(lines) > 1:
        title["text"] = "<br>".join(lines)
        extra = round((len(lines) - 1) * 1.3 * size)  # as `narrow` counts a title's lines
        layout["margin"]["t"] += extra
        layout["height"] += extra


def panelled_layout(title: str, height: int, large_font: bool, **extra: Any) -> dict[str, Any]:
    """:func:`base_layout` with 30 px more above the plot, for panel titles or a legend there."""
    layout = base_layout(title, height, large_font, **extra)
    layout["margin"]["t"] += 30
    return layout


def panel_domains(n: int, gap: float = 0.08) -> list[list[float]]:
    """Horizontal domains of ``n`` side-by-side panels (cheaper than ``make_subplots``)."""
    width = (1.0 - gap * (n - 1)) / n
    return [[i * (width + gap), i * (width + gap) + width] for i in range(n)]


def panel_title(text: str, domain: Sequence[float], large_font: bool) -> dict[str, Any]:
    """An annotation above a panel, like ``make_subplots``' subplot titles."""
    return {
        "text": plot_text(text),
        "x": (domain[0] + domain[1]) / 2,
        "y": 1.0,
        "xref": "paper",
        "yref": "paper",
        "xanchor": "center",
        "yanchor": "bottom",
        "showarrow": False,
        "font": {"size": font_size(large_font)},
    }


def panel_titles(
    names: Iterable[str], domains: Iterable[Sequence[float]], large_font: bool
) -> list[dict[str, Any]]:
    """A :func:`panel_title` above each panel: ``names[i]`` over ``domains[i]``."""
    return [
        panel_title(name, domain, large_font) for name, domain in zip(names, domains, strict=True)
    ]


def category_axis(title: str, labels: Sequence[str], large_font: bool) -> dict[str, Any]:
    """Axis settings for token labels: every label shown in order, automargin on."""
    return {
        "title": {"text": title},
        "type": "category",
        "categoryorder": "array",
        "categoryarray": list(labels),
        "tickfont": {"size": font_size(large_font) - 1},
        "automargin": True,
        "showgrid": False,
        "zeroline": False,
    }


def text_width(text: str, size: float) -> float:
    """Pixels ``text`` takes at font ``size``, estimated on the wide side of the sans-serif fonts
    a browser falls back to (DejaVu Sans is the widest common one): 1 em an East Asian wide
    character, 0.92 em ``m``/``w``/``@``/``%``, 0.7 em a capital, digit or ``#``, 0.6 em
    anything else."""
    width = 0.0
    for ch in plain_text(text):
        if unicodedata.east_asian_width(ch) in "WF":
            em = 1.0
        elif ch in "mwMW@%":
            em = 0.92
        elif ch.isupper() or ch.isdigit() or ch == "#":
            em = 0.7
        else:
            em = 0.6
        width += em * size
    return width


def without_tags(text: str) -> str:
    """The characters plotly shows of ``text`` (its tags, ``<br>`` and ``<b>``, left out)."""
    return re.sub(r"<[^>]*>", "", text)


def wrap_words(text: str, size: float, room: float) -> list[str]:
    """``text`` (plotly text: entities and tags count as what they show) cut at spaces into
    lines of at most ``room`` px at font ``size``; a word longer than ``room`` stands alone.
    Existing ``<br>`` breaks are kept."""
    lines: list[str] = []
    for part in re.split(r"<br\s*/?>", text):
        line = ""
        for word in part.split(" "):
            candidate = f"{line} {word}" if line else word
            if line and text_width(without_tags(candidate), size) > room:
                lines.append(line)
                line = word
            else:
                line = candidate
        lines.append(line)
    return lines


def steady_left_margin(
    layout: dict[str, Any], labels: Sequence[str], large_font: bool, *, titled: bool
) -> None:
    """Fit ``layout``'s left margin to its y axis's tick ``labels`` here, and turn that axis's
    automargin off (``titled``: the axis has a title, left of the labels).

    Plotly's automargin measures the labels once the figure is drawn and, when the margin they
    need differs from the one drawn with, draws the whole figure again. A figure redrawn at
    every Generate step (new candidate tokens, one more query row) was laid out twice per step:
    about a quarter of plotly's work in a Step. The margin is rounded up to 10 px and never
    below the project's 70 px, so labels of similar length keep one margin across steps.
    """
    size = font_size(large_font)
    widest = max((text_width(label, size - 1) for label in labels), default=0.0)
    need = 12 + widest + (size * 1.3 + 14 if titled else 0)
    margin = layout["margin"]
    margin["l"] = max(margin["l"], 10 * math.ceil(need / 10))
    layout["yaxis"] = {**layout["yaxis"], "automargin": False}


def probability_bars(
    p: Any, labels: Sequence[str], what: str, digits: int = 1, **extra: Any
) -> dict[str, Any]:
    """A horizontal bar trace of the probabilities ``p`` (one per label, top to bottom), each
    written in percent (``digits`` decimals) just outside its bar, where the plot's edge does
    not cut it off; hovering shows the label and ``what = p`` to four decimals. ``extra``: the
    trace's other properties (colours, axes, a legend name)."""
    return dict(
        type="bar",
        x=p,
        y=labels,
        orientation="h",
        texttemplate=f"%{{x:.{digits}%}}",
        textposition="outside",
        cliponaxis=False,
        hovertemplate=f"%{{y}}<br>{what} = %{{x:.4f}}<extra></extra>",
        **extra,
    )


def check_labels(labels: Sequence[str] | None, n: int, what: str) -> list[str]:
    """``labels`` as a list (``"0".."n-1"`` if None), checked for length and uniqueness, each
    passed through :func:`plot_text` (the builder draws them as they are written)."""
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{len(labels)} {what} labels for {n} {what} positions")
    if len(set(labels)) != n:
        raise ValueError(
            f"{what} labels must be unique (plotly merges repeated categories); "
            "use token_labels(pieces)"
        )
    return [plot_text(label) for label in labels]


def heatmap_height(n_rows: int, large_font: bool, minimum: int = 320, maximum: int = 900) -> int:
    """A height in pixels that gives each row room for its label, within bounds.

    Large font's title, axes and rotated tick labels take more of the figure (about 220 px
    against 170 at 1920×1080) and each row's label needs more room (19 px text): the fixed
    part, the room per row and the minimum grow with it. With the laptop's figures, a 13-row
    map in Large font kept 21 px a row, and plotly left out every other label."""
    if not large_font:
        return int(min(maximum, max(minimum, 120 + 18 * n_rows)))
    return int(min(maximum, max(minimum * 3 // 2, 200 + 28 * n_rows)))


# A colour scale set by its largest value shows one outlier and flattens everything else (one
# position's huge dot product, a few embedding dimensions, one sharp head among 400 tokens):
# past OUTLIER_FACTOR × the ROBUST_PERCENTILE-th percentile, the scale stops at that percentile,
# brighter cells saturate, and the colour bar says so.
ROBUST_PERCENTILE = 99.0
OUTLIER_FACTOR = 1.5


def robust_limit(
    values: Any, percentile: float = ROBUST_PERCENTILE, unit: float = 1.0
) -> tuple[float, str]:
    """The colour limit that shows ``values`` (any shape; NaN and ±inf ignored), and a note
    for the colour bar's title ("" when the limit is the largest ``|value|``), which gives the
    largest value in units of ``unit`` (1000 for data shipped as thousandths).

    The limit is the largest ``|value|``, unless it exceeds ``OUTLIER_FACTOR`` × the
    ``percentile``-th percentile of ``|values|``: then that percentile (1.0 when all are 0).
    """
    magnitudes = np.abs(np.asarray(values, dtype=np.float64))
    magnitudes = magnitudes[np.isfinite(magnitudes)]
    if not magnitudes.size or magnitudes.max() == 0:
        return 1.0, ""
    top, cut = float(magnitudes.max()), float(np.percentile(magnitudes, percentile))
    if cut > 0 and top > OUTLIER_FACTOR * cut:
        return cut, f"<br><sup>to {percentile:g}th pct (max {top / unit:.3g})</sup>"
    return top, ""


def weight_limit(weights: Any, unit: float = 1.0) -> tuple[float, str]:
    """The top of an attention-weight colour scale: ``unit`` (weights run 0..1), unless nearly
    every weight is small (a long input spreads attention thin) and a few outliers would paint
    the rest dark; then :func:`robust_limit`'s percentile and its note. ``weights`` in units of
    ``unit`` (1 for weights, 1000 for thousandths), any shape; NaN ignored."""
    limit, note = robust_limit(weights, unit=unit)
    return (limit, note) if note and limit < 0.5 * unit else (unit, "")


def weight_ticks(limit: float, unit: float = 1.0) -> dict[str, Any]:
    """Colour-bar ticks that read in weights (0..1) for a scale from 0 to ``limit`` whose data
    are in units of ``unit`` (1000 for thousandths): one unit on every weight colour bar."""
    top = limit / unit
    step = 10.0 ** math.floor(math.log10(top / 5)) if top > 0 else 0.2
    for factor in (1, 2, 2.5, 5, 10):
        if top / (step * factor) <= 5:
            step *= factor
            break
    values = np.arange(0, top + step * 1e-6, step)
    return {
        "tickvals": [round(float(v * unit), 9) for v in values],
        "ticktext": [f"{v:.4g}" for v in values],
    }
