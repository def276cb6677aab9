"""The Generate tab's module-level handlers (registry first): step, back, reset, run,
teacher forcing, and the live updates that follow the model and the strategy."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr

from transformer.generation import DecodingSession, teacher_force
from transformer.lab.analysis import shown_pieces
from transformer.pretrained.checkpoint import Checkpoint
from transformer.pretrained.loading import family_summary
from transformer.text.display import next_piece_label, piece_scheme

from ...serving import limits
from ...serving.errors import InputError, friendly, gpu, user_input
from ...serving.state import GenerationState, ModelRegistry, SessionModels
from .chat import GenerateCall, takes_call
from .decoding import (
    RESTARTED,
    cannot_generate,
    current,
    restart,
    start_ids,
    unreadable_note,
    weights_note,
)
from .drawing import Drawn, draw, placeholders

RUN_FIGURE_INTERVAL_S = 0.5
"""Run to the end sends the figures at most this often (the summary follows every step)."""

# The generation endpoints share one signature, their inputs in the order of
# ``request.INPUT_NAMES`` (source, model name, the seven decoding controls, layer, head, large
# font), then the session's models and its generation state: ``takes_call`` reads them once.


def endpoint(handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler(registry, call)`` as a Generate event handler: its inputs read into a
    :class:`GenerateCall` once, run where Spaces lends a GPU, its errors shown as messages."""
    return friendly(gpu(takes_call(handler)))


def _current(
    registry: ModelRegistry, call: GenerateCall, *, admit: bool
) -> tuple[GenerationState, DecodingSession, str]:
    """The session's state, its decoding for the request's source, model and settings (started
    afresh where they changed) and the note that says so; ``admit`` weighs the decoding among
    all of them first, as one that runs the model must. The caller holds ``call.state.lock``."""
    state, note = current(registry, call.state, call.session, call.request)
    assert state.decoding is not None  # current() starts one
    if admit:
        registry.admit_decoding(call.request.model, state)  # weighed, and counted among all
    return state, state.decoding, note


def _move(registry: ModelRegistry, call: GenerateCall, *, forward: bool) -> Drawn:
    """One token more (``forward``) or one fewer, and the view of the decoding after it."""
    with call.state.lock:
        state, decoding, note = _current(registry, call, admit=forward)
        if not forward:
            if decoding.records:
                decoding.back()
        elif decoding.done:
            gr.Warning("Generation has finished: press Back or Reset.")
        else:
            registry.decode_step(call.request.model, decoding)  # a big prompt: the costly pool
        return draw(registry, state, call.request, call.session, note)


@endpoint
def step(registry: ModelRegistry, call: GenerateCall) -> Drawn:
    """The ``/generate_step`` endpoint: one more token."""
    return _move(registry, call, forward=True)


@endpoint
def back(registry: ModelRegistry, call: GenerateCall) -> Drawn:
    """The ``/generate_back`` endpoint: undo the last step."""
    return _move(registry, call, forward=False)


@endpoint
def reset(registry: ModelRegistry, call: GenerateCall) -> Drawn:
    """The ``/generate_reset`` endpoint: start again from the source."""
    with call.state.lock:
        restart(registry, call.state, call.session, call.request)
        return draw(registry, call.state, call.request, call.session)


