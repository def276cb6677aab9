"""The tabs' first views when a page opens with a link: the link's own view first.

Every tab draws its first example when a page opens (``demo.load`` events). On a page opened
with a link those events made the link wait (issue 23.5): the browser received and processed
every tab's figures before the link's, and the linked tab's own first example could land after
the link's view and replace it. So on such a page the tabs' first-view events send nothing; the
link's event draws its tab, and once it is on screen one event draws the other tabs' first
views (the linked tab's too, if the link could not be read). A handler that is also a control's
live redraw (Tokenize's, Embeddings') still runs when the page opens: it must draw on any page,
and it is quick.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gradio as gr

from .views import _merge, _usable, union

log = logging.getLogger("visualiser")


def _plotly_chunk() -> str | None:
    """The file name of gradio's plotly bundle among its page's assets (None if not found)."""
    assets = Path(gr.__file__).parent / "templates" / "frontend" / "assets"
    found = sorted(path.name for path in assets.glob("PlotlyPlot-*.js"))
    return found[0] if len(found) == 1 else None


# Part of the page's script. Gradio loads its plotly bundle (4.6 MB) when the first plot is
# mounted, and the browser spent seconds evaluating it before drawing a link's view: a page
# opened with a link loads it at once, beside the page's first events; any other page when the
# browser is idle (the first tab, Tokenize, has no plot), so that the first plot tab opens sooner.
PRELOAD_PLOTLY_JS = r"""
(() => {
  const chunk = CHUNK;
  const index = [...document.scripts].find((s) => /\/assets\/index-[^/]*\.js$/.test(s.src));
  if (!chunk || !index) return;
  const load = () => import(new URL(chunk, index.src).href).catch(() => {});
  if (new URLSearchParams(window.location.search).has('tab')) load();
  else if (window.requestIdleCallback) window.requestIdleCallback(load, {timeout: 8000});
  else setTimeout(load, 3000);
})();
""".replace("CHUNK", json.dumps(_plotly_chunk()))


def _descendants(block: Any) -> set[int]:
    """The ids of every block inside ``block``."""
    ids: set[int] = set()
    for child in getattr(block, "children", []):
        ids.add(child._id)
        ids |= _descendants(child)
    return ids


def opened_with_link(request: gr.Request | None) -> bool:
    """Whether the page's address names a view (a ``tab`` parameter): a link."""
    return request is not None and "tab" in request.query_params


class FirstViews:
    """The page-load events of a demo's tabs, made to wait on a page opened with a link.

    ``tabs``: the ``gr.Tab`` blocks, each with its slug as ``id``. Chain ``draw`` (inputs
    ``[view, *self.inputs]``, outputs ``self.outputs``) after the link's event."""

    def __init__(self, demo: gr.Blocks, tabs: Iterable[gr.Tab]) -> None:
        inside = {str(tab.id): _descendants(tab) for tab in tabs}
        # (the page-load handler, its inputs, its outputs, the tab it draws)
        self.functions: list[tuple[Any, list[Any], list[Any], str]] = []
        for function in sorted(demo.fns.values(), key=lambda f: f._id):
            # Only the events that run on page load alone: a handler that is also a control's
            # live redraw must draw on any page (those are the quick ones: Tokenize, Embeddings).
            on_load_only = bool(function.targets) and all(
                event == "load" for _, event in function.targets
            )
            if not on_load_only or not function.queue or not _usable(function):
                continue  # also: the model menus and the status line, not views, and quick
            outputs = {c._id for c in function.outputs}
            slug = next((s for s, ids in inside.items() if outputs & ids), None)
            if slug is None:
                continue
            self.functions.append(
                (function.fn, list(function.inputs), list(function.outputs), slug)
            )
            function.fn = _unless_link(function.fn, len(function.outputs))  # keeps its followers
        self.inputs = union(c for _, inputs, _, _ in self.functions for c in inputs)
        self.outputs = union(c for _, _, outputs, _ in self.functions for c in outputs)
        names = [(getattr(fn, "__name__", "?"), slug) for fn, _, _, slug in self.functions]
        log.debug("first views deferred on a page opened with a link: %s", names)

    def draw(self, request: gr.Request, view: dict | None, *values: Any) -> tuple:
        """On a page opened with a link (else nothing), the first views of the tabs the link
        did not draw (every tab when it could not be read, ``view`` None): each page-load
        event's handler called with ``values`` (those of ``self.inputs``)."""
        if not opened_with_link(request):
            return tuple(gr.skip() for _ in self.outputs)
        known = {c._id: v for c, v in zip(self.inputs, values, strict=True)}
        linked = view.get("tab") if view else None
        outputs: dict[int, Any] = {}
        for fn, inputs, function_outputs, slug in self.functions:
            if slug == linked:
                continue
            try:
                result = fn(*[known.get(c._id) for c in inputs])
            except gr.Error as error:
                gr.Warning(str(error.message))
                continue
            if len(function_outputs) == 1:
                result = (result,)
            for component, out in zip(function_outputs, result, strict=True):
                outputs[component._id] = _merge(outputs.get(component._id), out)
        return tuple(outputs.get(c._id, gr.skip()) for c in self.outputs)


def _unless_link(fn: Any, n_outputs: int) -> Any:
    """``fn``, sending nothing on a page opened with a link (``FirstViews.draw`` draws it)."""
    nothing = gr.skip() if n_outputs == 1 else tuple(gr.skip() for _ in range(n_outputs))

    def on_page_load(request: gr.Request, *args: Any) -> Any:
        return nothing if opened_with_link(request) else fn(*args)

    on_page_load.__name__ = getattr(fn, "__name__", "on_page_load")
    return on_page_load
