"""A visitor who leaves frees what their session held: the app's sessions in gradio's own store
(``gradio.state_holder.StateHolder``), a page closed as gradio marks it when its heartbeat ends,
and the generation a student stepped through, which must be collectable afterwards."""

from __future__ import annotations

import datetime
import gc
import weakref
from collections.abc import Iterator

import gradio as gr
import pytest
from gradio.state_holder import StateHolder
from serving import run_async

from ui.serving.sessions import SESSION_CLOSED_S, drop_left_sessions, left_sessions
from ui.serving.state import GenerationState


@pytest.fixture(scope="module")
def demo() -> Iterator[gr.Blocks]:
    import app

    built = app.build_demo("cpu", (), preload=False)
    yield built
    built.model_registry.release()


def _event(demo: gr.Blocks, api_name: str) -> object:
    return next(fn for fn in demo.fns.values() if fn.api_name == api_name)


def _step_once(demo: gr.Blocks, holder: StateHolder, session: str) -> GenerationState:
    """Generate's Reset then Step in ``session``, as gradio runs them: the inputs' states read
    from the session's store, the returned states written back. Returns the generation."""
    # The controls in the endpoints' order (source, model, strategy, temperature, top-k,
    # top-p, beam width, max new tokens, seed, layer, head, large font), then the states.
    controls = ["the small cat sees a red ball", "translate", "greedy", 1.0, 0, 1.0, 3, 40, 0]
    controls += [1, 1, False]
    for api_name in ("generate_reset", "generate_step"):
        event = _event(demo, api_name)
        states = [holder[session][c._id] for c in event.inputs if isinstance(c, gr.State)]
        result = event.fn(*controls, *states)
        for component, value in zip(event.outputs, result, strict=True):
            if isinstance(component, gr.State):
                holder[session][component._id] = value
    state = next(
        holder[session][c._id]
        for c in _event(demo, "generate_step").inputs
        if isinstance(c, gr.State) and isinstance(c.value, GenerationState)
    )
    assert state.decoding is not None and len(state.decoding.records) == 1
    return state


def test_a_session_whose_page_closed_frees_its_generation(demo: gr.Blocks) -> None:
    holder = StateHolder()
    holder.set_blocks(demo)
    leaving, staying = "leaving-session", "staying-session"
    held = weakref.ref(_step_once(demo, holder, leaving).decoding)
    _step_once(demo, holder, staying)
    forgotten: list[str] = []

    holder.session_data[leaving].is_closed = True  # what gradio does when the heartbeat ends
    now = datetime.datetime.now()
    # Not yet: a page whose heartbeat broke off reconnects within the grace period.
    soon = now + datetime.timedelta(seconds=SESSION_CLOSED_S / 2)
    assert drop_left_sessions(holder, [forgotten.append], now=soon) == 0
    assert held() is not None

    later = now + datetime.timedelta(seconds=SESSION_CLOSED_S + 1)
    assert left_sessions(holder, now=later) == [leaving]
    assert drop_left_sessions(holder, [forgotten.append], now=later) == 1
    assert leaving not in holder.session_data and staying in holder.session_data
    assert forgotten == [leaving]
    gc.collect()
    assert held() is None  # nothing else kept the student's steps
    # The session still open kept its own.
    assert _event(demo, "generate_step") is not None
    assert any(
        isinstance(v, GenerationState) and v.decoding is not None
        for v in holder.session_data[staying].state_data.values()
    )


def test_a_running_request_that_holds_the_state_does_not_keep_its_steps(
    demo: gr.Blocks,
) -> None:
    holder = StateHolder()
    holder.set_blocks(demo)
    state = _step_once(demo, holder, "s")  # a Run still holding the state, as this test does
    held = weakref.ref(state.decoding)
    holder.session_data["s"].is_closed = True
    later = datetime.datetime.now() + datetime.timedelta(seconds=SESSION_CLOSED_S + 1)
    assert drop_left_sessions(holder, now=later) == 1
    gc.collect()
    assert held() is None and state.decoding is None  # the delete callback let go of it


def test_the_apps_queue_is_sized_for_a_class(demo: gr.Blocks) -> None:
    from ui.serving import limits

    assert demo._queue.max_size == limits.QUEUE_SIZE >= 300


def test_the_write_order_forgets_a_session_that_left(demo: gr.Blocks) -> None:
    order = demo.write_order
    number = order.start()
    order.deliver("gone", number, [1], ["value"], hold=True)
    order.deliver("kept", number, [1], ["value"], hold=True)
    before = len(order)
    order.forget("gone")
    assert len(order) == before - 1
    # The session still here keeps its guard: an older call's write is held back.
    assert order.deliver("kept", number - 1, [1], ["old"], hold=True) == [gr.skip()]
    # Nothing is remembered of the one that left.
    assert order.deliver("gone", number - 1, [1], ["old"], hold=True) == ["old"]


def test_a_heartbeat_that_comes_back_marks_its_session_open_while_it_lasts() -> None:
    """Gradio marks a session closed for good when its page's heartbeat ends; a page on a
    flaky network opens a new one at once. The app's layer marks the session open again and
    counts the heartbeat open until its request ends."""
    import threading

    from ui.serving.sessions import _Reopening, left_sessions, open_heartbeats

    class Data:
        is_closed = True  # its first heartbeat ended

    class Holder:
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.session_data = {"abc": Data()}
            self.time_last_used: dict = {}

    holder = Holder()
    seen: list[tuple[bool, int, list[str]]] = []

    async def gradio_app(scope, receive, send) -> None:  # the heartbeat's response, streaming
        seen.append(
            (holder.session_data["abc"].is_closed, open_heartbeats(holder)["abc"],
             left_sessions(holder, unused_s=0))
        )  # fmt: skip

    assert left_sessions(holder, unused_s=0) == ["abc"]
    layer = _Reopening(gradio_app, holder)

    def call(scope: dict) -> None:
        run_async(layer(scope, None, None))

    call({"type": "http", "path": "/gradio_api/heartbeat/abc"})
    assert seen == [(False, 1, [])]  # open, counted, not left while it lasted
    assert not open_heartbeats(holder)
    holder.session_data["abc"].is_closed = True
    call({"type": "http", "path": "/gradio_api/info"})  # any other request changes nothing
    assert holder.session_data["abc"].is_closed and not open_heartbeats(holder)
