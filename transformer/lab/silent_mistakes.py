"""Mistakes of the modern block that still write fluent text, as broken operations.

The seeds' mistakes (:mod:`transformer.lab.mistakes`) break a model visibly. A Llama-family model
fails more quietly: each mistake here keeps the text fluent (or nearly), and only a number such
as the model's perplexity on a reference text (:mod:`transformer.lab.perplexity`) or a parity test
gives it away. Each is one operation of :class:`~transformer.core.operations.Operations` written the
wrong way, with its :class:`~transformer.lab.switch.Switch` record beside it; the catalogue's
:func:`~transformer.lab.switches.operations` makes it:

    >>> from transformer import Call
    >>> from transformer.lab.silent_mistakes import KV_TILED
    >>> from transformer.lab.switches import operations
    >>> logits = model(tgt=ids, call=Call(ops=operations([KV_TILED])))

The forward pass (``attention.py``, ``stacks.py``, ``modern.py``, ``rotary.py``) knows nothing
of them: it runs the operations it is handed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..core.config import ModelConfig
from ..core.modern import RMSNorm
from .switch import SILENT_MISTAKE, Switch

if TYPE_CHECKING:
    from ..core.layers import LayerNorm
    from ..core.rotary import RotaryEmbedding

# -- the broken operations -------------------------------------------------------------------


def rotate_neighbours(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` ``(B, H, T, d_head)`` pairing neighbours ``(2i, 2i+1)`` (the RoPE paper's
    and llama.cpp's layout), pair i by the angle whose ``cos``/``sin`` ``(T, d_head)`` sit in
    column i of the rotate-half table (its first half)."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half].to(x.dtype), sin[..., :half].to(x.dtype)  # (T, d_head/2)
    even, odd = x[..., 0::2], x[..., 1::2]  # (B, H, T, d_head/2) each
    return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)


def neighbour_pairs(
    rotary: RotaryEmbedding, q: Tensor, k: Tensor, offset: int
) -> tuple[Tensor, Tensor]:
    """Rotary positions with neighbour pairs, on weights trained (and converted) for rotate
    half: the same angles, applied to the wrong pairs of dimensions."""
    positions = torch.arange(offset, offset + q.shape[-2], device=q.device)
    cos, sin = rotary.cos_sin(positions)  # (T, rotary_dims)
    turned = rotary.rotary_dims  # partial rotary: the other dimensions pass as they are

    def wrong(x: Tensor) -> Tensor:
        return torch.cat([rotate_neighbours(x[..., :turned], cos, sin), x[..., turned:]], dim=-1)

    return wrong(q), wrong(k)


def positions_from_zero(
    rotary: RotaryEmbedding, q: Tensor, k: Tensor, offset: int
) -> tuple[Tensor, Tensor]:
    """Rotary positions that forget the cache: every call starts at position 0, so a cached
    step's new token is rotated as if it came first (an uncached pass is unchanged)."""
    return rotary(q, k, offset=0)


def tiled_kv_heads(x: Tensor, n_heads: int) -> Tensor:
    """``(B, H_kv, T, d_head)`` → ``(B, H, T, d_head)`` with ``repeat`` (the heads tiled: query
    head h reads key/value head ``h % H_kv``) instead of ``repeat_interleave`` (``h // (H /
    H_kv)``)."""
    n_kv_heads = x.shape[1]
    if n_kv_heads == n_heads:
        return x
    return x.repeat(1, n_heads // n_kv_heads, 1, 1)


def rms_mean_subtracted(norm: LayerNorm | RMSNorm, x: Tensor) -> Tensor:
    """RMSNorm that subtracts the mean first (a LayerNorm without β): ``w · (x − mean) /
    sqrt(mean((x − mean)²) + eps)``; ``(..., d)`` → ``(..., d)``. A LayerNorm is unchanged."""
    if not isinstance(norm, RMSNorm):
        return norm(x)
    x32 = x.float()
    centred = x32 - x32.mean(dim=-1, keepdim=True)
    normed = centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + norm.eps)
    return (norm.weight + norm.offset) * normed.to(x.dtype)  # Gemma's gain is 1 + w


def rms_eps_outside(norm: LayerNorm | RMSNorm, x: Tensor) -> Tensor:
    """RMSNorm with ``eps`` added after the root: ``w · x / (sqrt(mean(x²)) + eps)``; ``(...,
    d)`` → ``(..., d)``. A LayerNorm is unchanged."""
    if not isinstance(norm, RMSNorm):
        return norm(x)
    x32 = x.float()
    root = x32.pow(2).mean(dim=-1, keepdim=True).sqrt()
    return (norm.weight + norm.offset) * (x32 / (root + norm.eps)).to(x.dtype)


