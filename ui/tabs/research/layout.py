"""The tab's layout and event wiring: a section per method, each with its explanation, its
controls, its code and its figure."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gradio as gr

from transformer.lab import side_by_side as pair
from transformer.text.display import code_span

from ...serving import limits
from ...serving.state import ModelRegistry, SessionModels, bind, once
from . import handlers, methods, text

# Presets of activation patching: (label, clean, corrupted, answer, wrong).
PRESETS = {
    "Eiffel Tower → Colosseum": (text.CLEAN, text.CORRUPTED, text.ANSWER, text.WRONG),
    "France → Greece": (
        "The capital of France is",
        "The capital of Greece is",
        text.ANSWER,
        " Athens",
    ),
    # Cut the same way by the bundled models' small vocabulary, which cuts the others unevenly.
    "cat → dog": (
        "the cat sat on the mat and the",
        "the dog sat on the mat and the",
        " cat",
        " dog",
    ),
}
SECOND_MODEL = "SmolLM2-135M-Instruct"


def default_model(registry: ModelRegistry) -> str:
    """The menu's first model that continues text (the bundled ``continue``)."""
    for name, checkpoint in registry.bundled.models.items():
        if checkpoint.config.architecture == "decoder-only":
            return name
    return registry.model_names[0]


def preset(label: str) -> tuple[str, str, str, str]:
    """The clean and corrupted prompts, answer and wrong answer of a preset."""
    return PRESETS.get(label, PRESETS[next(iter(PRESETS))])


def fitting_preset(registry: ModelRegistry, name: str) -> str:
    """The first preset whose two prompts this model cuts into as many tokens (patching
    compares them position by position)."""
    try:
        checkpoint = registry.checkpoint(name, None)
    except ValueError:
        return next(iter(PRESETS))
    tokenizer, bos = checkpoint.tokenizer, checkpoint.config.prompt_bos
    for label, (clean, corrupted, *_) in PRESETS.items():
        lengths = {len(tokenizer.encode_ids(p, add_bos=bos)) for p in (clean, corrupted)}
        if len(lengths) == 1:
            return label
    return next(iter(PRESETS))


def encoder_decoder_preset(name: str) -> tuple[str, str, str, str, str]:
    """An encoder-decoder model's (clean source, corrupted source, decoder's input after its
    start token, answer, wrong answer): the bundled model's own, else a plain sentence."""
    return text.ENCODER_DECODER_PRESETS.get(name, text.OTHER_ENCODER_DECODER)


def _sites(encoder_decoder: bool) -> list[tuple[str, str]]:
    return [
        (words.split(" before")[0].split(" (")[0], key)
        for key, words in text.SITES.items()
        if encoder_decoder or key != "cross"
    ]


def fit_inputs(
    registry: ModelRegistry, name: str, session: SessionModels | None, site: Any
) -> tuple[Any, ...]:
    """What the inputs read for this model: a decoder-only model a prompt (the presets); an
    encoder-decoder a source (shown) and its decoder's input so far, patching two sources; an
    encoder-only one a text. Updates of (source, text, preset, clean, corrupted, answer,
    wrong, site)."""
    try:
        architecture = registry.checkpoint(name, session).config.architecture
    except ValueError:
        return tuple(gr.skip() for _ in range(8))
    if architecture == "encoder-decoder":
        clean, corrupted, target, answer, wrong = encoder_decoder_preset(name)
        return (
            gr.Textbox(value=clean, visible=True),
            gr.Textbox(value=target, label=text.TARGET_LABEL),
            gr.Radio(visible=False),
            gr.Textbox(value=clean, label="Clean source"),
            gr.Textbox(value=corrupted, label="Corrupted source (as many tokens)"),
            gr.Textbox(value=answer),
            gr.Textbox(value=wrong),
            gr.Radio(choices=_sites(True), value=site if site in text.SITES else "residual"),
        )
    label = text.ENCODER_LABEL if architecture == "encoder-only" else text.TEXT_LABEL
    shown = text.ENCODER_TEXT if architecture == "encoder-only" else text.TEXT
    chosen = fitting_preset(registry, name)
    clean, corrupted, answer, wrong = PRESETS[chosen]
    return (
        gr.Textbox(visible=False),
        gr.Textbox(value=shown, label=label),
        gr.Radio(value=chosen, visible=True),
        gr.Textbox(value=clean, label="Clean prompt"),
        gr.Textbox(value=corrupted, label="Corrupted prompt"),
        gr.Textbox(value=answer),
        gr.Textbox(value=wrong),
        gr.Radio(choices=_sites(False), value="residual" if site == "cross" else site),
    )


