"""The tab's module-level handlers (``/attention``, ``/attention_grid``, the live controls and
redraw), taking the registry first."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from transformer.lab.analysis import what_if_switches

from ...serving.errors import friendly, gpu
from ...serving.state import ModelRegistry, SessionModels
from . import mistakes as seed_mistakes
from .panels import _head_panels
from .view import (
    ATTENTION_KINDS,
    EXAMPLE_SENTENCES,
    AttentionRequest,
    AttentionView,
    _grid,
    attention_grid,
    attention_view,
    kinds_for,
    layers_of,
)


def _clamp(value: Any, high: int) -> int:
    try:
        return min(max(1, int(float(value))), high)
    except (TypeError, ValueError, OverflowError):
        return 1


def takes_request(
    handler: Callable[[ModelRegistry, AttentionRequest], Any],
) -> Callable[..., Any]:
    """``handler(registry, request)`` as an event handler: it takes the components' values in
    the order the endpoints' API has them and builds the request once."""

    def endpoint(
        registry: ModelRegistry,
        sentences: str,
        name: str,
        kind: str,
        layer: Any,
        head: Any,
        row: Any,
        what_if: list[str] | None,
        large: bool,
        session: SessionModels,
        mistake: str | None = None,
    ) -> Any:
        request = AttentionRequest.of(
            sentences, name, kind, layer, head, row, what_if, large, session, mistake
        )
        return handler(registry, request)

    endpoint.__name__ = endpoint.__qualname__ = handler.__name__
    endpoint.__doc__ = handler.__doc__
    endpoint.__module__ = handler.__module__
    return endpoint


@dataclass(frozen=True)
class Fitted:
    """What applies to one model and these sentences: the kinds, and ``(count, value)`` of
    layers, heads and sentences, with the request's values moved into range."""

    kinds: list[str]
    request: AttentionRequest
    ranges: tuple[tuple[int, int], ...]

    def updates(self) -> tuple[Any, ...]:
        """The Which-attention radio and the Layer, Head and Sentence sliders, fitted."""
        return (
            gr.Radio(choices=self.kinds, value=self.request.kind),
            *(_slider(n, value) for n, value in self.ranges),
        )


def fit(registry: ModelRegistry, request: AttentionRequest) -> Fitted:
    """The kinds this model has (the kind kept where it exists) and the layer, head and
    sentence ranges, values clamped."""
    config = registry.checkpoint(request.model, request.session).config
    kinds = kinds_for(config)
    # Cross-attention is the one an encoder-decoder model is best known for.
    kind = request.kind if request.kind in kinds else kinds[-1]
    n_layers = layers_of(config, ATTENTION_KINDS[kind])
    # A switch the model has nothing for (the causal mask of an encoder-only MiniLM) is
    # unticked, not listed as on in the summary.
    applies = what_if_switches(config)
    request = dataclasses.replace(
        request, what_if=tuple(s for s in request.what_if if s in applies)
    )
    ranges = (
        (n_layers, _clamp(request.layer, n_layers)),
        (config.n_heads, _clamp(request.head, config.n_heads)),
        (request.rows, _clamp(request.row, request.rows)),
    )
    return Fitted(kinds, request.fitted(kind, *(value for _, value in ranges)), ranges)


def controls(
    registry: ModelRegistry,
    sentences: str,
    name: str,
    kind: str,
    layer: Any,
    head: Any,
    row: Any,
    session: SessionModels,
) -> tuple[Any, Any, Any, Any]:
    """The Which-attention choices and the Layer, Head and Sentence ranges that this model and
    these sentences have (values kept where they still apply)."""
    request = AttentionRequest.of(sentences, name, kind, layer, head, row, session=session)
    return friendly(fit)(registry, request).updates()


def _slider(n: int, value: int) -> Any:
    """A 1..n slider update; hidden when there is only one choice (a slider needs two)."""
    return gr.Slider(minimum=1, maximum=max(n, 2), value=value, visible=n > 1)


def _panels(
    registry: ModelRegistry, request: AttentionRequest
) -> tuple[tuple[Any, Any, Any, str], AttentionView]:
    view = attention_view(
        registry,
        request.session,
        request.text,
        request.model,
        request.kind,
        request.layer,
        request.head,
        request.row,
        lines=request.lines,
    )
    checkpoint = registry.checkpoint(request.model, request.session)
    return _head_panels(
        registry,
        view,
        checkpoint,
        request.model,
        request.lines,
        list(request.what_if),
        request.large,
        request.mistake,
    ), view


@friendly
@gpu
@takes_request
def attention(registry: ModelRegistry, request: AttentionRequest) -> tuple[Any, Any, Any, str]:
    """The ``/attention`` endpoint: one head (scores beside weights; with a what-if or one of
    the seeds' mistakes, the original weights beside the changed ones), the masks, the change of
    that head's weights and a summary."""
    return _panels(registry, request)[0]


def _everything(registry: ModelRegistry, request: AttentionRequest) -> tuple[Any, ...]:
    """Every panel from one cached analysis, with the values the fitted controls show."""
    panels, view = _panels(registry, fit(registry, request).request)
    return (*panels, _grid(view, request.large))


@friendly
@gpu
@takes_request
def everything(registry: ModelRegistry, request: AttentionRequest) -> tuple[Any, ...]:
    """Every panel of the tab from one cached analysis: what each control redraws.

    A live redraw can arrive with a value from before the controls were fitted (a tour stop
    that changes the sentences, a quick second change): it draws what the fitted controls
    show (:func:`fit`) instead of answering with an error. ``/attention`` stays strict."""
    return _everything(registry, request)


@friendly
@gpu
@takes_request
def refit_everything(registry: ModelRegistry, request: AttentionRequest) -> tuple[Any, ...]:
    """Fit the choices and ranges to the model and sentences (:func:`controls`, the seeds'
    mistakes that apply) and redraw every panel with the fitted values, in one event.

    One event, because a chain would send the next handler the Which-attention value from
    before the fit, which a new model's choices may no longer hold (gradio refuses it)."""
    fitted = fit(registry, request)
    name, session, mistake = request.model, request.session, request.mistake
    mistake_u = seed_mistakes.choices(registry, name, mistake, session)
    offered = seed_mistakes.choices_for(registry.checkpoint(name, session).config)
    request = dataclasses.replace(fitted.request, mistake=mistake if mistake in offered else None)
    # The what-if switches keep their choices (an event started before this one may still send
    # one of them); those this model has nothing for are unticked.
    switches = gr.update(value=list(fitted.request.what_if))
    return (*fitted.updates(), mistake_u, *_everything(registry, request), switches)


@friendly
@gpu
def grid(
    registry: ModelRegistry,
    sentences: str,
    name: str,
    kind: str,
    row: Any,
    large: bool,
    session: SessionModels,
) -> Any:
    """The ``/attention_grid`` endpoint: every head of every layer of one attention kind."""
    return attention_grid(registry, session, sentences, name, kind, row, large)


def _first_view(registry: ModelRegistry, name: str, kind: str) -> tuple[Any, ...]:
    """What the tab shows when it opens: every panel of its first example (built once, at
    start; a bundled model takes milliseconds). Empty panels if the model is unavailable."""
    try:
        return everything(
            registry, EXAMPLE_SENTENCES, name, kind, 2, 1, 1, [], False, SessionModels()
        )
    except gr.Error:
        return (None, None, None, "", None)
