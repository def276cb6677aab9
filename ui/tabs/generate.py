"""Generate tab: autoregressive decoding one step at a time (greedy, sampling or beam search),
with the probabilities behind each choice, the attention of the new token, and teacher forcing
against a reference.

Works for every model with a decoder: the bundled ones, and pretrained models of the GPT-2
family (which continue a prompt) and the Marian family (which translate, decoding from the
model's own start token and stopping at its end token). An encoder-only model (BERT, MiniLM)
cannot generate: the tab says so and disables its buttons.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from transformer import figures
from transformer.analysis import prompt_ids
from transformer.checkpoint import Checkpoint
from transformer.figures.generation import next_token_figure
from transformer.generation import (
    MAX_NEW_TOKENS,
    DecodingSession,
    DecodingSettings,
    StepRecord,
    teacher_force,
)
from transformer.training.tasks import reference_target

from .. import limits
from ..errors import friendly, gpu
from ..inputs import as_float, as_int
from ..state import GenerationState, ModelRegistry, SessionModels, bind

TOP_K_SHOWN = 10  # bars in the next-token chart
RESTARTED = "settings changed — restarted"

Drawn = tuple[str, Any, Any, Any, GenerationState]

# (source, model, strategy); the teacher-forcing reference is each task's own answer.
EXAMPLES = [
    ("the small cat sees a red ball", "translate", "greedy"),
    ("k d a m t q b", "reverse", "greedy"),
    ("the teacher sees", "continue", "sample"),
    ("a big dog never eats the old cake", "translate", "beam"),
]


def example_reference(source: str, task: str) -> str:
    """The task's correct answer for an example (empty when the task has none, e.g. continue)."""
    return reference_target(task, source) or ""


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


def cannot_generate(name: str, checkpoint: Checkpoint) -> str | None:
    """Why ``checkpoint`` cannot generate (an encoder-only model), or None if it can."""
    config = checkpoint.config
    if config.has_decoder:
        return None
    family = checkpoint.info.get("family")
    kind = "a BERT-family" if family == "bert" else f"an {config.architecture}"
    return (
        f"**{name}** is {kind} model: it reads a whole text at once and has no decoder, so it "
        "cannot write text token by token. Pick a model with a decoder (translate, reverse, "
        "continue, or a GPT-2 or Marian model given with `--model`) to generate."
    )


def start_ids(checkpoint: Checkpoint, text: str) -> tuple[list[int], int | None, int | None]:
    """(source or prompt ids, the decoder's first id, the end id) for a decoding from ``text``.

    The model's own configuration decides where decoding starts and ends when it says
    (Marian: ``decoder_start_id``, ``eos_id``), else the tokenizer's [BOS]/[EOS]. A Marian
    source ends with its end token, as Marian's tokenizer writes it; a decoder-only prompt
    starts with [BOS] when the tokenizer has one (GPT-2: ``<|endoftext|>``).
    """
    model, tokenizer, config = checkpoint.model, checkpoint.tokenizer, checkpoint.config
    if config.architecture == "decoder-only" and tokenizer.bos_id is None:
        if not (text or "").strip():
            raise ValueError("enter a prompt first")
        ids = tokenizer.encode_ids(text)
    else:
        ids = prompt_ids(model, tokenizer, text)
    bos = config.decoder_start_id if config.decoder_start_id is not None else tokenizer.bos_id
    eos = config.eos_id if config.eos_id is not None else tokenizer.eos_id
    if checkpoint.info.get("family") == "marian" and eos is not None and ids[-1:] != [eos]:
        ids.append(eos)
    if not ids:
        raise ValueError("the text gives no tokens: enter a source sentence (or a prompt)")
    return ids, bos, eos


def unreadable(checkpoint: Checkpoint, text: str) -> list[str]:
    """The characters of ``text`` that the model's tokenizer maps to its unknown token."""
    tokenizer = checkpoint.tokenizer
    unk = tokenizer.unk_id
    if unk is None or not (text or "").strip():
        return []
    chars: list[str] = []
    for record in tokenizer.encode(text, add_special_tokens=False):
        if record.id == unk:
            chars += [c for c in text[record.start : record.end] if not c.isspace()]
    return list(dict.fromkeys(chars))


