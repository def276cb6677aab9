"""Attention tab: one head (scores beside weights), the masks, every head of every layer, and
what-if switches recomputed beside the original pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from transformer import figures
from transformer.analysis import WHAT_IF_SWITCHES, axis_pieces, real_keys, reference_targets
from transformer.analysis import what_if as what_if_intervention
from transformer.checkpoint import Checkpoint
from transformer.inspection import Analysis, check_sentences
from transformer.trace import AttentionKind

from ..errors import friendly, gpu
from ..inputs import as_int
from ..state import ModelRegistry, SessionModels, bind

ATTENTION_KINDS: dict[str, AttentionKind] = {
    "encoder self-attention": "encoder_self",
    "decoder masked self-attention": "decoder_self",
    "cross-attention (decoder → encoder)": "cross",
}
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
    """The ``/attention`` endpoint: one head (scores beside weights), the masks, the what-if
    change of that head's weights and a summary."""
    what_if = what_if or []
    view = attention_view(registry, session, sentences, name, kind, layer, head, row)
    checkpoint = registry.checkpoint(name, session)
    config = checkpoint.config
    analysis, record, row = view.analysis, view.records[view.layer], view.row
    q_labels, k_labels = view.query_labels, view.key_labels
    single = figures.scores_and_weights_figure(
        record, row, view.head, q_labels, k_labels, large_font=large
    )
    trace = analysis.trace
    causal = trace.causal if view.kind == "decoder_self" else None
    masks = figures.masks_figure(
        real_keys(trace, view.kind, row), q_labels, k_labels, causal=causal, large_font=large
    )
    summary = (
        [f"**Sentence {i + 1}** → `{out}`" for i, out in enumerate(analysis.outputs)]
        if config.has_encoder and config.has_decoder
        else []
    )
    if what_if:
        intervention = what_if_intervention(what_if, head=(view.kind, view.layer, view.head))
        # The same decoder input as the plain pass, so the two are comparable position by position.
        targets = trace.target.tokens if (config.has_encoder and config.has_decoder) else None
        changed = registry.analysis(
            name, checkpoint, check_sentences(sentences.splitlines()), intervention, targets
        )
        before = record.weights[row, view.head]
        after = changed.trace.attention_records(view.kind)[view.layer].weights[row, view.head]
        switches = ", ".join(what_if)
        title = f"What changed with {switches} (layer {view.layer + 1}, head {view.head + 1})"
        delta = (changed.trace.logits - trace.logits).abs().max().item()
        summary.append(f"**What-if ({switches})**: largest change of any output logit {delta:.3f}.")
        if analysis.predicted:
            summary.append(
                f"Next-token predictions before: `{analysis.predicted[row]}` — after: `{changed.predicted[row]}`"
            )
        diff = figures.attention_difference_figure(
            before, after, q_labels, k_labels, title=title, large_font=large
        )
    else:
        diff = figures.placeholder_figure(
            "What-if", "Tick a what-if switch to see what it changes", large_font=large
        )
    summary.append(
        f"Padding is real here: the {analysis.batch_size} sentences are padded to one length, and grey "
        "cells are the ones a mask removed."
    )
    return single, masks, diff, "\n\n".join(summary)


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
    return figures.grid_figure(
        view.records, view.row, view.query_labels, view.key_labels, large_font=large
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


def build(registry: ModelRegistry, large: gr.Checkbox, session: gr.State) -> None:
    """Lay out the tab and wire its events (``/attention``, ``/attention_grid``)."""
    gr.Markdown(
        "Each head computes `softmax(QKᵀ/√d_k)V`. Rows are **queries** (the token that looks), "
        "columns are **keys** (the tokens looked at). Grey cells are masked."
    )
    with gr.Row():
        sentences = gr.Textbox(
            value=EXAMPLE_SENTENCES,
            lines=3,
            label="One to three sentences (one per line; different lengths make padding)",
        )
        with gr.Column():
            model_name = gr.Dropdown(
                registry.model_names, value=registry.model_names[0], label="Model"
            )
            kind = gr.Radio(
                list(ATTENTION_KINDS),
                value="cross-attention (decoder → encoder)",
                label="Which attention",
            )
    with gr.Row():
        layer = gr.Slider(1, 6, value=2, step=1, label="Layer")
        head = gr.Slider(1, 8, value=1, step=1, label="Head")
        row = gr.Slider(1, 3, value=1, step=1, label="Sentence")
    what_if = gr.CheckboxGroup(list(WHAT_IF_SWITCHES), label="What if… (recomputed live)")
    run = gr.Button("Show attention", variant="primary")
    summary = gr.Markdown()
    single = gr.Plot(label="One head: scores before softmax, weights after")
    grid_plot = gr.Plot(label="Every head of every layer (one colour scale)")
    with gr.Row():
        masks = gr.Plot(label="Masks")
        diff = gr.Plot(label="What-if: change in this head's weights")

    handler = bind(attention, registry)
    inputs = [sentences, model_name, kind, layer, head, row, what_if, large, session]
    outputs = [single, masks, diff, summary]
    grid_inputs = [sentences, model_name, kind, row, large, session]
    # The head view comes first; the grid follows from the same cached trace.
    run.click(handler, inputs, outputs, api_name="attention").success(
        bind(grid, registry), grid_inputs, [grid_plot], api_name="attention_grid"
    )
    what_if.change(handler, inputs, outputs, api_visibility="private")
    for slider in (layer, head):
        slider.release(handler, inputs, outputs, api_visibility="private")
    gr.Examples(
        [
            [
                "the small cat sees a red ball\na big dog sleeps",
                "translate",
                "cross-attention (decoder → encoder)",
            ],
            ["a b c d e f g h\nk l m", "reverse", "cross-attention (decoder → encoder)"],
            ["the teacher sees\na bird", "continue", "decoder masked self-attention"],
            ["my quiet mouse always waits on the green cat", "translate", "encoder self-attention"],
        ],
        [sentences, model_name, kind],
        label="Examples for a lecture",
    )