def fit_sliders(
    registry: ModelRegistry, name: str, session: SessionModels | None, layer: Any, head: Any
) -> tuple[Any, Any]:
    """The Layer and Head sliders' ranges for this model, values kept where they still fit."""
    try:
        config = registry.checkpoint(name, session).config
    except ValueError:
        return gr.skip(), gr.skip()
    n_layers = config.n_decoder_layers or config.n_encoder_layers

    def kept(value: Any, high: int) -> int:
        try:
            return min(max(1, int(float(value))), high)
        except (TypeError, ValueError, OverflowError):
            return 1

    return (
        gr.Slider(minimum=1, maximum=max(2, n_layers), value=kept(layer, n_layers)),
        gr.Slider(minimum=1, maximum=max(2, config.n_heads), value=kept(head, config.n_heads)),
    )


# The button that draws each section's figure.
BUTTONS = {
    "patching": "Patch",
    "ablation": "Ablate every head",
    "logit": "Split the logit",
    "input": "Attribute to the input",
    "scores": "Split the scores",
    "side": "Compare",
}


def cleared(sections: dict[str, list[Any]], name: Any) -> tuple[Any, ...]:
    """The updates of ``sections``' outputs (as :func:`build` lists them, section by section)
    once the model ``name`` is chosen: no figure, since the one shown was of the model before,
    and in each section's first text the button that draws it for this model (a sweep takes
    seconds on a large model: it waits for its button)."""
    updates: list[Any] = []
    for slug, components in sections.items():
        noted = False
        for component in components:
            if isinstance(component, gr.Plot):
                updates.append(None)
            elif isinstance(component, gr.Markdown) and not noted:
                updates.append(f"Press **{BUTTONS[slug]}** to draw it for {code_span(str(name))}.")
                noted = True
            else:
                updates.append(gr.skip())
    return tuple(updates)


def explained(registry: ModelRegistry, name: str, session: SessionModels | None) -> Any:
    """*Why a head attends*' explanation for the model ``name`` (unchanged when it cannot be
    read)."""
    try:
        return handlers.scores_explanation(registry.checkpoint(name, session).config)
    except ValueError:
        return gr.skip()


def _code(function: Any) -> gr.Code:
    with gr.Accordion("The code that computes it", open=False):
        return gr.Code(
            methods.source_of(function), language="python", wrap_lines=True, show_label=False
        )


def _results(slug: str) -> list[Any]:
    """A method's results, in the column beside its controls: its figure (its element id
    ``research-{slug}-plot``) and what the figure says."""
    with gr.Column(scale=6, min_width=300):
        return [gr.Plot(show_label=False, elem_id=f"research-{slug}-plot"), gr.Markdown()]


def _method(
    registry: ModelRegistry,
    handler: Callable[..., Any],
    button: gr.Button,
    inputs: list[Any],
    outputs: dict[str, list[Any]],
) -> Callable[..., Any]:
    """Wire ``button`` to a method's endpoint (named after its handler, ``research_<slug>``,
    drawing into ``outputs[slug]``); the bound handler, for the method's private redraws."""
    bound = bind(handler, registry)
    slug = handler.__name__.removeprefix("research_").removesuffix("_by_side")
    button.click(bound, inputs, outputs[slug], api_name=handler.__name__)
    return bound


