"""Uploaded files, bounded: per request, per visitor and for the whole app, and deleted once
no request has used them for a while.

gradio's ``/gradio_api/upload`` caps each file (``max_file_size``) but not how many a request
carries, nor what one visitor or everyone together keeps: 20 files of 19 MB went in within
4 s, 200 files of 1 MB in one request, each kept for an hour. `CapUploads`, an ASGI middleware
in front of gradio, refuses an upload request

- longer than one file and its form (``limits.UPLOAD_REQUEST_BYTES``; the app takes one file,
  a ``tokenizer.json``) or of unknown length (411);
- that would take a visitor's live uploads past ``limits.UPLOAD_VISITOR_BYTES`` (429), or
  everyone's past ``limits.UPLOAD_TOTAL_BYTES`` (503);

and records the files it let in in `LEDGER`, which deletes a file that no request has used for
``limits.UPLOAD_IDLE_S`` (`touch` marks a use), then the least recently used ones while the
total is over its cap. Only files this ledger recorded are ever deleted.

The caps are counted when a request starts: its declared length is reserved for its visitor
before a byte of its body is read, and replaced by the files' sizes when it ends (the body
cannot be longer than its declared length: the HTTP server reads no more). Counted when an
upload ended, 29 of 30 simultaneous 19.9 MB uploads from one visitor got in. A visitor is the
client's address as the server sees it (`clients.client_address`: a forwarded address only
from a proxy the operator named).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import limits
from .clients import client_address
from .inputs import size_text

UPLOAD_PATH = "/gradio_api/upload"


@dataclass
class _Upload:
    visitor: str
    size: int
    used: float  # time.monotonic() of the upload or the last request that read it


class UploadLedger:
    """The uploaded files this app let in: who sent them, their size, when last used."""

    def __init__(self) -> None:
        self._files: OrderedDict[str, _Upload] = OrderedDict()  # least recently used first
        self._reserved: dict[str, int] = {}  # visitor → bytes of their uploads under way
        self._lock = threading.Lock()

    def total(self) -> int:
        """Bytes of every live upload, and of the uploads under way."""
        with self._lock:
            return self._total()

    def _total(self) -> int:
        return sum(u.size for u in self._files.values()) + sum(self._reserved.values())

    def visitor_bytes(self, visitor: str) -> int:
        """Bytes of the live uploads ``visitor`` sent, and of their uploads under way."""
        with self._lock:
            return self._visitor_bytes(visitor)

    def _visitor_bytes(self, visitor: str) -> int:
        kept = sum(u.size for u in self._files.values() if u.visitor == visitor)
        return kept + self._reserved.get(visitor, 0)

    def paths(self) -> list[str]:
        """The live uploads, least recently used first."""
        with self._lock:
            return list(self._files)

    def refusal(self, visitor: str, incoming: int) -> tuple[int, str] | None:
        """(HTTP status, message) when ``incoming`` more bytes from ``visitor`` would pass a
        cap, after the idle files were swept; None to let the upload in. (`reserve` checks and
        counts at once; this only checks.)"""
        self.sweep()
        with self._lock:
            return self._refusal(visitor, incoming)

    def _refusal(self, visitor: str, incoming: int) -> tuple[int, str] | None:
        if incoming > limits.UPLOAD_REQUEST_BYTES:
            return 413, (
                f"an upload may carry one file of at most {size_text(limits.MAX_UPLOAD_BYTES)} "
                f"(this one is {size_text(incoming)})"
            )
        mine = self._visitor_bytes(visitor)
        if mine + incoming > limits.UPLOAD_VISITOR_BYTES:
            return 429, (
                f"your uploads take {size_text(mine)}, and the limit per visitor is "
                f"{size_text(limits.UPLOAD_VISITOR_BYTES)}: a file unused for "
                f"{limits.UPLOAD_IDLE_S / 60:g} minutes is deleted, then there is room again"
            )
        if self._total() + incoming > limits.UPLOAD_TOTAL_BYTES:
            return 503, (
                "the server holds as many uploaded files as it keeps: try again in a few minutes"
            )
        return None

    def reserve(self, visitor: str, incoming: int) -> tuple[int, str] | None:
        """Count ``incoming`` bytes against ``visitor``'s cap and the total before the upload
        is read, if they fit (then return None; `release` them when it ends); else (HTTP
        status, message) and nothing is counted. Checking and counting under one lock, so that
        uploads started together cannot all pass the same check."""
        self.sweep()
        with self._lock:
            refused = self._refusal(visitor, incoming)
            if refused is None:
                self._reserved[visitor] = self._reserved.get(visitor, 0) + incoming
            return refused

    def release(self, visitor: str, incoming: int) -> None:
        """An upload `reserve` counted has ended (its files, if any, are `record`-ed)."""
        with self._lock:
            left = self._reserved.get(visitor, 0) - incoming
            if left > 0:
                self._reserved[visitor] = left
            else:
                self._reserved.pop(visitor, None)

    def record(self, visitor: str, paths: list[str], fallback_size: int) -> None:
        """Files just uploaded by ``visitor`` (their size from disk, else ``fallback_size``
        shared between them: gradio may still be moving them)."""
        now = time.monotonic()
        with self._lock:
            for path in paths:
                try:
                    size = os.path.getsize(path)
                except OSError:
                    size = fallback_size // max(len(paths), 1)
                self._files[path] = _Upload(visitor, size, now)
                self._files.move_to_end(path)

    def touch(self, path: str | os.PathLike[str]) -> None:
        """A request read ``path``: it is in use (no effect for a file not recorded here)."""
        key = str(path)
        with self._lock:
            upload = self._files.get(key)
            if upload is not None:
                upload.used = time.monotonic()
                self._files.move_to_end(key)

    def sweep(self) -> list[str]:
        """Delete the uploads idle for ``limits.UPLOAD_IDLE_S``, then the least recently used
        while the total is over ``limits.UPLOAD_TOTAL_BYTES``; return the paths deleted."""
        now = time.monotonic()
        gone: list[str] = []
        with self._lock:
            total = sum(u.size for u in self._files.values())
            for path, upload in list(self._files.items()):
                if now - upload.used < limits.UPLOAD_IDLE_S and total <= limits.UPLOAD_TOTAL_BYTES:
                    break  # the rest were used more recently
                del self._files[path]
                total -= upload.size
                gone.append(path)
        for path in gone:
            _delete(path)
        return gone

    def forget(self, path: str) -> None:
        """Delete one recorded upload now (e.g. replaced by another)."""
        with self._lock:
            known = self._files.pop(path, None)
        if known is not None:
            _delete(path)


def _delete(path: str) -> None:
    """Remove an upload and its folder (gradio puts each in a folder named by its hash)."""
    file = Path(path)
    try:
        file.unlink(missing_ok=True)
        file.parent.rmdir()  # only when empty
    except OSError:
        pass


LEDGER = UploadLedger()


def touch(path: str | os.PathLike[str]) -> None:
    """Mark an uploaded file as used by a request (see `UploadLedger.touch`)."""
    LEDGER.touch(path)


def visitor_of(scope: dict[str, Any]) -> str:
    """Who sent a request: the client's address as the server sees it."""
    return client_address(scope)


class CapUploads:
    """ASGI middleware: bounds what ``/gradio_api/upload`` lets in (see the module's notes)."""

    def __init__(self, app: Any, ledger: UploadLedger | None = None) -> None:
        self.app = app
        self.ledger = ledger if ledger is not None else LEDGER

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        if not str(scope.get("path", "")).rstrip("/").endswith(UPLOAD_PATH):
            await self.app(scope, receive, send)
            return
        length = None
        for name, value in scope.get("headers") or []:
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = None
        visitor = visitor_of(scope)
        if length is None:
            await _plain(send, 411, "an upload must say its length (Content-Length)")
            return
        refused = self.ledger.reserve(visitor, length)
        if refused is not None:
            await _plain(send, *refused)
            return
        status = 0
        body = bytearray()

        async def watch(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and status == 200 and len(body) < 2**20:
                body.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, watch)
            if status == 200:
                try:
                    paths = [str(p) for p in json.loads(bytes(body)) if isinstance(p, str)]
                except ValueError:
                    paths = []
                self.ledger.record(visitor, paths, length)
        finally:
            self.ledger.release(visitor, length)


async def _plain(send: Any, status: int, message: str) -> None:
    payload = message.encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
