"""What one Attention request's panels draw, built from one analysis: :func:`attention_data`.

The request has resolved the model, the text and the switches already; here the analysis is
asked for once (and the changed pass, where a what-if or one of the seeds' mistakes is on),
and everything the panels read is computed from them: the head's weights before and after,
the masks, the figures' titles and the summary's Markdown. The panels (``panels``) only draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformer.core.trace import largest_logit_change
from transformer.figures.attention import PAD_ROW_MARK
from transformer.lab.analysis import unread_text
from transformer.lab.inspection import Analysis
from transformer.lab.switches import Switch

from ...serving.errors import code_span
from ...serving.inputs import unreadable_note
from ...serving.state import ModelRegistry
from . import mistakes as seed_mistakes
from .request import AttentionRequest, describe_kind
from .view import AttentionView, request_view, same_input_pass

WAITING = (
    "What-if",
    "Tick a what-if switch or choose one of the seeds' mistakes to see what it changes",
)
"""The change panel's title and line before a what-if or a mistake is chosen."""


@dataclass(frozen=True)
class HeadChange:
    """The view's head in the changed pass (a what-if's, or a seeds' mistake's) beside the
    original: its weights and masked cells before and after (``(Tq, Tk)`` each), the changed
    mask where it differs from the original (``(Tk,)``, else ``None``), and the titles the
    figures bear."""

    before: Any
    after: Any
    masked_before: Any
    masked_after: Any
    mask: Any
    mask_title: str
    panel_titles: tuple[str, str]
    title: str
    diff_title: str


@dataclass(frozen=True)
class AttentionData:
    """Everything one request's panels draw.

    Attributes:
        view: the analysis at the request's head and sentence.
        large: projector mode.
        summary: the summary panel's Markdown.
        change: the head before and after a what-if or a mistake (``None`` when none is on,
            or when the broken pass cannot run).
        waiting: the change panel's title and line where there is no change to draw.
    """

    view: AttentionView
    large: bool
    summary: str
    change: HeadChange | None = None
    waiting: tuple[str, str] = WAITING


def attention_data(registry: ModelRegistry, request: AttentionRequest) -> AttentionData:
    """The data of a request's panels: its view of one analysis (cached for shared models) and,
    with a what-if or one of the seeds' mistakes on, the changed pass on the same decoder input
    (with a mistake, the broken pass is the changed one, any what-if on too)."""
    view = request_view(registry, request)
    summary = _text_notes(request, view.analysis)
    mistake = request.mistake
    if mistake is not None and mistake not in request.mistakes:
        summary.append(
            f"“{mistake.label}” does not apply to this {request.config.architecture} model (it "
            f"needs {mistake.requires}): choose another of the seeds' mistakes."
        )
        mistake = None
    change, waiting = None, WAITING
    if mistake is not None or request.what_if:
        change, refused = _changed(registry, request, view, mistake, summary)
        if refused is not None:  # the broken pass cannot run: the summary says why
            waiting = seed_mistakes.cannot_run_lines(refused.mistake)
    summary += _reading_notes(request, view)
    return AttentionData(view, request.large, "\n\n".join(summary), change, waiting)


def _text_notes(request: AttentionRequest, analysis: Analysis) -> list[str]:
    """What the summary says of the text first: an encoder-decoder's outputs, what this model
    cannot read, the words a toy model never saw."""
    config, tokenizer = request.config, request.checkpoint.tokenizer
    notes = []
    if config.architecture == "encoder-decoder":
        notes += [
            f"**Sentence {i + 1}** → {code_span(out)}" for i, out in enumerate(analysis.outputs)
        ]
    # Only a sentence whose tokens hold the unknown token has something unreadable to name:
    # the analysis has tokenized it already, so a readable one is not tokenized again.
    unread = unread_text(analysis, tokenizer, request.checkpoint.info.get("task"), request.lines)
    for row in unread.rows:
        note = unreadable_note(tokenizer, request.lines[row], f"Sentence {row + 1}: this model")
        if note:
            notes.append(note)
    if unread.toy_note:
        notes.append(unread.toy_note)
    return notes


def _changed(
    registry: ModelRegistry,
    request: AttentionRequest,
    view: AttentionView,
    mistake: Switch | None,
    summary: list[str],
) -> tuple[HeadChange | None, seed_mistakes.BrokenPass | None]:
    """The pass with the request's what-ifs (and its seeds' ``mistake``) on, on the same
    decoder input as the view's, so the two compare position by position: the head before and
    after, or the broken pass that cannot run. What the change did is added to ``summary``."""
    config, row, lines = request.config, view.row, list(request.lines)
    base = request.intervention
    switched = ", ".join(s.label for s in request.what_if)
    broken = None
    if mistake is None:
        changed = same_input_pass(
            registry, request.model, request.checkpoint, lines, view.analysis, base
        )
    else:
        broken = seed_mistakes.broken_pass(
            registry, request.model, request.checkpoint, lines, view.analysis, mistake, base
        )
        # Where the mistake came from and what it did (or, where the shapes clash and the
        # broken pass cannot run, why: that is what the mistake does here).
        tokenizer = request.checkpoint.tokenizer
        summary.append(seed_mistakes.describe(broken, config, row, switched, tokenizer=tokenizer))
        if broken.analysis is None:
            return None, broken
        changed = broken.analysis
    record = view.records[view.layer]
    changed_record = changed.trace.attention_records(view.kind)[view.layer]
    before = record.weights[row, view.head]
    after = changed_record.weights[row, view.head]
    zeroed = any(s.per_head for s in request.what_if)
    if zeroed:
        # The head still computes its weights; its output is multiplied by 0, so what it
        # passes on is nothing: show that.
        after = after * 0
    masked_before = ~record.mask[row, 0]
    masked_after = ~changed_record.mask[row, 0]
    where = f"layer {view.layer + 1}, head {view.head + 1}"
    if broken is not None:
        panel_titles, title, diff_title = seed_mistakes.beside_titles(
            broken.mistake, view.kind, where
        )
    else:
        panel_titles = (
            "original",
            "with this head zeroed (passes on 0)" if zeroed else "with the what-if",
        )
        title = f"{describe_kind(view.kind)} · {where} · weights, original | what-if"
        diff_title = f"What-if change (after − before), {where}"
    mask_changed = bool((masked_before != masked_after).any())
    summary += _what_it_did(request, view, changed, broken, switched, where, zeroed)
    change = HeadChange(
        before=before,
        after=after,
        masked_before=masked_before,
        masked_after=masked_after,
        mask=changed_record.mask[row, 0] if mask_changed else None,
        mask_title="with the mistake" if broken is not None else "with the what-if",
        panel_titles=panel_titles,
        title=title,
        diff_title=diff_title,
    )
    return change, None


