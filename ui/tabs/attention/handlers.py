"""The tab's module-level handlers (``/attention``, ``/attention_grid``, the live controls and
redraw), taking the registry first."""

from __future__ import annotations

from typing import Any

import gradio as gr

from transformer.inspection import MAX_SENTENCES

from ... import mistakes as seed_mistakes
from ...errors import friendly, gpu
from ...state import ModelRegistry, SessionModels
from .panels import _head_panels
from .view import (
    ATTENTION_KINDS,
    EXAMPLE_SENTENCES,
    _grid,
    attention_grid,
    attention_view,
    kinds_for,
    layers_of,
    sentence_count,
)


def _clamp(value: Any, high: int) -> int:
    try:
        return min(max(1, int(float(value))), high)
    except (TypeError, ValueError, OverflowError):
        return 1


@friendly
def fitted(
    registry: ModelRegistry,
    sentences: str,
    name: str,
    kind: str,
    layer: Any,
    head: Any,
    row: Any,
    session: SessionModels,
) -> tuple[list[str], str, tuple[int, int], tuple[int, int], tuple[int, int]]:
    """What applies to this model and these sentences: the kinds, the kind (kept where it
    exists), and ``(count, value)`` of layers, heads and sentences, values clamped."""
    config = registry.checkpoint(name, session).config
    kinds = kinds_for(config)
    if kind not in kinds:
        # Cross-attention is the one an encoder-decoder model is best known for.
        kind = kinds[-1]
    n_layers = layers_of(config, ATTENTION_KINDS[kind])
    n_rows = min(sentence_count(sentences), MAX_SENTENCES)
    return (
        kinds,
        kind,
        (n_layers, _clamp(layer, n_layers)),
        (config.n_heads, _clamp(head, config.n_heads)),
        (n_rows, _clamp(row, n_rows)),
    )


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
    kinds, kind, *ranges = fitted(registry, sentences, name, kind, layer, head, row, session)
    return (gr.Radio(choices=kinds, value=kind), *(_slider(n, value) for n, value in ranges))


def _slider(n: int, value: int) -> Any:
    """A 1..n slider update; hidden when there is only one choice (a slider needs two)."""
    return gr.Slider(minimum=1, maximum=max(n, 2), value=value, visible=n > 1)


@friendly
@gpu
def attention(
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
) -> tuple[Any, Any, Any, str]:
    """The ``/attention`` endpoint: one head (scores beside weights; with a what-if or one of
    the seeds' mistakes, the original weights beside the changed ones), the masks, the change of
    that head's weights and a summary."""
    view = attention_view(registry, session, sentences, name, kind, layer, head, row)
    checkpoint = registry.checkpoint(name, session)
    return _head_panels(registry, view, checkpoint, name, sentences, what_if or [], large, mistake)


@friendly
@gpu
def everything(
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
) -> tuple[Any, Any, Any, str, Any]:
    """Every panel of the tab from one cached analysis: what each control redraws.

    A live redraw can arrive with a value from before the controls were fitted (a tour stop
    that changes the sentences, a quick second change): it draws what the fitted controls
    show (:func:`fitted`) instead of answering with an error. ``/attention`` stays strict."""
    _, kind, (_, layer), (_, head), (_, row) = fitted(
        registry, sentences, name, kind, layer, head, row, session
    )
    view = attention_view(registry, session, sentences, name, kind, layer, head, row)
    checkpoint = registry.checkpoint(name, session)
    panels = _head_panels(
        registry, view, checkpoint, name, sentences, what_if or [], large, mistake
    )
    return (*panels, _grid(view, large))


@friendly
@gpu
def refit_everything(
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
) -> tuple[Any, ...]:
    """Fit the choices and ranges to the model and sentences (:func:`controls`, the seeds'
    mistakes that apply) and redraw every panel with the fitted values, in one event.

    One event, because a chain would send the next handler the Which-attention value from
    before the fit, which a new model's choices may no longer hold (gradio refuses it)."""
    kinds, kind, *ranges = fitted(registry, sentences, name, kind, layer, head, row, session)
    (_, layer), (_, head), (_, row) = ranges
    mistake_u = seed_mistakes.choices(registry, name, mistake, session)
    offered = seed_mistakes.choices_for(registry.checkpoint(name, session).config)
    mistake = mistake if mistake in offered else None
    panels = everything(
        registry, sentences, name, kind, layer, head, row, what_if, large, session, mistake
    )
    kind_u = gr.Radio(choices=kinds, value=kind)
    slider_updates = (_slider(n, value) for n, value in ranges)
    return (kind_u, *slider_updates, mistake_u, *panels)


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
