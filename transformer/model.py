"""The Transformer: encoder and decoder layers, their stacks, the generator (paper section 3).

One class per concept, in the paper's order. Encoder-decoder, encoder-only and decoder-only
models are built from the same parts; a decoder layer has cross-attention only when there is
an encoder to attend to.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import torch
from torch import Tensor, nn

from .attention import AttentionProbe, KeyValueCache, MultiHeadAttention
from .config import ModelConfig
from .embeddings import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding
from .layers import LayerNorm, PositionwiseFeedForward
from .masks import causal_mask, combine_masks, padding_mask
from .trace import AttentionKind, AttentionRecord, LayerTrace, StackInput, Trace

# The seeds' mistakes, by the short name a learner reads: the switches of
# ``Intervention.mistakes``. :mod:`transformer.mistakes` says where each came from and why it
# is wrong, which models it applies to, and compares a broken pass with the correct one.
SINUSOID_SWAPPED = "sin and cos swapped, base 1000"
SCORES_OVER_D_MODEL = "scores ÷ √d_model"
SCORES_TIMES_D_HEAD = "scores × √d_head"
SPLIT_BARE_VIEW = "heads split with a bare view"
MERGE_BARE_VIEW = "heads merged with a bare view"
LAYER_NORM_STD_EPS = "LayerNorm: unbiased std + eps"
CROSS_QUERIES_FROM_MEMORY = "cross-attention queries from the memory"
MASK_INVERTED = "mask polarity inverted"
SEED_MISTAKES: tuple[str, ...] = (
    SINUSOID_SWAPPED,
    SCORES_OVER_D_MODEL,
    SCORES_TIMES_D_HEAD,
    SPLIT_BARE_VIEW,
    MERGE_BARE_VIEW,
    LAYER_NORM_STD_EPS,
    CROSS_QUERIES_FROM_MEMORY,
    MASK_INVERTED,
)


def check_mistake_names(names: Iterable[str]) -> None:
    """``ValueError`` naming the valid mistakes if any of ``names`` is not one of them."""
    unknown = sorted(set(names) - set(SEED_MISTAKES))
    if unknown:
        raise ValueError(f"unknown mistake {unknown}; choose from {list(SEED_MISTAKES)}")


def cross_shape_error(n_source: int, n_target: int) -> ValueError:
    """The error of :data:`CROSS_QUERIES_FROM_MEMORY` when source and target lengths differ."""
    return ValueError(
        f"cross-attention with queries from the memory (seed 004's cross_attn(q=memory, "
        f"k=memory, v=x)) cannot run here: its weights are source × source ({n_source} × "
        f"{n_source}) but the values v = x have {n_target} target rows, so weights · v does not "
        f"multiply, and its output, one row per source position, could not be added to the "
        f"{n_target} target positions anyway. It runs, silently wrong, only when source and "
        f"target are equally long."
    )


@dataclass(frozen=True)
class Intervention:
    """What-if switches that change a forward pass, for teaching (all off by default).

    Attributes:
        causal_mask: ``False`` lets the decoder see the future (to show the leak).
        padding_mask: ``False`` lets queries attend to padding.
        scale_scores: ``False`` drops the ``1/√d_k`` scaling of attention scores.
        positional_encoding: ``False`` adds no positional information (word order is lost).
        zero_heads: ``(kind, layer, head)`` triples whose output is switched off.
        mistakes: names of the seeds' mistakes to make (:data:`SEED_MISTAKES`, described in
            :mod:`transformer.mistakes`); an unknown name is a ``ValueError``. A mistake that
            does not apply to a model (sin/cos on learned positions, cross-attention without
            an encoder) changes nothing there. With a key/value cache the shape-dependent ones
            (bare views, inverted masks) act on each step's few positions, so incremental
            decoding differs from one full pass: the seeds had no cache.
    """

    causal_mask: bool = True
    padding_mask: bool = True
    scale_scores: bool = True
    positional_encoding: bool = True
    zero_heads: frozenset[tuple[AttentionKind, int, int]] = frozenset()
    mistakes: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        mistakes = self.mistakes
        if isinstance(mistakes, str):  # one name given bare: not its characters
            mistakes = (mistakes,)
        if not isinstance(mistakes, frozenset):
            object.__setattr__(self, "mistakes", frozenset(mistakes))
        check_mistake_names(self.mistakes)

    def attention_options(self, attention: MultiHeadAttention) -> dict[str, Any]:
        """The keyword arguments of :meth:`MultiHeadAttention.forward` these switches ask for
        (only ``scale_scores`` when no mistake is on)."""
        options: dict[str, Any] = {"scale_scores": self.scale_scores}
        mistakes = self.mistakes
        if mistakes:
            over_d_model = SCORES_OVER_D_MODEL in mistakes
            width = attention.n_heads * attention.d_head if over_d_model else attention.d_head
            if over_d_model or SCORES_TIMES_D_HEAD in mistakes:
                # ÷ √d_model replaces the width, × √d_head the division; both: × √d_model.
                root = math.sqrt(width)
                options["scale"] = root if SCORES_TIMES_D_HEAD in mistakes else 1.0 / root
            options["bare_view_split"] = SPLIT_BARE_VIEW in mistakes
            options["bare_view_merge"] = MERGE_BARE_VIEW in mistakes
        return options

    @property
    def norm_mistake(self) -> bool:
        """Whether every LayerNorm uses seed 004's formula."""
        return LAYER_NORM_STD_EPS in self.mistakes

    def head_gate(
        self, kind: AttentionKind, layer: int, n_heads: int, like: Tensor
    ) -> Tensor | None:
        """``(H,)`` multipliers for one attention sub-layer, or ``None`` if every head is on."""
        off = [h for (k, lay, h) in self.zero_heads if k == kind and lay == layer]
        if not off:
            return None
        gate = torch.ones(n_heads, dtype=like.dtype, device=like.device)
        gate[off] = 0.0
        return gate


