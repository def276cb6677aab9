"""Phones: the page in one column, and every figure drawn for the screen's width.

A lecture hall opens the link on phones (390 px wide). Gradio's layout keeps the laptop's rows
and hides the tabs that do not fit behind a "⋯" menu, and a figure built for a laptop (two heat
maps side by side, colour bars between them) kept a sixth of the screen per panel. Here:

- :data:`WIDTH_HEAD`, in the page's head, keeps the window's width in a cookie, sent with every
  request (the events' too), before the first one;
- :func:`fit_figures` wraps every event that draws a figure: on a request from a narrow window
  each figure it returns is laid out for that width (``transformer.figures.narrow``); wider
  windows, the API and the shared cache get the builders' own figures, untouched;
- :data:`PHONE_CSS` lays the page out in one column below 600 px: the title whole, the tabs
  on screen, controls a thumb can hit, figures the screen's width.

A window turned from portrait to landscape keeps the figures drawn before; its next redraw
(any control) fits the new width.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from typing import Any

import gradio as gr
import plotly.graph_objects as go
from gradio.blocks import Block
from gradio.context import LocalContext

from transformer.figures.narrow import NARROW_WIDTH, fit_width, is_narrow

COOKIE = "visualiser-width"
# The figure's own width on a phone: the window less the page's and the panel's margins.
FIGURE_INSET = 28

# Runs in the page's head, before gradio's script sends the first request: the cookie, and the
# class ``narrow`` on the page's root element that PHONE_CSS's rules start with (gradio scopes a
# custom stylesheet's @media rules to its own container, which leaves the page's margins out).
WIDTH_HEAD = (
    "<script>(() => {"
    "const keep = () => {"
    f" document.cookie = '{COOKIE}=' + Math.round(window.innerWidth) + '; path=/; SameSite=Lax';"
    f" document.documentElement.classList.toggle('narrow', window.innerWidth < {NARROW_WIDTH});"
    "};"
    "keep(); window.addEventListener('resize', keep);"
    "})();</script>"
)


def window_width(request: Any) -> int | None:
    """The window width the page's cookie gives (None without one, or unreadable)."""
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    raw = headers.get("cookie") if hasattr(headers, "get") else None
    if not raw:
        return None
    try:
        cookie = SimpleCookie()
        cookie.load(raw)
    except CookieError:
        return None
    morsel = cookie.get(COOKIE)
    if morsel is None or not morsel.value.isdigit():
        return None
    width = int(morsel.value)
    return width if 0 < width < 100_000 else None


def figure_width() -> int | None:
    """The width a figure of the event being handled will be drawn at, when its window is
    narrow (a phone); None otherwise (a wide window, no page, the API)."""
    width = window_width(LocalContext.request.get(None))
    return width - FIGURE_INSET if width is not None and is_narrow(width) else None


def fitted(value: Any, width: int | None) -> Any:
    """An event's return ``value`` (one output's value, a tuple or list of them, a dict by
    component, an update dict, a component such as ``gr.Plot(figure, visible=True)``) with
    each plotly figure in it laid out for ``width``."""
    if width is None:
        return value
    if isinstance(value, go.Figure):
        return fit_width(value, width)
    if isinstance(value, Block) and isinstance(value.constructor_args.get("value"), go.Figure):
        # gr.Plot(figure, visible=True): gradio reads it as this update of its arguments
        return fitted({**value.constructor_args, "__type__": "update"}, width)
    if isinstance(value, tuple | list):
        return type(value)(fitted(item, width) for item in value)
    if isinstance(value, dict):
        if "__type__" in value:  # gr.update(value=figure, ...)
            return {k: fitted(v, width) if k == "value" else v for k, v in value.items()}
        return {k: fitted(v, width) for k, v in value.items()}
    return value


