"""The Llama family's building blocks that the 2017 paper does not have, one concept each.

- :class:`RMSNorm`: ``x / sqrt(mean(x²) + eps) · w`` (Zhang & Sennrich 2019): no mean is
  subtracted and there is no bias.
- :class:`GatedFeedForward`: ``W_down(act(W_gate x) ⊙ W_up x)`` (Shazeer 2020; SwiGLU when the
  activation is SiLU): one projection decides how much of the other passes, unit by unit.
- :func:`expand_kv_heads`: grouped-query attention (Ainslie et al. 2023) keeps ``n_kv_heads``
  key/value heads; query head h reads key/value head ``h // (n_heads // n_kv_heads)``, so each
  kv head is repeated *in place* (``repeat_interleave``), not tiled (``repeat``).

Rotary positions are in :mod:`transformer.core.rotary`. The later families add, each chosen by one
``ModelConfig`` field:

- ``norm_offset`` (Gemma): the RMSNorm multiplies by ``1 + w`` (``w`` stored around 0);
- :func:`sliding_window_mask` (Mistral, Gemma, ``sliding_window``): a query reads only the
  last ``window`` positions, so its cache need keep no more;
- :func:`soft_cap` (Gemma 2, ``attention_softcap`` / ``final_logit_softcap``): ``cap ·
  tanh(x / cap)``, which keeps a score or a logit from running away while leaving small ones
  almost unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .layers import ACTIVATION_FUNCTIONS, Dropout, Pass, activate_in_place, keep_nothing


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, with a learned gain ``w``.

    Computed in float32 whatever the input's dtype (as Hugging Face Llama does), then cast back.
    ``offset`` is added to the gain: Gemma stores ``w`` around 0 and multiplies by ``1 + w``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, offset: float = 0.0) -> None:
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(torch.ones(d_model))  # w (γ); RMSNorm has no β

    def forward(self, x: Tensor, run: Pass | None = None) -> Tensor:
        """``(..., d_model)`` → ``(..., d_model)``: :meth:`normalise`, or the norm of ``run``'s
        operations where a pass swaps it (``run.ops.layer_norm``); ``run`` keeps ``x`` and the
        output where Inside a layer looks at this norm's layer."""
        return self.normalise(x) if run is None else run.normalise(self, x)

    def normalise(self, x: Tensor) -> Tensor:
        """``(..., d_model)`` → ``(..., d_model)``: ``w · x / sqrt(mean(x²) + eps)``."""
        dtype = x.dtype
        x32 = x.float()
        mean_square = x32.pow(2).mean(dim=-1, keepdim=True)
        normed = (x32 * torch.rsqrt(mean_square + self.eps)).to(dtype)
        if self.offset:
            return (normed.float() * (self.offset + self.weight.float())).to(dtype)
        if torch.is_grad_enabled() or normed.dtype != self.weight.dtype:
            return self.weight * normed  # (a float32 gain promotes a half-precision input)
        return normed.mul_(self.weight)  # inference: the same product, in place


