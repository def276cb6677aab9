"""Embeddings & positions tab: the sinusoidal positional encoding (heatmap, curves, similarity)
and a sentence's token embeddings plus positional encodings, as the model receives them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from transformer import figures
from transformer.embeddings import sinusoidal_table
from transformer.inspection import analyse

from ..errors import friendly
from ..inputs import as_float, as_int, as_int_list
from ..state import ModelRegistry, SessionModels, bind

MAX_CURVES = 12  # dimensions drawn as curves at once


@friendly
def positional(
    d_model: float, length: float, base: float, dims: str, metric: str, large: bool
) -> tuple[Any, Any, Any]:
    """The ``/positional_encoding`` endpoint: the (positions, d_model) table as a heatmap, the
    chosen dimensions as curves, and the position-by-position similarity."""
    d = as_int(d_model, "d_model", 2, 512)
    if d % 2:
        raise ValueError("d_model must be even (sin and cos come in pairs)")
    n = as_int(length, "positions", 1, 512)
    base = as_float(base, "base", 2, 1e9)
    chosen = as_int_list(dims, "dimensions")
    if not chosen or min(chosen) < 0 or max(chosen) >= d or len(chosen) > MAX_CURVES:
        raise ValueError(f"choose 1 to {MAX_CURVES} dimensions between 0 and {d - 1}")
    table = sinusoidal_table(n, d, base)
    return (
        figures.positional_encoding_figure(table, large_font=large),
        figures.positional_curves_figure(table, dims=tuple(chosen), large_font=large),
        figures.positional_similarity_figure(table, metric=metric, large_font=large),
    )


@friendly
def embeddings(
    registry: ModelRegistry, sentence: str, name: str, large: bool, session: SessionModels
) -> tuple[Any, Any]:
    """The ``/embeddings`` endpoint: a sentence's token embeddings, positional encodings and
    their sum as the model's first stack receives them, and the vectors' lengths."""
    checkpoint = registry.checkpoint(name, session)
    analysis = analyse(checkpoint.model, checkpoint.tokenizer, [sentence])
    stack = analysis.trace.source or analysis.trace.target
    pieces = (
        analysis.source_pieces[0]
        if analysis.trace.source is not None
        else analysis.target_pieces[0]
    )
    labels = figures.token_labels(pieces)
    return (
        figures.embedding_sum_figure(
            stack.token_embedding[0], stack.positional, labels, large_font=large
        ),
        figures.embedding_norms_figure(
            stack.token_embedding[0], stack.positional, labels, large_font=large
        ),
    )


def build(
    registry: ModelRegistry, large: gr.Checkbox, session: gr.State
) -> tuple[Callable, list, list]:
    """Lay out the tab; returns the positional-encoding handler, inputs and outputs (drawn on load)."""
    gr.Markdown(
        "Attention itself ignores order, so the paper **adds** a sinusoidal positional encoding to "
        "each token embedding: `PE[pos, 2i] = sin(pos / 10000^(2i/d))`, `PE[pos, 2i+1] = cos(…)`."
    )
    with gr.Row():
        d_model = gr.Slider(8, 512, value=128, step=8, label="d_model")
        length = gr.Slider(4, 512, value=64, step=1, label="positions")
        base = gr.Number(value=10000, label="base", minimum=2, maximum=1e6)
        dims = gr.Textbox(value="0, 1, 6, 20", label="dimensions to draw as curves")
        metric = gr.Radio(["cosine", "dot"], value="cosine", label="similarity")
    pe_button = gr.Button("Draw positional encodings", variant="primary")
    pe_plot = gr.Plot(label="Positional encoding")
    with gr.Row():
        curves_plot = gr.Plot(label="Chosen dimensions")
        similarity_plot = gr.Plot(label="PE·PE similarity")

    pe_inputs = [d_model, length, base, dims, metric, large]
    pe_outputs = [pe_plot, curves_plot, similarity_plot]
    pe_button.click(positional, pe_inputs, pe_outputs, api_name="positional_encoding")

    gr.Markdown("### A sentence: token embedding + positional encoding")
    with gr.Row():
        sentence = gr.Textbox(value="the small cat sees a red ball", label="Sentence")
        model_name = gr.Dropdown(registry.model_names, value=registry.model_names[0], label="Model")
    emb_button = gr.Button("Show the model's input")
    emb_plot = gr.Plot(label="Embedding, PE and their sum")
    norm_plot = gr.Plot(label="Vector lengths")
    emb_button.click(
        bind(embeddings, registry),
        [sentence, model_name, large, session],
        [emb_plot, norm_plot],
        api_name="embeddings",
    )
    return positional, pe_inputs, pe_outputs
