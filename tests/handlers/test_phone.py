"""A phone's figures are fitted to its window (ui/serving/phone.py): the width read from the
page's cookie, every figure an event returns or yields fitted, other windows untouched."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import gradio as gr
import plotly.graph_objects as go
from gradio.context import LocalContext

from transformer.figures.common import base_layout, figure
from ui.serving.phone import COOKIE, fit_figures, fitted, window_width


def _request(cookie: str | None) -> SimpleNamespace:
    return SimpleNamespace(headers={} if cookie is None else {"cookie": cookie})


def _figure() -> go.Figure:
    title = "A title long enough to need two lines on a phone, as the head maps' titles do"
    return figure([{"type": "bar", "x": [1, 2], "y": ["a", "b"]}], base_layout(title, 300, False))


def test_the_width_comes_from_the_pages_cookie() -> None:
    assert window_width(_request(f"other=1; {COOKIE}=390; more=x")) == 390
    assert window_width(_request(f"{COOKIE}=wide")) is None
    assert window_width(_request(f"{COOKIE}=0")) is None
    assert window_width(_request("other=1")) is None
    assert window_width(_request(None)) is None
    assert window_width(None) is None


def test_fitted_reaches_every_figure_of_a_return_value() -> None:
    fig = _figure()
    values = fitted((fig, "text", {"__type__": "update", "value": fig}, [fig]), 362)
    out, text, update, listed = values
    assert text == "text"
    for each in (out, update["value"], listed[0]):
        assert isinstance(each, go.Figure) and each is not fig
        assert "<br>" in each.layout.title.text
    assert fitted(fig, None) is fig


def test_a_plot_component_returned_has_its_figure_fitted() -> None:
    # The exercises' events return gr.Plot(figure, visible=True); gradio sends it as an update
    # of the component's arguments.
    fig = _figure()
    update = fitted(gr.Plot(fig, visible=True), 362)
    assert update["__type__"] == "update" and update["visible"] is True
    assert isinstance(update["value"], go.Figure) and update["value"] is not fig
    assert "<br>" in update["value"].layout.title.text
    assert fig.layout.title.text.count("<br>") == 0  # the figure given is left as it was
    hidden = gr.Plot(None, visible=False)
    assert fitted(hidden, 362) is hidden  # no figure: gradio reads it as it always did
    button = gr.Button(visible=False)
    assert fitted(button, 362) is button


def test_events_that_draw_figures_fit_them_for_a_phone_only() -> None:
    def draw(text: str) -> go.Figure:
        return _figure()

    def steps(text: str):
        yield _figure()
        yield _figure()

    with gr.Blocks() as demo:
        box = gr.Textbox()
        plot = gr.Plot()
        note = gr.Markdown()
        box.submit(draw, box, plot)
        box.change(steps, box, plot)
        box.blur(lambda text: text, box, note)  # draws no figure: left alone
    assert fit_figures(demo) == 2
    assert fit_figures(demo) == 0  # wrapped once
    fns = list(demo.fns.values())
    assert inspect.isgeneratorfunction(fns[1].fn)  # gradio still streams it
    assert fns[0].fn.__name__ == "draw"  # the name the queues are chosen by
    assert list(inspect.signature(fns[0].fn).parameters) == ["text"]
    for cookie, wrapped in ((f"{COOKIE}=390", True), (f"{COOKIE}=1280", False), (None, False)):
        token = LocalContext.request.set(_request(cookie))  # type: ignore[arg-type]
        try:
            drawn = [fns[0].fn("x"), *fns[1].fn("x")]
        finally:
            LocalContext.request.reset(token)
        for fig in drawn:
            assert ("<br>" in fig.layout.title.text) == wrapped
            if wrapped:
                assert fig.layout.height > 300