NO_INTERVENTION = Intervention()


class _Residual(nn.Module):
    """Residual connection with dropout and layer norm, post-LN or pre-LN (section 5.4)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = LayerNorm(config.d_model, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"

    def sublayer_input(self, x: Tensor, norm_mistake: bool = False) -> Tensor:
        """What the sub-layer reads: ``LayerNorm(x)`` in pre-LN, ``x`` itself in post-LN.
        ``norm_mistake``: the norm uses seed 004's formula (see :class:`LayerNorm`)."""
        if not self.pre_norm:
            return x
        return self.norm(x, unbiased_std_plus_eps=True) if norm_mistake else self.norm(x)

    def forward(self, x: Tensor, sublayer_output: Tensor, norm_mistake: bool = False) -> Tensor:
        """Post-LN: ``LayerNorm(x + Dropout(sublayer))``; pre-LN: ``x + Dropout(sublayer)``."""
        x = x + self.dropout(sublayer_output)
        if self.pre_norm:
            return x
        return self.norm(x, unbiased_std_plus_eps=True) if norm_mistake else self.norm(x)


def _record(
    kind: AttentionKind, layer: int, probe: AttentionProbe | None, mask: Tensor | None, offset: int
) -> AttentionRecord | None:
    if probe is None:
        return None
    batch, _, n_queries, n_keys = probe.weights.shape
    if mask is None:  # nothing was masked: an all-True view, no allocation of (B, 1, Tq, Tk)
        mask = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=probe.weights.device)
    mask = mask.expand(batch, 1, n_queries, n_keys)
    return AttentionRecord(
        kind=kind,
        layer=layer,
        weights=probe.weights.detach(),
        mask=mask,
        query_offset=offset,
        queries=probe.queries.detach(),
        keys=probe.keys.detach(),
    )


