"""The panels drawn from one view: one head's (scores beside weights, or original beside
what-if; the masks, the what-if difference and the summary), from one :class:`AttentionRequest`
and its view, and every head of every layer (the grid)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformer import figures
from transformer.core.trace import largest_logit_change
from transformer.figures.attention import GRID_MAX_CELLS, PAD_ROW_MARK, weights_beside_figure
from transformer.lab import switches
from transformer.lab.analysis import unread_text
from transformer.lab.inspection import Analysis
from transformer.lab.interventions import NO_INTERVENTION, combined

from ...serving.errors import code_span
from ...serving.inputs import unreadable_note
from ...serving.state import ModelRegistry
from . import mistakes as seed_mistakes
from .request import AttentionRequest, describe_kind
from .view import AttentionView

Panels = tuple[Any, Any, Any, str]  # the head, the masks, the change, the summary (Markdown)
# The fewest cells a grid keeps however long the text (a 6 x 12 grid: ~45 x 45 per tile).
GRID_MIN_CELLS = 150_000


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


@dataclass(frozen=True)
class _Changed:
    """The pass a what-if or a mistake made, beside the view's own: ``analysis`` (``None``
    when a broken pass cannot run), and ``broken``, the seeds' mistake's pass where one is on."""

    analysis: Analysis | None
    broken: seed_mistakes.BrokenPass | None


def every_panel(
    registry: ModelRegistry, request: AttentionRequest, view: AttentionView
) -> tuple[Any, ...]:
    """Every panel of the tab from one request's view: :func:`head_panels`, then the grid."""
    return (*head_panels(registry, request, view), grid_panel(view, request.large))


def head_panels(registry: ModelRegistry, request: AttentionRequest, view: AttentionView) -> Panels:
    """The head view, the masks, the what-if difference and the summary of one request's view;
    with one of the seeds' mistakes, the broken pass is the changed one (with any what-if on
    too)."""
    summary = _text_notes(request, view.analysis)
    mistake = request.mistake
    if mistake is not None and mistake not in request.mistakes:
        summary.append(
            f"“{mistake.label}” does not apply to this {request.config.architecture} model (it "
            f"needs {mistake.requires}): choose another of the seeds' mistakes."
        )
        mistake = None
    if mistake is None and not request.what_if:
        single, masks, diff = _plain(request, view)
    else:
        changed = _changed_pass(registry, request, view, mistake)
        single, masks, diff = _beside(request, view, changed, summary)
    summary += _reading_notes(request, view)
    return single, masks, diff, "\n\n".join(summary)


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


def _plain(request: AttentionRequest, view: AttentionView) -> tuple[Any, Any, Any]:
    """The head's scores beside its weights, the masks, and the change panel waiting."""
    large = request.large
    return (
        _scores_and_weights(request, view),
        _masks(request, view),
        figures.placeholder_figure(
            "What-if",
            "Tick a what-if switch or choose one of the seeds' mistakes to see what it changes",
            large_font=large,
        ),
    )


def _scores_and_weights(request: AttentionRequest, view: AttentionView) -> Any:
    record = view.records[view.layer]
    return figures.scores_and_weights_figure(
        record,
        view.row,
        view.head,
        view.query_labels,
        view.key_labels,
        padded_queries=view.padded,
        large_font=request.large,
    )


def _masks(
    request: AttentionRequest, view: AttentionView, changed: Any = None, title: str = ""
) -> Any:
    causal = view.analysis.trace.causal if view.kind == "decoder_self" else None
    return figures.masks_figure(
        view.keys_real,
        view.query_labels,
        view.key_labels,
        causal=causal,
        changed=changed,
        changed_title=title or "with the what-if",
        large_font=request.large,
    )


def _changed_pass(
    registry: ModelRegistry,
    request: AttentionRequest,
    view: AttentionView,
    mistake: switches.Switch | None,
) -> _Changed:
    """The pass with the request's what-ifs (and its seeds' ``mistake``) on, on the same decoder
    input as the view's, so the two compare position by position."""
    analysis = view.analysis
    base = combined(request.what_if, request.head_key) if request.what_if else NO_INTERVENTION
    if mistake is not None:
        broken = seed_mistakes.broken_pass(
            registry,
            request.model,
            request.checkpoint,
            list(request.lines),
            analysis,
            mistake,
            base,
        )
        return _Changed(broken.analysis, broken)
    targets = None
    if request.config.architecture == "encoder-decoder":
        assert analysis.trace.target is not None  # an encoder-decoder pass reads a decoder input
        targets = analysis.trace.target.tokens
    lines = list(request.lines)
    return _Changed(
        registry.analysis(request.model, request.checkpoint, lines, base, targets), None
    )


