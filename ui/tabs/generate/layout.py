"""The Generate tab's layout and event wiring."""

from __future__ import annotations

from typing import Any

import gradio as gr

from ...serving import limits
from ...serving.state import GenerationState, ModelRegistry, bind
from . import handlers
from .cache_view import build_cache_view
from .chat import chat_control, chat_preview, chat_shown, set_chat, toggle_chat
from .decoding import (
    EXAMPLES,
    OPENING,
    OPENING_CHAT,
    example_reference,
    generating_models,
    opening,
    reference_for,
)
from .drawing import STEP_FIGURE_WIDTH
from .request import INPUT_NAMES
from .silent import build_silent


def build(
    registry: ModelRegistry, large: gr.Checkbox, session: gr.State
) -> dict[str, gr.Component]:
    """Lay out the tab and wire its events (``/generate_step``, ``/generate_back``,
    ``/generate``, ``/generate_reset``, ``/teacher_forcing``)."""
    gr.Markdown(
        "The decoder writes one token at a time: it scores every token of the vocabulary, picks one "
        "(greedy, sampling or beam search), appends it and goes again. Step through it."
    )
    # Only models with a decoder can generate: an encoder-only one (MiniLM) is not offered.
    names = generating_models(registry)
    # SmolLM2 where it is installed (a real language model), else the first toy example.
    first_source, first_model, first_strategy = opening(names)
    # On a phone (one column) the prompt, the step buttons and the step's chart come first;
    # the model, its notes and the decoding options follow the chart (ui/serving/phone.py
    # orders the "phone-…" classes).
    with gr.Row(elem_id="generate-prompt"):
        source = gr.Textbox(value=first_source, label="Prompt, or source sentence to translate")
        model_name = gr.Dropdown(
            names,
            value=first_model if first_model in names else names[0],
            label="Model",
            elem_classes=["phone-later"],
        )
    model_note = gr.Markdown(elem_classes=["phone-later"])
    # Shown only for a model with a chat template (SmolLM2): it rewrites the prompt box. On
    # for the opening question, whose answer then ends by itself ("… is Paris." and the end of
    # the turn): the model reads the question wrapped while the box shows the question.
    chat_on = first_model == OPENING[1] and OPENING_CHAT
    chat = gr.Checkbox(
        chat_on,
        label="chat: wrap the prompt in the model's own chat template",
        visible=chat_on,
        elem_classes=["phone-later"],
    )
    chat_md = gr.Markdown(elem_classes=["phone-later"])
    with gr.Row(elem_classes=["phone-later"]):
        strategy = gr.Radio(["greedy", "sample", "beam"], value=first_strategy, label="Decoding")
        temperature = gr.Slider(
            0, 2, value=1.0, step=0.05, label="Temperature (0 = greedy)", visible=False
        )
        top_k = gr.Slider(0, 100, value=0, step=1, label="Top-k (0 = off)", visible=False)
        top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label="Top-p (1 = off)", visible=False)
        beam = gr.Slider(1, 8, value=3, step=1, label="Beam width", visible=False)
    first = registry.bundled.models.get(first_model)
    layers = first.config.n_decoder_layers if first else 6
    heads = first.config.n_heads if first else 8
    with gr.Row(elem_classes=["phone-later"]):
        max_tokens = gr.Slider(1, 128, value=40, step=1, label="Max new tokens")
        seed = gr.Number(value=0, precision=0, label="Seed")
        # 1-based pickers, fixed where the model has one layer or one head.
        layer, head = (
            gr.Slider(1, most, value=1, step=1, label=label, interactive=count > 1)
            for most, label, count in (
                (limits.MAX_LAYERS, "Layer (attention views)", layers),
                (limits.MAX_HEADS, "Head (self-attention view)", heads),
            )
        )
    with gr.Row(elem_id="generate-steps"):
        step_button = gr.Button("Step", variant="primary")
        back_button = gr.Button("Back")
        run_button = gr.Button("Run to the end")
        reset_button = gr.Button("Reset")
    opened = GenerationState()
    opened.chat = chat_on
    # Freed when the session ends (its page closed: ui/serving/sessions.py).
    state = gr.State(opened, delete_callback=GenerationState.release)
    summary = gr.Markdown(elem_classes=["phone-after-chart"])
    # Side by side where each gets STEP_FIGURE_WIDTH, one below the other where not (the tour's
    # sidebar open at 1280 px): at half of that width the cross-attention's title ran off its
    # edge. Their titles wrap to that width (Large font's ran off it on a projector).
    with gr.Row(elem_id="generate-chart"):
        top_plot = gr.Plot(
            label="Next-token distribution", show_label=False, min_width=STEP_FIGURE_WIDTH
        )
        cross_plot = gr.Plot(
            label="Cross-attention of the new token over the source",
            show_label=False,
            min_width=STEP_FIGURE_WIDTH,
        )
    # Below, at the page's width: beside the two (three in a row at 1920 px) its title and the
    # cross-attention's ran off their figures in Large font.
    triangle_plot = gr.Plot(label="Decoder self-attention, one row per step", show_label=False)
    lens_section = gr.Accordion("Inside the decoder: the logit lens", open=True, elem_id="lens")
    with lens_section, gr.Row(equal_height=False):
        lens_plot = gr.Plot(label="Logit lens of the newest step", show_label=False, scale=3)
        gr.Markdown(
            "**Logit lens.** The vector of the position that chose the newest token, taken "
            "after each layer and read through the final norm (where the model has one) and "
            "the generator, as if that layer were the last. The top row is the model's own "
            "distribution.\n\nThe chosen token is outlined; each row's label gives its rank "
            "there (#1 = most probable), the bars its probability: at which layer does the "
            "answer appear?"
        )
    # Folded: a view of the whole stream's sizes, not of this step's choice; unfolded below the
    # lens it made the page 1,300 px longer (SmolLM2's 61 rows) for a student stepping through.
    with gr.Accordion(
        "Inside the decoder: the residual stream's size at every layer",
        open=False,
        elem_id="residual-stream",
    ) as stream_section:
        gr.Markdown(
            "**Residual stream.** ‖x‖: each position's vector entering the decoder and after "
            "every sub-layer (attn: self-attention, cross: cross-attention, FFN: feed-forward); "
            "‖Δ‖: what each sub-layer added (hover for values). Post-LN models "
            "(the bundled ones, Marian) end every sub-layer in a LayerNorm, so ‖x‖ stays near "
            "one size; in pre-LN models (GPT-2, SmolLM2) x is the running sum of the Δs. Where "
            "a few norms dwarf the rest (from layer 12 on, SmolLM2's first position carries tens "
            "of times the others'), the colours follow the norm's logarithm; the colour bar says so."
        )
        norms_plot = gr.Plot(label="Residual stream norms per position", show_label=False)
    silent = build_silent(registry, source, model_name, session, state)

    # The endpoints read their inputs in the order of INPUT_NAMES (request.read_inputs).
    named = {"source": source, "model": model_name, "strategy": strategy}
    named |= {"temperature": temperature, "top_k": top_k, "top_p": top_p, "beam": beam}
    named |= {"max_tokens": max_tokens, "seed": seed, "layer": layer, "head": head}
    named["large"] = large
    inputs = [*(named[name] for name in INPUT_NAMES), session, state]
    outputs = [summary, top_plot, cross_plot, triangle_plot, lens_plot, norms_plot, state]
    # Every press of Step or Back counts, also one made while the last is still running (a
    # button's default drops it): three quick presses in a lecture are three steps, taken in
    # turn under the session's lock.
    clicks: list[tuple[gr.Button, Any, str, dict[str, Any]]] = [
        (step_button, handlers.step, "generate_step", {"trigger_mode": "multiple"}),
        (back_button, handlers.back, "generate_back", {"trigger_mode": "multiple"}),
        (run_button, handlers.run, "generate", {"concurrency_limit": 4}),
        (reset_button, handlers.reset, "generate_reset", {}),
    ]
    events = []
    for button, handler, api_name, extra in clicks:
        bound = bind(handler, registry)
        # One progress overlay (on the summary), not one per figure: fewer redraws per Step.
        event = button.click(
            bound, inputs, outputs, api_name=api_name, show_progress_on=summary, **extra
        )
        events.append(event)
    # The cache view follows every event that steps, rewinds or restarts the decoding.
    follow = build_cache_view(registry, inputs)
    for event in events:
        follow(event)

    # Folded: the page was 5,900 px long, and a student who came to step through a decoding
    # scrolled past this table to reach what follows. Its events run folded or not.
    with gr.Accordion(
        "Teacher forcing: the model's prediction at every position of a reference",
        open=False,
        elem_id="teacher-forcing",
    ):
        reference = gr.Textbox(
            value=example_reference(first_source, first_model),
            label="Reference (the translation, or the continuation of the prompt)",
        )
        force_button = gr.Button("Compare with the reference")
        force_summary = gr.Markdown()
        force_table = gr.Dataframe(
            headers=["position", "reference", "p(reference)", "model's argmax", "match"],
            max_height=320,
        )
    force_inputs = [source, model_name, reference, session]
    force_outputs = [force_summary, force_table]
    force_button.click(
        bind(handlers.force, registry), force_inputs, force_outputs, api_name="teacher_forcing"
    )
    examples = [[s, m, k, example_reference(s, m)] for s, m, k in EXAMPLES if m in names]
    if OPENING[1] in names:
        examples.insert(0, [*OPENING, ""])
    gr.Examples(
        examples,
        [source, model_name, strategy, reference],
        label="Examples for a lecture (click one: it runs)",
    )

    # Live: every control redraws what depends on it; the buttons stay for the API.
    private: dict[str, Any] = {"api_visibility": "private"}
    live_first = bind(handlers.first_step, registry)
    live_force = bind(handlers.force_view, registry)
    controls = [model_note, layer, head, cross_plot, step_button, back_button, run_button]
    controls += [reset_button, force_button]
    restarted = model_name.change(
        bind(handlers.model_controls, registry), [model_name, session], controls, **private
    ).then(live_first, inputs, outputs, **private)
    restarted.then(live_force, force_inputs, force_outputs, **private)
    follow(restarted)
    # A new model opens with the switch off; the state's flag follows it, so that no request
    # reads its prompt wrapped in a template the page no longer shows as chosen.
    model_name.change(bind(chat_control, registry), [model_name, session], chat, **private)
    model_name.change(lambda s: set_chat(False, s), state, state, **private)
    # The flag first, then the prompt box: the box's change event (which restarts the decoding)
    # finds the state already saying how the prompt is to be read.
    chat.input(set_chat, [chat, state], state, **private).then(
        bind(toggle_chat, registry),
        [chat, source, model_name, session],
        [source, chat_md],
        **private,
    )
    # The token line follows the prompt box while the switch is on: a prompt typed anew is
    # shown as the model reads it (wrapped), never the template of the prompt before it.
    source.change(
        bind(chat_preview, registry),
        [chat, source, model_name, session],
        chat_md,
        trigger_mode="always_last",
        **private,
    )
    strategy.change(
        handlers.strategy_controls, strategy, [temperature, top_k, top_p, beam], **private
    )
    follow(strategy.change(live_first, inputs, outputs, trigger_mode="always_last", **private))
    for control in (temperature, top_k, top_p, beam, max_tokens):
        follow(control.release(live_first, inputs, outputs, trigger_mode="always_last", **private))
    follow(seed.submit(live_first, inputs, outputs, **private))
    follow(source.change(live_first, inputs, outputs, trigger_mode="always_last", **private))
    # A new source brings its own reference (the task's answer, or none): the old one belongs
    # to another sentence and must not be scored against this one.
    source.change(
        bind(reference_for, registry),
        [source, model_name, session],
        reference,
        trigger_mode="always_last",
        **private,
    ).then(live_force, force_inputs, force_outputs, **private)
    reference.input(live_force, force_inputs, force_outputs, trigger_mode="always_last", **private)
    live_redraw = bind(handlers.redraw, registry)
    # Layer and head change only the two attention figures: the other three are not re-sent
    # (a browser spends far longer drawing a figure than the server spends making it).
    attention_outputs = [cross_plot, triangle_plot, state]
    live_attention = bind(handlers.redraw_attention, registry)
    for control in (layer, head):
        control.release(live_attention, inputs, attention_outputs, **private)
    large.change(live_redraw, inputs, outputs, **private)
    # Folded, the steps leave the residual stream out; unfolded, it is drawn and sent with each.
    stream_section.expand(
        bind(handlers.show_stream, registry), inputs, [norms_plot, state], **private
    )
    stream_section.collapse(handlers.fold_stream, state, state, queue=False, **private)
    # The tab opens on its first example's first step.
    demo = gr.context.Context.root_block
    if demo is not None:
        # The sliders were built wide for API callers; the page shows the first model's ranges.
        demo.load(
            bind(handlers.model_controls, registry), [model_name, session], controls, **private
        )
        # Shown where the model has a template; the value the page opened with is kept.
        demo.load(bind(chat_shown, registry), [model_name, session], chat, **private)
        # The page opens with the residual stream folded (an API caller gets it with each step).
        demo.load(handlers.fold_stream, state, state, queue=False, **private)
        demo.load(
            bind(chat_preview, registry), [chat, source, model_name, session], chat_md, **private
        )
        loaded = demo.load(live_first, inputs, outputs, **private)
        loaded.then(live_force, force_inputs, force_outputs, **private)
        follow(loaded)
    # "state" and "step_button" let a link replay the generation to the step it was made at.
    return {
        "source": source,
        "model": model_name,
        "strategy": strategy,
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "beam": beam,
        "max_tokens": max_tokens,
        "seed": seed,
        "layer": layer,
        "head": head,
        "state": state,
        "step_button": step_button,
        **silent,
    }
