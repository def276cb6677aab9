"""Encoder and decoder layers and their stacks (paper section 3.1).

An encoder layer is self-attention, then the position-wise feed-forward network; a decoder
layer is masked self-attention, cross-attention over the encoder's memory (only when there is
an encoder), then the feed-forward network. Each sub-layer sits in a residual connection with
dropout and layer norm. Every forward takes the pass's :class:`Operations` (the paper's by
default) and hands it on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .attention import AttentionProbe, KeyValueCache, MultiHeadAttention
from .config import ModelConfig
from .layers import Dropout, LayerNorm, PositionwiseFeedForward
from .masks import one_pass
from .modern import GatedFeedForward, RMSNorm
from .operations import PAPER, Operations
from .rotary import RotaryEmbedding
from .trace import AttentionKind, AttentionRecord, LayerTrace, StackInput


class _Residual(nn.Module):
    """Residual connection with dropout and layer norm, post-LN or pre-LN (section 5.4)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = _norm(config)
        self.dropout = Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"

    def sublayer_input(self, x: Tensor, ops: Operations = PAPER) -> Tensor:
        """What the sub-layer reads: ``LayerNorm(x)`` in pre-LN, ``x`` itself in post-LN."""
        if not self.pre_norm:
            return x
        return ops.layer_norm(self.norm, x)

    def kept(self, output: Tensor) -> Tensor | None:
        """What a trace keeps of the ``(B, T, d_model)`` stream after this sub-layer: nothing
        where it is the plain sum ``x + sublayer`` (pre-LN, no dropout at work), which the
        trace adds when read (see LayerTrace); else the output, detached."""
        plain_sum = self.pre_norm and (not self.training or self.dropout.p == 0)
        return None if plain_sum else output.detach()

    def forward(self, x: Tensor, sublayer_output: Tensor, ops: Operations = PAPER) -> Tensor:
        """Post-LN: ``LayerNorm(x + Dropout(sublayer))``; pre-LN: ``x + Dropout(sublayer)``."""
        x = x + self.dropout(sublayer_output)
        if self.pre_norm:
            return x
        return ops.layer_norm(self.norm, x)


def _norm(config: ModelConfig) -> LayerNorm | RMSNorm:
    """The configuration's normalisation: LayerNorm (paper) or RMSNorm (``norm_kind="rms"``)."""
    if config.norm_kind == "rms":
        return RMSNorm(config.d_model, config.layer_norm_eps)
    return LayerNorm(config.d_model, config.layer_norm_eps)


def _record(
    kind: AttentionKind,
    layer: int,
    probe: AttentionProbe | None,
    mask: Tensor | None,
    offset: int,
    ops: Operations,
) -> AttentionRecord | None:
    """The trace's record of one attention call (its weights kept unless ``ops`` says not to:
    the record then computes them again when read)."""
    if probe is None:
        return None
    batch, _, n_queries, n_keys = probe.weights.shape
    if mask is None:  # nothing was masked: an all-True view, no allocation of (B, 1, Tq, Tk)
        mask = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=probe.weights.device)
    mask = mask.expand(batch, 1, n_queries, n_keys)
    return AttentionRecord(
        kind=kind,
        layer=layer,
        weights=probe.weights.detach() if ops.keep_attention_weights else None,
        mask=mask,
        query_offset=offset,
        # Kept only where the rotary pair cannot give them back (see AttentionProbe.rebuild).
        queries=None if probe.rebuild else probe.queries.detach(),
        keys=None if probe.rebuild else probe.keys.detach(),
        kv_head_of=probe.kv_head_of,
        rotary=probe.rotary,
        rebuild=probe.rebuild,
    )


def _attention(
    config: ModelConfig,
    kind: AttentionKind,
    index: int,
    rotary: RotaryEmbedding | None = None,
) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model,
        config.n_heads,
        config.dropout,
        kind=kind,
        layer=index,
        n_kv_heads=config.kv_heads,
        rotary=rotary if kind != "cross" else None,
        qkv_bias=config.attention_qkv_bias,
        output_bias=config.attention_output_bias,
    )


def _feed_forward(config: ModelConfig) -> PositionwiseFeedForward | GatedFeedForward:
    if config.feed_forward_kind == "gated":
        return GatedFeedForward(
            config.d_model, config.d_ff, config.activation, config.mlp_bias, config.dropout
        )
    return PositionwiseFeedForward(config.d_model, config.d_ff, config.dropout, config.activation)


