"""The seeds' mistakes, as a control any tab can hold: choose one mistake of the teaching texts
this project started from, and see the broken pass beside the correct one.

Used by the Attention tab (whose what-if panels draw the broken pass) and, standalone, through
:func:`build` and the module-level handlers :func:`choices` and :func:`panel`:

    mistakes.build(registry, model_name, sentences, kind, layer, head, large, session)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import gradio as gr

from transformer import figures
from transformer.core.config import ModelConfig
from transformer.core.trace import AttentionKind
from transformer.figures.attention import weights_beside_figure
from transformer.lab import switches
from transformer.lab.analysis import shown_pieces
from transformer.lab.effects import MistakeEffect, compare_passes
from transformer.lab.inspection import Analysis, check_sentences
from transformer.lab.interventions import NO_INTERVENTION, Intervention
from transformer.lab.switches import Switch
from transformer.pretrained.checkpoint import Checkpoint
from transformer.text.tokenization import Tokenizer

from ...serving.errors import InputError, code_span, friendly, gpu
from ...serving.state import ModelRegistry, SessionModels, bind
from .request import NO_MISTAKE, SEED_MISTAKES, describe_kind, seed_mistake
from .view import ATTENTION_KINDS, attention_view, padded_query_rows, same_input_pass

NONE = NO_MISTAKE
LABEL = "The seeds' mistakes (recomputed live)"
ALL_OFFERED = "One mistake of the texts this project started from, made in the forward pass."


def offered_mistakes(config: ModelConfig | None) -> tuple[Switch, ...]:
    """The seeds' mistakes (records) that change a model of ``config`` (every one when the
    model is not known)."""
    if config is None:
        return SEED_MISTAKES
    return switches.applicable(config, switches.SEED_MISTAKE)


def choices_for(config: ModelConfig | None) -> list[str]:
    """The menu for a model: "none", then the label of each mistake that changes this model."""
    return [NONE, *(s.label for s in offered_mistakes(config))]


def _info(config: ModelConfig | None) -> str:
    """The dropdown's line under its label: which mistakes do not apply here, and why."""
    if config is None:
        return ALL_OFFERED
    missing = [s for s in SEED_MISTAKES if not s.applies(config)]
    if not missing:
        return ALL_OFFERED
    listed = "; ".join(f"{s.label} (needs {s.requires})" for s in missing)
    return f"Not offered for this model: {listed}."


def control(config: ModelConfig | None) -> gr.Dropdown:
    """The "The seeds' mistakes" dropdown, offering what applies to ``config``'s model."""
    return gr.Dropdown(choices_for(config), value=NONE, label=LABEL, info=_info(config))


def menu(offered: Sequence[Switch], mistake: Switch | None) -> Any:
    """The dropdown for a model whose mistakes (catalogue records) are ``offered``: "none", then
    those, ``mistake`` chosen where it is one of them, else "none"; its line says which of the
    seeds' mistakes are not offered, and what they need."""
    missing = [s for s in SEED_MISTAKES if s not in offered]
    info = "; ".join(f"{s.label} (needs {s.requires})" for s in missing)
    return gr.Dropdown(
        choices=[NONE, *(s.label for s in offered)],
        value=mistake.label if mistake in offered and mistake is not None else NONE,
        info=f"Not offered for this model: {info}." if info else ALL_OFFERED,
    )


@friendly
def choices(registry: ModelRegistry, name: str, mistake: str | None, session: SessionModels) -> Any:
    """The dropdown for this model: only the mistakes that apply to it, the choice kept where it
    still applies (else "none")."""
    config = registry.checkpoint(name, session).config
    offered = choices_for(config)
    return gr.Dropdown(
        choices=offered, value=mistake if mistake in offered else NONE, info=_info(config)
    )


@dataclasses.dataclass
class BrokenPass:
    """The pass with one mistake made, and what it did; or, when the mistake cannot run on this
    input (cross-attention from the memory on unequal lengths), the reason as ``error``."""

    mistake: Switch
    analysis: Analysis | None = None
    effect: MistakeEffect | None = None
    error: str | None = None


def broken_pass(
    registry: ModelRegistry,
    name: str,
    checkpoint: Checkpoint,
    sentences: list[str],
    correct: Analysis,
    mistake: Switch,
    base: Intervention = NO_INTERVENTION,
) -> BrokenPass:
    """The pass over ``sentences`` with ``mistake`` made (on top of ``base``'s what-ifs), on the
    correct pass's decoder input, compared with ``correct``."""
    intervention = dataclasses.replace(base, mistakes=frozenset({mistake}))
    try:
        analysis = same_input_pass(registry, name, checkpoint, sentences, correct, intervention)
    except ValueError as error:
        if not mistake.may_refuse:
            raise
        # The shapes cannot work: that is what this mistake does here, not a bad input.
        return BrokenPass(mistake, error=str(error))
    effect = compare_passes(correct, analysis, checkpoint.tokenizer, mistake)
    return BrokenPass(mistake, analysis=analysis, effect=effect)


