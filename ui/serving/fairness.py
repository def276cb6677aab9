"""Costly work shared fairly between clients: the costly queue served in turns, by address.

Gradio serves each queue first come, first served. The costly queue runs one call at a time
on a CPU ("Run to the end", the long view, the key/value cache's timing), so one client that
queued fifty runs held it for ten minutes, and another visitor's short run waited behind all
of them. Here the costly queue is served round-robin: the next call is the oldest one of the
client served least recently (a client never served goes first, in the order it arrived), so
another client's call waits at most one turn of each client already queued. Within one address
(a lecture hall behind one router is one address) its sessions take turns the same way.

And one client may hold at most ``limits.COSTLY_QUEUED_PER_CLIENT`` calls waiting there: one
more is refused when it is asked for, with a message that says why, before it waits at all.

A client is the address the server sees (:func:`ui.serving.clients.client_address`): the
address of the proxy in front, where there is one, unless the operator names that proxy as
trusted (as ``--workers N`` names its own HAProxy).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from . import limits
from .clients import client_address

log = logging.getLogger("visualiser")


def _event_client(event: Any) -> tuple[str, str]:
    """(address, session) of a queued gradio event."""
    return client_address(getattr(event, "request", None)), str(event.session_hash)


class FairTurns:
    """Which queued event goes next: the oldest one of the address served least recently
    (never served: first), and within that address of the session served least recently.
    ``served`` records a turn given."""

    def __init__(self) -> None:
        self._turns = itertools.count(1)
        self._address_turn: dict[str, int] = {}
        self._session_turn: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def pick(self, events: list[Any]) -> int:
        """The index in ``events`` (oldest first) of the one to serve next."""
        with self._lock:
            best, best_key = 0, None
            for index, event in enumerate(events):
                address, session = _event_client(event)
                key = (
                    self._address_turn.get(address, 0),
                    self._session_turn.get((address, session), 0),
                    index,
                )
                if best_key is None or key < best_key:
                    best, best_key = index, key
            return best

    def served(self, event: Any) -> None:
        """Record that ``event``'s client has had a turn now."""
        address, session = _event_client(event)
        with self._lock:
            turn = next(self._turns)
            self._address_turn[address] = turn
            self._session_turn[(address, session)] = turn
            # Bounded: only the order matters, and a client not queued now needs no record
            # older than every queued one's (forgotten, it counts as never served: fine).
            _keep_newest(self._session_turn)
            _keep_newest(self._address_turn)


def _keep_newest(turns: dict[Any, int], most: int = 4096) -> None:
    """Drop the older half of ``turns`` once it holds more than ``most``."""
    if len(turns) > most:
        for old in sorted(turns, key=lambda key: turns[key])[: most // 2]:
            del turns[old]


def too_many_queued(waiting: list[Any], address: str, most: int) -> str | None:
    """The message refusing one more call from ``address`` when it has ``most`` waiting in
    ``waiting`` already; ``None`` when it may wait."""
    mine = sum(1 for event in waiting if _event_client(event)[0] == address)
    if mine < most:
        return None
    return (
        f"you already have {mine} long runs waiting for the server (the most one visitor may "
        "queue, so that everyone gets a turn): wait for one of them to finish, then ask again"
    )


def share_fairly(demo: Any, concurrency_id: str) -> FairTurns | None:
    """Serve ``demo``'s queue ``concurrency_id`` round-robin by client and cap each client's
    waiting calls there (module doc); returns the turns (``None`` where gradio's queue is not
    the one this was written for: it then stays first come, first served)."""
    queue = getattr(demo, "_queue", None)
    get_events = getattr(queue, "get_events", None)
    push = getattr(queue, "push", None)
    if queue is None or get_events is None or push is None:
        log.warning("gradio's queue has changed: the costly queue is served in arrival order")
        return None
    turns = FairTurns()

    def fair_get_events() -> Any:
        # Put the fair choice first in the costly queue, then let gradio take it as before.
        waiting = waiting_events(queue, concurrency_id)
        if waiting is not None and len(waiting) > 1:
            index = turns.pick(waiting)
            if index:
                waiting.insert(0, waiting.pop(index))
        taken = get_events()
        if taken is not None and taken[2] == concurrency_id:
            for event in taken[0]:
                turns.served(event)
        return taken

    async def capped_push(body: Any, request: Any, username: Any) -> Any:
        fn = _function_of(queue, body)
        if fn is not None and getattr(fn, "concurrency_id", None) == concurrency_id:
            waiting = waiting_events(queue, concurrency_id) or []
            message = too_many_queued(
                waiting, client_address(request), limits.COSTLY_QUEUED_PER_CLIENT
            )
            if message is not None:
                log.info("refused a costly call: %s", message)
                return False, _validation(message), "validator_error"
        return await push(body=body, request=request, username=username)

    queue.get_events = fair_get_events
    queue.push = capped_push
    return turns


def waiting_events(queue: Any, concurrency_id: str) -> list[Any] | None:
    """The list of events waiting in gradio's queue ``concurrency_id`` (None before its first)."""
    event_queue = getattr(queue, "event_queue_per_concurrency_id", {}).get(concurrency_id)
    return None if event_queue is None else event_queue.queue


def _function_of(queue: Any, body: Any) -> Any:
    """The event function a queue request (``PredictBody``) asks for, or None."""
    from gradio import route_utils

    get_fn: Callable[..., Any] = route_utils.get_fn
    try:
        return get_fn(queue.blocks, None, body)
    except Exception:  # gradio's own push says what is wrong with the request
        return None


def _validation(message: str) -> list[dict[str, Any]]:
    """A refusal in the shape gradio's validators answer with (HTTP 422): the page shows the
    message and gradio_client raises it."""
    return [
        {"__type__": "validate", "is_valid": False, "message": message, "parameter_name": "run"}
    ]
