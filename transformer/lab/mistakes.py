"""The seeds' mistakes, as broken versions of the paper's operations.

The four teaching texts this project started from (``seeds/`` 000, 002, 003, 004) each get
something wrong. Each mistake here is an operation of :class:`~transformer.core.operations.Operations`
written the seed's way, and its :class:`~transformer.lab.switch.Switch` record beside it (the
seed, where the mistake came from, why it is wrong, which models it changes), so a learner can
run the broken formula on a real model and see what it does:

    >>> from transformer.lab.mistakes import SCORES_TIMES_D_HEAD
    >>> from transformer.lab.switches import operations
    >>> broken = operations([SCORES_TIMES_D_HEAD])  # the paper's operations, one of them wrong

What a mistake changes in a model's output is measured in :mod:`transformer.lab.effects`.

The forward pass itself (``model.py``, ``stacks.py``, ``attention.py``, ``layers.py``,
``embeddings.py``) knows nothing of them: it runs whatever operations it is handed.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ..core.attention import MultiHeadAttention
from ..core.cache import KeyValueCache
from ..core.config import ModelConfig
from ..core.embeddings import SinusoidalPositionalEncoding, sinusoidal_table
from ..core.layers import LayerNorm
from ..core.modern import RMSNorm
from ..core.run import PLAIN, Run
from .switch import SEED_MISTAKE, Switch

# -- the broken operations, one per mistake ---------------------------------------------------


def swapped_positions(positional: nn.Module, length: int, offset: int) -> Tensor:
    """Seed 004's sinusoidal table for positions ``offset .. offset+length-1``, ``(length,
    d_model)``: cos where sin belongs and the reverse, base 1000 instead of 10000. Learned
    positions are left as they are. Computed on demand: nothing is kept."""
    correct = positional(length, offset)  # (length, d_model); checks the length too
    if not isinstance(positional, SinusoidalPositionalEncoding):
        return correct
    table = sinusoidal_table(offset + length, correct.size(1), 1000.0, positional.layout)
    half = table.size(1) // 2
    if positional.layout == "halves":  # every sin first, then every cos: swap the halves
        swapped = torch.cat([table[:, half:], table[:, :half]], dim=1)
    else:  # interleaved: swap each (sin, cos) pair
        swapped = table.view(-1, half, 2).flip(-1).reshape(table.shape)
    return swapped[offset:].to(correct.device)


def scores_over_d_model(d_head: int, n_heads: int) -> float:
    """Seed 002's scale: ``1/√d_model``, the whole model's width instead of one head's."""
    return 1.0 / math.sqrt(d_head * n_heads)


def scores_times_d_head(d_head: int, n_heads: int) -> float:
    """Seed 004's scale: ``× √d_head``, a multiplication where the paper divides."""
    return math.sqrt(d_head)


def scores_times_d_model(d_head: int, n_heads: int) -> float:
    """Both scale mistakes at once: ``× √d_model`` (the width of one, the sign of the other)."""
    return math.sqrt(d_head * n_heads)


def split_bare_view(x: Tensor, n_heads: int) -> Tensor:
    """Seed 003's split: ``x.view(B·H, -1, d_head)`` straight from ``(B, T, d_model)``, which
    keeps memory order, so head j receives the pieces of tokens ``jT/H … (j+1)T/H``; viewed as
    ``(B, H, T, d_head)``."""
    batch, length, d_model = x.shape
    d_head = d_model // n_heads
    scrambled = x.reshape(batch * n_heads, -1, d_head)  # (B·H, T, d_head)
    return scrambled.view(batch, n_heads, length, d_head)


def merge_bare_view(x: Tensor) -> Tensor:
    """Seed 003's merge: ``(B, H, T, d_head)`` viewed as ``(B, T, d_model)`` without the
    transpose, so merged row t holds H consecutive positions of one head."""
    batch, n_heads, length, d_head = x.shape
    return x.reshape(batch, length, n_heads * d_head)


def unbiased_std_plus_eps(norm: LayerNorm | RMSNorm, x: Tensor) -> Tensor:
    """Seed 004's LayerNorm: ``γ · (x − mean) / (std + eps) + β`` with the *unbiased* std
    (divide by n − 1) and ``eps`` outside the root; ``(..., d_model)`` → ``(..., d_model)``.
    An RMSNorm (no mean, no β) is not the LayerNorm the seed wrote: it is computed as it is."""
    if not isinstance(norm, LayerNorm):
        return norm.normalise(x)
    mean = x.mean(dim=-1, keepdim=True)
    std = x.std(dim=-1, keepdim=True)  # unbiased: the mistake
    return norm.weight * (x - mean) / (std + norm.eps) + norm.bias


