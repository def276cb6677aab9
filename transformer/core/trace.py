"""The trace: typed records of everything a forward pass computed, for figures and tests.

A trace is returned by a forward pass asked to ``capture``; nothing is stored on the modules.
All tensors are detached. Attention tensors are ``(B, H, Tq, Tk)``: axis 2 is the query, axis 3
the key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from .config import ModelConfig
from .probes import AttentionKind, Rotated, attention_scores, attention_weights

ATTENTION_KINDS: tuple[str, ...] = ("encoder_self", "decoder_self", "cross")
# The attention weights a captured pass may compute (every layer's and head's (Tq, Tk) map, in
# float32), whether it keeps them or its views compute them again when read (the grid reads
# them all). SmolLM2 (30 layers x 9 heads) reaches it at 539 tokens: 512 fit (271 MiB); at
# 8,192, its context, they would be 72 GB. Longer texts are for views that keep less.
MAX_CAPTURED_WEIGHTS_BYTES = 300 * 2**20
# The logits read at once where a reader needs only something of each position's (its best
# id, its largest change): a pass over a long text never holds its (B, T, V) logits (SmolLM2
# at 512 tokens: 100 MB).
LOGIT_CHUNK_BYTES = 16 * 2**20


@dataclass(init=False)
class AttentionRecord:
    """One attention sub-layer of one layer, all heads.

    Attributes:
        kind: ``"encoder_self"``, ``"decoder_self"`` (masked) or ``"cross"``.
        layer: index of the layer in its stack, from 0.
        weights: ``(B, H, Tq, Tk)`` softmax of the scores; zero in masked cells. A pass run
            with ``Capture.keep_attention_weights=False`` does not keep them: they are
            computed again when read, from the queries and keys, by the attention's own
            :func:`~transformer.core.probes.attention_weights` (the same numbers, bit for bit;
            SmolLM2's at 512 tokens would take 283 MB). Each read computes them anew.
        mask: ``(B, 1, Tq, Tk)`` bool, ``True`` = may attend (all ``True`` if nothing was masked).
        query_offset: position of the first query row (non-zero in incremental decoding).
        queries, keys: ``(B, H, Tq, d_k)`` queries already multiplied by the scale and ``(B, H,
            Tk, d_k)`` keys, from which :attr:`scores` is computed when read (with
            grouped-query attention the keys are expanded to the H query heads). Where the
            rotary pair holds them (a rotary pass without cached keys) they are recomputed from
            it when read, by the pass's own operations, instead of being kept twice.
        kv_head_of: ``(H,)`` tuple: the key/value head each query head read (``h // (H /
            H_kv)``; ``(0, 1, …, H−1)`` for plain multi-head attention; empty when unknown).
        rotary: with rotary positions, q ``(B, H, Tq, d_head)`` and k ``(B, H_kv, Tq, d_head)``
            of the positions this call computed, before and after their rotation
            (:class:`~transformer.core.probes.Rotated`); ``None`` otherwise.

    :attr:`scores` is ``(B, H, Tq, Tk)``, the scaled scores before softmax with masked cells
    ``-inf``. A forward pass records the queries and keys instead of the scores (a tenth of
    the size at 512 tokens, and the pass runs faster without keeping them); a record made
    from scores directly (``AttentionRecord(kind, layer, scores, weights, mask)``) keeps them.
    """

    kind: AttentionKind
    layer: int
    mask: Tensor
    _weights: Tensor | None = field(default=None, repr=False, compare=False)
    query_offset: int = 0
    _queries: Tensor | None = field(default=None, repr=False)
    _keys: Tensor | None = field(default=None, repr=False)
    kv_head_of: tuple[int, ...] = ()
    rotary: Rotated | None = None
    _scores: Tensor | None = field(default=None, repr=False, compare=False)
    _rebuild: Callable[[], tuple[Tensor, Tensor]] | None = field(
        default=None, repr=False, compare=False
    )
    softcap: float | None = None  # the scores' soft cap (Gemma 2), None: not capped

    def __init__(
        self,
        kind: AttentionKind,
        layer: int,
        scores: Tensor | None = None,
        weights: Tensor | None = None,
        mask: Tensor | None = None,
        query_offset: int = 0,
        *,
        queries: Tensor | None = None,
        keys: Tensor | None = None,
        kv_head_of: tuple[int, ...] = (),
        rotary: Rotated | None = None,
        rebuild: Callable[[], tuple[Tensor, Tensor]] | None = None,
        softcap: float | None = None,
    ) -> None:
        if mask is None:
            raise TypeError("an AttentionRecord needs its mask")
        if scores is None and rebuild is None and (queries is None or keys is None):
            raise TypeError("an AttentionRecord needs its scores, or the queries and keys")
        if weights is None and scores is not None:
            raise TypeError("an AttentionRecord made from scores needs its weights")
        self.kind, self.layer, self._weights, self.mask = kind, layer, weights, mask
        self.query_offset, self._queries, self._keys, self._scores = (
            query_offset,
            queries,
            keys,
            scores,
        )
        self.rotary = rotary
        self._rebuild = rebuild
        self.softcap = softcap
        if not kv_head_of:
            heads = weights if weights is not None else self.queries
            assert heads is not None  # checked above
            kv_head_of = tuple(range(heads.shape[1]))
        self.kv_head_of = kv_head_of

    @property
    def weights(self) -> Tensor:
        """``(B, H, Tq, Tk)`` softmax of the scores, zero in masked cells (kept, or computed
        again from the queries and keys when the pass did not keep them)."""
        if self._weights is not None:
            return self._weights
        return attention_weights(*self._queries_and_keys(), self.mask, self.softcap)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(B, H, Tq, Tk)``: the weights' shape, without computing them."""
        if self._weights is not None:
            batch, n_heads, n_queries, n_keys = self._weights.shape
            return batch, n_heads, n_queries, n_keys
        batch, _, n_queries, n_keys = self.mask.shape
        return batch, len(self.kv_head_of), n_queries, n_keys

    @property
    def queries(self) -> Tensor | None:
        """``(B, H, Tq, d_k)`` scaled queries (recomputed from :attr:`rotary` when not kept)."""
        if self._queries is None and self._rebuild is not None:
            return self._rebuild()[0]
        return self._queries

    @property
    def keys(self) -> Tensor | None:
        """``(B, H, Tk, d_k)`` keys, expanded to the query heads (recomputed from
        :attr:`rotary` when not kept)."""
        if self._keys is None and self._rebuild is not None:
            return self._rebuild()[1]
        return self._keys

    @property
    def scores(self) -> Tensor:
        """``(B, H, Tq, Tk)`` scaled scores before softmax; masked cells are ``-inf`` (kept
        when the record was made from them, else computed at each read and not kept: a view
        that reads every layer's would otherwise grow a cached trace by their size)."""
        if self._scores is not None:
            return self._scores
        return attention_scores(*self._queries_and_keys(), self.mask, self.softcap)

    def _queries_and_keys(self) -> tuple[Tensor, Tensor]:
        """:attr:`queries` and :attr:`keys`, rebuilt once from the rotary pair when not kept."""
        if self._queries is None and self._rebuild is not None:
            return self._rebuild()
        assert self._queries is not None and self._keys is not None  # checked in __init__
        return self._queries, self._keys

    @property
    def masked(self) -> Tensor:
        """``(B, 1, Tq, Tk)`` bool, ``True`` where the mask removed the cell."""
        return ~self.mask


