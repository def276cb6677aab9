"""What the app processes serving one class share, in Redis: the second level of the shared
views (the follow-me rooms' store is ``ui/links/rooms.py``'s ``RedisRooms``).

One process (a laptop, the default) keeps everything in its own memory and needs no Redis.
Several processes behind a balancer (``app.py --workers N``) are given
``VISUALISER_REDIS_URL``: a student pinned to one process follows a lecturer pinned to another,
and a view one process computed serves the others.

Redis is a cache here, never a dependency of a request: every call has a short socket timeout,
and any error is logged once and answered as a miss (the view is computed in the process), after
which Redis is left alone for a while (a server that is down or slow would otherwise cost each
request its timeout). Values are JSON (plotly figures as their own JSON), compressed; nothing is
ever unpickled. A view holding anything JSON cannot give back as it was stays in its process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

log = logging.getLogger("visualiser")

REDIS_URL_ENV = "VISUALISER_REDIS_URL"
KEY_PREFIX = "visualiser:"
# A request waits at most this long for Redis before computing for itself.
SOCKET_TIMEOUT_S = 0.5
# After an error Redis is not asked again for this long (each request would wait its timeout).
RETRY_AFTER_S = 10.0
# What this app writes to a Redis it may share with others (``--redis URL``) is bounded by
# value and by time, not by the server's maxmemory, which may not be ours to set: a view over
# VIEW_MAX_BYTES compressed stays in its process, and every view expires VIEW_TTL_S after it
# was stored (a class's presets are asked for within minutes of each other).
VIEW_MAX_BYTES = 2 * 1024 * 1024
VIEW_TTL_S = 3600
# Views waiting to be written (encoded off the request's thread); past this, new ones are not.
MAX_PENDING_WRITES = 32

_REPOSITORY = Path(__file__).resolve().parents[2]


def redis_url() -> str | None:
    """The Redis the app processes share (``VISUALISER_REDIS_URL``), or None: one process."""
    return os.environ.get(REDIS_URL_ENV, "").strip() or None


def connect(url: str) -> redis.Redis:
    """A client of the Redis at ``url`` with short timeouts. It connects on first use, so an
    app may start before its Redis does. Raises RuntimeError, with what to do, for a URL that
    names no Redis or a missing client."""
    try:
        import redis
    except ImportError:
        raise RuntimeError(
            f"{REDIS_URL_ENV} is set but the redis client is not installed: "
            "pip install -r requirements.txt"
        ) from None
    try:
        return redis.Redis.from_url(
            url,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            health_check_interval=30,
        )
    except ValueError as error:
        # The URL is not repeated: it may hold a password.
        raise RuntimeError(f"{REDIS_URL_ENV} is not a Redis URL: {error}") from None


@dataclass(eq=False)
class Breaker:
    """Whether to ask Redis now: not for ``retry_after_s`` after an error, which is logged once
    until Redis answers again; ``what`` names what Redis keeps, for the log."""

    what: str
    retry_after_s: float = RETRY_AFTER_S
    clock: Callable[[], float] = time.monotonic
    _retry_at: float = field(default=0.0, init=False)
    _failing: bool = field(default=False, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def closed(self) -> bool:
        """Whether Redis may be asked now."""
        return self.clock() >= self._retry_at

    def failed(self, error: BaseException) -> None:
        """Redis failed: log it (the first time in a row) and leave it alone for a while."""
        with self._lock:
            self._retry_at = self.clock() + self.retry_after_s
            if self._failing:
                return
            self._failing = True
        log.warning(
            "Redis (%s) did not answer (%s): this process works without it meanwhile",
            self.what,
            error,
        )

    def worked(self) -> None:
        """Redis answered."""
        if self._failing:
            with self._lock:
                self._failing = False
            log.warning("Redis (%s) answers again", self.what)


# -- Views as JSON ------------------------------------------------------------------------
# A view is what a handler returns: tuples of plotly figures, strings, numbers, gradio update
# dicts, None, and components that refit a control (gr.Slider(maximum=...)). Each node is
# written as JSON that says what it was, so that it comes back the same type: a tuple is not a
# list, a figure not a dict. A component is written as its class (one of gradio's own) and the
# arguments it was made with, all gradio reads of a component a handler returns, and is made
# again from them.


class Unencodable(TypeError):
    """A view holds something JSON cannot give back as it was."""


def _figure_type() -> type | None:
    try:
        import plotly.graph_objects as go
    except ImportError:  # pragma: no cover - plotly is a requirement
        return None
    return go.Figure


def _encode(value: Any, figure: type | None) -> Any:
    kind = type(value)
    if value is None or kind in (bool, str, int):
        return value
    if kind is float:
        # JSON has no NaN or infinity: they are written as strings, under a tag.
        return value if math.isfinite(value) else {"n": repr(value)}
    if kind is tuple:
        return {"t": [_encode(v, figure) for v in value]}
    if kind is list:
        return [_encode(v, figure) for v in value]
    if kind is dict:
        if not all(type(k) is str for k in value):
            raise Unencodable("a dict whose keys are not all strings")
        return {"d": {k: _encode(v, figure) for k, v in value.items()}}
    if figure is not None and kind is figure:
        return {"f": value.to_json()}
    if _component_class(kind.__name__) is kind:
        return {"c": [kind.__name__, _encode(dict(value.constructor_args), figure)]}
    raise Unencodable(f"a {kind.__name__}")


def _component_class(name: str) -> type | None:
    """Gradio's component class called ``name``, or None (no other class is ever made from a
    stored view)."""
    import gradio.components

    found = getattr(gradio.components, name, None)
    if isinstance(found, type) and issubclass(found, gradio.components.Component):
        return found
    return None


def _decode(node: Any) -> Any:
    if isinstance(node, list):
        return [_decode(v) for v in node]
    if not isinstance(node, dict):
        return node
    ((tag, payload),) = node.items()
    if tag == "t":
        return tuple(_decode(v) for v in payload)
    if tag == "d":
        return {k: _decode(v) for k, v in payload.items()}
    if tag == "n":
        return float(payload)
    if tag == "f":
        return _figure(payload)
    if tag == "c":
        name, arguments = payload
        made = _component_class(name)
        if made is None:
            raise ValueError(f"a stored view names {name!r}, which is no gradio component")
        return made(**_decode(arguments))
    raise ValueError(f"a stored view with an unknown tag {tag!r}")


def _figure(text: str) -> Any:
    """The plotly figure ``text`` (its ``to_json()``) holds. Built unvalidated: it was a valid
    figure when written, and plotly's validation of a 200×200 heat map takes 120 ms against
    12 ms, as long as many views take to compute; ``plotly.io.from_json`` where plotly no longer
    takes ``_validate``."""
    import plotly.graph_objects as go

    try:
        return go.Figure(json.loads(text), _validate=False)
    except TypeError:  # pragma: no cover - a plotly without the keyword
        import plotly.io

        return plotly.io.from_json(text)


def encode_view(value: Any) -> bytes:
    """``value`` as compressed JSON; raises :class:`Unencodable` when it holds anything JSON
    cannot give back as it was (a numpy array, a component, a dict with other keys...)."""
    text = json.dumps(_encode(value, _figure_type()), separators=(",", ":"), allow_nan=False)
    return zlib.compress(text.encode(), 1)


def decode_view(data: bytes) -> Any:
    """The view :func:`encode_view` wrote."""
    return _decode(json.loads(zlib.decompress(data)))


def stable_key(parts: Any) -> str | None:
    """A digest of ``parts`` (nested tuples of strings, numbers, booleans and None) that every
    process computes alike, or None when a part is anything else (its text could hold an
    address in memory)."""

    def plain(value: Any) -> Any:
        if value is None or type(value) in (bool, str, int, float):
            return value
        if type(value) is tuple:
            return [plain(v) for v in value]
        raise TypeError

    try:
        text = json.dumps(plain(parts), separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def code_version(extra: Iterable[str] = ()) -> str:
    """A digest of the code that draws views and the shipped models (the ``.py`` files of
    ``ui/`` and ``transformer/``, the names and sizes of ``assets/``) and of ``extra`` (the
    models a registry offers): processes that would draw a view differently do not share it."""
    digest = hashlib.sha256()
    for package in ("ui", "transformer"):
        for path in sorted((_REPOSITORY / package).rglob("*.py")):
            digest.update(str(path.relative_to(_REPOSITORY)).encode() + b"\0")
            digest.update(path.read_bytes())
    assets = _REPOSITORY / "assets"
    if assets.is_dir():
        for path in sorted(assets.rglob("*")):
            if path.is_file():
                digest.update(f"{path.relative_to(_REPOSITORY)}\0{path.stat().st_size}\0".encode())
    for part in extra:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def models_version(registry: Any) -> str:
    """:func:`code_version` with the device and the models ``registry`` (a ``ModelRegistry``)
    offers: their names, what each ``--model`` stands for, and the size and time of its files where it is a
    folder here (weights rewritten under the same name are other views)."""
    parts = [str(registry.device), *registry.model_names]
    for name, source in sorted(registry.sources.items()):
        parts.append(f"{name}={source}")
        folder = Path(source).expanduser()
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if path.is_file():
                    stat = path.stat()
                    parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return code_version(parts)


MISSING: Any = object()


@dataclass(eq=False)
class RedisViews:
    """The second level of the shared views: views kept in Redis under
    ``<prefix>view:<version>:<key>``, each expiring ``ttl_s`` after it was stored, none over
    ``max_bytes`` compressed. :meth:`get` answers :data:`MISSING` for a view not there, and
    for any error of Redis (which :meth:`put` ignores)."""

    client: redis.Redis = field(repr=False)
    version: str
    _: KW_ONLY
    prefix: str = KEY_PREFIX
    ttl_s: int = VIEW_TTL_S
    max_bytes: int = VIEW_MAX_BYTES
    breaker: Breaker = field(default_factory=lambda: Breaker("shared views"))
    stored: int = field(default=0, init=False)  # views written, for the tests and the benchmark
    # Views that stay in their process (unencodable or too large).
    unstored: int = field(default=0, init=False)
    # Views to write, on a daemon thread of their own (started on first use): a process
    # that exits does not wait for a Redis that does not answer.
    _writes: queue.Queue[tuple[str, Any]] = field(
        default_factory=lambda: queue.Queue(MAX_PENDING_WRITES), init=False, repr=False
    )
    _writer: threading.Thread | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _key(self, key: str) -> str:
        return f"{self.prefix}view:{self.version}:{key}"

    def get(self, key: str) -> Any:
        """The view stored under ``key`` (a :func:`stable_key`), else :data:`MISSING`."""
        if not self.breaker.closed():
            return MISSING
        try:
            data = self.client.get(self._key(key))
        except Exception as error:  # any failure of Redis: computed here instead
            self.breaker.failed(error)
            return MISSING
        self.breaker.worked()
        if data is None:
            return MISSING
        try:
            return decode_view(data)  # type: ignore[arg-type]
        except Exception as error:  # a value another version wrote: computed again
            log.warning("a shared view in Redis could not be read (%s): computed again", error)
            return MISSING

    def put(self, key: str, view: Any) -> bool:
        """Store ``view`` under ``key``; whether it was (not when it cannot be encoded, is too
        large, or Redis failed)."""
        try:
            data = encode_view(view)
        except (Unencodable, ValueError):
            self.unstored += 1
            return False
        if len(data) > self.max_bytes:
            self.unstored += 1
            return False
        if not self.breaker.closed():
            return False
        try:
            self.client.set(self._key(key), data, ex=self.ttl_s)
        except Exception as error:  # any failure of Redis: the view stays in this process
            self.breaker.failed(error)
            return False
        self.breaker.worked()
        with self._lock:
            self.stored += 1
        return True

    def put_later(self, key: str, view: Any) -> None:
        """:meth:`put`, on a thread of its own: the request that computed ``view`` is answered
        without waiting for its encoding (a 200×200 heat map: 20 ms) or Redis. A view is never
        changed once kept (sessions get copies of its containers), so it is read safely there."""
        if not self.breaker.closed():
            return
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write, name="shared-views-redis", daemon=True
                )
                self._writer.start()
        with contextlib.suppress(queue.Full):  # Redis is slower than the views come: dropped
            self._writes.put_nowait((key, view))

    def _write(self) -> None:
        while True:
            key, view = self._writes.get()
            try:
                self.put(key, view)
            except Exception as error:  # never ends the writer
                log.warning("a shared view was not written to Redis: %s", error)
            finally:
                self._writes.task_done()

    def flush(self) -> None:
        """Wait until the views handed to :meth:`put_later` so far are written."""
        self._writes.join()


def shared_views_store(registry: Any) -> RedisViews | None:
    """The Redis level of the shared views when the app processes share one (see
    :func:`redis_url`), for the models ``registry`` offers; None for a single process."""
    url = redis_url()
    if url is None:
        return None
    return RedisViews(connect(url), models_version(registry))
