"""The tabs' first views when a page opens, in one event; on a page opened with a link, after it.

Every tab draws its first example when a page opens. Each tab's page-load handler is one event
no longer: one page-load event calls them all and sends their outputs together (ten events
were ten round trips, and the page re-read its progress targets at every status change of
each, the link's figures waiting behind them). On a page opened with a link that
event sends nothing; the link's event draws its tab, and once it is on screen one event draws
the other tabs' first views (the linked tab's too, if the link could not be read). A handler
that is also a control's live redraw joins the one event (Embeddings'), but the first tab's
(Tokenize's): its own quick page-load event draws the tab a page without a link shows sooner.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from typing import Any

import gradio as gr

from ..serving.errors import describe
from ..serving.ordering import opening, overtaken
from ..serving.page_script import serve_with_script
from ..serving.plotly_bundle import plotly_chunk
from .views import as_update, is_update, merge_outputs, union, usable

log = logging.getLogger("visualiser")


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
""".replace("CHUNK", json.dumps(plotly_chunk()))


# Runs in the page before gradio's own script reads its configuration: a page opened with a link
# (``?tab=attention``) starts on the link's tab. Gradio mounts only the tab on screen, so the page
# no longer builds the first tab, Tokenize, only to leave it for the link's.
LINKED_TAB_JS = r"""
(() => {
  const slug = new URLSearchParams(window.location.search).get("tab");
  const config = window.gradio_config;
  if (!slug || !config || !Array.isArray(config.components)) return;
  const byId = new Map(config.components.map((c) => [c.id, c]));
  const visit = (node) => {
    for (const child of node.children || []) {
      const c = byId.get(child.id);
      if (c && c.type === "tabs" && (child.children || []).some(
        (item) => (byId.get(item.id) || {}).props?.id === slug)) {
        c.props.selected = slug;
        return true;
      }
      if (visit(child)) return true;
    }
    return false;
  };
  if (!visit(config.layout || {})) return;
  // The tab's controls show their defaults until the link's event sets them: the tab stays
  // hidden behind a line that says what is coming. REVEAL_LINK_JS shows it once the link's
  // event has ended, well or not; the timer only where that event never ends (a lost
  // connection): a busy server took over 20 s, and the page then showed the defaults first.
  const style = document.createElement("style");
  style.textContent = `
    html.link-pending .tabitem { visibility: hidden; }
    html.link-pending .tabitem::before {
      content: "Opening the link's view…"; visibility: visible; padding: 1em 0;
      color: var(--body-text-color-subdued);
    }`;
  document.head.appendChild(style);
  document.documentElement.classList.add("link-pending");
  setTimeout(() => document.documentElement.classList.remove("link-pending"), 60000);
  const chunk = CHUNK;
  if (chunk) {
    const preload = document.createElement("link");
    preload.rel = "modulepreload";
    preload.href = "./assets/" + chunk;
    document.head.appendChild(preload);
  }
})();
""".replace("CHUNK", json.dumps(plotly_chunk()))

# Chained after the link's event (its outputs applied): the linked tab is shown.
REVEAL_LINK_JS = """
() => { document.documentElement.classList.remove("link-pending"); return []; }
"""


