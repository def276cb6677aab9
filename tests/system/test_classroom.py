"""Serving a class: views shared by every session (computed once, bounded), costly work in a
queue of its own so that it never holds a cheap call back."""

from __future__ import annotations

import json
import threading

import gradio as gr
import plotly.graph_objects as go
import pytest
import torch

from ui.demo import COSTLY, COSTLY_HANDLERS, concurrency_for, queue_costly_apart
from ui.serving.shared_views import SHARED_HANDLERS, share_views
from ui.serving.state import TRAINED_HERE, SessionModels, SharedViews, view_bytes

# -- the cache ---------------------------------------------------------------------------------


def test_many_sessions_asking_at_once_compute_a_view_once() -> None:
    cache = SharedViews(max_bytes=10_000, max_entries=10)
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def compute() -> tuple[object, bool]:
        calls.append(1)
        started.set()
        release.wait(30)
        return ("the view",), True

    got: list[object] = []
    first = threading.Thread(target=lambda: got.append(cache.get("k", compute)))
    first.start()
    assert started.wait(30)
    # The others arrive while the first computes: they wait for its result.
    others = [
        threading.Thread(target=lambda: got.append(cache.get("k", compute))) for _ in range(5)
    ]
    for thread in others:
        thread.start()
    release.set()
    for thread in [first, *others]:
        thread.join(30)
    assert len(calls) == 1
    assert got == [("the view",)] * 6
    assert cache.computed == 1 and cache.hits == 5


def test_a_failure_is_not_kept_and_each_session_hears_its_own() -> None:
    cache = SharedViews(max_bytes=10_000, max_entries=10)

    def fail() -> tuple[object, bool]:
        raise gr.Error("that layer does not exist")

    for _ in range(2):
        with pytest.raises(gr.Error, match="does not exist"):
            cache.get("k", fail)
    assert len(cache) == 0 and cache.computed == 0


def test_a_view_that_warned_its_session_is_not_kept() -> None:
    cache = SharedViews(max_bytes=10_000, max_entries=10)
    calls: list[int] = []

    def warned() -> tuple[object, bool]:
        calls.append(1)
        return "view", False

    assert cache.get("k", warned) == "view"
    assert cache.get("k", warned) == "view"
    assert len(calls) == 2 and len(cache) == 0


def test_the_cache_is_bounded_by_count_and_by_bytes_oldest_first() -> None:
    cache = SharedViews(max_bytes=10_000, max_entries=3)
    for key in "abcd":
        cache.get(key, lambda key=key: (key * 10, True))
    assert len(cache) == 3
    assert cache.get("a", lambda: ("again", True)) == "again"  # "a" was the oldest: dropped
    cache = SharedViews(max_bytes=1_000, max_entries=100)
    for key in "abcdef":
        cache.get(key, lambda: ("x" * 300, True))
    assert cache.bytes <= 1_000 and len(cache) == 3
    cache.get("big", lambda: ("x" * 5_000, True))  # larger than the bound alone: not kept
    assert len(cache) == 3 and cache.bytes <= 1_000


def test_view_bytes_counts_figure_data_and_strings() -> None:
    import numpy as np

    def heatmap(n: int) -> go.Figure:
        return go.Figure(go.Heatmap(z=np.zeros((n, n), dtype=np.float32)))

    # plotly keeps float32 data as base64 text: 4/3 of its bytes.
    grown = view_bytes(heatmap(200)) - view_bytes(heatmap(100))
    assert 0.95 * 160_000 <= grown <= 1.05 * 160_000
    text = view_bytes(("y" * 1_000, {"value": "z" * 10}))
    assert 1_010 <= text < 1_300


# -- the app's events ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo() -> gr.Blocks:
    import app

    built = app.build_demo("cpu", (), preload=False)
    yield built
    built.model_registry.release()


def _event(demo: gr.Blocks, api_name: str):
    return next(fn for fn in demo.fns.values() if fn.api_name == api_name)


def _figure_json(value: object) -> dict:
    """A figure as plotly's JSON."""
    assert isinstance(value, go.Figure)
    return json.loads(value.to_json())


ATTENTION = [
    "the small cat sees a red ball",
    "translate",
    "encoder self-attention",
    2,
    3,
    1,
    [],
    False,
]


def test_two_sessions_get_the_same_attention_view_computed_once(demo: gr.Blocks) -> None:
    event = _event(demo, "attention")
    assert getattr(event.fn, "shared_view", False)
    cache = demo.model_registry.shared_views
    handler = event.fn
    while getattr(handler, "shared_view", False):  # the tab's own handler: the reference
        handler = handler.__wrapped__
    reference = handler(*ATTENTION, SessionModels(), "none (the correct pass)")
    before = cache.computed, cache.hits
    one = event.fn(*ATTENTION, SessionModels(), "none (the correct pass)")
    two = event.fn(*ATTENTION, SessionModels(), "none (the correct pass)")
    assert (cache.computed, cache.hits) == (before[0] + 1, before[1] + 1)
    figures = [i for i, v in enumerate(reference) if isinstance(v, go.Figure)]
    assert figures
    for i in figures:
        assert _figure_json(one[i]) == _figure_json(two[i]) == json.loads(reference[i].to_json())
    for i, value in enumerate(reference):
        if isinstance(value, str):
            assert one[i] == two[i] == value
    # Another head is another view.
    other = event.fn(*ATTENTION[:4], 4, *ATTENTION[5:], SessionModels(), "none (the correct pass)")
    assert cache.computed == before[0] + 2
    assert _figure_json(other[figures[0]]) != _figure_json(one[figures[0]])


