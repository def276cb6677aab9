"""The whole app: the header, the five tabs, the queue, and the matching launch options."""

from __future__ import annotations

import datetime
import functools
import html
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr
import torch
from starlette.middleware import Middleware

from transformer.core.device import pick_device

from .links.exercises import make_exercises
from .links.first_views import PRELOAD_PLOTLY_JS, REVEAL_LINK_JS, FirstViews, OpenOnLinkedTab
from .links.rooms import FOLLOW_CSS, FollowMe, RedisRooms, Rooms, RoomStore
from .links.share import MAX_QUERY, TabView
from .links.views import Views
from .serving import clients, limits, store
from .serving.clients import TimeRequestBodies
from .serving.errors import guard_preprocessing, scrub
from .serving.event_streams import QuietEventStreams
from .serving.export import PLOT_TOOLBAR_JS, ViewExport
from .serving.fairness import share_fairly
from .serving.memory import give_back_memory
from .serving.ordering import newest_wins
from .serving.outputs import lighter_outputs
from .serving.phone import PHONE_CSS, WIDTH_HEAD, fit_figures
from .serving.plotly_bundle import ServePrunedPlotly, start_pruning
from .serving.sessions import (
    drop_left_sessions,
    drop_sessions,
    reopen_on_heartbeat,
    start_sessions_on_demand,
)
from .serving.shared_views import share_views
from .serving.sliders import SLIDER_ENTER_JS
from .serving.state import ModelRegistry, SessionModels, SharedViews, forget_unused_views
from .serving.textboxes import TEXT_EDIT_JS
from .serving.uploads import CapUploads
from .tabs import attention, generate, inside, positions, research, tokenize, training
from .tabs.exercises import ExercisePanel
from .tour import KEYS_JS, Tour

log = logging.getLogger("visualiser")

# Per-session memory is bounded: gradio keeps what each session has set (its copy of
# every changed component's config, its gr.State values: about 0.5 MB, more with a trained model)
# for up to 10,000 sessions, reachable with plain API calls. The app keeps MAX_SESSIONS, the least
# recently used evicted first, and drops a session idle for SESSION_IDLE_S (checked every
# SESSION_SWEEP_S). A visitor whose session was dropped gets a fresh one on their next request.
# A session whose page has closed is freed sooner (ui/serving/sessions.py): a class that leaves
# gives its memory back within a minute.
MAX_SESSIONS = 200
SESSION_IDLE_S = 3600.0
SESSION_SWEEP_S = 10.0
# Files gradio caches for this app (uploads, the exports it serves) are removed after this age,
# checked every CACHE_SWEEP_S; ui/serving/export.py bounds the exports' own folder by count and size.
CACHE_MAX_AGE_S = 3600
CACHE_SWEEP_S = 600
# A request whose address (path and query) is longer is answered 414 with a page that says why:
# gradio reads the page's address with httpx, which raises on one over 65,536 characters, and a
# 64 KB link answered 500. Links longer than MAX_QUERY (8,000) and shorter than this open the app
# with a message in the page (ui/links/views.py).
MAX_URL_CHARS = 16_384


def make_rooms() -> RoomStore:
    """The lecturers' rooms: in this process's memory, or, where several app processes serve
    one class (``VISUALISER_REDIS_URL`` set), in their Redis, so that a student answered by
    one process follows a lecturer whose page publishes to another."""
    url = store.redis_url()
    return RedisRooms(store.connect(url)) if url else Rooms()


# The lecturers' rooms (follow me), one registry per process (or per class, in Redis): a room
# outlives a page's reload, and the students of one lecture may be answered by any app served.
ROOMS = make_rooms()
EXERCISES = make_exercises(ROOMS)  # the rooms' questions and answers, kept where the rooms are

# The tabs in the paper's order: (label, id used by links and the tour, build). Each build takes
# (registry, large, session) and returns its shareable controls, {key: component}.
TABS: list[tuple[str, str, Callable[..., dict[str, gr.Component] | None]]] = [
    ("Tokenize", "tokenize", lambda registry, large, session: tokenize.build(registry)),
    ("Embeddings & positions", "embeddings", positions.build),
    ("Attention", "attention", attention.build),
    ("Inside a layer", "inside", inside.build),
    ("Generate", "generate", generate.build),
    # After the tour's four steps: which part of the model made a prediction.
    ("Which part?", "research", research.build),
    ("Model & training", "training", training.build),
]

