"""Panels drawn only while their accordion is open.

Generate's key/value-cache view times the next step twice, and its silent-mistakes panel
generates two continuations and reads a paragraph twice: seconds of CPU on SmolLM2 each time the
prompt or the decoding changes. Closed (as a page opens), they cost nothing: opening the
accordion draws them, and a change redraws them only while they are open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

PRIVATE: dict[str, Any] = {"api_visibility": "private"}


def open_flag(accordion: gr.Accordion) -> tuple[gr.State, Any]:
    """A per-page flag that follows ``accordion`` (``True`` while open; a page opens with it
    closed) and the event that opens it (chain the panel's drawing after it)."""
    shown = gr.State(False)
    opened = accordion.expand(lambda: True, None, shown, queue=False, **PRIVATE)
    accordion.collapse(lambda: False, None, shown, queue=False, **PRIVATE)
    return shown, opened


def if_shown(handler: Callable[..., tuple], n_outputs: int) -> Callable[..., tuple]:
    """``handler`` for events whose last input is an :func:`open_flag`: it is called with the
    other inputs while the flag is set; otherwise nothing is computed or sent (``gr.skip()``
    for each of the ``n_outputs``)."""

    def when_shown(*inputs: Any) -> tuple:
        *rest, shown = inputs
        if not shown:
            return tuple(gr.skip() for _ in range(n_outputs))
        return handler(*rest)

    when_shown.__name__ = f"{getattr(handler, '__name__', 'panel')}_if_shown"
    when_shown.__doc__ = handler.__doc__
    return when_shown