@dataclass(init=False)
class LayerTrace:
    """One encoder or decoder layer: its attention records and each sub-layer's output.

    Every ``*_output`` is the ``(B, T, d_model)`` residual stream after that sub-layer (after
    the residual add, and after the norm in post-LN). Every ``*_update`` is the ``(B, T,
    d_model)`` vector that sub-layer adds to the stream: its own output, before the residual
    add (and before the norm in post-LN). In pre-LN without dropout the stream after the
    self-attention is ``input + self_attention_update``, the very sum the layer computed: a
    forward pass keeps the two terms, and the sum is computed when read (at SmolLM2's 512
    tokens, 35 MB less).
    """

    stack: Literal["encoder", "decoder"]
    layer: int
    input: Tensor
    self_attention: AttentionRecord
    feed_forward_output: Tensor
    self_attention_update: Tensor | None
    feed_forward_update: Tensor | None
    cross_attention: AttentionRecord | None
    cross_attention_output: Tensor | None
    cross_attention_update: Tensor | None
    _self_attention_output: Tensor | None = field(repr=False)

    def __init__(
        self,
        stack: Literal["encoder", "decoder"],
        layer: int,
        input: Tensor,
        self_attention: AttentionRecord,
        self_attention_output: Tensor | None,
        feed_forward_output: Tensor,
        self_attention_update: Tensor | None = None,
        feed_forward_update: Tensor | None = None,
        cross_attention: AttentionRecord | None = None,
        cross_attention_output: Tensor | None = None,
        cross_attention_update: Tensor | None = None,
    ) -> None:
        """``self_attention_output`` None: ``input + self_attention_update`` (then required)."""
        if self_attention_output is None and self_attention_update is None:
            raise TypeError("a LayerTrace needs its self-attention output, or its update")
        self.stack, self.layer, self.input = stack, layer, input
        self.self_attention, self._self_attention_output = self_attention, self_attention_output
        self.feed_forward_output, self.feed_forward_update = (
            feed_forward_output,
            feed_forward_update,
        )
        self.self_attention_update = self_attention_update
        self.cross_attention, self.cross_attention_output = cross_attention, cross_attention_output
        self.cross_attention_update = cross_attention_update

    @property
    def self_attention_output(self) -> Tensor:
        """``(B, T, d_model)`` the residual stream after the self-attention sub-layer."""
        if self._self_attention_output is not None:
            return self._self_attention_output
        assert self.self_attention_update is not None  # checked in __init__
        return self.input + self.self_attention_update

    @property
    def output(self) -> Tensor:
        """``(B, T, d_model)`` output of the layer (after its feed-forward sub-layer)."""
        return self.feed_forward_output