# Large font is a projector mode: every size scales about 1.45×. Gradio's theme declares its
# sizes as variables on :root, and the derived ones (label, input, button sizes) are resolved
# there, so each is set again on the body; components that fix their own size (inline code,
# which holds the tokens; tables; highlighted text; slider numbers; headings) get rules too.
_LARGE_VARIABLES = {
    "text-xxs": "13px",
    "text-xs": "15px",
    "text-sm": "17px",
    "text-md": "20px",
    "text-lg": "23px",
    "text-xl": "31px",
    "text-xxl": "37px",
    "body-text-size": "20px",
    "prose-text-size": "20px",
    "block-label-text-size": "19px",
    "block-title-text-size": "20px",
    "block-info-text-size": "17px",
    "input-text-size": "20px",
    "checkbox-label-text-size": "20px",
    "section-header-text-size": "20px",
    "button-small-text-size": "17px",
    "button-medium-text-size": "20px",
    "button-large-text-size": "23px",
    "chatbot-text-size": "20px",
}
CSS = (
    "body.large-font {"
    + " ".join(f"--{name}: {size} !important;" for name, size in _LARGE_VARIABLES.items())
    + "}\n"
    + """
body.large-font .gradio-container { font-size: 20px; }
body.large-font .prose, body.large-font .prose p, body.large-font .prose li,
body.large-font .md, body.large-font .md p, body.large-font .md li { font-size: 20px !important; }
body.large-font .prose h1, body.large-font .md h1 { font-size: 40px !important; }
body.large-font .prose h2, body.large-font .md h2 { font-size: 31px !important; }
body.large-font .prose h3, body.large-font .md h3 { font-size: 25px !important; }
body.large-font .prose h4, body.large-font .md h4 { font-size: 22px !important; }
body.large-font code, body.large-font pre, body.large-font kbd { font-size: 0.95em !important; }
body.large-font label, body.large-font label span, body.large-font [data-testid="block-info"],
body.large-font .block-label span, body.large-font span[data-testid="block-info"] {
  font-size: 19px !important; }
body.large-font input, body.large-font textarea, body.large-font select,
body.large-font input[type="number"] { font-size: 20px !important; }
body.large-font button { font-size: 20px !important; }
body.large-font table, body.large-font th, body.large-font td,
body.large-font .cell-wrap, body.large-font .cell-wrap span { font-size: 18px !important; }
body.large-font .textspan, body.large-font .textfield, body.large-font .text,
body.large-font .token, body.large-font .label { font-size: 20px !important; }
body.large-font .tab-nav button, body.large-font [role="tab"] { font-size: 21px !important; }
body.large-font .min_value, body.large-font .max_value { font-size: 18px !important; }
body.large-font textarea[style*="overflow-y: hidden"] {
  field-sizing: content; height: auto !important; }  /* boxes not yet on screen */
/* The top bar's buttons keep to one line, also in Large font. */
#top-bar button { white-space: nowrap; }
#top-bar { padding-left: 1.75rem; }  /* clear of the closed tour sidebar's toggle */
/* ...and so does the Large font switch's label, which grows with the font it switches on
   (gradio wraps the checkbox in a form that keeps the 260 px it was given). */
body.large-font #top-bar > :has(#large-font), body.large-font #large-font {
  min-width: max-content !important; }
/* The tour's stop menu: a stop's name too long for the sidebar (Large font's "10. Generation,
   one token at a time") ends with "…", clear of the menu's arrow; the stop's heading below it
   gives the name whole. */
#tour-menu input { text-overflow: ellipsis; padding-right: 28px !important; }
/* The models' status line takes no room while it has nothing to say (every model loaded). */
#model-status:not(:has(p)) { display: none !important; }
/* With the tour's sidebar open a 1280 px page keeps about 860 px: tables and code wrap within
   the width left (or scroll inside it), never past its right edge. */
.gradio-container table { max-width: 100%; }
.gradio-container .table-wrap th, .gradio-container .table-wrap td,
.gradio-container .table-wrap .cell-wrap span {
  white-space: normal !important; overflow-wrap: anywhere; }
.gradio-container .table-wrap table { width: 100% !important; table-layout: auto; }
.gradio-container .table-wrap th, .gradio-container .table-wrap td {
  width: auto !important; min-width: 0 !important; max-width: none !important; }
/* A header breaks between words only ("piec / e" was a column narrowed to a letter or two). */
.gradio-container .table-wrap th, .gradio-container .table-wrap th .cell-wrap span {
  overflow-wrap: normal !important; word-break: keep-all !important; }
.gradio-container .cm-editor { max-width: 100%; }
/* A plot's panel label floats over its top edge: keep the figure's title below it. */
.block:has(> label[data-testid="block-label"].float) > .js-plotly-plot { margin-top: 30px; }
body.large-font .block:has(> label[data-testid="block-label"].float) > .js-plotly-plot {
  margin-top: 40px; }
"""
)
# Gradio fixes a text box's height (inline) when it is drawn or typed in: grown by Large font,
# the text was cut (the third sentence of Attention's box). Boxes that show all their lines are
# sized to their text again (those that scroll past their most lines keep their height).
LARGE_FONT_JS = """(on) => { document.body.classList.toggle('large-font', on);
  requestAnimationFrame(() => { for (const t of document.querySelectorAll('textarea')) {
    if (!t.clientHeight || t.style.overflowY !== 'hidden') continue;
    t.style.height = 'auto'; t.style.height = t.scrollHeight + 'px'; } }); }"""
