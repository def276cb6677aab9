"""The operations a forward pass is made of, where a what-if may swap one for another.

:data:`PAPER` computes exactly the paper. A forward pass takes an :class:`Operations` per call,
in its :class:`~transformer.core.run.Call` (``model(src, tgt, call=Call(ops=...))``), and hands
it down, inside its :class:`~transformer.core.run.Run`, to every stack, layer and attention; it
is never stored on a module, so requests that share one model cannot see each other's choice.
What a pass keeps (a trace, an observer) is not here but in the call's
:class:`~transformer.core.run.Capture`.

    >>> from dataclasses import replace
    >>> leaky = replace(PAPER, causal_mask=False)  # let the decoder see the future
    >>> logits = model(tgt=tgt, call=Call(ops=leaky))

:class:`~transformer.lab.interventions.Intervention` builds these from named switches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

import torch
from torch import Tensor, nn

from .modern import expand_kv_heads

if TYPE_CHECKING:
    from .cache import KeyValueCache
    from .layers import LayerNorm
    from .modern import RMSNorm
    from .rotary import RotaryEmbedding

AttentionKind = Literal["encoder_self", "decoder_self", "cross"]
"""Which attention a record comes from: the encoder's self-attention, the decoder's masked
self-attention, or the decoder's cross-attention over the encoder's memory."""

R = TypeVar("R")

# -- the paper's operations ------------------------------------------------------------------


def positions(positional: nn.Module, length: int, offset: int) -> Tensor:
    """``(length, d_model)`` encodings of positions ``offset .. offset+length-1`` (section 3.5)."""
    return positional(length, offset)


def layer_norm(norm: LayerNorm | RMSNorm, x: Tensor) -> Tensor:
    """``(..., d_model)`` → ``(..., d_model)``: ``γ · (x − mean) / sqrt(var + eps) + β`` (or
    the RMSNorm's formula): what ``norm(x, run)`` computes."""
    return norm.normalise(x)


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """``(B, T, d_model)`` → ``(B, H, T, d_head)``: view the last axis as heads, then move them."""
    batch, length, d_model = x.shape
    return x.view(batch, length, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, H, T, d_head)`` → ``(B, T, d_model)``: the inverse of :func:`split_heads`."""
    batch, n_heads, length, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, length, n_heads * d_head)


def score_scale(d_head: int, n_heads: int) -> float:
    """The multiplier of the attention scores: ``1/√d_k``, d_k the width of one head."""
    return 1.0 / math.sqrt(d_head)


def rotary_positions(
    rotary: RotaryEmbedding, q: Tensor, k: Tensor, offset: int
) -> tuple[Tensor, Tensor]:
    """Rotate ``(B, H, T, d_head)`` queries and ``(B, H_kv, T, d_head)`` keys by positions
    ``offset .. offset+T-1`` (a cached step's positions start at the cache length), each
    dimension i turned with dimension i + d_head/2 (Hugging Face's "rotate half")."""
    return rotary(q, k, offset=offset)


def cross_attention(
    attention: Callable[[Tensor, Tensor | None, Tensor | None, KeyValueCache | None, R], Tensor],
    x: Tensor,
    memory: Tensor | None,
    mask: Tensor | None,
    cache: KeyValueCache | None,
    run: R,
) -> Tensor:
    """Encoder-decoder attention (section 3.2.3): queries from the decoder's ``(B, Tq,
    d_model)`` ``x``, keys and values from the ``(B, Ts, d_model)`` encoder ``memory``;
    ``(B, Tq, d_model)``. ``attention`` is the decoder layer's cross-attention module, called
    with the pass's ``run``."""
    return attention(x, memory, mask, cache, run)


def attention_mask(
    mask: Tensor | None, shape: tuple[int, ...], device: torch.device
) -> Tensor | None:
    """The mask attention reads, from the one the model built (``True`` = may attend, both;
    ``shape`` is the ``(B, 1, Tq, Tk)`` it broadcasts to)."""
    return mask


Site = tuple[str, int, str]
"""Where :attr:`Operations.patch` sees a tensor: ``(stack, layer, what)``, ``stack``
``"encoder"`` or ``"decoder"``, ``layer`` from 0, ``what`` one of

- ``"residual"``: the ``(B, T, d_model)`` stream entering the layer (layer ``n_layers``: the
  stack's output before its final norm);
- ``"attention"`` / ``"cross"``: the self-/cross-attention's ``(B, T, d_model)`` output (after
  W_O, before the residual connection adds it);
- ``"mlp"``: the feed-forward's ``(B, T, d_model)`` output, likewise;
- ``"heads"`` / ``"cross heads"``: each head's ``(B, H, T, d_head)`` weighted values, before
  W_O merges them (and before :attr:`Operations.zero_heads` switches any off).
"""


@dataclass(frozen=True)
class Operations:
    """One forward pass's operations; the defaults (:data:`PAPER`) are the paper's.

    Attributes:
        positions: ``(positional module, length, offset)`` → ``(T, d_model)`` table.
        layer_norm: ``(LayerNorm module, x)`` → normalised ``x``, for every norm of the model
            (what ``norm(x, run)`` runs).
        split_heads: ``(x, n_heads)``: ``(B, T, d_model)`` → ``(B, H, T, d_head)``.
        merge_heads: ``(B, H, T, d_head)`` → ``(B, T, d_model)``.
        score_scale: ``(d_head, n_heads)`` → the multiplier of the attention scores.
        cross_attention: how a decoder layer calls its cross-attention (which inputs it takes).
        attention_mask: ``(mask, shape, device)`` → the mask attention reads.
        rotary_positions: ``(rotary table, q, k, offset)`` → rotated ``(q, k)`` (rotary
            models only).
        expand_kv_heads: ``(B, H_kv, T, d_head)`` keys or values, ``n_heads`` → ``(B, H, T,
            d_head)``: which key/value head each query head reads (grouped-query attention).
        causal_mask: ``False`` lets the decoder see the future.
        padding_mask: ``False`` lets queries attend to padding.
        zero_heads: ``(kind, layer, head)`` triples whose output is switched off.
        patch: ``(site, tensor)`` → the tensor the pass goes on with, called at each
            :data:`Site` (see :meth:`patched`): it may read the tensor (a cache of
            activations) or return another (activation patching, a mean-ablated head).
            ``None``: the pass runs without the calls.
    """

    positions: Callable[[nn.Module, int, int], Tensor] = positions
    layer_norm: Callable[[LayerNorm | RMSNorm, Tensor], Tensor] = layer_norm
    split_heads: Callable[[Tensor, int], Tensor] = split_heads
    merge_heads: Callable[[Tensor], Tensor] = merge_heads
    score_scale: Callable[[int, int], float] = score_scale
    cross_attention: Callable[..., Tensor] = cross_attention
    attention_mask: Callable[[Tensor | None, tuple[int, ...], torch.device], Tensor | None] = (
        attention_mask
    )
    rotary_positions: Callable[[RotaryEmbedding, Tensor, Tensor, int], tuple[Tensor, Tensor]] = (
        rotary_positions
    )
    expand_kv_heads: Callable[[Tensor, int], Tensor] = expand_kv_heads
    causal_mask: bool = True
    padding_mask: bool = True
    zero_heads: frozenset[tuple[AttentionKind, int, int]] = frozenset()
    patch: Callable[[Site, Tensor], Tensor] | None = None

    def patched(self, stack: str, layer: int, what: str, x: Tensor) -> Tensor:
        """``x`` itself, or what :attr:`patch` returns for it at site ``(stack, layer,
        what)``."""
        return x if self.patch is None else self.patch((stack, layer, what), x)

    def gate_heads(self, out: Tensor, kind: AttentionKind, layer: int) -> Tensor:
        """``(B, H, T, d_head)`` heads of one attention sub-layer, those in :attr:`zero_heads`
        set to 0."""
        off = [h for (k, lay, h) in self.zero_heads if k == kind and lay == layer]
        if not off:
            return out
        gate = torch.ones(out.size(1), dtype=out.dtype, device=out.device)
        gate[off] = 0.0
        return out * gate.view(1, -1, 1, 1)


PAPER = Operations()
"""The paper's operations: what a forward pass runs unless told otherwise."""
