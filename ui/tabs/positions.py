"""Embeddings & positions tab: the sinusoidal positional encoding (heatmap, curves, similarity)
beside a model's learned position embeddings (MiniLM's, GPT-2's), and a sentence's token
embeddings plus positions as the model's first layer receives them.

Every control redraws the panels that depend on it (and Large font redraws every plot); the
buttons stay for the API endpoints (``/positional_encoding``, ``/embeddings``). Each section's
controls are read and checked once into its request (:class:`PositionalRequest`,
:class:`ModelPositionsRequest`, :class:`SentenceRequest`), from which
:func:`ui.serving.endpoints.takes_request` makes its handlers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

import gradio as gr
import numpy as np
import torch
from gradio.context import Context

from transformer import figures
from transformer.core.embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_table,
)
from transformer.core.rotary import scaled_frequencies
from transformer.figures.positional import readable_number
from transformer.lab.analysis import shown_pieces
from transformer.pretrained.checkpoint import Checkpoint

from ..serving.endpoints import takes_request
from ..serving.errors import InputError, beside_input, friendly
from ..serving.inputs import as_choice, as_float, as_int, as_int_list, as_text
from ..serving.state import TRAINED_HERE, ModelRegistry, SessionModels, bind

MAX_CURVES = 12  # dimensions drawn as curves at once
MAX_BASE = 1e9

Metric = Literal["cosine", "dot"]  # the similarity menu's values


def _load_trigger() -> list:
    """The app's load event as a trigger, so a panel is drawn when the page opens (none when
    built outside a Blocks)."""
    root = Context.root_block
    return [root.load] if root is not None else []


def pe_caption(base: float, d_model: int) -> str:
    """The formula with the chosen ``base`` written in, and what the base changes."""
    b = readable_number(base)
    longest = 2 * np.pi * base ** ((d_model - 2) / d_model)
    return (
        f"`PE[pos, 2i] = sin(pos / {b}^(2i/{d_model}))`, `PE[pos, 2i+1] = cos(pos / {b}^(2i/{d_model}))` "
        f"with base **{b}** (the paper's is 10,000). Wavelengths run from 2π (dimensions 0 and 1) "
        f"to {readable_number(longest)} (the last pair): a larger base stretches the slow dimensions."
    )


@dataclass(frozen=True)
class PositionalRequest:
    """The sinusoidal section's controls as one value, checked once: the layout's components
    fill :meth:`of` (the ``/positional_encoding`` API signature) and the handlers receive it."""

    d_model: int
    length: int
    base: float
    dims: tuple[int, ...]
    metric: Metric
    large: bool

    @classmethod
    def of(
        cls, d_model: Any, length: Any, base: Any, dims: Any, metric: Any, large: Any
    ) -> PositionalRequest:
        """The checked request, or `InputError` naming the value to fix."""
        d = as_int(d_model, "d_model", 2, 512)
        if d % 2:
            raise InputError("d_model must be even (sin and cos come in pairs)")
        n = as_int(length, "positions", 1, 512)
        chosen = as_int_list(dims, "dimensions")
        if not chosen or min(chosen) < 0 or max(chosen) >= d or len(chosen) > MAX_CURVES:
            raise InputError(
                f"dimensions to draw: choose 1 to {MAX_CURVES} whole numbers between 0 and {d - 1}"
            )
        similarity = cast(Metric, as_choice(metric, "similarity", get_args(Metric)))
        base_value = as_float(base, "base", 2, MAX_BASE)
        return cls(d, n, base_value, tuple(chosen), similarity, bool(large))


def _positional_figures(request: PositionalRequest) -> tuple[Any, Any, Any]:
    base, large = request.base, request.large
    table = sinusoidal_table(request.length, request.d_model, base)
    return (
        figures.positional_encoding_figure(
            table,
            title=f"Sinusoidal positional encoding PE[pos, dim], base {readable_number(base)}",
            large_font=large,
        ),
        figures.positional_curves_figure(
            table,
            dims=request.dims,
            base=base,
            title=f"Chosen dimensions over position (base {readable_number(base)})",
            large_font=large,
        ),
        figures.positional_similarity_figure(
            table, metric=request.metric, what="Sinusoidal encodings", large_font=large
        ),
    )


def _no_model(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """An endpoint made by :func:`takes_request` bound to no registry: the sinusoidal section
    draws a formula, no model (its events and callers send the controls' values alone)."""
    return bind(endpoint, None)


@_no_model
@friendly
@takes_request(PositionalRequest.of)
def positional(_registry: None, request: PositionalRequest) -> tuple[Any, Any, Any]:
    """The ``/positional_encoding`` endpoint: the (positions, d_model) table as a heatmap, the
    chosen dimensions as curves, and the position-by-position similarity."""
    return _positional_figures(request)


@_no_model
@friendly
@takes_request(PositionalRequest.of)
def positional_view(_registry: None, request: PositionalRequest) -> tuple[Any, Any, Any, str]:
    """The live view of the sinusoidal section: the ``/positional_encoding`` plots and the
    caption with the chosen base."""
    return (*_positional_figures(request), pe_caption(request.base, request.d_model))


@dataclass(frozen=True)
class ModelPositionsRequest:
    """A model's positions, asked for by the right-hand column's controls and read once: the
    model looked up (``checkpoint``), the first ``length`` positions, the similarity."""

    name: str
    checkpoint: Checkpoint
    length: int
    metric: Metric
    large: bool

    @classmethod
    def of(
        cls,
        registry: ModelRegistry,
        name: Any,
        large: Any = False,
        session: SessionModels | None = None,
        length: Any = 64,
        metric: Any = "cosine",
    ) -> ModelPositionsRequest:
        """The checked request, or `InputError` naming the value to fix. The model first, then
        what the learned positions' view adds (:data:`LEARNED_VALUES` is its order); the
        rotating pair sends the model alone: it draws one pair at eight positions."""
        n = as_int(length, "positions", 1, 512)
        checkpoint = registry.checkpoint(name, session)
        similarity = cast(Metric, as_choice(metric, "similarity", get_args(Metric)))
        return cls(name, checkpoint, n, similarity, bool(large))


LEARNED_VALUES = ("name", "length", "metric", "large", "session")
"""The order the learned positions' view sends its values in."""


@dataclass(frozen=True)
class SentenceRequest:
    """The sentence section's controls, read once: the sentence, the model looked up."""

    sentence: str
    name: str
    checkpoint: Checkpoint
    large: bool

    @classmethod
    def of(
        cls,
        registry: ModelRegistry,
        sentence: Any,
        name: Any,
        large: Any,
        session: SessionModels | None,
    ) -> SentenceRequest:
        """The checked request (the ``/embeddings`` API signature), or `InputError`."""
        text = as_text(sentence, "sentence")
        return cls(text, name, registry.checkpoint(name, session), bool(large))


def position_table(checkpoint: Checkpoint) -> tuple[torch.Tensor, bool]:
    """A model's ``(max_len, d_model)`` position table (learned weights, or its sinusoidal
    buffer) and whether it is learned."""
    model = checkpoint.model
    module = model.src_positional if model.config.has_encoder else model.tgt_positional
    if isinstance(module, LearnedPositionalEmbedding):
        return module.lookup.weight.detach().float().cpu(), True
    assert isinstance(module, SinusoidalPositionalEncoding)  # the only other positional kind
    return module.table.detach().float().cpu(), False


@friendly
@takes_request(ModelPositionsRequest.of, LEARNED_VALUES, optional=True)
def learned_positions(
    registry: ModelRegistry, request: ModelPositionsRequest
) -> tuple[Any, Any, str]:
    """A model's position embeddings (the first ``length`` positions) as a heatmap, their
    position-by-position similarity, and a caption saying what they are."""
    name, n, large, config = request.name, request.length, request.large, request.checkpoint.config
    if config.positional == "rotary":
        return rotary_positions(name, config, n, large)
    table, learned = position_table(request.checkpoint)
    total, d = table.shape
    shown = table[: min(n, total)]
    kind = "learned position embeddings" if learned else "sinusoidal table (fixed, not learned)"
    heatmap = figures.positional_encoding_figure(
        shown,
        title=f"{name}: {kind}",
        large_font=large,
        zmax=None if learned else 1.0,
    )
    similarity = figures.positional_similarity_figure(
        shown, metric=request.metric, what=f"{name}'s positions", large_font=large
    )
    count = (
        f"the first {len(shown):,} of its {total:,} positions"
        if len(shown) < total
        else (f"all {total:,} positions")
    )
    if learned:
        caption = (
            f"**{name}** learned one {d:,}-dimensional vector per position in training (showing "
            f"{count}). Nothing forces neighbouring positions to look alike: the similarity "
            "shows what training made of them, beside the sinusoidal table's fixed pattern."
        )
    else:
        caption = (
            f"**{name}** uses the fixed sinusoidal table (d_model {d:,}, showing {count}): "
            "nothing here was learned. Pick a pretrained model (all-MiniLM-L6-v2, GPT-2) to "
            "see learned positions."
        )
    return heatmap, similarity, caption


ROPE_STARTS = (16, 100, 1000, 4000)
"""Where the query of each :func:`rotary_positions` pair sits; the key sits ``distance`` before."""
ROPE_DISTANCES = (0, 1, 4, 16)


def rotary_positions(name: str, config: Any, n: int, large: bool) -> tuple[Any, Any, str]:
    """A rotary model's positions: the angle heatmap, q·k for one q and one k at every pair of
    the first ``n`` positions, and a caption with a table, computed by rotating the same two
    vectors, showing that q·k depends only on the distance between the positions."""
    d_head, base = config.d_head, float(config.rope_base)
    rope = {"rotary_dims": config.rotary_dims, "scaling": config.rope_scaling_dict}
    inv_freq, _factor = scaled_frequencies(config.rotary_dims, base, config.rope_scaling_dict)
    angles = torch.arange(n).float()[:, None] * inv_freq  # (n, rotary_dims/2): the model's own
    scaled = (config.rope_scaling_dict or {}).get("rope_type")
    heatmap = figures.rotary_angle_figure(angles, base=base, scaled=scaled, large_font=large)
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, d_head, generator=generator, dtype=torch.float64)
    grid = figures.rotary_scores(q, k, range(n), range(n), base, **rope)
    scores = figures.rotary_scores_figure(grid, large_font=large)
    head = "| distance m − n | " + " | ".join(f"m = {m:,}" for m in ROPE_STARTS) + " | spread |"
    rows = [head, "|" + "---|" * (len(ROPE_STARTS) + 2)]
    for distance in ROPE_DISTANCES:
        values = [
            float(figures.rotary_scores(q, k, [m + distance], [m], base, **rope)[0, 0])
            for m in ROPE_STARTS
        ]
        cells = " | ".join(f"{v:.6f}" for v in values)
        rows.append(f"| {distance} | {cells} | {max(values) - min(values):.1e} |")
    plain = float(q @ k)
    caption = (
        f"**{name}** has no position table: nothing is added to its token embeddings. Its "
        f"positions are **rotary** (RoPE): inside every attention layer, each of a head's "
        f"{config.rotary_dims // 2} dimension pairs of q and k is turned by the angle "
        f"position·θ_i, θ_i = {base:,.0f}^(−2i/{config.rotary_dims})"
        + _rope_variant(config)
        + " (left; the first pairs spin fast, the last barely "
        "move). Right: one random q and one random k (seeded, "
        f"{d_head}-dimensional, q·k = {plain:.4f} unrotated) rotated to every pair of the first "
        f"{n:,} positions; each diagonal holds one value. The table rotates the same two "
        "vectors to query position m and key position m − distance, computed here, not assumed:"
        "\n\n"
        + "\n".join(rows)
        + "\n\nEach row agrees to its spread, which is rounding: the angles are float32, as the "
        "model computes them, so the far positions round more. q·k after rotation depends only "
        "on the distance between the positions. Below: one dimension pair of a real q and k of "
        f"**{name}** (a sentence's, layer {ROPE_LAYER + 1}) placed at positions 0 to "
        f"{ROPE_TURNS[-1]}: both arrows turn by the same angle per position, so the angle between "
        "q at m and k at n depends on m − n only."
    )
    return heatmap, scores, caption


