"""Generate tab: autoregressive decoding one step at a time (greedy, sampling or beam search),
with the probabilities behind each choice, the attention of the new token, and teacher forcing
against a reference."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gradio as gr
import torch

from transformer import figures
from transformer.analysis import start_decoding
from transformer.generation import MAX_NEW_TOKENS, DecodingSettings, teacher_force

from .. import limits
from ..errors import friendly, gpu
from ..inputs import as_float, as_int
from ..state import GenerationState, ModelRegistry, SessionModels, bind

TOP_K_SHOWN = 10  # bars in the next-token chart

Drawn = tuple[str, Any, Any, Any, GenerationState]


def decoding_settings(
    strategy: str, temperature: Any, top_k: Any, top_p: Any, beam: Any, max_tokens: Any, seed: Any
) -> DecodingSettings:
    """The UI's decoding controls as validated ``DecodingSettings`` (top-k 0 and top-p 1 = off)."""
    top_p_value = as_float(top_p if top_p is not None else 1.0, "top-p", 0.0, 1.0)
    return DecodingSettings(
        strategy=strategy,
        temperature=as_float(temperature, "temperature", 0.0, 100.0),
        top_k=as_int(top_k, "top-k", 0, 1000) or None,
        top_p=None if top_p_value >= 1.0 else top_p_value,
        beam_width=as_int(beam, "beam width", 1, 16),
        max_new_tokens=as_int(max_tokens, "max tokens", 1, MAX_NEW_TOKENS),
        seed=as_int(seed, "seed", 0, 2**31 - 1),
        capture_attention=True,
        top_k_shown=TOP_K_SHOWN,
    )


def start(registry: ModelRegistry, session: SessionModels, key: tuple) -> GenerationState:
    """A new decoding from ``key`` = (source, model name, *decoding controls)."""
    source, name, *settings = key
    checkpoint = registry.checkpoint(name, session)
    decoding, pieces = start_decoding(
        checkpoint.model, checkpoint.tokenizer, source, decoding_settings(*settings)
    )
    return GenerationState(key=key, decoding=decoding, source_pieces=pieces)


def current(
    registry: ModelRegistry, state: GenerationState | None, session: SessionModels, key: tuple
) -> GenerationState:
    """The session's decoding, or a new one if there is none or any input changed."""
    if state is None or state.decoding is None or state.key != key:
        return start(registry, session, key)
    return state


def draw(
    registry: ModelRegistry,
    state: GenerationState,
    layer: Any,
    head: Any,
    large: bool,
    session: SessionModels,
) -> Drawn:
    """(summary, next-token chart, cross-attention of the new token, self-attention triangle,
    state) for the decoding so far."""
    decoding = state.decoding
    checkpoint = registry.checkpoint(state.key[1], session)
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    records = decoding.records if decoding else []
    empty = figures.top_k_figure(
        [1.0], ["(press Step)"], k=1, title="Next-token probabilities", large_font=large
    )
    if not records:
        return "_Press **Step** or **Run to the end**._", empty, empty, empty, state
    last = records[-1]
    layer_i = min(as_int(layer, "layer", 1, 64) - 1, config.n_decoder_layers - 1)
    head_i = min(as_int(head, "head", 1, 64) - 1, config.n_heads - 1)
    probabilities = torch.zeros(tokenizer.vocab_size)
    probabilities[last.top_ids] = torch.tensor(last.top_probs)
    vocab = [tokenizer.id_to_token(i) or "?" for i in range(tokenizer.vocab_size)]
    top = figures.top_k_figure(
        probabilities,
        vocab,
        k=TOP_K_SHOWN,
        chosen=last.chosen_id,
        title=f"Step {last.step + 1}: next-token probabilities ({last.method})",
        large_font=large,
    )
    if last.cross_attention is not None:
        cross = figures.cross_attention_step_figure(
            last.cross_attention[layer_i],
            figures.token_labels(state.source_pieces),
            query_label=f"{len(last.tokens) - 1}:{last.chosen_label}",
            layer=layer_i + 1,
            large_font=large,
            height=360 if large else 300,
        )
    else:
        cross = figures.top_k_figure(
            [1.0],
            ["a decoder-only model has no cross-attention"],
            k=1,
            title="Cross-attention",
            large_font=large,
        )
    rows = [
        record.self_attention[layer_i, head_i]
        for record in records
        if record.self_attention is not None
    ]
    labels = figures.token_labels([tokenizer.id_to_token(i) or "?" for i in last.tokens])
    triangle = figures.causal_growth_figure(
        rows,
        labels[: len(rows[-1])] if rows else None,
        head=head_i + 1,
        layer=layer_i + 1,
        large_font=large,
    )
    output = tokenizer.decode(decoding.output_ids)
    lines = [
        f"**Output so far** ({len(records)} steps): `{output}`",
        "Pieces: " + " ".join(f"`{tokenizer.id_to_token(i)}`" for i in decoding.output_ids),
        f"Chosen at step {last.step + 1}: `{last.chosen_label}` with probability {last.chosen_prob:.3f} "
        f"({last.method}); entropy of the distribution {last.entropy:.2f} nats.",
    ]
    if last.beams:
        lines.append(
            "Beams: "
            + "; ".join(
                f"`{tokenizer.decode(b.tokens)}` (log-prob {b.score:.2f})" for b in last.beams[:4]
            )
        )
    if decoding.done:
        lines.append(f"**Finished** ({decoding.stop_reason}).")
    return "\n\n".join(lines), top, cross, triangle, state