@endpoint
def run(registry: ModelRegistry, call: GenerateCall) -> Iterator[Drawn]:
    """The ``/generate`` endpoint: step to the end, one update per step (its figures throttled
    to one set per ``RUN_FIGURE_INTERVAL_S``, the last step's always sent), pausing at the time
    limit of a run (``limits.GENERATION_TIME_LIMIT_S``).

    Each step holds the session's lock, so a Step pressed meanwhile takes its turn between two
    of these steps and never runs inside one; a restart meanwhile ends this run."""
    request, session = call.request, call.session
    with call.state.lock:
        state, decoding, note = _current(registry, call, admit=True)
        if decoding.done:
            drawn = draw(registry, state, request, session, note)
    if decoding.done:
        yield drawn
        return
    # Bounded by max tokens and by the time limit. A client that disconnects or cancels makes
    # gradio close this generator at its next yield: nothing runs on.
    limit = limits.GENERATION_TIME_LIMIT_S
    deadline = time.monotonic() + limit
    figures_at = None  # when the figures were last sent
    while True:
        with state.lock:
            if state.decoding is not decoding or decoding.done:
                return
            registry.decodings.touch(state)  # a run in progress is never the least recently used
            decoding.step()
            now = time.monotonic()
            # Every step sends its summary; the five figures go at most every
            # RUN_FIGURE_INTERVAL_S, and always with the first and the last step (a browser
            # spends far longer drawing them than the model spends on a step).
            full = (
                figures_at is None
                or decoding.done
                or now > deadline
                or now - figures_at >= RUN_FIGURE_INTERVAL_S
            )
            if full:
                figures_at = now
            drawn = draw(registry, state, request, session, note, with_figures=full)
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
        raise InputError("the reference gives no tokens: enter a reference")
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
        raise InputError("enter both a source (or prompt) and a reference")
    reason = cannot_generate(name, checkpoint)
    if reason is not None:
        raise InputError(reason.replace("**", "'").replace("`", ""))
    source_ids, reference, bos = _forcing_ids(checkpoint, source, reference_text)
    with user_input():  # the library checks the lengths against the model's
        result = teacher_force(
            model,
            source_ids,
            reference,
            bos_id=bos,
            decode_token=lambda i: tokenizer.id_to_token(i) or "?",
        )

    # As every view writes a piece (␣Paris, not ĠParis): the reference as one sequence (a
    # split character named in each of its pieces), each prediction as it reads after the
    # reference before it.
    stored = [tokenizer.id_to_token(p.reference_id) or "?" for p in result.positions]
    references = shown_pieces(tokenizer, stored)
    scheme = piece_scheme(tokenizer)
    rows = [
        [
            p.position + 1,
            references[n],
            round(p.reference_prob, 4),
            next_piece_label(scheme, stored[:n], tokenizer.id_to_token(p.predicted_id) or "?").text,
            "✓" if p.matches else "✗",
        ]
        for n, p in enumerate(result.positions)
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
    kind = family_summary(checkpoint.info.get("family"))
    stored = weights_note(checkpoint.info)
    described = f"{kind}; {stored}" if stored and kind else kind
    note = reason or (f"_{name}: {described}._" if described else "")
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


@endpoint
def first_step(registry: ModelRegistry, call: GenerateCall) -> Drawn:
    """The live view after an input or a setting changed: restart and show the first step
    (a model that cannot generate gets its note and placeholders, not an error)."""
    return _first_step(registry, call)


def _first_step(registry: ModelRegistry, call: GenerateCall) -> Drawn:
    request, session, state = call.request, call.session, call.state
    checkpoint = registry.checkpoint(request.model, session)
    reason = cannot_generate(request.model, checkpoint)
    large = request.large
    if reason is not None:
        short = "_This model cannot generate: it has no decoder (see the note above)._"
        return (short, *placeholders(large, "this model cannot generate"), state)
    if not request.source.strip():
        return ("_Enter a source sentence (or a prompt)._", *placeholders(large), state)
    with state.lock:
        had_records = state.decoding is not None and bool(state.decoding.records)
        changed = state.key[:2] == request.key[:2] and state.key != request.key
        restart(registry, state, session, request)
        assert state.decoding is not None  # restart starts one
        registry.admit_decoding(request.model, state)  # weighed, and counted among all
        registry.decode_step(request.model, state.decoding)  # a big prompt: the costly pool
        note = RESTARTED if had_records and changed else ""
        return draw(registry, state, request, session, note)


@endpoint
def redraw(registry: ModelRegistry, call: GenerateCall) -> Drawn:
    """Redraw the decoding as it is (layer, head or font changed); nothing is stepped (the
    logit lens was recorded with each step, so a redraw runs no model)."""
    request, session, state = call.request, call.session, call.state
    if state.decoding is None or state.key[:2] != request.key[:2]:
        return _first_step(registry, call)
    with state.lock:
        return draw(registry, state, request, session)


@endpoint
def show_stream(registry: ModelRegistry, call: GenerateCall) -> tuple[Any, GenerationState]:
    """(residual stream, state) when the page unfolds the residual stream's section: drawn for
    the decoding as it is, and sent with every step from now on (folded, a step leaves it out).
    While the decoding is not the controls' own, the page is left as it is (that decoding's own
    event draws it)."""
    request, session, state = call.request, call.session, call.state
    state.stream_shown = True
    if state.decoding is None or state.key[:2] != request.key[:2]:
        return gr.skip(), state
    with state.lock:
        drawn = draw(registry, state, request, session)
    return drawn[5], drawn[-1]


def fold_stream(state: GenerationState | None) -> GenerationState:
    """The session's generation state, its steps no longer sending the residual stream (the
    page opened, or folded the section)."""
    state = state if state is not None else GenerationState()
    state.stream_shown = False
    return state


@endpoint
def redraw_attention(
    registry: ModelRegistry, call: GenerateCall
) -> tuple[Any, Any, GenerationState]:
    """(cross-attention, self-attention triangle, state) redrawn for a new layer or head: the
    next-token chart, the logit lens and the residual stream depend on neither, so the page
    keeps them (they are not outputs of the sliders' event) and only these two are re-sent.
    While the decoding is not the controls' own (a new source or model is on its way, and its
    own event draws everything), the page is left as it is."""
    request, session, state = call.request, call.session, call.state
    if state.decoding is None or state.key[:2] != request.key[:2]:
        return gr.skip(), gr.skip(), state
    with state.lock:
        drawn = draw(registry, state, request, session)
    return drawn[2], drawn[3], drawn[-1]
