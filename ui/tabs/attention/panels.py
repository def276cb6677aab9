"""One head's panels: scores beside weights (or original beside what-if), the masks, the
what-if difference and the summary."""

from __future__ import annotations

from typing import Any

from transformer import figures
from transformer.core.trace import largest_logit_change
from transformer.figures.attention import PAD_ROW_MARK, weights_beside_figure
from transformer.lab.analysis import (
    axis_pieces,
    piece_legend,
    real_keys,
    toy_vocabulary_note,
)
from transformer.lab.analysis import what_if as what_if_intervention
from transformer.lab.interventions import NO_INTERVENTION
from transformer.lab.mistakes import MISTAKES
from transformer.pretrained.checkpoint import Checkpoint

from ...serving.errors import code_span
from ...serving.inputs import unreadable_note
from ...serving.state import ModelRegistry
from . import mistakes as seed_mistakes
from .view import AttentionView, _describe, _plural, padded_query_rows


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


def _head_panels(
    registry: ModelRegistry,
    view: AttentionView,
    checkpoint: Checkpoint,
    name: str,
    lines: list[str],
    what_if: list[str],
    large: bool,
    mistake: str | None = None,
) -> tuple[Any, Any, Any, str]:
    """The head view, the masks, the what-if difference and the summary of one view; with one
    of the seeds' ``mistake``, the broken pass is the changed one (with any what-if on too).
    ``lines``: the sentences the view's analysis read, checked."""
    config = checkpoint.config
    analysis, record, row = view.analysis, view.records[view.layer], view.row
    trace = analysis.trace
    q_labels, k_labels = view.query_labels, view.key_labels
    padded = padded_query_rows(analysis, view.kind, row)
    causal = trace.causal if view.kind == "decoder_self" else None
    keys_real = real_keys(trace, view.kind, row)
    where = f"layer {view.layer + 1}, head {view.head + 1}"
    summary = []
    if config.has_encoder and config.has_decoder:
        summary += [
            f"**Sentence {i + 1}** → {code_span(out)}" for i, out in enumerate(analysis.outputs)
        ]
    for number, line in enumerate(lines, 1):
        note = unreadable_note(checkpoint.tokenizer, line, f"Sentence {number}: this model")
        if note:
            summary.append(note)
    unknown = toy_vocabulary_note(checkpoint.info.get("task"), " ".join(lines))
    if unknown:
        summary.append(unknown)
    mistake = seed_mistakes.chosen(mistake)
    if mistake is not None and not MISTAKES[mistake].applies(config):
        summary.append(
            f"“{mistake}” does not apply to this {config.architecture} model (it needs "
            f"{MISTAKES[mistake].requires}): choose another of the seeds' mistakes."
        )
        mistake = None
    broken = None
    if mistake is not None:
        base = (
            what_if_intervention(what_if, head=(view.kind, view.layer, view.head))
            if what_if
            else NO_INTERVENTION
        )
        broken = seed_mistakes.broken_pass(
            registry, name, checkpoint, lines, analysis, mistake, base
        )
    if broken is not None and broken.analysis is None:
        # The broken pass cannot run (the shapes clash): its message is what the mistake does.
        single = figures.scores_and_weights_figure(
            record, row, view.head, q_labels, k_labels, padded_queries=padded, large_font=large
        )
        diff = seed_mistakes.cannot_run(broken, large)
        masks = figures.masks_figure(keys_real, q_labels, k_labels, causal=causal, large_font=large)
        summary.append(seed_mistakes.describe(broken, config, row, ", ".join(what_if)))
    elif what_if or broken is not None:
        if broken is not None:
            changed = broken.analysis
        else:
            intervention = what_if_intervention(what_if, head=(view.kind, view.layer, view.head))
            # The same decoder input as the plain pass, so the two compare position by position.
            targets = None
            if config.has_encoder and config.has_decoder:
                assert trace.target is not None  # an encoder-decoder pass reads a decoder input
                targets = trace.target.tokens
            changed = registry.analysis(name, checkpoint, lines, intervention, targets)
        assert changed is not None  # a broken pass that cannot run was answered above
        changed_record = changed.trace.attention_records(view.kind)[view.layer]
        before = record.weights[row, view.head]
        after = changed_record.weights[row, view.head]
        zeroed = "zero this head" in what_if
        if zeroed:
            # The head still computes its weights; its output is multiplied by 0, so what it
            # passes on is nothing: show that.
            after = after * 0
        switches = ", ".join(what_if)
        masked_before = ~record.mask[row, 0]
        masked_after = ~changed_record.mask[row, 0]
        if broken is not None:
            assert mistake is not None  # broken is the pass with that mistake
            single, diff = seed_mistakes.beside(
                before,
                after,
                masked_before,
                masked_after,
                q_labels,
                k_labels,
                padded,
                where,
                _describe(view.kind),
                mistake,
                large,
            )
        else:
            single = weights_beside_figure(
                before,
                after,
                q_labels,
                k_labels,
                masked_before=masked_before,
                masked_after=masked_after,
                panel_titles=(
                    "original",
                    "with this head zeroed (passes on 0)" if zeroed else "with the what-if",
                ),
                title=f"{_describe(view.kind)} · {where} · weights, original | what-if",
                padded_queries=padded,
                large_font=large,
            )
            diff = figures.attention_difference_figure(
                before,
                after,
                q_labels,
                k_labels,
                masked=masked_before & masked_after,
                title=f"What-if change (after − before), {where}",
                large_font=large,
            )
        mask_changed = bool((masked_before != masked_after).any())
        masks = figures.masks_figure(
            keys_real,
            q_labels,
            k_labels,
            causal=causal,
            changed=changed_record.mask[row, 0] if mask_changed else None,
            changed_title="with the mistake" if broken is not None else "with the what-if",
            large_font=large,
        )
        if broken is not None:
            summary.append(seed_mistakes.describe(broken, config, row, switches))
        elif config.architecture == "encoder-only":
            assert changed.trace.memory is not None and trace.memory is not None  # has an encoder
            delta = (changed.trace.memory - trace.memory).abs().max().item()
            summary.append(
                f"**What-if ({switches})**: largest change of any encoder output {delta:.3f}."
            )
        else:
            delta = largest_logit_change(trace, changed.trace)
            summary.append(
                f"**What-if ({switches})**: largest change of any output logit {delta:.3f}."
            )
        if "no positional encoding" in what_if and config.positional == "rotary":
            summary.append(
                "This model adds **no** positional encoding to switch off: its positions are "
                "rotary (q and k are rotated inside attention), which this what-if leaves on, so "
                "it changes nothing here."
            )
        if analysis.predicted and broken is None:
            summary.append(
                f"Next-token predictions before: {code_span(analysis.predicted[row])} — "
                f"after: {code_span(changed.predicted[row])}"
            )
        if zeroed:
            summary.append(
                f"Zeroing {where} multiplies its output by 0: its weights (left) are still "
                "computed, but what it passes on is nothing (right)."
            )
    else:
        single = figures.scores_and_weights_figure(
            record, row, view.head, q_labels, k_labels, padded_queries=padded, large_font=large
        )
        masks = figures.masks_figure(keys_real, q_labels, k_labels, causal=causal, large_font=large)
        diff = figures.placeholder_figure(
            "What-if",
            "Tick a what-if switch or choose one of the seeds' mistakes to see what it changes",
            large_font=large,
        )
    queries, keys = axis_pieces(analysis, view.kind)
    legend = piece_legend(checkpoint.tokenizer, [*queries[row], *keys[row]])
    if legend:  # the marks on the axes, said where they appear
        summary.append(f"Pieces are written as the text they stand for: {legend}.")
    kv_line = shared_kv_line(record, view.head)
    if kv_line:
        summary.append(kv_line)
    n_padded = int(padded.sum())
    n_pad_keys = int((~keys_real).sum())
    if n_pad_keys:
        summary.append(
            f"**Padding is real here**: sentence {row + 1} is padded to the batch's length "
            f"({_plural(max(n_padded, n_pad_keys), 'padding position')}). Grey key columns are "
            f"what the padding mask removed; red {PAD_ROW_MARK} query rows are [PAD] "
            "queries: they attend normally, but the loss ignores their output."
        )
    elif n_padded:
        # The model's own pad token, as its rows show it (SmolLM2's <|im_end|>, GPT-2's
        # <|endoftext|>), not one family's named for every model.
        pad = checkpoint.tokenizer.id_to_token(config.pad_id) or str(config.pad_id)
        summary.append(
            f"Sentence {row + 1} is padded with {_plural(n_padded, 'position')} (red "
            f"{PAD_ROW_MARK} rows), but this model's pad token is a real token it does not mask "
            f"(it pads with {code_span(pad)}): those positions are read like any other, so "
            "compare unpadded sentences."
        )
    elif analysis.batch_size > 1:
        summary.append(
            f"Sentence {row + 1} is the longest of the {analysis.batch_size} sentences: it has no "
            "padding (a shorter one does; choose it with the Sentence slider)."
        )
    return single, masks, diff, "\n\n".join(summary)
