"""The trace: typed records of everything a forward pass computed, for figures and tests.

A trace is returned by a forward pass asked to ``capture``; nothing is stored on the modules.
All tensors are detached. Attention tensors are ``(B, H, Tq, Tk)``: axis 2 is the query, axis 3
the key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Literal

import torch
from torch import Tensor

from .attention import attention_scores, attention_weights
from .config import ModelConfig
from .operations import AttentionKind
from .records import Rotated

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


@dataclass
class AttentionRecord:
    """One attention sub-layer of one layer, all heads.

    A forward pass keeps the queries and keys (a tenth of the scores' size at 512 tokens, and
    the pass runs faster without keeping scores); :attr:`scores` are computed from them when
    read, and so are :attr:`weights` where the pass did not keep them. A record made from scores
    directly (``AttentionRecord(kind, layer, scores, weights, mask)``) keeps both.

    Attributes:
        kind: ``"encoder_self"``, ``"decoder_self"`` (masked) or ``"cross"``.
        layer: index of the layer in its stack, from 0.
        kept_scores: ``(B, H, Tq, Tk)`` scores where the record was made from them, else
            ``None`` (read :attr:`scores`).
        kept_weights: ``(B, H, Tq, Tk)`` weights where the pass kept them (the default;
            ``Capture.keep_attention_weights=False`` does not: SmolLM2's at 512 tokens would
            take 283 MB), else ``None`` (read :attr:`weights`).
        mask: ``(B, 1, Tq, Tk)`` bool, ``True`` = may attend (all ``True`` if nothing was masked).
        query_offset: position of the first query row (non-zero in incremental decoding).
        kept_queries, kept_keys: ``(B, H, Tq, d_k)`` queries already multiplied by the scale and
            ``(B, H, Tk, d_k)`` keys (with grouped-query attention expanded to the H query
            heads); ``None`` where ``rebuild`` gives them back (read :attr:`queries`,
            :attr:`keys`).
        kv_head_of: ``(H,)`` tuple: the key/value head each query head read (``h // (H /
            H_kv)``; ``(0, 1, …, H−1)`` for plain multi-head attention, the default).
        rotary: with rotary positions, q ``(B, H, Tq, d_head)`` and k ``(B, H_kv, Tq, d_head)``
            of the positions this call computed, before and after their rotation
            (:class:`~transformer.core.records.Rotated`); ``None`` otherwise.
        rebuild: where the rotary pair holds the queries and keys (a rotary pass without cached
            keys), how to compute them again from it, by the pass's own operations, instead of
            keeping them twice; ``None`` otherwise.
        softcap: the scores' soft cap (Gemma 2); ``None``: not capped.
    """

    kind: AttentionKind
    layer: int
    kept_scores: Tensor | None
    kept_weights: Tensor | None = field(repr=False, compare=False)
    mask: Tensor
    query_offset: int = 0
    _: KW_ONLY
    kept_queries: Tensor | None = field(default=None, repr=False)
    kept_keys: Tensor | None = field(default=None, repr=False)
    kv_head_of: tuple[int, ...] = ()
    rotary: Rotated | None = None
    rebuild: Callable[[], tuple[Tensor, Tensor]] | None = field(
        default=None, repr=False, compare=False
    )
    softcap: float | None = None

    def __post_init__(self) -> None:
        queries_and_keys = self.kept_queries is not None and self.kept_keys is not None
        if self.kept_scores is None and self.rebuild is None and not queries_and_keys:
            raise TypeError("an AttentionRecord needs its scores, or the queries and keys")
        if self.kept_weights is None and self.kept_scores is not None:
            raise TypeError("an AttentionRecord made from scores needs its weights")
        if not self.kv_head_of:
            heads = self.kept_weights if self.kept_weights is not None else self.queries
            assert heads is not None  # checked above
            self.kv_head_of = tuple(range(heads.shape[1]))

    @property
    def weights(self) -> Tensor:
        """``(B, H, Tq, Tk)`` softmax of the scores, zero in masked cells: :attr:`kept_weights`,
        or, where the pass did not keep them, computed when read (anew at each read) from the
        queries and keys by the attention's own
        :func:`~transformer.core.attention.attention_weights`: the same numbers, bit for bit."""
        if self.kept_weights is not None:
            return self.kept_weights
        return attention_weights(*self._queries_and_keys(), self.mask, self.softcap)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(B, H, Tq, Tk)``: the weights' shape, computed when read from the mask and the
        heads, without computing the weights."""
        if self.kept_weights is not None:
            batch, n_heads, n_queries, n_keys = self.kept_weights.shape
            return batch, n_heads, n_queries, n_keys
        batch, _, n_queries, n_keys = self.mask.shape
        return batch, len(self.kv_head_of), n_queries, n_keys

    @property
    def queries(self) -> Tensor | None:
        """``(B, H, Tq, d_k)`` scaled queries: :attr:`kept_queries`, or computed when read from
        the rotary pair (:attr:`rebuild`)."""
        if self.kept_queries is None and self.rebuild is not None:
            return self.rebuild()[0]
        return self.kept_queries

    @property
    def keys(self) -> Tensor | None:
        """``(B, H, Tk, d_k)`` keys, expanded to the query heads: :attr:`kept_keys`, or
        computed when read from the rotary pair (:attr:`rebuild`)."""
        if self.kept_keys is None and self.rebuild is not None:
            return self.rebuild()[1]
        return self.kept_keys

    @property
    def scores(self) -> Tensor:
        """``(B, H, Tq, Tk)`` scaled scores before softmax, masked cells ``-inf``:
        :attr:`kept_scores`, or computed when read from the queries and keys, at each read and
        not kept (a view that reads every layer's would otherwise grow a cached trace by their
        size)."""
        if self.kept_scores is not None:
            return self.kept_scores
        return attention_scores(*self._queries_and_keys(), self.mask, self.softcap)

    def _queries_and_keys(self) -> tuple[Tensor, Tensor]:
        """:attr:`queries` and :attr:`keys`, rebuilt once from the rotary pair when not kept."""
        if self.kept_queries is None and self.rebuild is not None:
            return self.rebuild()
        assert self.kept_queries is not None and self.kept_keys is not None  # __post_init__
        return self.kept_queries, self.kept_keys

    @property
    def masked(self) -> Tensor:
        """``(B, 1, Tq, Tk)`` bool, ``True`` where the mask removed the cell (computed when
        read: ``~mask``)."""
        return ~self.mask


