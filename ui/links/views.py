"""Applying a view (a link opened, a tour stop) to the page, and making a link of the view on
screen.

Applying is one event that sets the tab and its controls and draws the view's figures at once,
by calling the tab's live redraws in this process (gradio fires ``.change`` when a value is set
from the server, but not ``.input`` or ``.release``, which most live views use; the redraws are
found in the app's own event table, so a new tab needs nothing here). A link's first event does
it, so the page shows the link's own view first (otherwise it showed the default view
under the link's controls for seconds). Then, once the handlers that the changed values triggered have
finished, the same event runs again, since a model change may reset a slider.
"""

from __future__ import annotations

import html
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import gradio as gr

from ..serving.shared_views import plain_function
from ..serving.state import ModelRegistry
from .share import MAX_QUERY, Restored, TabView, as_plain_markdown, decode_view, encode_view

log = logging.getLogger("visualiser")

# Events that a user's action fires but a value set by the server does not.
USER_EVENTS = {"input", "select", "release", "submit", "blur"}


# Resolves once no component shows a pending status (checked twice, 150 ms apart),
# at the latest after 15 s; so the handlers that a change of value started have finished.
WAIT_UNTIL_IDLE_JS = """
async () => {
  // From here on, a click or a key press is the user's own change, which the settling pass
  // that follows must keep (see KEEP_USER_CHANGES_JS).
  window.__viewTouched = false;
  if (!window.__viewTouchWatch) {
    window.__viewTouchWatch = true;
    for (const type of ["pointerdown", "keydown"]) {
      document.addEventListener(type, (e) => { if (e.isTrusted) window.__viewTouched = true; }, true);
    }
  }
  // A status tracker's overlay loses its "hide" class while its component waits for a result;
  // only those on screen count (the other tabs' first views may still be drawing).
  const busy = () => [...document.querySelectorAll(
    '.wrap.default:not(.hide), .wrap.center:not(.hide)')].some((e) => e.getClientRects().length);
  const start = Date.now();
  let quiet = 0;
  await new Promise((r) => setTimeout(r, 250));
  while (Date.now() - start < 15000 && quiet < 2) {
    quiet = busy() ? 0 : quiet + 1;
    await new Promise((r) => setTimeout(r, 150));
  }
  return [];
}
"""


# The settling pass's inputs, (view, touched, *values), with touched saying whether the user
# has clicked or typed since the view arrived: a control they changed then is theirs, not a
# handler's reset (a what-if switched on a second after a link opened was switched off again).
KEEP_USER_CHANGES_JS = """
(view, touched, ...values) => [view, window.__viewTouched === true, ...values]
"""

# Scrolls the control a view points at into view (the top of the page when none), once the
# page is idle: a tab drawn for the first time on a slow machine can take longer than the wait
# before it, and a figure that arrives after the scroll pushes the target down. The scroll is
# checked once more after the smooth scroll has had time to end, and corrected at once. Only the
# status trackers on screen count: the other tabs' first views (SmolLM2's meter, its cache
# timings) can keep theirs busy for a minute after the page opens.
SCROLL_JS = """
async (id) => {
  const busy = () => [...document.querySelectorAll(
    '.wrap.default:not(.hide), .wrap.center:not(.hide)')].some((e) => e.getClientRects().length);
  const pause = (ms) => new Promise((r) => setTimeout(r, ms));
  const start = Date.now();
  let quiet = 0;
  while (Date.now() - start < 60000 && quiet < 2) {
    quiet = busy() ? 0 : quiet + 1;
    await pause(150);
  }
  const target = id && document.getElementById(id);
  if (!target) {
    window.scrollTo({top: 0, behavior: 'smooth'});
    return [];
  }
  target.scrollIntoView({block: 'start', behavior: 'smooth'});
  await pause(900);
  if (Math.abs(target.getBoundingClientRect().top) > 8) target.scrollIntoView({block: 'start'});
  return [];
}
"""


def skip_outputs(n: int) -> Any:
    """What a handler with ``n`` outputs returns to change none of them."""
    if n == 0:
        return None
    return gr.skip() if n == 1 else tuple(gr.skip() for _ in range(n))