# The generation endpoints share one signature: source, model name, the seven decoding controls
# (strategy, temperature, top-k, top-p, beam width, max tokens, seed), then layer, head, large
# font, the session's models and its generation state.


def _split(rest: tuple) -> tuple[tuple, Any, Any, bool, SessionModels, GenerationState]:
    *settings, layer, head, large, session, state = rest
    return tuple(settings), layer, head, large, session, state


@friendly
@gpu
def step(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Drawn:
    """The ``/generate_step`` endpoint: one more token."""
    settings, layer, head, large, session, state = _split(rest)
    state = current(registry, state, session, (source, name, *settings))
    if state.decoding.done:
        gr.Warning("Generation has finished: press Back or Reset.")
    else:
        state.decoding.step()
    return draw(registry, state, layer, head, large, session)


@friendly
def back(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Drawn:
    """The ``/generate_back`` endpoint: undo the last step."""
    settings, layer, head, large, session, state = _split(rest)
    state = current(registry, state, session, (source, name, *settings))
    if state.decoding.records:
        state.decoding.back()
    return draw(registry, state, layer, head, large, session)


@friendly
def reset(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Drawn:
    """The ``/generate_reset`` endpoint: start again from the source."""
    settings, layer, head, large, session, _ = _split(rest)
    state = start(registry, session, (source, name, *settings))
    return draw(registry, state, layer, head, large, session)


@friendly
@gpu
def run(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Iterator[Drawn]:
    """The ``/generate`` endpoint: step to the end, one update per step, pausing at the time
    limit of a run (``limits.GENERATION_TIME_LIMIT_S``)."""
    settings, layer, head, large, session, state = _split(rest)
    state = current(registry, state, session, (source, name, *settings))
    if state.decoding.done:
        yield draw(registry, state, layer, head, large, session)
        return
    # Bounded by max tokens and by the time limit. A client that disconnects or cancels makes
    # gradio close this generator at its next yield: nothing runs on.
    limit = limits.GENERATION_TIME_LIMIT_S
    deadline = time.monotonic() + limit
    for _ in state.decoding.run():
        drawn = draw(registry, state, layer, head, large, session)
        if time.monotonic() > deadline and not state.decoding.done:
            note = (
                f"\n\n**Paused** at the time limit of {limit:g} s per run: "
                "press Run to the end again to go on."
            )
            yield (drawn[0] + note, *drawn[1:])
            return
        yield drawn


@friendly
def force(
    registry: ModelRegistry, source: str, name: str, reference_text: str, session: SessionModels
) -> tuple[str, list[list[Any]]]:
    """The ``/teacher_forcing`` endpoint: the model's prediction at every position of a
    reference translation, as (summary, table)."""
    checkpoint = registry.checkpoint(name, session)
    tokenizer, model = checkpoint.tokenizer, checkpoint.model
    if not (source or "").strip() or not (reference_text or "").strip():
        raise ValueError("enter both a source and a reference")
    if model.config.architecture == "decoder-only":
        raise ValueError(
            "teacher forcing here compares a translation with a reference: pick an encoder-decoder model"
        )
    result = teacher_force(
        model,
        tokenizer.encode_ids(source),
        tokenizer.encode_ids(reference_text, add_eos=True),
        bos_id=tokenizer.bos_id,
        decode_token=lambda i: tokenizer.id_to_token(i) or "?",
    )

    def piece(i: int) -> str:
        return tokenizer.id_to_token(i) or "?"

    rows = [
        [
            p.position + 1,
            piece(p.reference_id),
            round(p.reference_prob, 4),
            piece(p.predicted_id),
            "✓" if p.matches else "✗",
        ]
        for p in result.positions
    ]
    text = (
        f"The model's argmax matches the reference at **{result.accuracy:.0%}** of positions; "
        f"mean log-probability {result.mean_log_prob:.3f}."
    )
    return text, rows


def build(registry: ModelRegistry, large: gr.Checkbox, session: gr.State) -> None:
    """Lay out the tab and wire its events (``/generate_step``, ``/generate_back``,
    ``/generate``, ``/generate_reset``, ``/teacher_forcing``)."""
    gr.Markdown(
        "The decoder writes one token at a time: it scores every token of the vocabulary, picks one "
        "(greedy, sampling or beam search), appends it and goes again. Step through it."
    )
    with gr.Row():
        source = gr.Textbox(
            value="the small cat sees a red ball",
            label="Source sentence (or prompt for 'continue')",
        )
        names = registry.model_names
        model_name = gr.Dropdown(names, value=names[0], label="Model")
    with gr.Row():
        strategy = gr.Radio(["greedy", "sample", "beam"], value="greedy", label="Decoding")
        temperature = gr.Slider(0, 2, value=1.0, step=0.05, label="Temperature (0 = greedy)")
        top_k = gr.Slider(0, 100, value=0, step=1, label="Top-k (0 = off)")
        top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label="Top-p (1 = off)")
    with gr.Row():
        beam = gr.Slider(1, 8, value=3, step=1, label="Beam width")
        max_tokens = gr.Slider(1, 128, value=40, step=1, label="Max new tokens")
        seed = gr.Number(value=0, precision=0, label="Seed")
        layer = gr.Slider(1, 6, value=1, step=1, label="Layer (attention views)")
        head = gr.Slider(1, 8, value=1, step=1, label="Head (self-attention view)")
    with gr.Row():
        step_button = gr.Button("Step", variant="primary")
        back_button = gr.Button("Back")
        run_button = gr.Button("Run to the end")
        reset_button = gr.Button("Reset")
    state = gr.State(GenerationState())
    summary = gr.Markdown()
    with gr.Row():
        top_plot = gr.Plot(label="Next-token distribution")
        cross_plot = gr.Plot(label="Cross-attention of the new token over the source")
    triangle_plot = gr.Plot(label="Decoder self-attention, one row per step")

    settings = [strategy, temperature, top_k, top_p, beam, max_tokens, seed]
    inputs = [source, model_name, *settings, layer, head, large, session, state]
    outputs = [summary, top_plot, cross_plot, triangle_plot, state]
    for button, handler, api_name, extra in [
        (step_button, step, "generate_step", {}),
        (back_button, back, "generate_back", {}),
        (run_button, run, "generate", {"concurrency_limit": 4}),
        (reset_button, reset, "generate_reset", {}),
    ]:
        bound = bind(handler, registry)
        button.click(bound, inputs, outputs, api_name=api_name, **extra)
    gr.Examples(
        [
            ["the small cat sees a red ball", "translate", "greedy"],
            ["k d a m z q b", "reverse", "greedy"],
            ["the teacher sees", "continue", "sample"],
            ["a big dog never eats the old cake", "translate", "beam"],
        ],
        [source, model_name, strategy],
        label="Examples for a lecture",
    )

    gr.Markdown("### Teacher forcing: the model's prediction at every position of a reference")
    reference = gr.Textbox(
        value="le minou petol voitte une ballette rougin", label="Reference target"
    )
    force_button = gr.Button("Compare with the reference")
    force_summary = gr.Markdown()
    force_table = gr.Dataframe(
        headers=["position", "reference", "p(reference)", "model's argmax", "match"], max_height=320
    )
    force_button.click(
        bind(force, registry),
        [source, model_name, reference, session],
        [force_summary, force_table],
        api_name="teacher_forcing",
    )