def rotary_for(config: ModelConfig) -> RotaryEmbedding | None:
    """One rotary table for every layer of a stack (``positional="rotary"``), else ``None``."""
    if config.positional != "rotary":
        return None
    return RotaryEmbedding(config.d_head, config.max_len, config.rope_base)


class EncoderLayer(nn.Module):
    """Self-attention, then the position-wise feed-forward network, each with a residual."""

    def __init__(
        self, config: ModelConfig, index: int, rotary: RotaryEmbedding | None = None
    ) -> None:
        super().__init__()
        self.index = index
        self.self_attention = _attention(config, "encoder_self", index, rotary)
        self.feed_forward = _feed_forward(config)
        self.attention_residual = _Residual(config)
        self.feed_forward_residual = _Residual(config)

    def forward(
        self, x: Tensor, mask: Tensor | None, *, capture: bool = False, ops: Operations = PAPER
    ) -> tuple[Tensor, LayerTrace | None]:
        """``(B, T, d_model)`` → ``(B, T, d_model)``; ``mask`` broadcasts to ``(B, H, T, T)``."""
        x_in = x
        h = self.attention_residual.sublayer_input(x, ops)
        attended, probe = self.self_attention(h, h, mask, capture=capture, ops=ops)
        x = after_attention = self.attention_residual(x, attended, ops)
        update = self.feed_forward(self.feed_forward_residual.sublayer_input(x, ops))
        x = self.feed_forward_residual(x, update, ops)
        if not capture:
            return x, None
        record = _record("encoder_self", self.index, probe, mask, 0, ops)
        assert record is not None  # a captured pass keeps the attention's probe
        return x, LayerTrace(
            stack="encoder",
            layer=self.index,
            input=x_in.detach(),
            self_attention=record,
            self_attention_output=self.attention_residual.kept(after_attention),
            feed_forward_output=x.detach(),
            self_attention_update=attended.detach(),
            feed_forward_update=update.detach(),
        )


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
class LayerCache:
    """One decoder layer's key/value caches."""

    self_attention: KeyValueCache = field(default_factory=KeyValueCache)
    cross_attention: KeyValueCache = field(default_factory=lambda: KeyValueCache(static=True))


@dataclass
class _Sublayer:
    """What one attention sub-layer of a decoder layer computed: its update, the stream after
    the residual, and (when captured) the attention record."""

    update: Tensor
    output: Tensor
    record: AttentionRecord | None = None


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder memory (only when there is an
    encoder), then the feed-forward network; each sub-layer with its residual."""

    def __init__(
        self, config: ModelConfig, index: int, rotary: RotaryEmbedding | None = None
    ) -> None:
        super().__init__()
        self.index = index
        self.self_attention = _attention(config, "decoder_self", index, rotary)
        self.self_attention_residual = _Residual(config)
        self.cross_attention: MultiHeadAttention | None = None
        if config.has_encoder:
            self.cross_attention = _attention(config, "cross", index)
            self.cross_attention_residual = _Residual(config)
        self.feed_forward = _feed_forward(config)
        self.feed_forward_residual = _Residual(config)

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None,
        encoded: Encoded | None = None,
        cache: LayerCache | None = None,
        *,
        capture: bool = False,
        ops: Operations = PAPER,
    ) -> tuple[Tensor, LayerTrace | None]:
        """Decode ``(B, Tq, d_model)`` target positions.

        ``self_mask`` broadcasts to ``(B, H, Tq, Tk)`` (causal and target padding, Tk counting
        cached positions); ``encoded`` holds the ``(B, Ts, d_model)`` encoder memory and its
        mask, which broadcasts to ``(B, H, Tq, Ts)`` (source padding).
        """
        offset = cache.self_attention.length if cache is not None else 0  # positions before x
        masked = self._self_attend(x, self_mask, cache, offset, capture, ops)
        cross = None
        if self.cross_attention is not None:
            cross = self._cross_attend(masked.output, encoded, cache, offset, capture, ops)
        y = masked.output if cross is None else cross.output
        update = self.feed_forward(self.feed_forward_residual.sublayer_input(y, ops))
        out = self.feed_forward_residual(y, update, ops)
        if not capture:
            return out, None
        assert masked.record is not None  # a captured pass keeps the attention's record
        return out, LayerTrace(
            stack="decoder",
            layer=self.index,
            input=x.detach(),
            self_attention=masked.record,
            self_attention_output=self.self_attention_residual.kept(masked.output),
            cross_attention=cross.record if cross else None,
            cross_attention_output=cross.output.detach() if cross else None,
            feed_forward_output=out.detach(),
            self_attention_update=masked.update.detach(),
            feed_forward_update=update.detach(),
            cross_attention_update=cross.update.detach() if cross else None,
        )

    def _self_attend(
        self,
        x: Tensor,
        mask: Tensor | None,
        cache: LayerCache | None,
        offset: int,
        capture: bool,
        ops: Operations,
    ) -> _Sublayer:
        """The masked self-attention sub-layer over ``x`` and the cached positions; ``offset``
        is the position of ``x``'s first row."""
        kv_cache = cache.self_attention if cache is not None else None
        h = self.self_attention_residual.sublayer_input(x, ops)
        attended, probe = self.self_attention(h, h, mask, kv_cache, capture=capture, ops=ops)
        record = _record("decoder_self", self.index, probe, mask, offset, ops) if capture else None
        return _Sublayer(attended, self.self_attention_residual(x, attended, ops), record)

    def _cross_attend(
        self,
        x: Tensor,
        encoded: Encoded | None,
        cache: LayerCache | None,
        offset: int,
        capture: bool,
        ops: Operations,
    ) -> _Sublayer:
        """The cross-attention sub-layer over ``encoded``'s memory (or the cached keys);
        ``offset`` is the position of ``x``'s first row."""
        assert self.cross_attention is not None
        kv_cache = cache.cross_attention if cache is not None else None
        if encoded is None and not (kv_cache is not None and kv_cache.keys is not None):
            raise ValueError("this decoder layer cross-attends: pass the encoder memory")
        memory = encoded.memory if encoded is not None else None
        mask = encoded.mask if encoded is not None else None
        h = self.cross_attention_residual.sublayer_input(x, ops)
        attended, probe = ops.cross_attention(
            self.cross_attention, h, memory, mask, kv_cache, capture=capture, ops=ops
        )
        record = _record("cross", self.index, probe, mask, offset, ops) if capture else None
        return _Sublayer(attended, self.cross_attention_residual(x, attended, ops), record)