def _what_it_did(
    request: AttentionRequest,
    view: AttentionView,
    changed: Analysis,
    broken: seed_mistakes.BrokenPass | None,
    switched: str,
    where: str,
    zeroed: bool,
) -> list[str]:
    """The summary's account of the change after the mistake's own (:func:`_changed`): how
    large a what-if's change is, the predictions before and after, and what a switch that is
    offered but idle here leaves as it was."""
    config, trace, row = request.config, view.analysis.trace, view.row
    lines: list[str] = []
    if broken is None:  # a mistake's account says how large its change is
        if config.architecture == "encoder-only":
            assert changed.trace.memory is not None and trace.memory is not None  # an encoder
            delta, of = (changed.trace.memory - trace.memory).abs().max().item(), "encoder output"
        else:
            delta, of = largest_logit_change(trace, changed.trace), "output logit"
        lines.append(f"**What-if ({switched})**: largest change of any {of} {delta:.3f}.")
    lines += [s.idle_note for s in request.what_if if s.idle_here(config)]
    if view.analysis.predicted and broken is None:
        lines.append(
            f"Next-token predictions before: {code_span(view.analysis.predicted[row])} — "
            f"after: {code_span(changed.predicted[row])}"
        )
    if zeroed:
        lines.append(
            f"Zeroing {where} multiplies its output by 0: its weights (left) are still "
            "computed, but what it passes on is nothing (right)."
        )
    return lines


def shared_kv_line(record: Any, head: int) -> str:
    """Which query heads share the key/value head that ``head`` (0-based) reads, where heads
    share one (grouped- or multi-query attention); ``""`` otherwise."""
    kv = tuple(record.kv_head_of)
    if not kv or len(set(kv)) == len(kv):
        return ""
    mine = kv[head]
    sharing = [h + 1 for h, g in enumerate(kv) if g == mine]
    groups = len(set(kv))
    return (
        f"**Grouped-query attention**: {len(kv)} query heads read {groups} key/value "
        f"head{'s' if groups > 1 else ''}. Head {head + 1} reads key/value head {mine + 1}, "
        f"shared with heads {', '.join(str(h) for h in sharing if h != head + 1)}: their "
        "scores differ only through their own queries (the keys and values are the same). "
        "In the all-heads grid, heads between dark lines share one."
    )


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _reading_notes(request: AttentionRequest, view: AttentionView) -> list[str]:
    """How to read the axes: the marks in the pieces, heads that share keys and values, and
    the padding of this sentence."""
    config, tokenizer, row = request.config, request.checkpoint.tokenizer, view.row
    notes = []
    if view.legend:  # the marks on the axes, said where they appear
        notes.append(f"Pieces are written as the text they stand for: {view.legend}.")
    kv_line = shared_kv_line(view.records[view.layer], view.head)
    if kv_line:
        notes.append(kv_line)
    n_padded = int(view.padded.sum())
    n_pad_keys = int((~view.keys_real).sum())
    if n_pad_keys:
        notes.append(
            f"**Padding is real here**: sentence {row + 1} is padded to the batch's length "
            f"({_plural(max(n_padded, n_pad_keys), 'padding position')}). Grey key columns are "
            f"what the padding mask removed; red {PAD_ROW_MARK} query rows are [PAD] "
            "queries: they attend normally, but the loss ignores their output."
        )
    elif n_padded:
        # The model's own pad token, as its rows show it (SmolLM2's <|im_end|>, GPT-2's
        # <|endoftext|>), not one family's named for every model.
        pad = tokenizer.id_to_token(config.pad_id) or str(config.pad_id)
        notes.append(
            f"Sentence {row + 1} is padded with {_plural(n_padded, 'position')} (red "
            f"{PAD_ROW_MARK} rows), but this model's pad token is a real token it does not mask "
            f"(it pads with {code_span(pad)}): those positions are read like any other, so "
            "compare unpadded sentences."
        )
    elif len(request.lines) > 1:
        notes.append(
            f"Sentence {row + 1} is the longest of the {len(request.lines)} sentences: it has no "
            "padding (a shorter one does; choose it with the Sentence slider)."
        )
    return notes
