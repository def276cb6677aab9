"""Training curves: loss and accuracy, train and validation, from a list of dict records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from ..core.util import is_number
from .common import PALETTE, panel_domains, panelled_layout


def training_curves_figure(
    history: Sequence[Mapping[str, Any]],
    *,
    x: str = "step",
    loss_keys: Sequence[str] | None = None,
    accuracy_keys: Sequence[str] | None = None,
    title: str = "Training",
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """Loss (left) and accuracy (right) curves from records such as
    ``{"step": 100, "train_loss": 2.1, "val_loss": 2.3, "train_accuracy": 0.4}``.

    Args:
        history: one mapping per logged step, in order; a key may be missing from some records
            (validation is usually logged less often) and its curve skips them.
        x: the key for the horizontal axis.
        loss_keys, accuracy_keys: the keys to draw; by default every numeric key containing
            ``"loss"`` or ``"acc"``. Keys starting with ``"val"`` are dashed.
    """
    keys = list(dict.fromkeys(k for record in history for k in record if k != x))
    numeric = [k for k in keys if any(is_number(r.get(k)) for r in history)]
    if loss_keys is None:
        loss_keys = [k for k in numeric if "loss" in k.lower()]
    if accuracy_keys is None:
        accuracy_keys = [k for k in numeric if "acc" in k.lower()]

    domains = panel_domains(2, gap=0.1)
    traces = []
    # One colour per curve across both panels (a loss and an accuracy never share one).
    curves = [(panel, key) for panel, keys in enumerate((loss_keys, accuracy_keys)) for key in keys]
    for i, (panel, key) in enumerate(curves):
        points = [(r.get(x, n), r[key]) for n, r in enumerate(history) if is_number(r.get(key))]
        traces.append(
            go.Scatter(
                x=[p[0] for p in points],
                y=[p[1] for p in points],
                name=key,
                mode="lines+markers" if len(points) < 30 else "lines",
                line={
                    "color": PALETTE[i % len(PALETTE)],
                    "dash": "dash" if key.lower().startswith("val") else "solid",
                },
                xaxis="x" if panel == 0 else "x2",
                yaxis="y" if panel == 0 else "y2",
                hovertemplate=f"{key}<br>{x} %{{x:,}}<br>%{{y:.4g}}<extra></extra>",
            )
        )
    grid = {"gridcolor": "#eee", "zeroline": False}
    layout = panelled_layout(
        title,
        height or (480 if large_font else 380),
        large_font,
        xaxis={**grid, "title": {"text": x}, "domain": domains[0]},
        yaxis={**grid, "title": {"text": "loss"}, "rangemode": "tozero"},
        xaxis2={**grid, "title": {"text": x}, "domain": domains[1], "anchor": "y2"},
        yaxis2={**grid, "title": {"text": "accuracy"}, "range": [0, 1.02], "anchor": "x2"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
    )
    if not traces:
        layout["annotations"] = [
            {
                "text": "no training records yet",
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
            }
        ]
    return go.Figure(traces, layout)
