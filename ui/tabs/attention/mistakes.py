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
from transformer.lab.effects import MistakeEffect, compare_passes, mistake_account
from transformer.lab.head_view import beside_titles, cannot_run_lines, head_view
from transformer.lab.inspection import Analysis, check_sentences
from transformer.lab.interventions import NO_INTERVENTION, Intervention
from transformer.lab.switches import Switch
from transformer.pretrained.checkpoint import Checkpoint

from ...serving.endpoints import takes_request
from ...serving.errors import InputError, friendly, gpu
from ...serving.state import ModelRegistry, SessionModels, bind
from .request import NO_MISTAKE, SEED_MISTAKES, MistakeRequest, changed_pass, describe_kind
from .view import attention_view

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
    analysis, error = changed_pass(registry, name, checkpoint, sentences, correct, base, mistake)
    if analysis is None:
        return BrokenPass(mistake, error=error)
    effect = compare_passes(correct, analysis, checkpoint.tokenizer, mistake)
    return BrokenPass(mistake, analysis=analysis, effect=effect)


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
    panel_titles, title, diff_title = beside_titles(
        mistake, mistake.axes_note(kind), describe_kind(kind), where
    )
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


def cannot_run(result: BrokenPass, large: bool) -> Any:
    """The change panel when the broken pass cannot run: no output, and where to read why."""
    title, line = cannot_run_lines(result.mistake)
    return figures.placeholder_figure(title, line, large_font=large)


@friendly
@gpu
@takes_request(MistakeRequest.read)
def panel(registry: ModelRegistry, request: MistakeRequest) -> tuple[Any, Any, str]:
    """One head under the broken pass beside the correct one, the change, and what the mistake
    did (figures for the sentence where it changed the output most)."""
    name, checkpoint, sentences = request.model, request.checkpoint, request.sentences
    config, large, switch = checkpoint.config, request.large, request.mistake
    view = attention_view(
        registry,
        request.session,
        sentences,
        name,
        request.kind_label,
        request.layer,
        request.head,
        1,
        checkpoint,
    )
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
    tokenizer = checkpoint.tokenizer
    if result.effect is None:
        record = view.records[view.layer]
        single = figures.scores_and_weights_figure(
            record, 0, view.head, view.query_labels, view.key_labels, large_font=large
        )
        account = mistake_account(switch, None, 0, error=result.error)
        return single, cannot_run(result, large), account
    row = result.effect.sentence
    # The same analysis, at the sentence whose output the mistake changed most.
    view = head_view(view.analysis, tokenizer, view.kind, view.layer, view.head, row)
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
        view.padded,
        f"sentence {row + 1}, layer {view.layer + 1}, head {view.head + 1}",
        view.kind,
        switch,
        large,
    )
    return single, diff, mistake_account(switch, result.effect, row, tokenizer=tokenizer)


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
