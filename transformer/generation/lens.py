"""The logit lens and the residual stream: what each layer already "knows", and how big the
stream and each sub-layer's contribution to it are.

Every layer of a Transformer reads and writes one residual stream of ``d_model`` numbers per
position. The **logit lens** (nostalgebraist, 2020) reads that stream after every layer as if it
were the last: the stack's final norm (where the model has one), then the generator, then a
softmax. The last layer's lens is the model's own distribution; the earlier ones show where
the answer forms. :func:`residual_norms` measures the stream itself: its length after every
sub-layer, and the length of what each sub-layer added.

Both read a captured :class:`~transformer.core.trace.Trace` and nothing else; :func:`logit_lens`
also needs the model's final norm and generator weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..core.config import ModelConfig
from ..core.model import Transformer
from ..core.trace import LayerTrace, Trace
from ..core.util import eval_mode, is_int

Stack = Literal["encoder", "decoder"]


@dataclass
class LogitLens:
    """What each layer's output at one position would predict if the generator read it.

    Rows are layers, in order: ``layers[i]`` is the layer number shown to a reader (1 = the
    first layer's output; 0 = the stack's input, the embeddings, when included).

    Attributes:
        stack: the stack read: ``"decoder"`` (models with a decoder) or ``"encoder"``
            (encoder-only models, whose logits come from the encoder's output).
        position: the position read, from 0, in the stack's sequence.
        layers: ``L`` layer numbers (0 = the embedding input, when included).
        top_ids: ``(L, k)`` long, each row's ``k`` most probable ids, most probable first.
        top_probs: ``(L, k)`` float32, their probabilities.
        chosen: the id whose rank and probability are followed, or None.
        chosen_rank: ``(L,)`` long, its rank in each row (1 = most probable), when chosen.
        chosen_prob: ``(L,)`` float32, its probability in each row, when chosen.
        final_norm: whether the stack's final LayerNorm was applied (pre-LN stacks).
    """

    stack: Stack
    position: int
    layers: list[int]
    top_ids: Tensor
    top_probs: Tensor
    chosen: int | None = None
    chosen_rank: Tensor | None = None
    chosen_prob: Tensor | None = None
    final_norm: bool = False


def lens_stack(config: ModelConfig) -> Stack:
    """The stack whose output the generator reads: the decoder, or the encoder of an
    encoder-only model."""
    return "decoder" if config.has_decoder else "encoder"


def input_is_comparable(config: ModelConfig) -> bool:
    """Whether the lens of the embedding input means something.

    The generator expects a normalised vector. A pre-LN stack normalises whatever it reads with
    its final norm, and a model with an embedding norm (BERT) normalises its input itself; a
    post-LN stack without one (the paper, Marian) feeds its raw ``√d_model``-scaled embeddings
    plus positions to layer 1, a vector on another scale than any layer's output, and its
    "lens" would be an artefact of that scale.
    """
    return config.norm == "pre" or config.embedding_norm


def _stack_layers(trace: Trace, stack: Stack) -> list[LayerTrace]:
    if stack not in ("encoder", "decoder"):
        raise ValueError(f"stack must be 'encoder' or 'decoder', got {stack!r}")
    layers = trace.encoder_layers if stack == "encoder" else trace.decoder_layers
    if not layers:
        raise ValueError(
            f"the trace has no {stack} layers (a {trace.config.architecture} model, or a pass "
            "run without a trace)"
        )
    return layers


def _check_index(value: object, size: int, what: str) -> int:
    if not is_int(value) or not -size <= value < size:
        raise IndexError(f"{what} must be an integer in 0..{size - 1}, got {value!r}")
    return value % size


def logit_lens(
    model: Transformer,
    trace: Trace,
    position: int,
    *,
    batch: int = 0,
    top_k: int = 5,
    chosen: int | None = None,
    include_input: bool = False,
    exclude: int | None = None,
) -> LogitLens:
    """The logit lens at one position: ``softmax(generator(final_norm(h_l)))`` for every layer's
    output ``h_l``, where ``final_norm`` is the stack's closing LayerNorm in pre-LN models (a
    post-LN layer already ends in a norm, so nothing is added there).

    The last row equals the model's own distribution at that position (``softmax`` of
    ``trace.logits``), to float rounding. Works for every model with a generator: the
    decoder of encoder-decoder and decoder-only models, the encoder of encoder-only ones.

    Args:
        model: the model that made ``trace`` (its final norm and generator are applied).
        trace: a captured forward pass, ``model(src, tgt, call=TRACE)``.
        position: the position to read, in the stack's sequence (``-1``: the last one).
        batch: the row of the batch.
        top_k: how many of the most probable ids each row lists.
        chosen: an id to follow through the layers (e.g. the token that was generated): its
            rank and probability in every row.
        include_input: add a row 0 for the stack's input (the embeddings as layer 1 reads
            them). Meaningful only where :func:`input_is_comparable` holds (pre-LN stacks, or an
            embedding norm); elsewhere it raises ``ValueError``.
        exclude: an id given no probability (its logit set to ``-inf`` before the softmax), as
            generation excludes [PAD] (see :func:`transformer.generation.without_padding`).

    Returns:
        A :class:`LogitLens` with one row per layer (``L = n_layers`` or ``n_layers + 1``).
    """
    config = trace.config
    if model.config is not config and model.config != config:
        raise ValueError("the trace was made by another model: pass the model that made it")
    stack = lens_stack(config)
    layers = _stack_layers(trace, stack)
    first = layers[0].output
    batch = _check_index(batch, first.size(0), "batch")
    position = _check_index(position, first.size(1), "position")
    vocab = config.output_vocab_size
    if not is_int(top_k) or top_k < 1:
        raise ValueError(f"top_k must be an integer ≥ 1, got {top_k!r}")
    for name, value in (("chosen", chosen), ("exclude", exclude)):
        if value is not None and not (is_int(value) and 0 <= value < vocab):
            raise ValueError(f"{name} must be an id in 0..{vocab - 1}, got {value!r}")
    if include_input and not input_is_comparable(config):
        raise ValueError(
            "the embedding input of a post-LN stack without an embedding norm is on another "
            "scale than the generator reads: leave include_input off for this model"
        )

    rows = [layer.output[batch, position] for layer in layers]  # each (d_model,)
    numbers = list(range(1, len(layers) + 1))
    if include_input:
        rows.insert(0, layers[0].input[batch, position])
        numbers.insert(0, 0)
    hidden = torch.stack(rows)  # (L, d_model)
    norm = (model.decoder if stack == "decoder" else model.encoder).final_norm
    with torch.inference_mode(), eval_mode(model):
        if norm is not None:
            hidden = norm(hidden)
        logits = model.generator(hidden).float()  # (L, V)
        if exclude is not None:
            logits[:, exclude] = float("-inf")
        probs = logits.softmax(dim=-1)  # (L, V)
        top = probs.topk(min(top_k, vocab), dim=-1)
        chosen_rank = chosen_prob = None
        if chosen is not None:
            # (L,): a copy, since a view would keep the whole (L, V) distribution alive in
            # every session that keeps this step.
            chosen_prob = probs[:, chosen].clone()
            chosen_rank = _ranks(probs, chosen, chosen_prob, top.indices, top.values)
    return LogitLens(
        stack=stack,
        position=position,
        layers=numbers,
        top_ids=top.indices.cpu(),
        top_probs=top.values.cpu(),
        chosen=chosen,
        chosen_rank=None if chosen_rank is None else chosen_rank.cpu(),
        chosen_prob=None if chosen_prob is None else chosen_prob.cpu(),
        final_norm=norm is not None,
    )


def _ranks(probs: Tensor, chosen: int, chosen_prob: Tensor, ids: Tensor, values: Tensor) -> Tensor:
    """``(L,)`` long: 1 + how many ids each row of ``probs`` ``(L, V)`` gives more than
    ``chosen`` (``chosen_prob`` ``(L,)``), read from the row's top ``(L, k)`` ``ids`` and
    ``values`` where ``chosen`` is among them (everything above it is then among them too),
    and from the whole row only where it is not: each step's lens compared all of SmolLM2's
    31 × 49,152 probabilities, though the chosen token ranks first in most layers."""
    ranks = (values > chosen_prob[:, None]).sum(dim=-1) + 1
    outside = ~(ids == chosen).any(dim=-1)
    if bool(outside.any()):
        rows = outside.nonzero().squeeze(1)
        ranks[rows] = (probs[rows] > chosen_prob[rows, None]).sum(dim=-1) + 1
    return ranks


@dataclass
class ResidualNorms:
    """The L2 norm of the residual stream after every sub-layer, and of what each added.

    Attributes:
        stack: ``"encoder"`` or ``"decoder"``.
        stages: ``S`` names of the points the stream is measured at: ``"input"``, then per
            layer ``"L1 self-attention"``, ``"L1 cross-attention"`` (decoder layers that have
            it), ``"L1 feed-forward"``, …
        stream: ``(S, T)`` float32: ``‖x‖`` at each stage and position (after the residual add,
            and after the norm in post-LN layers).
        sublayers: ``S - 1`` names of the sub-layers (``stages[1:]``).
        added: ``(S - 1, T)`` float32: ``‖update‖``, the norm of what each sub-layer added to
            the stream before the residual add (and before a post-LN norm).
        norm: the model's norm placement, ``"pre"`` or ``"post"``: in post-LN the stream after
            a sub-layer is ``LayerNorm(x + update)``, not ``x + update``.
    """

    stack: Stack
    stages: list[str]
    stream: Tensor
    sublayers: list[str]
    added: Tensor
    norm: str


def residual_norms(trace: Trace, stack: Stack, batch: int = 0) -> ResidualNorms:
    """Per position, ``‖x‖₂`` of the residual stream at the stack's input and after every
    sub-layer, and ``‖update‖₂`` of what each sub-layer added.

    In a pre-LN stack ``after = before + update`` exactly, so the stream only grows by what is
    added; in a post-LN stack each sub-layer ends in a LayerNorm that resets the stream's norm
    to about ``√d_model`` (times the norm's gain). The stack's closing norm (pre-LN) is not a
    sub-layer and is not shown.

    Args:
        trace: a captured forward pass.
        stack: ``"encoder"`` or ``"decoder"``.
        batch: the row of the batch.

    Returns:
        A :class:`ResidualNorms` with ``stream`` ``(S, T)`` and ``added`` ``(S - 1, T)``.
    """
    layers = _stack_layers(trace, stack)
    batch = _check_index(batch, layers[0].input.size(0), "batch")
    stages = ["input"]
    streams = [layers[0].input[batch]]  # each (T, d_model)
    updates = []
    for layer in layers:
        steps = [("self-attention", layer.self_attention_output, layer.self_attention_update)]
        if layer.cross_attention_output is not None:
            steps.append(
                ("cross-attention", layer.cross_attention_output, layer.cross_attention_update)
            )
        steps.append(("feed-forward", layer.feed_forward_output, layer.feed_forward_update))
        for name, after, update in steps:
            if update is None:
                raise ValueError("the trace records no sub-layer updates: capture it again")
            stages.append(f"L{layer.layer + 1} {name}")
            streams.append(after[batch])
            updates.append(update[batch])
    stream = torch.linalg.vector_norm(torch.stack(streams).float(), dim=-1)  # (S, T)
    added = torch.linalg.vector_norm(torch.stack(updates).float(), dim=-1)  # (S - 1, T)
    return ResidualNorms(
        stack=stack,
        stages=stages,
        stream=stream.cpu(),
        sublayers=stages[1:],
        added=added.cpu(),
        norm=trace.config.norm,
    )
