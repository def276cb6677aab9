"""Encoder and decoder layers and their stacks (paper section 3.1).

An encoder layer is self-attention, then the position-wise feed-forward network; a decoder
layer is masked self-attention, cross-attention over the encoder's memory (only when there is
an encoder), then the feed-forward network. Each sub-layer sits in a residual connection with
dropout and layer norm (:class:`Residual`). Every forward takes the pass's
:class:`~transformer.core.run.Run` (the paper's operations, nothing kept, by default) and hands it
on; where the run keeps a trace, each layer builds its record at the end from what its modules
left in the run (:func:`_layer_trace`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .cache import KeyValueCache
from .config import ModelConfig
from .layers import Dropout, LayerNorm, PositionwiseFeedForward
from .masks import one_pass, remembered
from .modern import GatedFeedForward, RMSNorm, sliding_window_mask
from .rotary import RotaryEmbedding
from .run import PLAIN, Run
from .trace import AttentionKind, AttentionRecord, LayerTrace, StackInput


class Residual(nn.Module):
    """A sub-layer inside its residual connection, with dropout and a norm (section 5.4).

    :meth:`forward` holds the equations, one per placement of the norm: the paper's post-LN
    ``x = LayerNorm(x + Sublayer(x))``, pre-LN ``x = x + Sublayer(LayerNorm(x))``, and two later
    ones. ``norm="output"`` normalises the sub-layer's output before the add, ``x = x +
    Norm(Sublayer(x))`` (OLMo 2: the stream itself is never normalised, so it may grow, but each
    update arrives at a set scale); ``post_sublayer_norm`` does that on top of the pre-norm,
    ``x = x + Norm₂(Sublayer(Norm₁(x)))`` (Gemma 2 and 3: ``post_norm``).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = _norm(config)
        self.dropout = Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"
        self.output_norm = config.norm == "output"
        self.post_norm = _norm(config) if config.post_sublayer_norm else None

    def forward(
        self,
        x: Tensor,
        sublayer: Callable[[Tensor], Tensor],
        run: Run = PLAIN,
        reads: Tensor | None = None,
    ) -> Tensor:
        """The ``(B, T, d_model)`` stream after ``sublayer`` (``(B, T, d_model)`` →
        ``(B, T, d_model)``) added its update to ``x``. ``reads``: what the sub-layer reads
        where it is not ``x`` (GPT-NeoX's parallel residual: the layer's input).

        ``sublayer`` is a function, never a module itself: accelerate's hooks on a model spread
        over devices move every module argument of a forward to the device (a module offloaded
        to disk would be copied off the meta device)."""
        h = x if reads is None else reads
        if not (self.pre_norm or self.output_norm):  # the paper: x = LayerNorm(x + Sublayer(x))
            update = sublayer(h)
            out = self.norm(x + self.dropout(update), run)
        elif self.pre_norm:  # pre-LN: x = x + Sublayer(LayerNorm(x))
            update = sublayer(self.norm(h, run))
            if self.post_norm is not None:  # Gemma: x = x + Norm₂(Sublayer(Norm₁(x)))
                update = self.post_norm(update, run)
            out = x + self.dropout(update)
        else:  # OLMo 2: x = x + Norm(Sublayer(x))
            update = self.norm(sublayer(h), run)
            out = x + self.dropout(update)
        run.keep_for_trace(self, (update.detach(), out))  # for the layer's record, where traced
        return out

    def kept(self, output: Tensor) -> Tensor | None:
        """What a trace keeps of the ``(B, T, d_model)`` stream after this sub-layer: nothing
        where it is the plain sum ``x + update`` (pre-LN or output norms, no dropout at work),
        which the trace adds when read (see LayerTrace); else the output, detached."""
        summed = self.pre_norm or self.output_norm
        plain_sum = summed and (not self.training or self.dropout.p == 0)
        return None if plain_sum else output.detach()


def _norm(config: ModelConfig) -> LayerNorm | RMSNorm:
    """The configuration's normalisation: LayerNorm (paper) or RMSNorm (``norm_kind="rms"``,
    times ``norm_offset + w``)."""
    if config.norm_kind == "rms":
        return RMSNorm(config.d_model, config.layer_norm_eps, config.norm_offset)
    return LayerNorm(config.d_model, config.layer_norm_eps)


# -- what a captured pass records: built from what the modules left in the run ---------------


