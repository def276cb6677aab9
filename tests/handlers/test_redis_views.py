"""The shared views' second level in Redis: a view one app process computed serves another
(equal to a fresh computation), views are written as JSON that gives back what was stored, a
view that JSON cannot hold stays in its process, and a Redis that stops answering leaves every
request computed where it is, without an error. Against a real ``redis-server``."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from typing import Any

import gradio as gr
import numpy as np
import plotly.graph_objects as go
import pytest

from ui.serving.shared_views import share_views
from ui.serving.state import ModelRegistry, SessionModels, SharedViews
from ui.serving.store import RedisViews, Unencodable, decode_view, encode_view
from ui.tabs import attention

ATTENTION = ["the small cat sees a red ball", "translate", "encoder self-attention", 2, 3, 1]
ATTENTION_ARGS = [*ATTENTION, [], False, SessionModels(), "none (the correct pass)"]


def client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=2)


def figure_json(value: Any) -> Any:
    """A figure as the JSON plotly sends to the browser (parsed, so key order is moot)."""
    assert isinstance(value, go.Figure)
    return json.loads(value.to_json())


def same_view(got: Any, expected: Any) -> None:
    """``got`` is ``expected``: the same types all the way down, figures as equal JSON."""
    assert type(got) is type(expected)
    if isinstance(expected, go.Figure):
        assert figure_json(got) == figure_json(expected)
    elif isinstance(expected, gr.components.Component):
        # All gradio reads of a component a handler returns: the arguments it was made with.
        assert got is not expected
        same_view(got.constructor_args, expected.constructor_args)
    elif isinstance(expected, tuple | list):
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            same_view(a, b)
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for k in expected:
            same_view(got[k], expected[k])
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected


def test_a_view_comes_back_from_json_as_it_was() -> None:
    heat = go.Figure(
        go.Heatmap(z=np.arange(12, dtype=np.float32).reshape(3, 4), text=[["a"] * 4] * 3)
    )
    heat.update_layout(title="weights", height=300)
    view = (
        heat,
        "**12** tokens",
        gr.update(value=None, visible=False, label="Layer"),
        gr.update(choices=[("one", 1), ("two", 2)]),
        [1, 2.5, True, None],
        (3, float("nan"), float("inf"), -0.0),
        None,
        gr.Radio(choices=[("a b", "x"), "y"], value="x", label="Kind"),
        gr.Slider(1, 6, value=2, step=1, visible=False),
    )
    same_view(decode_view(encode_view(view)), view)
    # A tuple inside a list is a tuple again, a list inside a tuple a list.
    assert decode_view(encode_view([(1, [2])])) == [(1, [2])]


@pytest.mark.parametrize(
    "value",
    [
        np.zeros(3),
        np.float64(1.5),  # gradio would send it as a float; JSON would not give it back
        gr.Textbox(value=lambda: "a value computed at each load"),
        {1: "a key that is not a string"},
        object(),
        ("fine", {"nested": [np.int64(3)]}),
    ],
    ids=["array", "numpy-float", "callable-value", "int-key", "object", "nested"],
)
def test_what_json_cannot_give_back_is_not_encoded(value: Any) -> None:
    with pytest.raises(Unencodable):
        encode_view(value)


@pytest.fixture(scope="module")
def registry() -> Iterator[ModelRegistry]:
    built = ModelRegistry("cpu")
    yield built
    built.release()


def worker(registry: ModelRegistry, url: str, version: str = "v1") -> tuple[gr.Blocks, Any]:
    """One app process's Attention tab, its shared views behind the Redis at ``url``."""
    with gr.Blocks() as demo:
        attention.build(registry, gr.Checkbox(False), gr.State(SessionModels()))
    cache = SharedViews(10**8, 100, second=RedisViews(client(url), version, prefix="test:"))
    share_views(demo, cache)
    return demo, cache


