"""A decoding state drawn: the summary markdown, the next-token chart, the cross-attention
of the new token, the decoder self-attention triangle, the logit lens of the newest step and
the residual stream's norms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from transformer import figures
from transformer.figures.common import short_piece
from transformer.figures.generation import next_token_figure
from transformer.figures.lens import logit_lens_figure, residual_norms_figure
from transformer.generation import DecodingSession, StepRecord
from transformer.lab.analysis import piece_legend, shown_pieces, toy_vocabulary_note
from transformer.text.display import (
    next_piece_label,
    pending_character,
    piece_labels,
    piece_scheme,
)

from ...serving.errors import code_block, code_span
from ...serving.state import GenerationState, ModelRegistry, SessionModels
from .decoding import unreadable_note
from .request import GenerateRequest

# The least width the page gives the step's chart and its cross-attention: side by side where
# each gets that much, one below the other where not (the tour's sidebar open at 1280 px).
STEP_FIGURE_WIDTH = 480

# (summary, next-token chart, cross-attention, self-attention triangle, logit lens, residual
# norms, state)
Drawn = tuple[str, Any, Any, Any, Any, Any, GenerationState]


def _candidates(tokenizer: Any, context: list[int]) -> Callable[[int], str]:
    """A next token as it reads after ``context`` (the ids the model read), each id written
    once: a piece that ends a character the context began names it (``美[3/3]``), as the
    sequence's own labels do (:func:`transformer.text.display.next_piece_label`)."""
    scheme = piece_scheme(tokenizer)
    tail = [tokenizer.id_to_token(i) or "?" for i in context[-3:]]
    written: dict[int, str] = {}

    def piece(token_id: int) -> str:
        if token_id not in written:
            stored = tokenizer.id_to_token(token_id) or "?"
            written[token_id] = next_piece_label(scheme, tail, stored).text
        return written[token_id]

    return piece


def _output_text(tokenizer: Any, ids: list[int]) -> tuple[str, str]:
    """``(text, held back)``: the output decoded, without the first bytes of a character whose
    rest is not generated yet (``tokenizer.decode`` writes them "�"), and those bytes as a
    label writes them (``"⟨0xE7⟩[1/3]"``), ``""`` when every character is whole."""
    text = tokenizer.decode(ids)
    held = pending_character(piece_labels(tokenizer, ids))
    return (text.rstrip("\ufffd"), held) if held else (text, "")


def _chart(record: StepRecord, piece: Callable[[int], str], large: bool) -> Any:
    """The next-token chart of one step: the model's top tokens (and the chosen one wherever it
    ranks), with the sampled-from distribution beside the model's own when sampling."""
    ids, model_probs = list(record.top_ids), list(record.top_probs)
    sampled = list(record.sampling_probs) if record.sampling_probs is not None else None

    def label(i: int) -> str:
        return f"{short_piece(piece(i))} #{i}"

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
        narrowest=STEP_FIGURE_WIDTH,
    )


def placeholders(large: bool, text: str = "press Step to generate the first token") -> tuple:
    """(next-token, cross-attention, self-attention, logit lens, residual norms) placeholders
    before the first step."""
    return (
        figures.placeholder_figure("Next-token probabilities", text, large_font=large),
        figures.placeholder_figure("Cross-attention of the new token", text, large_font=large),
        figures.placeholder_figure("Decoder self-attention, step by step", text, large_font=large),
        figures.placeholder_figure("Logit lens of the newest step", text, large_font=large),
        figures.placeholder_figure("Residual stream, per position", text, large_font=large),
    )