def build(registry: ModelRegistry, large: gr.Checkbox, session: gr.State) -> dict[str, Any]:
    """Lay out the tab and wire its events (``/research_patching``, ``/research_ablation``,
    ``/research_logit``, ``/research_input``, ``/research_scores``,
    ``/research_side_by_side``). Returns the shareable controls by name."""
    gr.Markdown(text.INTRO)
    first = default_model(registry)
    names = registry.menu(None)
    with gr.Row():
        model = gr.Dropdown(names, value=first, label="Model", scale=2, min_width=250)
        sentence = gr.Textbox(value=text.TEXT, label=text.TEXT_LABEL, lines=1, max_lines=2, scale=5)
    # Shown for an encoder-decoder model only: its encoder's input, held fixed by every method.
    source = gr.Textbox(
        value="",
        label=text.SOURCE_LABEL,
        lines=1,
        max_lines=2,
        visible=False,
        elem_id="research-source",
    )
    plot_args: dict[str, Any] = {"show_label": False}
    outputs: dict[str, list[Any]] = {}
    private: dict[str, Any] = {"api_visibility": "private"}

    # 1. Activation patching
    with gr.Accordion("1 · Activation patching", open=True, elem_id="research-patching"), gr.Row():
        with gr.Column(scale=4, min_width=300):
            gr.Markdown(text.PATCHING)
            # The first preset the first model cuts into equal lengths (its first view's).
            chosen = fitting_preset(registry, first)
            choice = gr.Radio(list(PRESETS), value=chosen, label="Preset")
            first_clean, first_corrupted, first_answer, first_wrong = PRESETS[chosen]
            clean = gr.Textbox(first_clean, label="Clean prompt", lines=1)
            corrupted = gr.Textbox(first_corrupted, label="Corrupted prompt", lines=1)
            with gr.Row():
                answer = gr.Textbox(first_answer, label="Answer", min_width=100)
                wrong = gr.Textbox(first_wrong, label="Wrong answer", min_width=100)
            site = gr.Radio(_sites(False), value="residual", label="Patch")
            patch = gr.Button(BUTTONS["patching"], variant="primary")
            _code(methods.activation_patching)
        outputs["patching"] = _results("patching")
    choice.select(preset, choice, [clean, corrupted, answer, wrong], **private)
    patch_inputs = [model, clean, corrupted, answer, wrong, site, large, session, sentence]
    patching = _method(registry, handlers.research_patching, patch, patch_inputs, outputs)
    site.select(patching, patch_inputs, outputs["patching"], **private)

    # 2. Head ablation
    with gr.Accordion("2 · Head ablation", open=True, elem_id="research-ablation"), gr.Row():
        with gr.Column(scale=4, min_width=300):
            gr.Markdown(text.ABLATION)
            how = gr.Radio(["zero", "mean"], value="zero", label="Ablation")
            ablate = gr.Button(BUTTONS["ablation"], variant="primary")
            _code(methods.head_ablation)
        outputs["ablation"] = _results("ablation")
    ablation_inputs = [model, sentence, how, large, session, source]
    ablation = _method(registry, handlers.research_ablation, ablate, ablation_inputs, outputs)
    how.select(ablation, ablation_inputs, outputs["ablation"], **private)

    # 3. Direct logit attribution
    with (
        gr.Accordion("3 · Direct logit attribution", open=True, elem_id="research-logit"),
        gr.Row(),
    ):
        with gr.Column(scale=4, min_width=300):
            gr.Markdown(text.LOGIT)
            token = gr.Textbox(
                "",
                label="Next token to explain (empty: the model's own prediction)",
                lines=1,
            )
            attribute = gr.Button(BUTTONS["logit"], variant="primary")
            _code(methods.direct_logit_attribution)
        outputs["logit"] = _results("logit")
    logit_inputs = [model, sentence, token, large, session, source]
    logit = _method(registry, handlers.research_logit, attribute, logit_inputs, outputs)

    # 4. Input attribution
    with gr.Accordion("4 · Input attribution", open=True, elem_id="research-input"), gr.Row():
        with gr.Column(scale=4, min_width=300):
            gr.Markdown(text.INPUT)
            method = gr.Radio(
                ["gradient x input", "integrated gradients"],
                value="integrated gradients",
                label="Method",
            )
            explain = gr.Button(BUTTONS["input"], variant="primary")
            _code(methods.input_attribution)
        outputs["input"] = _results("input")
    input_inputs = [model, sentence, token, method, large, session, source]
    attribution = _method(registry, handlers.research_input, explain, input_inputs, outputs)
    method.select(attribution, input_inputs, outputs["input"], **private)

    # 5. Why a head attends
    with gr.Accordion("5 · Why a head attends", open=True, elem_id="research-scores"), gr.Row():
        with gr.Column(scale=4, min_width=300):
            scores_text = gr.Markdown(text.SCORES_2017)
            with gr.Row():
                layer = gr.Slider(1, limits.MAX_LAYERS, value=1, step=1, label="Layer")
                head = gr.Slider(1, limits.MAX_HEADS, value=1, step=1, label="Head")
            split = gr.Button(BUTTONS["scores"], variant="primary")
            _code(methods.attention_score_parts)
        outputs["scores"] = [*_results("scores"), scores_text]
    scores_inputs = [model, sentence, layer, head, large, session, source]
    scores = _method(registry, handlers.research_scores, split, scores_inputs, outputs)
    for slider in (layer, head):
        slider.release(scores, scores_inputs, outputs["scores"], **private)

    # 6. Two models side by side
    with gr.Accordion("6 · Two models side by side", open=True, elem_id="research-side"), gr.Row():
        with gr.Column(scale=4, min_width=300):
            gr.Markdown(text.SIDE)
            second = SECOND_MODEL if SECOND_MODEL in names else first
            other = gr.Dropdown(names, value=second, label="Second model", min_width=250)
            with gr.Row():
                layer_a = gr.Slider(1, limits.MAX_LAYERS, value=1, step=1, label="Layer")
                head_a = gr.Slider(1, limits.MAX_HEADS, value=1, step=1, label="Head")
            with gr.Row():
                layer_b = gr.Slider(
                    1, limits.MAX_LAYERS, value=1, step=1, label="Second model's layer"
                )
                head_b = gr.Slider(
                    1, limits.MAX_HEADS, value=1, step=1, label="Second model's head"
                )
            compare = gr.Button(BUTTONS["side"], variant="primary")
            _code(pair.align)
        with gr.Column(scale=6, min_width=300):
            side_attention = gr.Plot(**plot_args, elem_id="research-side-attention")
            side_losses = gr.Plot(**plot_args, elem_id="research-side-losses")
            side_tops = gr.Plot(**plot_args, elem_id="research-side-tops")
            side_summary = gr.Markdown()
    outputs["side"] = [side_attention, side_losses, side_tops, side_summary]
    side_inputs = [model, other, sentence, layer_a, head_a, layer_b, head_b, large, session]
    _method(registry, handlers.research_side_by_side, compare, side_inputs, outputs)

    # Inputs and ranges follow the models; the figures of the model before go.
    model.select(
        functools.partial(cleared, outputs),
        [model],
        [item for key in outputs for item in outputs[key]],
        **private,
    )
    side = {"side": outputs["side"]}
    other.select(functools.partial(cleared, side), [other], outputs["side"], **private)
    # Why a head attends explains the scores of the model chosen, drawn or not.
    model.select(bind(explained, registry), [model, session], [scores_text], **private)
    model.select(
        bind(fit_inputs, registry),
        [model, session, site],
        [source, sentence, choice, clean, corrupted, answer, wrong, site],
        **private,
    )
    model.select(
        bind(fit_sliders, registry), [model, session, layer, head], [layer, head], **private
    )
    model.select(
        bind(fit_sliders, registry), [model, session, layer_a, head_a], [layer_a, head_a], **private
    )
    other.select(
        bind(fit_sliders, registry), [other, session, layer_b, head_b], [layer_b, head_b], **private
    )
    # The text redraws the cheap single-pass views (the sweeps wait for their buttons).
    for box in (sentence, source):
        box.submit(logit, logit_inputs, outputs["logit"], **private)
        box.submit(scores, scores_inputs, outputs["scores"], **private)

    demo = gr.context.Context.root_block
    if demo is not None:
        all_outputs = [item for key in outputs for item in outputs[key]]
        views = once(functools.partial(first_views, registry, first, second))
        demo.load(
            lambda: views() or tuple(gr.skip() for _ in all_outputs),
            None,
            all_outputs,
            **private,
        )
        for pair_of in ((layer, head), (layer_a, head_a)):
            demo.load(
                bind(fit_sliders, registry, first, None),
                list(pair_of),
                list(pair_of),
                **private,
            )
        demo.load(
            bind(fit_sliders, registry, second, None),
            [layer_b, head_b],
            [layer_b, head_b],
            **private,
        )
    return {"model": model, "text": sentence}


def first_views(registry: ModelRegistry, first: str, second: str) -> tuple[Any, ...] | None:
    """Every section's first example on the first model (a bundled one: milliseconds); the
    comparison with ``second`` only where that model is loaded already, else left for its
    button. None when the first model is unavailable."""
    session = SessionModels()
    try:
        views: list[Any] = []
        views += handlers.research_patching(
            registry, first, *PRESETS[fitting_preset(registry, first)], "residual", False, session
        )
        views += handlers.research_ablation(registry, first, text.TEXT, "zero", False, session)
        views += handlers.research_logit(registry, first, text.TEXT, "", False, session)
        views += handlers.research_input(
            registry, first, text.TEXT, "", "integrated gradients", False, session
        )
        views += handlers.research_scores(registry, first, text.TEXT, 1, 1, False, session)
    except gr.Error:
        return None
    if second in registry.pretrained or second in registry.bundled.models:
        try:
            views += handlers.research_side_by_side(
                registry, first, second, text.TEXT, 1, 1, 1, 1, False, session
            )
            return tuple(views)
        except gr.Error:
            pass
    views += [gr.skip(), gr.skip(), gr.skip(), "Press **Compare** to read the text with both."]
    return tuple(views)