def unscaled(d_head: int, n_heads: int) -> float:
    """No scale at all: the scores are the bare ``q · k``."""
    return 1.0


# -- the records -------------------------------------------------------------------------------
# Every silent mistake is shown on generated text, so each applies to a model with a decoder.


def _decoder(config: ModelConfig) -> bool:
    return config.has_decoder


def _rotary(config: ModelConfig) -> bool:
    return config.has_decoder and config.positional == "rotary"


def _grouped(config: ModelConfig) -> bool:
    # with one key/value head (multi-query), tiling and repeating in place are the same
    return config.has_decoder and 1 < config.kv_heads < config.n_heads


def _rms(config: ModelConfig) -> bool:
    return config.has_decoder and config.norm_kind == "rms"


ROTARY_NEIGHBOURS = Switch(
    "rotary_neighbour_pairs_on_rotate_half_weights",
    "rotary: neighbour pairs on rotate-half weights",
    SILENT_MISTAKE,
    "Hugging Face's weights pair dimension i with i + d_head/2; rotating neighbours (2i, 2i+1) "
    "turns the wrong pairs, so q·k no longer depends on the distance alone.",
    "rotary positions",
    applies_to=_rotary,
    changes={"rotary_positions": neighbour_pairs},
)
KV_TILED = Switch(
    "key_value_heads_tiled_with_repeat",
    "key/value heads tiled with repeat",
    SILENT_MISTAKE,
    "query head h must read key/value head h // (H / H_kv); repeat tiles the heads, so most "
    "query heads read another group's keys and values.",
    "grouped-query attention with more than one key/value head",
    applies_to=_grouped,
    changes={"expand_kv_heads": tiled_kv_heads},
)
ROTARY_NO_OFFSET = Switch(
    "rotary_positions_not_offset_by_the_cache",
    "rotary positions not offset by the cache",
    SILENT_MISTAKE,
    "a cached step's token sits at position = cache length; rotated as position 0 it looks "
    "like the first token, and cached decoding drifts from an uncached pass.",
    "rotary positions",
    applies_to=_rotary,
    changes={"rotary_positions": positions_from_zero},
)
RMS_MEAN_SUBTRACTED = Switch(
    "rmsnorm_with_the_mean_subtracted",
    "RMSNorm with the mean subtracted",
    SILENT_MISTAKE,
    "RMSNorm divides by the root mean square and keeps the mean; subtracting it throws away a "
    "direction the weights rely on.",
    "RMSNorm",
    applies_to=_rms,
    changes={"layer_norm": rms_mean_subtracted},
)
RMS_EPS_OUTSIDE = Switch(
    "rmsnorm_eps_outside_the_root",
    "RMSNorm: eps outside the root",
    SILENT_MISTAKE,
    "eps belongs under the root, sqrt(mean(x²) + eps); outside it changes little, except for "
    "small vectors.",
    "RMSNorm",
    applies_to=_rms,
    changes={"layer_norm": rms_eps_outside},
)
NO_SCALE = Switch(
    "no_1_d_head_scaling",
    "no 1/√d_head scaling",
    SILENT_MISTAKE,
    "without 1/√d_head the scores grow with the head width, so softmax turns almost one-hot "
    "and every head attends more sharply than it was trained to.",
    applies_to=_decoder,
    changes={"score_scale": unscaled},
)
CAUSAL_OFF_PREFILL = Switch(
    "causal_mask_off_during_prefill",
    "causal mask off during prefill",
    SILENT_MISTAKE,
    "without the causal mask the prompt's positions read the tokens after them; one new token "
    "at a time has no future to see, so only the prompt's pass changes.",
    applies_to=_decoder,
    changes={"causal_mask": False},
)

SILENT_MISTAKES: tuple[Switch, ...] = (
    ROTARY_NEIGHBOURS,
    KV_TILED,
    ROTARY_NO_OFFSET,
    RMS_MEAN_SUBTRACTED,
    RMS_EPS_OUTSIDE,
    NO_SCALE,
    CAUSAL_OFF_PREFILL,
)


__all__ = [
    "CAUSAL_OFF_PREFILL",
    "KV_TILED",
    "NO_SCALE",
    "RMS_EPS_OUTSIDE",
    "RMS_MEAN_SUBTRACTED",
    "ROTARY_NEIGHBOURS",
    "ROTARY_NO_OFFSET",
    "SILENT_MISTAKES",
    "neighbour_pairs",
    "positions_from_zero",
    "rms_eps_outside",
    "rms_mean_subtracted",
    "rotate_neighbours",
    "tiled_kv_heads",
    "unscaled",
]
