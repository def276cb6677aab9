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

from .attention import MultiHeadAttention
from .cache import KeyValueCache
from .config import ModelConfig
from .layers import Dropout, LayerNorm, PositionwiseFeedForward
from .masks import one_pass, remembered
from .modern import GatedFeedForward, RMSNorm, sliding_window_mask
from .operations import PAPER, Operations
from .probes import AttentionProbe
from .rotary import RotaryEmbedding
from .trace import AttentionKind, AttentionRecord, LayerTrace, StackInput


class _Residual(nn.Module):
    """Residual connection with dropout and layer norm, post-LN or pre-LN (section 5.4).

    Two later placements: ``norm="output"`` normalises the sub-layer's output before the add,
    ``x + Norm(Sublayer(x))`` (OLMo 2: the stream itself is never normalised, so it may grow,
    but each update arrives at a set scale); ``post_sublayer_norm`` does that on top of the
    pre-norm, ``x + Norm₂(Sublayer(Norm₁(x)))`` (Gemma 2 and 3: ``post_norm``).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = _norm(config)
        self.dropout = Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"
        self.output_norm = config.norm == "output"
        self.post_norm = _norm(config) if config.post_sublayer_norm else None

    def sublayer_input(self, x: Tensor, ops: Operations = PAPER) -> Tensor:
        """What the sub-layer reads: ``LayerNorm(x)`` in pre-LN, ``x`` itself in post-LN."""
        if not self.pre_norm:
            return x
        return ops.layer_norm(self.norm, x)

    def kept(self, output: Tensor) -> Tensor | None:
        """What a trace keeps of the ``(B, T, d_model)`` stream after this sub-layer: nothing
        where it is the plain sum ``x + update`` (pre-LN or output norms, no dropout at work),
        which the trace adds when read (see LayerTrace); else the output, detached."""
        summed = self.pre_norm or self.output_norm
        plain_sum = summed and (not self.training or self.dropout.p == 0)
        return None if plain_sum else output.detach()

    def added(self, sublayer_output: Tensor, ops: Operations = PAPER) -> Tensor:
        """``(B, T, d_model)``: what this sub-layer adds to the stream: its output, normalised
        first where the norms sit on the output (``norm="output"``, ``post_sublayer_norm``)."""
        if self.output_norm:
            return ops.layer_norm(self.norm, sublayer_output)
        if self.post_norm is not None:
            return ops.layer_norm(self.post_norm, sublayer_output)
        return sublayer_output

    def forward(self, x: Tensor, added: Tensor, ops: Operations = PAPER) -> Tensor:
        """The stream after the sub-layer from its input ``x`` and what it adds (its output,
        or :meth:`added` of it where a norm sits on the output), each ``(B, T, d_model)``:
        post-LN ``LayerNorm(x + Dropout(added))``, else ``x + Dropout(added)``."""
        x = x + self.dropout(added)
        if self.pre_norm or self.output_norm:
            return x
        return ops.layer_norm(self.norm, x)


def _norm(config: ModelConfig) -> LayerNorm | RMSNorm:
    """The configuration's normalisation: LayerNorm (paper) or RMSNorm (``norm_kind="rms"``,
    times ``norm_offset + w``)."""
    if config.norm_kind == "rms":
        return RMSNorm(config.d_model, config.layer_norm_eps, config.norm_offset)
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
        softcap=probe.softcap,
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
        d_head=config.d_head,
        qk_norm=config.qk_norm,
        norm_eps=config.layer_norm_eps,
        norm_offset=config.norm_offset,
        softcap=config.attention_softcap,
        scale_dim=config.score_scale_dim,
    )


def _feed_forward(config: ModelConfig) -> PositionwiseFeedForward | GatedFeedForward:
    if config.feed_forward_kind == "gated":
        return GatedFeedForward(
            config.d_model, config.d_ff, config.activation, config.mlp_bias, config.dropout
        )
    return PositionwiseFeedForward(config.d_model, config.d_ff, config.dropout, config.activation)


def rotary_for(config: ModelConfig, local: bool = False) -> RotaryEmbedding | None:
    """One rotary table for every layer of a stack (``positional="rotary"``), else ``None``;
    ``local``: the sliding-window layers' own table where ``local_rope_base`` gives them one
    (unscaled), else ``None``."""
    if config.positional != "rotary" or (local and config.local_rope_base is None):
        return None
    base = config.local_rope_base if local else config.rope_base
    assert base is not None  # checked above
    return RotaryEmbedding(
        config.d_head,
        config.max_len,
        base,
        rotary_dims=config.rotary_dims,
        scaling=None if local else config.rope_scaling_dict,
    )


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
        attended = self.attention_residual.added(attended, ops)
        x = after_attention = self.attention_residual(x, attended, ops)
        update = self.feed_forward(self.feed_forward_residual.sublayer_input(x, ops))
        update = self.feed_forward_residual.added(update, ops)
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
        self.window = config.layer_window(index) if config.architecture == "decoder-only" else None
        self.parallel = config.parallel_residual
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
        update = self._feed_forward(x if self.parallel else y, ops)
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

    def _feed_forward(self, reads: Tensor, ops: Operations) -> Tensor:
        """What the feed-forward sub-layer adds to the stream, ``(B, T, d_model)``, from
        ``reads``: the layer's input where attention and feed-forward run in parallel
        (GPT-NeoX), else the stream after attention."""
        update = self.feed_forward(self.feed_forward_residual.sublayer_input(reads, ops))
        return self.feed_forward_residual.added(update, ops)

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
        if self.window is not None:
            mask = self._window_mask(mask, offset, x.size(1), kv_cache)
        h = self.self_attention_residual.sublayer_input(x, ops)
        attended, probe = self.self_attention(h, h, mask, kv_cache, capture=capture, ops=ops)
        record = _record("decoder_self", self.index, probe, mask, offset, ops) if capture else None
        attended = self.self_attention_residual.added(attended, ops)
        return _Sublayer(attended, self.self_attention_residual(x, attended, ops), record)

    def _window_mask(
        self, mask: Tensor | None, offset: int, n_queries: int, cache: KeyValueCache | None
    ) -> Tensor:
        """This sliding-window layer's ``(B, 1, Tq, Tk)`` mask: ``mask`` where also ``query −
        key < window``, over the keys it will hold (a bounded cache's latest, and the new)."""
        assert self.window is not None
        n_keys = (cache.stored if cache is not None else 0) + n_queries
        window = self.window

        def band() -> Tensor:
            return sliding_window_mask(mask, window, offset, n_queries, n_keys)

        if mask is None:
            return band()
        return remembered(mask, ("window", window, offset, n_keys), band)

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
        attended = self.cross_attention_residual.added(attended, ops)
        return _Sublayer(attended, self.cross_attention_residual(x, attended, ops), record)


class Encoder(nn.Module):
    """N encoder layers; pre-LN stacks end with a LayerNorm (post-LN layers already end in one)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        rotary = rotary_for(config)
        self.layers = nn.ModuleList(
            EncoderLayer(config, i, rotary) for i in range(config.n_encoder_layers)
        )
        self.final_norm = _norm(config) if config.norm != "post" else None

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
        """Forget every position from ``length`` on (to rewind generation). Where a sliding
        window has already let go of positions that would be read again, the whole cache is
        emptied instead: the next call computes the text again from its start."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        if not all(layer.self_attention.can_truncate(length) for layer in self.layers):
            length = 0
            for layer in self.layers:
                kv = layer.self_attention
                kv.keys, kv.values, kv.dropped = None, None, 0
        for layer in self.layers:
            layer.self_attention.truncate(length)
        if self.real_keys is not None:
            self.real_keys = self.real_keys[:, :length]


class Decoder(nn.Module):
    """N decoder layers; pre-LN stacks end with a LayerNorm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        rotary, local = rotary_for(config), rotary_for(config, local=True)

        def rotary_of(i: int) -> RotaryEmbedding | None:  # Gemma 3's sliding layers: their own
            return local if local is not None and config.layer_window(i) is not None else rotary

        self.layers = nn.ModuleList(
            DecoderLayer(config, i, rotary_of(i)) for i in range(config.n_decoder_layers)
        )
        self.final_norm = _norm(config) if config.norm != "post" else None

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
