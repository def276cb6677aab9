"""The record every teaching switch is: a what-if, a seed's mistake or a silent mistake.

This module holds the record type alone, so that the modules defining switches beside their
broken computations (:mod:`transformer.lab.mistakes`, :mod:`transformer.lab.silent_mistakes`)
and the catalogue that gathers them (:mod:`transformer.lab.switches`, which also turns a set of
switches into the :class:`~transformer.core.operations.Operations` of one pass) can all import
it without importing each other.

A switch is known by the record itself, never by its label: two records with the same label
are two switches (``eq=False``: equality and hashing are identity). A label read from a page or
a link is turned into its record once, where it arrives (:func:`transformer.lab.switches.by_label`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.config import ModelConfig
from ..core.trace import AttentionKind

Family = Literal["what-if", "seed mistake", "silent mistake"]
WHAT_IF: Family = "what-if"
SEED_MISTAKE: Family = "seed mistake"
SILENT_MISTAKE: Family = "silent mistake"

Head = tuple[AttentionKind, int, int]


def always(config: ModelConfig) -> bool:
    """Applies to every model."""
    return True


def never(config: ModelConfig) -> bool:
    """Idle on no model."""
    return False


@dataclass(frozen=True, eq=False)
class Switch:
    """One teaching switch.

    Attributes:
        name: a short identifier (``"causal_mask_off"``), for code and links.
        label: what a student reads in the menus (``"causal mask off"``); unique in the
            catalogue, but never how code tells switches apart (the record is).
        family: ``"what-if"``, ``"seed mistake"`` or ``"silent mistake"``.
        explanation: what it does and why it matters (for a seed's mistake: why it is wrong),
            in a sentence or two.
        requires: what a model needs for the switch to change anything, in words (``""``: any).
        applies_to: the same as a predicate on :class:`ModelConfig` (see :meth:`applies`).
        changes: the :class:`~transformer.core.operations.Operations` fields it replaces, and
            by what (:func:`transformer.lab.switches.operations` makes them).
        per_head: whether it acts on chosen heads (``(kind, layer, head)``), which the pass
            must be given.
        idle_on: a model on which it is offered but changes nothing (say so: ``idle_note``).
        idle_note: the sentence a learner reads there.
        axes: per attention kind (``""``: every kind), what a view of the changed pass holds
            on its rows and columns where they are no longer tokens (see :meth:`axes_note`).
        may_refuse: whether the changed pass cannot run on some inputs (the shapes clash),
            which is then what the switch does, not a bad input.
        seed: a seed's mistake: which seed text made it (``"004"``; several as
            ``"003, 004"``); ``""`` otherwise.
        origin: a seed's mistake: one sentence, where it came from (the seed's code).
    """

    name: str
    label: str
    family: Family
    explanation: str
    requires: str = ""
    applies_to: Callable[[ModelConfig], bool] = field(default=always, repr=False)
    changes: Mapping[str, Any] = field(default_factory=dict, repr=False)
    per_head: bool = False
    idle_on: Callable[[ModelConfig], bool] = field(default=never, repr=False)
    idle_note: str = field(default="", repr=False)
    axes: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    may_refuse: bool = False
    seed: str = ""
    origin: str = field(default="", repr=False)

    def applies(self, config: ModelConfig) -> bool:
        """Whether switching this on changes a model of ``config``."""
        return self.applies_to(config)

    def idle_here(self, config: ModelConfig) -> bool:
        """Whether this switch is offered for ``config`` yet changes nothing there
        (:attr:`idle_note` says why)."""
        return self.idle_on(config)

    def axes_note(self, kind: AttentionKind) -> str:
        """What a view of ``kind`` attention holds on its axes with this switch on, where they
        are no longer tokens (``""`` where they still are)."""
        return next((note for on, note in self.axes if on in ("", kind)), "")

    def __str__(self) -> str:
        needs = f" (needs {self.requires})" if self.requires else ""
        origin = f"{self.origin} " if self.origin else ""
        return f"{self.family}: {self.label}{needs}. {origin}{self.explanation}"


__all__ = [
    "SEED_MISTAKE",
    "SILENT_MISTAKE",
    "WHAT_IF",
    "Family",
    "Head",
    "Switch",
    "always",
    "never",
]
