"""Which events serve views shared by every session, and the wrapper that serves them.

A view is shareable when it depends only on its controls: the same model, text and controls
give the same figures, for any session. Those events' handlers are wrapped once the app is
built (:func:`share_views`) so that a class opening the same preset computes it once; the
wrapper keys the cache by the handler and the values of its inputs (never a session's state).
The figures are kept as figures (the views that apply a link read them), so gradio serialises
a shared figure for each answer: a few milliseconds, against the handler's tens to thousands.

Where several app processes serve one class, the cache has a second level in their Redis
(``ui/serving/store.py``): a view is named there by the handler's place in the app (its module,
name and rank among handlers of that name, the same in every process built from the same code)
and its inputs, under a version of the code and the models, so that a view one process
computed serves the others.

Not shared: a view of the model trained in one session (any input naming it), a view whose
computation warned its session about something (the warning belongs to that request), and an
error (raised to each session as its own).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gradio as gr
from gradio.context import LocalContext
from plotly.basedatatypes import BaseFigure

from . import limits
from .state import TRAINED_HERE, SessionModels, SharedViews
from .store import stable_key

log = logging.getLogger("visualiser")

# Handlers (by name) whose views are deterministic in their controls: the Attention tab (one
# head, the grid, the long-input view and their refits), Inside a layer, the embeddings and
# positional views and teacher forcing. Generate's Step, Back and Run read a session's own
# decoding, and the silent mistakes its chat switch: they are never shared.
SHARED_HANDLERS = frozenset(
    {
        "attention",
        "grid",
        "everything",
        "refit_everything",
        "attention_scale",
        "scale_controls",
        "inside_layer",
        "inside_compare",
        "refresh",
        "panel",
        "controls",
        "embeddings",
        "embeddings_view",
        "learned_positions",
        "rotating_pair",
        "positional",
        "positional_view",
        "force",
        "force_view",
        "reference_for",
    }
)

# Set while a shared view is computed: the messages (gr.Warning, gr.Info) it sends its page.
_SPOKE: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("spoke", default=None)


def share_views(demo: gr.Blocks, cache: SharedViews | None = None) -> SharedViews:
    """Serve the events of ``demo`` whose handler is in ``SHARED_HANDLERS`` (and whose inputs
    hold no upload and no state but the session's models) from one cache for every session;
    returns the cache (a new one with the default bounds when ``cache`` is None)."""
    if cache is None:  # (an empty cache is falsy: it has a length)
        cache = SharedViews(limits.SHARED_VIEW_BYTES, limits.SHARED_VIEW_ENTRIES)
    names: dict[int, str] = {}  # id of a handler -> its name for every process
    ranks: dict[str, int] = {}
    for fn in demo.fns.values():
        handler = fn.fn
        if handler is None or getattr(handler, "__name__", "") not in SHARED_HANDLERS:
            continue
        if getattr(handler, "shared_view", False):  # shared already
            continue
        if not _shareable(handler, fn.inputs):
            continue
        if id(handler) not in names:
            where = _where(handler)
            ranks[where] = ranks.get(where, 0) + 1
            names[id(handler)] = f"{where}#{ranks[where]}"
        fn.fn = _shared(handler, cache, _state_positions(fn.inputs), names[id(handler)])
    _hear_messages(demo)
    return cache


def _where(handler: Callable[..., Any]) -> str:
    """Where ``handler`` is defined (module and qualified name; a partial's function's)."""
    inner = handler.func if isinstance(handler, functools.partial) else handler
    module = getattr(inner, "__module__", None) or "?"
    name = getattr(inner, "__qualname__", None) or getattr(handler, "__name__", "?")
    return f"{module}.{name}"


def _state_positions(inputs: Iterable[Any]) -> frozenset[int]:
    return frozenset(i for i, c in enumerate(inputs) if isinstance(c, gr.State))


def plain_function(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` gives its whole answer at once from its arguments alone: no
    generator, no parameter gradio fills in (a request, a progress bar, event data)."""
    if inspect.isgeneratorfunction(handler) or inspect.isasyncgenfunction(handler):
        return False
    try:
        parameters = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return False
    injected = (gr.Request, gr.Progress, gr.EventData)
    return not any(
        isinstance(p.default, gr.Progress)
        or (isinstance(p.annotation, type) and issubclass(p.annotation, injected))
        or (
            isinstance(p.annotation, str)
            and p.annotation.split(".")[-1] in {"Request", "Progress", "EventData"}
        )
        for p in parameters
    )


def _shareable(handler: Callable[..., Any], inputs: Sequence[Any]) -> bool:
    """A plain function of its inputs: no generator, nothing gradio injects (request,
    progress), no upload, no state but a session's models."""
    if inspect.iscoroutinefunction(handler) or not plain_function(handler):
        return False
    for component in inputs:
        if isinstance(component, gr.File | gr.UploadButton):
            return False
        if isinstance(component, gr.State) and not isinstance(component.value, SessionModels):
            return False
    return True


def _frozen(value: Any) -> Any:
    """``value`` as a hashable key part (lists and dicts as tuples); raises TypeError when it
    cannot be."""
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    hash(value)
    return (type(value).__name__, value)


def mark_shared(value: Any) -> Any:
    """``value`` (a view), its figures marked as every session's: never changed once made, so
    that their JSON, made for one answer, serves the next (``ui/serving/outputs.py``)."""
    if isinstance(value, list | tuple):
        for item in value:
            mark_shared(item)
    elif isinstance(value, dict):
        mark_shared(value.get("value"))
    elif isinstance(value, BaseFigure):
        value._shared_view = True
    return value


def _fresh(value: Any) -> Any:
    """A copy of a kept view's containers: gradio takes an update dict apart as it sends it."""
    if isinstance(value, tuple):
        return tuple(_fresh(v) for v in value)
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _shared(
    handler: Callable[..., Any], cache: SharedViews, states: frozenset[int], name: str = ""
) -> Callable[..., Any]:
    """``handler`` served through ``cache``, keyed by the handler and the values of its inputs
    but the states (at ``states``); the events that share a handler share its views. ``name``
    names the handler alike in every process (for the cache's second level; none: this
    process's alone)."""

    @functools.wraps(handler)  # gradio reads the signature through __wrapped__
    def shared(*args: Any, **kwargs: Any) -> Any:
        values = [v for i, v in enumerate(args) if i not in states]
        if kwargs or any(v == TRAINED_HERE for v in values if isinstance(v, str)):
            return handler(*args, **kwargs)
        try:
            key = (id(handler), _frozen(values))
        except TypeError:  # an input that cannot be a key part: computed for this one
            return handler(*args, **kwargs)

        def compute() -> tuple[Any, bool]:
            heard: list[str] = []
            token = _SPOKE.set(heard)
            try:
                view = handler(*args)
            finally:
                _SPOKE.reset(token)
            return view, not heard

        shared_key = None
        if name and cache.second is not None:
            shared_key = stable_key((name, key[1]))
        return _fresh(mark_shared(cache.get(key, compute, shared_key)))

    shared.shared_view = True  # type: ignore[attr-defined]  # for the tests
    return shared


def _hear_messages(demo: gr.Blocks) -> None:
    """Note each message (gr.Warning, gr.Info) a shared view's computation sends its page, so
    that such a view is not kept: the next session would not hear it."""
    queue = getattr(demo, "_queue", None)
    send = getattr(queue, "log_message", None)
    if send is None or getattr(send, "_heard", False):
        return

    @functools.wraps(send)
    def log_message(*args: Any, **kwargs: Any) -> Any:
        heard = _SPOKE.get()
        if heard is not None and LocalContext.event_id.get(None) is not None:
            heard.append(str(kwargs.get("log", "")))
        return send(*args, **kwargs)

    log_message._heard = True  # type: ignore[attr-defined]
    queue.log_message = log_message  # type: ignore[union-attr]
