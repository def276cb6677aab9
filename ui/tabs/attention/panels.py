"""The panels of the tab, from one request's data
(:class:`~transformer.lab.head_view.AttentionData`): one head's figures and summary, and every
head of every layer (the grid). The figures module draws them; this module orders them as the
page shows them."""

from __future__ import annotations

from typing import Any

from transformer.figures.attention import head_figures, view_grid_figure
from transformer.lab.head_view import AttentionData, AttentionView

Panels = tuple[Any, Any, Any, str]  # the head, the masks, the change, the summary (Markdown)

# The least width in px the figures' column takes beside the controls: on a narrower page (a
# laptop with the tour's sidebar open) it goes below them, at the page's width, instead of
# squeezing a map of twenty rows into 460 px.
HEAD_COLUMN_WIDTH = 620
# The least width in px the supported pages give the head's figures and the grid, where their
# titles wrap (plotly runs a long title past the figure's edge), in the laptop's font and in
# Large font. The head's: a laptop's (1280 × 800), where the column sits beside the controls
# (with the tour open it goes below them, wider), and a projector's (1920 × 1080) with the
# tour open. The grid's (a row of its own): beside the tour's sidebar on a laptop, and in Large
# font the least a page gives it without the tour, which a projector's with the tour exceeds.
HEAD_WIDTH = {False: 800, True: 980}
GRID_WIDTH = {False: 850, True: 1210}


def every_panel(data: AttentionData) -> tuple[Any, ...]:
    """Every panel of the tab from one request's data: :func:`head_panels`, then the grid."""
    head = head_figures(data, HEAD_WIDTH[data.large])
    grid = view_grid_figure(data.view, data.large, GRID_WIDTH[data.large])
    return (*head, data.summary, grid)


def head_panels(data: AttentionData) -> Panels:
    """The head view, the masks, the what-if difference and the summary
    (:func:`~transformer.figures.attention.head_figures`)."""
    return (*head_figures(data, HEAD_WIDTH[data.large]), data.summary)


def grid_panel(view: AttentionView, large: bool) -> Any:
    """Every head of every layer of one view's attention kind
    (:func:`~transformer.figures.attention.view_grid_figure`)."""
    return view_grid_figure(view, large, GRID_WIDTH[large])
