"""What the Generate tab sends the page at a step (issue 23.8: the browser, not the model, was
the slow part of a step): the model menu's update is a value gradio can apply, and the figure
redrawn at every step carries no per-cell text, its values still in the hover and equal to the
full figure's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import app as visualiser
from transformer.figures.lens import residual_norms_figure
from ui.state import GenerationState, ModelRegistry, SessionModels
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
