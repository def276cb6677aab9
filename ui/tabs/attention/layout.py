"""The tab's layout and event wiring."""

from __future__ import annotations

import functools
from typing import Any

import gradio as gr

from transformer.lab.switches import WHAT_IFS

from ...serving import limits
from ...serving.errors import beside_input
from ...serving.state import ModelRegistry, bind, once
from . import mistakes as seed_mistakes
from .handlers import attention, controls, everything, first_view, grid, refit_everything
from .overview import build_scale
from .panels import HEAD_COLUMN_WIDTH
from .view import ATTENTION_KINDS, EXAMPLE_SENTENCES, kinds_for, layers_of, sentence_count


def build(
    registry: ModelRegistry, large: gr.Checkbox, session: gr.State
) -> dict[str, gr.Component]:
    """Lay out the tab and wire its events (``/attention``, ``/attention_grid``; every control
    redraws every panel that depends on it through private events)."""
    gr.Markdown(
        "Each head computes `softmax(QKᵀ/√d_k)V`. Rows are **queries** (the token that looks), "
        "columns are **keys** (the tokens looked at). Grey cells are masked."
    )
    first_model = registry.model_names[0]
    try:
        first_config = registry.checkpoint(first_model, None).config
    except ValueError:
        first_config = None
    kinds = kinds_for(first_config) if first_config else list(ATTENTION_KINDS)
    first_kind = kinds[-1]
    n_layers = layers_of(first_config, ATTENTION_KINDS[first_kind]) if first_config else 6
    n_heads = first_config.n_heads if first_config else 8
    n_rows = sentence_count(EXAMPLE_SENTENCES)
    first = once(functools.partial(first_view, registry, first_model, first_kind))
    # The controls in a side column, the figures beside them: in Large font at 1920×1080 the
    # head's figure is above the fold. On a phone (one column) the head's map comes right after
    # the controls that choose it (ui/serving/phone.py orders the "phone-…" classes).
    with gr.Row(equal_height=False, elem_id="attention-main"):
        with gr.Column(scale=1, min_width=380):
            sentences = gr.Textbox(
                value=EXAMPLE_SENTENCES,
                lines=3,
                label="One to three sentences (one per line; different lengths make padding)",
            )
            # A refused input is said here; the controls and figures stay as they were.
            status = gr.Markdown(elem_classes=["input-status"])
            model_name = gr.Dropdown(registry.model_names, value=first_model, label="Model")
            kind = gr.Radio(kinds, value=first_kind, label="Which attention")
            layer = gr.Slider(
                1,
                limits.MAX_LAYERS,
                value=min(2, n_layers),
                step=1,
                label="Layer",
                visible=n_layers > 1,
            )
            head = gr.Slider(
                1, limits.MAX_HEADS, value=1, step=1, label="Head", visible=n_heads > 1
            )
            row = gr.Slider(
                1, max(2, n_rows), value=1, step=1, label="Sentence", visible=n_rows > 1
            )
            what_if = gr.CheckboxGroup(
                [s.label for s in WHAT_IFS],
                label="What if… (recomputed live)",
                elem_classes=["phone-later"],
            )
            mistake = seed_mistakes.control(first_config)
            mistake.elem_classes = ["phone-later"]
            run = gr.Button("Show attention", variant="primary", elem_classes=["phone-later"])
        with gr.Column(scale=2, min_width=HEAD_COLUMN_WIDTH):
            summary = gr.Markdown(elem_classes=["phone-next"])
            single = gr.Plot(
                label="One head: scores before softmax, weights after",
                show_label=False,
                elem_classes=["phone-first"],
            )
            diff = gr.Plot(
                label="What-if: change in this head's weights",
                show_label=False,
                elem_classes=["phone-last"],
            )
            masks = gr.Plot(label="Masks", show_label=False, elem_classes=["phone-last"])
    grid_plot = gr.Plot(label="Every head of every layer (one colour scale)", show_label=False)
    at_scale = build_scale(registry, large, session)

    handler = bind(attention, registry)
    inputs = [sentences, model_name, kind, layer, head, row, what_if, large, session, mistake]
    outputs = [single, masks, diff, summary]
    grid_inputs = [sentences, model_name, kind, row, large, session]
    # The head view comes first; the grid follows from the same cached trace.
    run.click(handler, inputs, outputs, api_name="attention").success(
        bind(grid, registry), grid_inputs, [grid_plot], api_name="attention_grid"
    )

    # Live: every control redraws every panel that depends on it. Controls that change what
    # applies (model, sentences, kind) first fit the choices and ranges, then redraw.
    control_inputs = [sentences, model_name, kind, layer, head, row, session]
    control_outputs = [kind, layer, head, row]
    all_outputs = [single, masks, diff, summary, grid_plot]
    redraw = beside_input(bind(everything, registry), len(all_outputs))
    private: dict[str, Any] = {"api_visibility": "private"}

    refit = bind(controls, registry)
    # Controls that change what applies fit the ranges and choices and redraw in one event
    # (see refit_everything). The radio listens to .select, a user's click: gradio also fires
    # its .input when an event sets its choices.
    fitted = [*control_outputs, mistake, *all_outputs, what_if]
    fit_and_draw = beside_input(bind(refit_everything, registry), len(fitted))
    fitted.append(status)
    kind.select(fit_and_draw, inputs, fitted, **private)
    # Dropdowns answer .select, a user's choice: gradio 6 fires their .input twice per choice.
    model_name.select(fit_and_draw, inputs, fitted, **private)
    sentences.input(fit_and_draw, inputs, fitted, trigger_mode="always_last", **private)
    for slider in (layer, head, row):
        slider.release(redraw, inputs, [*all_outputs, status], **private)
    what_if.input(redraw, inputs, [*all_outputs, status], **private)
    mistake.select(redraw, inputs, [*all_outputs, status], **private)
    large.change(redraw, inputs, [*all_outputs, status], **private)

    examples = [
        [
            "the small cat sees a red ball\na big dog sleeps",
            "translate",
            "cross-attention (decoder → encoder)",
        ],
        ["a b c d e f g h\nk l m", "reverse", "cross-attention (decoder → encoder)"],
        ["the teacher sees\na bird", "continue", "decoder masked self-attention"],
        ["my quiet mouse always waits on the green cat", "translate", "encoder self-attention"],
        [
            "The cat sat on the mat because it was tired.\nIt slept.",
            "all-MiniLM-L6-v2",
            "encoder self-attention",
        ],
    ]
    names = set(registry.model_names)
    rows = gr.Examples(
        [example for example in examples if example[1] in names],
        [sentences, model_name, kind],
        label="Examples for a lecture (click one to show it)",
    )
    rows.load_input_event.success(fit_and_draw, inputs, fitted, **private)
    # The sliders were built wide for API callers; the page shows the first model's ranges.
    demo = gr.context.Context.root_block
    if demo is not None:
        demo.load(refit, control_inputs, control_outputs, **private)
        # The first example, drawn once when the first page loads (not while the app starts).
        demo.load(first, None, [single, masks, diff, summary, grid_plot], **private)
    return {
        "sentences": sentences,
        "model": model_name,
        "kind": kind,
        "layer": layer,
        "head": head,
        "row": row,
        "what_if": what_if,
        "mistake": mistake,
        **at_scale,
    }