def unreadable_note(checkpoint: Checkpoint, text: str) -> str:
    """A sentence naming the characters the model cannot read, or ``""``."""
    chars = unreadable(checkpoint, text)
    if not chars:
        return ""
    listed = ", ".join(f"“{c}”" for c in chars)
    one = len(chars) == 1
    return (
        f"⚠️ The model cannot read {listed}: {'it is' if one else 'they are'} not in its "
        f"vocabulary, so {'it becomes' if one else 'they become'} "
        f"`{checkpoint.tokenizer.id_to_token(checkpoint.tokenizer.unk_id)}`."
    )


def _restart(
    registry: ModelRegistry, state: GenerationState, session: SessionModels, key: tuple
) -> None:
    """Start ``state`` afresh from ``key`` = (source, model name, *decoding controls), in place
    (the session keeps one state object, and with it its lock)."""
    source, name, *settings = key
    checkpoint = registry.checkpoint(name, session)
    reason = cannot_generate(name, checkpoint)
    if reason is not None:
        raise ValueError(reason.replace("**", "'").replace("`", ""))
    ids, bos, eos = start_ids(checkpoint, source)
    tokenizer = checkpoint.tokenizer
    state.decoding = DecodingSession(
        checkpoint.model,
        ids,
        decoding_settings(*settings),
        bos_id=bos if bos is not None else 0,
        eos_id=eos,
        decode_token=lambda i: tokenizer.id_to_token(i) or "?",
    )
    state.key = key
    state.source_pieces = [tokenizer.id_to_token(i) or "?" for i in ids]


def start(registry: ModelRegistry, session: SessionModels, key: tuple) -> GenerationState:
    """A new decoding from ``key`` = (source, model name, *decoding controls)."""
    state = GenerationState()
    _restart(registry, state, session, key)
    return state


def current(
    registry: ModelRegistry, state: GenerationState | None, session: SessionModels, key: tuple
) -> tuple[GenerationState, str]:
    """The session's decoding, restarted if there is none, any input changed, or the model
    behind its name is another one now (a retrained "trained here"); with a note saying why
    when a decoding in progress was restarted (``""`` otherwise). Call with the state's lock."""
    state = state if state is not None else GenerationState()
    checkpoint = registry.checkpoint(key[1], session)
    decoding = state.decoding
    if decoding is not None and state.key == key and decoding.model is checkpoint.model:
        return state, ""
    note = ""
    if decoding is not None and decoding.records:
        if state.key != key and state.key[:2] == key[:2]:
            note = RESTARTED
        elif state.key != key:
            note = "input changed — restarted"
        else:
            note = "the model was retrained — restarted"
    _restart(registry, state, session, key)
    return state, note


def _chart(record: StepRecord, tokenizer: Any, large: bool) -> Any:
    """The next-token chart of one step: the model's top tokens (and the chosen one wherever it
    ranks), with the sampled-from distribution beside the model's own when sampling."""
    ids, model_probs = list(record.top_ids), list(record.top_probs)
    sampled = list(record.sampling_probs) if record.sampling_probs is not None else None

    def label(i: int) -> str:
        return f"{tokenizer.id_to_token(i) or '?'} #{i}"

    labels = [label(i) for i in ids]
    if record.chosen_id not in ids:
        ids.append(record.chosen_id)
        labels.append(f"{label(record.chosen_id)} (rank {record.chosen_rank})")
        model_probs.append(record.chosen_prob)
        if sampled is not None:
            sampled.append(record.chosen_sampling_prob or 0.0)
    chosen = ids.index(record.chosen_id)
    return next_token_figure(
        labels,
        model_probs,
        sampled,
        chosen=chosen,
        title=f"Step {record.step + 1}: next token ({record.method}) · chosen {labels[chosen]}",
        large_font=large,
    )


