"""A redraw never draws over a newer one.

Gradio runs a session's events side by side when different controls fire them (a what-if
ticked, then a sentence typed: two listeners, each with its own slot in the queue) and delivers
each one's outputs when it ends. An older redraw that ends last drew the view of values the
controls no longer show: the old sentence's heads under the new sentence's text, until the
next change.

:func:`newest_wins` numbers every handler call of a session when it starts. When one ends,
whatever a call that started later has already written (an output, or one property of it) is
left as it is on the page: ``gr.skip()`` for the output, or the update without that property.

Only handlers that are functions of their inputs are held back: none of their outputs is a
``gr.State``, and they return once. A handler that keeps state (Generate's Step, run in turn
under the session's lock) or streams (Run, training) must deliver what it did, or the page and
the state would part; its writes still count, so an older redraw does not draw over them.
A page's first views (:func:`opening`) are held back whole, states too: whatever a student did
while they were drawn is newer than the defaults they show, and such a handler asks
:func:`overtaken` before it draws a tab at all.
An API client's calls (gradio_client) share a session but no page: each gets its own answer.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gradio as gr
from gradio.context import LocalContext

# Sessions whose writes are remembered (a few hundred entries each); the least recently used go
# first, and a forgotten session only loses this guard for calls already running.
MAX_SESSIONS = 256
EVERYTHING = "*"  # a component returned whole (``gr.Slider(...)``) sets every property

_calls = threading.local()  # a handler called by another (a link's view) is part of that call


def opening(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn`` as the handler that draws a page's first views: :func:`ordered` holds back
    all it would write over a later call's writes, its ``gr.State`` outputs included (the
    defaults a page opens with are older than anything its student has done since)."""
    fn.opening = True  # type: ignore[attr-defined]
    return fn


def overtaken(outputs: Sequence[gr.blocks.Block]) -> bool:
    """Inside a handler :func:`ordered` wraps: whether a call from the same page that started
    after this one has already written one of ``outputs`` (False outside such a handler, and
    for an API client's call)."""
    current = getattr(_calls, "current", None)
    if current is None:
        return False
    order, session, number = current
    return order.written_after(session, number, [component._id for component in outputs])


def _is_update(value: Any) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update"


def _properties(value: Any) -> set[str]:
    """The properties of its output that one returned value sets."""
    if _is_update(value):
        return {key for key in value if key != "__type__"}
    if isinstance(value, gr.blocks.Block):
        return {EVERYTHING}
    return {"value"}


class WriteOrder:
    """Per session: for each property of each output, the number of the latest-started call
    that wrote it."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._written: OrderedDict[str, dict[tuple[int, str], int]] = OrderedDict()
        self._max_sessions = max_sessions

    def start(self) -> int:
        """A number for a call that starts now, larger than every earlier call's."""
        return next(self._numbers)

    def forget(self, session: str) -> None:
        """Drop what is remembered of ``session`` (its page has closed)."""
        with self._lock:
            self._written.pop(session, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._written)

    def written_after(self, session: str, number: int, outputs: Sequence[int]) -> bool:
        """Whether a call of ``session`` numbered above ``number`` has written to one of
        ``outputs`` (ids)."""
        wanted = set(outputs)
        with self._lock:
            written = self._written.get(session, {})
            return any(n > number for (output, _), n in written.items() if output in wanted)

    def deliver(
        self, session: str, number: int, outputs: Sequence[int], values: Sequence[Any], hold: bool
    ) -> list[Any]:
        """``values`` (one per output id) as they may reach the page: with ``hold``, what a
        call numbered above ``number`` has written is taken out; every property still written
        is recorded as written by ``number``."""
        with self._lock:
            written = self._written.setdefault(session, {})
            self._written.move_to_end(session)
            while len(self._written) > self._max_sessions:
                self._written.popitem(last=False)
            delivered = []
            for output, value in zip(outputs, values, strict=True):
                if hold:
                    value = self._without_newer(written, output, number, value)
                for prop in _properties(value):
                    key = (output, prop)
                    written[key] = max(written.get(key, 0), number)
                delivered.append(value)
            return delivered

    @staticmethod
    def _without_newer(
        written: dict[tuple[int, str], int], output: int, number: int, value: Any
    ) -> Any:
        def newer(prop: str) -> bool:  # a later call wrote this property, or the whole output
            latest = max(written.get((output, prop), 0), written.get((output, EVERYTHING), 0))
            return latest > number

        props = _properties(value)
        if not props:  # gr.skip(): writes nothing
            return value
        if EVERYTHING in props:  # a whole component: held back where a later call wrote its value
            return gr.skip() if newer(EVERYTHING) or newer("value") else value
        kept = {prop for prop in props if not newer(prop)}
        if kept == props:
            return value
        if not kept:
            return gr.skip()
        return {"__type__": "update", **{prop: value[prop] for prop in kept}}


