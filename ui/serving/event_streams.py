"""An event stream that ends early is one log line, not two tracebacks.

Gradio sends each page's results over one server-sent event stream
(``/gradio_api/queue/data``). A stream asked for a session with nothing pending, or whose
client went away, ends with an exception raised inside the response, after its headers were
sent; Starlette can no longer answer it, so it raises again ("response already started") and
uvicorn's ``uvicorn.error`` logger prints "Exception in ASGI application" with both tracebacks
(and, were the exception only swallowed, "ASGI callable returned without completing response").
A client that opens and drops hundreds of streams filled the log with them (two tracebacks a
stream), burying the real errors.

:class:`QuietEventStreams` catches exactly that case, an exception out of an event stream whose
response has started, logs one line naming it and ends the response; any other failure passes
on unchanged.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

log = logging.getLogger("visualiser")

STREAM_PATH = "/queue/data"


class WatchedSend:
    """An ASGI ``send`` passed on, that remembers whether the response has started (once it
    has, a middleware can no longer answer in its place)."""

    def __init__(self, send: Any) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: dict[str, Any]) -> None:
        if message.get("type") == "http.response.start":
            self.started = True
        await self.send(message)


class QuietEventStreams:
    """ASGI middleware: an exception out of a started event stream is one INFO line (see the
    module's doc). ``ended`` counts them."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.ended = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or not str(scope.get("path", "")).endswith(STREAM_PATH):
            await self.app(scope, receive, send)
            return
        sending = WatchedSend(send)
        try:
            await self.app(scope, receive, sending)
        except Exception as error:
            if not sending.started:
                raise
            self.ended += 1
            cause = error.__cause__ or error
            log.info("an event stream ended early: %s", _short(cause))
            # Ended, or uvicorn logs the response as left incomplete (a second line).
            with contextlib.suppress(Exception):  # the client may be gone already
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def _short(error: BaseException) -> str:
    """``Type: message`` on one line, at most 120 characters."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= 120 else text[:119] + "…"