def placeholders(large: bool, text: str = "press Step to generate the first token") -> tuple:
    """(next-token, cross-attention, self-attention) placeholders before the first step."""
    return (
        figures.placeholder_figure("Next-token probabilities", text, large_font=large),
        figures.placeholder_figure("Cross-attention of the new token", text, large_font=large),
        figures.placeholder_figure("Decoder self-attention, step by step", text, large_font=large),
    )


def draw(
    registry: ModelRegistry,
    state: GenerationState,
    layer: Any,
    head: Any,
    large: bool,
    session: SessionModels,
    note: str = "",
) -> Drawn:
    """(summary, next-token chart, cross-attention of the new token, self-attention triangle,
    state) for the decoding so far; ``note`` (e.g. "settings changed — restarted") leads."""
    decoding = state.decoding
    checkpoint = registry.checkpoint(state.key[1], session)
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    records = decoding.records if decoding else []
    lead = [f"**{note[0].upper()}{note[1:]}.**"] if note else []
    warning = unreadable_note(checkpoint, state.key[0])
    if warning:
        lead.append(warning)
    if not records:
        text = "\n\n".join([*lead, "_Press **Step** or **Run to the end**._"])
        return (text, *placeholders(large), state)
    last = records[-1]
    # The sliders follow the model; an API caller's larger value shows the last layer/head.
    layer_i = min(as_int(layer, "layer", 1, 1000) - 1, config.n_decoder_layers - 1)
    head_i = min(as_int(head, "head", 1, 1000) - 1, config.n_heads - 1)
    top = _chart(last, tokenizer, large)
    labels = figures.token_labels([tokenizer.id_to_token(i) or "?" for i in last.tokens])
    # The new query is the last token read: named as in the self-attention rows.
    query = labels[len(last.tokens) - 1]
    if last.cross_attention is not None:
        cross = figures.cross_attention_step_figure(
            last.cross_attention[layer_i],
            figures.token_labels(state.source_pieces),
            query_label=query,
            layer=layer_i + 1,
            large_font=large,
            height=360 if large else 300,
        )
    else:
        cross = figures.placeholder_figure(
            "Cross-attention",
            "a decoder-only model has no cross-attention",
            large_font=large,
        )
    rows = [
        record.self_attention[layer_i, head_i]
        for record in records
        if record.self_attention is not None
    ]
    triangle = figures.causal_growth_figure(
        rows,
        labels[: len(rows[-1])] if rows else None,
        head=head_i + 1,
        layer=layer_i + 1,
        large_font=large,
    )
    output = tokenizer.decode(decoding.output_ids)
    n = len(records)
    lines = [
        *lead,
        f"**Output so far** ({n} step{'s' if n != 1 else ''}): `{output}`",
        "Pieces: " + " ".join(f"`{tokenizer.id_to_token(i)}`" for i in decoding.output_ids),
        f"Chosen at step {last.step + 1} from position `{query}`: `{last.chosen_label}`, "
        f"probability {last.chosen_prob:.3f} under the model"
        + (
            f", {last.chosen_sampling_prob:.3f} in the distribution sampled from"
            if last.chosen_sampling_prob is not None
            else ""
        )
        + f" ({last.method}); entropy of the model's distribution {last.entropy:.2f} nats.",
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
    return tuple(settings), layer, head, large, session, state or GenerationState()


@friendly
@gpu
def step(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Drawn:
    """The ``/generate_step`` endpoint: one more token."""
    settings, layer, head, large, session, state = _split(rest)
    with state.lock:
        state, note = current(registry, state, session, (source, name, *settings))
        if state.decoding.done:
            gr.Warning("Generation has finished: press Back or Reset.")
        else:
            state.decoding.step()
        return draw(registry, state, layer, head, large, session, note)


@friendly
@gpu
def back(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Drawn:
    """The ``/generate_back`` endpoint: undo the last step."""
    settings, layer, head, large, session, state = _split(rest)
    with state.lock:
        state, note = current(registry, state, session, (source, name, *settings))
        if state.decoding.records:
            state.decoding.back()
        return draw(registry, state, layer, head, large, session, note)


@friendly
@gpu
def reset(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Drawn:
    """The ``/generate_reset`` endpoint: start again from the source."""
    settings, layer, head, large, session, state = _split(rest)
    with state.lock:
        _restart(registry, state, session, (source, name, *settings))
        return draw(registry, state, layer, head, large, session)


@friendly
@gpu
def run(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Iterator[Drawn]:
    """The ``/generate`` endpoint: step to the end, one update per step, pausing at the time
    limit of a run (``limits.GENERATION_TIME_LIMIT_S``).

    Each step holds the session's lock, so a Step pressed meanwhile takes its turn between two
    of these steps and never runs inside one; a restart meanwhile ends this run."""
    settings, layer, head, large, session, state = _split(rest)
    with state.lock:
        state, note = current(registry, state, session, (source, name, *settings))
        decoding = state.decoding
        if decoding.done:
            drawn = draw(registry, state, layer, head, large, session, note)
    if decoding.done:
        yield drawn
        return
    # Bounded by max tokens and by the time limit. A client that disconnects or cancels makes
    # gradio close this generator at its next yield: nothing runs on.
    limit = limits.GENERATION_TIME_LIMIT_S
    deadline = time.monotonic() + limit
    while True:
        with state.lock:
            if state.decoding is not decoding or decoding.done:
                return
            decoding.step()
            drawn = draw(registry, state, layer, head, large, session, note)
        note = ""
        if time.monotonic() > deadline and not decoding.done:
            pause = (
                f"\n\n**Paused** at the time limit of {limit:g} s per run: "
                "press Run to the end again to go on."
            )
            yield (drawn[0] + pause, *drawn[1:])
            return
        yield drawn


def _forcing_ids(checkpoint: Checkpoint, source: str, reference_text: str) -> tuple:
    """(source or prompt ids, reference ids, first decoder id) for teacher forcing."""
    tokenizer = checkpoint.tokenizer
    ids, bos, eos = start_ids(checkpoint, source)
    reference = tokenizer.encode_ids(reference_text)
    if eos is not None:
        reference.append(eos)
    if not reference:
        raise ValueError("the reference gives no tokens: enter a reference")
    return ids, reference, bos


@friendly
@gpu
def force(
    registry: ModelRegistry, source: str, name: str, reference_text: str, session: SessionModels
) -> tuple[str, list[list[Any]]]:
    """The ``/teacher_forcing`` endpoint: the model's prediction at every position of a
    reference (a translation, or the continuation of a prompt), as (summary, table)."""
    checkpoint = registry.checkpoint(name, session)
    tokenizer, model = checkpoint.tokenizer, checkpoint.model
    if not (source or "").strip() or not (reference_text or "").strip():
        raise ValueError("enter both a source (or prompt) and a reference")
    reason = cannot_generate(name, checkpoint)
    if reason is not None:
        raise ValueError(reason.replace("**", "'").replace("`", ""))
    source_ids, reference, bos = _forcing_ids(checkpoint, source, reference_text)
    result = teacher_force(
        model,
        source_ids,
        reference,
        bos_id=bos if bos is not None else 0,
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
    what = "translation" if model.config.has_encoder else "continuation"
    text = (
        f"Fed the reference {what} one position at a time, the model's most probable next "
        f"token matches it at **{result.accuracy:.0%}** of positions; mean log-probability of "
        f"the reference {result.mean_log_prob:.3f} nats."
    )
    notes = [
        n
        for n in (unreadable_note(checkpoint, source), unreadable_note(checkpoint, reference_text))
        if n
    ]
    return "\n\n".join([*dict.fromkeys(notes), text]), rows


def force_view(
    registry: ModelRegistry, source: str, name: str, reference_text: str, session: SessionModels
) -> tuple[str, list[list[Any]]]:
    """Teacher forcing for the live view: a note instead of an error when there is nothing to
    compare (no reference, or a model that cannot generate)."""
    if not (reference_text or "").strip():
        return "_Enter a reference to compare the model's predictions with._", []
    try:
        checkpoint = registry.checkpoint(name, session)
    except ValueError as error:
        return f"_{error}_", []
    if cannot_generate(name, checkpoint) is not None:
        return "_This model cannot be teacher-forced: it has no decoder._", []
    return force(registry, source, name, reference_text, session)


def model_controls(registry: ModelRegistry, name: str, session: SessionModels) -> tuple:
    """Updates for the controls that follow the model: (note, layer slider, head slider,
    cross-attention plot, the four decoding buttons, the teacher-forcing button). Sliders span
    the model's layers and heads; an encoder-only model disables the buttons and says why."""
    try:
        checkpoint = registry.checkpoint(name, session)
    except ValueError as error:
        off = gr.update(interactive=False)
        return (f"_{error}_", gr.update(), gr.update(), gr.update(), *[off] * 5)
    config = checkpoint.config
    reason = cannot_generate(name, checkpoint)
    can = reason is None
    layers = config.n_decoder_layers
    family = checkpoint.info.get("family")
    kind = {"gpt2": "GPT-2 family: continues the prompt", "marian": "Marian family: translates"}
    note = reason or (f"_{name}: {kind[family]}._" if family in kind else "")
    buttons = [gr.update(interactive=can) for _ in range(5)]
    return (
        note,
        _range(layers if can else 0),
        _range(config.n_heads if can else 0),
        gr.update(visible=config.has_encoder or not can),
        *buttons,
    )


def _range(n: int) -> Any:
    """A 1..n slider update (gradio needs minimum < maximum: a lone layer or head shows a
    fixed slider at 1)."""
    return gr.update(minimum=1, maximum=max(n, 2), value=1, interactive=n > 1)


def strategy_controls(strategy: str) -> tuple:
    """Visibility of (temperature, top-k, top-p, beam width): each shown only where it acts."""
    sample = strategy == "sample"
    return (
        gr.update(visible=sample),
        gr.update(visible=sample),
        gr.update(visible=sample),
        gr.update(visible=strategy == "beam"),
    )


@friendly
@gpu
def first_step(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Drawn:
    """The live view after an input or a setting changed: restart and show the first step
    (a model that cannot generate gets its note and placeholders, not an error)."""
    settings, layer, head, large, session, state = _split(rest)
    checkpoint = registry.checkpoint(name, session)
    reason = cannot_generate(name, checkpoint)
    if reason is not None:
        short = "_This model cannot generate: it has no decoder (see the note above)._"
        return (short, *placeholders(large, "this model cannot generate"), state)
    if not (source or "").strip():
        return ("_Enter a source sentence (or a prompt)._", *placeholders(large), state)
    with state.lock:
        had_records = state.decoding is not None and bool(state.decoding.records)
        changed = state.key[:2] == (source, name) and state.key != (source, name, *settings)
        _restart(registry, state, session, (source, name, *settings))
        state.decoding.step()
        note = RESTARTED if had_records and changed else ""
        return draw(registry, state, layer, head, large, session, note)


@friendly
def redraw(registry: ModelRegistry, source: str, name: str, *rest: Any) -> Drawn:
    """Redraw the decoding as it is (layer, head or font changed); nothing is stepped."""
    _settings, layer, head, large, session, state = _split(rest)
    if state.decoding is None or state.key[:2] != (source, name):
        return first_step(registry, source, name, *rest)
    with state.lock:
        return draw(registry, state, layer, head, large, session)


def build(registry: ModelRegistry, large: gr.Checkbox, session: gr.State) -> None:
    """Lay out the tab and wire its events (``/generate_step``, ``/generate_back``,
    ``/generate``, ``/generate_reset``, ``/teacher_forcing``)."""
    gr.Markdown(
        "The decoder writes one token at a time: it scores every token of the vocabulary, picks one "
        "(greedy, sampling or beam search), appends it and goes again. Step through it."
    )
    first_source, first_model, first_strategy = EXAMPLES[0]
    names = registry.model_names
    with gr.Row():
        source = gr.Textbox(value=first_source, label="Source sentence (or prompt for 'continue')")
        model_name = gr.Dropdown(
            names, value=first_model if first_model in names else names[0], label="Model"
        )
    model_note = gr.Markdown()
    with gr.Row():
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
    with gr.Row():
        max_tokens = gr.Slider(1, 128, value=40, step=1, label="Max new tokens")
        seed = gr.Number(value=0, precision=0, label="Seed")
        layer = gr.Slider(
            1,
            max(layers, 2),
            value=1,
            step=1,
            label="Layer (attention views)",
            interactive=layers > 1,
        )
        head = gr.Slider(
            1,
            max(heads, 2),
            value=1,
            step=1,
            label="Head (self-attention view)",
            interactive=heads > 1,
        )
    with gr.Row():
        step_button = gr.Button("Step", variant="primary")
        back_button = gr.Button("Back")
        run_button = gr.Button("Run to the end")
        reset_button = gr.Button("Reset")
    state = gr.State(GenerationState())
    summary = gr.Markdown()
    with gr.Row():
        top_plot = gr.Plot(label="Next-token distribution", show_label=False)
        cross_plot = gr.Plot(
            label="Cross-attention of the new token over the source", show_label=False
        )
    triangle_plot = gr.Plot(label="Decoder self-attention, one row per step", show_label=False)

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

    gr.Markdown("### Teacher forcing: the model's prediction at every position of a reference")
    reference = gr.Textbox(
        value=example_reference(first_source, first_model),
        label="Reference (the translation, or the continuation of the prompt)",
    )
    force_button = gr.Button("Compare with the reference")
    force_summary = gr.Markdown()
    force_table = gr.Dataframe(
        headers=["position", "reference", "p(reference)", "model's argmax", "match"], max_height=320
    )
    force_inputs = [source, model_name, reference, session]
    force_outputs = [force_summary, force_table]
    force_button.click(
        bind(force, registry), force_inputs, force_outputs, api_name="teacher_forcing"
    )
    gr.Examples(
        [[s, m, k, example_reference(s, m)] for s, m, k in EXAMPLES if m in names],
        [source, model_name, strategy, reference],
        label="Examples for a lecture (click one: it runs)",
    )

    # Live: every control redraws what depends on it; the buttons stay for the API.
    private = {"api_visibility": "private"}
    live_first = bind(first_step, registry)
    live_force = bind(force_view, registry)
    controls = [model_note, layer, head, cross_plot, step_button, back_button, run_button]
    controls += [reset_button, force_button]
    model_name.change(
        bind(model_controls, registry), [model_name, session], controls, **private
    ).then(live_first, inputs, outputs, **private).then(
        live_force, force_inputs, force_outputs, **private
    )
    strategy.change(strategy_controls, strategy, [temperature, top_k, top_p, beam], **private)
    strategy.change(live_first, inputs, outputs, trigger_mode="always_last", **private)
    for control in (temperature, top_k, top_p, beam, max_tokens):
        control.release(live_first, inputs, outputs, trigger_mode="always_last", **private)
    seed.submit(live_first, inputs, outputs, **private)
    source.change(live_first, inputs, outputs, trigger_mode="always_last", **private).then(
        live_force, force_inputs, force_outputs, **private
    )
    reference.change(live_force, force_inputs, force_outputs, trigger_mode="always_last", **private)
    live_redraw = bind(redraw, registry)
    for control in (layer, head):
        control.release(live_redraw, inputs, outputs, **private)
    large.change(live_redraw, inputs, outputs, **private)
    # The tab opens on its first example's first step.
    demo = gr.context.Context.root_block
    if demo is not None:
        demo.load(live_first, inputs, outputs, **private).then(
            live_force, force_inputs, force_outputs, **private
        )
