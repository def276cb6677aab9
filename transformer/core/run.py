"""One forward call: the operations it runs and what it keeps.

A :class:`Call` is what a caller asks of one forward (``model(src, tgt, call=...)``,
``model.encode(src, call=...)``, ``model.decode(tgt, encoded, call=...)``): two things that
change for different reasons, the :class:`Operations` (what a what-if swaps) and the
:class:`Capture` policy (whether the pass keeps a trace, who observes its attention as it goes,
whether the trace keeps the attention weights). It is immutable, so one may serve every request.

From it the model makes a fresh :class:`Run` for each pass, handed to every stack, layer and
attention as one argument and never stored on a module, so requests that share one model
cannot see each other's choice. While a traced pass runs, each attention and residual
connection leaves what the trace needs in the run (:meth:`Run.keep_probe`,
:meth:`Run.keep_for_trace`), and each layer builds its record from it at the end
(:mod:`transformer.core.stacks`): the recording stands beside the computation.

    >>> model(tgt=ids, call=TRACE)  # a Trace of every step
    >>> model(tgt=ids, call=Call(ops=replace(PAPER, causal_mask=False)))  # logits of a what-if
    >>> model(tgt=ids, call=Call(capture=Capture(keep_attention_weights=False)))  # a Trace, lighter
    >>> model(tgt=ids, call=Call(capture=Capture(trace=False, observe_attention=print)))  # logits
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from torch import Tensor

from .operations import PAPER, AttentionKind, Operations
from .records import AttentionProbe

if TYPE_CHECKING:
    from .layers import LayerNorm
    from .modern import RMSNorm


@dataclass
class LookInside:
    """What one layer's modules computed on their way, kept for Inside a layer.

    ``stack`` (``"encoder"`` or ``"decoder"``) and ``layer`` (from 0) name the layer; a pass
    whose :class:`Capture` carries this object fills ``kept``, keyed by the module that computed
    a tensor and a name (:meth:`Run.keep_for_inside`), with copies of what that layer's modules
    computed and of nothing else:

    - each attention: what it attends with, ``"queries"`` ``(B, H, Tq, d_head)`` and ``"keys"``
      ``(B, H_kv, Tk, d_head)`` (projected, QK-normed and rotated where the model does so, not
      yet scaled: before the rotation they are in the trace's rotary pair), ``"values"`` ``(B,
      H_kv, Tk, d_head)`` (before any expansion to the query heads), ``"heads"`` ``(B, H, Tq,
      d_head)`` (each head's weighted values) and ``"output"`` ``(B, Tq, d_model)`` (after W_O);
    - each norm (:class:`~transformer.core.layers.LayerNorm`,
      :class:`~transformer.core.modern.RMSNorm`: a residual's, a QK-norm): its ``"input"`` and
      ``"output"``, of the shape it normalises (a QK-norm's input is q or k before the norm);
    - the position-wise feed-forward: ``"hidden"`` ``x·W₁ + b₁`` and ``"activated"`` (after the
      activation), each ``(B, T, d_ff)``; the gated one: ``"gate_in"`` ``x·W_gate``, ``"gate"``
      (activated), ``"up"`` ``x·W_up`` and ``"units"`` (gate ⊙ up), each ``(B, T, d_ff)``.

    A pass without one keeps none of these. Make one per call.
    """

    stack: str
    layer: int
    kept: dict[tuple[Any, str], Tensor] = field(default_factory=dict)

    def get(self, module: Any, name: str) -> Tensor:
        """What ``module`` kept as ``name``; ``KeyError`` naming what it kept, where it kept
        none (a module of another layer, or a pass that did not look inside)."""
        try:
            return self.kept[(module, name)]
        except KeyError:
            names = sorted(n for m, n in self.kept if m is module)
            raise KeyError(
                f"{type(module).__name__} kept no {name!r} in {self.stack} layer {self.layer} "
                f"(it kept {names or 'nothing'})"
            ) from None


@dataclass(frozen=True)
class Capture:
    """What a pass keeps besides its output (the capture policy).

    Attributes:
        trace: keep a :class:`~transformer.core.trace.Trace` of every intermediate.
        keep_attention_weights: whether the trace keeps every layer's ``(B, H, Tq, Tk)``
            weights (``True``: what ``output_attentions`` returns) or computes them again when
            read, the same numbers from the kept queries and keys (``False``: the app's
            analyses; SmolLM2's trace at 512 tokens then holds 283 MB less, and its pass frees
            each layer's weights once the layer has used them).
        observe_attention: ``(probe, kind, layer)`` called with every attention call's
            :class:`~transformer.core.records.AttentionProbe` as the pass goes, so that a reader
            can reduce each layer's ``(B, H, Tq, Tk)`` weights (to statistics, one head) before
            the next layer computes its own; the pass then writes attention out even without a
            trace. ``None``: nobody observes.
        inside: one layer whose modules also keep what they computed on their way (its
            attentions' values, heads and output, its norms' inputs and outputs, its
            feed-forward's hidden units: :class:`LookInside`), so that Inside a layer shows the
            pass's own numbers.
    """

    trace: bool = True
    keep_attention_weights: bool = True
    observe_attention: Callable[[AttentionProbe, AttentionKind | None, int], None] | None = None
    inside: LookInside | None = None


NO_CAPTURE = Capture(trace=False)
"""Keep nothing, observe nothing: the fast path (``F.scaled_dot_product_attention``)."""


@dataclass(frozen=True)
class Call:
    """What one forward call runs and keeps: the only per-call argument of the model's
    forwards (``call=``).

    Attributes:
        ops: the operations of the pass (:data:`~transformer.core.operations.PAPER`, or a
            what-if's: :attr:`~transformer.lab.interventions.Intervention.operations`).
        capture: what the pass keeps besides its output; a :class:`Capture` that traces makes
            the model return a :class:`~transformer.core.trace.Trace` instead of logits.
    """

    ops: Operations = PAPER
    capture: Capture = NO_CAPTURE

    def __post_init__(self) -> None:
        if not isinstance(self.ops, Operations):
            raise TypeError(
                f"ops must be an Operations (PAPER, or an Intervention's .operations), got "
                f"{type(self.ops).__name__}"
            )
        if not isinstance(self.capture, Capture):
            raise TypeError(
                f"capture must be a Capture (Capture() keeps a trace; TRACE is a Call that "
                f"does), got {self.capture!r}"
            )

    def run(self) -> Run:
        """A fresh :class:`Run` of this call, for one pass."""
        return Run(ops=self.ops, capture=self.capture)


LOGITS = Call()
"""The paper's operations, nothing kept: what a forward computes unless told otherwise."""

TRACE = Call(capture=Capture())
"""The paper's operations, every intermediate kept: the model returns a Trace."""


class Sited(Protocol):
    """An attention module, as the run sees it: where it sits in the model."""

    kind: AttentionKind | None
    layer: int


@dataclass(frozen=True)
class Run:
    """One pass of a :class:`Call`: its operations and capture policy, and what the pass keeps
    on its way; made fresh for each pass (:meth:`Call.run`), never shared between passes.

    Its verbs say where what they keep goes:

    - into the trace, only where the pass keeps one: :meth:`keep_probe` (an attention call's
      probe and mask, handed to the observer too), :meth:`keep_for_trace` (what any other module
      computed for its layer's record: a residual's update and stream); :meth:`kept_probe` reads
      an attention's probe back, :meth:`take_kept` takes a module's entry out for its layer's
      record;
    - into Inside a layer, only where the capture looks inside the module's layer:
      :meth:`keep_for_inside` (copies of named tensors).

    ``kept`` holds, while a traced pass runs, the trace's entries, keyed by the module; a layer
    takes its entries out when it builds its record. ``looking``: this is the run a layer hands
    its modules where the capture looks inside that layer (:meth:`within`); only there does
    :meth:`keep_for_inside` keep anything.
    """

    ops: Operations = PAPER
    capture: Capture = NO_CAPTURE
    kept: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    looking: bool = False

    @property
    def traced(self) -> bool:
        """Whether this pass keeps a trace."""
        return self.capture.trace

    @property
    def writes_attention_out(self) -> bool:
        """Whether attention runs written out (a trace or an observer reads its weights)."""
        return self.capture.trace or self.capture.observe_attention is not None

    def keep_probe(self, attention: Sited, probe: AttentionProbe, mask: Tensor | None) -> None:
        """Hand one attention call's probe to the observer, and keep it and the ``(B, 1, Tq,
        Tk)``-broadcastable mask it read for the trace (only when traced)."""
        if self.capture.observe_attention is not None:
            self.capture.observe_attention(probe, attention.kind, attention.layer)
        self.keep_for_trace(attention, (probe, mask))

    def keep_for_trace(self, module: Any, what: Any) -> None:
        """Keep ``what`` a module computed for its layer's record (only when traced)."""
        if self.capture.trace:
            self.kept[module] = what

    def within(self, stack: str, layer: int) -> Run:
        """The run ``stack``'s layer ``layer`` hands its modules: this one, or where the
        capture looks inside that layer (:class:`LookInside`) the same run marked
        :attr:`looking` (its operations, capture and kept records shared)."""
        inside = self.capture.inside
        if inside is None or inside.stack != stack or inside.layer != layer:
            return self
        return replace(self, looking=True)

    def keep_for_inside(self, module: Any, **tensors: Tensor) -> None:
        """Keep each of ``tensors`` by ``module`` and its name where this pass looks inside the
        module's layer (:meth:`within`; a copy: the pass may go on to write into its own
        buffers); else nothing."""
        if not self.looking:
            return
        inside = self.capture.inside
        assert inside is not None  # only a run that looks inside is marked looking
        for name, tensor in tensors.items():
            inside.kept[(module, name)] = tensor.detach().clone()

    def normalise(self, norm: LayerNorm | RMSNorm, x: Tensor) -> Tensor:
        """``norm`` of the ``(..., d)`` ``x`` as this run computes it (``ops.layer_norm``: the
        paper's, or a what-if's), its input and output kept for Inside a layer
        (:meth:`keep_for_inside`: only where the run looks inside the norm's layer)."""
        out = self.ops.layer_norm(norm, x)
        self.keep_for_inside(norm, input=x, output=out)
        return out

    def kept_probe(self, attention: Sited) -> AttentionProbe | None:
        """The probe ``attention`` kept for the trace in this run (:meth:`keep_probe`; ``None``
        if it kept none), left in the run."""
        kept = self.kept.get(attention)
        return None if kept is None else kept[0]

    def take_kept(self, module: Any) -> Any:
        """What ``module`` kept for the trace in this pass (:meth:`keep_probe`,
        :meth:`keep_for_trace`), removed from the run; ``None`` if nothing."""
        return self.kept.pop(module, None)


PLAIN = Run()
"""The paper's operations, nothing kept: what a forward runs unless told otherwise."""