def _record(run: Run, attention: MultiHeadAttention, offset: int) -> AttentionRecord | None:
    """The trace's record of one attention call of this run, its first query at position
    ``offset`` (its weights kept unless the capture policy says not to: the record then
    computes them again when read); ``None`` where it did not run."""
    kept = run.take_kept(attention)
    if kept is None:
        return None
    probe, mask = kept
    assert attention.kind is not None  # a layer's attention knows where it sits
    batch, _, n_queries, n_keys = probe.weights.shape
    if mask is None:  # nothing was masked: an all-True view, no allocation of (B, 1, Tq, Tk)
        mask = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=probe.weights.device)
    mask = mask.expand(batch, 1, n_queries, n_keys)
    return AttentionRecord(
        softcap=probe.softcap,
        kind=attention.kind,
        layer=attention.layer,
        kept_scores=None,
        kept_weights=probe.weights.detach() if run.capture.keep_attention_weights else None,
        mask=mask,
        query_offset=offset,
        # Kept only where the rotary pair cannot give them back (see AttentionProbe.rebuild).
        kept_queries=None if probe.rebuild else probe.queries.detach(),
        kept_keys=None if probe.rebuild else probe.keys.detach(),
        kv_head_of=probe.kv_head_of,
        rotary=probe.rotary,
        rebuild=probe.rebuild,
    )


def _layer_trace(
    run: Run, layer: EncoderLayer | DecoderLayer, x: Tensor, out: Tensor, offset: int = 0
) -> LayerTrace | None:
    """The record of ``layer``'s part of a traced run, from its ``(B, T, d_model)`` input
    ``x`` and output ``out`` and what its sub-layers left in the run (their first query at
    position ``offset``); ``None`` when the run keeps no trace."""
    if not run.traced:
        return None
    decoder = isinstance(layer, DecoderLayer)
    residual: Residual = (
        layer.self_attention_residual
        if isinstance(layer, DecoderLayer)
        else layer.attention_residual
    )
    self_attention = _record(run, layer.self_attention, offset)
    assert self_attention is not None  # a traced pass keeps every attention's probe
    update, after_attention = run.take_kept(residual)
    cross, cross_update, after_cross = None, None, None
    if isinstance(layer, DecoderLayer) and layer.cross_attention is not None:
        cross = _record(run, layer.cross_attention, offset)
        cross_update, after_cross = run.take_kept(layer.cross_attention_residual)
    feed_forward_update, _ = run.take_kept(layer.feed_forward_residual)
    return LayerTrace(
        stack="decoder" if decoder else "encoder",
        layer=layer.index,
        input=x.detach(),
        self_attention=self_attention,
        kept_self_attention_output=residual.kept(after_attention),
        cross_attention=cross,
        cross_attention_output=None if after_cross is None else after_cross.detach(),
        feed_forward_output=out.detach(),
        self_attention_update=update,
        feed_forward_update=feed_forward_update,
        cross_attention_update=cross_update,
    )