@dataclass
class StackInput:
    """What enters a stack: token ids, their scaled embeddings and the positional encodings.

    ``tokens`` ``(B, T)``; ``token_embedding`` ``(B, T, d_model)`` (already × √d_model);
    ``positional`` ``(T, d_model)``; ``real_tokens`` ``(B, T)`` bool, ``True`` for real tokens
    (``False`` for padding); ``token_type_embedding`` ``(B, T, d_model)`` for models with token
    types (BERT), else None.
    """

    tokens: Tensor
    token_embedding: Tensor
    positional: Tensor
    real_tokens: Tensor
    position_offset: int = 0
    token_type_embedding: Tensor | None = None


@dataclass(init=False)
class Trace:
    """Everything one captured forward pass computed.

    ``logits`` ``(B, T, V)`` come from the decoder (or from the encoder in encoder-only models).
    A forward pass's trace does not keep them: they are projected from the stack's output
    (:attr:`final`) when read, by the model's own generator (SmolLM2's at 512 tokens would be
    100 MB, and the views need each position's best id, a few positions at a time:
    :meth:`logits_at`); the trace holds the generator itself, not a copy, and refuses to
    compute them once its weights changed (a training step). ``causal`` is the ``(Tq, Tk)``
    bool causal mask of the decoder's self-attention.
    """

    config: ModelConfig
    source: StackInput | None
    target: StackInput | None
    encoder_layers: list[LayerTrace]
    decoder_layers: list[LayerTrace]
    memory: Tensor | None
    decoder_output: Tensor | None
    causal: Tensor | None
    _logits: Tensor | None = field(repr=False)
    _project: Callable[[Tensor], Tensor] | None = field(repr=False, compare=False)

    def __init__(
        self,
        config: ModelConfig,
        logits: Tensor | None = None,
        *,
        source: StackInput | None = None,
        target: StackInput | None = None,
        encoder_layers: list[LayerTrace] | None = None,
        decoder_layers: list[LayerTrace] | None = None,
        memory: Tensor | None = None,
        decoder_output: Tensor | None = None,
        causal: Tensor | None = None,
        project: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        """``logits`` kept as given, or ``project`` (``(B, t, d_model)`` → ``(B, t, V)``) to
        compute them from :attr:`final` when read."""
        if logits is None and project is None:
            raise TypeError("a Trace needs its logits, or the projection that computes them")
        self.config, self.source, self.target = config, source, target
        self.encoder_layers = encoder_layers if encoder_layers is not None else []
        self.decoder_layers = decoder_layers if decoder_layers is not None else []
        self.memory, self.decoder_output, self.causal = memory, decoder_output, causal
        self._logits, self._project = logits, project
        if logits is None and self.final is None:
            raise TypeError("a Trace without logits needs the output they are projected from")

    @property
    def final(self) -> Tensor | None:
        """``(B, T, d_model)`` the output the logits are projected from: the decoder's, or the
        encoder's (``memory``) in an encoder-only model."""
        return self.decoder_output if self.decoder_output is not None else self.memory

    @property
    def logits(self) -> Tensor:
        """``(B, T, V)`` logits; computed afresh at each read when not kept (read them once)."""
        return self._logits if self._logits is not None else self.logits_at(0, None)

    def logits_at(self, start: int, stop: int | None) -> Tensor:
        """``(B, t, V)`` logits of positions ``start`` to ``stop`` (exclusive; ``None``: the
        end), projecting only those positions when the logits are not kept."""
        if self._logits is not None:
            return self._logits[:, start:stop]
        final = self.final
        assert self._project is not None and final is not None  # checked in __init__
        return self._project(final[:, start:stop])

    def chunks(self, most_bytes: int | None = None) -> list[tuple[int, int]]:
        """``(start, stop)`` ranges of positions, in order, whose float32 logits take at most
        ``most_bytes`` each (``LOGIT_CHUNK_BYTES`` by default; one position at least): what to
        read with :meth:`logits_at` to never hold the whole ``(B, T, V)``."""
        most = LOGIT_CHUNK_BYTES if most_bytes is None else most_bytes
        batch = self._output().size(0)
        step = max(1, most // (4 * batch * self.config.output_vocab_size))
        return [(start, min(start + step, self.length)) for start in range(0, self.length, step)]

    @property
    def length(self) -> int:
        """Number of positions the logits have (T)."""
        if self._logits is not None:
            return self._logits.size(1)
        return self._output().size(1)

    def _output(self) -> Tensor:
        """The kept logits, else the output they are projected from (checked in __init__)."""
        kept = self._logits if self._logits is not None else self.final
        assert kept is not None
        return kept

    def attention(self, kind: AttentionKind, layer: int) -> AttentionRecord:
        """The record of one attention sub-layer; a clear error if the model has none."""
        records = self.attention_records(kind)
        if not 0 <= layer < len(records):
            raise IndexError(f"{kind} attention has layers 0..{len(records) - 1}, not {layer}")
        return records[layer]

    def attention_records(self, kind: AttentionKind) -> list[AttentionRecord]:
        """All layers' records of one kind, in layer order."""
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"kind must be one of {ATTENTION_KINDS}, got {kind!r}")
        if kind == "encoder_self":
            records = [layer.self_attention for layer in self.encoder_layers]
        elif kind == "decoder_self":
            records = [layer.self_attention for layer in self.decoder_layers]
        else:
            crosses = [layer.cross_attention for layer in self.decoder_layers]
            records = [r for r in crosses if r is not None]
        if not records:
            raise ValueError(f"a {self.config.architecture} model has no {kind} attention")
        return records

    def attention_weights(self, kind: AttentionKind) -> Tensor:
        """``(L, B, H, Tq, Tk)`` weights of every layer of one kind."""
        return torch.stack([r.weights for r in self.attention_records(kind)])


def captured_weight_bytes(config: ModelConfig, batch: int, source: int, target: int) -> int:
    """Bytes of the float32 attention weights a captured pass over a ``(batch, source)`` source
    and a ``(batch, target)`` target keeps: ``(B, H, Tq, Tk)`` per layer and attention kind (the
    lengths of a stack the model does not have are ignored)."""
    cells = 0
    if config.has_encoder:
        cells += config.n_encoder_layers * source * source
    if config.has_decoder:
        cells += config.n_decoder_layers * target * target
        if config.has_encoder:
            cells += config.n_decoder_layers * target * source
    return 4 * batch * config.n_heads * cells


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.1f} GB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:,.0f} MB"


