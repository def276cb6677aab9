"""A visitor who leaves frees what their session held.

Gradio keeps, per session, a copy of every component's config that an event changed and the
session's ``gr.State`` values (Generate's decoding with its steps, a trained model). When a
page closes, gradio notices it (the page's heartbeat connection ends) and marks the session
closed, but keeps its state for an hour "to give the user time to reopen the session", and the
session's config copy until 200 newer sessions push it out. After a class of a hundred, that is
a hundred students' generations held for an hour by a server nobody uses any more.

A reloaded page is a new session (the page draws a new session hash); only a network blip
closes the heartbeat of a page that is still open, and its browser then opens a new heartbeat
at once and goes on using the same session. Gradio never marks such a session open again:
:func:`reopen_on_heartbeat` does, when the heartbeat comes back. So a session whose page closed
(and did not come back) and that no request has used for ``SESSION_CLOSED_S`` is dropped whole
(its states' ``delete_callback`` run first), and so is what the app keeps for it elsewhere (the
order of its redraws): a student on a flaky network who reads for a minute keeps their
generation.
"""

from __future__ import annotations

import datetime
import functools
import logging
import re
import weakref
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("visualiser")

# A closed page's session unused this long is dropped: long enough for a browser to reopen the
# heartbeat of a page that is still open after a blip of the network (it retries at once), short
# enough that a class that leaves gives its memory back within a minute.
SESSION_CLOSED_S = 30.0


def left_sessions(
    holder: Any, unused_s: float = SESSION_CLOSED_S, now: datetime.datetime | None = None
) -> list[str]:
    """The sessions of gradio's store (``demo.state_holder``) whose page has closed and that
    no request has used for ``unused_s`` seconds."""
    now = now or datetime.datetime.now()
    with holder.lock:
        closed = [
            session
            for session, data in list(holder.session_data.items())
            if getattr(data, "is_closed", False)
        ]
        beating = open_heartbeats(holder)
        return [
            session
            for session in closed
            if session not in beating
            and (now - holder.time_last_used.get(session, now)).total_seconds() >= unused_s
        ]


def drop_sessions(
    holder: Any, sessions: Iterable[str], forget: Iterable[Callable[[str], object]] = ()
) -> int:
    """Drop ``sessions`` from gradio's store with their state (each state's ``delete_callback``
    runs first), and call each of ``forget`` with each session, for what the app keeps per
    session elsewhere; returns how many were dropped."""
    forget = list(forget)
    dropped = 0
    for session in sessions:
        try:
            holder.delete_state(session)  # runs the states' delete callbacks
        except Exception:  # a callback's failure must not keep the session
            log.exception("deleting a session's state failed")
        with holder.lock:
            holder.session_data.pop(session, None)
            holder.time_last_used.pop(session, None)
        for drop in forget:
            try:
                drop(session)
            except Exception:
                log.exception("forgetting a session failed")
        dropped += 1
    return dropped


def drop_left_sessions(
    holder: Any,
    forget: Iterable[Callable[[str], object]] = (),
    unused_s: float = SESSION_CLOSED_S,
    now: datetime.datetime | None = None,
) -> int:
    """Drop every session whose page has closed and that has been unused for ``unused_s``
    (see the module's doc); returns how many were dropped."""
    dropped = drop_sessions(holder, left_sessions(holder, unused_s, now), forget)
    if dropped:
        log.info("freed %d session(s) whose page closed", dropped)
    return dropped


_HEARTBEAT = re.compile(r"/heartbeat/([^/]+)$")
# Per store (``demo.state_holder``): the sessions whose page holds a heartbeat open now, and
# how many (a page that reconnects may briefly hold two).
_OPEN: weakref.WeakKeyDictionary[Any, Counter[str]] = weakref.WeakKeyDictionary()


def open_heartbeats(holder: Any) -> Counter[str]:
    """The sessions of ``holder`` whose page holds a heartbeat open now (counted by
    :func:`reopen_on_heartbeat`'s layer; empty before it is installed)."""
    return _OPEN.setdefault(holder, Counter())


def reopen_on_heartbeat(app: Any, holder: Any) -> bool:
    """Make the launched ``app`` count the heartbeats open per session, and mark a session
    open again when its page's heartbeat comes back (gradio marks it closed when a heartbeat
    ends, for good): a session's page that reconnects after a blip of the network is then never
    taken for a page that left. Returns whether it is done (not before the server has answered
    its first request, when the app's middleware is built; a second call finds it done)."""
    stack = getattr(app, "middleware_stack", None)
    if stack is None:
        return False
    if not isinstance(stack, _Reopening):
        app.middleware_stack = _Reopening(stack, holder)
    return True