def draw(
    registry: ModelRegistry,
    state: GenerationState,
    request: GenerateRequest,
    session: SessionModels,
    note: str = "",
    *,
    with_figures: bool = True,
) -> Drawn:
    """(summary, next-token chart, cross-attention of the new token, self-attention triangle,
    logit lens, residual norms, state) for the decoding so far, at the request's layer, head and
    font; ``note`` (e.g. "settings changed — restarted") leads. Without ``with_figures`` the
    five figures are ``gr.skip()`` (left as the page shows them) and none is built; the residual
    norms are ``gr.skip()`` too while the page has their section folded (``state.stream_shown``)."""
    large = request.large
    decoding = state.decoding
    checkpoint = registry.checkpoint(state.key[1], session)
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    records = decoding.records if decoding else []
    lead = [f"**{note[0].upper()}{note[1:]}.**"] if note else []
    warning = unreadable_note(checkpoint, state.key[0])
    if warning:
        lead.append(warning)
    unknown = toy_vocabulary_note(checkpoint.info.get("task"), state.key[0])
    if unknown:  # a student's own sentence: which of its words the toy model ever saw
        lead.append(unknown)
    if not records:
        text = "\n\n".join([*lead, "_Press **Step** or **Run to the end**._"])
        return (text, *placeholders(large), state)
    assert decoding is not None  # it has records
    last = records[-1]
    # The sliders follow the model; an API caller's larger value shows the last layer/head.
    layer_i = min(request.layer - 1, config.n_decoder_layers - 1)
    head_i = min(request.head - 1, config.n_heads - 1)
    # The sequence read, written as one (a split character named in each of its pieces); the
    # candidates for the next token as they read after it (the chart, the lens).
    labels = figures.token_labels([label.text for label in piece_labels(tokenizer, last.tokens)])
    piece = _candidates(tokenizer, last.tokens)
    # The new query is the last token read: named as in the self-attention rows.
    query = labels[len(last.tokens) - 1]
    text = _summary(decoding, tokenizer, lead, query, piece)
    if not with_figures:  # a throttled step of Run: the figures stay as they are
        return (text, *[gr.skip()] * 5, state)
    top = _chart(last, piece, large)
    if last.cross_attention is not None:
        cross = figures.cross_attention_step_figure(
            last.cross_attention[layer_i],
            figures.token_labels(shown_pieces(tokenizer, state.source_pieces)),
            query_label=query,
            layer=layer_i + 1,
            large_font=large,
            height=360 if large else 300,
            narrowest=STEP_FIGURE_WIDTH,
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
    # The lens and the stream were recorded from the steps' own passes: a redraw runs no model.
    assert last.lens is not None  # the tab decodes with capture_lens
    lens_plot = logit_lens_figure(
        last.lens,
        piece,
        position_label=query,
        chosen_label=piece(last.chosen_id),
        large_font=large,
    )
    # Redrawn at every step while its section is open: the values are in the hover (as the
    # caption says), not written in hundreds of cells that the browser lays out anew each time.
    # Folded, it is left out (SmolLM2's at 20 tokens: 42 of the step's 61 kB); unfolding the
    # section draws it (handlers.show_stream).
    norms_plot = (
        residual_norms_figure(
            decoding.residual_stream(), labels[: len(last.tokens)], large_font=large, numbers=False
        )
        if state.stream_shown
        else gr.skip()
    )
    return text, top, cross, triangle, lens_plot, norms_plot, state


def _byte_notes(tokenizer: Any, ids: list[int]) -> str:
    """What the marks in the pieces ``ids`` stand for, as every view writes them
    (``" (␣ is a space (stored as Ġ); ↵ is a line break (stored as Ċ))"``); ``""`` for other
    tokenizers or pieces without such marks."""
    legend = piece_legend(tokenizer, [tokenizer.id_to_token(i) or "" for i in ids])
    return f" ({legend})" if legend else ""


def _summary(
    decoding: DecodingSession,
    tokenizer: Any,
    lead: list[str],
    query: str,
    piece: Callable[[int], str] | None = None,
) -> str:
    """The summary markdown of a decoding: output so far, the last choice, beams, the end
    (``piece`` names a token, :func:`_pieces` of the tokenizer unless given)."""
    records = decoding.records
    last = records[-1]
    piece = piece or _candidates(tokenizer, last.tokens)
    output, held = _output_text(tokenizer, decoding.output_ids)
    if held:  # a character cut between pieces: shown once its last byte is generated
        held = f" (and {held}: the first bytes of a character whose rest is still to come)"
    output_pieces = piece_labels(tokenizer, decoding.output_ids)
    n = len(records)
    lines = [
        *lead,
        f"**Output so far** ({n} step{'s' if n != 1 else ''}): "
        # An output of several lines (a model writing code, a list) keeps its lines.
        + (f"\n\n{code_block(output)}" if "\n" in output.strip("\n") else code_span(output))
        + held,
        "Pieces: "
        + " ".join(code_span(label.text) for label in output_pieces)
        + _byte_notes(tokenizer, decoding.output_ids),
        f"Chosen at step {last.step + 1} from position {code_span(query)}: "
        f"{code_span(piece(last.chosen_id))}, "
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
                f"{code_span(_output_text(tokenizer, list(b.tokens))[0])} (log-prob {b.score:.2f})"
                for b in last.beams[:4]
            )
        )
    if decoding.done:
        lines.append(f"**Finished** ({decoding.stop_reason}).")
    return "\n\n".join(lines)