def test_a_view_of_a_model_trained_in_a_session_is_never_shared(demo: gr.Blocks) -> None:
    event = _event(demo, "attention")
    cache = demo.model_registry.shared_views
    before = cache.computed, cache.hits, len(cache)
    with pytest.raises(gr.Error, match="no model has been trained"):
        event.fn(ATTENTION[0], TRAINED_HERE, *ATTENTION[2:], SessionModels(), None)
    assert (cache.computed, cache.hits, len(cache)) == before


def test_an_update_kept_in_the_cache_survives_gradio_taking_it_apart(demo: gr.Blocks) -> None:
    """gradio pops an update's value as it sends it: each session gets its own dict."""
    cache = SharedViews(10_000, 10)
    calls: list[int] = []

    def refit(layer: int, session: SessionModels) -> dict:
        calls.append(1)
        return gr.update(value=layer, maximum=6)

    with gr.Blocks() as blocks:
        layer, state, out = gr.Slider(1, 6), gr.State(SessionModels()), gr.Slider(1, 6)
        layer.change(refit, [layer, state], out)
    fn = next(iter(blocks.fns.values()))
    fn.fn.__name__ = "refresh"  # one of the shared handlers' names
    share_views(blocks, cache)
    first = fn.fn(2, SessionModels())
    first.pop("value")
    second = fn.fn(2, SessionModels())
    assert second["value"] == 2 and len(calls) == 1


def test_shared_handlers_are_the_tabs_views_and_never_generations_step() -> None:
    assert {"step", "back", "run", "reset", "first_step", "redraw"}.isdisjoint(SHARED_HANDLERS)


def test_costly_events_wait_in_their_own_queue_sized_to_the_device(demo: gr.Blocks) -> None:
    costly = [fn for fn in demo.fns.values() if getattr(fn.fn, "__name__", "") in COSTLY_HANDLERS]
    assert {fn.fn.__name__ for fn in costly} == set(COSTLY_HANDLERS)
    cpu_limit = concurrency_for(torch.device("cpu"), cores=2)[1]
    for fn in costly:
        assert fn.concurrency_id == COSTLY and fn.concurrency_limit == cpu_limit
    cheap = [_event(demo, name) for name in ("generate_step", "attention", "inside_layer")]
    assert all(fn.concurrency_id != COSTLY for fn in cheap)
    assert len({fn.concurrency_id for fn in cheap}) == 3  # one queue per cheap event
    assert (
        concurrency_for(torch.device("cuda"), cores=2)[0]
        > concurrency_for(torch.device("cpu"), cores=2)[0]
    )
    # Applying it twice changes nothing.
    assert len(queue_costly_apart(demo, cpu_limit)) == len(costly)


@pytest.mark.slow
def test_a_cheap_call_completes_while_another_sessions_costly_call_runs() -> None:
    """Over HTTP, with events: one session's long view is held inside its handler; another
    session's attention click and Step complete meanwhile, and a third session's long view
    waits in the costly queue (its position shown) until the first is released."""
    from gradio_client.utils import Status
    from serving import api_client

    import app
    from ui.testing import launched

    demo = app.build_demo("cpu", (), preload=False)
    started, release = threading.Event(), threading.Event()
    entered: list[int] = []
    scale = _event(demo, "attention_scale")
    original = scale.fn
    import functools

    @functools.wraps(original)
    def held(*args: object) -> object:
        entered.append(1)
        started.set()
        release.wait(120)
        return original(*args)

    scale.fn = held
    scale_args = ["the cat sat on the mat", "translate", "first", 1, 1, 0, 8, 3, -1, False]
    try:
        with launched(demo) as url:
            first, second, third = (api_client(url) for _ in range(3))
            costly = first.submit(*scale_args, api_name="/attention_scale")
            assert started.wait(120)
            # The cheap calls of another session complete while the costly one is held.
            second.predict(*ATTENTION, "none (the correct pass)", api_name="/attention")
            settings = ["the small cat sees a red ball", "translate", "greedy", 1.0, 0, 1.0]
            settings += [3, 40, 0, 1, 1, False]
            second.predict(*settings, api_name="/generate_step")
            assert not release.is_set() and not costly.done()
            # A second long view waits in the costly queue, and its page is told where.
            waiting = third.submit(*scale_args[:3], 2, *scale_args[4:], api_name="/attention_scale")
            status = waiting.status()
            for _ in range(600):
                status = waiting.status()
                if status.code == Status.IN_QUEUE and status.rank is not None:
                    break
                threading.Event().wait(0.1)
            assert status.code == Status.IN_QUEUE and status.rank is not None
            assert len(entered) == 1
            release.set()
            costly.result(timeout=120)
            waiting.result(timeout=120)
            assert len(entered) == 2
    finally:
        release.set()
