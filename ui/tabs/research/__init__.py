"""Which part? The methods researchers use to ask which part of a model made a prediction
(activation patching, head ablation, direct logit attribution, input attribution, why a head
attends) and two models side by side, each explained beside its figure with its code.

Modules: `text` (presets, limits, explanations), `methods` (the library's methods read into
plain values), `request` (what each method's controls ask for, read once), `handlers` (the
module-level handlers, one a method, taking its request), `layout` (build())."""

from .handlers import (
    research_ablation,
    research_input,
    research_logit,
    research_patching,
    research_scores,
    research_side_by_side,
)
from .layout import build, first_views

__all__ = [
    "build",
    "first_views",
    "research_ablation",
    "research_input",
    "research_logit",
    "research_patching",
    "research_scores",
    "research_side_by_side",
]