def event(demo: gr.Blocks, api_name: str) -> Any:
    return next(fn for fn in demo.fns.values() if fn.api_name == api_name).fn


def unshared(handler: Any) -> Any:
    while getattr(handler, "shared_view", False):
        handler = handler.__wrapped__
    return handler


def test_a_view_one_process_computed_serves_another(
    registry: ModelRegistry, redis_url: str
) -> None:
    demo_a, views_a = worker(registry, redis_url)
    demo_b, views_b = worker(registry, redis_url)
    first = event(demo_a, "attention")(*ATTENTION_ARGS)
    views_a.second.flush()
    assert views_a.computed == 1 and views_a.second.stored == 1
    keys = client(redis_url).keys("test:view:v1:*")
    assert len(keys) == 1
    assert 0 < client(redis_url).ttl(keys[0]) <= 3600
    served = event(demo_b, "attention")(*ATTENTION_ARGS)
    assert (views_b.computed, views_b.remote_hits) == (0, 1)  # B did not compute it
    # What B served is what the tab's own handler draws, computed afresh.
    reference = unshared(event(demo_b, "attention"))(*ATTENTION_ARGS)
    same_view(served, reference)
    same_view(first, reference)
    assert any(isinstance(part, go.Figure) for part in reference)
    # B keeps it too: asked again, it is answered from B's memory.
    event(demo_b, "attention")(*ATTENTION_ARGS)
    assert (views_b.computed, views_b.remote_hits, views_b.hits) == (0, 1, 1)
    # Another head is another view: B computes it.
    other = [*ATTENTION[:4], 4, *ATTENTION_ARGS[5:]]
    event(demo_b, "attention")(*other)
    assert views_b.computed == 1


def test_processes_of_another_version_do_not_share(registry: ModelRegistry, redis_url: str) -> None:
    demo_a, views_a = worker(registry, redis_url, version="v1")
    demo_b, views_b = worker(registry, redis_url, version="v2")
    event(demo_a, "attention")(*ATTENTION_ARGS)
    views_a.second.flush()
    event(demo_b, "attention")(*ATTENTION_ARGS)
    assert (views_b.computed, views_b.remote_hits) == (1, 0)


def test_a_refit_of_the_controls_is_shared_as_the_components_it_made(
    registry: ModelRegistry, redis_url: str
) -> None:
    """Refitting the controls answers with components (sliders, a radio): the other process
    makes the same ones again from Redis."""
    demo_a, views_a = worker(registry, redis_url)
    demo_b, views_b = worker(registry, redis_url)
    args = [ATTENTION[0], ATTENTION[1], ATTENTION[2], 2, 3, 1, SessionModels()]
    event(demo_a, "controls")(*args)
    views_a.second.flush()
    served = event(demo_b, "controls")(*args)
    assert (views_b.computed, views_b.remote_hits) == (0, 1)
    reference = unshared(event(demo_b, "controls"))(*args)
    assert any(isinstance(part, gr.components.Component) for part in reference)
    same_view(served, reference)


def two_workers_of(handler: Any, url: str) -> list[tuple[Any, SharedViews]]:
    """Two processes' events that draw ``handler`` (a number in, its view out), their shared
    views behind the Redis at ``url``."""
    made = []
    for _ in range(2):
        with gr.Blocks() as blocks:
            number, out = gr.Number(), gr.JSON()
            number.change(handler, number, out)
        cache = SharedViews(10_000, 10, second=RedisViews(client(url), "v1", prefix="test:"))
        share_views(blocks, cache)
        made.append((next(iter(blocks.fns.values())).fn, cache))
    return made