def _attention(
    config: ModelConfig,
    kind: AttentionKind,
    index: int,
    rotary: RotaryEmbedding | None = None,
) -> MultiHeadAttention:
    return MultiHeadAttention(
        config, kind=kind, layer=index, rotary=rotary if kind != "cross" else None
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
        self.attention_residual = Residual(config)
        self.feed_forward_residual = Residual(config)

    def forward(
        self, x: Tensor, mask: Tensor | None, run: Run = PLAIN
    ) -> tuple[Tensor, LayerTrace | None]:
        """``(B, T, d_model)`` → ``(B, T, d_model)``, and the layer's record where ``run`` is
        traced; ``mask`` broadcasts to ``(B, H, T, T)``. Each sub-layer inside its residual
        connection (:class:`Residual`: ``x = x + Sublayer(LayerNorm(x))`` in pre-LN)."""
        run = run.within("encoder", self.index)  # marked where Inside a layer looks here
        patched, i = run.ops.patched, self.index  # what a patch sees (Operations.patch)

        def feed_forward(h: Tensor) -> Tensor:
            return patched("encoder", i, "mlp", self.feed_forward(h, run))

        x = layer_input = patched("encoder", i, "residual", x)
        x = self.attention_residual(x, lambda h: self.self_attention(h, h, mask, run=run), run)
        x = self.feed_forward_residual(x, feed_forward, run)
        return x, _layer_trace(run, self, layer_input, x)


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
        self.self_attention_residual = Residual(config)
        self.cross_attention: MultiHeadAttention | None = None
        if config.has_encoder:
            self.cross_attention = _attention(config, "cross", index)
            self.cross_attention_residual = Residual(config)
        self.feed_forward = _feed_forward(config)
        self.feed_forward_residual = Residual(config)

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None,
        encoded: Encoded | None = None,
        cache: LayerCache | None = None,
        run: Run = PLAIN,
    ) -> tuple[Tensor, LayerTrace | None]:
        """Decode ``(B, Tq, d_model)`` target positions; their record where ``run`` is traced.

        ``self_mask`` broadcasts to ``(B, H, Tq, Tk)`` (causal and target padding, Tk counting
        cached positions); ``encoded`` holds the ``(B, Ts, d_model)`` encoder memory and its
        mask, which broadcasts to ``(B, H, Tq, Ts)`` (source padding). Each sub-layer inside
        its residual connection (:class:`Residual`: ``x = x + Sublayer(LayerNorm(x))`` in pre-LN).
        """
        run = run.within("decoder", self.index)  # marked where Inside a layer looks here
        self_cache = cache.self_attention if cache is not None else None
        offset = self_cache.length if self_cache is not None else 0  # positions before x
        mask = self._window_mask(self_mask, offset, x.size(1), self_cache)
        patched, i = run.ops.patched, self.index  # what a patch sees (Operations.patch)

        def feed_forward(h: Tensor) -> Tensor:
            return patched("decoder", i, "mlp", self.feed_forward(h, run))

        x = layer_input = patched("decoder", i, "residual", x)
        x = self.self_attention_residual(
            x, lambda h: self.self_attention(h, h, mask, self_cache, run), run
        )
        if self.cross_attention is not None:
            x = self.cross_attention_residual(x, self._cross_attend(encoded, cache, run), run)
        # GPT-NeoX's parallel residual: x = x + Attention(LN₁(x)) + FeedForward(LN₂(x)), the
        # feed-forward reading the layer's input, not the stream after attention.
        reads = layer_input if self.parallel else None
        x = self.feed_forward_residual(x, feed_forward, run, reads)
        return x, _layer_trace(run, self, layer_input, x, offset)

    def _cross_attend(
        self, encoded: Encoded | None, cache: LayerCache | None, run: Run
    ) -> Callable[[Tensor], Tensor]:
        """The cross-attention sub-layer, ``(B, Tq, d_model)`` → ``(B, Tq, d_model)``: over
        ``encoded``'s memory, or the keys and values cached from it."""
        cross_attention = self.cross_attention
        assert cross_attention is not None
        kv_cache = cache.cross_attention if cache is not None else None
        if encoded is None and not (kv_cache is not None and kv_cache.keys is not None):
            raise ValueError("this decoder layer cross-attends: pass the encoder memory")
        memory = encoded.memory if encoded is not None else None
        mask = encoded.mask if encoded is not None else None
        return lambda h: run.ops.cross_attention(cross_attention, h, memory, mask, kv_cache, run)

    def _window_mask(
        self, mask: Tensor | None, offset: int, n_queries: int, cache: KeyValueCache | None
    ) -> Tensor | None:
        """This layer's self-attention mask: ``mask`` itself, or on a sliding-window layer its
        ``(B, 1, Tq, Tk)`` band: ``mask`` where also ``query − key < window``, over the keys it
        will hold (a bounded cache's latest, and the new)."""
        if self.window is None:
            return mask
        n_keys = (cache.stored if cache is not None else 0) + n_queries
        window = self.window

        def band() -> Tensor:
            return sliding_window_mask(mask, window, offset, n_queries, n_keys)

        if mask is None:
            return band()
        return remembered(mask, ("window", window, offset, n_keys), band)


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
        self, x: Tensor, mask: Tensor | None, run: Run = PLAIN
    ) -> tuple[Tensor, list[LayerTrace]]:
        """``(B, T, d_model)`` → ``(B, T, d_model)`` memory, and the layer traces if traced."""
        traces = []
        with one_pass():  # every layer asks the mask the same questions: answered once
            for layer in self.layers:
                x, trace = layer(x, mask, run)
                if trace is not None:
                    traces.append(trace)
        x = run.ops.patched("encoder", len(self.layers), "residual", x)  # the stack's output
        if self.final_norm is not None:
            x = self.final_norm(x, run)
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
        run: Run = PLAIN,
    ) -> tuple[Tensor, list[LayerTrace]]:
        """``(B, Tq, d_model)`` → ``(B, Tq, d_model)``, and the layer traces if traced."""
        traces = []
        with one_pass():  # every layer asks the masks the same questions: answered once
            for i, layer in enumerate(self.layers):
                layer_cache = cache.layers[i] if cache is not None else None
                x, trace = layer(x, self_mask, encoded, layer_cache, run)
                if trace is not None:
                    traces.append(trace)
        x = run.ops.patched("decoder", len(self.layers), "residual", x)  # the stack's output
        if self.final_norm is not None:
            x = self.final_norm(x, run)
        return x, traces
