"""Scaled dot-product attention and multi-head attention (paper sections 3.2.1 and 3.2.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .operations import PAPER, Operations

if TYPE_CHECKING:
    from .trace import AttentionKind


def attention_scores(queries: Tensor, keys: Tensor, mask: Tensor | None = None) -> Tensor:
    """``(B, H, Tq, Tk)`` scores from already scaled ``(B, H, Tq, d_k)`` queries and ``(B, H,
    Tk, d_k)`` keys, masked cells ``-inf`` (``mask`` broadcastable, ``True`` = may attend).

    The one place scores are computed: the attention itself and a trace that recomputes them
    run the same product on the same tensors, so both give the same numbers bit for bit."""
    scores = queries @ keys.transpose(-2, -1)  # (B, H, Tq, Tk)
    if mask is not None and not bool(mask.all()):
        scores.masked_fill_(~mask, float("-inf"))
    return scores


@dataclass
class AttentionProbe:
    """What one attention call computed, for the trace.

    ``weights`` are ``softmax(Q Kᵀ / √d_k)`` ``(B, H, Tq, Tk)`` (axis 2 the query, axis 3 the
    key), exactly zero in masked cells and in rows with no allowed key. The scores themselves
    are not kept: at 512 tokens they are as large as the weights and softmax reads them once,
    so the probe keeps the scaled ``queries`` ``(B, H, Tq, d_k)``, the ``keys`` ``(B, H, Tk,
    d_k)`` and the ``mask`` (``None``: nothing masked), and :attr:`scores` recomputes them.
    """

    queries: Tensor
    keys: Tensor
    weights: Tensor
    mask: Tensor | None = None

    @property
    def scores(self) -> Tensor:
        """``(B, H, Tq, Tk)`` scores before softmax, masked cells ``-inf``."""
        return attention_scores(self.queries, self.keys, self.mask)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout: nn.Module | None = None,
) -> tuple[Tensor, AttentionProbe]:
    """``softmax(Q Kᵀ / √d_k) V``, written out so every intermediate can be inspected.

    Args:
        q: ``(B, H, Tq, d_k)`` queries.
        k: ``(B, H, Tk, d_k)`` keys.
        v: ``(B, H, Tk, d_v)`` values.
        mask: bool, broadcastable to ``(B, H, Tq, Tk)``; ``True`` = may attend.
        scale: multiplier of the scores; ``None`` means ``1/√d_k`` (d_k is the *head* width).
        dropout: applied to the weights (not to the recorded ones).

    Returns:
        ``(B, H, Tq, d_v)`` output and the :class:`AttentionProbe` of scores and weights.
    """
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    if mask is not None and bool(mask.all()):
        mask = None  # nothing is masked (an unpadded batch): skip two passes over the scores
    # Scaling the (Tq, d_k) queries instead of the (Tq, Tk) scores: the same product, one pass
    # over d_k/Tk as many numbers (at 512 tokens and d_k 32, a sixteenth).
    queries = q * scale
    scores = attention_scores(queries, k, mask)  # (B, H, Tq, Tk)
    weights = torch.softmax(scores, dim=-1)
    del scores  # freed here, its memory serves the next layer (a trace recomputes it)
    if mask is not None:
        # softmax over a row of only -inf is 0/0 = NaN; a query that may attend to nothing
        # receives nothing instead. The check runs on the small mask, the fill only if needed.
        has_key = mask.any(dim=-1, keepdim=True)
        if not bool(has_key.all()):
            weights = weights.masked_fill(~has_key, 0.0)
    attended = dropout(weights) if dropout is not None else weights
    probe = AttentionProbe(queries=queries, keys=k, weights=weights, mask=mask)
    return attended @ v, probe


@dataclass
class KeyValueCache:
    """Keys and values of one attention module kept across decoding steps.

    Self-attention (``static=False``) appends the new positions' keys and values each step;
    cross-attention (``static=True``) computes them from the encoder memory once and reuses them.
    """

    keys: Tensor | None = None  # (B, H, T, d_k)
    values: Tensor | None = None  # (B, H, T, d_v), set together with the keys
    static: bool = False

    @property
    def length(self) -> int:
        """Number of cached positions."""
        return 0 if self.keys is None else self.keys.size(2)

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Keep the new ``(B, H, T, d_k)`` keys and values (after the cached ones, unless
        static) and return every key and value so far."""
        if not self.static and self.keys is not None and self.values is not None:
            keys = torch.cat([self.keys, keys], dim=2)
            values = torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        return keys, values


class MultiHeadAttention(nn.Module):
    """``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    The h per-head projections are stored as one ``(d_model, d_model)`` linear map each for
    Q, K and V, whose output is split into h heads of width d_model/h. ``kind`` and ``layer``
    say where the module sits in the model (for :attr:`Operations.zero_heads`).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        *,
        kind: AttentionKind | None = None,
        layer: int = 0,
    ) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.kind = kind
        self.layer = layer
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

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
        q = ops.split_heads(self.w_q(query), self.n_heads)  # (B, H, Tq, d_head)
        if cache is not None and cache.static and cache.keys is not None:
            assert cache.values is not None  # set together with the keys
            k, v = cache.keys, cache.values  # computed from the encoder memory once
        else:
            if key_value is None:
                raise ValueError("key_value is required unless a filled static cache is given")
            k = ops.split_heads(self.w_k(key_value), self.n_heads)  # (B, H, Tk, d_head)
            v = ops.split_heads(self.w_v(key_value), self.n_heads)  # (B, H, Tk, d_head)
            if cache is not None:
                k, v = cache.update(k, v)
        return self.attend(q, k, v, mask, capture=capture, ops=ops)

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
        """Every head's attention over ``(B, H, Tq, d_head)`` queries and ``(B, H, Tk, d_head)``
        keys and values, heads merged and projected: ``(B, Tq, d_model)`` and the probe."""
        scale = ops.score_scale(self.d_head, self.n_heads)
        probe = None
        if capture:
            out, probe = scaled_dot_product_attention(q, k, v, mask, scale, self.dropout)
        else:
            dropout = self.dropout.p if self.training else 0.0
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale
            )
        if ops.zero_heads and self.kind is not None:
            out = ops.gate_heads(out, self.kind, self.layer)
        return self.w_o(ops.merge_heads(out)), probe
