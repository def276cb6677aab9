"""One attention head of an analysis as a reader is shown it: :func:`head_view` (the head's
records, its axes as every view writes them, its padding) and :func:`attention_data` (all an
Attention page draws of one analysis: the head before and after a what-if or a seeds' mistake,
its masks, the figures' titles and the summary's Markdown).

Plain values in, plain values out: the caller has resolved the model, the text and the switches,
and run the passes (the correct one, and the changed one where a switch is on); figures are
drawn from what these return.

    >>> view = head_view(analysis, tokenizer, "cross", layer=1, head=0, row=0)
    >>> data = attention_data(analysis, tokenizer, "cross", 1, 0, 0, sentences=sentences)
    >>> data.summary, data.change
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from ..core.trace import AttentionKind, AttentionRecord, largest_logit_change
from ..text.display import PAD_ROW_MARK, code_span, token_labels, unreadable_note
from ..text.tokenization import Tokenizer
from .analysis import UnreadText, sentence_attention, unread_text
from .effects import compare_passes, mistake_account
from .inspection import Analysis
from .switch import Switch

WAITING = (
    "What-if",
    "Tick a what-if switch or choose one of the seeds' mistakes to see what it changes",
)
"""The change panel's title and line before a what-if or a mistake is chosen."""


@dataclass
class AttentionView:
    """One captured analysis and the layer, head and sentence a view draws (all 0-based), with
    what every panel of that sentence reads: its axis labels and pieces (and what their marks
    stand for), its [PAD] query rows and its real keys, and what of the sentences the model
    did not read as written."""

    analysis: Analysis
    kind: AttentionKind
    records: list[AttentionRecord]
    layer: int
    head: int
    row: int
    query_labels: list[str]
    key_labels: list[str]
    query_pieces: list[str]
    key_pieces: list[str]
    padded: Tensor  # (Tq,) bool: padded_query_rows
    keys_real: Tensor  # (Tk,) bool: real_keys
    legend: str  # piece_legend of the pieces, "" where they hold no marks
    unread: UnreadText  # unread_text of the analysis's sentences


def head_view(
    analysis: Analysis,
    tokenizer: Tokenizer,
    kind: AttentionKind,
    layer: int,
    head: int,
    row: int,
    *,
    task: str | None = None,
    sentences: Sequence[str] = (),
) -> AttentionView:
    """The view of one analysis (of ``sentences``, by a model trained on ``task``, ``None``
    for a pretrained one) at a checked (0-based) layer, head and sentence."""
    # Only a sentence whose tokens hold the unknown token has something unreadable to name:
    # the analysis has tokenized it already, so a readable one is not tokenized again.
    unread = unread_text(analysis, tokenizer, task, sentences)
    at = sentence_attention(analysis, tokenizer, kind, row)
    return AttentionView(
        analysis=analysis,
        kind=kind,
        records=at.records,
        layer=layer,
        head=head,
        row=row,
        query_labels=token_labels(at.shown_queries),
        key_labels=token_labels(at.shown_keys),
        query_pieces=at.queries,
        key_pieces=at.keys,
        padded=at.padded_queries,
        keys_real=at.real_keys,
        legend=at.legend,
        unread=unread,
    )


@dataclass(frozen=True)
class HeadChange:
    """The view's head in the changed pass (a what-if's, or a seeds' mistake's) beside the
    original: its weights and masked cells before and after (``(Tq, Tk)`` each), the changed
    mask where it differs from the original (``(Tk,)``, else ``None``), and the titles the
    figures bear."""

    before: Tensor
    after: Tensor
    masked_before: Tensor
    masked_after: Tensor
    mask: Tensor | None
    mask_title: str
    panel_titles: tuple[str, str]
    title: str
    diff_title: str


@dataclass(frozen=True)
class AttentionData:
    """Everything one Attention page draws of one analysis.

    Attributes:
        view: the analysis at the head and sentence asked for.
        summary: the summary panel's Markdown.
        change: the head before and after a what-if or a mistake (``None`` when none is on,
            or when the broken pass cannot run).
        waiting: the change panel's title and line where there is no change to draw.
        large: the figures' size: projector mode (their ``large_font``).
    """

    view: AttentionView
    summary: str
    change: HeadChange | None = None
    waiting: tuple[str, str] = WAITING
    large: bool = False


