"""Figures of an exercise: the model's own numbers behind its answer, and a class's answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ..lab.exercises import Asked

MODEL_COLOUR = "#2563eb"  # the model's answer
OTHER_COLOUR = "#94a3b8"
RIGHT_COLOUR = "#16a34a"
WRONG_COLOUR = "#dc2626"


def exercise_figure(asked: Asked, width: int | None = None) -> go.Figure:
    """The figure that shows an asked exercise's answer: one bar per label (the model's
    answer in blue), or for a seeds' mistake the attention map the question is about (rows:
    queries, columns: keys)."""
    if asked.heatmap is not None:
        labels = asked.heatmap_labels or [str(i) for i in range(len(asked.heatmap))]
        figure = go.Figure(
            go.Heatmap(
                z=np.asarray(asked.heatmap, dtype=np.float32),
                x=labels,
                y=labels,
                colorscale="Blues",
                zmin=0,
                zmax=1,
                hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>",
                colorbar={"title": {"text": "weight"}},
            )
        )
        figure.update_yaxes(autorange="reversed", title="query", type="category")
        figure.update_xaxes(title="key", type="category")
    else:
        colours = [
            MODEL_COLOUR if label == asked.answer else OTHER_COLOUR for label in asked.labels
        ]
        figure = go.Figure(
            go.Bar(
                x=asked.labels,
                y=np.asarray(asked.values, dtype=np.float32),
                marker_color=colours,
                hovertemplate="%{x}<br>" + asked.value_name + " %{y:.3f}<extra></extra>",
            )
        )
        figure.update_xaxes(type="category")
        figure.update_yaxes(title=asked.value_name)
    figure.update_layout(
        title={"text": asked.title, "x": 0.01, "xanchor": "left"},
        height=340,
        width=width,
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
    )
    return figure


def class_figure(
    choices: Sequence[str], counts: Mapping[str, int], answer: str | None, mine: str | None = None
) -> go.Figure:
    """The class's answers: one horizontal bar per choice (how many students chose it), the
    model's ``answer`` in green, the others red once it is known (grey before); ``mine``, the
    reader's own answer, is marked."""
    shown = list(choices)[::-1]  # the first choice at the top
    values = [int(counts.get(choice, 0)) for choice in shown]
    if answer is None:
        colours = [OTHER_COLOUR] * len(shown)
    else:
        colours = [RIGHT_COLOUR if choice == answer else WRONG_COLOUR for choice in shown]

    def label(choice: str) -> str:
        # The model's answer is named even where nobody chose it (a bar of length 0).
        marks = [" ✓ the model" if choice == answer else "", "  ← you" if choice == mine else ""]
        return choice + "".join(marks)

    labels = [label(choice) for choice in shown]
    total = sum(values)
    figure = go.Figure(
        go.Bar(
            x=values,
            y=labels,
            orientation="h",
            marker_color=colours,
            text=[f"{v}" for v in values],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x} student(s)<extra></extra>",
        )
    )
    title = f"The class's answers ({total})"
    if answer is not None:
        title += f": the model's answer is {answer}"
    figure.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        height=max(220, 100 + 30 * len(shown)),
        margin={"l": 20, "r": 40, "t": 50, "b": 40},
        xaxis={
            "title": "students",
            "rangemode": "tozero",
            "dtick": max(1, (max(values) or 1) // 5),
        },
        yaxis={"type": "category", "automargin": True},
    )
    return figure
