"""What the Generate tab sends the page at a step (the browser, not the model, was the slow
part of a step): the model menu's update is a value gradio can apply, and the figure
redrawn at every step carries no per-cell text, its values still in the hover and equal to the
full figure's."""

from __future__ import annotations

import gradio as gr
import numpy as np
import pytest
import torch

import app as visualiser
from transformer.figures.lens import residual_norms_figure
from ui.serving.state import GenerationState, ModelRegistry, SessionModels
from ui.tabs import generate

GREEDY = ["the small cat sees a red ball", "translate", "greedy", 1.0, 0, 1.0, 3, 40, 0]


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


def test_the_generate_menu_fit_returns_one_update_not_a_tuple():
    # Gradio takes what a one-output event returns as that output's value: a 1-tuple became
    # the menu's value in the page, and every later Generate event failed in its preprocess.
    demo = visualiser.build_demo("cpu", preload=False)
    try:
        menu = demo.views.labels["Generate"].controls["model"]
        fits = [
            fn
            for fn in demo.fns.values()
            if [block._id for block in fn.outputs] == [menu._id] and fn.name != "<lambda>"
        ]
        fits = [fn for fn in fits if len(fn.inputs) == 2]  # (session, the menu's value)
        assert fits, "the Generate model menu is not fitted on load"
        for fn in fits:
            update = fn.fn(SessionModels(), "translate")
            assert isinstance(update, dict) and update.get("__type__") == "update", update
            assert "translate" in update["choices"]
            # As gradio applies it: a value the menu accepts, not a tuple.
            value = update.get("value", "translate")
            assert menu.preprocess(value) == "translate"
    finally:
        demo.close()


def test_the_steps_residual_figure_has_no_cell_text_and_the_full_figures_values(registry):
    session, state = SessionModels(), GenerationState()
    for _ in range(4):
        *_drawn, norms, state = generate.step(registry, *GREEDY, 1, 1, False, session, state)
    assert all(not trace.texttemplate for trace in norms.data)
    assert all("%{z" in trace.hovertemplate for trace in norms.data)
    # The same numbers as the figure with every cell written (built from the recorded stream).
    stream = state.decoding.residual_stream()
    full = residual_norms_figure(stream, list(norms.data[0].x), numbers=True)
    assert any(trace.texttemplate for trace in full.data)
    for shown, written in zip(norms.data, full.data, strict=True):
        np.testing.assert_array_equal(np.asarray(shown.z, float), np.asarray(written.z, float))


def test_a_layer_or_head_change_re_sends_only_the_two_attention_figures(registry):
    # The sliders' event has the two attention figures (and the state) as its only outputs.
    with gr.Blocks() as demo:
        large = gr.Checkbox(False)
        session = gr.State(SessionModels())
        controls = generate.build(registry, large, session)
    by_label = {getattr(b, "label", None): b for b in demo.blocks.values()}
    wanted = {
        by_label["Cross-attention of the new token over the source"]._id,
        by_label["Decoder self-attention, one row per step"]._id,
        controls["state"]._id,
    }
    for slider in (controls["layer"], controls["head"]):
        events = [
            dep
            for dep in demo.config["dependencies"]
            if [slider._id, "release"] in [list(t) for t in dep["targets"]]
        ]
        assert events and all(set(dep["outputs"]) == wanted for dep in events)
    # What it sends equals a full redraw's two figures at that layer and head; the three it
    # leaves out are the same at every layer and head (so the page's copies stay right).
    session, state = SessionModels(), GenerationState()
    for _ in range(3):
        state = generate.step(registry, *GREEDY, 1, 1, False, session, state)[-1]
    full_1 = generate.redraw(registry, *GREEDY, 1, 1, False, session, state)
    full_2 = generate.redraw(registry, *GREEDY, 2, 3, False, session, state)
    cross, triangle, _state = generate.redraw_attention(
        registry, *GREEDY, 2, 3, False, session, state
    )
    assert cross.to_json() == full_2[2].to_json() != full_1[2].to_json()
    assert triangle.to_json() == full_2[3].to_json() != full_1[3].to_json()
    for index in (1, 4, 5):  # next-token chart, logit lens, residual stream
        assert full_1[index].to_json() == full_2[index].to_json()
    # A decoding that is not the controls' own (a new source is on its way) is left alone.
    other = ["a big dog never eats the old cake", *GREEDY[1:]]
    assert generate.redraw_attention(registry, *other, 2, 3, False, session, state)[:2] == (
        gr.skip(),
        gr.skip(),
    )


def test_folded_the_residual_stream_is_left_out_of_a_step_and_unfolding_draws_it(registry):
    """The residual stream's section opens folded, and its figure was most of a step's
    response. Folded (the page says so when it opens and at each fold), a step leaves it out;
    unfolding draws the figure a step would send, and the steps send it again. An API caller,
    whose state no page folded, gets it with every step."""
    import plotly.io as pio

    session, api, page = SessionModels(), GenerationState(), GenerationState()
    for _ in range(3):
        *_, api_norms, api = generate.step(registry, *GREEDY, 1, 1, False, session, api)
    assert api_norms.layout.title.text.startswith("Residual stream")
    page = generate.handlers.fold_stream(page)
    for _ in range(3):
        *drawn, norms, page = generate.step(registry, *GREEDY, 1, 1, False, session, page)
    assert norms == gr.skip()
    sent = sum(len(pio.to_json(f)) for f in drawn[1:] if hasattr(f, "to_plotly_json"))
    assert len(pio.to_json(api_norms)) > sent / 4  # what folding saves is worth saving
    # Unfolded: this decoding's stream, as the API caller's step drew it (the same steps).
    shown, page = generate.handlers.show_stream(registry, *GREEDY, 1, 1, False, session, page)
    assert shown.to_json() == api_norms.to_json()
    *_, norms, page = generate.step(registry, *GREEDY, 1, 1, False, session, page)
    assert norms != gr.skip() and norms.layout.title.text.startswith("Residual stream")
    # Folded again, and a new session's state (gradio copies the tab's) is the API's default.
    assert not generate.handlers.fold_stream(page).stream_shown
    import copy

    assert copy.deepcopy(GenerationState()).stream_shown
    assert not copy.deepcopy(page).stream_shown  # a copy keeps what the page said


def test_the_page_folds_the_stream_when_it_opens_and_at_each_fold_and_unfold():
    demo = visualiser.build_demo("cpu", preload=False)
    try:
        section = next(
            b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "residual-stream"
        )
        by_trigger: dict[str, list[str]] = {}
        for fn in demo.fns.values():
            for block, event in fn.targets:
                if block == section._id:
                    by_trigger.setdefault(event, []).append(fn.name)
        assert by_trigger == {"expand": ["show_stream"], "collapse": ["fold_stream"]}
        loads = [fn for fn in demo.fns.values() if fn.name == "fold_stream"]
        assert any(event == "load" for fn in loads for _, event in fn.targets)
        assert all(fn.api_visibility == "private" for fn in loads)
    finally:
        demo.close()
