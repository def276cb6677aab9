"""The panels drawn from one request's data (:class:`~transformer.lab.head_view.AttentionData`):
one head's (scores
beside weights, or before beside after a what-if or a mistake; the masks, the difference and
the summary), and every head of every layer (the grid). Drawing only: the data holds what they
show."""

from __future__ import annotations

from typing import Any

from transformer import figures
from transformer.figures.attention import GRID_MAX_CELLS, weights_beside_figure
from transformer.lab.head_view import AttentionData, AttentionView

Panels = tuple[Any, Any, Any, str]  # the head, the masks, the change, the summary (Markdown)
# The fewest cells a grid keeps however long the text (a 6 x 12 grid: ~45 x 45 per tile).
GRID_MIN_CELLS = 150_000


def every_panel(data: AttentionData) -> tuple[Any, ...]:
    """Every panel of the tab from one request's data: :func:`head_panels`, then the grid."""
    return (*head_panels(data), grid_panel(data.view, data.large))


def head_panels(data: AttentionData) -> Panels:
    """The head view, the masks, the what-if difference and the summary: the head's scores
    beside its weights, or (with a what-if or one of the seeds' mistakes on) its weights before
    beside after, and their difference."""
    view, large, change = data.view, data.large, data.change
    masks = figures.masks_figure(
        view.keys_real,
        view.query_labels,
        view.key_labels,
        causal=view.analysis.trace.causal if view.kind == "decoder_self" else None,
        changed=change.mask if change is not None else None,
        changed_title=change.mask_title if change is not None else "with the what-if",
        large_font=large,
    )
    if change is None:
        single = figures.scores_and_weights_figure(
            view.records[view.layer],
            view.row,
            view.head,
            view.query_labels,
            view.key_labels,
            padded_queries=view.padded,
            large_font=large,
        )
        title, line = data.waiting
        return (
            single,
            masks,
            figures.placeholder_figure(title, line, large_font=large),
            data.summary,
        )
    single = weights_beside_figure(
        change.before,
        change.after,
        view.query_labels,
        view.key_labels,
        masked_before=change.masked_before,
        masked_after=change.masked_after,
        panel_titles=change.panel_titles,
        title=change.title,
        padded_queries=view.padded,
        large_font=large,
    )
    diff = figures.attention_difference_figure(
        change.before,
        change.after,
        view.query_labels,
        view.key_labels,
        masked=change.masked_before & change.masked_after,
        title=change.diff_title,
        large_font=large,
    )
    return single, masks, diff, data.summary


def grid_panel(view: AttentionView, large: bool) -> Any:
    """Every head of every layer of one view's attention kind, on one colour scale. Its cell
    budget leaves room for the single head (float32, exact, two grid cells' bytes per cell)
    that ships in the same response: together under 3 MB."""
    n_queries, n_keys = view.padded.numel(), view.keys_real.numel()  # (Tq,), (Tk,)
    budget = max(GRID_MIN_CELLS, GRID_MAX_CELLS - 2 * n_queries * n_keys)
    return figures.grid_figure(
        view.records,
        view.row,
        view.query_labels,
        view.key_labels,
        max_cells=budget,
        padded_queries=view.padded,
        large_font=large,
    )
