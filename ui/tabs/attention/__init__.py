"""Attention tab: one head (scores beside weights), the masks, every head of every layer, and
what-if switches recomputed beside the original pass.

Modules: `request` (the controls read once: :class:`AttentionRequest`, with the registry's
analysis and changed pass), `view` (other tabs' attention views from raw values), `panels`
(one head's panels and the grid, drawn from the data that
:func:`transformer.lab.head_view.attention_data` builds of one analysis), `handlers` (the
module-level handlers), `layout` (build())."""

from transformer.figures.attention import PAD_ROW_MARK

from .handlers import attention, controls, everything, grid
from .layout import build
from .panels import grid_panel
from .request import AttentionRequest
from .view import (
    ATTENTION_KINDS,
    EXAMPLE_SENTENCES,
    AttentionView,
    attention_view,
    kinds_for,
    layers_of,
    padded_query_rows,
    sentence_count,
)

__all__ = [
    "ATTENTION_KINDS",
    "EXAMPLE_SENTENCES",
    "PAD_ROW_MARK",
    "AttentionRequest",
    "AttentionView",
    "attention",
    "attention_view",
    "build",
    "controls",
    "everything",
    "grid",
    "grid_panel",
    "kinds_for",
    "layers_of",
    "padded_query_rows",
    "sentence_count",
]