# Run once when the page opens: the plots' export buttons, the tour's arrow keys, Enter in a
# slider's box, every edit of a textbox.
PAGE_JS = (
    "() => {\n"
    + "\n".join([PLOT_TOOLBAR_JS, KEYS_JS, SLIDER_ENTER_JS, TEXT_EDIT_JS, PRELOAD_PLOTLY_JS])
    + "\n}"
)


def build_demo(
    device: str | None = "auto",
    models: Sequence[str] = (),
    allow_download: bool = False,
    preload: bool = True,
    dtype: str = "auto",
) -> gr.Blocks:
    """The app (not launched). ``launch_options()`` gives the matching ``launch()`` arguments.

    ``models`` adds pretrained model folders or hub ids (resolved from the local Hugging Face
    cache; downloaded only with ``allow_download``). Pretrained weights are read in the
    background at once when ``preload`` is set; else by ``preload_models(demo)`` (``app.py``
    calls it once the page is served) or on first use. ``dtype`` is what their weights are kept
    in (``"auto"``: float32 on a CPU, the checkpoint's own on a GPU); with ``device="auto"`` a
    model larger than the device picked is spread over the GPUs and the CPU.
    """
    registry = ModelRegistry(
        pick_device(device),
        models,
        allow_download,
        dtype=dtype,
        spread=(device or "auto") == "auto",
    )
    if preload:
        registry.preload()
    with gr.Blocks(
        title="Transformer, step by step", delete_cache=(CACHE_SWEEP_S, CACHE_MAX_AGE_S)
    ) as demo:
        session = gr.State(SessionModels(), delete_callback=SessionModels.release)
        with gr.Row(elem_id="top-bar"):
            gr.Markdown(
                "## Transformer, step by step\nA from-scratch PyTorch Transformer, opened up.",
                elem_id="title",
                min_width=320,
            )
            start = gr.Button("▶ Guided tour", size="sm", scale=0, min_width=150)
            make_link = gr.Button("Link to this view", size="sm", scale=0, min_width=170)
            large = gr.Checkbox(
                label="Large font (for projecting)",
                value=False,
                scale=0,
                min_width=260,
                elem_id="large-font",
            )
        link = gr.Textbox(
            label="Link to this view (opens the app as it is now)",
            visible=False,
            buttons=["copy"],
            elem_id="view-link",
        )
        tour = Tour([label for label, _, _ in TABS])
        tour.layout()
        status = gr.Markdown(model_status(registry), elem_id="model-status")
        # Pretrained weights are read in the background: a load that fails after the page was
        # opened shows up here too (the timer polls only while that reading goes on).
        poll = gr.Timer(1.0, active=registry.preloading)
        refresh = functools.partial(_refresh_status, registry)
        poll.tick(refresh, None, [status, poll], api_visibility="private", queue=False)
        demo.load(refresh, None, [status, poll], api_visibility="private", queue=False)
        large.change(None, large, None, js=LARGE_FONT_JS)
        views: list[TabView] = []
        with gr.Tabs(overflow_behavior="wrap") as tabs:  # every tab on screen, also a phone's
            for label, slug, build in TABS:
                with gr.Tab(label, id=slug, elem_id=f"view-{slug}") as tab:
                    controls = build(registry, large, session)
                    ViewExport(label, slug, tab, controls or {})
                views.append(TabView.of(label, slug, controls))
        # Below the tabs: a lecturer opens it once, and the first figure stays above the fold.
        follow_me = FollowMe(ROOMS)
        exercises = ExercisePanel(registry, ROOMS, EXERCISES)
        opened = _wire_views(
            demo, registry, session, tabs, views, tour, start, make_link, link, status
        )
        follow_me.wire(demo, demo.views, registry, opened)
        exercises.wire(demo, follow_me, session)
        narrow_progress(demo)
    cheap, costly = concurrency_for(registry.device)
    # Each cheap event gets as many workers more as may sleep on the costly pool: a big model's
    # pass handed there never holds the workers a small model's call needs (ui/serving/costly.py).
    cheap += registry.passes.capacity
    _configure_queue(demo, default_concurrency_limit=cheap, max_size=limits.QUEUE_SIZE)
    queue_costly_apart(demo, costly)
    share_fairly(demo, COSTLY)  # served in turns by client, each client's waiting calls capped
    start_sessions_on_demand()  # a class arriving at once does not hold the event loop
    # A class's common views, computed once (by one of the processes serving it, with Redis).
    registry.shared_views = share_views(
        demo,
        SharedViews(
            limits.SHARED_VIEW_BYTES,
            limits.SHARED_VIEW_ENTRIES,
            second=store.shared_views_store(registry),
        ),
    )
    guard_preprocessing(demo)  # gradio's own refusals: a message and one log line
    # An older redraw that ends last does not draw over a newer one.
    demo.write_order = newest_wins(demo)
    demo.model_registry = registry  # for preload_models
    demo.follow_me = follow_me  # for the tests
    fit_figures(demo)  # last: a phone's figures drawn for its width, the cache's untouched
    lighter_outputs(demo)  # a skipped output costs gradio nothing, a value alone a value's
    threading.Thread(
        target=_sweep_sessions, args=(weakref.ref(demo),), name="session-sweeper", daemon=True
    ).start()
    return demo