def beside_titles(
    mistake: Switch, axes: str, kind_title: str, where: str
) -> tuple[tuple[str, str], str, str]:
    """The titles of one head correct beside broken at ``where`` ("layer 2, head 1"): its two
    panels' (the broken one saying how to read its axes, ``axes``, where the mistake changes
    them: its :meth:`~transformer.lab.switch.Switch.axes_note`), the figure's (``kind_title``
    names the attention: "Cross-attention (decoder → encoder)"), and the difference's."""
    note = f" ({axes})" if axes else ""
    return (
        ("correct", f"with “{mistake.label}”{note}"),
        f"{kind_title} · {where} · weights, correct | with the mistake",
        f"What the mistake changed (broken − correct), {where}",
    )


def cannot_run_lines(mistake: Switch) -> tuple[str, str]:
    """The title and line of the change panel when ``mistake``'s broken pass cannot run."""
    return (
        f"With “{mistake.label}”: no output",
        "The shapes clash, so the broken pass stops here: the text above says why.",
    )


def attention_data(
    analysis: Analysis,
    tokenizer: Tokenizer,
    kind: AttentionKind,
    layer: int,
    head: int,
    row: int,
    *,
    sentences: Sequence[str],
    task: str | None = None,
    kind_title: str = "",
    what_if: Sequence[Switch] = (),
    mistake: Switch | None = None,
    changed: Analysis | None = None,
    refused: str | None = None,
    large: bool = False,
) -> AttentionData:
    """What an Attention page draws of ``analysis`` (of ``sentences``, by a model trained on
    ``task``, ``None`` for a pretrained one) at ``kind``'s ``layer``, ``head`` and sentence
    ``row`` (0-based, checked): the view, the summary, and with the ``what_if`` switches or a
    seeds' ``mistake`` on, the head in the ``changed`` pass (the same decoder input, with the
    switches and the mistake on) beside the original; ``refused``: why the mistake's broken pass
    could not run (its shapes clash), then there is no ``changed`` pass. A ``mistake`` that does
    not apply to this model is said so, and nothing is changed for it. ``kind_title`` names the
    attention in the figures' titles; ``large``: the figures are drawn for a projector."""
    view = head_view(analysis, tokenizer, kind, layer, head, row, task=task, sentences=sentences)
    config = analysis.trace.config
    summary = []
    if config.architecture == "encoder-decoder":
        summary += [
            f"**Sentence {i + 1}** → {code_span(out)}" for i, out in enumerate(analysis.outputs)
        ]
    for unread_row in view.unread.rows:
        subject = f"Sentence {unread_row + 1}: this model"
        note = unreadable_note(tokenizer, sentences[unread_row], subject)
        if note:
            summary.append(note)
    if view.unread.toy_note:
        summary.append(view.unread.toy_note)
    if mistake is not None and not mistake.applies(config):
        summary.append(
            f"“{mistake.label}” does not apply to this {config.architecture} model (it "
            f"needs {mistake.requires}): choose another of the seeds' mistakes."
        )
        mistake = None
    change, waiting = None, WAITING
    switched = ", ".join(s.label for s in what_if)
    if mistake is not None:
        # Where the mistake came from and what it did (or, where the shapes clash and the
        # broken pass cannot run, why: that is what the mistake does here).
        effect = None if changed is None else compare_passes(analysis, changed, tokenizer, mistake)
        summary.append(
            mistake_account(mistake, effect, row, error=refused, also=switched, tokenizer=tokenizer)
        )
    if changed is not None:
        changed_record = changed.trace.attention_records(kind)[layer]
        if mistake is None:  # a mistake's account says how large its change is
            if config.architecture == "encoder-only":
                assert changed.trace.memory is not None and analysis.trace.memory is not None
                delta = (changed.trace.memory - analysis.trace.memory).abs().max().item()
                of = "encoder output"
            else:
                delta, of = largest_logit_change(analysis.trace, changed.trace), "output logit"
            summary.append(f"**What-if ({switched})**: largest change of any {of} {delta:.3f}.")
        # How to read a broken panel's axes, and what a switch that is offered but idle here
        # leaves as it was.
        axes = mistake.axes_note(kind) if mistake is not None else ""
        summary += [s.idle_note for s in what_if if s.idle_here(config)]
        change = _head_change(view, changed_record, what_if, mistake, kind_title, axes)
        summary += _what_it_did(view, changed, what_if, mistake is not None)
    elif mistake is not None:
        waiting = cannot_run_lines(mistake)
    summary += _reading_notes(view, tokenizer, len(sentences))
    return AttentionData(view, "\n\n".join(summary), change, waiting, large)


