"""What-if switches a learner sets, turned into the operations of one forward pass.

An :class:`Intervention` names what to change (the causal mask off, a head zeroed, a seed's
mistake made, ...); :attr:`Intervention.operations` is the
:class:`~transformer.core.operations.Operations` that does it, built once per intervention:

    >>> ops = Intervention(causal_mask=False).operations
    >>> trace = model(src, tgt, call=Call(ops=ops, capture=Capture()))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from ..core.operations import Operations
from ..core.trace import AttentionKind
from . import mistakes


def no_positions(positional: nn.Module, length: int, offset: int) -> Tensor:
    """``(length, d_model)`` zeros in place of the positional encodings: word order is lost."""
    return torch.zeros_like(positional(length, offset))


def unscaled(d_head: int, n_heads: int) -> float:
    """The attention scores left unscaled (no ``1/√d_k``)."""
    return 1.0


@dataclass(frozen=True)
class Intervention:
    """What-if switches that change a forward pass, for teaching (all off by default).

    Attributes:
        causal_mask: ``False`` lets the decoder see the future (to show the leak).
        padding_mask: ``False`` lets queries attend to padding.
        scale_scores: ``False`` drops the ``1/√d_k`` scaling of attention scores.
        positional_encoding: ``False`` adds no positional information (word order is lost).
        zero_heads: ``(kind, layer, head)`` triples whose output is switched off.
        mistakes: names of the seeds' mistakes to make (:data:`~transformer.lab.mistakes.SEED_MISTAKES`,
            described in :mod:`transformer.lab.mistakes`); an unknown name is a ``ValueError``. A
            mistake that does not apply to a model (sin/cos on learned positions,
            cross-attention without an encoder) changes nothing there. With a key/value cache
            the shape-dependent ones (bare views, inverted masks) act on each step's few
            positions, so incremental decoding differs from one full pass: the seeds had no
            cache. ``scale_scores=False`` and ``positional_encoding=False`` win over the
            mistakes of the same operation.
    """

    causal_mask: bool = True
    padding_mask: bool = True
    scale_scores: bool = True
    positional_encoding: bool = True
    zero_heads: frozenset[tuple[AttentionKind, int, int]] = frozenset()
    mistakes: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        names = self.mistakes
        if isinstance(names, str):  # one name given bare: not its characters
            names = (names,)
        if not isinstance(names, frozenset):
            object.__setattr__(self, "mistakes", frozenset(names))
        mistakes.check_mistake_names(self.mistakes)

    @functools.cached_property
    def operations(self) -> Operations:
        """The :class:`Operations` these switches ask for (:data:`~transformer.core.operations.PAPER` when none is set)."""
        ops = mistakes.operations(self.mistakes)
        changes: dict[str, Any] = {}
        if not self.causal_mask:
            changes["causal_mask"] = False
        if not self.padding_mask:
            changes["padding_mask"] = False
        if not self.scale_scores:
            changes["score_scale"] = unscaled
        if not self.positional_encoding:
            changes["positions"] = no_positions
        if self.zero_heads:
            changes["zero_heads"] = frozenset(self.zero_heads)
        return replace(ops, **changes) if changes else ops


NO_INTERVENTION = Intervention()