def evict_idle_sessions(
    holder: Any, max_idle_s: float, now: datetime.datetime | None = None
) -> int:
    """Drop from gradio's session store (``demo.state_holder``) every session not used for
    ``max_idle_s`` seconds, with its state; returns how many were dropped."""
    now = now or datetime.datetime.now()
    with holder.lock:
        idle = [
            session
            for session, used in list(holder.time_last_used.items())
            if (now - used).total_seconds() > max_idle_s
        ]
    dropped = drop_sessions(holder, idle)  # their states' delete callbacks run first
    if dropped:
        log.info("dropped %d idle session(s)", dropped)
    return dropped


def _sweep_sessions(demo_ref: weakref.ref) -> None:
    """Every ``SESSION_SWEEP_S``: drop the idle sessions of a launched demo, those whose page
    has closed, and the cached views nobody has read for ``limits.CACHE_UNUSED_S``, giving
    their memory back; ends with the demo."""
    while True:
        time.sleep(SESSION_SWEEP_S)
        demo = demo_ref()
        if demo is None:
            return
        holder = getattr(demo, "state_holder", None)
        if holder is not None and getattr(demo, "is_running", False):
            app = getattr(demo, "server_app", None)
            if app is not None:  # once the server runs: a heartbeat that comes back reopens
                reopen_on_heartbeat(app, holder)
            # Sessions dropped free their generations: given back too (the idle trimmer waits
            # for a stretch of work, and a sweep is not one).
            dropped = evict_idle_sessions(holder, SESSION_IDLE_S)
            order = getattr(demo, "write_order", None)
            dropped += drop_left_sessions(holder, [order.forget] if order is not None else [])
            registry = getattr(demo, "model_registry", None)
            idle = limits.CACHE_UNUSED_S
            dropped += forget_unused_views(idle)  # every cache of views, the tabs' own too
            if registry is not None:
                dropped += registry.forget_unused(idle)
            if dropped:
                give_back_memory()
        del demo


