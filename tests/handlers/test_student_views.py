"""What a student meets when a view changes model, on the built app without a server: a model
chosen in Inside a layer fits the controls before any event reads them, and the tour's stop on
SmolLM2 opens without a warning about a stack it then shows as chosen."""

from __future__ import annotations

import copy
from typing import Any

import gradio as gr
import pytest
from serving import run_async

from transformer.pretrained.shipped import SMOLLM2


@pytest.fixture(scope="module")
def demo() -> gr.Blocks:
    from ui.demo import build_demo

    built = build_demo("cpu", preload=False)
    yield built
    built.close()


def _chain(demo: gr.Blocks, function: Any) -> list[Any]:
    """``function`` and the events it follows (``.then``/``.success``), back to the first."""
    chain = [function]
    while chain[-1].trigger_after is not None:
        chain.append(demo.fns[chain[-1].trigger_after])
    return chain


def test_inside_a_model_choice_fits_the_controls_before_anything_reads_them(
    demo: gr.Blocks,
) -> None:
    """Started beside the fit, a redraw reads the old model's Stack ("encoder") or Layer (10),
    which gradio refuses once the fit has narrowed them: "'encoder' is not in the list of
    choices", "10 is above the largest value this control takes (2)"."""
    tab = demo.views.labels["Inside a layer"]
    model = tab.controls["model"]
    fitted = {tab.controls[key]._id for key in ("stack", "layer", "head", "query")}
    readers = []
    for function in demo.fns.values():
        chain = _chain(demo, function)
        started_by_model = any(block == model._id for block, _event in chain[-1].targets)
        reads = {c._id for c in function.inputs} & fitted
        if not started_by_model or not reads:
            continue
        readers.append(function)
        fits_first = any(fitted <= {c._id for c in f.outputs} for f in chain)
        assert fits_first, f"{getattr(function.fn, '__name__', function.fn)} reads before the fit"
    assert len(readers) >= 3  # the fit and draw, the comparison, the seeds' mistakes


@pytest.mark.skipif(not SMOLLM2.available, reason="needs the shipped SmolLM2")
def test_the_modern_block_stop_opens_without_a_warning(
    demo: gr.Blocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop before it leaves Stack on "encoder" (the translate model): the Inside tab's
    endpoint, applied before the refit, refused it ("is decoder-only: choose decoder") twice
    while the page then showed the decoder, drawn."""
    said: list[str] = []
    monkeypatch.setattr(gr, "Warning", lambda message="", *a, **k: said.append(str(message)))
    tour, views = demo.tour, demo.views
    values = [copy.deepcopy(c.value) for c in views.draw_inputs]
    before = next(i for i, s in enumerate(tour.stops) if "Residual" in s.title)
    views.apply(tour.go(before)[4], *values)
    view = tour.go(len(tour.stops) - 1)[4]
    applied = views.apply(view, *values)
    assert said == []
    tab = views.tabs[view["tab"]]
    out = dict(zip([c._id for c in views.outputs], applied, strict=True))
    assert out[tab.controls["stack"]._id]["value"] == "decoder"


def test_long_inputs_fit_their_sliders_when_opened_and_mark_a_new_text(demo: gr.Blocks) -> None:
    """The Layer and Head sliders stayed at 1–48 and 1–64 for SmolLM2 (30 layers, 9 heads): the
    section now fits them when it opens and when a model is chosen, before any redraw reads
    them. A pasted text left the summary on the old text's length: typing now says so."""
    tab = demo.views.labels["Attention"]
    text = tab.controls["scale_text"]
    sliders = {tab.controls[key]._id for key in ("scale_layer", "scale_head")}
    section = next(
        b
        for b in demo.blocks.values()
        if isinstance(b, gr.Accordion) and str(b.label).startswith("Long inputs")
    )
    fits = [
        f
        for f in demo.fns.values()
        if any(block == section._id for block, _ in _chain(demo, f)[-1].targets)
        and sliders <= {c._id for c in f.outputs}
    ]
    assert fits, "opening the section does not fit the sliders to its model"
    for function in demo.fns.values():
        chain = _chain(demo, function)
        started = {block for block, _ in chain[-1].targets}
        if {section._id, tab.controls["scale_model"]._id} & started and sliders & {
            c._id for c in function.inputs
        }:
            assert any(sliders <= {c._id for c in f.outputs} for f in chain), function.fn
    typed = [
        f
        for f in demo.fns.values()
        if (text._id, "input") in [tuple(t) for t in f.targets]
        and any(isinstance(c, gr.Markdown) for c in f.outputs)
    ]
    assert typed, "typing a text says nothing"
    left = [f for f in demo.fns.values() if (text._id, "blur") in [tuple(t) for t in f.targets]]
    assert left, "leaving the text box does not redraw"


def test_generate_folds_teacher_forcing_below_the_decoding(demo: gr.Blocks) -> None:
    """Generate was 5,900 px long: the teacher-forcing table stood open between the decoding
    and what follows it. It is a section that folds, closed until asked for."""
    button = next(
        b
        for b in demo.blocks.values()
        if isinstance(b, gr.Button) and b.value == "Compare with the reference"
    )
    parent = button.parent
    while parent is not None and not isinstance(parent, gr.Accordion):
        parent = parent.parent
    assert isinstance(parent, gr.Accordion) and parent.open is False
    assert "Teacher forcing" in str(parent.label)


def test_a_link_made_while_chat_is_on_keeps_its_step(demo: gr.Blocks) -> None:
    """Generate opens with the chat switch on: the model reads the question wrapped in its
    template while the box shows the question, and a link made then lost the step it was at."""
    from types import SimpleNamespace

    from ui.serving.state import GenerationState

    views = demo.views
    tab = views.tabs["generate"]
    question, model = "What is the capital of France?", "SmolLM2-135M-Instruct"
    wrapped = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    values = []
    for each in views.tabs.values():
        for key, component in each.controls.items():
            if each is tab and key in ("source", "model"):
                values.append(question if key == "source" else model)
            else:
                values.append(component.value)
    state = GenerationState()
    state.key = (wrapped, model, None)
    state.decoding = SimpleNamespace(records=[1, 2, 3])  # three steps taken
    state.chat = True
    assert "step=3" in views.link("http://x/", "generate", *values, state)
    state.chat = False  # the switch off: the box's own prompt is not what was decoded
    assert "step=" not in views.link("http://x/", "generate", *values, state)


def test_the_pages_own_events_read_a_number_out_of_range_as_the_sliders_edge(
    demo: gr.Blocks,
) -> None:
    """9 typed in a 1..4 Head box, read by an event of the page before Enter moved it into
    range (a link's view settling on a busy server), was refused with an error toast over a
    view that was fine; the page's events now read the edge, while an API caller is still told
    what the control takes."""

    from gradio.state_holder import SessionState

    head = demo.views.labels["Attention"].controls["head"]
    over = head.maximum + 5

    def reading_head(visibility: str) -> Any:
        return next(
            f
            for f in demo.fns.values()
            if f.api_visibility == visibility and any(c._id == head._id for c in f.inputs)
        )

    def values(function: Any) -> list[Any]:
        return [
            over if c._id == head._id else copy.deepcopy(getattr(c, "value", None))
            for c in function.inputs
        ]

    def preprocess(function: Any) -> Any:
        return run_async(demo.preprocess_data(function, values(function), SessionState(demo)))

    private = reading_head("private")
    read = preprocess(private)
    position = next(i for i, c in enumerate(private.inputs) if c._id == head._id)
    assert read[position] == head.maximum
    with pytest.raises(gr.Error, match="above the largest value"):
        preprocess(reading_head("public"))
