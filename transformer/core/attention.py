"""Scaled dot-product attention and multi-head attention (paper sections 3.2.1 and 3.2.2).

The paper's formula comes first: the weights ``softmax(Q Kᵀ / √d_k)`` (:func:`attention_weights`)
and the attention that reads the values with them (:func:`scaled_dot_product_attention`), the
masked scores a reader asks for again (:func:`attention_scores`), then the module of h heads.
What a call keeps for the trace (its probe, from which the scores are recomputed when read) is
in :mod:`transformer.core.records`; the key/value cache of decoding in
:mod:`transformer.core.cache`.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cache import KeyValueCache
from .config import ModelConfig
from .layers import Dropout
from .masks import is_causal, remembered
from .modern import RMSNorm, expand_kv_heads, kv_head_of, soft_cap
from .operations import PAPER, AttentionKind, Operations
from .records import AttentionProbe, Rotated
from .rotary import RotaryEmbedding
from .run import PLAIN, Run

_SITES = {
    "encoder_self": ("encoder", "heads", "attention"),
    "decoder_self": ("decoder", "heads", "attention"),
    "cross": ("decoder", "cross heads", "cross"),
}
"""Each attention's stack and the :data:`~transformer.core.operations.Site` names of its heads
and of its output."""


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


class MultiHeadAttention(nn.Module):
    """``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    Built from the model's :class:`~transformer.core.config.ModelConfig`: ``d_model``,
    ``n_heads`` and ``dropout``. The h per-head projections are stored as one ``(d_model,
    d_model)`` linear map each for Q, K and V, whose output is split into h heads of width
    d_model/h. ``kind`` and ``layer`` say where the module sits in the model (for
    :attr:`Operations.zero_heads`); ``rotary`` is the table its q and k are rotated by, shared
    by every layer (rotary positions only; never for cross-attention).

    The modern block's fields: ``n_kv_heads`` key/value heads (grouped- or multi-query
    attention: W_K and W_V map to ``n_kv_heads · d_head``; query head h reads key/value head
    ``h // (n_heads // n_kv_heads)``) and the biases of the q/k/v and output projections
    (``attention_qkv_bias``, ``attention_output_bias``).

    The later families': ``head_dim`` when heads are not ``d_model / n_heads`` wide (W_Q maps
    d_model to ``n_heads · d_head``, W_O back), ``qk_norm`` (an RMSNorm of q and k before their
    rotation, over each head's ``"head"`` or the whole ``"projection"``: it keeps the scores
    from growing with the weights), ``attention_softcap`` (scores capped by ``softcap ·
    tanh(s / softcap)``) and ``score_scale_dim`` (the d_k of the score scale, when not d_head).
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        kind: AttentionKind | None = None,
        layer: int = 0,
        rotary: RotaryEmbedding | None = None,
    ) -> None:
        super().__init__()
        d_model = config.d_model
        self.n_heads = n_heads = config.n_heads
        self.n_kv_heads = config.kv_heads
        self.kv_head_of = tuple(kv_head_of(n_heads, self.n_kv_heads))
        self.d_head = config.d_head
        self.kind = kind
        self.layer = layer
        d_q, d_kv = n_heads * self.d_head, self.n_kv_heads * self.d_head
        self.w_q = nn.Linear(d_model, d_q, bias=config.attention_qkv_bias)
        self.w_k = nn.Linear(d_model, d_kv, bias=config.attention_qkv_bias)
        self.w_v = nn.Linear(d_model, d_kv, bias=config.attention_qkv_bias)
        self.w_o = nn.Linear(d_q, d_model, bias=config.attention_output_bias)
        self.dropout = Dropout(config.dropout)
        self.rotary = rotary  # shared by every layer (its table is computed, not learned)
        self.qk_norm = config.qk_norm
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if config.qk_norm != "none":
            per_head = config.qk_norm == "head"
            widths = (self.d_head, self.d_head) if per_head else (d_q, d_kv)
            eps, offset = config.layer_norm_eps, config.norm_offset
            self.q_norm = RMSNorm(widths[0], eps, offset)
            self.k_norm = RMSNorm(widths[1], eps, offset)
        self.softcap = config.attention_softcap
        self.scale_dim = config.score_scale_dim

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None,
        mask: Tensor | None = None,
        cache: KeyValueCache | None = None,
        run: Run = PLAIN,
    ) -> Tensor:
        """Attend from ``query`` positions to ``key_value`` positions.

        Args:
            query: ``(B, Tq, d_model)``.
            key_value: ``(B, Tk, d_model)``; may be ``None`` only with a filled static cache.
            mask: bool broadcastable to ``(B, H, Tq, Tk_total)``, ``True`` = may attend, where
                ``Tk_total`` counts cached keys too.
            cache: keys/values kept across decoding steps (updated in place).
            run: this call's operations and capture policy; where it traces or observes,
                attention is written out and its probe handed to the run (:meth:`Run.keep_probe`).

        Returns:
            ``(B, Tq, d_model)`` output.
        """
        ops = run.ops
        q = self._heads(self.w_q(query), self.q_norm, self.n_heads, run)  # (B, H, Tq, d_head)
        if cache is not None and cache.static and cache.keys is not None:
            k, v, rotated = cache.keys, cast(Tensor, cache.values), None  # from the memory, once
        else:
            if key_value is None:
                raise ValueError("key_value is required unless a filled static cache is given")
            k = self._heads(self.w_k(key_value), self.k_norm, self.n_kv_heads, run)
            v = ops.split_heads(self.w_v(key_value), self.n_kv_heads)  # (B, H_kv, Tk, d_head)
            q, k, rotated = self._rotate(q, k, cache, ops)
            if cache is not None:
                k, v = cache.update(k, v)  # the cache keeps H_kv heads
        out = self.attend(q, k, v, mask, run)
        probe = run.kept_probe(self)  # the probe a traced run keeps
        if probe is not None and rotated is not None:
            self._keep_rotary(probe, rotated, ops, uncached=k is rotated.keys_after)
        return out

    def _heads(self, y: Tensor, norm: RMSNorm | None, n_heads: int, run: Run) -> Tensor:
        """``(B, T, n_heads · d_head)`` projected queries or keys → ``(B, n_heads, T, d_head)``,
        normed before the split (``qk_norm="projection"``) or each head after (``"head"``)."""
        if norm is not None and self.qk_norm == "projection":
            y = norm(y, run)
        y = run.ops.split_heads(y, n_heads)
        if norm is not None and self.qk_norm == "head":
            y = norm(y, run)
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
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, run: Run = PLAIN
    ) -> Tensor:
        """Every head's attention over ``(B, H, Tq, d_head)`` queries and ``(B, H_kv, Tk,
        d_head)`` keys and values, heads merged and projected: ``(B, Tq, d_model)``. Key/value
        head ``h // (H / H_kv)`` serves query head h."""
        ops = run.ops
        run.keep_for_inside(
            self, queries=q, keys=k, values=v
        )  # where Inside a layer looks at this layer
        scale = self.score_scale(ops)
        grouped = self.n_kv_heads != self.n_heads
        # sdpa cannot soft-cap its scores: a capped model attends written out, keeping nothing.
        written_out = run.writes_attention_out or self.softcap is not None
        if written_out or (grouped and ops.expand_kv_heads is not expand_kv_heads):
            # sdpa's enable_gqa groups heads the standard way only: another grouping expands here
            k, v = ops.expand_kv_heads(k, self.n_heads), ops.expand_kv_heads(v, self.n_heads)
            grouped = False
        if written_out:
            out, probe = scaled_dot_product_attention(
                q, k, v, mask, scale, self.dropout, self.softcap
            )
            probe.kv_head_of = self.kv_head_of
            # Observed, kept for the trace where the run keeps one; else its weights die here.
            run.keep_probe(self, probe, mask)
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
        out = self._patched(ops, 1, out)  # what a patch sees of the heads
        if ops.zero_heads and self.kind is not None:
            out = ops.gate_heads(out, self.kind, self.layer)
        run.keep_for_inside(self, heads=out)  # (B, H, Tq, d_head)
        projected = self.w_o(ops.merge_heads(out))  # (B, Tq, d_model)
        run.keep_for_inside(self, output=projected)
        return self._patched(ops, 2, projected)  # what a patch sees of the output

    def _patched(self, ops: Operations, which: int, x: Tensor) -> Tensor:
        """``x`` as :attr:`Operations.patch` returns it at this attention's heads (``which``
        1) or output (2), ``x`` itself where nothing patches."""
        if ops.patch is None or self.kind is None:
            return x
        sites = _SITES[self.kind]
        return ops.patched(sites[0], self.layer, sites[which], x)
