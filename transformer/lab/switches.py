"""Every teaching switch as one kind of record: the what-ifs, the seeds' mistakes and the silent
mistakes, in one catalogue a reader can print.

A :class:`Switch` says what a learner reads (``label``), why it matters (``explanation``), where
it applies (``applies(config)``, and ``requires`` in words) and what it changes: the fields of an
:class:`~transformer.lab.interventions.Intervention` it sets (``sets``), or, for a silent mistake,
which no Intervention names, the fields of :class:`~transformer.core.operations.Operations` it
replaces (``replaces``). Code that shows or runs a switch reads these attributes, never its label:

    >>> from transformer.lab.switches import SWITCHES, by_label
    >>> print("\\n".join(str(switch) for switch in SWITCHES))
    >>> by_label("causal mask off").intervention()
    Intervention(causal_mask=False, ...)

The broken computations themselves live beside their texts: :mod:`transformer.lab.mistakes`
(the seeds') and :mod:`transformer.lab.silent_mistakes` (the modern block's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.config import ModelConfig
from ..core.operations import Operations
from ..core.trace import AttentionKind
from .interventions import Intervention
from .mistakes import MISTAKES
from .silent_mistakes import SILENT_MISTAKES, silent_operations

Family = Literal["what-if", "seed mistake", "silent mistake"]
WHAT_IF: Family = "what-if"
SEED_MISTAKE: Family = "seed mistake"
SILENT_MISTAKE: Family = "silent mistake"

Head = tuple[AttentionKind, int, int]


def _always(config: ModelConfig) -> bool:
    return True


def _never(config: ModelConfig) -> bool:
    return False


@dataclass(frozen=True)
class Switch:
    """One teaching switch.

    Attributes:
        name: a short identifier (``"causal_mask_off"``), for code and links.
        label: what a student reads in the menus (``"causal mask off"``); unique in the
            catalogue.
        family: ``"what-if"``, ``"seed mistake"`` or ``"silent mistake"``.
        explanation: what it does and why it matters, in a sentence or two.
        requires: what a model needs for the switch to change anything, in words (``""``: any).
        applies_to: the same as a predicate on :class:`ModelConfig` (see :meth:`applies`).
        sets: the :class:`Intervention` fields it sets (what-ifs, the seeds' mistakes).
        replaces: the :class:`Operations` fields it replaces (the silent mistakes).
        per_head: whether it acts on one head, which :meth:`intervention` must be given.
        idle_on: a model on which it is offered but changes nothing (say so: ``idle_note``).
        idle_note: the sentence a learner reads there.
        axes: per attention kind (``""``: every kind), what a view of the changed pass holds
            on its rows and columns where they are no longer tokens (see :meth:`axes_note`).
        may_refuse: whether the changed pass cannot run on some inputs (the shapes clash),
            which is then what the switch does, not a bad input.
    """

    name: str
    label: str
    family: Family
    explanation: str
    requires: str = ""
    applies_to: Callable[[ModelConfig], bool] = field(default=_always, repr=False)
    sets: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    replaces: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    per_head: bool = False
    idle_on: Callable[[ModelConfig], bool] = field(default=_never, repr=False)
    idle_note: str = field(default="", repr=False)
    axes: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    may_refuse: bool = False

    def axes_note(self, kind: AttentionKind) -> str:
        """What a view of ``kind`` attention holds on its axes with this switch on, where they
        are no longer tokens (``""`` where they still are)."""
        return next((note for on, note in self.axes if on in ("", kind)), "")

    def applies(self, config: ModelConfig) -> bool:
        """Whether switching this on changes a model of ``config``."""
        return self.applies_to(config)

    def idle_here(self, config: ModelConfig) -> bool:
        """Whether this switch is offered for ``config`` yet changes nothing there
        (:attr:`idle_note` says why)."""
        return self.idle_on(config)

    def intervention(self, head: Head | None = None) -> Intervention:
        """The :class:`Intervention` this switch sets (``head``: the ``(kind, layer, head)``,
        0-based, of a :attr:`per_head` switch); ``ValueError`` for a silent mistake, which
        changes operations no Intervention names (use :meth:`operations`)."""
        return combined([self], head)

    def operations(self, head: Head | None = None) -> Operations:
        """The :class:`Operations` of a pass with this switch on (and nothing else)."""
        if self.replaces:
            return silent_operations(self.label)
        return self.intervention(head).operations

    def __str__(self) -> str:
        needs = f" (needs {self.requires})" if self.requires else ""
        return f"{self.family}: {self.label}{needs}. {self.explanation}"


def combined(switches: Iterable[Switch], head: Head | None = None) -> Intervention:
    """The one :class:`Intervention` of several switches on at once (what-ifs and seeds'
    mistakes; each sets its own fields, and the mistakes add up). ``head`` is the
    ``(kind, layer, head)`` a :attr:`~Switch.per_head` switch acts on."""
    fields: dict[str, Any] = {}
    for switch in switches:
        if switch.replaces:
            raise ValueError(
                f"{switch.label!r} is a silent mistake: it replaces operations that no "
                "Intervention names; use its operations()"
            )
        for key, value in switch.sets.items():
            fields[key] = fields.get(key, frozenset()) | value if key == "mistakes" else value
        if switch.per_head:
            if head is None:
                raise ValueError(f"{switch.label!r} needs the (kind, layer, head) to switch off")
            fields["zero_heads"] = frozenset({head})
    return Intervention(**fields)


def _identifier(label: str) -> str:
    """``"scores ÷ √d_model"`` → ``"scores_d_model"``: a label's words, for code and links."""
    return "_".join("".join(c if c.isalnum() else " " for c in label).split()).lower()


def _has_decoder(config: ModelConfig) -> bool:
    return config.has_decoder


def _rotary(config: ModelConfig) -> bool:
    return config.positional == "rotary"


WHAT_IFS: tuple[Switch, ...] = (
    Switch(
        "causal_mask_off",
        "causal mask off",
        WHAT_IF,
        "The decoder's queries may read the tokens after them: the future leaks into every "
        "prediction.",
        "a decoder (an encoder-only model has no causal mask to take off)",
        applies_to=_has_decoder,
        sets={"causal_mask": False},
    ),
    Switch(
        "padding_mask_off",
        "padding mask off",
        WHAT_IF,
        "Queries may read the [PAD] keys of a shorter sentence, which carry nothing of it.",
        sets={"padding_mask": False},
    ),
    Switch(
        "no_scaling",
        "no √d scaling",
        WHAT_IF,
        "The scores are not divided by √d_k: they grow with the head's width and the softmax "
        "turns almost one-hot.",
        sets={"scale_scores": False},
    ),
    Switch(
        "no_positional_encoding",
        "no positional encoding",
        WHAT_IF,
        "Nothing about position is added to the embeddings: the model sees a bag of words.",
        sets={"positional_encoding": False},
        idle_on=_rotary,
        idle_note=(
            "This model adds **no** positional encoding to switch off: its positions are "
            "rotary (q and k are rotated inside attention), which this what-if leaves on, so "
            "it changes nothing here."
        ),
    ),
    Switch(
        "zero_head",
        "zero this head",
        WHAT_IF,
        "The chosen head's output is multiplied by 0: its weights are still computed, but it "
        "passes nothing on.",
        per_head=True,
    ),
)

SEED_MISTAKE_SWITCHES: tuple[Switch, ...] = tuple(
    Switch(
        _identifier(mistake.name),
        mistake.name,
        SEED_MISTAKE,
        f"{mistake.origin} {mistake.why}",
        mistake.requires,
        applies_to=mistake.applies,
        sets={"mistakes": frozenset({mistake.name})},
        axes=mistake.axes,
        may_refuse=mistake.may_refuse,
    )
    for mistake in MISTAKES.values()
)

SILENT_MISTAKE_SWITCHES: tuple[Switch, ...] = tuple(
    Switch(
        _identifier(silent.name),
        silent.name,
        SILENT_MISTAKE,
        silent.why,
        silent.requires,
        applies_to=silent.applies,
        replaces=silent.changes,
    )
    for silent in SILENT_MISTAKES.values()
)

# The catalogue: the what-ifs, then the seeds' mistakes in seed order, then the silent ones.
SWITCHES: tuple[Switch, ...] = (*WHAT_IFS, *SEED_MISTAKE_SWITCHES, *SILENT_MISTAKE_SWITCHES)
assert len({s.name for s in SWITCHES}) == len({s.label for s in SWITCHES}) == len(SWITCHES), (
    "every switch has its own name and its own label"
)


def family(kind: Family) -> tuple[Switch, ...]:
    """The switches of one family, in catalogue order."""
    return tuple(switch for switch in SWITCHES if switch.family == kind)


def by_label(label: str, kind: Family | None = None) -> Switch:
    """The switch a menu's ``label`` names (of the family ``kind``, when given); ``ValueError``
    naming the valid labels otherwise."""
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
    """The switches (of ``kind``, when given) that change a model of ``config``."""
    candidates = SWITCHES if kind is None else family(kind)
    return tuple(switch for switch in candidates if switch.applies(config))


def catalogue() -> str:
    """The whole catalogue as text, one switch a line: family, label, needs, explanation."""
    return "\n".join(str(switch) for switch in SWITCHES)


__all__ = [
    "SEED_MISTAKE",
    "SEED_MISTAKE_SWITCHES",
    "SILENT_MISTAKE",
    "SILENT_MISTAKE_SWITCHES",
    "SWITCHES",
    "WHAT_IF",
    "WHAT_IFS",
    "Family",
    "Switch",
    "applicable",
    "by_label",
    "catalogue",
    "combined",
    "family",
    "what_ifs",
]