def _page_session() -> str | None:
    """The session of the page this call came from; None for an API client's call, which
    gets its own answer whatever else its session runs (gradio_client marks its requests)."""
    request = LocalContext.request.get(None)
    if request is None:
        return None
    headers = getattr(request, "headers", None) or {}
    if headers.get("x-gradio-user") == "api":
        return None
    return getattr(request, "session_hash", None)


def _as_list(result: Any, outputs: Sequence[gr.blocks.Block]) -> list[Any] | None:
    """One value per output, or None when the result has another shape (then it passes)."""
    if isinstance(result, dict) and any(isinstance(key, gr.blocks.Block) for key in result):
        return None  # {component: value}: left as it is
    if len(outputs) == 1:
        return [result]
    if isinstance(result, (tuple, list)) and len(result) == len(outputs):
        return list(result)
    return None


def ordered(
    fn: Callable[..., Any], order: WriteOrder, outputs: Sequence[gr.blocks.Block]
) -> Callable[..., Any]:
    """``fn`` as a handler whose results are delivered in the order its calls started (see
    the module's doc); ``outputs`` are its event's outputs."""
    ids = [component._id for component in outputs]
    keeps_state = any(isinstance(component, gr.State) for component in outputs)
    hold = getattr(fn, "opening", False) or not keeps_state

    def settle(session: str | None, number: int, result: Any, hold: bool) -> Any:
        values = _as_list(result, outputs)
        if session is None or values is None:
            return result
        delivered = order.deliver(session, number, ids, values, hold)
        if len(outputs) == 1:
            return delivered[0]
        return tuple(delivered) if isinstance(result, tuple) else delivered

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args: Any, **kwargs: Any) -> Iterator[Any]:
            session, number = _page_session(), order.start()
            results = fn(*args, **kwargs)
            try:
                for result in results:
                    yield settle(session, number, result, hold=False)  # a stream delivers all
            finally:
                results.close()  # a cancelled stream ends its handler at once, as gradio would

        return stream

    if inspect.iscoroutinefunction(fn):  # a long poll: it waits in the event loop, not a thread

        @functools.wraps(fn)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            session = _page_session()
            result = await fn(*args, **kwargs)
            # Numbered when its wait ends: what it brings is the news of that moment, newer
            # than a redraw that started while it waited.
            return settle(session, order.start(), result, hold)

        return awaited

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if getattr(_calls, "inside", False):
            return fn(*args, **kwargs)
        session, number = _page_session(), order.start()
        _calls.inside = True
        _calls.current = (order, session, number) if session is not None else None
        try:
            result = fn(*args, **kwargs)
        finally:
            _calls.inside, _calls.current = False, None
        return settle(session, number, result, hold)

    return call


def newest_wins(demo: gr.Blocks) -> WriteOrder:
    """Make every handler of ``demo`` deliver in the order its calls started (module doc)."""
    order = WriteOrder()
    for block_fn in demo.fns.values():
        fn = block_fn.fn
        if fn is None or not block_fn.outputs or getattr(fn, "_newest_wins", False):
            continue
        if inspect.isasyncgenfunction(fn):
            continue
        wrapped = ordered(fn, order, block_fn.outputs)
        wrapped._newest_wins = True  # type: ignore[attr-defined]
        block_fn.fn = wrapped
    return order
