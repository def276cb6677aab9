"""Attention tab: one head (scores beside weights), the masks, every head of every layer, and
what-if switches recomputed beside the original pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from transformer import figures
from transformer.analysis import (
    WHAT_IF_SWITCHES,
    axis_pieces,
    real_keys,
    reference_targets,
    unreadable_characters,
)
from transformer.analysis import what_if as what_if_intervention
from transformer.checkpoint import Checkpoint
from transformer.figures.attention import GRID_MAX_CELLS, PAD_ROW_MARK, weights_beside_figure
from transformer.inspection import MAX_SENTENCES, Analysis, check_sentences
from transformer.trace import AttentionKind

from ..errors import friendly, gpu
from ..inputs import as_int
from ..state import ModelRegistry, SessionModels, bind

ATTENTION_KINDS: dict[str, AttentionKind] = {
    "encoder self-attention": "encoder_self",
    "decoder masked self-attention": "decoder_self",
    "cross-attention (decoder → encoder)": "cross",
}
# The fewest cells a grid keeps however long the text (a 6 x 12 grid: ~45 x 45 per tile).
GRID_MIN_CELLS = 150_000
EXAMPLE_SENTENCES = (
    "the small cat sees a red ball\na big dog sleeps\nmy old bird eats the green cake"
)


@dataclass
class AttentionView:
    """One captured analysis and the layer, head and sentence a view draws (all 0-based)."""

    analysis: Analysis
    kind: AttentionKind
    records: list
    layer: int
    head: int
    row: int
    query_labels: list[str]
    key_labels: list[str]


def attention_view(
    registry: ModelRegistry,
    session: SessionModels,
    sentences_text: str,
    name: str,
    kind_label: str,
    layer: Any,
    head: Any,
    row: Any,
    checkpoint: Checkpoint | None = None,
    use_reference: bool = False,
) -> AttentionView:
    """The analysis behind every attention view (cached for bundled models) and the validated
    layer, head and sentence.

    With ``use_reference`` the decoder reads the task's correct answer (teacher forcing) instead
    of the model's own output: an early training snapshot's output is too poor to read along.
    """
    checkpoint = checkpoint or registry.checkpoint(name, session)
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    sentences = check_sentences((sentences_text or "").splitlines())
    kind = ATTENTION_KINDS.get(kind_label)
    if kind is None:
        raise ValueError(f"choose one of {list(ATTENTION_KINDS)}")
    targets = None
    if use_reference and config.has_encoder and config.has_decoder:
        targets = reference_targets(tokenizer, checkpoint.task, sentences, config.pad_id)
    analysis = registry.analysis(name, checkpoint, sentences, targets=targets)
    try:
        records = analysis.trace.attention_records(kind)
    except ValueError:
        raise ValueError(
            f"the {name} model is {config.architecture}: it has no {kind_label}"
        ) from None
    row_index = as_int(row, "sentence", 1, analysis.batch_size) - 1
    queries, keys = axis_pieces(analysis, kind)
    return AttentionView(
        analysis=analysis,
        kind=kind,
        records=records,
        layer=as_int(layer, "layer", 1, len(records)) - 1,
        head=as_int(head, "head", 1, config.n_heads) - 1,
        row=row_index,
        query_labels=figures.token_labels(queries[row_index]),
        key_labels=figures.token_labels(keys[row_index]),
    )


def kinds_for(config: Any) -> list[str]:
    """The attention kinds (their menu labels) a model of this architecture has."""
    have = {
        "encoder-only": {"encoder_self"},
        "decoder-only": {"decoder_self"},
    }.get(config.architecture, {"encoder_self", "decoder_self", "cross"})
    return [label for label, kind in ATTENTION_KINDS.items() if kind in have]


def layers_of(config: Any, kind: AttentionKind) -> int:
    """How many layers hold attention of ``kind``."""
    return config.n_encoder_layers if kind == "encoder_self" else config.n_decoder_layers


def sentence_count(sentences_text: str | None) -> int:
    """The non-empty lines given (what the Sentence slider ranges over), at least 1."""
    return max(1, len([line for line in (sentences_text or "").splitlines() if line.strip()]))


def _clamp(value: Any, high: int) -> int:
    try:
        return min(max(1, int(float(value))), high)
    except (TypeError, ValueError, OverflowError):
        return 1


@friendly
def controls(
    registry: ModelRegistry,
    sentences: str,
    name: str,
    kind: str,
    layer: Any,
    head: Any,
    row: Any,
    session: SessionModels,
) -> tuple[Any, Any, Any, Any]:
    """The Which-attention choices and the Layer, Head and Sentence ranges that this model and
    these sentences have (values kept where they still apply)."""
    config = registry.checkpoint(name, session).config
    kinds = kinds_for(config)
    if kind not in kinds:
        # Cross-attention is the one an encoder-decoder model is best known for.
        kind = kinds[-1]
    n_layers = layers_of(config, ATTENTION_KINDS[kind])
    n_rows = min(sentence_count(sentences), MAX_SENTENCES)
    return (
        gr.Radio(choices=kinds, value=kind),
        _slider(n_layers, layer),
        _slider(config.n_heads, head),
        _slider(n_rows, row),
    )


def _slider(n: int, value: Any) -> Any:
    """A 1..n slider update; hidden when there is only one choice (a slider needs two)."""
    return gr.Slider(minimum=1, maximum=max(n, 2), value=_clamp(value, n), visible=n > 1)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def padded_query_rows(analysis: Analysis, kind: AttentionKind, row: int) -> Any:
    """``(Tq,)`` bool, ``True`` for the [PAD] query rows of ``kind`` in sentence ``row``: the
    run of padding ids that ends the (right-padded) sequence. A model whose pad token is a real
    token (GPT-2's ``<|endoftext|>``) does not mask these, but they are padding all the same."""
    stack = analysis.trace.source if kind == "encoder_self" else analysis.trace.target
    tokens = stack.tokens[row].cpu()
    is_pad = tokens == analysis.trace.config.pad_id
    # Trailing pads only: a decoder's first token may be the pad id (Marian, GPT-2 start there).
    trailing = is_pad.flip(0).cumprod(0).flip(0).bool()
    trailing[0] = False
    return trailing | ~stack.real_tokens[row].cpu()


def _head_panels(
    registry: ModelRegistry,
    view: AttentionView,
    checkpoint: Checkpoint,
    name: str,
    sentences: str,
    what_if: list[str],
    large: bool,
) -> tuple[Any, Any, Any, str]:
    """The head view, the masks, the what-if difference and the summary of one view."""
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
        summary += [f"**Sentence {i + 1}** → `{out}`" for i, out in enumerate(analysis.outputs)]
    lines = check_sentences((sentences or "").splitlines())
    for number, line in enumerate(lines, 1):
        unknown = unreadable_characters(checkpoint.tokenizer, line)
        if unknown:
            listed = ", ".join(f"`{c}`" for c in unknown)
            summary.append(
                f"⚠️ Sentence {number}: this model cannot read {listed}: "
                f"{'it reads' if len(unknown) == 1 else 'each reads'} as [UNK]."
            )
    if what_if:
        intervention = what_if_intervention(what_if, head=(view.kind, view.layer, view.head))
        # The same decoder input as the plain pass, so the two are comparable position by position.
        targets = trace.target.tokens if (config.has_encoder and config.has_decoder) else None
        changed = registry.analysis(name, checkpoint, lines, intervention, targets)
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
        mask_changed = bool((masked_before != masked_after).any())
        masks = figures.masks_figure(
            keys_real,
            q_labels,
            k_labels,
            causal=causal,
            changed=changed_record.mask[row, 0] if mask_changed else None,
            changed_title="with the what-if",
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
        if config.architecture == "encoder-only":
            delta = (changed.trace.memory - trace.memory).abs().max().item()
            summary.append(
                f"**What-if ({switches})**: largest change of any encoder output {delta:.3f}."
            )
        else:
            delta = (changed.trace.logits - trace.logits).abs().max().item()
            summary.append(
                f"**What-if ({switches})**: largest change of any output logit {delta:.3f}."
            )
        if analysis.predicted:
            summary.append(
                f"Next-token predictions before: `{analysis.predicted[row]}` — "
                f"after: `{changed.predicted[row]}`"
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
            "What-if", "Tick a what-if switch to see what it changes", large_font=large
        )
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
        summary.append(
            f"Sentence {row + 1} is padded with {_plural(n_padded, 'position')} (red "
            f"{PAD_ROW_MARK} rows), but this model's pad token is a real token it does not mask "
            "(GPT-2 pads with <|endoftext|>): those positions are read like any other, so compare "
            "unpadded sentences."
        )
    elif analysis.batch_size > 1:
        summary.append(
            f"Sentence {row + 1} is the longest of the {analysis.batch_size} sentences: it has no "
            "padding (a shorter one does; choose it with the Sentence slider)."
        )
    return single, masks, diff, "\n\n".join(summary)


def _describe(kind: AttentionKind) -> str:
    return {label: k for k, label in ATTENTION_KINDS.items()}[kind].capitalize()


@friendly
@gpu
def attention(
    registry: ModelRegistry,
    sentences: str,
    name: str,
    kind: str,
    layer: Any,
    head: Any,
    row: Any,
    what_if: list[str] | None,
    large: bool,
    session: SessionModels,
) -> tuple[Any, Any, Any, str]:
    """The ``/attention`` endpoint: one head (scores beside weights; with a what-if, the
    original weights beside the changed ones), the masks, the what-if change of that head's
    weights and a summary."""
    view = attention_view(registry, session, sentences, name, kind, layer, head, row)
    checkpoint = registry.checkpoint(name, session)
    return _head_panels(registry, view, checkpoint, name, sentences, what_if or [], large)


@friendly
@gpu
def everything(
    registry: ModelRegistry,
    sentences: str,
    name: str,
    kind: str,
    layer: Any,
    head: Any,
    row: Any,
    what_if: list[str] | None,
    large: bool,
    session: SessionModels,
) -> tuple[Any, Any, Any, str, Any]:
    """Every panel of the tab from one cached analysis: what each control redraws."""
    view = attention_view(registry, session, sentences, name, kind, layer, head, row)
    checkpoint = registry.checkpoint(name, session)
    panels = _head_panels(registry, view, checkpoint, name, sentences, what_if or [], large)
    return (*panels, _grid(view, large))


def attention_grid(
    registry: ModelRegistry,
    session: SessionModels,
    sentences_text: str,
    name: str,
    kind_label: str,
    row: Any,
    large: bool,
    checkpoint: Checkpoint | None = None,
    use_reference: bool = False,
) -> Any:
    """Every head of every layer of one attention kind, on one colour scale."""
    view = attention_view(
        registry, session, sentences_text, name, kind_label, 1, 1, row, checkpoint, use_reference
    )
    return _grid(view, large)


def _grid(view: AttentionView, large: bool) -> Any:
    """The grid of one view. Its cell budget leaves room for the single head (float32, exact,
    two grid cells' bytes per cell) that ships in the same response: together under 3 MB."""
    n_queries, n_keys = view.records[0].weights.shape[-2:]
    budget = max(GRID_MIN_CELLS, GRID_MAX_CELLS - 2 * n_queries * n_keys)
    return figures.grid_figure(
        view.records,
        view.row,
        view.query_labels,
        view.key_labels,
        max_cells=budget,
        padded_queries=padded_query_rows(view.analysis, view.kind, view.row),
        large_font=large,
    )


@friendly
@gpu
def grid(
    registry: ModelRegistry,
    sentences: str,
    name: str,
    kind: str,
    row: Any,
    large: bool,
    session: SessionModels,
) -> Any:
    """The ``/attention_grid`` endpoint: every head of every layer of one attention kind."""
    return attention_grid(registry, session, sentences, name, kind, row, large)


def _first_view(registry: ModelRegistry, name: str, kind: str) -> tuple[Any, ...]:
    """What the tab shows when it opens: every panel of its first example (built once, at
    start; a bundled model takes milliseconds). Empty panels if the model is unavailable."""
    try:
        return everything(
            registry, EXAMPLE_SENTENCES, name, kind, 2, 1, 1, [], False, SessionModels()
        )
    except gr.Error:
        return (None, None, None, "", None)


def build(registry: ModelRegistry, large: gr.Checkbox, session: gr.State) -> None:
    """Lay out the tab and wire its events (``/attention``, ``/attention_grid``; every control
    redraws every panel that depends on it through private events)."""
    gr.Markdown(
        "Each head computes `softmax(QKᵀ/√d_k)V`. Rows are **queries** (the token that looks), "
        "columns are **keys** (the tokens looked at). Grey cells are masked."
    )
    first_model = registry.model_names[0]
    try:
        first_config = registry.checkpoint(first_model, None).config
    except ValueError:
        first_config = None
    kinds = kinds_for(first_config) if first_config else list(ATTENTION_KINDS)
    first_kind = kinds[-1]
    n_layers = layers_of(first_config, ATTENTION_KINDS[first_kind]) if first_config else 6
    n_heads = first_config.n_heads if first_config else 8
    n_rows = sentence_count(EXAMPLE_SENTENCES)
    first = _first_view(registry, first_model, first_kind)
    with gr.Row():
        sentences = gr.Textbox(
            value=EXAMPLE_SENTENCES,
            lines=3,
            label="One to three sentences (one per line; different lengths make padding)",
        )
        with gr.Column():
            model_name = gr.Dropdown(registry.model_names, value=first_model, label="Model")
            kind = gr.Radio(kinds, value=first_kind, label="Which attention")
    with gr.Row():
        layer = gr.Slider(
            1,
            max(2, n_layers),
            value=min(2, n_layers),
            step=1,
            label="Layer",
            visible=n_layers > 1,
        )
        head = gr.Slider(1, max(2, n_heads), value=1, step=1, label="Head", visible=n_heads > 1)
        row = gr.Slider(1, max(2, n_rows), value=1, step=1, label="Sentence", visible=n_rows > 1)
    what_if = gr.CheckboxGroup(list(WHAT_IF_SWITCHES), label="What if… (recomputed live)")
    run = gr.Button("Show attention", variant="primary")
    summary = gr.Markdown(first[3])
    single = gr.Plot(
        first[0], label="One head: scores before softmax, weights after", show_label=False
    )
    diff = gr.Plot(first[2], label="What-if: change in this head's weights", show_label=False)
    masks = gr.Plot(first[1], label="Masks", show_label=False)
    grid_plot = gr.Plot(
        first[4], label="Every head of every layer (one colour scale)", show_label=False
    )

    handler = bind(attention, registry)
    inputs = [sentences, model_name, kind, layer, head, row, what_if, large, session]
    outputs = [single, masks, diff, summary]
    grid_inputs = [sentences, model_name, kind, row, large, session]
    # The head view comes first; the grid follows from the same cached trace.
    run.click(handler, inputs, outputs, api_name="attention").success(
        bind(grid, registry), grid_inputs, [grid_plot], api_name="attention_grid"
    )

    # Live: every control redraws every panel that depends on it. Controls that change what
    # applies (model, sentences, kind) first fit the choices and ranges, then redraw.
    control_inputs = [sentences, model_name, kind, layer, head, row, session]
    control_outputs = [kind, layer, head, row]
    redraw = bind(everything, registry)
    all_outputs = [single, masks, diff, summary, grid_plot]
    private = {"api_visibility": "private"}

    refit = bind(controls, registry)
    for trigger in (model_name.input, kind.input):
        trigger(refit, control_inputs, control_outputs, **private).success(
            redraw, inputs, all_outputs, **private
        )
    sentences.input(
        refit, control_inputs, control_outputs, trigger_mode="always_last", **private
    ).success(redraw, inputs, all_outputs, **private)
    for slider in (layer, head, row):
        slider.release(redraw, inputs, all_outputs, **private)
    what_if.input(redraw, inputs, all_outputs, **private)
    large.change(redraw, inputs, all_outputs, **private)

    examples = [
        [
            "the small cat sees a red ball\na big dog sleeps",
            "translate",
            "cross-attention (decoder → encoder)",
        ],
        ["a b c d e f g h\nk l m", "reverse", "cross-attention (decoder → encoder)"],
        ["the teacher sees\na bird", "continue", "decoder masked self-attention"],
        ["my quiet mouse always waits on the green cat", "translate", "encoder self-attention"],
        [
            "The cat sat on the mat because it was tired.\nIt slept.",
            "all-MiniLM-L6-v2",
            "encoder self-attention",
        ],
    ]
    names = set(registry.model_names)
    rows = gr.Examples(
        [example for example in examples if example[1] in names],
        [sentences, model_name, kind],
        label="Examples for a lecture (click one to show it)",
    )
    rows.load_input_event.success(refit, control_inputs, control_outputs, **private).success(
        redraw, inputs, all_outputs, **private
    )