class EncoderLayer(nn.Module):
    """Self-attention, then the position-wise feed-forward network, each with a residual."""

    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.self_attention = MultiHeadAttention(config.d_model, config.n_heads, config.dropout)
        self.feed_forward = PositionwiseFeedForward(
            config.d_model, config.d_ff, config.dropout, config.activation
        )
        self.attention_residual = _Residual(config)
        self.feed_forward_residual = _Residual(config)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        capture: bool = False,
        intervention: Intervention = NO_INTERVENTION,
    ) -> tuple[Tensor, LayerTrace | None]:
        """``(B, T, d_model)`` → ``(B, T, d_model)``; ``mask`` broadcasts to ``(B, H, T, T)``."""
        x_in = x
        norm_mistake = intervention.norm_mistake
        h = self.attention_residual.sublayer_input(x, norm_mistake)
        gate = intervention.head_gate("encoder_self", self.index, self.self_attention.n_heads, h)
        attended, probe = self.self_attention(
            h,
            h,
            mask,
            capture=capture,
            head_gate=gate,
            **intervention.attention_options(self.self_attention),
        )
        x = self.attention_residual(x, attended, norm_mistake)
        after_attention = x
        update = self.feed_forward(self.feed_forward_residual.sublayer_input(x, norm_mistake))
        x = self.feed_forward_residual(x, update, norm_mistake)
        if not capture:
            return x, None
        return x, LayerTrace(
            stack="encoder",
            layer=self.index,
            input=x_in.detach(),
            self_attention=_record("encoder_self", self.index, probe, mask, 0),
            self_attention_output=after_attention.detach(),
            feed_forward_output=x.detach(),
            self_attention_update=attended.detach(),
            feed_forward_update=update.detach(),
        )


