"""The tab's layout and event wiring."""

from __future__ import annotations

import functools
from typing import Any

import gradio as gr

from ...serving import limits
from ...serving.errors import beside_input
from ...serving.state import ModelRegistry, bind, once
from ..attention import mistakes
from .compare import KEEP_FOLDS_JS, inside_compare
from .compare import LABEL as COMPARE_LABEL
from .handlers import controls, first_view, inside_layer, refresh
from .view import EXAMPLE_TEXT, SECTIONS, default_query, layers_in, query_choices, stacks_for

INTRO = (
    "One layer, one **query token** at a time: every step in order, with its shape, its values "
    "(hover a strip) and the line of `transformer/` that computes it."
)


def folded_sections(on: bool) -> list[Any]:
    """The open state of the tab's sections (``SECTIONS``' order) with the comparison ``on``
    (all folded) or off (all but the plain input open, as the tab opens)."""
    return [gr.update(open=not on and index > 0) for index in range(len(SECTIONS))]


def build(registry: ModelRegistry, large: gr.Checkbox, session: gr.State) -> dict[str, Any]:
    """Lay out the tab and wire its events (``/inside_layer``; every control redraws through
    private events). Returns the shareable controls by name."""
    gr.Markdown(INTRO)
    first_model = registry.model_names[0]
    try:
        first_config = registry.checkpoint(first_model, None).config
    except ValueError:
        first_config = None
    stacks = stacks_for(first_config) if first_config else ["encoder", "decoder"]
    n_layers = layers_in(first_config, stacks[0]) if first_config else 6
    n_heads = first_config.n_heads if first_config else 8
    choices: list[tuple[str, int]] = []
    if first_config is not None:  # the example's tokens (its view is drawn on page load)
        checkpoint = registry.checkpoint(first_model, None)
        analysis = registry.analysis(first_model, checkpoint, [EXAMPLE_TEXT])
        choices = query_choices(analysis, stacks[0], checkpoint.tokenizer)
    first_query = default_query(choices) if choices else 0
    first = once(functools.partial(first_view, registry, first_model, stacks[0], first_query))
    # One row of controls: in Large font at 1920×1080 the first figure stays above the fold.
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(value=EXAMPLE_TEXT, lines=1, max_lines=2, label="Sentence")
            # A refused input is said here; the controls and figures stay as they were.
            status = gr.Markdown(elem_classes=["input-status"])
            # Compare mode: this layer of the paper's block beside the modern block's.
            # In the controls' row, so the first figure stays above the fold on a projector.
            compare = gr.Checkbox(value=False, label=COMPARE_LABEL, elem_id="inside-compare")
        # Wide enough for "SmolLM2-135M-Instruct" at 1280 px (it was cut to "SmolLM2-135M").
        model_name = gr.Dropdown(
            registry.model_names, value=first_model, label="Model", scale=2, min_width=250
        )
        stack = gr.Radio(stacks, value=stacks[0], label="Stack", min_width=130)
        # Built wide for API callers; the page narrows them to the model's own when it loads.
        layer = gr.Slider(
            1, limits.MAX_LAYERS, value=1, step=1, label="Layer", visible=n_layers > 1
        )
        head = gr.Slider(1, limits.MAX_HEADS, value=1, step=1, label="Head", visible=n_heads > 1)
        query = gr.Dropdown(
            choices,
            value=default_query(choices) if choices else None,
            label="Query token (position: piece)",
            allow_custom_value=True,
        )
    compared = gr.HTML(visible=False, elem_id="inside-compare-view", js_on_load=KEEP_FOLDS_JS)
    summary = gr.Markdown()
    outputs: list[Any] = [summary]
    sections: list[gr.Accordion] = []
    for index, (key, title) in enumerate(SECTIONS):
        # The input is plain (embeddings); the attention is what a student came for: open it first.
        opened = folded_sections(False)[index]["open"]
        # Its id lets a tour stop scroll to it (ui/tour.py).
        accordion = gr.Accordion(title, open=opened, elem_id=f"inside-section-{key}")
        with accordion as section, gr.Row():
            with gr.Column(scale=4):
                # The code first: the lines that ran, in order; what each step means below.
                code = gr.Code(
                    language="python", label="The code, in the order it ran", wrap_lines=True
                )
                steps = gr.Markdown()
            # Beside the code where the page is wide, below it where not (the tour sidebar open).
            plot = gr.Plot(show_label=False, scale=6, min_width=600)
        outputs += [section, steps, code, plot]
        sections.append(section)

    inputs = [text, model_name, stack, layer, head, query, large, session]
    control_inputs = [text, model_name, stack, layer, head, query, session]
    control_outputs = [stack, layer, head, query]
    redraw = beside_input(bind(inside_layer, registry), len(outputs))
    private: dict[str, Any] = {"api_visibility": "private"}
    text.submit(bind(inside_layer, registry), inputs, outputs, api_name="inside_layer")
    # Controls that change what applies (model, stack, sentence) fit the ranges and choices and
    # redraw in one event; the others only redraw.
    fit_and_draw = beside_input(bind(refresh, registry), len(control_outputs + outputs))
    # The stack listens to .select, a user's click: gradio also fires a radio's .input when an
    # event sets its choices, with the old value, which the new choices no longer hold.
    # Dropdowns answer .select, a user's choice: gradio 6 fires their .input twice per choice.
    fits = {
        name: trigger(fit_and_draw, inputs, [*control_outputs, *outputs, status], **private)
        for name, trigger in (("model", model_name.select), ("stack", stack.select))
    }
    fits["text"] = text.input(
        fit_and_draw,
        inputs,
        [*control_outputs, *outputs, status],
        trigger_mode="always_last",
        **private,
    )
    for slider in (layer, head):
        slider.release(redraw, inputs, [*outputs, status], **private)
    query.input(redraw, inputs, [*outputs, status], trigger_mode="always_last", **private)
    large.change(redraw, inputs, [*outputs, status], **private)
    # The comparison follows every control (after the fit, which it reads); off, it is hidden.
    compare_inputs = [text, model_name, stack, layer, head, query, large, compare, session]
    redraw_compare = beside_input(bind(inside_compare, registry), 1)
    compare.input(
        bind(inside_compare, registry), compare_inputs, compared, api_name="inside_compare"
    )
    # After the fit where the trigger refits (a model, a stack, a sentence): started beside it,
    # the redraw would read the old model's stack or layer, which gradio then refuses ("'encoder'
    # is not in the list of choices") once the fit has narrowed the choices.
    # On, the comparison shows every step of both blocks: this model's own sections fold under
    # it (one click away), else the page ran to 8,700 px at 1280×800. Off, they open as the
    # tab opened. .change: a link with compare=1 sets the switch too.
    compare.change(folded_sections, compare, sections, **private)
    for fitted in fits.values():
        fitted.then(redraw_compare, compare_inputs, [compared, status], **private)
    for trigger in (layer.release, head.release, large.change):
        trigger(redraw_compare, compare_inputs, [compared, status], **private)
    query.input(
        redraw_compare,
        compare_inputs,
        [compared, status],
        trigger_mode="always_last",
        **private,
    )
    demo = gr.context.Context.root_block
    if demo is not None:
        demo.load(bind(controls, registry), control_inputs, control_outputs, **private)
        # The first example, drawn once when the first page loads (not while the app starts).
        demo.load(lambda: first() or tuple(gr.skip() for _ in outputs), None, outputs, **private)
    with gr.Accordion("What if the layer were written as the seeds wrote it?", open=False):
        gr.Markdown(
            "The texts this project started from get some of these steps wrong. Switch one "
            "mistake on: this layer's head is recomputed with it, beside the correct one."
        )
        mistakes.build(
            registry,
            model_name,
            text,
            stack,
            layer,
            head,
            large,
            session,
            refitted=[fits["model"]],
        )
    return {
        "model": model_name,
        "text": text,
        "stack": stack,
        "layer": layer,
        "head": head,
        "query": query,
        "compare": compare,
    }