@dataclass
class LayerTrace:
    """One encoder or decoder layer: its attention records and each sub-layer's output.

    Every ``*_output`` is the ``(B, T, d_model)`` residual stream after that sub-layer (after
    the residual add, and after the norm in post-LN). Every ``*_update`` is the ``(B, T,
    d_model)`` vector that sub-layer adds to the stream: its own output, before the residual
    add (and before the norm in post-LN).

    Attributes:
        kept_self_attention_output: the stream after the self-attention where the pass kept
            it; ``None`` where it is the plain sum ``input + self_attention_update`` (pre-LN
            without dropout: the very sum the layer computed, at SmolLM2's 512 tokens 35 MB
            not kept twice). Read :attr:`self_attention_output`.
    """

    stack: Literal["encoder", "decoder"]
    layer: int
    input: Tensor
    self_attention: AttentionRecord
    kept_self_attention_output: Tensor | None = field(repr=False)
    feed_forward_output: Tensor
    self_attention_update: Tensor | None = None
    feed_forward_update: Tensor | None = None
    cross_attention: AttentionRecord | None = None
    cross_attention_output: Tensor | None = None
    cross_attention_update: Tensor | None = None

    def __post_init__(self) -> None:
        if self.kept_self_attention_output is None and self.self_attention_update is None:
            raise TypeError("a LayerTrace needs its self-attention output, or its update")

    @property
    def self_attention_output(self) -> Tensor:
        """``(B, T, d_model)`` the residual stream after the self-attention sub-layer:
        :attr:`kept_self_attention_output`, or computed when read as ``input +
        self_attention_update``."""
        if self.kept_self_attention_output is not None:
            return self.kept_self_attention_output
        assert self.self_attention_update is not None  # checked in __post_init__
        return self.input + self.self_attention_update

    @property
    def output(self) -> Tensor:
        """``(B, T, d_model)`` output of the layer (after its feed-forward sub-layer): another
        name of :attr:`feed_forward_output`."""
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