class Encoder(nn.Module):
    """N encoder layers; pre-LN stacks end with a LayerNorm (post-LN layers already end in one)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        rotary = rotary_for(config)
        self.layers = nn.ModuleList(
            EncoderLayer(config, i, rotary) for i in range(config.n_encoder_layers)
        )
        self.final_norm = _norm(config) if config.norm == "pre" else None

    def forward(
        self, x: Tensor, mask: Tensor | None, *, capture: bool = False, ops: Operations = PAPER
    ) -> tuple[Tensor, list[LayerTrace]]:
        """``(B, T, d_model)`` → ``(B, T, d_model)`` memory, and the layer traces if captured."""
        traces = []
        with one_pass():  # every layer asks the mask the same questions: answered once
            for layer in self.layers:
                x, trace = layer(x, mask, capture=capture, ops=ops)
                if trace is not None:
                    traces.append(trace)
        if self.final_norm is not None:
            x = ops.layer_norm(self.final_norm, x)
        return x, traces


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

    def add_real_keys(self, real: Tensor) -> Tensor:
        """Remember which of the ``(B, Tq)`` new positions are real tokens; returns the
        ``(B, T_past + Tq)`` bool of every position so far."""
        if self.real_keys is not None:
            real = torch.cat([self.real_keys, real], dim=1)
        self.real_keys = real
        return real

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (to rewind generation)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        for layer in self.layers:
            kv = layer.self_attention
            if kv.keys is not None and kv.values is not None:
                kv.keys, kv.values = kv.keys[:, :, :length], kv.values[:, :, :length]
        if self.real_keys is not None:
            self.real_keys = self.real_keys[:, :length]


class Decoder(nn.Module):
    """N decoder layers; pre-LN stacks end with a LayerNorm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        rotary = rotary_for(config)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i, rotary) for i in range(config.n_decoder_layers)
        )
        self.final_norm = _norm(config) if config.norm == "pre" else None

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None,
        encoded: Encoded | None = None,
        cache: DecoderCache | None = None,
        *,
        capture: bool = False,
        ops: Operations = PAPER,
    ) -> tuple[Tensor, list[LayerTrace]]:
        """``(B, Tq, d_model)`` → ``(B, Tq, d_model)``, and the layer traces if captured."""
        traces = []
        with one_pass():  # every layer asks the masks the same questions: answered once
            for i, layer in enumerate(self.layers):
                layer_cache = cache.layers[i] if cache is not None else None
                x, trace = layer(x, self_mask, encoded, layer_cache, capture=capture, ops=ops)
                if trace is not None:
                    traces.append(trace)
        if self.final_norm is not None:
            x = ops.layer_norm(self.final_norm, x)
        return x, traces