def _wire_views(
    demo: gr.Blocks,
    registry: ModelRegistry,
    session: gr.State,
    tabs: gr.Tabs,
    tab_views: list[TabView],
    tour: Tour,
    start: gr.Button,
    make_link: gr.Button,
    link: gr.Textbox,
    status: gr.Markdown,
) -> Any:
    """The tour, links to a view (made on demand, restored on page load) and the tab on screen;
    returns the last step of what a page does when it opens (its first views drawn)."""
    views = Views(demo, tabs, tab_views)
    private: dict[str, Any] = {"api_visibility": "private", "queue": False}
    tab_list = [cast(gr.Tab, tab) for tab in tabs.children]  # gr.Tabs holds only gr.Tab
    for view in tab_views:
        for tab in tab_list:
            if getattr(tab, "id", None) == view.slug:
                selected = tab.select(
                    functools.partial(str, view.slug), None, views.current, **private
                )
                views.tab_selected.append(selected)

    # The model menus offer "trained here" only once the session has trained a model: fitted
    # when the page opens and whenever a tab is opened (training happens in another tab).
    # Generate's menu offers only the models that can generate (generate.generating_models).
    def menus_of(slugs: set[str], inside: bool) -> list[gr.Component]:
        return [
            view.controls[key]
            for view in tab_views
            if (view.slug in slugs) == inside
            for key in MENU_KEYS
            if key in view.controls
        ]

    fitted = [(menus_of(set(MENU_OFFERS), False), functools.partial(model_menus, registry))]
    for slug, offers in MENU_OFFERS.items():
        fitted.append(
            (menus_of({slug}, True), functools.partial(model_menus, registry, offers=offers))
        )
    for menus, fit in fitted:
        if not menus:
            continue
        if len(menus) == 1:  # gradio takes a one-output event's return as the value itself
            fit = functools.partial(lambda f, *values: f(*values)[0], fit)
        demo.load(fit, [session, *menus], menus, **private)
        for tab in tab_list:
            tab.select(fit, [session, *menus], menus, **private)
    tour.wire(start, views)
    make_link.click(
        lambda base, *values: gr.Textbox(value=views.link(base, *values), visible=True),
        [link, *views.link_inputs()],
        link,
        js="(base, ...rest) => [window.location.origin + window.location.pathname, ...rest]",
        **private,
    )

    def restore(request: gr.Request, *values: Any) -> tuple:
        # One event reads the link, applies it and draws it: the link's own view comes first.
        view, note = views.restore(registry, request)
        return view, note if note else gr.skip(), *views.apply(view, *values)

    # Queued, so that its warnings reach the page as toasts.
    loaded = demo.load(
        restore, views.draw_inputs, [views.view, status, *views.outputs], api_visibility="private"
    )
    # On a page opened with a link the tabs' first views wait until the link's is drawn.
    first_views = FirstViews(demo, tab_list, linked=views.outputs)
    quiet: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden"}
    loaded.then(None, None, None, js=REVEAL_LINK_JS, **quiet)  # the linked tab, set: shown
    opened = views.follow(loaded, applied=True).then(
        first_views.draw, [views.view, *first_views.inputs], first_views.outputs, **quiet
    )
    # For the tests; gr.Blocks declares no such attributes.
    demo.views, demo.tour, demo.first_views = views, tour, first_views  # type: ignore[attr-defined]
    return opened


