"""The panels of the tab, from one request's data
(:class:`~transformer.lab.head_view.AttentionData`): one head's figures and summary, and every
head of every layer (the grid). The figures module draws them; this module orders them as the
page shows them."""

from __future__ import annotations

from typing import Any

from transformer.figures.attention import head_figures, view_grid_figure
from transformer.lab.head_view import AttentionData, AttentionView

Panels = tuple[Any, Any, Any, str]  # the head, the masks, the change, the summary (Markdown)


def every_panel(data: AttentionData) -> tuple[Any, ...]:
    """Every panel of the tab from one request's data: :func:`head_panels`, then the grid."""
    head = head_figures(data)
    return (*head, data.summary, view_grid_figure(data.view, data.large))


def head_panels(data: AttentionData) -> Panels:
    """The head view, the masks, the what-if difference and the summary
    (:func:`~transformer.figures.attention.head_figures`)."""
    return (*head_figures(data), data.summary)


def grid_panel(view: AttentionView, large: bool) -> Any:
    """Every head of every layer of one view's attention kind
    (:func:`~transformer.figures.attention.view_grid_figure`)."""
    return view_grid_figure(view, large)
