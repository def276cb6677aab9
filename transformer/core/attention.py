"""Scaled dot-product attention and multi-head attention (paper sections 3.2.1 and 3.2.2)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layers import Dropout
from .masks import is_causal, remembered
from .modern import RMSNorm, expand_kv_heads, kv_head_of, soft_cap
from .operations import PAPER, Operations
from .rotary import RotaryEmbedding

if TYPE_CHECKING:
    from .trace import AttentionKind


def attention_scores(
    queries: Tensor, keys: Tensor, mask: Tensor | None = None, softcap: float | None = None
) -> Tensor:
    """``(B, H, Tq, Tk)`` scores from already scaled ``(B, H, Tq, d_k)`` queries and ``(B, H,
    Tk, d_k)`` keys, masked cells ``-inf`` (``mask`` broadcastable, ``True`` = may attend),
    soft-capped to ``softcap · tanh(s / softcap)`` where a cap is given (Gemma 2).

    The attention itself and a trace that recomputes its scores run the same product on the
    same tensors, so both give the same numbers bit for bit in every cell that is not masked."""
    scores = soft_cap(queries @ keys.transpose(-2, -1), softcap)  # (B, H, Tq, Tk)
    if mask is not None and not bool(mask.all()):
        scores.masked_fill_(~mask, float("-inf"))
    return scores


def mask_bias(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """What the attention adds to its scores for a bool ``mask`` (``True`` = may attend): 0
    where a key may be read, the lowest finite number of ``dtype`` where not; the mask's shape.

    The same weights as ``-inf`` bit for bit: ``exp`` of a cell that far below its row's
    maximum is exactly 0. But softmax over ``-inf`` runs a third slower on the CPU, and one
    broadcast addition costs less than filling the ``(B, H, Tq, Tk)`` scores through a
    broadcast bool mask."""
    return torch.zeros((), dtype=dtype, device=mask.device).masked_fill(
        ~mask, torch.finfo(dtype).min
    )


def _empty_rows(mask: Tensor) -> Tensor | None:
    """Where a query of a bool ``mask`` may attend to no key (``(..., Tq, 1)``, ``True`` there),
    or ``None`` when every query has one."""
    has_key = mask.any(dim=-1, keepdim=True)
    return None if bool(has_key.all()) else ~has_key


def attention_weights(
    queries: Tensor, keys: Tensor, mask: Tensor | None = None, softcap: float | None = None
) -> Tensor:
    """``(B, H, Tq, Tk)`` weights ``softmax(Q Kᵀ)`` from already scaled ``(B, H, Tq, d_k)``
    queries and ``(B, H, Tk, d_k)`` keys, exactly zero in masked cells and in rows with no
    allowed key (``mask`` bool, broadcastable, ``True`` = may attend); the scores soft-capped
    first where ``softcap`` is given.

    The attention runs this, and a trace that did not keep its weights runs it again on the
    same tensors when they are read: the same numbers, bit for bit."""
    given = mask
    if given is not None and remembered(given, "all", lambda: bool(given.all())):
        mask = None  # nothing is masked (an unpadded batch): skip a pass over the scores
    scores = queries @ keys.transpose(-2, -1)  # (B, H, Tq, Tk), as attention_scores computes them
    if softcap is not None:
        scores = soft_cap(scores, softcap)
    if mask is not None:
        # Masked cells far below any score, not -inf; one bias for all layers' scores.
        dtype = scores.dtype
        scores += remembered(mask, ("bias", dtype), lambda: mask_bias(mask, dtype))
    # Softmax in place where no gradient needs the scores: the same kernel and bits, one
    # (B, H, Tq, Tk) buffer instead of two (a captured pass keeps it; a trace recomputes
    # the scores when read).
    weights = torch.softmax(scores, dim=-1, out=None if scores.requires_grad else scores)
    del scores
    if mask is not None:
        # A row with no allowed key would spread its weight evenly over keys it may not read
        # (over -inf, 0/0 = NaN); a query that may attend to nothing receives nothing instead.
        # The check runs on the small mask, once per mask; the fill only if needed.
        empty = remembered(mask, "empty rows", lambda: _empty_rows(mask))
        if empty is not None:
            weights = weights.masked_fill(empty, 0.0)
    return weights


@dataclass
class AttentionProbe:
    """What one attention call computed, for the trace.

    ``weights`` are ``softmax(Q Kᵀ / √d_k)`` ``(B, H, Tq, Tk)`` (axis 2 the query, axis 3 the
    key), exactly zero in masked cells and in rows with no allowed key. The scores themselves
    are not kept: at 512 tokens they are as large as the weights and softmax reads them once,
    so the probe keeps the scaled ``queries`` ``(B, H, Tq, d_k)``, the ``keys`` ``(B, H, Tk,
    d_k)`` and the ``mask`` (``None``: nothing masked), and :attr:`scores` recomputes them.

    With grouped-query attention ``keys`` are already expanded to the H query heads (the
    cache keeps the ``H_kv`` heads); ``kv_head_of`` says which key/value head each query head
    read. With rotary positions, the ``rotary`` pair keeps q and k of the positions this call
    computed, before and after their rotation (see :class:`Rotated`).
    """

    queries: Tensor
    keys: Tensor
    weights: Tensor
    mask: Tensor | None = None
    kv_head_of: tuple[int, ...] = ()
    rotary: Rotated | None = None
    # Recomputes (queries, keys) from the rotary pair when they can be (see
    # MultiHeadAttention._keep_rotary), so that a trace need not keep them twice.
    rebuild: Callable[[], tuple[Tensor, Tensor]] | None = None
    softcap: float | None = None  # the scores' soft cap (Gemma 2), None: not capped

    @property
    def scores(self) -> Tensor:
        """``(B, H, Tq, Tk)`` scores before softmax, masked cells ``-inf``."""
        return attention_scores(self.queries, self.keys, self.mask, self.softcap)


@dataclass(init=False)
class Rotated:
    """Queries and keys of one call before and after the rotary rotation (unscaled).

    ``queries_before`` / ``queries_after``: ``(B, H, Tq, d_head)``; ``keys_before`` /
    ``keys_after``: ``(B, H_kv, Tq, d_head)``, the ``H_kv`` key heads of the positions this call
    computed (not the cached ones); ``offset`` is the position of their first row.

    A pair kept in a trace (:meth:`detached`) keeps the tensors before the rotation and
    rotates them again when the rotated ones are read, by the pass's own rotation: the same
    numbers bit for bit, without keeping both (at SmolLM2's 512 tokens, 47 MB).
    """

    queries_before: Tensor
    keys_before: Tensor
    offset: int
    _after: tuple[Tensor, Tensor] | None = field(repr=False)
    _rotate: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = field(
        repr=False, compare=False
    )

    def __init__(
        self,
        queries_before: Tensor,
        queries_after: Tensor | None,
        keys_before: Tensor,
        keys_after: Tensor | None,
        offset: int = 0,
        *,
        rotate: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None,
    ) -> None:
        if (queries_after is None or keys_after is None) and rotate is None:
            raise TypeError("a Rotated pair needs the rotated tensors, or the rotation")
        self.queries_before, self.keys_before, self.offset = queries_before, keys_before, offset
        kept = queries_after is not None and keys_after is not None
        self._after = (queries_after, keys_after) if kept else None  # type: ignore[assignment]
        self._rotate = rotate

    def _rotated(self) -> tuple[Tensor, Tensor]:
        if self._after is not None:
            return self._after
        assert self._rotate is not None  # checked in __init__
        return self._rotate(self.queries_before, self.keys_before)

    @property
    def queries_after(self) -> Tensor:
        """``(B, H, Tq, d_head)`` the queries after their rotation."""
        return self._rotated()[0]

    @property
    def keys_after(self) -> Tensor:
        """``(B, H_kv, Tq, d_head)`` the keys after their rotation."""
        return self._rotated()[1]

    def detached(self, rotate: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]) -> Rotated:
        """For a trace: the tensors before the rotation, detached, and ``rotate`` (``(q, k)``
        → rotated ``(q, k)``, the rotation this call ran) to give the rotated ones back."""
        return Rotated(
            self.queries_before.detach(),
            None,
            self.keys_before.detach(),
            None,
            self.offset,
            rotate=rotate,
        )


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout: nn.Module | None = None,
    softcap: float | None = None,
) -> tuple[Tensor, AttentionProbe]:
    """``softmax(Q Kᵀ / √d_k) V``, written out so every intermediate can be inspected.

    Args:
        q: ``(B, H, Tq, d_k)`` queries.
        k: ``(B, H, Tk, d_k)`` keys.
        v: ``(B, H, Tk, d_v)`` values.
        mask: bool, broadcastable to ``(B, H, Tq, Tk)``; ``True`` = may attend.
        scale: multiplier of the scores; ``None`` means ``1/√d_k`` (d_k is the *head* width).
        dropout: applied to the weights (not to the recorded ones).
        softcap: scores become ``softcap · tanh(scores / softcap)`` before the mask (Gemma 2).

    Returns:
        ``(B, H, Tq, d_v)`` output and the :class:`AttentionProbe` of scores and weights.
    """
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    given = mask
    if given is not None and remembered(given, "all", lambda: bool(given.all())):
        mask = None  # nothing is masked: the probe says so
    # Scaling the (Tq, d_k) queries instead of the (Tq, Tk) scores: the same product, one pass
    # over d_k/Tk as many numbers (at 512 tokens and d_k 32, a sixteenth).
    queries = q * scale
    weights = attention_weights(queries, k, mask, softcap)
    attended = dropout(weights) if dropout is not None else weights
    probe = AttentionProbe(queries=queries, keys=k, weights=weights, mask=mask, softcap=softcap)
    return attended @ v, probe


@dataclass
class KeyValueCache:
    """Keys and values of one attention module kept across decoding steps.

    Self-attention (``static=False``) appends the new positions' keys and values each step;
    cross-attention (``static=True``) computes them from the encoder memory once and reuses them.
    A sliding-window layer's cache (``window``) keeps only the ``window − 1`` latest positions
    after each call: the next query reads those and itself, never an older one, so the memory
    stays bounded however long the text grows; ``dropped`` counts the positions let go.
    """

    keys: Tensor | None = None  # (B, H_kv, T, d_k): key/value heads, never expanded
    values: Tensor | None = None  # (B, H_kv, T, d_v), set together with the keys
    static: bool = False
    window: int | None = None
    dropped: int = 0

    @property
    def stored(self) -> int:
        """Number of positions whose keys are held."""
        return 0 if self.keys is None else self.keys.size(2)

    @property
    def length(self) -> int:
        """Number of positions seen (held, and let go by a sliding window)."""
        return self.dropped + self.stored

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Keep the new ``(B, H, T, d_k)`` keys and values (after the cached ones, unless
        static) and return every key and value this call reads (for a sliding window, those
        held before the call and the new ones)."""
        if not self.static and self.keys is not None and self.values is not None:
            keys = torch.cat([self.keys, keys], dim=2)
            values = torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        if self.window is not None and not self.static:
            excess = keys.size(2) - (self.window - 1)
            if excess > 0:
                self.keys, self.values = keys[:, :, excess:], values[:, :, excess:]
                self.dropped += excess
        return keys, values

    def can_truncate(self, length: int) -> bool:
        """Whether :meth:`truncate` to ``length`` keeps every key the next position reads (a
        sliding window may have let them go)."""
        needed_from = 0 if self.window is None else max(0, length - (self.window - 1))
        return self.dropped <= min(needed_from, length)

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (see :meth:`can_truncate`)."""
        if not self.can_truncate(length):
            raise ValueError(
                f"a sliding-window cache that let go of {self.dropped} positions cannot be "
                f"truncated to {length}: empty it and compute the text again"
            )
        if self.keys is not None and self.values is not None:
            kept = length - self.dropped
            self.keys, self.values = self.keys[:, :, :kept], self.values[:, :, :kept]


class MultiHeadAttention(nn.Module):
    """``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    The h per-head projections are stored as one ``(d_model, d_model)`` linear map each for
    Q, K and V, whose output is split into h heads of width d_model/h. ``kind`` and ``layer``
    say where the module sits in the model (for :attr:`Operations.zero_heads`).

    The modern block's options: ``n_kv_heads`` key/value heads (grouped- or multi-query
    attention: W_K and W_V map to ``n_kv_heads · d_head``; query head h reads key/value head
    ``h // (n_heads // n_kv_heads)``), ``rotary`` (q and k rotated by their positions after
    the projection) and the biases of the q/k/v and output projections.

    The later families': ``d_head`` when heads are not ``d_model / n_heads`` wide (W_Q maps
    d_model to ``n_heads · d_head``, W_O back), ``qk_norm`` (an RMSNorm of q and k before their
    rotation, over each head's ``"head"`` or the whole ``"projection"``: it keeps the scores
    from growing with the weights), ``softcap`` (scores capped by ``softcap · tanh(s /
    softcap)``) and ``scale_dim`` (the d_k of the score scale, when not d_head).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        *,
        kind: AttentionKind | None = None,
        layer: int = 0,
        n_kv_heads: int | None = None,
        rotary: RotaryEmbedding | None = None,
        qkv_bias: bool = True,
        output_bias: bool = True,
        d_head: int | None = None,
        qk_norm: str = "none",
        norm_eps: float = 1e-6,
        norm_offset: float = 0.0,
        softcap: float | None = None,
        scale_dim: float | None = None,
    ) -> None:
        super().__init__()
        if d_head is None and d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.kv_head_of = tuple(kv_head_of(n_heads, self.n_kv_heads))
        self.d_head = d_model // n_heads if d_head is None else d_head
        self.kind = kind
        self.layer = layer
        d_q, d_kv = n_heads * self.d_head, self.n_kv_heads * self.d_head
        self.w_q = nn.Linear(d_model, d_q, bias=qkv_bias)
        self.w_k = nn.Linear(d_model, d_kv, bias=qkv_bias)
        self.w_v = nn.Linear(d_model, d_kv, bias=qkv_bias)
        self.w_o = nn.Linear(d_q, d_model, bias=output_bias)
        self.dropout = Dropout(dropout)
        self.rotary = rotary  # shared by every layer (its table is computed, not learned)
        self.qk_norm = qk_norm
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if qk_norm != "none":
            per_head = qk_norm == "head"
            widths = (self.d_head, self.d_head) if per_head else (d_q, d_kv)
            self.q_norm = RMSNorm(widths[0], norm_eps, norm_offset)
            self.k_norm = RMSNorm(widths[1], norm_eps, norm_offset)
        self.softcap = softcap
        self.scale_dim = scale_dim

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None,
        mask: Tensor | None = None,
        cache: KeyValueCache | None = None,
        *,
        capture: bool = False,
        ops: Operations = PAPER,
    ) -> tuple[Tensor, AttentionProbe | None]:
        """Attend from ``query`` positions to ``key_value`` positions.

        Args:
            query: ``(B, Tq, d_model)``.
            key_value: ``(B, Tk, d_model)``; may be ``None`` only with a filled static cache.
            mask: bool broadcastable to ``(B, H, Tq, Tk_total)``, ``True`` = may attend, where
                ``Tk_total`` counts cached keys too.
            cache: keys/values kept across decoding steps (updated in place).
            capture: compute attention written out and return its scores and weights;
                otherwise run ``F.scaled_dot_product_attention`` and keep no ``(B, H, Tq, Tk)``.
            ops: the operations of this pass (the paper's by default).

        Returns:
            ``(B, Tq, d_model)`` output and, with ``capture``, the :class:`AttentionProbe`.
        """
        q = self._heads(self.w_q(query), self.q_norm, self.n_heads, ops)  # (B, H, Tq, d_head)
        if cache is not None and cache.static and cache.keys is not None:
            k, v, rotated = cache.keys, cast(Tensor, cache.values), None  # from the memory, once
        else:
            if key_value is None:
                raise ValueError("key_value is required unless a filled static cache is given")
            k = self._heads(self.w_k(key_value), self.k_norm, self.n_kv_heads, ops)
            v = ops.split_heads(self.w_v(key_value), self.n_kv_heads)  # (B, H_kv, Tk, d_head)
            q, k, rotated = self._rotate(q, k, cache, ops)
            if cache is not None:
                k, v = cache.update(k, v)  # the cache keeps H_kv heads
        out, probe = self.attend(q, k, v, mask, capture=capture, ops=ops)
        if probe is not None and rotated is not None:
            self._keep_rotary(probe, rotated, ops, uncached=k is rotated.keys_after)
        return out, probe

    def _heads(self, y: Tensor, norm: RMSNorm | None, n_heads: int, ops: Operations) -> Tensor:
        """``(B, T, n_heads · d_head)`` projected queries or keys → ``(B, n_heads, T, d_head)``,
        normed before the split (``qk_norm="projection"``) or each head after (``"head"``)."""
        if norm is not None and self.qk_norm == "projection":
            y = ops.layer_norm(norm, y)
        y = ops.split_heads(y, n_heads)
        if norm is not None and self.qk_norm == "head":
            y = ops.layer_norm(norm, y)
        return y

    def score_scale(self, ops: Operations = PAPER) -> float:
        """The multiplier of the scores: ``ops.score_scale`` of d_head, or of ``scale_dim``."""
        width = self.d_head if self.scale_dim is None else self.scale_dim
        return ops.score_scale(width, self.n_heads)  # type: ignore[arg-type]

    def _keep_rotary(
        self, probe: AttentionProbe, rotated: Rotated, ops: Operations, uncached: bool
    ) -> None:
        """Give the probe the rotary pair; where no cached keys came before this call's
        (``uncached``), also how to recompute its scaled queries and expanded keys from the pair,
        by the very operations the pass ran on the same tensors (the same numbers, bit for bit),
        so that a trace need not keep them twice."""
        rotary, offset, rotate = self.rotary, rotated.offset, ops.rotary_positions
        assert rotary is not None  # a rotated pair comes from a rotary module
        probe.rotary = kept = rotated.detached(lambda q, k: rotate(rotary, q, k, offset))
        if uncached:
            scale = self.score_scale(ops)
            n_heads, expand = self.n_heads, ops.expand_kv_heads
            probe.rebuild = lambda: (kept.queries_after * scale, expand(kept.keys_after, n_heads))

    def _rotate(
        self, q: Tensor, k: Tensor, cache: KeyValueCache | None, ops: Operations
    ) -> tuple[Tensor, Tensor, Rotated | None]:
        """Rotate ``(B, H, T, d_head)`` queries and ``(B, H_kv, T, d_head)`` keys by their
        positions, which start at the cache length (rotary positions only; else unchanged)."""
        if self.rotary is None:
            return q, k, None
        offset = cache.length if cache is not None else 0
        q_rotated, k_rotated = ops.rotary_positions(self.rotary, q, k, offset)
        return q_rotated, k_rotated, Rotated(q, q_rotated, k, k_rotated, offset)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        *,
        capture: bool = False,
        ops: Operations = PAPER,
    ) -> tuple[Tensor, AttentionProbe | None]:
        """Every head's attention over ``(B, H, Tq, d_head)`` queries and ``(B, H_kv, Tk,
        d_head)`` keys and values, heads merged and projected: ``(B, Tq, d_model)`` and the
        probe. Key/value head ``h // (H / H_kv)`` serves query head h."""
        scale = self.score_scale(ops)
        probe = None
        grouped = self.n_kv_heads != self.n_heads
        # sdpa cannot soft-cap its scores: a capped model attends written out, keeping nothing.
        observed = capture or ops.observe_attention is not None or self.softcap is not None
        if observed or (grouped and ops.expand_kv_heads is not expand_kv_heads):
            # sdpa's enable_gqa groups heads the standard way only: another grouping expands here
            k, v = ops.expand_kv_heads(k, self.n_heads), ops.expand_kv_heads(v, self.n_heads)
            grouped = False
        if observed:
            out, probe = scaled_dot_product_attention(
                q, k, v, mask, scale, self.dropout, self.softcap
            )
            probe.kv_head_of = self.kv_head_of
            if ops.observe_attention is not None:
                ops.observe_attention(probe, self.kind, self.layer)
            if not capture:
                probe = None  # observed, not kept: its (B, H, Tq, Tk) weights are freed here
        else:
            dropout = self.dropout.p if self.training else 0.0
            causal = mask is not None and is_causal(mask)  # the triangle without a mask
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None if causal else mask,
                dropout_p=dropout,
                is_causal=causal,
                scale=scale,
                enable_gqa=grouped,
            )
        if ops.zero_heads and self.kind is not None:
            out = ops.gate_heads(out, self.kind, self.layer)
        return self.w_o(ops.merge_heads(out)), probe
