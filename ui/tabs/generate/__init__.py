"""Generate tab: autoregressive decoding one step at a time (greedy, sampling or beam search),
with the probabilities behind each choice, the attention of the new token, and teacher forcing
against a reference.

Works for every model with a decoder: the bundled ones, and pretrained models of the GPT-2
family (which continue a prompt) and the Marian family (which translate, decoding from the
model's own start token and stopping at its end token). An encoder-only model (BERT, MiniLM)
cannot generate: the tab says so and disables its buttons.

Modules: ``request`` (the controls read once), ``decoding``, ``drawing``, ``handlers``,
``layout``."""

from __future__ import annotations

from .decoding import (
    EXAMPLES,
    OPENING,
    RESTARTED,
    can_generate,
    cannot_generate,
    current,
    example_reference,
    generating_models,
    reference_for,
    start,
    start_ids,
    unreadable,
    unreadable_note,
)
from .drawing import Drawn, draw, placeholders
from .handlers import (
    back,
    first_step,
    force,
    force_view,
    model_controls,
    redraw,
    redraw_attention,
    reset,
    run,
    step,
    strategy_controls,
)
from .layout import build
from .request import INPUT_NAMES, TOP_K_SHOWN, GenerateRequest, decoding_settings

__all__ = [
    "EXAMPLES",
    "INPUT_NAMES",
    "OPENING",
    "RESTARTED",
    "TOP_K_SHOWN",
    "Drawn",
    "GenerateRequest",
    "back",
    "build",
    "can_generate",
    "cannot_generate",
    "current",
    "decoding_settings",
    "draw",
    "example_reference",
    "first_step",
    "force",
    "force_view",
    "generating_models",
    "model_controls",
    "placeholders",
    "redraw",
    "redraw_attention",
    "reference_for",
    "reset",
    "run",
    "start",
    "start_ids",
    "step",
    "strategy_controls",
    "unreadable",
    "unreadable_note",
]