def cross_shape_error(n_source: int, n_target: int) -> ValueError:
    """The error of :data:`CROSS_QUERIES_FROM_MEMORY` when source and target lengths differ."""
    return ValueError(
        f"cross-attention with queries from the memory (seed 004's cross_attn(q=memory, "
        f"k=memory, v=x)) cannot run here: its weights are source × source ({n_source} × "
        f"{n_source}) but the values v = x have {n_target} target rows, so weights · v does not "
        f"multiply, and its output, one row per source position, could not be added to the "
        f"{n_target} target positions anyway. It runs, silently wrong, only when source and "
        f"target are equally long."
    )


def queries_from_memory(
    attention: MultiHeadAttention,
    x: Tensor,
    memory: Tensor | None,
    mask: Tensor | None,
    cache: KeyValueCache | None,
    run: Run = PLAIN,
) -> Tensor:
    """Seed 004's cross-attention, ``cross_attn(q=memory, k=memory, v=x)``: queries and keys
    from the ``(B, Ts, d_model)`` memory, values from the decoder's ``(B, Tq, d_model)`` ``x``.
    Its weights are ``(Ts × Ts)`` and read Ts rows of values from x: only equal lengths
    multiply. The cache is not used (the seeds had none)."""
    if memory is None:
        raise ValueError(
            "cross-attention with queries from the memory needs the memory itself "
            "(it cannot run from a key/value cache)"
        )
    if memory.size(1) != x.size(1):
        raise cross_shape_error(memory.size(1), x.size(1))
    heads, ops = attention.n_heads, run.ops
    q = ops.split_heads(attention.w_q(memory), heads)  # (B, H, Ts, d_head)
    k = ops.split_heads(attention.w_k(memory), heads)  # (B, H, Ts, d_head)
    v = ops.split_heads(attention.w_v(x), heads)  # (B, H, Tq, d_head), Tq = Ts
    return attention.attend(q, k, v, mask, run)


def inverted(mask: Tensor | None, shape: tuple[int, ...], device: torch.device) -> Tensor:
    """Seeds 003 and 004's polarity: ``mask`` inverted (``None``, nothing masked, becomes all
    masked, ``shape``)."""
    if mask is None:
        return torch.zeros(shape, dtype=torch.bool, device=device)
    return ~mask


# -- the records, in seed order ----------------------------------------------------------------


def _several_heads(config: ModelConfig) -> bool:
    # With one head d_head = d_model and the bare view cuts nothing: the same formula.
    return config.n_heads > 1


def _sinusoidal(config: ModelConfig) -> bool:
    return config.positional == "sinusoidal"


def _layer_norm(config: ModelConfig) -> bool:
    return config.norm_kind != "rms"


def _encoder_and_decoder(config: ModelConfig) -> bool:
    return config.has_encoder and config.has_decoder