def test_a_view_json_cannot_hold_stays_in_its_process(redis_url: str) -> None:
    calls: list[float] = []

    def refresh(number: float) -> tuple[Any, str]:  # one of the shared handlers' names
        calls.append(number)
        return np.arange(3) * number, "an array: JSON would give back a list"

    (fn_a, views_a), (fn_b, views_b) = two_workers_of(refresh, redis_url)
    assert getattr(fn_a, "shared_view", False)
    fn_a(2.0)
    views_a.second.flush()
    assert (views_a.second.stored, views_a.second.unstored) == (0, 1)
    assert client(redis_url).keys("test:view:*") == []
    served = fn_b(2.0)
    assert (views_b.computed, views_b.remote_hits) == (1, 0)
    assert isinstance(served[0], np.ndarray) and served[0].tolist() == [0, 2, 4]
    fn_a(2.0)
    assert views_a.hits == 1 and len(calls) == 2  # still shared within its process


def test_a_view_larger_than_the_bound_is_not_written(redis_url: str) -> None:
    store = RedisViews(client(redis_url), "v1", prefix="test:", max_bytes=1_000)
    noise = np.random.default_rng(0).random((50, 50))
    assert not store.put("big", (go.Figure(go.Heatmap(z=noise)),))
    assert store.put("small", ("a short view",))
    assert client(redis_url).keys("test:view:*") == [b"test:view:v1:small"]


def test_a_redis_that_dies_midway_leaves_each_request_computed_here(
    registry: ModelRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    from redis_server import RedisServer

    server = RedisServer()
    try:
        demo_a, views_a = worker(registry, server.url)
        demo_b, views_b = worker(registry, server.url)
        grid = ["the small cat sees a red ball", "translate", "encoder self-attention", 1]
        grid_args = [*grid, False, SessionModels()]
        event(demo_a, "attention_grid")(*grid_args)
        views_a.second.flush()
        assert views_a.second.stored == 1
        server.stop()
        with caplog.at_level(logging.WARNING, logger="visualiser"):
            # B finds nothing (Redis is gone) and computes: no error, the right view.
            served = event(demo_b, "attention_grid")(*grid_args)
            other = event(demo_b, "attention")(*ATTENTION_ARGS)  # and its write is dropped
            views_b.second.flush()
        assert (views_b.computed, views_b.remote_hits) == (2, 0)
        same_view(served, unshared(event(demo_b, "attention_grid"))(*grid_args))
        same_view(other, unshared(event(demo_b, "attention"))(*ATTENTION_ARGS))
        warnings = [r for r in caplog.records if "Redis" in r.getMessage()]
        assert len(warnings) == 1  # said once, not at each request
        assert views_b.second.stored == 0
    finally:
        server.stop()


def test_a_redis_that_does_not_answer_is_a_miss_after_its_timeout() -> None:
    """A server that takes the connection and never answers (a Redis stuck): the request
    waits the short timeout once, computes, and the next ones do not wait at all."""
    import socket

    from ui.serving.store import MISSING, connect

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        cache = SharedViews(10_000, 10, second=RedisViews(connect(url), "v1"))
        calls: list[int] = []

        def compute() -> tuple[Any, bool]:
            calls.append(1)
            return ("the view",), True

        assert cache.get("a", compute, shared_key="a") == ("the view",)
        assert cache.second is not None
        assert not cache.second.breaker.closed()  # not asked again for a while
        assert cache.second.get("b") is MISSING
        assert cache.get("b", compute, shared_key="b") == ("the view",)
        assert len(calls) == 2 and cache.remote_hits == 0


def test_processes_agree_on_the_version_unless_code_or_models_differ(tmp_path: Any) -> None:
    from types import SimpleNamespace

    from ui.serving.store import models_version

    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")

    def registry(*names: str, device: str = "cpu") -> Any:
        return SimpleNamespace(
            device=device, model_names=list(names), sources={"my-model": str(folder)}
        )

    one = models_version(registry("translate", "my-model"))
    assert models_version(registry("translate", "my-model")) == one
    assert models_version(registry("translate", "my-model", "other")) != one
    assert models_version(registry("translate", "my-model", device="cuda")) != one
    (folder / "model.safetensors").write_bytes(b"other weights")  # retrained in place
    assert models_version(registry("translate", "my-model")) != one
