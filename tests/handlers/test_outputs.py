"""An event's answer, made lighter (ui.serving.outputs): what the page receives for each output
is what gradio's own answer gives it, checked against gradio's ``postprocess_data`` itself on
the same predictions, and a skipped output builds nothing."""

from __future__ import annotations

import random
from typing import Any

import gradio as gr
import plotly.graph_objects as go
import pytest
from gradio.state_holder import SessionState
from serving import run_async

from ui.serving.outputs import lighter_outputs


def _components() -> tuple[gr.Blocks, list[Any]]:
    with gr.Blocks() as demo:
        outputs = [
            gr.Textbox("a"),
            gr.Slider(1, 10, value=2),
            gr.Markdown("x"),
            gr.Dropdown(["one", "two"], value="one"),
            gr.Plot(),
            gr.Checkbox(),
            gr.State(0),
            gr.Button("go"),
        ]
        with gr.Accordion("more", open=False) as accordion:
            gr.Markdown("inside")
        outputs.append(accordion)
        gr.Button().click(lambda: None, None, outputs)
    return demo, outputs


def _predictions(block: Any, rng: random.Random) -> Any:
    """A value a handler may return for ``block``: a skip, an update, or a plain value."""
    if isinstance(block, gr.Accordion):
        return rng.choice([gr.skip(), gr.update(open=True), gr.Accordion(open=False)])
    plain = {
        gr.Textbox: lambda: rng.choice(["b", "", "ünïcode ☕️"]),
        gr.Slider: lambda: rng.randint(1, 10),
        gr.Markdown: lambda: "**bold**",
        gr.Dropdown: lambda: "two",
        gr.Plot: lambda: go.Figure(go.Bar(y=[rng.random(), 1.0])),
        gr.Checkbox: lambda: rng.random() < 0.5,
        gr.State: lambda: {"step": rng.randint(0, 9)},
        gr.Button: lambda: "stop",
    }[type(block)]
    kind = rng.choice(["skip", "value", "update", "plain"])
    if kind == "skip":
        return gr.skip()
    if kind == "value":
        return gr.update(value=plain())
    if kind == "update":
        props = {gr.Dropdown: {"choices": ["two", "three"]}, gr.Slider: {"maximum": 20}}
        return gr.update(value=plain(), visible=True, **props.get(type(block), {}))
    return plain()


def _as_page_reads(value: Any) -> Any:
    """What the page does with an answer: an update that sets only a value sets that value."""
    if isinstance(value, dict) and value.keys() == {"__type__", "value"}:
        return value["value"]
    return value


def _answer(demo: gr.Blocks, function: Any, predictions: Any, state: SessionState) -> Any:
    return run_async(demo.postprocess_data(function, predictions, state))


@pytest.mark.parametrize("seed", range(12))
def test_the_page_receives_what_gradio_would_send(seed: int) -> None:
    rng = random.Random(seed)
    (plain, outputs), (lighter, same) = _components(), _components()  # two apps alike
    lighter_outputs(lighter)
    sides = [(demo, next(iter(demo.fns.values())), SessionState(demo)) for demo in (plain, lighter)]
    for _ in range(4):  # a few events in turn: an update's props stay with the session
        predictions = [_predictions(block, rng) for block in outputs]
        answers = []
        for demo, function, state in sides:
            # gradio takes an update apart as it answers it: each side gets its own copy
            copy = [dict(p) if isinstance(p, dict) else p for p in predictions]
            answers.append([_as_page_reads(v) for v in _answer(demo, function, copy, state)])
        assert answers[1] == answers[0], predictions
    (_, _, expected), (_, _, state) = sides
    for block, twin in zip(outputs, same, strict=True):
        if isinstance(block, gr.State):
            assert state[twin._id] == expected[block._id]
        elif isinstance(block, gr.Dropdown):  # what its next input is checked against
            assert state[twin._id].choices == expected[block._id].choices