def _where(view: AttentionView) -> str:
    return f"layer {view.layer + 1}, head {view.head + 1}"


def _head_change(
    view: AttentionView,
    changed_record: AttentionRecord,
    what_if: Sequence[Switch],
    mistake: Switch | None,
    kind_title: str,
    axes: str,
) -> HeadChange:
    """The view's head in the changed pass (its record of the view's layer) beside the
    original, and the figures' titles (``kind_title`` names the attention; ``axes``: with a
    ``mistake``, how to read its broken panel's axes)."""
    row, head, where = view.row, view.head, _where(view)
    record = view.records[view.layer]
    before = record.weights[row, head]
    after = changed_record.weights[row, head]
    zeroed = any(s.per_head for s in what_if)
    if zeroed:
        # The head still computes its weights; its output is multiplied by 0, so what it
        # passes on is nothing: show that.
        after = after * 0
    masked_before = ~record.mask[row, 0]
    masked_after = ~changed_record.mask[row, 0]
    if mistake is not None:
        panel_titles, title, diff_title = beside_titles(mistake, axes, kind_title, where)
    else:
        panel_titles = (
            "original",
            "with this head zeroed (passes on 0)" if zeroed else "with the what-if",
        )
        title = f"{kind_title} · {where} · weights, original | what-if"
        diff_title = f"What-if change (after − before), {where}"
    mask_changed = bool((masked_before != masked_after).any())
    return HeadChange(
        before=before,
        after=after,
        masked_before=masked_before,
        masked_after=masked_after,
        mask=changed_record.mask[row, 0] if mask_changed else None,
        mask_title="with the mistake" if mistake is not None else "with the what-if",
        panel_titles=panel_titles,
        title=title,
        diff_title=diff_title,
    )


def _what_it_did(
    view: AttentionView, changed: Analysis, what_if: Sequence[Switch], broken: bool
) -> list[str]:
    """The summary's account of the change after its size and the idle switches: the
    predictions before and after (a mistake's account has said them), and what zeroing a head
    does."""
    row, lines = view.row, []
    if view.analysis.predicted and not broken:
        lines.append(
            f"Next-token predictions before: {code_span(view.analysis.predicted[row])} — "
            f"after: {code_span(changed.predicted[row])}"
        )
    if any(s.per_head for s in what_if):
        lines.append(
            f"Zeroing {_where(view)} multiplies its output by 0: its weights (left) are still "
            "computed, but what it passes on is nothing (right)."
        )
    return lines


def shared_kv_line(record: AttentionRecord, head: int) -> str:
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


def _reading_notes(view: AttentionView, tokenizer: Tokenizer, n_sentences: int) -> list[str]:
    """How to read the axes: the marks in the pieces, heads that share keys and values, and
    the padding of this sentence (one of ``n_sentences``)."""
    row, config = view.row, view.analysis.trace.config
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
    elif n_sentences > 1:
        notes.append(
            f"Sentence {row + 1} is the longest of the {n_sentences} sentences: it has no "
            "padding (a shorter one does; choose it with the Sentence slider)."
        )
    return notes


__all__ = [
    "WAITING",
    "AttentionData",
    "AttentionView",
    "HeadChange",
    "attention_data",
    "beside_titles",
    "cannot_run_lines",
    "head_view",
    "shared_kv_line",
]