class OpenOnLinkedTab:
    """ASGI middleware: the page itself (``GET /`` with a ``tab`` parameter) gets
    :data:`LINKED_TAB_JS`, run before gradio's script reads the page's configuration (an
    uncompressed HTML page only; anything else passes through unchanged)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.script = b"<script>" + LINKED_TAB_JS.encode() + b"</script>"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        if (
            scope["type"] != "http"
            or scope.get("method") != "GET"
            or path.strip("/")
            or not re.search(rb"(^|&)tab=", scope.get("query_string") or b"")
        ):
            await self.app(scope, receive, send)
            return
        await serve_with_script(self.app, scope, receive, send, self.script)


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
    """The page-load events of a demo's tabs, made one event that waits on a link's page.

    ``tabs``: the ``gr.Tab`` blocks, each with its slug as ``id``. Built inside the demo's
    ``with`` block: each tab's page-load handler stays registered (and callable through the
    API where it was, and on its other events where it is also a control's live redraw) but no
    longer runs on page load; :meth:`open`, one page-load event, calls them, and their ``.then``
    followers follow it. Chain ``draw`` (inputs ``[view, *self.inputs]``, outputs
    ``self.outputs``) after the link's event.

    ``linked``: what a link's event writes (its tab's controls and figures). On the linked
    tab ``draw`` runs only the handlers that also set something else (Generate's sliders fitted
    to the model, its chat switch, shown for a model with a chat template: a ``.change`` that a
    link naming the model already chosen never fires), and keeps everything of their updates to
    those components but the value the link set."""

    def __init__(
        self, demo: gr.Blocks, tabs: Iterable[gr.Tab], linked: Iterable[gr.blocks.Block] = ()
    ) -> None:
        self.linked = {component._id for component in linked}
        inside = {str(tab.id): _descendants(tab) for tab in tabs}
        first_tab = next(iter(inside), None)  # the tab a page without a link shows
        # (the page-load handler, its inputs, its outputs, the tab it draws)
        self.functions: list[tuple[Any, list[Any], list[Any], str]] = []
        replaced = []
        for function in sorted(demo.fns.values(), key=lambda f: f._id):
            on_load = any(event == "load" for _, event in function.targets)
            if not on_load or not function.queue or not usable(function):
                continue  # also: the model menus and the status line, not views, and quick
            outputs = {c._id for c in function.outputs}
            slug = next((s for s, ids in inside.items() if outputs & ids), None)
            if slug is None:
                continue
            # A control's live redraw that also runs on page load (Tokenize, Embeddings) joins
            # too, but the first tab's: its quick event draws the tab a page without a link
            # shows, sooner than the one event drawing every tab. One with followers keeps its
            # load: the followers follow its other events too.
            live = any(event != "load" for _, event in function.targets)
            followed = any(f.trigger_after == function._id for f in demo.fns.values())
            if live and (slug == first_tab or followed):
                continue
            self.functions.append(
                (function.fn, list(function.inputs), list(function.outputs), slug)
            )
            replaced.append(function)
        self.inputs = union(c for _, inputs, _, _ in self.functions for c in inputs)
        self.outputs = union(c for _, _, outputs, _ in self.functions for c in outputs)
        opened = demo.load(self.open, self.inputs, self.outputs, api_visibility="private")
        for function in replaced:
            # opened runs it on page load; a control's live redraw keeps its other events
            function.targets = [
                (block, event) for block, event in function.targets if event != "load"
            ]
            for follower in demo.fns.values():
                if follower.trigger_after == function._id:
                    follower.trigger_after = opened["id"]
        names = [(getattr(fn, "__name__", "?"), slug) for fn, _, _, slug in self.functions]
        log.debug("first views drawn by one page-load event: %s", names)

    @opening
    def open(self, request: gr.Request, *values: Any) -> tuple:
        """When a page opens: every tab's first view (``values`` are those of
        ``self.inputs``), or nothing on a page opened with a link (``draw`` draws them)."""
        if opened_with_link(request):
            return tuple(gr.skip() for _ in self.outputs)
        return self._first_views(values, drawn=None)

    @opening
    def draw(self, request: gr.Request, view: dict | None, *values: Any) -> tuple:
        """On a page opened with a link (else nothing), the first views of the tabs the link
        did not draw (every tab when it could not be read, ``view`` None)."""
        if not opened_with_link(request):
            return tuple(gr.skip() for _ in self.outputs)
        return self._first_views(values, drawn=view.get("tab") if view else None)

    def _first_views(self, values: tuple, drawn: str | None) -> tuple:
        """Each page-load handler called with ``values`` (those of ``self.inputs``); of the tab
        ``drawn`` (by a link), only those that set more than the link wrote, and of their
        outputs to what it wrote, all but the values. Their outputs merged in the order the
        handlers were registered. A handler that fails leaves its outputs as they are, with a
        message. A handler whose outputs a later event of the page has written already (a tour
        stop or a model picked while the page was still opening) is not called: its defaults
        would be held back anyway, and it would restart the generation that event began."""
        known = {c._id: v for c, v in zip(self.inputs, values, strict=True)}
        outputs: dict[int, Any] = {}
        for fn, inputs, function_outputs, slug in self.functions:
            linked = slug == drawn
            if linked and all(c._id in self.linked for c in function_outputs):
                continue
            if overtaken(function_outputs):
                continue
            try:
                result = fn(*[known.get(c._id) for c in inputs])
            except Exception as error:  # the other tabs still get their first views
                gr.Warning(describe(error))
                continue
            if len(function_outputs) == 1:
                result = (result,)
            for component, out in zip(function_outputs, result, strict=True):
                if linked and component._id in self.linked:
                    out = _without_value(out)
                    if out is None:
                        continue
                outputs[component._id] = merge_outputs(outputs.get(component._id), out)
        return tuple(outputs.get(c._id, gr.skip()) for c in self.outputs)


def _without_value(out: Any) -> dict | None:
    """A handler's output to a component whose value a link set: its update without the value
    (its range, visibility, interactivity), or ``None`` when it sets nothing else."""
    if not is_update(out):
        return None
    update = {k: v for k, v in as_update(out).items() if k != "value"}
    return update if len(update) > 1 else None