def _fitting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (of any kind gradio calls) whose returned or yielded figures are fitted to the
    width of the window that asked. Gradio sets the request before the call and before every
    step of a generator, so the width is read there."""
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def async_steps(*args: Any, **kwargs: Any) -> Any:
            async for value in fn(*args, **kwargs):
                yield fitted(value, figure_width())

        return async_steps
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            return fitted(await fn(*args, **kwargs), figure_width())

        return awaited
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def steps(*args: Any, **kwargs: Any) -> Any:
            for value in fn(*args, **kwargs):
                yield fitted(value, figure_width())

        return steps

    @functools.wraps(fn)
    def called(*args: Any, **kwargs: Any) -> Any:
        return fitted(fn(*args, **kwargs), figure_width())

    return called


def fit_figures(demo: gr.Blocks) -> int:
    """Wrap every event of ``demo`` that writes a gr.Plot so that a narrow window's figures are
    fitted to it (see the module's notes); returns how many were wrapped. Called last, so
    that the shared cache and the other wrappers keep the builders' own figures."""
    wrapped = 0
    for fn in demo.fns.values():
        if fn.fn is None or getattr(fn.fn, "fits_width", False):
            continue
        if not any(isinstance(out, gr.Plot) for out in fn.outputs):
            continue
        fn.fn = _fitting(fn.fn)
        fn.fn.fits_width = True  # type: ignore[attr-defined]
        wrapped += 1
    return wrapped


# In a narrow window (the root element's class ``narrow``): one column. Rows stack, and the
# page's side margins shrink so that figures keep the screen's width. Every rule starts at the
# root element: gradio copies a custom rule that starts there unchanged, and scopes the others
# (and everything inside an @media rule) to its own container.
PHONE_CSS = """
html.narrow .gradio-container > .main.app { padding: 8px 6px !important; }
html.narrow .gradio-container .wrap.fillable { padding: 0 !important; }
html.narrow .gradio-container .contain { padding: 0 !important; }
html.narrow .gradio-container .row:not(#top-bar) { flex-direction: column !important;
  flex-wrap: nowrap !important; }
html.narrow .gradio-container .row:not(#top-bar) > * { min-width: 100% !important;
  width: 100% !important; }
html.narrow .gradio-container .block { padding: 6px !important; }
html.narrow .gradio-container .block.padded { padding: 8px !important; }
/* The title whole: no word cut ("Transforme / r"), the buttons under it. */
html.narrow #top-bar { padding-left: 2.25rem; gap: 6px; flex-wrap: wrap !important; }
html.narrow #top-bar > #title { min-width: 100% !important; }
html.narrow #top-bar > :not(#title) { min-width: 0 !important; flex: 1 1 auto !important; }
html.narrow #title h2 { font-size: 1.45rem !important; line-height: 1.2; overflow-wrap: normal;
  word-break: normal; hyphens: manual; margin-bottom: 0.2rem; }
html.narrow #title p { margin: 0; }
/* Every tab on screen: gradio lays them out whole (the Tabs wrap), on as many rows as needed. */
html.narrow .tabs .tab-wrapper { overflow: visible; height: auto; }
html.narrow .tabs [role="tablist"] { flex-wrap: wrap !important; row-gap: 2px;
  height: auto !important; overflow: visible !important; }
html.narrow .tabs [role="tablist"] button[role="tab"] { min-height: 40px; padding: 0 10px;
  white-space: nowrap; flex: 0 0 auto; }
html.narrow .tabs .overflow-menu { display: none !important; }
/* Controls a thumb can hit. An accordion keeps its label and arrow centred in its taller button
   (the arrow, stretched to the height of the button and then turned, was pushed past the right
   edge). */
html.narrow .gradio-container button { min-height: 44px; }
html.narrow .gradio-container .label-wrap { align-items: center; }
/* The toggle of the closed tour stays beside the title, where the page keeps room for it:
   fixed to the screen, it covered the start of the lines of every screen below. Open, the tour
   covers the screen. */
html.narrow .gradio-container .sidebar:not(.open) { position: absolute !important; }
html.narrow .gradio-container input[type="range"] { height: 28px; }
html.narrow .gradio-container label:has(input[type="checkbox"]),
html.narrow .gradio-container label:has(input[type="radio"]) { min-height: 40px; }
/* Figures the panel's width; their toolbar stays in its corner, above the title. */
html.narrow .gradio-container .js-plotly-plot,
html.narrow .gradio-container [data-testid="plotly"] {
  width: 100% !important; min-width: 0 !important; }
html.narrow .gradio-container .js-plotly-plot .modebar { transform: scale(0.7);
  transform-origin: top right; }
/* A figure without a visible label needs no room above it for one (its title starts below the
   toolbar already). */
html.narrow .block:has(> label[data-testid="block-label"].float.hide) > .js-plotly-plot {
  margin-top: 0 !important; }
/* Long text wraps at words, never one word a line beside a figure. */
html.narrow .gradio-container .prose, html.narrow .gradio-container .md {
  overflow-wrap: break-word; word-break: normal; }
/* The lecture's essentials on the first screen. Attention: its two columns opened into one, the
   head's map first, then the tab's note and the controls that choose the head, the view's
   notes, the what-ifs and the rest. Generate: the prompt, its four step buttons in two rows and
   the step's chart, then what the step chose, the model and the decoding options, then the
   rest. */
html.narrow #attention-main, html.narrow #attention-main > .column,
html.narrow #attention-main > .column > .form { display: contents !important; }
html.narrow #attention-main .phone-first { order: -1; }
html.narrow #attention-main .phone-next { order: 2; }
html.narrow #attention-main .phone-later { order: 3; }
html.narrow #attention-main .phone-last { order: 4; }
html.narrow #attention-main ~ * { order: 5; }
html.narrow #generate-prompt,
html.narrow #generate-prompt > .form { display: contents !important; }
html.narrow .phone-after-chart { order: 1; }
html.narrow .phone-later:not(#attention-main *),
html.narrow .form:has(> .phone-later) { order: 2; }
html.narrow #generate-chart ~ * { order: 3; }
html.narrow .gradio-container #generate-steps.row { flex-direction: row !important;
  flex-wrap: wrap !important; }
html.narrow .gradio-container #generate-steps.row > * { min-width: 0 !important;
  width: auto !important; flex: 1 1 40% !important; }
/* Large font is for a projector: a phone has no use for it, and the first screen needs room. */
html.narrow #top-bar > :has(#large-font) { display: none !important; }
"""
