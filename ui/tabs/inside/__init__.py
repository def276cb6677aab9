"""Inside a layer: one layer of any model, step by step, for one query token and one head,
with each step's shape, values and code line.

Modules: `view` (validating a request, the summary, step lists and code listings), `handlers`
(the module-level handlers), `layout` (build())."""

from .handlers import controls, first_view, inside_layer, refresh
from .layout import build
from .view import EXAMPLE_TEXT, SECTIONS, choose, layers_in, query_choices, stacks_for

__all__ = [
    "EXAMPLE_TEXT",
    "SECTIONS",
    "build",
    "choose",
    "controls",
    "first_view",
    "inside_layer",
    "layers_in",
    "query_choices",
    "refresh",
    "stacks_for",
]