@dataclass
class LayerCache:
    """One decoder layer's key/value caches."""

    self_attention: KeyValueCache = field(default_factory=KeyValueCache)
    cross_attention: KeyValueCache = field(default_factory=lambda: KeyValueCache(static=True))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder memory (only when there is an
    encoder), then the feed-forward network; each sub-layer with its residual."""

    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.self_attention = MultiHeadAttention(config.d_model, config.n_heads, config.dropout)
        self.self_attention_residual = _Residual(config)
        self.cross_attention: MultiHeadAttention | None = None
        if config.has_encoder:
            self.cross_attention = MultiHeadAttention(
                config.d_model, config.n_heads, config.dropout
            )
            self.cross_attention_residual = _Residual(config)
        self.feed_forward = PositionwiseFeedForward(
            config.d_model, config.d_ff, config.dropout, config.activation
        )
        self.feed_forward_residual = _Residual(config)

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: LayerCache | None = None,
        capture: bool = False,
        intervention: Intervention = NO_INTERVENTION,
        position_offset: int = 0,
    ) -> tuple[Tensor, LayerTrace | None]:
        """Decode ``(B, Tq, d_model)`` target positions.

        ``self_mask`` broadcasts to ``(B, H, Tq, Tk)`` (causal and target padding, Tk counting
        cached positions); ``memory`` is the ``(B, Ts, d_model)`` encoder output and
        ``memory_mask`` broadcasts to ``(B, H, Tq, Ts)`` (source padding).
        """
        x_in = x
        norm_mistake = intervention.norm_mistake
        h = self.self_attention_residual.sublayer_input(x, norm_mistake)
        gate = intervention.head_gate("decoder_self", self.index, self.self_attention.n_heads, h)
        attended, self_probe = self.self_attention(
            h,
            h,
            self_mask,
            cache.self_attention if cache else None,
            capture=capture,
            head_gate=gate,
            **intervention.attention_options(self.self_attention),
        )
        x = self.self_attention_residual(x, attended, norm_mistake)
        after_self = x
        self_update = attended

        cross_probe = None
        after_cross = None
        cross_update = None
        if self.cross_attention is not None:
            if memory is None and not (cache and cache.cross_attention.keys is not None):
                raise ValueError("this decoder layer cross-attends: pass the encoder memory")
            h = self.cross_attention_residual.sublayer_input(x, norm_mistake)
            gate = intervention.head_gate("cross", self.index, self.cross_attention.n_heads, h)
            options = intervention.attention_options(self.cross_attention)
            if CROSS_QUERIES_FROM_MEMORY in intervention.mistakes:
                # Seed 004: cross_attn(q=memory, k=memory, v=x). Its weights are (Ts x Ts)
                # and read Ts rows of values from x: only equal lengths multiply.
                if memory is None:
                    raise ValueError(
                        "cross-attention with queries from the memory needs the memory itself "
                        "(it cannot run from a key/value cache)"
                    )
                if memory.size(1) != h.size(1):
                    raise cross_shape_error(memory.size(1), h.size(1))
                attended, cross_probe = self.cross_attention(
                    memory,
                    memory,
                    memory_mask,
                    capture=capture,
                    head_gate=gate,
                    value=h,
                    **options,
                )
            else:
                attended, cross_probe = self.cross_attention(
                    h,
                    memory,
                    memory_mask,
                    cache.cross_attention if cache else None,
                    capture=capture,
                    head_gate=gate,
                    **options,
                )
            x = self.cross_attention_residual(x, attended, norm_mistake)
            after_cross = x
            cross_update = attended

        update = self.feed_forward(self.feed_forward_residual.sublayer_input(x, norm_mistake))
        x = self.feed_forward_residual(x, update, norm_mistake)
        if not capture:
            return x, None
        return x, LayerTrace(
            stack="decoder",
            layer=self.index,
            input=x_in.detach(),
            self_attention=_record(
                "decoder_self", self.index, self_probe, self_mask, position_offset
            ),
            self_attention_output=after_self.detach(),
            cross_attention=_record("cross", self.index, cross_probe, memory_mask, position_offset),
            cross_attention_output=None if after_cross is None else after_cross.detach(),
            feed_forward_output=x.detach(),
            self_attention_update=self_update.detach(),
            feed_forward_update=update.detach(),
            cross_attention_update=None if cross_update is None else cross_update.detach(),
        )


class Encoder(nn.Module):
    """N encoder layers; pre-LN stacks end with a LayerNorm (post-LN layers already end in one)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config, i) for i in range(config.n_encoder_layers))
        self.final_norm = (
            LayerNorm(config.d_model, config.layer_norm_eps) if config.norm == "pre" else None
        )

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        capture: bool = False,
        intervention: Intervention = NO_INTERVENTION,
    ) -> tuple[Tensor, list[LayerTrace]]:
        """``(B, T, d_model)`` → ``(B, T, d_model)`` memory, and the layer traces if captured."""
        traces = []
        for layer in self.layers:
            x, trace = layer(x, mask, capture, intervention)
            if trace is not None:
                traces.append(trace)
        if self.final_norm is not None:
            x = _norm(self.final_norm, x, intervention)
        return x, traces


class Decoder(nn.Module):
    """N decoder layers; pre-LN stacks end with a LayerNorm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.n_decoder_layers))
        self.final_norm = (
            LayerNorm(config.d_model, config.layer_norm_eps) if config.norm == "pre" else None
        )

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
        capture: bool = False,
        intervention: Intervention = NO_INTERVENTION,
        position_offset: int = 0,
    ) -> tuple[Tensor, list[LayerTrace]]:
        """``(B, Tq, d_model)`` → ``(B, Tq, d_model)``, and the layer traces if captured."""
        traces = []
        for i, layer in enumerate(self.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x, trace = layer(
                x,
                self_mask,
                memory,
                memory_mask,
                layer_cache,
                capture,
                intervention,
                position_offset,
            )
            if trace is not None:
                traces.append(trace)
        if self.final_norm is not None:
            x = _norm(self.final_norm, x, intervention)
        return x, traces


def _norm(norm: LayerNorm, x: Tensor, intervention: Intervention) -> Tensor:
    """``norm(x)``, with seed 004's formula when the intervention asks for it."""
    return norm(x, unbiased_std_plus_eps=True) if intervention.norm_mistake else norm(x)