class CaptureTooLarge(ValueError):
    """A captured pass refused for the memory its attention weights would take; ``most`` is the
    longest length (tokens per row, every stack) that fits."""

    def __init__(self, message: str, most: int) -> None:
        super().__init__(message)
        self.most = most


def check_capture_size(
    config: ModelConfig, batch: int, source: int, target: int, row: str = "sentence"
) -> None:
    """:class:`CaptureTooLarge` naming the length and the bound when a captured pass would keep more than
    ``MAX_CAPTURED_WEIGHTS_BYTES`` of attention weights (see :func:`captured_weight_bytes`);
    ``row`` names what the batch holds, for the message ("sentence", "beam")."""
    size = captured_weight_bytes(config, batch, source, target)
    if size <= MAX_CAPTURED_WEIGHTS_BYTES:
        return
    # The longest length that fits, every stack as long as the longest (a translation's answer
    # is about as long as its source).
    most = 1
    while captured_weight_bytes(config, batch, most + 1, most + 1) <= MAX_CAPTURED_WEIGHTS_BYTES:
        most += 1
    each = f" per {row} ({batch} {row}s)" if batch > 1 else ""
    raise CaptureTooLarge(
        f"{max(source, target):,} tokens{each} are too many to show every layer and head: "
        f"their attention weights would take {_size(size)}; with this model at most "
        f"about {most:,} tokens{each} are shown, so shorten the text",
        most,
    )


def largest_logit_change(before: Trace, after: Trace) -> float:
    """The largest ``|after − before|`` of any logit of two passes over the same positions
    (NaN when either has a NaN), read a few positions at a time (:meth:`Trace.chunks`)."""
    largest = [
        (after.logits_at(start, stop) - before.logits_at(start, stop)).abs().max()
        for start, stop in before.chunks()
    ]
    return float(torch.stack(largest).max())
