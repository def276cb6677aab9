"""Every teaching switch as one kind of record: the what-ifs, the seeds' mistakes and the silent
mistakes, in one catalogue a reader can print, and the one function that turns switches into the
operations of a pass.

A :class:`~transformer.lab.switch.Switch` says what a learner reads (``label``), why it matters
(``explanation``), where it applies (``applies(config)``, and ``requires`` in words) and what it
changes: the fields of :class:`~transformer.core.operations.Operations` it replaces
(``changes``). :func:`operations` makes the :class:`Operations` of any switches on at once, of any
family. Code that shows or runs a switch holds the record and reads these attributes, never its
label; a label from a page or a link is turned into its record once, where it arrives
(:func:`by_label`, :func:`what_ifs`):

    >>> from transformer import Call
    >>> from transformer.lab.switches import by_label, catalogue, operations
    >>> print(catalogue())
    >>> leaky = operations([by_label("causal mask off")])
    >>> logits = model(tgt=tgt, call=Call(ops=leaky))

The broken computations live beside their records: :mod:`transformer.lab.mistakes` (the
seeds') and :mod:`transformer.lab.silent_mistakes` (the modern block's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from ..core.config import ModelConfig
from ..core.operations import PAPER, Operations
from .mistakes import BOTH_SCALES, SEED_MISTAKES
from .silent_mistakes import SILENT_MISTAKES
from .switch import SEED_MISTAKE, SILENT_MISTAKE, WHAT_IF, Family, Head, Switch


def no_positions(positional: nn.Module, length: int, offset: int) -> Tensor:
    """``(length, d_model)`` zeros in place of the positional encodings: word order is lost."""
    return torch.zeros_like(positional(length, offset))


def unscaled(d_head: int, n_heads: int) -> float:
    """The attention scores left unscaled (no ``1/√d_k``)."""
    return 1.0


def _has_decoder(config: ModelConfig) -> bool:
    return config.has_decoder


def _rotary(config: ModelConfig) -> bool:
    return config.positional == "rotary"


CAUSAL_MASK_OFF = Switch(
    "causal_mask_off",
    "causal mask off",
    WHAT_IF,
    "The decoder's queries may read the tokens after them: the future leaks into every prediction.",
    "a decoder (an encoder-only model has no causal mask to take off)",
    applies_to=_has_decoder,
    changes={"causal_mask": False},
)
PADDING_MASK_OFF = Switch(
    "padding_mask_off",
    "padding mask off",
    WHAT_IF,
    "Queries may read the [PAD] keys of a shorter sentence, which carry nothing of it.",
    changes={"padding_mask": False},
)
NO_SCALING = Switch(
    "no_scaling",
    "no √d scaling",
    WHAT_IF,
    "The scores are not divided by √d_k: they grow with the head's width and the softmax "
    "turns almost one-hot.",
    changes={"score_scale": unscaled},
)
NO_POSITIONAL_ENCODING = Switch(
    "no_positional_encoding",
    "no positional encoding",
    WHAT_IF,
    "Nothing about position is added to the embeddings: the model sees a bag of words.",
    changes={"positions": no_positions},
    idle_on=_rotary,
    idle_note=(
        "This model adds **no** positional encoding to switch off: its positions are "
        "rotary (q and k are rotated inside attention), which this what-if leaves on, so "
        "it changes nothing here."
    ),
)
ZERO_HEAD = Switch(
    "zero_head",
    "zero this head",
    WHAT_IF,
    "The chosen head's output is multiplied by 0: its weights are still computed, but it "
    "passes nothing on.",
    per_head=True,
)
WHAT_IFS: tuple[Switch, ...] = (
    CAUSAL_MASK_OFF,
    PADDING_MASK_OFF,
    NO_SCALING,
    NO_POSITIONAL_ENCODING,
    ZERO_HEAD,
)

# The catalogue: the what-ifs, then the seeds' mistakes in seed order, then the silent ones.
SWITCHES: tuple[Switch, ...] = (*WHAT_IFS, *SEED_MISTAKES, *SILENT_MISTAKES)
assert len({s.name for s in SWITCHES}) == len({s.label for s in SWITCHES}) == len(SWITCHES), (
    "every switch has its own name and its own label"
)

# Where several switches replace the same operation, the later family wins: a what-if over a
# mistake of the same operation ("no √d scaling" over "scores × √d_head"), as a learner who
# ticks it expects.
_FAMILY_ORDER: dict[Family, int] = {SEED_MISTAKE: 0, SILENT_MISTAKE: 1, WHAT_IF: 2}
_PLACE = {switch: place for place, switch in enumerate(SWITCHES)}


def operations(
    chosen: Iterable[Switch], heads: Iterable[Head] = (), base: Operations = PAPER
) -> Operations:
    """The :class:`Operations` of a pass with the switches ``chosen`` on (any families, at
    once): ``base`` with each switch's :attr:`~Switch.changes` made, ``base`` itself when none
    changes anything. This is the one way from switches to a computation.

    ``heads``: the ``(kind, layer, head)`` triples, 0-based, a :attr:`~Switch.per_head` switch
    ("zero this head") acts on; ``ValueError`` when one is on and no head is given. Both scale
    mistakes of the seeds at once multiply the scores by ``√d_model``; a what-if wins over a
    mistake of the same operation."""
    on = sorted(
        set(chosen), key=lambda s: (_FAMILY_ORDER[s.family], _PLACE.get(s, len(_PLACE)), s.name)
    )
    changes: dict[str, Any] = {}
    mistakes = [switch for switch in on if switch.family != WHAT_IF]
    for switch in mistakes:
        changes.update(switch.changes)
    together, made = BOTH_SCALES
    if together <= set(mistakes):
        changes.update(made)
    for switch in on:
        if switch.family == WHAT_IF:
            changes.update(switch.changes)
        if switch.per_head:
            zeroed = frozenset(heads)
            if not zeroed:
                raise ValueError(f"{switch.label!r} needs the (kind, layer, head) to switch off")
            changes["zero_heads"] = zeroed
    return replace(base, **changes) if changes else base


def family(kind: Family) -> tuple[Switch, ...]:
    """The switches of one family, in catalogue order."""
    return tuple(switch for switch in SWITCHES if switch.family == kind)


def by_label(label: str, kind: Family | None = None) -> Switch:
    """The switch a menu's ``label`` names (of the family ``kind``, when given); ``ValueError``
    naming the valid labels otherwise. For where a label arrives (a page, a link, a notebook):
    code past that point holds the record."""
    candidates = SWITCHES if kind is None else family(kind)
    for switch in candidates:
        if switch.label == label:
            return switch
    what = "switch" if kind is None else kind
    raise ValueError(f"unknown {what} {label!r}; choose from {[s.label for s in candidates]}")


def what_ifs(labels: Iterable[str]) -> tuple[Switch, ...]:
    """The what-if switches named by ``labels`` (a menu's ticked values), each once, in the
    order given; ``ValueError`` naming the valid ones for an unknown label."""
    known = {switch.label: switch for switch in WHAT_IFS}
    chosen = list(dict.fromkeys(labels))
    unknown = [label for label in chosen if label not in known]
    if unknown:
        raise ValueError(f"unknown what-if {sorted(unknown)}; choose from {list(known)}")
    return tuple(known[label] for label in chosen)


def applicable(config: ModelConfig, kind: Family | None = None) -> tuple[Switch, ...]:
    """The switches (of ``kind``, when given) that change a model of ``config``, in catalogue
    order: each one's :meth:`~Switch.applies`."""
    candidates = SWITCHES if kind is None else family(kind)
    return tuple(switch for switch in candidates if switch.applies(config))


def check_applies(switch: Switch, config: ModelConfig) -> None:
    """``ValueError`` saying what ``switch`` needs when it does not apply to ``config``."""
    if not switch.applies(config):
        raise ValueError(
            f"the {switch.family} {switch.label!r} does not apply to this "
            f"{config.architecture} model: it needs {switch.requires}"
        )


def catalogue() -> str:
    """The whole catalogue as text, one switch a line: family, label, needs, explanation."""
    return "\n".join(str(switch) for switch in SWITCHES)


__all__ = [
    "CAUSAL_MASK_OFF",
    "NO_POSITIONAL_ENCODING",
    "NO_SCALING",
    "PADDING_MASK_OFF",
    "SEED_MISTAKE",
    "SEED_MISTAKES",
    "SILENT_MISTAKE",
    "SILENT_MISTAKES",
    "SWITCHES",
    "WHAT_IF",
    "WHAT_IFS",
    "ZERO_HEAD",
    "Family",
    "Head",
    "Switch",
    "applicable",
    "by_label",
    "catalogue",
    "check_applies",
    "family",
    "no_positions",
    "operations",
    "unscaled",
    "what_ifs",
]