def usable(function: Any) -> bool:
    """Whether a registered handler can be called again from here: a plain function (no
    generator, no gradio-injected request or progress parameter)."""
    return function.fn is not None and plain_function(function.fn)


def redraw_functions(demo: gr.Blocks, controls: Iterable[gr.Component]) -> list[Any]:
    """The handlers (gradio ``BlockFunction``s) that a user's change of ``controls`` runs, in
    the order they run: each chain that starts from an ``input``/``select``/``release``/``submit``/``blur``
    of one of them, with what follows it, every handler once, after what it follows."""
    ids = {component._id for component in controls}
    functions = sorted(demo.fns.values(), key=lambda f: f._id)

    def key(function: Any) -> tuple:
        inputs = tuple(c._id for c in function.inputs)
        return id(function.fn), inputs, tuple(c._id for c in function.outputs)

    # One handler wired to several triggers (Inside's fit, on a model, a stack and a sentence)
    # runs once: what follows any of its events follows it, wherever it ends up in the order.
    by_id = {function._id: function for function in functions}
    followers: dict[tuple, list[Any]] = defaultdict(list)
    for function in functions:
        if function.trigger_after is not None and function.trigger_after in by_id:
            followers[key(by_id[function.trigger_after])].append(function)
    ordered: list[Any] = []
    visiting: set[tuple] = set()

    def visit(function: Any) -> None:
        if key(function) in visiting:  # a chain that leads back to itself: once is enough
            return
        visiting.add(key(function))
        if function.fn is not None and usable(function):
            ordered[:] = [f for f in ordered if key(f) != key(function)]
            ordered.append(function)
        for follower in followers[key(function)]:
            if not follower.trigger_only_on_failure:
                visit(follower)
        visiting.discard(key(function))

    for function in functions:
        if function.trigger_after is None and any(
            block in ids and event in USER_EVENTS for block, event in function.targets
        ):
            visit(function)
    return ordered


_NO_VALUE = object()


def is_update(out: Any) -> bool:
    """Whether a handler's output is an update (``gr.update`` or a component) rather than a
    plain value."""
    return (isinstance(out, dict) and out.get("__type__") == "update") or isinstance(
        out, gr.blocks.Block
    )


def as_update(out: Any) -> dict:
    """An update output as a ``gr.update`` dictionary (a component's constructor arguments)."""
    if isinstance(out, gr.blocks.Block):  # gr.Slider(maximum=..., value=...) as an update
        return {"__type__": "update", **out.constructor_args}
    return out


def _value_of(out: Any) -> Any:
    """The value an output of a handler gives its component (``_NO_VALUE`` when it sets none)."""
    if is_update(out):
        update = as_update(out)
        return update.get("value", _NO_VALUE)
    return out


def merge_outputs(first: Any, then: Any) -> Any:
    """Two outputs for one component as one: the later wins per property, a plain value being
    the update of its value alone (a figure drawn after an update that hid its plot stays
    hidden); two plain values, the later."""
    if first is None:
        return then
    if not is_update(first) and not is_update(then):
        return then
    updates = [as_update(out) if is_update(out) else {"value": out} for out in (first, then)]
    return {"__type__": "update", **updates[0], **updates[1]}


def same_value(shown: Any, wanted: Any) -> bool:
    """Whether a control's value on the page is the view's (a slider sends 3.0 for 3)."""
    if isinstance(shown, (int, float)) and isinstance(wanted, (int, float)):
        return float(shown) == float(wanted)
    if isinstance(shown, (list, tuple)) and isinstance(wanted, (list, tuple)):
        return list(shown) == list(wanted)
    return bool(shown == wanted)


def union(components: Iterable[gr.Component]) -> list[gr.Component]:
    """``components`` without repeats, in order."""
    seen: dict[int, gr.Component] = {}
    for component in components:
        seen.setdefault(component._id, component)
    return list(seen.values())


def _decodes(state: Any, source: Any, model: Any) -> bool:
    """Whether the session's generation ``state`` is the decoding of the prompt box's ``source``
    with ``model``: its own prompt, or, while the chat switch is on (``state.chat``), that
    prompt wrapped in the model's template (which holds the words typed)."""
    key = tuple(getattr(state, "key", ())[:2])
    if len(key) < 2 or key[1] != model or not isinstance(source, str):
        return False
    if key[0] == source:
        return True
    typed = source.strip()
    return bool(getattr(state, "chat", False) and typed and typed in str(key[0]))