@dataclass
class Trace:
    """Everything one captured forward pass computed.

    ``logits`` ``(B, T, V)`` come from the decoder (or from the encoder in encoder-only models).
    A forward pass's trace does not keep them: they are projected from the stack's output
    (:attr:`final`) when read, by the model's own generator (SmolLM2's at 512 tokens would be
    100 MB, and the views need each position's best id, a few positions at a time:
    :meth:`logits_at`); the trace holds the generator itself, not a copy, and refuses to
    compute them once its weights changed (a training step).

    Attributes:
        config: the model's configuration.
        kept_logits: ``(B, T, V)`` logits where given; ``None`` where ``project`` computes
            them when read (read :attr:`logits`).
        source, target: what entered the encoder and the decoder (``None`` for a stack the
            model does not have).
        encoder_layers, decoder_layers: one record per layer, in order.
        memory: ``(B, Ts, d_model)`` the encoder's output.
        decoder_output: ``(B, Tt, d_model)`` the decoder's output, before the generator.
        causal: the ``(Tq, Tk)`` bool causal mask of the decoder's self-attention.
        project: ``(B, t, d_model)`` → ``(B, t, V)``, the generator that computes the logits
            from :attr:`final` when they are not kept.
    """

    config: ModelConfig
    kept_logits: Tensor | None = field(default=None, repr=False)
    _: KW_ONLY
    source: StackInput | None = None
    target: StackInput | None = None
    encoder_layers: list[LayerTrace] = field(default_factory=list)
    decoder_layers: list[LayerTrace] = field(default_factory=list)
    memory: Tensor | None = None
    decoder_output: Tensor | None = None
    causal: Tensor | None = None
    project: Callable[[Tensor], Tensor] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kept_logits is None and self.project is None:
            raise TypeError("a Trace needs its logits, or the projection that computes them")
        if self.kept_logits is None and self.final is None:
            raise TypeError("a Trace without logits needs the output they are projected from")

    @property
    def final(self) -> Tensor | None:
        """``(B, T, d_model)`` the output the logits are projected from: the decoder's, or the
        encoder's (``memory``) in an encoder-only model (chosen when read)."""
        return self.decoder_output if self.decoder_output is not None else self.memory

    @property
    def logits(self) -> Tensor:
        """``(B, T, V)`` logits: :attr:`kept_logits`, or computed when read, afresh at each
        read, by ``project`` from :attr:`final` (read them once)."""
        return self.kept_logits if self.kept_logits is not None else self.logits_at(0, None)

    def logits_at(self, start: int, stop: int | None) -> Tensor:
        """``(B, t, V)`` logits of positions ``start`` to ``stop`` (exclusive; ``None``: the
        end), projecting only those positions when the logits are not kept."""
        if self.kept_logits is not None:
            return self.kept_logits[:, start:stop]
        final = self.final
        assert self.project is not None and final is not None  # checked in __init__
        return self.project(final[:, start:stop])

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
        if self.kept_logits is not None:
            return self.kept_logits.size(1)
        return self._output().size(1)

    def _output(self) -> Tensor:
        """The kept logits, else the output they are projected from (checked in __init__)."""
        kept = self.kept_logits if self.kept_logits is not None else self.final
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