def _beside(
    request: AttentionRequest, view: AttentionView, changed: _Changed, summary: list[str]
) -> tuple[Any, Any, Any]:
    """The head's weights, original beside changed, their difference and the masks; what the
    change did is added to ``summary``."""
    config, large, row, broken = request.config, request.large, view.row, changed.broken
    switched = ", ".join(s.label for s in request.what_if)
    if changed.analysis is None:
        # The broken pass cannot run (the shapes clash): its message is what the mistake does.
        assert broken is not None
        summary.append(
            seed_mistakes.describe(
                broken, config, row, switched, tokenizer=request.checkpoint.tokenizer
            )
        )
        return (
            _scores_and_weights(request, view),
            _masks(request, view),
            seed_mistakes.cannot_run(broken, large),
        )
    record = view.records[view.layer]
    changed_record = changed.analysis.trace.attention_records(view.kind)[view.layer]
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
        single, diff = seed_mistakes.beside(
            before,
            after,
            masked_before,
            masked_after,
            view.query_labels,
            view.key_labels,
            view.padded,
            where,
            view.kind,
            broken.mistake,
            large,
        )
    else:
        single = weights_beside_figure(
            before,
            after,
            view.query_labels,
            view.key_labels,
            masked_before=masked_before,
            masked_after=masked_after,
            panel_titles=(
                "original",
                "with this head zeroed (passes on 0)" if zeroed else "with the what-if",
            ),
            title=f"{describe_kind(view.kind)} · {where} · weights, original | what-if",
            padded_queries=view.padded,
            large_font=large,
        )
        diff = figures.attention_difference_figure(
            before,
            after,
            view.query_labels,
            view.key_labels,
            masked=masked_before & masked_after,
            title=f"What-if change (after − before), {where}",
            large_font=large,
        )
    mask_changed = bool((masked_before != masked_after).any())
    masks = _masks(
        request,
        view,
        changed_record.mask[row, 0] if mask_changed else None,
        "with the mistake" if broken is not None else "with the what-if",
    )
    summary += _what_it_did(request, view, changed.analysis, broken, switched, where, zeroed)
    return single, masks, diff


def _what_it_did(
    request: AttentionRequest,
    view: AttentionView,
    changed: Analysis,
    broken: seed_mistakes.BrokenPass | None,
    switched: str,
    where: str,
    zeroed: bool,
) -> list[str]:
    """The summary's account of the change: how large, the predictions before and after, and
    what a switch that is offered but idle here leaves as it was."""
    config, trace, row = request.config, view.analysis.trace, view.row
    if broken is not None:
        lines = [
            seed_mistakes.describe(
                broken, config, row, switched, tokenizer=request.checkpoint.tokenizer
            )
        ]
    elif config.architecture == "encoder-only":
        assert changed.trace.memory is not None and trace.memory is not None  # has an encoder
        delta = (changed.trace.memory - trace.memory).abs().max().item()
        lines = [f"**What-if ({switched})**: largest change of any encoder output {delta:.3f}."]
    else:
        delta = largest_logit_change(trace, changed.trace)
        lines = [f"**What-if ({switched})**: largest change of any output logit {delta:.3f}."]
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


def grid_panel(view: AttentionView, large: bool) -> Any:
    """Every head of every layer of one view's attention kind, on one colour scale. Its cell
    budget leaves room for the single head (float32, exact, two grid cells' bytes per cell)
    that ships in the same response: together under 3 MB."""
    n_queries, n_keys = view.padded.numel(), view.keys_real.numel()  # (Tq,), (Tk,)
    budget = max(GRID_MIN_CELLS, GRID_MAX_CELLS - 2 * n_queries * n_keys)
    return figures.grid_figure(
        view.records,
        view.row,
        view.query_labels,
        view.key_labels,
        max_cells=budget,
        padded_queries=view.padded,
        large_font=large,
    )