def _inverted(mask: Tensor | None, shape: tuple[int, ...], device: torch.device) -> Tensor:
    """``mask`` with its polarity inverted (``None``, nothing masked, becomes all masked)."""
    if mask is None:
        return torch.zeros(shape, dtype=torch.bool, device=device)
    return ~mask


@dataclass
class DecoderCache:
    """Key/value caches of every decoder layer, plus which cached target positions are real tokens.

    Made by :meth:`Transformer.new_cache`; :meth:`Transformer.decode` fills it step by step.
    """

    layers: list[LayerCache]
    real_keys: Tensor | None = None  # (B, T_past) bool, True for real tokens, False for padding

    @property
    def length(self) -> int:
        """Number of target positions already decoded."""
        return self.layers[0].self_attention.length if self.layers else 0

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (to rewind generation)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        for layer in self.layers:
            kv = layer.self_attention
            if kv.keys is not None:
                kv.keys, kv.values = kv.keys[:, :, :length], kv.values[:, :, :length]
        if self.real_keys is not None:
            self.real_keys = self.real_keys[:, :length]


def _check_token_ids(tokens: Tensor, vocab: int) -> None:
    """Raise ``ValueError`` naming the first id of ``(B, T)`` ``tokens`` outside ``0..vocab-1``
    and where it is. One device sync when every id is valid."""
    bad = (tokens < 0) | (tokens >= vocab)  # (B, T)
    if tokens.numel() and bool(bad.any()):
        row, position = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"token id {int(tokens[row, position])} (row {row}, position {position}) is outside "
            f"the vocabulary: ids must lie in 0..{vocab - 1}"
        )