def _shown(tokenizer: Tokenizer | None, pieces: list[str]) -> list[str]:
    """A sentence's pieces as every view writes them (␣cat, 美[1/3]) when the tokenizer is
    known."""
    return shown_pieces(tokenizer, pieces) if tokenizer is not None else pieces


def _seeds(seed: str) -> str:
    """``"004"`` → "seed 004"; ``"003, 004"`` → "seeds 003 and 004"."""
    numbers = [n.strip() for n in seed.split(",")]
    if len(numbers) == 1:
        return f"seed {numbers[0]}"
    return f"seeds {', '.join(numbers[:-1])} and {numbers[-1]}"


def _changed_count(effect: MistakeEffect) -> str:
    n, total = sum(effect.changed), len(effect.changed)
    if total == 1:
        return "the prediction changed" if n else "no prediction changed"
    return f"predictions changed in {n} of {total} sentences"


def describe(
    result: BrokenPass,
    config: ModelConfig,
    row: int,
    also: str = "",
    tokenizer: Tokenizer | None = None,
) -> str:
    """Markdown: where the mistake came from, why it is wrong, and what it did here (the
    largest logit change, where, and sentence ``row``'s predictions before → after).
    ``also`` names other what-ifs that were on in the same pass."""
    mistake = result.mistake
    lines = [
        f"**Mistake of {_seeds(mistake.seed)}: {mistake.label}.** {mistake.origin}",
        f"*Why it is wrong:* {mistake.explanation}",
    ]
    if result.error is not None:
        lines.append(f"**What it does here:** {result.error}")
        return "\n\n".join(lines)
    effect = result.effect
    assert effect is not None
    with_also = f" (with {also})" if also else ""
    broken_trace = effect.broken.trace
    # The sentence whose output changed most, as its figures write it: an encoder-only model's
    # source, else the decoder's input.
    encoder_only = config.architecture == "encoder-only"
    read = effect.correct.source_pieces if encoder_only else effect.correct.target_pieces
    pieces = _shown(tokenizer, read[effect.sentence])
    if encoder_only:
        lines.append(
            f"**What it did here{with_also}:** largest change of any encoder output "
            f"{effect.largest_hidden_change:.3f}; of the tied read-out's logits "
            f"{effect.largest_change:.3f} (sentence {effect.sentence + 1}, token "
            f"{effect.position}: {code_span(pieces[effect.position])})."
        )
        before, after = effect.tokens_before[row], effect.tokens_after[row]
        n = sum(b != a for b, a in zip(before, after, strict=True))
        lines.append(
            f"Read out through the tied embedding, {n} of {len(before)} output vectors of "
            f"sentence {row + 1} now read as another token."
        )
    else:
        reads = pieces[effect.position]
        lines.append(
            f"**What it did here{with_also}:** largest change of any output logit "
            f"{effect.largest_change:.3f} (sentence {effect.sentence + 1}, decoder position "
            f"{effect.position}, input {code_span(reads)}); {_changed_count(effect)}."
        )
        said, says = effect.predicted_before[row], effect.predicted_after[row]
        arrow = "→" if effect.changed[row] else "→ (unchanged)"
        lines.append(
            f"Next-token predictions of sentence {row + 1}: {code_span(said)} {arrow} "
            f"{code_span(says)}"
        )
    if broken_trace.logits.isnan().any():
        lines.append("⚠️ The broken pass produced NaN somewhere.")
    return "\n\n".join(lines)


def beside(
    correct: Any,
    broken: Any,
    masked_correct: Any,
    masked_broken: Any,
    query_labels: list[str],
    key_labels: list[str],
    padded: Any,
    where: str,
    kind: AttentionKind,
    mistake: Switch,
    large: bool,
) -> tuple[Any, Any]:
    """One head's weights of ``kind`` attention, correct beside broken, and their difference:
    two figures."""
    panel_titles, title, diff_title = beside_titles(mistake, kind, where)
    single = weights_beside_figure(
        correct,
        broken,
        query_labels,
        key_labels,
        masked_before=masked_correct,
        masked_after=masked_broken,
        panel_titles=panel_titles,
        title=title,
        padded_queries=padded,
        large_font=large,
    )
    diff = figures.attention_difference_figure(
        correct,
        broken,
        query_labels,
        key_labels,
        masked=masked_correct & masked_broken,
        title=diff_title,
        large_font=large,
    )
    return single, diff


def beside_titles(
    mistake: Switch, kind: AttentionKind, where: str
) -> tuple[tuple[str, str], str, str]:
    """The titles of one head correct beside broken at ``where`` ("layer 2, head 1"): its two
    panels' (the broken one saying how to read its axes where the mistake changes them), the
    figure's, and the difference's."""
    axes = mistake.axes_note(kind)
    note = f" ({axes})" if axes else ""
    return (
        ("correct", f"with “{mistake.label}”{note}"),
        f"{describe_kind(kind)} · {where} · weights, correct | with the mistake",
        f"What the mistake changed (broken − correct), {where}",
    )