# The outputs that show a result, where a running event's progress overlay belongs; the first
# ones are cheap for the page to look at (gradio copies a target's props at every status change
# of every later event, and a figure's props hold its data).
SHOWS_PROGRESS = (gr.Markdown, gr.HighlightedText, gr.HTML, gr.Dataframe, gr.Code, gr.Plot)


def narrow_progress(demo: gr.Blocks) -> None:
    """Show a running event's progress on one output per tab it writes, not on all of them.

    Gradio's page keeps the status of every component that any event has shown progress on,
    and at every status change of every later event looks each one up in the page's tree and
    copies its props and those of everything inside it: with gradio's default (all outputs, a
    view's controls and figures), a Generate Step re-read every figure of the app. An event
    left to that default shows its progress on the first output, in ``SHOWS_PROGRESS``'s order,
    of each tab it writes (of the page outside the tabs, its status line, only when it writes
    in no tab); an event that shows no progress on none. Events that name their targets keep
    them."""
    for fn in demo.fns.values():
        if fn.show_progress_on is not None:
            continue
        if fn.show_progress == "hidden":
            fn.show_progress_on = []
            continue
        by_tab: dict[int | None, list[gr.Component]] = {}
        for out in fn.outputs:
            if isinstance(out, SHOWS_PROGRESS):
                by_tab.setdefault(_tab_of(out), []).append(out)
        if len(by_tab) > 1:  # the page's status line too: the tabs say it, not an empty line
            by_tab.pop(None, None)
        fn.show_progress_on = [min(outs, key=_progress_rank) for outs in by_tab.values()]


def _progress_rank(component: gr.Component) -> int:
    return next(i for i, kind in enumerate(SHOWS_PROGRESS) if isinstance(component, kind))


def _tab_of(block: gr.blocks.Block) -> int | None:
    """The id of the gr.Tab that holds ``block``, or None outside every tab."""
    parent = block.parent
    while parent is not None and not isinstance(parent, gr.Tab):
        parent = parent.parent
    return None if parent is None else parent._id


def _configure_queue(demo: gr.Blocks, default_concurrency_limit: int, max_size: int) -> None:
    """``demo.queue(...)``, without its cost: ``gr.Blocks()`` made a queue already, and
    ``queue()`` would build gradio's whole web app once more (a quarter second of every start,
    which the cold-start target counts). Falls back to ``queue()`` if that queue is not there."""
    queue = getattr(demo, "_queue", None)
    if queue is None or not hasattr(queue, "default_concurrency_limit"):
        demo.queue(default_concurrency_limit=default_concurrency_limit, max_size=max_size)
        return
    queue.default_concurrency_limit = default_concurrency_limit
    queue.max_size = max_size


# Costly work (the long-input view, Run to the end, the key/value cache's timing; the silent
# mistakes and training have pools of their own) waits in one queue of its own, so that it
# never holds the workers that answer a Step or a click on a head: those events keep their
# own queues, one per event, each as wide as the device allows.
COSTLY_HANDLERS = frozenset({"attention_scale", "run", "kv_cache"})
COSTLY = "costly"


def concurrency_for(device: torch.device, cores: int | None = None) -> tuple[int, int]:
    """``(cheap, costly)``: how many calls of one cheap event run at once, and how many costly
    calls in all. A GPU overlaps many small requests; on a CPU a cheap call is mostly Python
    (figures) between short torch calls, so four at once (the app's measured default before
    the class was measured) or one per core; a costly call takes every core for seconds, so
    one at a time."""
    cores = cores or os.cpu_count() or 1
    if device.type == "cuda":
        return 16, 2
    return max(4, cores), 1


def queue_costly_apart(demo: gr.Blocks, limit: int) -> list[Any]:
    """Put the events whose handler is in ``COSTLY_HANDLERS`` in one queue (``COSTLY``) of
    ``limit`` workers; returns those events. A call beyond the limit waits there, its position
    shown on its page, while cheap events go on."""
    moved = []
    for fn in demo.fns.values():
        if getattr(fn.fn, "__name__", "") in COSTLY_HANDLERS and fn.queue:
            fn.concurrency_id = COSTLY
            fn.concurrency_limit = limit
            moved.append(fn)
    return moved