class Generator(nn.Module):
    """The final linear projection to vocabulary logits (softmax is left to the loss/sampler)."""

    def __init__(self, d_model: int, vocab_size: int, bias: bool = True) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, T, d_model)`` → ``(B, T, vocab_size)`` logits."""
        return self.proj(x)


@dataclass
class Encoded:
    """The encoder's output for one batch of sources.

    ``memory`` ``(B, Ts, d_model)``; ``mask`` ``(B, 1, 1, Ts)`` source padding mask (``None``
    when the padding mask is switched off, or when the fast path found nothing padded);
    ``layers`` and ``input`` only when captured.
    """

    memory: Tensor
    mask: Tensor | None
    input: StackInput | None = None
    layers: list[LayerTrace] = field(default_factory=list)


@dataclass
class Decoded:
    """The decoder's output: ``hidden`` ``(B, Tq, d_model)``, ``logits`` ``(B, Tq, V)``, and,
    when captured, the layer traces, the input record and the ``(Tq, Tk)`` causal mask."""

    hidden: Tensor
    logits: Tensor
    input: StackInput | None = None
    layers: list[LayerTrace] = field(default_factory=list)
    causal: Tensor | None = None


class Transformer(nn.Module):
    """Encoder-decoder, encoder-only or decoder-only Transformer built from one :class:`ModelConfig`.

    Call it with ``src`` (encoder), ``tgt`` (decoder) or both, as the architecture needs:
    ``model(src, tgt)`` returns ``(B, Tt, V)`` logits; ``model(src, tgt, capture=True)`` returns a
    :class:`~transformer.trace.Trace` holding the logits and every intermediate.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model

        def positional() -> nn.Module:
            if config.positional == "sinusoidal":
                return SinusoidalPositionalEncoding(
                    d, config.max_len, layout=config.sinusoidal_layout
                )
            return LearnedPositionalEmbedding(d, config.max_len)

        def embedding_norm() -> LayerNorm | None:
            return LayerNorm(d, config.layer_norm_eps) if config.embedding_norm else None

        scale = config.scale_embeddings
        self.embedding_dropout = nn.Dropout(config.dropout)
        self.src_embedding: TokenEmbedding | None = None
        self.tgt_embedding: TokenEmbedding | None = None
        # Token-type (segment) embeddings, added to the encoder's input (BERT).
        self.token_type_embedding: nn.Embedding | None = None
        if config.has_encoder:
            self.src_embedding = TokenEmbedding(config.src_vocab_size, d, config.pad_id, scale)
            self.src_positional = positional()
            if config.n_token_types:
                self.token_type_embedding = nn.Embedding(config.n_token_types, d)
            self.src_embedding_norm = embedding_norm()
            self.encoder = Encoder(config)
        if config.has_decoder:
            self.tgt_embedding = TokenEmbedding(config.tgt_vocab_size, d, config.pad_id, scale)
            self.tgt_positional = positional()
            self.tgt_embedding_norm = embedding_norm()
            self.decoder = Decoder(config)
        self.generator = Generator(d, config.output_vocab_size, bias=config.generator_bias)
        self._init_weights()
        if config.tie_embeddings:
            # Section 3.4: one matrix for both embeddings and the pre-softmax projection.
            if self.src_embedding is not None and self.tgt_embedding is not None:
                self.tgt_embedding.lookup.weight = self.src_embedding.lookup.weight
            output_embedding = self.tgt_embedding or self.src_embedding
            self.generator.proj.weight = output_embedding.lookup.weight

    def _init_weights(self) -> None:
        """Xavier-uniform for every matrix, zeros for biases, zero padding embeddings."""
        for name, param in self.named_parameters():
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)
            elif name.endswith(".bias") and "norm" not in name:
                nn.init.zeros_(param)
        with torch.no_grad():
            for embedding in (self.src_embedding, self.tgt_embedding):
                if embedding is not None:
                    embedding.lookup.weight[self.config.pad_id].zero_()

    @property
    def device(self) -> torch.device:
        """The device the weights are on."""
        return self.generator.proj.weight.device

    # -- inputs ---------------------------------------------------------------------------

    def _embed(
        self,
        tokens: Tensor,
        embedding: TokenEmbedding,
        positional: nn.Module,
        offset: int,
        capture: bool,
        intervention: Intervention,
        real: Tensor,
        norm: LayerNorm | None = None,
        token_types: Tensor | None = None,
        check_ids: bool = True,
    ) -> tuple[Tensor, StackInput | None]:
        """``(B, T)`` ids → ``(B, T, d_model)``: scaled token embedding + positional encoding
        (+ token-type embedding, then LayerNorm, where the configuration has them).

        ``real`` ``(B, T)`` bool marks the real (non-padding) tokens, for the trace.
        ``check_ids`` validates the ids (one device sync); incremental decoding skips it for the
        tokens it feeds back, which the model itself chose.
        """
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, length), got shape {tuple(tokens.shape)}")
        if check_ids:
            _check_token_ids(tokens, embedding.lookup.num_embeddings)
        token_vectors = embedding(tokens)  # (B, T, d_model)
        if SINUSOID_SWAPPED in intervention.mistakes and isinstance(
            positional, SinusoidalPositionalEncoding
        ):
            pe = positional.swapped_base_1000(tokens.size(1), offset)  # seed 004's table
        else:
            pe = positional(tokens.size(1), offset)  # (T, d_model)
        if not intervention.positional_encoding:
            pe = torch.zeros_like(pe)
        x = token_vectors + pe
        type_vectors = None
        if self.token_type_embedding is not None:
            if token_types is None:
                token_types = torch.zeros_like(tokens)
            elif token_types.shape != tokens.shape:
                raise ValueError(
                    f"token_types must have the tokens' shape {tuple(tokens.shape)}, got "
                    f"{tuple(token_types.shape)}"
                )
            n_types = self.token_type_embedding.num_embeddings
            if token_types.numel() and (
                int(token_types.min()) < 0 or int(token_types.max()) >= n_types
            ):
                raise ValueError(f"token types must lie in 0..{n_types - 1}")
            type_vectors = self.token_type_embedding(token_types)  # (B, T, d_model)
            x = x + type_vectors
        elif token_types is not None:
            raise ValueError("this model has no token-type embeddings: leave token_types out")
        if norm is not None:
            x = _norm(norm, x, intervention)
        x = self.embedding_dropout(x)
        record = None
        if capture:
            record = StackInput(
                tokens=tokens,
                token_embedding=token_vectors.detach(),
                positional=pe.detach(),
                real_tokens=real,
                position_offset=offset,
                token_type_embedding=None if type_vectors is None else type_vectors.detach(),
            )
        return x, record

    # -- the two halves -------------------------------------------------------------------

    def encode(
        self,
        src: Tensor,
        *,
        capture: bool = False,
        intervention: Intervention = NO_INTERVENTION,
        token_types: Tensor | None = None,
    ) -> Encoded:
        """Run the encoder on ``(B, Ts)`` source ids (and ``(B, Ts)`` token types, if the
        model has token-type embeddings; all 0 when left out)."""
        if not self.config.has_encoder:
            raise ValueError(f"a {self.config.architecture} model has no encoder")
        x, record = self._embed(
            src,
            self.src_embedding,
            self.src_positional,
            0,
            capture,
            intervention,
            src != self.config.pad_id,
            self.src_embedding_norm,
            token_types,
        )
        mask = padding_mask(src, self.config.pad_id) if intervention.padding_mask else None
        if MASK_INVERTED in intervention.mistakes:
            mask = _inverted(mask, (src.size(0), 1, 1, src.size(1)), src.device)
        elif mask is not None and not capture and bool(mask.all()):
            # Nothing is padded: the fast path gives sdpa no mask, which lets it take its
            # fastest kernel (one check here instead of a masked kernel in every layer).
            mask = None
        memory, layers = self.encoder(x, mask, capture, intervention)
        return Encoded(memory=memory, mask=mask, input=record, layers=layers)

    def decode(
        self,
        tgt: Tensor,
        encoded: Encoded | None = None,
        *,
        cache: DecoderCache | None = None,
        capture: bool = False,
        intervention: Intervention = NO_INTERVENTION,
        check_ids: bool = True,
    ) -> Decoded:
        """Run the decoder on ``(B, Tq)`` target ids and return hidden states and logits.

        ``check_ids`` validates the ids of a whole sequence or of a cache's first call (one
        device sync); a decoding loop that validated its prefix passes ``False``.

        With a ``cache``, ``tgt`` holds only the *new* positions: their keys and values are
        appended to the cache, and the cross-attention keys/values over ``encoded.memory`` are
        computed on the first call and reused after.
        """
        if not self.config.has_decoder:
            raise ValueError(f"a {self.config.architecture} model has no decoder")
        if self.config.has_encoder and encoded is None:
            raise ValueError("an encoder-decoder model decodes against encode(src)'s output")
        offset = cache.length if cache is not None else 0
        if self.config.mask_target_padding:
            real_keys = tgt != self.config.pad_id  # (B, Tq)
        else:  # the pad id is real input here (Marian's start token, GPT-2's <|endoftext|>)
            real_keys = torch.ones_like(tgt, dtype=torch.bool)
        # Ids are checked where they enter: a whole sequence, or the first call on a cache (the
        # prefix); the tokens a decoding loop feeds back one by one come from the model's own
        # vocabulary, and checking them would cost a device sync per step.
        x, record = self._embed(
            tgt,
            self.tgt_embedding,
            self.tgt_positional,
            offset,
            capture,
            intervention,
            real_keys,
            self.tgt_embedding_norm,
            check_ids=check_ids and offset == 0,
        )
        # Self-attention keys are the cached positions plus the new ones.
        if cache is not None:
            if cache.real_keys is not None:
                real_keys = torch.cat([cache.real_keys, real_keys], dim=1)
            cache.real_keys = real_keys
        n_queries, n_keys = tgt.size(1), real_keys.size(1)
        causal = causal_mask(n_queries, n_keys, device=tgt.device)
        self_mask = combine_masks(
            causal if intervention.causal_mask else None,
            real_keys[:, None, None, :]
            if intervention.padding_mask and self.config.mask_target_padding
            else None,
        )
        if MASK_INVERTED in intervention.mistakes:
            # The cross-attention mask is encode()'s, inverted there.
            self_mask = _inverted(self_mask, (tgt.size(0), 1, n_queries, n_keys), tgt.device)
        memory = encoded.memory if encoded is not None else None
        memory_mask = encoded.mask if encoded is not None else None
        hidden, layers = self.decoder(
            x, self_mask, memory, memory_mask, cache, capture, intervention, offset
        )
        return Decoded(
            hidden=hidden,
            logits=self.generator(hidden),
            input=record,
            layers=layers,
            causal=causal[0, 0] if capture else None,
        )

    def new_cache(self) -> DecoderCache:
        """An empty key/value cache for incremental decoding with :meth:`decode`."""
        if not self.config.has_decoder:
            raise ValueError(f"a {self.config.architecture} model has no decoder to cache")
        return DecoderCache(layers=[LayerCache() for _ in range(self.config.n_decoder_layers)])

    # -- the whole model ------------------------------------------------------------------

    @overload
    def forward(
        self,
        src: Tensor | None = ...,
        tgt: Tensor | None = ...,
        *,
        capture: Literal[False] = ...,
        intervention: Intervention = ...,
        token_types: Tensor | None = ...,
    ) -> Tensor: ...

    @overload
    def forward(
        self,
        src: Tensor | None = ...,
        tgt: Tensor | None = ...,
        *,
        capture: Literal[True],
        intervention: Intervention = ...,
        token_types: Tensor | None = ...,
    ) -> Trace: ...

    def forward(
        self,
        src: Tensor | None = None,
        tgt: Tensor | None = None,
        *,
        capture: bool = False,
        intervention: Intervention = NO_INTERVENTION,
        token_types: Tensor | None = None,
    ) -> Tensor | Trace:
        """Logits for a batch: ``(B, Tt, V)`` (or ``(B, Ts, V)`` for encoder-only models).

        Args:
            src: ``(B, Ts)`` source ids (encoder-decoder and encoder-only models).
            tgt: ``(B, Tt)`` target ids, shifted right (encoder-decoder and decoder-only).
            capture: return a :class:`Trace` of every step instead of the bare logits.
            intervention: what-if switches (see :class:`Intervention`).
            token_types: ``(B, Ts)`` segment ids of the source, for models with token-type
                embeddings (BERT); all 0 when left out.
        """
        config = self.config
        if not config.has_encoder and src is not None:
            raise ValueError("a decoder-only model takes its tokens as tgt, not src")
        if not config.has_decoder and tgt is not None:
            raise ValueError("an encoder-only model takes its tokens as src, not tgt")
        if config.has_encoder and src is None:
            raise ValueError(f"a {config.architecture} model needs src")
        if config.has_decoder and tgt is None:
            raise ValueError(f"a {config.architecture} model needs tgt")

        encoded = None
        if config.has_encoder:
            encoded = self.encode(
                src, capture=capture, intervention=intervention, token_types=token_types
            )
        if config.has_decoder:
            decoded = self.decode(tgt, encoded, capture=capture, intervention=intervention)
            logits = decoded.logits
        else:
            decoded = None
            logits = self.generator(encoded.memory)
        if not capture:
            return logits
        return Trace(
            config=config,
            logits=logits.detach(),
            source=encoded.input if encoded else None,
            target=decoded.input if decoded else None,
            encoder_layers=encoded.layers if encoded else [],
            decoder_layers=decoded.layers if decoded else [],
            memory=encoded.memory.detach() if encoded else None,
            decoder_output=decoded.hidden.detach() if decoded else None,
            causal=decoded.causal if decoded else None,
        )


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters, each shared (tied) tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
