"""The tab's module-level handlers (``/inside_layer`` and the live controls), taking the
registry first."""

from __future__ import annotations

from typing import Any

import gradio as gr

from ...serving import endpoints
from ...serving.errors import friendly, gpu
from ...serving.state import ModelRegistry, SessionModels
from .view import EXAMPLE_TEXT, SECTIONS, InsideRequest, draw, reading

N_OUTPUTS = 1 + 4 * len(SECTIONS)


takes_request = endpoints.takes_request(reading(fit=False))
"""``handler(registry, request)`` as an event handler: it takes the components' values in the
order the ``/inside_layer`` API has them and builds the request once, refusing a value the
model or the sentence lacks."""
takes_fitted = endpoints.takes_request(reading(fit=True))
"""The same, with a value the model or the sentence lacks moved into range."""


def _updates(fitted: InsideRequest) -> tuple[Any, Any, Any, Any]:
    """The Stack choices and the Layer, Head and Query-token ranges of a fitted request."""
    return (
        # Always shown: a hidden radio keeps its old value in the browser, which the next
        # event would send against the new choices (and a single choice tells what the model has).
        gr.Radio(choices=fitted.stacks, value=fitted.stack),
        gr.Slider(
            minimum=1,
            maximum=max(2, fitted.n_layers),
            value=fitted.layer + 1,
            visible=fitted.n_layers > 1,
        ),
        gr.Slider(
            minimum=1,
            maximum=max(2, fitted.n_heads),
            value=fitted.head + 1,
            visible=fitted.n_heads > 1,
        ),
        gr.Dropdown(choices=fitted.choices, value=fitted.query),
    )


@friendly
@gpu
@endpoints.takes_request(
    reading(fit=True), ("text", "name", "stack", "layer", "head", "query", "session")
)
def controls(registry: ModelRegistry, request: InsideRequest) -> tuple[Any, Any, Any, Any]:
    """The Stack choices and the Layer, Head and Query-token ranges this model and this
    sentence have (values kept where they still apply)."""
    return _updates(request)


def _draw(request: InsideRequest) -> tuple[Any, ...]:
    text_summary, drawn = draw(request)
    outputs: list[Any] = [text_summary]
    # gr.update, not gr.Accordion(...): the first view is drawn while the layout is built, where
    # a component made here would be placed on the page.
    for title, (steps, code, figure, present) in zip(
        numbered_titles([present for *_, present in drawn]), drawn, strict=True
    ):
        outputs += [gr.update(label=title, visible=present), steps, code, figure]
    return tuple(outputs)


def numbered_titles(present: list[bool]) -> list[str]:
    """The sections' titles (:data:`SECTIONS`), numbered 1, 2, 3 … over the sections this
    layer has: an encoder's layer has no cross-attention, and its feed-forward is its third
    section, not its fourth."""
    titles, number = [], 0
    for (_, title), shown in zip(SECTIONS, present, strict=True):
        number += shown
        titles.append(f"{number if shown else '–'} · {title.split(' · ', 1)[1]}")
    return titles


@friendly
@gpu
@takes_request
def inside_layer(registry: ModelRegistry, request: InsideRequest) -> tuple[Any, ...]:
    """The ``/inside_layer`` endpoint: one layer, step by step, for one query token and one
    head (layer and head from 1, the token by its position from 0, as the menu labels it).

    Returns the summary, then per section (input, self-attention, cross-attention,
    feed-forward) the accordion (hidden where the layer has no such section), the steps with
    their shapes, the code lines in order and the figure."""
    return _draw(request)


@friendly
@gpu
@takes_fitted
def refresh(registry: ModelRegistry, request: InsideRequest) -> tuple[Any, ...]:
    """Fit the controls to this model and sentence, then draw with the fitted values, in one
    event: a redraw chained after the fit would read the old choice from the browser (a stack
    or a token the new model does not have) and fail."""
    return (*_updates(request), *_draw(request))


def first_view(
    registry: ModelRegistry, name: str, stack: str, query: int
) -> tuple[Any, ...] | None:
    """What the tab shows when it opens: its example, drawn once at start (a bundled model takes
    milliseconds), or None when the model is unavailable."""
    try:
        return inside_layer(
            registry, EXAMPLE_TEXT, name, stack, 1, 1, query, False, SessionModels()
        )
    except gr.Error:
        return None