class _Reopening:
    """The app's outermost ASGI layer: a heartbeat's request marks its session open and counts
    as open until its response ends."""

    def __init__(self, app: Any, holder: Any) -> None:
        self.app = app
        self.holder = holder
        self.beating = open_heartbeats(holder)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        found = _HEARTBEAT.search(scope.get("path", "")) if scope.get("type") == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        session = found.group(1)
        with self.holder.lock:
            self.beating[session] += 1
            data = self.holder.session_data.get(session)
            if data is not None:
                data.is_closed = False
        try:
            await self.app(scope, receive, send)
        finally:
            with self.holder.lock:
                self.beating[session] -= 1
                if self.beating[session] <= 0:
                    del self.beating[session]


# -- a session's start -----------------------------------------------------------------------


def _after_all(read: Callable[..., Any]) -> Callable[..., Any]:
    """``dict``'s method ``read`` for :class:`_ConfigOnDemand`, called once every copy is made."""

    @functools.wraps(read)
    def method(self: _ConfigOnDemand, *args: Any) -> Any:
        self._all()
        return read(self, *args)

    return method


class _ConfigOnDemand(dict):
    """A session's copies of its components' configs (gradio's ``SessionState.config_values``),
    each made when it is first read instead of all of them when the session starts.

    Gradio makes them all at a session's first request, on the server's event loop: about 40 ms
    for this app's components on a 2-core CPU, during which no other request is answered. Fifty
    students arriving at once held every other visitor for two seconds. The copies are read
    only to change one component's value (made then) and to list a session's components (a
    deep link: all made then)."""

    def __init__(self, blocks_config: Any, app_blocks: Any) -> None:
        super().__init__()
        self._config = blocks_config
        self._app_blocks = app_blocks  # the app's own blocks: gradio copies only theirs

    def _made(self, key: Any) -> bool:
        if dict.__contains__(self, key):
            return True
        block = self._config.blocks.get(key)
        if block is None or key not in self._app_blocks:
            return False
        dict.__setitem__(self, key, self._config.config_for_block(key, [], block))
        return True

    def _all(self) -> None:
        """Every copy, in the order of the blocks (gradio's order, whichever was made first)."""
        order = [key for key in list(self._config.blocks) if self._made(key)]
        made = {key: dict.__getitem__(self, key) for key in order}
        others = {k: v for k, v in dict.items(self) if k not in made}
        dict.clear(self)
        dict.update(self, made)
        dict.update(self, others)

    def __missing__(self, key: Any) -> Any:
        if not self._made(key):
            raise KeyError(key)
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        return self._made(key)

    # What reads the whole mapping makes every copy first.
    __iter__ = _after_all(dict.__iter__)
    __len__ = _after_all(dict.__len__)
    keys = _after_all(dict.keys)
    values = _after_all(dict.values)
    items = _after_all(dict.items)


class _WithoutBlocks:
    """``blocks`` seen by gradio's ``SessionState.__init__`` with no block of its own, so that
    it makes no config copy (everything else is the app's)."""

    def __init__(self, blocks: Any) -> None:
        self._blocks = blocks
        self.blocks: dict[int, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._blocks, name)


def start_sessions_on_demand() -> None:
    """Make gradio's sessions copy their components' configs on demand (:class:`_ConfigOnDemand`)
    instead of all at their first request; a second call finds it done. Where gradio's
    ``SessionState`` no longer starts the way this expects, a session starts its own way."""
    from gradio import state_holder

    session_class = state_holder.SessionState
    original = session_class.__init__
    if getattr(original, "on_demand", False):
        return

    def __init__(self: Any, blocks: Any) -> None:
        try:
            original(self, _WithoutBlocks(blocks))  # type: ignore[arg-type]
        except Exception:
            self.config_values = None
        config = getattr(self, "blocks_config", None)
        if getattr(self, "config_values", None) != {} or not hasattr(config, "config_for_block"):
            original(self, blocks)  # another gradio: its own way
            return
        self.config_values = _ConfigOnDemand(config, blocks.blocks)

    __init__.on_demand = True  # type: ignore[attr-defined]
    session_class.__init__ = __init__  # type: ignore[method-assign]
