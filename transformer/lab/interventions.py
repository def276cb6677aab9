"""What-if switches a learner sets, turned into the operations of one forward pass.

An :class:`Intervention` names what to change (the causal mask off, a head zeroed, a seed's
mistake made, ...); :attr:`Intervention.operations` is the
:class:`~transformer.core.operations.Operations` that does it, made once per intervention by the
catalogue's one route from switches to operations (:func:`transformer.lab.switches.operations`):

    >>> ops = Intervention(causal_mask=False).operations
    >>> trace = model(src, tgt, call=Call(ops=ops, capture=Capture()))
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.operations import Operations
from ..core.trace import AttentionKind
from . import switches
from .switch import Head, Switch

# The what-ifs that are fields of an Intervention, and those fields (each off: ``False``;
# "zero this head": the heads in ``zero_heads``).
WHAT_IF_FIELDS: dict[Switch, str] = {
    switches.CAUSAL_MASK_OFF: "causal_mask",
    switches.PADDING_MASK_OFF: "padding_mask",
    switches.NO_SCALING: "scale_scores",
    switches.NO_POSITIONAL_ENCODING: "positional_encoding",
    switches.ZERO_HEAD: "zero_heads",
}


@dataclass(frozen=True)
class Intervention:
    """What-if switches that change a forward pass, for teaching (all off by default).

    Attributes:
        causal_mask: ``False`` lets the decoder see the future (to show the leak).
        padding_mask: ``False`` lets queries attend to padding.
        scale_scores: ``False`` drops the ``1/√d_k`` scaling of attention scores.
        positional_encoding: ``False`` adds no positional information (word order is lost).
        zero_heads: ``(kind, layer, head)`` triples whose output is switched off.
        mistakes: the mistakes to make, as their :class:`~transformer.lab.switch.Switch`
            records (the seeds', :data:`~transformer.lab.mistakes.SEED_MISTAKES`, or the silent
            ones, :data:`~transformer.lab.silent_mistakes.SILENT_MISTAKES`); anything else, a
            label included, is a ``ValueError`` (a label becomes its record where it arrives:
            :func:`~transformer.lab.switches.by_label`). A mistake that does not apply to a
            model (sin/cos on learned positions, cross-attention without an encoder) changes
            nothing there. With a key/value cache the shape-dependent ones (bare views,
            inverted masks) act on each step's few positions, so incremental decoding differs
            from one full pass: the seeds had no cache. ``scale_scores=False`` and
            ``positional_encoding=False`` win over the mistakes of the same operation.
    """

    causal_mask: bool = True
    padding_mask: bool = True
    scale_scores: bool = True
    positional_encoding: bool = True
    zero_heads: frozenset[tuple[AttentionKind, int, int]] = frozenset()
    mistakes: frozenset[Switch] = frozenset()

    def __post_init__(self) -> None:
        given: Any = self.mistakes
        if isinstance(given, Switch | str):  # one given bare: not its characters
            given = (given,)
        records = frozenset(given)
        wrong = [m for m in records if not isinstance(m, Switch)]
        if wrong:
            raise ValueError(
                f"mistakes are switch records (transformer.lab.mistakes.SCORES_TIMES_D_HEAD, or "
                f"transformer.lab.switches.by_label(label)), not {sorted(map(repr, wrong))}"
            )
        object.__setattr__(self, "mistakes", records)

    @property
    def switches(self) -> frozenset[Switch]:
        """Every switch this intervention has on: its what-ifs' records and its mistakes."""
        off = {
            switch
            for switch, name in WHAT_IF_FIELDS.items()
            if (bool(self.zero_heads) if switch.per_head else not getattr(self, name))
        }
        return frozenset(off) | self.mistakes

    @functools.cached_property
    def operations(self) -> Operations:
        """The :class:`Operations` these switches ask for (:data:`~transformer.core.operations.PAPER` when none is set)."""
        return switches.operations(self.switches, self.zero_heads)


def combined(chosen: Iterable[Switch], head: Head | None = None) -> Intervention:
    """The one :class:`Intervention` of several switches on at once (each sets its own field;
    the mistakes add up). ``head`` is the ``(kind, layer, head)`` a
    :attr:`~transformer.lab.switch.Switch.per_head` switch acts on."""
    fields: dict[str, Any] = {}
    made: set[Switch] = set()
    for switch in chosen:
        if switch.per_head:
            if head is None:
                raise ValueError(f"{switch.label!r} needs the (kind, layer, head) to switch off")
            fields["zero_heads"] = frozenset({head})
        elif switch in WHAT_IF_FIELDS:
            fields[WHAT_IF_FIELDS[switch]] = False
        else:
            made.add(switch)
    return Intervention(**fields, mistakes=frozenset(made))


NO_INTERVENTION = Intervention()
