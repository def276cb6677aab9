"""The seeds' mistakes, as broken versions of the paper's operations.

The four teaching texts this project started from (``seeds/`` 000, 002, 003, 004) each get
something wrong. Each mistake here is an operation of :class:`~transformer.core.operations.Operations`
written the seed's way, switched on by name (``Intervention(mistakes=...)``, or
:func:`operations`), so a learner can run the broken formula on a real model and see what it
does:

    >>> from transformer.lab.mistakes import MISTAKES, operations
    >>> broken = operations(["scores × √d_head"])  # the paper's operations, one of them wrong

What a mistake changes in a model's output is measured in :mod:`transformer.lab.effects`.

The forward pass itself (``model.py``, ``stacks.py``, ``attention.py``, ``layers.py``,
``embeddings.py``) knows nothing of them: it runs whatever operations it is handed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..core.attention import MultiHeadAttention
from ..core.cache import KeyValueCache
from ..core.config import ModelConfig
from ..core.embeddings import SinusoidalPositionalEncoding, sinusoidal_table
from ..core.layers import LayerNorm
from ..core.modern import RMSNorm
from ..core.operations import PAPER, Operations
from ..core.run import PLAIN, Run

if TYPE_CHECKING:
    pass

# The mistakes by the short name a learner reads, in seed order.
SINUSOID_SWAPPED = "sin and cos swapped, base 1000"
SCORES_OVER_D_MODEL = "scores ÷ √d_model"
SCORES_TIMES_D_HEAD = "scores × √d_head"
SPLIT_BARE_VIEW = "heads split with a bare view"
MERGE_BARE_VIEW = "heads merged with a bare view"
LAYER_NORM_STD_EPS = "LayerNorm: unbiased std + eps"
CROSS_QUERIES_FROM_MEMORY = "cross-attention queries from the memory"
MASK_INVERTED = "mask polarity inverted"
SEED_MISTAKES: tuple[str, ...] = (
    SINUSOID_SWAPPED,
    SCORES_OVER_D_MODEL,
    SCORES_TIMES_D_HEAD,
    SPLIT_BARE_VIEW,
    MERGE_BARE_VIEW,
    LAYER_NORM_STD_EPS,
    CROSS_QUERIES_FROM_MEMORY,
    MASK_INVERTED,
)


def check_mistake_names(names: Iterable[str]) -> None:
    """``ValueError`` naming the valid mistakes if any of ``names`` is not one of them."""
    unknown = sorted(set(names) - set(SEED_MISTAKES))
    if unknown:
        raise ValueError(f"unknown mistake {unknown}; choose from {list(SEED_MISTAKES)}")


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


# Each mistake's operation: the field of Operations it replaces, and by what.
BROKEN_OPERATIONS: dict[str, tuple[str, Callable[..., Any]]] = {
    SINUSOID_SWAPPED: ("positions", swapped_positions),
    SCORES_OVER_D_MODEL: ("score_scale", scores_over_d_model),
    SCORES_TIMES_D_HEAD: ("score_scale", scores_times_d_head),
    SPLIT_BARE_VIEW: ("split_heads", split_bare_view),
    MERGE_BARE_VIEW: ("merge_heads", merge_bare_view),
    LAYER_NORM_STD_EPS: ("layer_norm", unbiased_std_plus_eps),
    CROSS_QUERIES_FROM_MEMORY: ("cross_attention", queries_from_memory),
    MASK_INVERTED: ("attention_mask", inverted),
}


def operations(names: Iterable[str], base: Operations = PAPER) -> Operations:
    """``base`` with the named mistakes made (``PAPER`` itself when none is named).

    Both scale mistakes together multiply by ``√d_model`` (÷ √d_model replaces the width,
    × √d_head the division). Raises ``ValueError`` for an unknown name."""
    chosen = frozenset(names)
    check_mistake_names(chosen)
    changes: dict[str, Any] = dict(BROKEN_OPERATIONS[name] for name in chosen)
    if {SCORES_OVER_D_MODEL, SCORES_TIMES_D_HEAD} <= chosen:
        changes["score_scale"] = scores_times_d_model
    return replace(base, **changes) if changes else base


@dataclass(frozen=True)
class Mistake:
    """One seed text's mistake.

    Attributes:
        name: the short name (the key of :data:`MISTAKES`).
        seed: which seed text made it (``"004"``; several as ``"003, 004"``).
        origin: one sentence, where the mistake came from.
        why: one sentence, why it is wrong.
        requires: what a model needs for the mistake to change anything (``""``: any model).
        axes: per attention kind (``""``: every kind), what the broken pass's rows and columns
            hold where they are no longer tokens.
        may_refuse: whether its pass cannot run on some inputs (the shapes clash), which is
            then what the mistake does, not a bad input.
    """

    name: str
    seed: str
    origin: str
    why: str
    requires: str
    _applies: Callable[[ModelConfig], bool]
    axes: tuple[tuple[str, str], ...] = ()
    may_refuse: bool = False

    def applies(self, config: ModelConfig) -> bool:
        """Whether switching this mistake on changes a model of this configuration."""
        return self._applies(config)


def _always(config: ModelConfig) -> bool:
    return True


def _several_heads(config: ModelConfig) -> bool:
    # With one head d_head = d_model and the bare view cuts nothing: the same formula.
    return config.n_heads > 1


MISTAKES: dict[str, Mistake] = {
    m.name: m
    for m in (
        Mistake(
            SINUSOID_SWAPPED,
            "004",
            "Seed 004 writes the paper's formula, sin at even dimensions with base 10000, then "
            "fills `pe[:, 1::2]` with sin and `pe[:, 0::2]` with cos over `1000 ** (-2i/d)`.",
            "Each pair's sin and cos trade places and every wavelength is 10 times shorter, so "
            "the table is not the one the model was trained with (or the paper's): positions "
            "far apart look alike sooner.",
            "sinusoidal positions",
            lambda config: config.positional == "sinusoidal",
        ),
        Mistake(
            SCORES_OVER_D_MODEL,
            "002",
            "Seed 002 divides the scores by `math.sqrt(self.dim)`, the model width, in both its "
            "single-head and its multi-head attention.",
            "Each head's dot product sums d_head products, so its spread grows with √d_head: "
            "dividing by √d_model shrinks the scores √h times too much and flattens the softmax.",
            "more than one head",
            _several_heads,
        ),
        Mistake(
            SCORES_TIMES_D_HEAD,
            "004",
            "Seed 004 sets `scaling = head_size ** 0.5` and multiplies the scores by it.",
            "Multiplying by √d_head instead of dividing makes the scores d_head times too large, "
            "so the softmax saturates: nearly all weight goes to one key and gradients vanish.",
            "",
            _always,
        ),
        Mistake(
            SPLIT_BARE_VIEW,
            "003",
            "Seed 003 splits heads with `key.view(batch_size * num_heads, -1, dim_per_head)` "
            "straight from the (batch, length, d_model) projection.",
            "A view keeps memory order, so the first head gets the first T/h tokens cut into h "
            "pieces, the next head the next T/h tokens, and so on: each head mixes pieces of a "
            "few tokens instead of seeing its slice of every token (the correct split views "
            "(B, T, h, d_head), then transposes).",
            "more than one head",
            _several_heads,
            axes=(("", "rows, columns: pieces of tokens"),),
        ),
        Mistake(
            MERGE_BARE_VIEW,
            "003",
            "Seed 003 merges heads back with `context.view(batch_size, -1, dim_per_head * "
            "num_heads)` straight from (batch·heads, length, d_head).",
            "Without the transpose back to (B, T, h, d_head), a merged 'token' holds h "
            "consecutive positions of one head instead of every head's output for one token, "
            "so the output projection mixes positions.",
            "more than one head",
            _several_heads,
        ),
        Mistake(
            LAYER_NORM_STD_EPS,
            "004",
            "Seed 004's LayerNorm computes `x.std(dim=-1)` (unbiased, divides by n − 1) and "
            "divides by `std + eps`.",
            "LayerNorm divides by √(biased variance + eps), as the model was trained: the "
            "unbiased std makes every normalised vector √((n−1)/n) times too small and moves "
            "eps out of the root; with hundreds of dimensions that is a small change, which is "
            "why such a bug can go unnoticed.",
            "LayerNorm (RMSNorm subtracts no mean and has no bias)",
            lambda config: config.norm_kind != "rms",
        ),
        Mistake(
            CROSS_QUERIES_FROM_MEMORY,
            "004",
            "Seed 004's decoder layer calls `cross_attn(q=memory, k=memory, v=x)`: queries and "
            "keys from the encoder's memory, values from the decoder.",
            "Cross-attention asks with the decoder's tokens (queries from x) and reads the "
            "source (keys and values from the memory); this asks the source about itself and "
            "reads target vectors by source position, which only has the right shape when both "
            "are equally long.",
            "an encoder and a decoder",
            lambda config: config.has_encoder and config.has_decoder,
            axes=(("cross", "rows: source positions"),),
            may_refuse=True,
        ),
        Mistake(
            MASK_INVERTED,
            "003, 004",
            "Seeds 003 and 004 build masks with True = masked out (`seq_k.eq(0)`, "
            "`masked_fill_(mask, -inf)`, torch.nn's convention), seed 002 with 1 = real token, "
            "and `F.scaled_dot_product_attention` reads True = may attend: one text's mask in "
            "another's code is inverted.",
            "Inverted, the padding mask lets queries read only [PAD] keys and the causal mask "
            "lets them read only the future; a query whose every key is masked receives "
            "nothing (the seeds' -inf fill would give NaN).",
            "",
            _always,
        ),
    )
}
assert tuple(MISTAKES) == SEED_MISTAKES, "every switch of the model is described here, in order"


def check_mistakes(
    names: Sequence[str] | frozenset[str], config: ModelConfig | None = None
) -> None:
    """Raise ``ValueError`` for an unknown name (naming the valid ones) or, with ``config``,
    for a mistake that does not apply to that model (saying what it needs)."""
    check_mistake_names(names)
    if config is None:
        return
    for name in names:
        mistake = MISTAKES[name]
        if not mistake.applies(config):
            raise ValueError(
                f"the mistake {name!r} does not apply to this {config.architecture} model: it "
                f"needs {mistake.requires}"
            )


def applicable(config: ModelConfig) -> list[str]:
    """The names of the mistakes that change a model of this configuration, in seed order."""
    return [name for name, mistake in MISTAKES.items() if mistake.applies(config)]


__all__ = [
    "BROKEN_OPERATIONS",
    "CROSS_QUERIES_FROM_MEMORY",
    "LAYER_NORM_STD_EPS",
    "MASK_INVERTED",
    "MERGE_BARE_VIEW",
    "MISTAKES",
    "SCORES_OVER_D_MODEL",
    "SCORES_TIMES_D_HEAD",
    "SEED_MISTAKES",
    "SINUSOID_SWAPPED",
    "SPLIT_BARE_VIEW",
    "Mistake",
    "applicable",
    "check_mistake_names",
    "check_mistakes",
    "cross_shape_error",
    "operations",
]