SINUSOID_SWAPPED = Switch(
    "sin_and_cos_swapped_base_1000",
    "sin and cos swapped, base 1000",
    SEED_MISTAKE,
    "Each pair's sin and cos trade places and every wavelength is 10 times shorter, so the "
    "table is not the one the model was trained with (or the paper's): positions far apart "
    "look alike sooner.",
    "sinusoidal positions",
    applies_to=_sinusoidal,
    changes={"positions": swapped_positions},
    seed="004",
    origin="Seed 004 writes the paper's formula, sin at even dimensions with base 10000, then "
    "fills `pe[:, 1::2]` with sin and `pe[:, 0::2]` with cos over `1000 ** (-2i/d)`.",
)
SCORES_OVER_D_MODEL = Switch(
    "scores_d_model",
    "scores ÷ √d_model",
    SEED_MISTAKE,
    "Each head's dot product sums d_head products, so its spread grows with √d_head: dividing "
    "by √d_model shrinks the scores √h times too much and flattens the softmax.",
    "more than one head",
    applies_to=_several_heads,
    changes={"score_scale": scores_over_d_model},
    seed="002",
    origin="Seed 002 divides the scores by `math.sqrt(self.dim)`, the model width, in both its "
    "single-head and its multi-head attention.",
)
SCORES_TIMES_D_HEAD = Switch(
    "scores_d_head",
    "scores × √d_head",
    SEED_MISTAKE,
    "Multiplying by √d_head instead of dividing makes the scores d_head times too large, so the "
    "softmax saturates: nearly all weight goes to one key and gradients vanish.",
    changes={"score_scale": scores_times_d_head},
    seed="004",
    origin="Seed 004 sets `scaling = head_size ** 0.5` and multiplies the scores by it.",
)
SPLIT_BARE_VIEW = Switch(
    "heads_split_with_a_bare_view",
    "heads split with a bare view",
    SEED_MISTAKE,
    "A view keeps memory order, so the first head gets the first T/h tokens cut into h pieces, "
    "the next head the next T/h tokens, and so on: each head mixes pieces of a few tokens "
    "instead of seeing its slice of every token (the correct split views (B, T, h, d_head), "
    "then transposes).",
    "more than one head",
    applies_to=_several_heads,
    changes={"split_heads": split_bare_view},
    axes=(("", "rows, columns: pieces of tokens"),),
    seed="003",
    origin="Seed 003 splits heads with `key.view(batch_size * num_heads, -1, dim_per_head)` "
    "straight from the (batch, length, d_model) projection.",
)
MERGE_BARE_VIEW = Switch(
    "heads_merged_with_a_bare_view",
    "heads merged with a bare view",
    SEED_MISTAKE,
    "Without the transpose back to (B, T, h, d_head), a merged 'token' holds h consecutive "
    "positions of one head instead of every head's output for one token, so the output "
    "projection mixes positions.",
    "more than one head",
    applies_to=_several_heads,
    changes={"merge_heads": merge_bare_view},
    seed="003",
    origin="Seed 003 merges heads back with `context.view(batch_size, -1, dim_per_head * "
    "num_heads)` straight from (batch·heads, length, d_head).",
)
LAYER_NORM_STD_EPS = Switch(
    "layernorm_unbiased_std_eps",
    "LayerNorm: unbiased std + eps",
    SEED_MISTAKE,
    "LayerNorm divides by √(biased variance + eps), as the model was trained: the unbiased std "
    "makes every normalised vector √((n−1)/n) times too small and moves eps out of the root; "
    "with hundreds of dimensions that is a small change, which is why such a bug can go "
    "unnoticed.",
    "LayerNorm (RMSNorm subtracts no mean and has no bias)",
    applies_to=_layer_norm,
    changes={"layer_norm": unbiased_std_plus_eps},
    seed="004",
    origin="Seed 004's LayerNorm computes `x.std(dim=-1)` (unbiased, divides by n − 1) and "
    "divides by `std + eps`.",
)
CROSS_QUERIES_FROM_MEMORY = Switch(
    "cross_attention_queries_from_the_memory",
    "cross-attention queries from the memory",
    SEED_MISTAKE,
    "Cross-attention asks with the decoder's tokens (queries from x) and reads the source (keys "
    "and values from the memory); this asks the source about itself and reads target vectors "
    "by source position, which only has the right shape when both are equally long.",
    "an encoder and a decoder",
    applies_to=_encoder_and_decoder,
    changes={"cross_attention": queries_from_memory},
    axes=(("cross", "rows: source positions"),),
    may_refuse=True,
    seed="004",
    origin="Seed 004's decoder layer calls `cross_attn(q=memory, k=memory, v=x)`: queries and "
    "keys from the encoder's memory, values from the decoder.",
)
MASK_INVERTED = Switch(
    "mask_polarity_inverted",
    "mask polarity inverted",
    SEED_MISTAKE,
    "Inverted, the padding mask lets queries read only [PAD] keys and the causal mask lets them "
    "read only the future; a query whose every key is masked receives nothing (the seeds' -inf "
    "fill would give NaN).",
    changes={"attention_mask": inverted},
    seed="003, 004",
    origin="Seeds 003 and 004 build masks with True = masked out (`seq_k.eq(0)`, "
    "`masked_fill_(mask, -inf)`, torch.nn's convention), seed 002 with 1 = real token, and "
    "`F.scaled_dot_product_attention` reads True = may attend: one text's mask in another's "
    "code is inverted.",
)

SEED_MISTAKES: tuple[Switch, ...] = (
    SINUSOID_SWAPPED,
    SCORES_OVER_D_MODEL,
    SCORES_TIMES_D_HEAD,
    SPLIT_BARE_VIEW,
    MERGE_BARE_VIEW,
    LAYER_NORM_STD_EPS,
    CROSS_QUERIES_FROM_MEMORY,
    MASK_INVERTED,
)

# Both scale mistakes at once multiply by √d_model (÷ √d_model replaces the width, × √d_head the
# division): the one pair of seed mistakes that replace the same operation and add up.
BOTH_SCALES: tuple[frozenset[Switch], dict[str, Any]] = (
    frozenset({SCORES_OVER_D_MODEL, SCORES_TIMES_D_HEAD}),
    {"score_scale": scores_times_d_model},
)


__all__ = [
    "BOTH_SCALES",
    "CROSS_QUERIES_FROM_MEMORY",
    "LAYER_NORM_STD_EPS",
    "MASK_INVERTED",
    "MERGE_BARE_VIEW",
    "SCORES_OVER_D_MODEL",
    "SCORES_TIMES_D_HEAD",
    "SEED_MISTAKES",
    "SINUSOID_SWAPPED",
    "SPLIT_BARE_VIEW",
    "cross_shape_error",
    "inverted",
    "merge_bare_view",
    "queries_from_memory",
    "scores_over_d_model",
    "scores_times_d_head",
    "scores_times_d_model",
    "split_bare_view",
    "swapped_positions",
    "unbiased_std_plus_eps",
]