def _rope_variant(config: Any) -> str:
    """What this model's rotary does beyond the plain form: the dimensions that do not turn,
    the scaling of its frequencies."""
    words = ""
    if config.rotary_dims < config.d_head:
        words += (
            f"; only the first {config.rotary_dims} of each head's {config.d_head} dimensions "
            "turn, the rest pass unrotated"
        )
    scaling = config.rope_scaling_dict
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        factor = scaling.get("factor")
        words += f"; the θ_i are scaled as its `rope_scaling` says ({kind}" + (
            f", factor {factor})" if factor is not None else ")"
        )
    return words


ROPE_SENTENCE = "The cat sat on the warm mat."
"""The sentence whose real q and k :func:`rotating_pair` draws."""
ROPE_LAYER, ROPE_HEAD = 2, 0
ROPE_TURNS = tuple(range(8))
"""The positions both vectors are placed at."""


@friendly
@takes_request(ModelPositionsRequest.of, ("name", "large", "session"), optional=True)
def rotating_pair(registry: ModelRegistry, request: ModelPositionsRequest) -> Any:
    """For a rotary model: one dimension pair of a real q (the sentence's last token) and k
    (its second token), of layer ``ROPE_LAYER``'s head ``ROPE_HEAD`` and the key/value head it
    reads, turned to positions 0…7 (hidden for other models). The pair drawn is the one of the
    fastest-turning quarter whose q and k are longest, so the turn is large and visible."""
    checkpoint, config = request.checkpoint, request.checkpoint.config
    if config.positional != "rotary":
        return gr.update(visible=False, value=None)
    trace = registry.analysis(request.name, checkpoint, [ROPE_SENTENCE]).trace
    layer = min(ROPE_LAYER, len(trace.decoder_layers) - 1)
    record = trace.decoder_layers[layer].self_attention
    assert record.rotary is not None  # a rotary model's capture keeps q and k before rotation
    head = min(ROPE_HEAD, record.shape[1] - 1)
    kv_head = record.kv_head_of[head]
    q = record.rotary.queries_before[0, head, -1].float().cpu()
    k = record.rotary.keys_before[0, kv_head, 1].float().cpu()
    half = config.rotary_dims // 2  # pair i turns dimensions i and i + half
    turning = slice(0, 2 * half)
    q_turning, k_turning = q[turning], k[turning]
    strength = (q_turning[:half].square() + q_turning[half:].square()) * (
        k_turning[:half].square() + k_turning[half:].square()
    )
    pair = int(strength[: max(1, half // 4)].argmax())
    what = f"layer {layer + 1} head {head + 1}'s (kv head {kv_head + 1})"
    figure = figures.rotary_pair_figure(
        q,
        k,
        pair,
        ROPE_TURNS,
        float(config.rope_base),
        rotary_dims=config.rotary_dims,
        scaling=config.rope_scaling_dict,
        what=what,
        large_font=request.large,
    )
    return gr.update(visible=True, value=figure)


def _first_layer_input(analysis: Any) -> tuple[Any, Any, list[str]]:
    """The stack a sentence enters, its first layer's input and the token pieces."""
    trace = analysis.trace
    if trace.source is not None:
        layers, stack, pieces = trace.encoder_layers, trace.source, analysis.source_pieces[0]
    else:
        layers, stack, pieces = trace.decoder_layers, trace.target, analysis.target_pieces[0]
    return stack, layers[0].input[0] if layers else None, pieces


def _sentence_figures(registry: ModelRegistry, request: SentenceRequest) -> tuple[Any, Any, str]:
    name, checkpoint, large = request.name, request.checkpoint, request.large
    config = checkpoint.model.config
    analysis = registry.analysis(name, checkpoint, [request.sentence])
    stack, layer_input, pieces = _first_layer_input(analysis)
    labels = figures.token_labels(shown_pieces(checkpoint.tokenizer, pieces))  # ␣cat, 美[1/3]
    types = None if stack.token_type_embedding is None else stack.token_type_embedding[0]
    normed = layer_input if config.embedding_norm else None
    options: figures.EmbeddingOptions = {
        "token_type": types,
        "layer_input": normed,
        "scaled": config.scale_embeddings,
        "large_font": large,
    }
    emb = stack.token_embedding[0]
    summed = figures.embedding_sum_figure(emb, stack.positional, labels, **options)
    norms = figures.embedding_norms_figure(emb, stack.positional, labels, **options)
    parts = ["the token embedding" + (" × √d_model" if config.scale_embeddings else "")]
    parts.append(
        "a learned position embedding"
        if config.positional == "learned"
        else "no positional vector (its middle panel is all zeros: rotary positions turn q "
        "and k inside every attention layer instead)"
        if config.positional == "rotary"
        else "the sinusoidal positional encoding"
    )
    if types is not None:
        parts.append("a token-type (segment) embedding, type 0 for one sentence")
    caption = f"**{name}** adds " + ", ".join(parts[:-1]) + " and " + parts[-1]
    if config.embedding_norm:
        caption += ", then normalises the sum with its embedding LayerNorm: that is layer 1's input"
    caption += "."
    if config.positional == "rotary":
        pass  # no positional vector to compare the embeddings' scale with
    elif not config.scale_embeddings:
        caption += (
            " No √d_model scaling here: "
            + ("BERT" if types is not None else "this model")
            + " learned its token embeddings at the positions' magnitude, so it does not need"
            " the paper's scale."
        )
    else:
        caption += (
            f" √d_model = {np.sqrt(config.d_model):.2f} makes the small learned embeddings "
            "as large as the encoding."
        )
    return summed, norms, caption


@friendly
@takes_request(SentenceRequest.of)
def embeddings(registry: ModelRegistry, request: SentenceRequest) -> tuple[Any, Any]:
    """The ``/embeddings`` endpoint: a sentence's token embeddings, positional encodings (and
    token types, and the embedding LayerNorm, for BERT) as the model's first layer receives
    them, and the vectors' lengths."""
    summed, norms, _ = _sentence_figures(registry, request)
    return summed, norms


@friendly
@takes_request(SentenceRequest.of)
def embeddings_view(registry: ModelRegistry, request: SentenceRequest) -> tuple[Any, Any, str]:
    """The live sentence view: the ``/embeddings`` plots and a caption on what this model adds."""
    return _sentence_figures(registry, request)


def _learned_default(registry: ModelRegistry) -> str:
    pretrained = [
        n for n in registry.model_names if n not in registry.bundled.models and n != TRAINED_HERE
    ]
    return (pretrained or registry.model_names)[0]


def build(
    registry: ModelRegistry, large: gr.Checkbox, session: gr.State
) -> dict[str, gr.Component]:
    """Lay out the tab and wire its events; every panel is drawn when the page opens."""
    gr.Markdown(
        "Attention itself ignores order, so the paper **adds** a sinusoidal positional encoding to "
        "each token embedding. Models such as BERT (all-MiniLM-L6-v2) and GPT-2 **learn** one "
        "vector per position instead: compare the two side by side. Llama-family models "
        "(SmolLM2) add nothing: they **rotate** q and k by their positions inside attention "
        "(RoPE), drawn on the right when you pick one."
    )
    with gr.Row():
        d_model = gr.Slider(8, 512, value=128, step=8, label="d_model")
        length = gr.Slider(4, 512, value=64, step=1, label="positions")
        # No minimum/maximum here: gradio would refuse an out-of-range base before the handler,
        # as an error on every panel; the handler says it in the status line instead.
        base = gr.Number(value=10000, label="base")
        dims = gr.Textbox(value="0, 1, 6, 20", label="dimensions to draw as curves")
        metric = gr.Radio(["cosine", "dot"], value="cosine", label="similarity")
    # A refused input is said here; the controls and figures stay as they were.
    pe_status = gr.Markdown(elem_classes=["input-status"])
    pe_caption_md = gr.Markdown(pe_caption(10000, 128))
    pe_button = gr.Button("Draw positional encodings", variant="primary")
    with gr.Row():
        with gr.Column():
            gr.Markdown("#### Sinusoidal (the paper)")
            pe_plot = gr.Plot(label="Positional encoding", show_label=False)
            similarity_plot = gr.Plot(label="PE·PE similarity", show_label=False)
        with gr.Column():
            learned_model = gr.Dropdown(
                registry.model_names,
                value=_learned_default(registry),
                label="Learned positions of",
                info="a rotary model (SmolLM2) shows its RoPE angles and q·k by distance",
            )
            learned_status = gr.Markdown(elem_classes=["input-status"])
            learned_caption = gr.Markdown()
            learned_plot = gr.Plot(label="Position embeddings", show_label=False)
            learned_similarity = gr.Plot(label="PE·PE similarity (learned)", show_label=False)
            rotation_status = gr.Markdown(elem_classes=["input-status"])
            rotation_plot = gr.Plot(label="One q/k pair rotating", show_label=False, visible=False)
    curves_plot = gr.Plot(label="Chosen dimensions", show_label=False)

    pe_inputs = [d_model, length, base, dims, metric, large]
    pe_outputs = [pe_plot, curves_plot, similarity_plot]
    pe_button.click(positional, pe_inputs, pe_outputs, api_name="positional_encoding")
    gr.on(
        [
            *_load_trigger(),
            d_model.change,
            length.change,
            base.submit,
            base.blur,
            dims.submit,
            dims.blur,
            metric.change,
            large.change,
        ],
        beside_input(positional_view, len(pe_outputs) + 1),
        pe_inputs,
        [*pe_outputs, pe_caption_md, pe_status],
        api_visibility="private",
        trigger_mode="always_last",
    )
    gr.on(
        [*_load_trigger(), learned_model.change, length.change, metric.change, large.change],
        beside_input(bind(learned_positions, registry), 3),
        [learned_model, length, metric, large, session],
        [learned_plot, learned_similarity, learned_caption, learned_status],
        api_visibility="private",
        trigger_mode="always_last",
    )

    gr.on(
        [*_load_trigger(), learned_model.change, large.change],
        beside_input(bind(rotating_pair, registry), 1),
        [learned_model, large, session],
        [rotation_plot, rotation_status],
        api_visibility="private",
        trigger_mode="always_last",
    )

    gr.Markdown("### A sentence: what enters the first layer")
    with gr.Row():
        with gr.Column():
            sentence = gr.Textbox(value="the small cat sees a red ball", label="Sentence")
            emb_status = gr.Markdown(elem_classes=["input-status"])
        model_name = gr.Dropdown(registry.model_names, value=registry.model_names[0], label="Model")
    sentence_caption = gr.Markdown()
    emb_button = gr.Button("Show the model's input")
    emb_plot = gr.Plot(label="Embedding, position and their sum", show_label=False)
    norm_plot = gr.Plot(label="Vector lengths", show_label=False)
    emb_inputs = [sentence, model_name, large, session]
    emb_button.click(
        bind(embeddings, registry), emb_inputs, [emb_plot, norm_plot], api_name="embeddings"
    )
    gr.on(
        [*_load_trigger(), sentence.input, sentence.submit, model_name.change, large.change],
        beside_input(bind(embeddings_view, registry), 3),
        emb_inputs,
        [emb_plot, norm_plot, sentence_caption, emb_status],
        api_visibility="private",
        trigger_mode="always_last",
    )
    return {
        "d_model": d_model,
        "positions": length,
        "base": base,
        "dims": dims,
        "metric": metric,
        "learned_of": learned_model,
        "sentence": sentence,
        "model": model_name,
    }
