"""The tab's module-level handlers (``/attention``, ``/attention_grid``, the live controls and
redraw), taking the registry first."""

from __future__ import annotations

import dataclasses
from typing import Any

import gradio as gr

from transformer.lab.head_view import AttentionData, attention_data, head_view

from ...serving.endpoints import takes_request
from ...serving.errors import friendly, gpu
from ...serving.state import ModelRegistry, SessionModels
from . import mistakes as seed_mistakes
from .panels import Panels, every_panel, grid_panel, head_panels
from .request import AttentionRequest, reading
from .view import EXAMPLE_SENTENCES


def _fitted(request: AttentionRequest) -> tuple[Any, ...]:
    """The Which-attention radio and the Layer, Head and Sentence sliders of a fitted request."""
    return (
        gr.Radio(choices=list(request.kinds), value=request.kind_label),
        _slider(request.n_layers, request.layer + 1),
        _slider(request.n_heads, request.head + 1),
        _slider(request.n_rows, request.row + 1),
    )


def _data(request: AttentionRequest) -> AttentionData:
    """What a read request's panels draw, built from its one analysis (and its changed pass)."""
    return attention_data(
        *request.at,
        sentences=request.lines,
        task=request.checkpoint.info.get("task"),
        kind_title=request.kind_label.capitalize(),
        what_if=request.what_if,
        mistake=request.mistake,
        changed=request.changed,
        refused=request.refused,
        large=request.large,
    )


@friendly
@takes_request(
    reading(fit=True, check_text=False),
    ("sentences", "name", "kind", "layer", "head", "row", "session"),
    optional=True,
)
def controls(registry: ModelRegistry, request: AttentionRequest) -> tuple[Any, ...]:
    """The Which-attention choices and the Layer, Head and Sentence ranges that this model and
    these sentences have (values kept where they still apply; the text is not checked: the
    Sentence range counts its non-empty lines)."""
    return _fitted(request)


def _slider(n: int, value: int) -> Any:
    """A 1..n slider update; hidden when there is only one choice (a slider needs two)."""
    return gr.Slider(minimum=1, maximum=max(n, 2), value=value, visible=n > 1)


@friendly
@gpu
@takes_request(reading(fit=False), optional=True)
def attention(registry: ModelRegistry, request: AttentionRequest) -> Panels:
    """The ``/attention`` endpoint: one head (scores beside weights; with a what-if or one of
    the seeds' mistakes, the original weights beside the changed ones), the masks, the change of
    that head's weights and a summary."""
    return head_panels(_data(request))


@friendly
@gpu
@takes_request(reading(fit=True), optional=True)
def everything(registry: ModelRegistry, request: AttentionRequest) -> tuple[Any, ...]:
    """Every panel of the tab from one cached analysis: what each control redraws.

    A live redraw can arrive with a value from before the controls were fitted (a tour stop
    that changes the sentences, a quick second change): it draws what the fitted controls
    show (the request is read fitted) instead of answering with an error. ``/attention`` stays
    strict."""
    data = _data(request)
    return every_panel(data)


@friendly
@gpu
@takes_request(reading(fit=True), optional=True)
def refit_everything(registry: ModelRegistry, request: AttentionRequest) -> tuple[Any, ...]:
    """Fit the choices and ranges to the model and sentences (:func:`controls`, the seeds'
    mistakes that apply) and redraw every panel with the fitted values, in one event.

    One event, because a chain would send the next handler the Which-attention value from
    before the fit, which a new model's choices may no longer hold (gradio refuses it)."""
    if request.mistake not in request.mistakes:  # not offered for this model: "none"
        request = dataclasses.replace(request, mistake=None)
    mistake_u = seed_mistakes.menu(request.mistakes, request.mistake)
    # The what-if switches keep their choices (an event started before this one may still send
    # one of them); those this model has nothing for are unticked.
    switches = gr.update(value=[s.label for s in request.what_if])
    drawn = every_panel(_data(request))
    return (*_fitted(request), mistake_u, *drawn, switches)


@friendly
@gpu
@takes_request(
    reading(fit=False), ("sentences", "name", "kind", "row", "large", "session"), optional=True
)
def grid(registry: ModelRegistry, request: AttentionRequest) -> Any:
    """The ``/attention_grid`` endpoint: every head of every layer of one attention kind."""
    return grid_panel(head_view(*request.at), request.large)


def first_view(registry: ModelRegistry, name: str, kind: str) -> tuple[Any, ...]:
    """What the tab shows when it opens: every panel of its first example (built once, at
    start; a bundled model takes milliseconds). Empty panels if the model is unavailable."""
    try:
        return everything(
            registry, EXAMPLE_SENTENCES, name, kind, 2, 1, 1, [], False, SessionModels()
        )
    except gr.Error:
        return (None, None, None, "", None)
