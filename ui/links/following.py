"""Generate's step on a follower's page: drawn once for every follower, at the lecturer's step,
in the event that brings the view.

A lecturer's Step used to reach a follower as the generation's first step, drawn by the view's
event (Generate's live redraw restarts the decoding), then, two or three seconds later, replayed
to the lecturer's step by a later event of the chain, each follower stepping its own decoding
from the start: the page showed "Output so far (1 step)" in between, and thirty followers made
thirty replays of every step. Here the view's figures are computed once per view (the same
query, the same page settings) on a decoding that is not any follower's: the first follower's
event steps it from the step it was at (one step for a Step, one back for a Back) and draws it;
the others are sent the same figures. A follower's own generation state is left as it is
while it follows; its page's own Generate events (a model or prompt set by the view fires them)
draw nothing while it follows, so that no first step is drawn over the lecturer's; and when it
stops following (Take over, a closed room) its state is replayed to the step its page shows, so
that its next Step goes on from there.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode

import gradio as gr

from .share import decode_view
from .views import merge_outputs, replay_steps, skip_outputs, usable

log = logging.getLogger("visualiser")

KEPT_DRAWS = 8  # views kept drawn (a lecture's last steps, Back and Step again)
KEPT_DECODINGS = 4  # decodings kept stepping (a lecture's prompts)


def without_step(query: str) -> str:
    """A view's query without its ``step``: the generation it shows, at any step."""
    return urlencode([(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "step"])


class SharedSteps:
    """Generate's view as followers see it, drawn once per view: see the module's notes.

    ``views`` is the app's ``Views`` (Generate's redraws, controls and state), ``registry``
    its ``ModelRegistry``."""

    def __init__(self, views: Any, registry: Any) -> None:
        self.views = views
        self.registry = registry
        tab = views.tabs["generate"]
        self.tab = tab
        self.state = tab.extra["state"]
        self.redraws = views._redraws["generate"]
        self.inputs = union_of(f.inputs for f in self.redraws)
        self.controls = {c._id for c in tab.controls.values()}
        fns = [f for f in views.demo.fns.values() if usable(f)]
        self.step = _handler(fns, tab.extra.get("step_button"), "generate_step")
        self.back = _handler(fns, None, "generate_back")
        self._lock = threading.Lock()
        self._drawn: OrderedDict[tuple, dict[int, Any]] = OrderedDict()
        self._decodings: OrderedDict[tuple, Any] = OrderedDict()

    # -- the follower's draw ----------------------------------------------------------------

    def draw(self, view: dict, query: str, values: tuple) -> dict[int, Any]:
        """The figures of ``view`` (a room's ``query``, decoded) as {component id: output},
        the follower's state left out, for a follower whose draw inputs (``self.inputs``) hold
        ``values``; the follower's own state is marked as following that view."""
        known = dict(zip([c._id for c in self.inputs], values, strict=True))
        mine = known.get(self.state._id)
        if mine is not None:
            mine.following = query
        flags = (getattr(mine, "chat", False), getattr(mine, "stream_shown", True))
        # The page's own settings that the view does not set (the font size, the folded
        # panels): part of what is drawn.
        settings = tuple(
            repr(v)
            for c, v in zip(self.inputs, values, strict=True)
            if c._id not in self.controls and not isinstance(c, gr.State)
        )
        key = (query, flags, settings)
        with self._lock:
            drawn = self._drawn.get(key)
            if drawn is None:
                drawn = self._compute(view, known, (without_step(query), flags, settings), flags)
                self._drawn[key] = drawn
                while len(self._drawn) > KEPT_DRAWS:
                    self._drawn.popitem(last=False)
            self._drawn.move_to_end(key)
        return drawn

    def _compute(self, view: dict, known: dict[int, Any], base: tuple, flags: tuple) -> dict:
        """Step the kept decoding of ``base`` (or a new one) to the view's step and draw it;
        the lock is held."""
        wanted = int(view.get("step") or 1)
        private = self._decodings.pop(base, None)
        at = _steps(private)
        known = dict(known)
        for key, component in self.tab.controls.items():
            if key in view["values"]:
                known[component._id] = view["values"][key]
        drawn: dict[int, Any] = {}
        if private is None or at < 1 or (wanted < at and self.back is None):
            private = copy.deepcopy(self.state.value)
            private.chat, private.stream_shown = flags
            known[self.state._id] = private
            drawn = self.views._draw(view, tuple(known.get(c._id) for c in self.views.draw_inputs))
            at = 1
        known[self.state._id] = private
        moves = wanted - at
        handler = self.step if moves > 0 else self.back
        if moves and handler is not None:
            args = [known.get(c._id) for c in handler.inputs]
            if moves > 0:
                result = replay_steps(
                    handler.fn, moves + 1, args, skip_outputs(len(handler.outputs))
                )
            else:
                result = skip_outputs(len(handler.outputs))
                for _ in range(-moves):
                    result = handler.fn(*args)
            self._merge(drawn, handler, result, known)
        elif not drawn:  # the same step again (a control the figures do not read changed)
            drawn = self.views._draw(view, tuple(known.get(c._id) for c in self.views.draw_inputs))
        # What reads the stepped decoding besides the step (the cache view), drawn for it.
        stepped = {c._id for c in (self.step.outputs if self.step else [])}
        for function in self.redraws[1:]:
            outputs = {c._id for c in function.outputs}
            if self.state in function.inputs and not outputs <= stepped:
                result = function.fn(*[known.get(c._id) for c in function.inputs])
                self._merge(drawn, function, result, known)
        drawn.pop(self.state._id, None)  # never a follower's
        # Serialised once here, not once per follower (gradio sends a PlotData as it is).
        plots = {c._id for c in self.views.outputs if isinstance(c, gr.Plot)}
        for key in plots & drawn.keys():
            drawn[key] = _serialised(drawn[key])
        self._decodings[base] = private
        while len(self._decodings) > KEPT_DECODINGS:
            _, old = self._decodings.popitem(last=False)
            old.release()
        return drawn

    @staticmethod
    def _merge(drawn: dict[int, Any], function: Any, result: Any, known: dict[int, Any]) -> None:
        if len(function.outputs) == 1:
            result = (result,)
        if not isinstance(result, tuple):
            return
        for component, out in zip(function.outputs, result, strict=False):
            if isinstance(out, gr.State) or component._id == -1:
                continue
            drawn[component._id] = merge_outputs(drawn.get(component._id), out)

    # -- a follower's own state -------------------------------------------------------------

    def quiet_while_following(self) -> None:
        """Generate's own events that read a session's generation state and draw something
        draw nothing while that session follows a room: the view's event has drawn the
        lecturer's step, and a value the view set (a model, a prompt) fires them."""
        for function in self.views.demo.fns.values():
            fn = function.fn
            if fn is None or getattr(fn, "quiet_while_following", False):
                continue
            if self.state not in function.inputs:
                continue
            if all(isinstance(c, gr.State) for c in function.outputs):
                continue  # keeps the state's own flags (the chat switch) as the page sets them
            position = function.inputs.index(self.state)
            function.fn = _quiet(fn, position, len(function.outputs))

    def catch_up(self, state: Any, *values: Any) -> Any:
        """When the page stops following: its generation state stepped to the view its page
        shows (the values of the step's inputs, but the state, are ``values``); gr.skip() when
        it was not following a Generate view."""
        query = getattr(state, "following", None)
        if state is None or not query:
            return gr.skip()
        state.following = None
        if not isinstance(query, str) or self.step is None:
            return gr.skip()
        from .rooms import view_params

        view = decode_view(view_params(query), self.views.tabs, self.registry).view
        if not view or view.get("tab") != "generate":
            return gr.skip()
        others = [c._id for c in self.step.inputs if c is not self.state]
        known = dict(zip(others, values, strict=True))
        for key, component in self.tab.controls.items():
            if key in view["values"]:
                known[component._id] = view["values"][key]
        known[self.state._id] = state
        args = [known.get(c._id) for c in self.step.inputs]
        # From the start: whatever the state held is older than the view.
        with state.lock:
            state.key, state.decoding = (), None
        replay_steps(self.step.fn, int(view.get("step") or 1) + 1, args, None)
        return state

    def catch_up_inputs(self) -> list[Any]:
        """The inputs of :meth:`catch_up`: the state, then the step's other inputs."""
        if self.step is None:
            return [self.state]
        return [self.state, *[c for c in self.step.inputs if c is not self.state]]


def _serialised(out: Any) -> Any:
    """A plot's output with its figure as gradio's ``PlotData`` (its JSON made once)."""
    from gradio.components.plot import PlotData

    if isinstance(out, dict) and out.get("__type__") == "update":
        return {**out, "value": _serialised(out["value"])} if "value" in out else out
    to_json = getattr(out, "to_json", None)
    if out is None or isinstance(out, PlotData) or to_json is None:
        return out
    return PlotData(type="plotly", plot=to_json())


def union_of(groups: Any) -> list[Any]:
    """The components of ``groups`` (lists of components) without repeats, in order."""
    seen: dict[int, Any] = {}
    for group in groups:
        for component in group:
            seen.setdefault(component._id, component)
    return list(seen.values())


def _steps(state: Any) -> int:
    decoding = getattr(state, "decoding", None)
    return len(decoding.records) if decoding is not None else 0


def _handler(fns: list[Any], button: Any, api_name: str) -> Any:
    """The event of ``button``'s click (or the one called ``api_name``)."""
    for function in fns:
        if button is not None and (button._id, "click") in [tuple(t) for t in function.targets]:
            return function
    return next((f for f in fns if f.api_name == api_name), None)


def _quiet(fn: Callable[..., Any], position: int, outputs: int) -> Callable[..., Any]:
    """``fn``, answering with nothing while the state at ``position`` follows a room. Of the
    same kind as ``fn`` (a generator stays a generator, a coroutine a coroutine): gradio reads
    the kind from the function it is handed, and streams only a generator's values."""

    def following(args: tuple[Any, ...]) -> bool:
        state = args[position] if position < len(args) else None
        return bool(getattr(state, "following", None))

    quiet: Callable[..., Any]
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def quiet_async_steps(*args: Any, **kwargs: Any) -> Any:
            if following(args):
                yield skip_outputs(outputs)
                return
            async for value in fn(*args, **kwargs):
                yield value

        quiet = quiet_async_steps
    elif inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def quiet_awaited(*args: Any, **kwargs: Any) -> Any:
            return skip_outputs(outputs) if following(args) else await fn(*args, **kwargs)

        quiet = quiet_awaited
    elif inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def quiet_steps(*args: Any, **kwargs: Any) -> Any:
            if following(args):
                yield skip_outputs(outputs)
                return
            yield from fn(*args, **kwargs)

        quiet = quiet_steps
    else:

        @functools.wraps(fn)
        def quiet_called(*args: Any, **kwargs: Any) -> Any:
            return skip_outputs(outputs) if following(args) else fn(*args, **kwargs)

        quiet = quiet_called
    setattr(quiet, "quiet_while_following", True)  # noqa: B010  (a mark read back by getattr)
    return quiet
