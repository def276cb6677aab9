"""Shared pieces of every figure: labels, array conversion, fonts, the masked-cell colour.

Figure builders are pure functions (arrays or trace records in, ``plotly`` figures out); they
import plotly and numpy, torch only to accept tensors, and never the UI.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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


def token_labels(pieces: Sequence[str]) -> list[str]:
    """Unique axis labels ``"index:piece"`` for a sequence of token pieces.

    Plotly merges repeated category labels (two ``"the"`` would become one row), so every
    label carries its position: ``["the", "cat", "the"]`` → ``["0:the", "1:cat", "2:the"]``.
    """
    return [f"{i}:{piece}" for i, piece in enumerate(pieces)]


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


def font_size(large_font: bool) -> int:
    """Base font size: larger for lecturers projecting in a hall."""
    return _FONT_SIZE[bool(large_font)]


def base_layout(title: str, height: int, large_font: bool, **extra: Any) -> dict[str, Any]:
    """The project's layout as a plain dict: title, fixed height (``gr.Plot`` has none), font.

    Builders pass the whole layout to ``go.Figure`` once: plotly validates on every
    ``update_*``/``add_*`` call, and building piece by piece is several times slower.
    ``template="none"`` drops plotly's default template, about 6 KB of every figure's JSON.
    """
    size = font_size(large_font)
    layout: dict[str, Any] = {
        "template": "none",
        "title": {"text": title, "font": {"size": round(size * 1.25)}, "x": 0.01},
        "height": height,
        "font": {"size": size},
        "margin": {"l": 70, "r": 20, "t": 60 + (20 if large_font else 0), "b": 60},
        "hoverlabel": {"font": {"size": size}},
    }
    layout.update(extra)
    return layout


def panel_domains(n: int, gap: float = 0.08) -> list[list[float]]:
    """Horizontal domains of ``n`` side-by-side panels (cheaper than ``make_subplots``)."""
    width = (1.0 - gap * (n - 1)) / n
    return [[i * (width + gap), i * (width + gap) + width] for i in range(n)]


def panel_title(text: str, domain: Sequence[float], large_font: bool) -> dict[str, Any]:
    """An annotation above a panel, like ``make_subplots``' subplot titles."""
    return {
        "text": text,
        "x": (domain[0] + domain[1]) / 2,
        "y": 1.0,
        "xref": "paper",
        "yref": "paper",
        "xanchor": "center",
        "yanchor": "bottom",
        "showarrow": False,
        "font": {"size": font_size(large_font)},
    }


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


def check_labels(labels: Sequence[str] | None, n: int, what: str) -> list[str]:
    """``labels`` as a list (``"0".."n-1"`` if None), checked for length and uniqueness."""
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
    return labels


def heatmap_height(n_rows: int, large_font: bool, minimum: int = 320, maximum: int = 900) -> int:
    """A height in pixels that gives each row room for its label, within bounds."""
    per_row = 26 if large_font else 18
    return int(min(maximum, max(minimum, 120 + per_row * n_rows)))
