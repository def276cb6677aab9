"""A redraw never draws over a newer one (ui.serving.ordering): two calls of one session run side by
side, the older ends last, and what the newer wrote stays on the page.

The calls run in threads, with gradio's per-call request set as gradio sets it; which call
starts first and which ends last is fixed by events, not by timing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import gradio as gr
import pytest
from gradio.context import LocalContext
from serving import run_async

from ui.serving.ordering import WriteOrder, newest_wins, opening, ordered, overtaken

SKIP = {"__type__": "update"}


def _in_session(session: str, fn: Callable[..., Any], *args: Any) -> Any:
    LocalContext.request.set(SimpleNamespace(session_hash=session))  # type: ignore[arg-type]
    try:
        return fn(*args)
    finally:
        LocalContext.request.set(None)


@pytest.fixture
def blocks() -> Iterator[SimpleNamespace]:
    with gr.Blocks() as demo:
        figure = gr.Markdown()
        caption = gr.Markdown()
        slider = gr.Slider(1, 4)
        state = gr.State(0)
    yield SimpleNamespace(demo=demo, figure=figure, caption=caption, slider=slider, state=state)


@contextlib.contextmanager
def _ends_last(
    order: WriteOrder, outputs: list[Any], view: Callable[[], Any], session: str = "s"
) -> Iterator[list[Any]]:
    """Calls ``view`` (an event with these ``outputs``) of ``session`` on a thread: it starts
    before the ``with`` block runs and ends after the block has ended. Yields the list that
    receives what it delivers."""
    started, block_done = threading.Event(), threading.Event()

    def slow() -> Any:
        started.set()
        assert block_done.wait(10)
        return view()

    slow.__dict__.update(vars(view))  # what marks the view (``opening``) marks its wrapper
    older = ordered(slow, order, outputs)
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(_in_session(session, older)))
    thread.start()
    assert started.wait(10)
    try:
        yield results
    finally:
        block_done.set()
        thread.join(10)


def _race(
    order: WriteOrder,
    first: tuple[list[Any], Callable[[], Any]],
    second: tuple[list[Any], Callable[[], Any]],
    sessions: tuple[str, str] = ("s", "s"),
) -> tuple[Any, Any]:
    """Calls ``first`` and then ``second`` (each: its event's outputs, its function), of the
    given sessions: ``first`` starts first and ends after ``second`` has ended. Returns what
    each delivers."""
    newer = ordered(second[1], order, second[0])
    with _ends_last(order, first[0], first[1], sessions[0]) as first_results:
        second_result = _in_session(sessions[1], newer)
    return first_results[0], second_result


def test_an_older_call_ending_last_leaves_what_the_newer_one_drew(blocks: Any) -> None:
    order = WriteOrder()
    older, newer = _race(
        order,
        ([blocks.figure, blocks.caption], lambda: ("old figure", "old caption")),
        ([blocks.figure], lambda: "new figure"),
    )
    assert newer == "new figure"
    # The figure stays the newer one's; the caption, which the newer call did not write, is
    # the older call's, the latest value it has.
    assert older == (SKIP, "old caption")


def test_a_newer_call_that_wrote_nothing_holds_nothing_back(blocks: Any) -> None:
    order = WriteOrder()
    older, _ = _race(
        order,
        ([blocks.figure], lambda: "old figure"),
        ([blocks.figure], lambda: gr.skip()),  # an error beside the input: figures kept
    )
    assert older == "old figure"


def test_the_order_is_per_session(blocks: Any) -> None:
    order = WriteOrder()
    older, _ = _race(
        order,
        ([blocks.figure], lambda: "mine"),
        ([blocks.figure], lambda: "another student's"),
        sessions=("one", "two"),
    )
    assert older == "mine"


def test_only_the_properties_a_newer_call_set_are_held_back(blocks: Any) -> None:
    order = WriteOrder()
    older, _ = _race(
        order,
        ([blocks.slider], lambda: gr.update(maximum=3, value=2, visible=True)),
        ([blocks.slider], lambda: gr.update(value=4)),
    )
    assert older == {"__type__": "update", "maximum": 3, "visible": True}
    # A component returned whole is held back where the newer call set its value.
    older, _ = _race(
        WriteOrder(),
        ([blocks.slider], lambda: gr.Slider(1, 3, value=2)),
        ([blocks.slider], lambda: 4),
    )
    assert older == SKIP


def test_a_call_that_keeps_state_delivers_everything_and_its_writes_count(blocks: Any) -> None:
    order = WriteOrder()
    older, _ = _race(
        order,
        ([blocks.figure, blocks.state], lambda: ("step 2's figure", 2)),
        ([blocks.figure], lambda: "a redraw"),
    )
    assert older == ("step 2's figure", 2)  # the page follows the state it keeps
    older, _ = _race(
        order,
        ([blocks.figure], lambda: "a redraw of the old values"),
        ([blocks.figure, blocks.state], lambda: ("step 3's figure", 3)),
    )
    assert older == SKIP


def test_a_stream_delivers_every_result_and_holds_back_older_redraws(blocks: Any) -> None:
    order = WriteOrder()

    def run() -> Iterator[str]:
        yield "token 1"
        yield "token 2"

    stream = ordered(run, order, [blocks.figure])
    older = ordered(lambda: "the view before Run", order, [blocks.figure])
    with _ends_last(order, [blocks.figure], lambda: "the view before Run") as results:
        assert _in_session("s", lambda: list(stream())) == ["token 1", "token 2"]
    assert results == [SKIP]
    assert _in_session("s", older) == "the view before Run"  # started after the stream


def test_a_long_poll_awaited_in_the_event_loop_is_ordered_too(blocks: Any) -> None:
    """A follower's poll waits in the event loop (a coroutine, no thread): an older redraw
    that ends after the poll brought the room's view leaves that view on the page."""
    import asyncio

    order = WriteOrder()

    async def poll() -> str:
        await asyncio.sleep(0)
        return "the room's view"

    awaited = ordered(poll, order, [blocks.figure])
    assert asyncio.iscoroutinefunction(awaited)

    async def in_session() -> Any:  # the event loop's thread has a context of its own
        LocalContext.request.set(SimpleNamespace(session_hash="s"))  # type: ignore[arg-type]
        return await awaited()

    with _ends_last(order, [blocks.figure], lambda: "the view before the poll") as results:
        assert run_async(in_session()) == "the room's view"
    assert results == [SKIP]


def test_a_handler_called_inside_another_is_part_of_it(blocks: Any) -> None:
    """A link's view is one event that calls the tabs' redraws in this process: the redraws
    started after it, but their results are the event's own."""
    order = WriteOrder()
    inner = ordered(lambda: "the link's figure", order, [blocks.figure])
    outer = ordered(lambda: (inner(), "the link's caption"), order, [blocks.figure, blocks.caption])
    assert _in_session("s", outer) == ("the link's figure", "the link's caption")


def test_every_handler_of_the_app_is_ordered_once() -> None:
    from ui.demo import build_demo

    demo = build_demo(preload=False)
    handlers = [f for f in demo.fns.values() if f.fn is not None and f.outputs]
    assert handlers
    assert all(getattr(f.fn, "_newest_wins", False) for f in handlers)
    # Wrapping twice would number each call twice; the second pass leaves them as they are.
    before = {f._id: f.fn for f in handlers}
    newest_wins(demo)
    assert {f._id: f.fn for f in handlers} == before


def test_an_api_client_gets_every_answer_it_asked_for() -> None:
    """Calls from gradio_client share one session too, but each is a question of its own:
    an older call that ends last still answers with its own result."""
    from serving import api_client

    from ui.testing import launched

    started, release = threading.Event(), threading.Event()

    def slow(text: str) -> str:
        started.set()
        assert release.wait(20)
        return f"slow {text}"

    with gr.Blocks() as demo:
        box, out = gr.Textbox(), gr.Textbox()
        gr.Button().click(slow, box, out, api_name="slow")
        gr.Button().click(lambda text: f"fast {text}", box, out, api_name="fast")
    newest_wins(demo)
    with launched(demo) as url:
        client = api_client(url)
        older = client.submit("a", api_name="/slow")
        assert started.wait(20)
        assert client.predict("b", api_name="/fast") == "fast b"
        release.set()
        assert older.result(timeout=30) == "slow a"


def test_a_handler_asks_whether_a_later_call_wrote_its_outputs(blocks: Any) -> None:
    order = WriteOrder()
    seen: list[tuple[bool, bool]] = []

    def opening_view() -> str:
        seen.append((overtaken([blocks.figure]), overtaken([blocks.caption, blocks.slider])))
        return "the default figure"

    _race(order, ([blocks.figure], opening_view), ([blocks.figure], lambda: "the tour's figure"))
    assert seen == [(True, False)]
    assert not overtaken([blocks.figure])  # outside any ordered call
    # Another page's later call is not this page's news.
    seen.clear()
    _race(
        WriteOrder(),
        ([blocks.figure], opening_view),
        ([blocks.figure], lambda: "another student's figure"),
        sessions=("one", "two"),
    )
    assert seen == [(False, False)]


def test_a_pages_first_views_are_held_back_whole_states_too(blocks: Any) -> None:
    """The first views keep state (Generate's decoding) yet are only the page's defaults:
    where a tour stop wrote while they were drawn, the stop's view and state stay."""
    order = WriteOrder()
    older, _ = _race(
        order,
        ([blocks.figure, blocks.state, blocks.caption], opening(lambda: ("default", 1, "cap"))),
        ([blocks.figure, blocks.state], lambda: ("the tour's figure", 2)),
    )
    assert older == (SKIP, SKIP, "cap")


def test_the_first_views_skip_a_tab_a_later_event_has_drawn() -> None:
    """A student who opens the tour while the page is still drawing its first views: the tab
    the stop drew is not drawn again with the defaults (nor its generation restarted), and the
    other tabs still get theirs."""
    from ui.links.first_views import FirstViews

    calls: list[str] = []
    first_running, stop_drawn = threading.Event(), threading.Event()

    def first_tab_view(text: str) -> str:
        calls.append("first")
        first_running.set()
        assert stop_drawn.wait(10)
        return f"first: {text}"

    def second_tab_view(text: str) -> tuple[str, int]:
        calls.append("second")
        return f"second: {text}", 1

    with gr.Blocks() as demo:
        text = gr.Textbox("default")
        with gr.Tabs():
            with gr.Tab("Opening", id="opening"):
                gr.Markdown("the page's first tab, drawn by its own page-load event")
            with gr.Tab("First", id="first") as first:
                first_figure = gr.Markdown()
            with gr.Tab("Second", id="second") as second:
                second_figure, second_state = gr.Markdown(), gr.State(0)
        demo.load(first_tab_view, text, first_figure)
        demo.load(second_tab_view, text, [second_figure, second_state])
        views = FirstViews(demo, [first, second])
    order = newest_wins(demo)
    opened = next(f for f in demo.fns.values() if f.fn.__name__ == "open")
    stop = ordered(lambda: ("the stop's figure", 2), order, [second_figure, second_state])

    def page_request() -> Any:
        request = SimpleNamespace(session_hash="s", query_params={}, headers={})
        LocalContext.request.set(request)  # type: ignore[arg-type]
        return request

    results: list[Any] = []

    def open_page() -> None:  # gradio passes the request to a handler that asks for it
        values = [getattr(c, "value", None) for c in opened.inputs]
        results.append(opened.fn(page_request(), *values))

    thread = threading.Thread(target=open_page)
    thread.start()
    assert first_running.wait(10)
    page_request()
    assert stop() == ("the stop's figure", 2)
    LocalContext.request.set(None)
    stop_drawn.set()
    thread.join(10)
    assert calls == ["first"]
    drawn = dict(zip(views.outputs, results[0], strict=True))
    assert drawn[first_figure] == "first: default"
    assert drawn[second_figure] == SKIP and drawn[second_state] == SKIP
