"""Scaled dot-product attention and multi-head attention (paper sections 3.2.1 and 3.2.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


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
    values: Tensor | None = None  # (B, H, T, d_v)
    static: bool = False

    @property
    def length(self) -> int:
        """Number of cached positions."""
        return 0 if self.keys is None else self.keys.size(2)


class MultiHeadAttention(nn.Module):
    """``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    The h per-head projections are stored as one ``(d_model, d_model)`` linear map each for
    Q, K and V; :meth:`split_heads` cuts their output into h heads of width d_model/h.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x: Tensor, bare_view: bool = False) -> Tensor:
        """``(B, T, d_model)`` → ``(B, H, T, d_head)``: view the last axis as heads, then move them.

        ``bare_view`` makes seed 003's mistake instead: ``x.view(B·H, -1, d_head)`` straight
        from ``(B, T, d_model)``, which keeps memory order, so head j receives the pieces of
        tokens ``jT/H … (j+1)T/H`` (a what-if; see :mod:`transformer.mistakes`).
        """
        batch, length, _ = x.shape
        if bare_view:
            scrambled = x.reshape(batch * self.n_heads, -1, self.d_head)  # (B·H, T, d_head)
            return scrambled.view(batch, self.n_heads, length, self.d_head)
        return x.view(batch, length, self.n_heads, self.d_head).transpose(1, 2)

    def merge_heads(self, x: Tensor, bare_view: bool = False) -> Tensor:
        """``(B, H, T, d_head)`` → ``(B, T, d_model)``: the inverse of :meth:`split_heads`.

        ``bare_view`` makes seed 003's mistake instead: a view to ``(B, T, d_model)`` without
        the transpose, so merged row t holds H consecutive positions of one head.
        """
        batch, _, length, _ = x.shape
        if bare_view:
            return x.reshape(batch, length, self.n_heads * self.d_head)
        return x.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_head)

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None,
        mask: Tensor | None = None,
        cache: KeyValueCache | None = None,
        *,
        capture: bool = False,
        scale_scores: bool = True,
        head_gate: Tensor | None = None,
        scale: float | None = None,
        bare_view_split: bool = False,
        bare_view_merge: bool = False,
        value: Tensor | None = None,
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
            scale_scores: ``False`` drops the ``1/√d_k`` factor (a what-if for teaching).
            head_gate: ``(H,)`` multipliers of each head's output (0 switches a head off).
            scale: the multiplier of the scores instead of ``1/√d_head`` (the seeds' mistakes
                ``1/√d_model`` and ``√d_head``); ``scale_scores=False`` overrides it with 1.
            bare_view_split, bare_view_merge: split / merge the heads with a bare ``view``
                (seed 003's mistakes; see :meth:`split_heads`, :meth:`merge_heads`).
            value: ``(B, Tk, d_model)`` to take the values from instead of ``key_value`` (seed
                004's cross-attention reads them from the decoder); not with a cache.

        Returns:
            ``(B, Tq, d_model)`` output and, with ``capture``, the :class:`AttentionProbe`.
        """
        split = bare_view_split
        q = self.split_heads(self.w_q(query), split)  # (B, H, Tq, d_head)
        if cache is not None and cache.static and cache.keys is not None:
            k, v = cache.keys, cache.values
        else:
            if key_value is None:
                raise ValueError("key_value is required unless a filled static cache is given")
            k = self.split_heads(self.w_k(key_value), split)  # (B, H, Tk, d_head)
            v = self.split_heads(self.w_v(key_value if value is None else value), split)
            if cache is not None:
                if not cache.static and cache.keys is not None:
                    k = torch.cat([cache.keys, k], dim=2)
                    v = torch.cat([cache.values, v], dim=2)
                cache.keys, cache.values = k, v

        if not scale_scores:
            scale = 1.0
        probe = None
        if capture:
            out, probe = scaled_dot_product_attention(q, k, v, mask, scale, self.dropout)
        else:
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                dropout_p=self.dropout.p if self.training else 0.0,
                scale=scale,
            )
        if head_gate is not None:
            out = out * head_gate.view(1, -1, 1, 1)
        return self.w_o(self.merge_heads(out, bare_view_merge)), probe