@pytest.mark.parametrize("n", [1, 2, 3])
def test_one_output_and_a_few_keep_gradio_s_forms(n: int) -> None:
    """Gradio takes one output's value bare, several as a list; a skip among them leaves one."""
    with gr.Blocks() as demo:
        boxes = [gr.Textbox() for _ in range(n)]
        gr.Button().click(lambda: None, None, boxes)
    function = next(iter(demo.fns.values()))
    values: Any = ["kept", *[gr.skip()] * (n - 1)] if n > 1 else "kept"
    expected = _answer(demo, function, values, SessionState(demo))
    lighter_outputs(demo)
    lighter_outputs(demo)  # a second call leaves it as it is
    assert _answer(demo, function, values, SessionState(demo)) == expected
    assert _answer(demo, function, gr.skip() if n == 1 else [gr.skip()] * n, SessionState(demo))


def test_a_skipped_output_builds_no_component(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradio builds every updated output anew for the session, a skip too (0.6 ms each): the
    cost of a follower's poll, a dozen skips every quarter of a second."""
    with gr.Blocks() as demo:
        boxes = [gr.Slider(1, 4) for _ in range(5)]
        gr.Button().click(lambda: None, None, boxes)
    function = next(iter(demo.fns.values()))
    built = []
    original = gr.Slider.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(gr.Slider, "__init__", counting)
    _answer(demo, function, [gr.skip() for _ in boxes], SessionState(demo))
    assert len(built) == len(boxes)  # gradio's own answer
    built.clear()
    lighter_outputs(demo)
    answer = _answer(demo, function, [gr.skip(), *[gr.update(value=2)] * 4], SessionState(demo))
    assert built == [] and answer == [{"__type__": "update"}, 2, 2, 2, 2]


def _figure(y: float) -> go.Figure:
    return go.Figure(go.Heatmap(z=[[y, 1.0], [0.5, y]]))


def test_a_shared_figure_is_serialised_once_for_every_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thirty followers drawing the lecturer's view got the same figures, each serialised
    thirty times; a figure of one session's own is serialised for each answer, as gradio does."""
    from ui.serving.outputs import SharedPlots
    from ui.serving.shared_views import mark_shared

    plot = gr.Plot()
    shared, own = _figure(0.25), _figure(0.75)
    mark_shared((gr.update(value=shared, visible=True), "a caption"))
    serialised = []
    original = go.Figure.to_json

    def counting(self: go.Figure, *args: Any, **kwargs: Any) -> str:
        serialised.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(go.Figure, "to_json", counting)
    plots = SharedPlots()
    answers = [plots.sent(plot, shared) for _ in range(30)]
    update = plots.sent(plot, gr.update(value=shared, visible=True))
    assert serialised == [shared]
    assert all(answer.plot == gr.Plot().postprocess(_figure(0.25)).plot for answer in answers)
    assert update["visible"] is True and update["value"] is answers[0]
    serialised.clear()
    assert plots.sent(plot, own) is own  # left to gradio: serialised at each answer
    assert plots.sent(gr.Markdown(), shared) is shared  # only a plot's value is its JSON


def test_the_kept_json_is_bounded_and_never_serves_another_figure() -> None:
    from ui.serving.outputs import SharedPlots
    from ui.serving.shared_views import mark_shared

    plot = gr.Plot()
    size = len(plot.postprocess(_figure(0.0)).plot)
    plots = SharedPlots(max_bytes=3 * size)
    figures = [mark_shared(_figure(i / 10)) for i in range(5)]
    for figure in figures:
        plots.sent(plot, figure)
    assert len(plots) == 3  # the least recently sent went first
    # A figure gone and another made in its place (perhaps at the same address) is its own.
    for i in range(20):
        gone = mark_shared(_figure(i / 20))
        key = id(gone)
        plots.sent(plot, gone)
        del gone
        fresh = mark_shared(_figure(0.99))
        sent = plots.sent(plot, fresh)
        assert sent.plot == plot.postprocess(_figure(0.99)).plot, (i, id(fresh) == key)