def cannot_run(result: BrokenPass, large: bool) -> Any:
    """The change panel when the broken pass cannot run: no output, and where to read why."""
    title, line = cannot_run_lines(result.mistake)
    return figures.placeholder_figure(title, line, large_font=large)


def cannot_run_lines(mistake: Switch) -> tuple[str, str]:
    """The title and line of the change panel when ``mistake``'s broken pass cannot run."""
    return (
        f"With “{mistake.label}”: no output",
        "The shapes clash, so the broken pass stops here: the text above says why.",
    )


@friendly
@gpu
def panel(
    registry: ModelRegistry,
    name: str,
    sentences: str,
    kind: str,
    layer: Any,
    head: Any,
    mistake: str | None,
    large: bool,
    session: SessionModels,
) -> tuple[Any, Any, str]:
    """One head under the broken pass beside the correct one, the change, and what the mistake
    did (figures for the sentence where it changed the output most)."""
    # The tab may name the kind by its menu label, by the trace's name ("encoder_self"), or by
    # the stack whose self-attention it shows ("encoder", "decoder": Inside a layer).
    kind = {"encoder": "encoder_self", "decoder": "decoder_self"}.get(kind, kind)
    label_of: dict[str, str] = {k: label for label, k in ATTENTION_KINDS.items()}
    kind = label_of.get(kind, kind)
    checkpoint = registry.checkpoint(name, session)
    config = checkpoint.config
    view = attention_view(registry, session, sentences, name, kind, layer, head, 1, checkpoint)
    # The menu's label becomes its record here, once; nothing below reads a label.
    switch = seed_mistake(mistake)
    if switch is None:
        note = "Choose one of the seeds' mistakes to see the broken pass beside the correct one."
        fig = figures.placeholder_figure("The seeds' mistakes", note, large_font=large)
        return fig, figures.placeholder_figure("", "", large_font=large), note
    if not switch.applies(config):
        raise InputError(
            f"“{switch.label}” does not apply to this {config.architecture} model: it needs "
            f"{switch.requires}"
        )
    lines = check_sentences((sentences or "").splitlines())
    result = broken_pass(registry, name, checkpoint, lines, view.analysis, switch)
    if result.effect is None:
        record = view.records[view.layer]
        single = figures.scores_and_weights_figure(
            record, 0, view.head, view.query_labels, view.key_labels, large_font=large
        )
        return (
            single,
            cannot_run(result, large),
            describe(result, config, 0, tokenizer=checkpoint.tokenizer),
        )
    row = result.effect.sentence
    view = attention_view(
        registry, session, sentences, name, kind, layer, head, row + 1, checkpoint
    )
    record = view.records[view.layer]
    assert result.analysis is not None  # it has an effect, so it ran
    broken_record = result.analysis.trace.attention_records(view.kind)[view.layer]
    single, diff = beside(
        record.weights[row, view.head],
        broken_record.weights[row, view.head],
        ~record.mask[row, 0],
        ~broken_record.mask[row, 0],
        view.query_labels,
        view.key_labels,
        padded_query_rows(view.analysis, view.kind, row),
        f"sentence {row + 1}, layer {view.layer + 1}, head {view.head + 1}",
        view.kind,
        switch,
        large,
    )
    return single, diff, describe(result, config, row, tokenizer=checkpoint.tokenizer)


def build(
    registry: ModelRegistry,
    model_name: Any,
    sentences: Any,
    kind: Any,
    layer: Any,
    head: Any,
    large: Any,
    session: Any,
    refitted: Sequence[Any] = (),
) -> dict[str, Any]:
    """Lay out the panel (the dropdown, the text, the head correct | broken, the change) under
    a tab's own inputs and wire it: a change of the model refits the menu, any input redraws.
    ``refitted``: the tab's events that fit its controls to a newly chosen model; the panel
    follows those (it reads the controls only once they fit), else the model's ``.change``.

    Returns the components by name: ``mistake``, ``text``, ``single``, ``diff``.
    """
    try:
        config = registry.checkpoint(registry.model_names[0], None).config
    except ValueError:
        config = None
    mistake = control(config)
    text = gr.Markdown()
    single = gr.Plot(label="One head: correct | with the mistake", show_label=False)
    diff = gr.Plot(label="What the mistake changed", show_label=False)
    inputs = [model_name, sentences, kind, layer, head, mistake, large, session]
    outputs = [single, diff, text]
    draw = bind(panel, registry)
    private: dict[str, Any] = {"api_visibility": "private"}
    # A redraw started with the model's own change would read the old model's stack or layer,
    # which the tab's refit is about to change (gradio refuses it: "not in the list of choices").
    starts = [event.then for event in refitted] or [model_name.change]
    for start in starts:
        start(
            bind(choices, registry), [model_name, mistake, session], [mistake], **private
        ).success(draw, inputs, outputs, **private)
    for trigger in (mistake.select, sentences.change, kind.change, layer.change, head.change):
        trigger(draw, inputs, outputs, trigger_mode="always_last", **private)
    large.change(draw, inputs, outputs, **private)
    return {"mistake": mistake, "text": text, "single": single, "diff": diff}
