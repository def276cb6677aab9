"""Gradio's plotly bundle, served with only the trace types the app draws registered.

Gradio's ``gr.Plot`` loads one module of 4.6 MB that holds the whole of plotly.js and registers
its 48 trace types (3-D surfaces, maps, sankey, …) when it is evaluated. In a link's page that
evaluation was the largest single task before its figures could be drawn: about 1.2 s on a
2-core machine, of which registering the trace types the app never draws took about 0.6 s
(``benchmarks/results.md``). :class:`ServePrunedPlotly` answers the request for
that module with the same file, its list of registered trace types cut to :data:`TRACES`.
Plotly's scatter lives in its core and stays registered.

The module is gradio's build, minified; the cut is made only where the file has the expected
shape (one ``register([...])`` list whose entries each name one trace module), and otherwise
the file is served as gradio ships it (slower, never broken).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import logging
import re
import threading
from pathlib import Path
from typing import Any

import anyio.to_thread
import gradio as gr

log = logging.getLogger("visualiser")

# The trace types of every figure the app draws (``transformer/figures``), besides scatter.
TRACES = ("bar", "heatmap", "table")

ASSETS = Path(gr.__file__).parent / "templates" / "frontend" / "assets"

# The bundle's one call registering its trace types: ``n.register([co(),So(),…,tT()])``.
_REGISTER = re.compile(r"\b(\w+)\.register\(\[((?:[\w$]+\(\),)*[\w$]+\(\))\]\)")


def plotly_chunk() -> str | None:
    """The file name of gradio's plotly module among its page's assets (None if not found)."""
    found = sorted(path.name for path in ASSETS.glob("PlotlyPlot-*.js"))
    return found[0] if len(found) == 1 else None


# A lazily evaluated module of the bundle: ``so=h((e,t)=>{`` (``h`` wraps a CommonJS module).
_MODULE = re.compile(r"[,;\s]([\w$]+)=([\w$]+)\(\(\w+,(\w+)\)=>\{")


def _trace_names(source: str, entries: list[str]) -> dict[str, str | None]:
    """The trace type each ``register`` entry stands for (None where it is not read as one).
    An entry reads ``co=h((e,t)=>{t.exports=so()})``, and the module ``so`` is an object literal
    holding ``moduleType:`trace`,name:`bar``` before the next module starts."""
    modules: dict[str, tuple[str, str, int]] = {}  # name: (its wrapper, its `module`, body)
    starts: dict[str, list[int]] = {}  # wrapper: where each of its modules starts
    for found in _MODULE.finditer(source):
        modules.setdefault(found.group(1), (found.group(2), found.group(3), found.end()))
        starts.setdefault(found.group(2), []).append(found.start())
    names: dict[str, str | None] = {}
    for entry in entries:
        names[entry] = None
        if entry not in modules:
            continue
        helper, exports, body = modules[entry]
        inner = re.match(rf"{exports}\.exports=([\w$]+)\(\)\}}\)", source[body : body + 200])
        if inner is None or inner.group(1) not in modules:
            continue
        helper_inner, exports, body = modules[inner.group(1)]
        if helper_inner != helper or not source.startswith(f"{exports}.exports={{", body):
            continue
        following = starts[helper]
        later = following[bisect.bisect(following, body) :]
        end = later[0] if later else len(source)
        kinds = re.findall(r"moduleType:`(\w+)`,name:`(\w+)`", source[body:end])
        if len(kinds) == 1 and kinds[0][0] == "trace":
            names[entry] = kinds[0][1]
    return names


def prune(source: str, keep: tuple[str, ...] = TRACES) -> str | None:
    """``source`` (gradio's plotly module) with only the trace types ``keep`` registered, or
    None where the file does not have the expected shape: one register list, every entry of it
    naming its trace module at most once, and each of ``keep`` found."""
    calls = list(_REGISTER.finditer(source))
    if len(calls) != 1:
        return None
    call = calls[0]
    entries = [entry.removesuffix("()") for entry in call.group(2).split(",")]
    names = _trace_names(source, entries)
    named = [name for name in names.values() if name is not None]
    kept = [entry for entry in entries if names[entry] in keep]
    if len(set(named)) < len(named) or sorted(str(names[entry]) for entry in kept) != sorted(keep):
        return None
    register = f"{call.group(1)}.register([{','.join(entry + '()' for entry in kept)}])"
    return source[: call.start()] + register + source[call.end() :]


_pruning = threading.Lock()


@functools.cache
def _pruned_chunk() -> bytes | None:
    name = plotly_chunk()
    if name is None:
        return None
    pruned = prune((ASSETS / name).read_text(encoding="utf-8"))
    if pruned is None:
        log.warning("gradio's plotly module %s has an unexpected shape; served whole", name)
        return None
    return pruned.encode("utf-8")


def pruned_chunk() -> bytes | None:
    """Gradio's plotly module with only :data:`TRACES` registered (None: serve gradio's own).
    Cut once (about 0.2 s), by :func:`start_pruning` when the app starts."""
    with _pruning:
        return _pruned_chunk()


def start_pruning() -> None:
    """Cut the module in the background, so that the first page does not wait for it."""
    threading.Thread(target=pruned_chunk, name="plotly-bundle", daemon=True).start()


class ServePrunedPlotly:
    """ASGI middleware: ``GET`` (or ``HEAD``) of gradio's plotly module answers
    :func:`pruned_chunk`; every other request, and every request when the module could not be
    cut, passes through unchanged. Gradio's compression applies to the answer as to the file.

    The answer carries an ``ETag`` of its bytes and asks to be revalidated (``no-cache``): a
    browser that has it gets ``304 Not Modified``, and one whose copy came from another cut
    (another version of the app, another list of types) gets the new one under the same name.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        name = plotly_chunk()
        self.path = f"/assets/{name}" if name else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        body = None
        if (
            self.path is not None
            and scope["type"] == "http"
            and scope.get("method") in ("GET", "HEAD")
            and path == self.path
        ):
            body = await anyio.to_thread.run_sync(pruned_chunk)
        if body is None:
            await self.app(scope, receive, send)
            return
        etag = b'"%s"' % hashlib.sha256(body).hexdigest()[:32].encode()
        asked = dict(scope.get("headers") or []).get(b"if-none-match", b"")
        if etag in [tag.strip().removeprefix(b"W/") for tag in asked.split(b",")]:
            headers = [(b"etag", etag), (b"cache-control", b"no-cache")]
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        headers = [
            (b"content-type", b"application/javascript; charset=utf-8"),
            (b"content-length", b"%d" % len(body)),
            (b"etag", etag),
            (b"cache-control", b"no-cache"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(
            {"type": "http.response.body", "body": body if scope["method"] == "GET" else b""}
        )