MENU_KEYS = ("model", "learned_of")  # the controls of the tabs that choose among all models


# Tabs whose model menu offers only some models: the function lists them for a session.
MENU_OFFERS: dict[str, Callable[[ModelRegistry, SessionModels | None], list[str]]] = {
    "generate": generate.generating_models
}


def model_menus(
    registry: ModelRegistry,
    session: SessionModels | None,
    *values: str,
    offers: Callable[[ModelRegistry, SessionModels | None], list[str]] | None = None,
) -> tuple:
    """Each model menu's choices for this session (see ``ModelRegistry.menu``, or ``offers``
    for a menu that offers only some); a value is set only where the menu no longer offers it,
    so a view being restored keeps its model."""
    names = registry.menu(session) if offers is None else offers(registry, session)
    return tuple(
        gr.update(choices=names) if value in names else gr.update(choices=names, value=names[0])
        for value in values
    )


def preload_models(demo: gr.Blocks) -> None:
    """Start reading the pretrained weights of a demo built with ``preload=False`` in the
    background (its page polls for load errors while that goes on)."""
    registry: ModelRegistry = demo.model_registry  # type: ignore[attr-defined]  # set by build_demo
    if not registry.preloading and not registry.pretrained:
        registry.preload()


def model_status(registry: ModelRegistry) -> str:
    """The page's line about models that could not be loaded (bundled or pretrained), each
    with its reason (no file paths), or "" when every model is fine."""
    lines = [
        f"⚠️ {'bundled model' if name in registry.bundled.errors else 'model'} **{name}** "
        f"unavailable: {scrub(reason)}"
        for name, reason in registry.errors.items()
    ]
    return "\n\n".join(lines)


def _refresh_status(registry: ModelRegistry) -> tuple[str, gr.Timer]:
    """The model status now, and the poll switched off once background loading is over."""
    return model_status(registry), gr.Timer(active=registry.preloading)


class RefuseLongAddresses:
    """ASGI middleware: an HTTP request whose path and query are longer than
    ``MAX_URL_CHARS`` is answered 414 with a short page (a link to the app), before gradio's routes read it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        length = len(scope.get("raw_path") or scope.get("path", "")) + len(
            scope.get("query_string") or b""
        )
        if scope["type"] != "http" or length <= MAX_URL_CHARS:
            await self.app(scope, receive, send)
            return
        log.info("refused an address of %d characters", length)
        home = html.escape(str(scope.get("root_path") or "") + "/")
        page = (
            "<!doctype html><title>Link too long</title>"
            f"<p>This link is {length:,} characters long; the app reads links of at most "
            f'{MAX_QUERY:,}.</p><p><a href="{home}">Open the app</a></p>'
        ).encode()
        headers = [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-length", b"%d" % len(page)),
        ]
        await send({"type": "http.response.start", "status": 414, "headers": headers})
        await send({"type": "http.response.body", "body": page})


def launch_options() -> dict[str, Any]:
    """Arguments for ``demo.launch()``, shared by ``python app.py`` and the tests. Starts
    cutting the plotly module its middleware serves, in the background, before the launch."""
    start_pruning()
    clients.install()  # forwarded addresses from named proxies only; slow requests timed out
    return {
        "app_kwargs": {
            "middleware": [
                Middleware(QuietEventStreams),
                Middleware(TimeRequestBodies),
                Middleware(RefuseLongAddresses),
                Middleware(OpenOnLinkedTab),
                Middleware(ServePrunedPlotly),
                Middleware(CapUploads),
            ]
        },
        "css": CSS + PHONE_CSS + FOLLOW_CSS,
        "head": WIDTH_HEAD,
        "theme": gr.themes.Soft(),
        "footer_links": ["api"],
        "js": PAGE_JS,
        "show_error": True,
        "max_file_size": f"{limits.MAX_UPLOAD_BYTES >> 20}mb",
        # gradio's own bound on the sessions it keeps (least recently used evicted first).
        "state_session_capacity": MAX_SESSIONS,
        # The handlers' threads apart from those of the plain routes (limits.HANDLER_THREADS).
        "max_threads": limits.HANDLER_THREADS,
    }