def replay_steps(step: Callable, wanted: int, args: list[Any], nothing: Any) -> Any:
    """Call the Generate tab's ``step`` handler until the generation shows ``wanted`` steps
    (the first is drawn already) or has finished, then the outputs of the last call
    (``nothing`` when none was made). ``args`` end with the generation state, which each call
    returns last. A generation that ends before ``wanted`` stops there with one warning (a link
    asking for step 999 used to call Step 998 times, each answering "has finished")."""
    result = nothing
    log.debug("replaying generation to step %s", wanted)
    for _ in range(wanted - 1):
        decoding = getattr(args[-1], "decoding", None) if args else None
        if decoding is not None and decoding.done:
            shown = len(decoding.records)
            gr.Warning(f"Link: the generation ends at step {shown}; showing step {shown}.")
            break
        result = step(*args)
        if not isinstance(result, tuple) or not result:
            break  # the handler answered with a message: nothing more to replay
        args[-1] = result[-1]
    return result


class Views:
    """The app's tabs with their controls, and the events that apply a view to the page."""

    def __init__(self, demo: gr.Blocks, tabs_block: gr.Tabs, tabs: list[TabView]) -> None:
        self.demo = demo
        self.tabs_block = tabs_block
        self.tabs = {tab.slug: tab for tab in tabs}
        self.labels = {tab.label: tab for tab in tabs}
        self.view = gr.State(None)  # the view being applied
        self.current = gr.State(tabs[0].slug if tabs else "")  # the tab on screen
        self.tab_selected: list[Any] = []  # each tab's event that sets ``current`` on a click
        self.focus = gr.Textbox(visible=False)  # the element id the page scrolls to
        # Whether the user clicked or typed while a view settled (set by the page's script)
        self.touched = gr.Checkbox(False, visible=False)
        self.controls = [c for tab in tabs for c in tab.controls.values()]
        self._redraws = {tab.slug: redraw_functions(demo, tab.controls.values()) for tab in tabs}
        for tab in tabs:
            names = [getattr(f.fn, "__name__", "?") for f in self._redraws[tab.slug]]
            log.debug("tab %s redraws with %s when a view is applied", tab.slug, names)
        functions = [f for slug in self._redraws for f in self._redraws[slug]]
        control_ids = {c._id for c in self.controls}
        # What applying a view reads (every redraw's inputs) and writes (the tab selector, the
        # tab on screen, the scroll target, every control, every redraw's other outputs).
        self.draw_inputs = union(c for f in functions for c in f.inputs)
        self.drawn = union(c for f in functions for c in f.outputs if c._id not in control_ids)
        self.outputs = [self.tabs_block, self.current, self.focus, *self.controls, *self.drawn]

    def apply(self, view: dict | None, *values: Any) -> tuple:
        """One event's outputs (``self.outputs``) that show ``view``: the tab, its controls set
        and its figures drawn by the tab's own redraws with the view's values. ``values`` are
        those of ``self.draw_inputs`` (the session's state, the font size, ...)."""
        fixed = self._set(view)
        drawn: dict[int, Any] = {}
        if view and view.get("tab") in self.tabs:
            drawn = self._draw(view, values)
        n = 3 + len(self.controls)
        head = list(fixed[:3])
        controls = [
            merge_outputs(update, drawn[c._id]) if c._id in drawn else update
            for c, update in zip(self.controls, fixed[3:n], strict=True)
        ]
        rest = [drawn.get(c._id, gr.skip()) for c in self.drawn]
        return (*head, *controls, *rest)

    def settle(self, view: dict | None, *values: Any) -> tuple:
        """``apply`` again where a control of the view's tab no longer shows the view's value
        (a handler that the applied values triggered reset it); else nothing is sent, so a view
        that arrived whole is not drawn twice (a tour's Next waited for both draws)."""
        if not view or view.get("tab") not in self.tabs:
            return self.apply(None)
        now = {c._id: v for c, v in zip(self.draw_inputs, values, strict=True)}
        tab = self.tabs[view["tab"]]
        changed = [
            key
            for key, component in tab.controls.items()
            if key in view["values"]
            and component._id in now
            and not same_value(now[component._id], view["values"][key])
        ]
        if not changed:
            return self.apply(None)
        log.debug("view of %s re-applied: %s changed meanwhile", view["tab"], changed)
        return self.apply(view, *values)

    def settle_untouched(self, view: dict | None, touched: bool, *values: Any) -> tuple:
        """:meth:`settle`, unless the user clicked or typed (``touched``) while the view
        settled: then nothing is sent, and what they changed stays."""
        return self.apply(None) if touched else self.settle(view, *values)

    def _draw(self, view: dict, values: tuple) -> dict[int, Any]:
        """Run the view's tab's redraws in order, each reading what the view and the redraws
        before it set; {component id: merged output}."""
        known = {c._id: v for c, v in zip(self.draw_inputs, values, strict=True)}
        tab = self.tabs[view["tab"]]
        for key, component in tab.controls.items():
            if key in view["values"]:
                known[component._id] = view["values"][key]
        outputs: dict[int, Any] = {}
        # A redraw that refused the view's values (one run before the refit that fits the
        # controls to the view's model: Inside's Stack still on "encoder" for SmolLM2) is
        # said only if no later redraw drew what it would have drawn: the page shows no error
        # that the redraw after it mended.
        refused: list[tuple[str, set[int]]] = []
        for function in self._redraws[tab.slug]:
            args = [known.get(c._id) for c in function.inputs]
            try:
                result = function.fn(*args)
            except gr.Error as error:  # the handler's message for this input, as a warning
                # (-1: a redraw that draws nothing is mended by none)
                refused.append((str(error.message), {c._id for c in function.outputs} or {-1}))
                continue
            if len(function.outputs) == 1:
                result = (result,)
            drawn = {c._id for c in function.outputs}
            refused = [(message, ids - drawn) for message, ids in refused]
            for component, out in zip(function.outputs, result, strict=True):
                outputs[component._id] = merge_outputs(outputs.get(component._id), out)
                value = _value_of(out)
                if value is not _NO_VALUE:
                    known[component._id] = value
        for message in dict.fromkeys(message for message, ids in refused if ids):
            gr.Warning(message)
        return outputs

    def view_of(
        self, slug: str, values: Mapping[str, Any], step: int | None = None, focus: str = ""
    ) -> dict:
        """A view of tab ``slug``: its defaults overridden by ``values``; the page scrolls to
        the control ``focus`` (a key), or to the top."""
        tab = self.tabs[slug]
        target = tab.controls[focus].elem_id if focus in tab.controls else ""
        return {"tab": slug, "values": {**tab.defaults, **values}, "step": step, "focus": target}

    def _set(self, view: dict | None) -> tuple:
        """Updates for the tab selector, the current-tab state and every control."""
        if not view or view.get("tab") not in self.tabs:
            return (gr.skip(), gr.skip(), gr.skip(), *[gr.skip() for _ in self.controls])
        values = view["values"]
        refitted = {c for f in self._redraws[view["tab"]] for c in f.outputs}
        updates = []
        for tab in self.tabs.values():
            for key in tab.controls:
                on_tab = tab.slug == view["tab"] and key in values
                if not on_tab:
                    updates.append(gr.skip())
                elif isinstance(tab.controls[key], gr.Slider) and tab.controls[key] in refitted:
                    # The range the tab was built with (a model's may be narrower), where the
                    # tab's own refit, run next, narrows it again to the model it shows.
                    slider = cast(gr.Slider, tab.controls[key])
                    updates.append(
                        gr.update(value=values[key], minimum=slider.minimum, maximum=slider.maximum)
                    )
                else:
                    updates.append(gr.update(value=values[key]))
        return (gr.Tabs(selected=view["tab"]), view["tab"], view.get("focus") or "", *updates)

    def follow(self, event: Any, applied: bool = False, settled: tuple | None = None) -> Any:
        """Chain after ``event`` (which wrote the view into ``self.view``, and applied it
        already when ``applied``) the steps that apply it; returns the last step. ``settled``,
        an unqueued ``(handler, inputs, outputs)``, runs as soon as the view is settled on the
        page, beside the scroll and the replay that come after (which can wait a minute for
        the page to be idle)."""
        private: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden"}
        inputs = [self.view, *self.draw_inputs]
        if not applied:
            event = event.then(self.apply, inputs, self.outputs, **private)
        event = event.then(None, None, None, js=WAIT_UNTIL_IDLE_JS, **private)
        # Again, once the handlers the new values triggered are done, where one of them reset
        # a control (a model change resets Generate's sliders): the view as the link gave it.
        event = event.then(
            self.settle_untouched,
            [self.view, self.touched, *self.draw_inputs],
            self.outputs,
            js=KEEP_USER_CHANGES_JS,
            **private,
        )
        if settled is not None:
            event.then(*settled, api_visibility="private", queue=False)
        # After the wait: a tab opened for the first time has mounted its controls by now.
        event = event.then(None, self.focus, None, js=SCROLL_JS, **private)
        replay = self._replay()
        if replay is not None:
            event = event.then(*replay, api_visibility="private")
        return event

    def _replay(self) -> tuple | None:
        """The Generate tab's Step, run until the view's step (after its first)."""
        generate = self.tabs.get("generate")
        button = generate.extra.get("step_button") if generate else None
        if button is None:
            return None
        steps = [
            f
            for f in self.demo.fns.values()
            if (button._id, "click") in [tuple(t) for t in f.targets] and usable(f)
        ]
        if not steps:
            log.info("the Generate tab's Step button has no handler: links keep step 1")
            return None
        function = steps[0]
        fn, n = function.fn, len(function.outputs)
        assert fn is not None  # usable kept only the functions with a Python handler

        def replay(view: dict | None, *args: Any) -> Any:
            if not view or view.get("tab") != "generate" or not view.get("step"):
                return skip_outputs(n)
            return replay_steps(fn, int(view["step"]), list(args), skip_outputs(n))

        return replay, [self.view, *function.inputs], function.outputs

    # -- links -------------------------------------------------------------------------------

    def link_inputs(self) -> list[gr.Component]:
        """What the link button reads: the tab on screen, every control, the generation."""
        generate = self.tabs.get("generate")
        state = generate.extra.get("state") if generate else None
        return [self.current, *self.controls, *([state] if state is not None else [])]

    def link(self, base: str, current: str, *values: Any) -> str:
        """The URL of the view on screen: ``base`` (the page's address) with the tab on screen
        and its controls' values as query parameters."""
        tab = self.tabs.get(current) or next(iter(self.tabs.values()))
        position = 0
        mine: dict[str, Any] = {}
        for each in self.tabs.values():
            for key in each.controls:
                if each is tab:
                    mine[key] = values[position]
                position += 1
        step = None
        state = values[position] if position < len(values) else None
        decoding = getattr(state, "decoding", None)
        if (
            tab.slug == "generate"
            and state is not None
            and decoding is not None
            and _decodes(state, mine.get("source"), mine.get("model"))
        ):
            step = len(decoding.records)
        base = (base or "").split("?")[0].split("#")[0]
        return f"{base}?{encode_view(tab, mine, step)}"

    def restore(self, registry: ModelRegistry | None, request: gr.Request | None) -> tuple:
        """The view a page's address names (none without a ``tab`` parameter) and a note on
        what it could not restore."""
        if request is None:
            return None, ""
        query = request.query_params
        length = len(str(query))
        if length > MAX_QUERY:
            restored = Restored(
                None,
                [f"this link is {length:,} characters long; at most {MAX_QUERY:,} are read. "
                 "Showing the app as it opens."],
            )  # fmt: skip
        else:
            params = {key: query.getlist(key) for key in query}
            restored = decode_view(params, self.tabs, registry)
        # The messages quote the link's own text: shown as text, never as HTML or Markdown.
        for message in restored.messages:
            gr.Warning(html.escape(f"Link: {message}"))
            log.info("link not restored as given: %s", message)
        note = " ".join(restored.messages)
        return restored.view, ("⚠️ " + as_plain_markdown(note)) if note else ""
