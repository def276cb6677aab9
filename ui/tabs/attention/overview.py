"""The layout of the Attention tab's long-input section (``/attention_scale``): one text,
every head summarised, one head zoomed, rollout of one token."""

from __future__ import annotations

from typing import Any

import gradio as gr

from transformer.lab.attention_stats import STATISTICS

from ...serving import limits
from ...serving.errors import beside_input
from ...serving.state import ModelRegistry, bind
from .scale import (
    CAVEAT,
    GENERAL_LIMIT,
    MAX_TOP_K,
    MAX_WINDOW,
    SCALE_EXAMPLE,
    attention_scale,
    attention_scale_live,
    scale_controls,
    stale_note,
)


def build_scale(
    registry: ModelRegistry, large: gr.Checkbox, session: gr.State
) -> dict[str, gr.Component]:
    """Lay out the section and wire its events; returns its shareable controls."""
    names = registry.model_names
    first = next((n for n in names if "SmolLM2" in n), names[0])
    with gr.Accordion(
        "Long inputs: every head at once, a zoomed window, rollout", open=False
    ) as section:
        gr.Markdown(
            "Paste a long text (a page, up to the limit below). Every head of every layer is "
            "summarised by numbers computed on the server; choose one to see it whole "
            "(downsampled) and a window of its queries exactly, with each query's strongest "
            "keys as edges."
        )
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=380):
                text = gr.Textbox(
                    value=SCALE_EXAMPLE,
                    lines=6,
                    max_lines=12,
                    label=f"Long text (at most {limits.MAX_TEXT:,} characters)",
                )
                # Said before a model is read (reading SmolLM2 takes seconds); choosing a
                # model states its own.
                limit = gr.Markdown(GENERAL_LIMIT, elem_classes=["input-status"])
                status = gr.Markdown(elem_classes=["input-status"])
                model = gr.Dropdown(names, value=first, label="Model")
                statistic = gr.Radio(list(STATISTICS), value="first", label="Colour the heads by")
                layer = gr.Slider(1, limits.MAX_LAYERS, value=1, step=1, label="Layer")
                head = gr.Slider(1, limits.MAX_HEADS, value=1, step=1, label="Head")
                first_query = gr.Number(value=0, precision=0, label="Window: first query")
                window = gr.Slider(1, MAX_WINDOW, value=32, step=1, label="Window: queries")
                top_k = gr.Slider(0, MAX_TOP_K, value=3, step=1, label="Top-k keys per query")
                token = gr.Number(value=-1, precision=0, label="Rollout of token (−1: the last)")
                run = gr.Button("Show every head", variant="primary")
            with gr.Column(scale=2):
                summary = gr.Markdown()
                overview = gr.Plot(label="Every head", show_label=False)
        head_plot = gr.Plot(label="The chosen head, whole", show_label=False)
        window_plot = gr.Plot(label="The chosen head, a window of queries", show_label=False)
        rollout_plot = gr.Plot(label="Attention rollout", show_label=False)
        gr.Markdown(CAVEAT)

    inputs: list[gr.components.Component] = [text, model, statistic, layer, head]
    inputs += [first_query, window, top_k, token, large, session]
    outputs = [overview, head_plot, window_plot, rollout_plot, summary]
    handler = bind(attention_scale, registry)
    run.click(handler, inputs, outputs, api_name="attention_scale")
    private: dict[str, Any] = {"api_visibility": "private"}
    redraw = beside_input(handler, len(outputs))
    # Opening the section fits the Layer and Head sliders to its model (they were built wide
    # for API callers), then draws its example (a short text: a pass of a second or two). A
    # new model fits them first too: a redraw beside the fit would read the old model's layer.
    fit = bind(scale_controls, registry)
    fit_inputs = [model, session, layer, head]
    # The events that may start a new pass (seconds to a minute on a laptop CPU for a long
    # text) show a progress bar with the layer it has reached.
    read = beside_input(bind(attention_scale_live, registry), len(outputs))
    for trigger in (section.expand, model.select):
        trigger(fit, fit_inputs, [limit, layer, head], **private).then(
            read, inputs, [*outputs, status], **private
        )
    statistic.select(redraw, inputs, [*outputs, status], **private)
    # A text pasted or typed: the summary says at once that the figures are of the text before
    # (its length, about how long a redraw takes); leaving the box redraws (a long pass is
    # not started on every key pressed).
    text.input(
        bind(stale_note, registry),
        [text, model, session],
        summary,
        trigger_mode="always_last",
        **private,
    )
    text.blur(read, inputs, [*outputs, status], trigger_mode="always_last", **private)
    for slider in (layer, head, window, top_k):
        slider.release(redraw, inputs, [*outputs, status], **private)
    for number in (first_query, token):
        # Enter redraws, and so does leaving the box (a student who types and clicks away).
        for event in (number.submit, number.blur):
            event(redraw, inputs, [*outputs, status], trigger_mode="always_last", **private)
    return {
        "scale_text": text,
        "scale_model": model,
        "scale_statistic": statistic,
        "scale_layer": layer,
        "scale_head": head,
        "scale_first_query": first_query,
        "scale_window": window,
        "scale_top_k": top_k,
        "scale_token": token,
    }