class GatedFeedForward(nn.Module):
    """``W_down(act(W_gate x) ⊙ W_up x)``, applied to each position alone.

    Three projections instead of the paper's two: ``w_gate`` and ``w_up`` map d_model → d_ff,
    ``w_down`` maps d_ff → d_model. ``activation`` is a name of
    :data:`transformer.core.layers.ACTIVATION_FUNCTIONS` (``"silu"`` for SwiGLU).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: str = "silu",
        bias: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATION_FUNCTIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATION_FUNCTIONS)}")
        self.activation = ACTIVATION_FUNCTIONS[activation]
        self.w_gate = nn.Linear(d_model, d_ff, bias=bias)
        self.w_up = nn.Linear(d_model, d_ff, bias=bias)
        self.w_down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(dropout)

    def hidden(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The gate ``act(W_gate x)``, the up projection ``W_up x`` and their product: each
        ``(B, T, d_ff)`` (what a view of the unit activity shows)."""
        gate = self.activation(self.w_gate(x))
        up = self.w_up(x)
        return gate, up, gate * up

    def forward(self, x: Tensor, run: Pass | None = None) -> Tensor:
        """``(B, T, d_model)`` → ``(B, T, d_model)``."""
        return self.w_down(self.dropout(self.units(x, run)))

    def units(self, x: Tensor, run: Pass | None = None) -> Tensor:
        """The unit activity ``act(W_gate x) ⊙ W_up x``: ``(B, T, d_model)`` → ``(B, T,
        d_ff)``. ``run`` keeps the gate before (``"gate_in"``) and after (``"gate"``) its
        activation, ``"up"`` and the product (``"units"``) where Inside a layer looks at this
        layer."""
        keep_for_inside = keep_nothing if run is None else run.keep_for_inside
        gate = self.w_gate(x)  # (B, T, d_ff)
        keep_for_inside(
            self, gate_in=gate
        )  # (a copy: inference writes over the gate's buffer next)
        # Inference (no gradient): the same numbers, each written over the gate's own (B, T,
        # d_ff) buffer instead of a new one (SmolLM2 at 512 tokens: 6 MB a layer).
        grad = torch.is_grad_enabled()
        gate = self.activation(gate) if grad else activate_in_place(self.activation, gate)
        up = self.w_up(x)
        keep_for_inside(self, gate=gate, up=up)
        units = gate * up if grad else gate.mul_(up)
        keep_for_inside(self, units=units)
        return units


def kv_head_of(n_heads: int, n_kv_heads: int) -> list[int]:
    """The key/value head each query head reads: ``[h // (n_heads // n_kv_heads) for h]``."""
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    group = n_heads // n_kv_heads
    return [h // group for h in range(n_heads)]


def expand_kv_heads(x: Tensor, n_heads: int) -> Tensor:
    """Repeat each key/value head for the query heads of its group.

    Args:
        x: ``(B, n_kv_heads, T, d_head)`` keys or values.
        n_heads: the number of query heads (a multiple of ``n_kv_heads``).

    Returns:
        ``(B, n_heads, T, d_head)``: head h is ``x[:, h // (n_heads // n_kv_heads)]``. When
        ``n_kv_heads == n_heads`` the input itself is returned (no copy).
    """
    n_kv_heads = x.shape[1]
    if n_kv_heads == n_heads:
        return x
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    return x.repeat_interleave(n_heads // n_kv_heads, dim=1)


def soft_cap(x: Tensor, cap: float | None) -> Tensor:
    """``cap · tanh(x / cap)`` of any shape (``x`` itself where ``cap`` is ``None``): near
    ``x`` for ``|x| ≪ cap``, never beyond ``±cap``."""
    if cap is None:
        return x
    return torch.tanh(x / cap) * cap


def sliding_window_mask(
    mask: Tensor | None, window: int, first_query: int, n_queries: int, n_keys: int
) -> Tensor:
    """The mask of a sliding-window layer: ``mask``'s last ``n_keys`` columns (a bounded cache
    keeps only the latest keys) where also ``query − key < window``.

    Args:
        mask: bool ``(B, 1, Tq, Tk_all)`` (``True`` = may attend; ``Tk_all`` counts every
            position so far) or ``None``.
        window: positions a query reads, itself included.
        first_query: the position of the first query (the cache length before this call).
        n_queries: Tq.
        n_keys: the keys this layer holds, the latest of all positions.

    Returns:
        bool ``(B or 1, 1, Tq, n_keys)``.
    """
    device = mask.device if mask is not None else None
    total = first_query + n_queries
    queries = torch.arange(first_query, total, device=device)
    keys = torch.arange(total - n_keys, total, device=device)
    band = (queries[:, None] - keys[None, :]) < window  # (Tq, n_keys)
    if mask is None:
        return band[None, None]
    return mask[..., -n_keys:] & band
