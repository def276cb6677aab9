"""Inside one layer, one query token at a time: every computation, its shape and its code line.

``walkthrough(model, analysis, stack, layer, head, query)`` follows one layer of the model's
own forward, in its order, and keeps for one query token and one head what each step computed:
the formula, the tensor's shape as the model computes it, the values, a short explanation, and
the line of ``transformer/`` that computes it.

The numbers come from the pass itself: the walkthrough runs the model on the analysis's tokens
with ``Capture(inside=LookInside(stack, layer))``, so the modules of that one layer keep what
they computed on their way (its attentions' queries, keys, values, each head's output and its
projection; each norm's input and output, the QK-norms' too; the feed-forward's hidden units,
before and after the activation, and a gated one's gate, up projection and product), and the
trace keeps its rotated queries and keys, scores, weights and every sub-layer's update and
output. Inside a layer reads those and calls none of the model's modules: what it computes
itself is only an explanatory split of them (the unscaled q·k before ÷√d_k, the exp before the
normalisation, the −∞ of masked scores, the rotation angles, a norm's mean and spread, the
concatenation of the heads). The cited line is a line of the function that
computes the step, found by the shape of its code (:mod:`transformer.lab.inside_citations`): an
edit elsewhere in a file does not move it, and an edit that removes it fails at import.
``inside_layer(model, tokenizer, text, ...)`` does the analysis of one sentence first::

    walk = inside_layer(model, tokenizer, "the cat sees a dog", "encoder", 0, 1, 2)
    for step in walk.steps:
        print(step.name, step.shape, step.code)

A Llama-family layer (``norm_kind="rms"``, ``positional="rotary"``, ``n_kv_heads``,
``feed_forward_kind="gated"``) shows its own steps: RMSNorm (``self.norm_in``, ``ff.norm_in``),
q and K before rotation (``self.q``, ``self.k``: K of the key/value head this query head
shares with its group), the rotation angles of the query's position (``self.angles``), q and K
after rotation (``self.q_rotated``, ``self.k_rotated``), then ``ff.gate_in``, the activated gate
(``ff.activation``), ``ff.up``, the unit activity SiLU(gate) ⊙ up (``ff.product``) and
``ff.project`` (W_down). A paper layer's steps are unchanged.

Layers, heads and tokens are counted from 0 here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor

from ..core import operations
from ..core import rotary as rotary_module
from ..core.attention import MultiHeadAttention
from ..core.config import ModelConfig
from ..core.layers import LayerNorm
from ..core.masks import one_pass
from ..core.model import Transformer
from ..core.modern import GatedFeedForward, RMSNorm, expand_kv_heads, soft_cap
from ..core.run import Capture, LookInside, Run
from ..core.stacks import DecoderLayer, Encoded, EncoderLayer, Residual
from ..core.trace import AttentionRecord, LayerTrace, StackInput
from ..core.util import eval_mode
from ..text.display import labels_of_pieces
from ..text.tokenization import Tokenizer
from .inside_citations import CODE, CodeLine
from .inspection import Analysis, analyse

SECTIONS: tuple[str, ...] = ("input", "self-attention", "cross-attention", "feed-forward")
_ACTIVATIONS = {
    "relu": ("ReLU(u) = max(0, u)", "sets every negative unit to exactly 0"),
    "gelu": ("GELU(u) = u·Φ(u)", "squashes every negative unit to between −0.17 and 0"),
    "gelu_tanh": (
        "GELU(u) ≈ ½u·(1 + tanh(√(2/π)·(u + 0.044715u³)))",
        "squashes every negative unit to between −0.17 and 0",
    ),
    "silu": ("SiLU(u) = u·σ(u)", "squashes every negative unit to between −0.28 and 0"),
}


@dataclass
class Step:
    """One computation of the layer, for the chosen query token (and head).

    Attributes:
        key: a stable id (``"self.q"``, ``"ff.hidden"``, ...).
        name: what it is, for a heading.
        section: one of :data:`SECTIONS`.
        formula: plain text with unicode math.
        shape: the whole tensor as the model computes it, e.g. ``"(B, H, T, d_head) = (1, 4, 9,
            16)"``.
        shown: which slice of it ``values`` are, with their shape.
        values: ``(n,)`` vector or ``(rows, n)`` matrix, float32 on the CPU.
        explanation: one or two sentences.
        code: the line that computes it.
        labels: key tokens of a per-key vector, or row labels of a matrix.
        off: ``(n,)`` bool, True where the step removed a cell: masked keys, switched-off units.
        notes: per-key reasons a key is masked (``""`` for an allowed key).
        highlight: ``(start, stop)`` columns of the chosen head in a concatenation.
    """

    key: str
    name: str
    section: str
    formula: str
    shape: str
    shown: str
    values: Tensor
    explanation: str
    code: CodeLine
    labels: list[str] | None = None
    off: Tensor | None = None
    notes: list[str] | None = None
    highlight: tuple[int, int] | None = None

    @property
    def per_key(self) -> bool:
        """Whether ``values`` has one number per key (drawn as a labelled row)."""
        return self.labels is not None and self.values.dim() == 1


@dataclass
class LayerWalkthrough:
    """Every step of one layer for one query token and one head, in the model's order."""

    config: ModelConfig
    stack: str
    layer: int
    head: int
    query: int
    row: int
    query_labels: list[str]
    key_labels: list[str]
    memory_labels: list[str] | None
    steps: list[Step] = field(default_factory=list)

    def step(self, key: str) -> Step:
        """The step called ``key``; ``KeyError`` naming the keys there are."""
        for step in self.steps:
            if step.key == key:
                return step
        raise KeyError(f"no step {key!r}; steps: {[s.key for s in self.steps]}")

    def section(self, name: str) -> list[Step]:
        """The steps of one section (``[]`` where the layer has none, e.g. cross-attention)."""
        return [step for step in self.steps if step.section == name]

    def has(self, key: str) -> bool:
        """Whether the walkthrough has a step called ``key``."""
        return any(step.key == key for step in self.steps)


def _dims(names: str, tensor: Tensor) -> str:
    return f"({names}) = ({', '.join(str(n) for n in tensor.shape)})"


def _cpu(values: Tensor) -> Tensor:
    return values.detach().float().cpu().clone()


def _list(indices: Tensor, limit: int = 12) -> str:
    items = [str(int(i)) for i in indices[:limit]]
    return ", ".join(items) + (", …" if indices.numel() > limit else "")


def _norm_explanation(x: Tensor, norm: LayerNorm | RMSNorm) -> str:
    if isinstance(norm, RMSNorm):
        rms = x.float().pow(2).mean().add(norm.eps).sqrt().item()
        gain = (
            "1 + w (Gemma stores the learned gain as its distance from 1, so that weight decay "
            "pulls it towards the identity, not towards zero)"
            if norm.offset
            else "the learned gain w"
        )
        return (
            f"RMSNorm over this token's d_model numbers: no mean is subtracted and there is no "
            f"bias; divide by their root mean square √(mean(x²) + ε) = {rms:.3g}, then scale by "
            f"{gain}."
        )
    mean = x.mean().item()
    std = x.var(unbiased=False).add(norm.eps).sqrt().item()
    return (
        f"LayerNorm over this token's d_model numbers: subtract their mean μ = {mean:.3g}, "
        f"divide by √(σ² + ε) = {std:.3g}, then scale by γ and shift by β (both learned)."
    )


# -- the table of an attention's score steps ------------------------------------------------


@dataclass
class Scores:
    """What the table of one attention's score steps reads: the tensors its numbers come from
    and the few facts its texts quote.

    ``tensors`` holds, for the query ``i`` of sentence ``b`` and head ``h``: ``"dot"``, the
    unscaled q·k ``(B, H, Tq, Tk)``; ``"scaled"`` and ``"capped"``, the pass's scores before
    and after any soft cap; ``"allowed"`` ``(B, 1, Tq, Tk)`` bool; ``"masked"``, the scores
    with −∞ where not allowed; ``"exp"`` ``(Tk,)``, this query's exp(s − max s);
    ``"weights"`` ``(B, H, Tq, Tk)``; ``"heads"`` ``(B, H, Tq, d_head)``; ``"concat"`` and
    ``"update"`` ``(B, T, d_model)``, before and after W_O.
    """

    module: MultiHeadAttention
    prefix: str
    stack: str
    b: int
    i: int
    h: int
    d_head: int
    token: str
    key_labels: list[str]
    reasons: list[str]
    off: Tensor  # (Tk,) bool: the masked keys
    top: float  # the largest finite score, subtracted before exp
    tensors: dict[str, Tensor]

    def head_row(self, name: str) -> Tensor:
        """This head's row for this query of the ``(B, H, Tq, n)`` tensor ``name``."""
        return self.tensors[name][self.b, self.h, self.i]

    @property
    def width(self) -> str:
        """The width the scores are divided by the root of: d_head, or the model's own."""
        scale_dim = self.module.scale_dim
        return f"{scale_dim:g}" if scale_dim is not None else f"{self.d_head}"

    @property
    def columns(self) -> str:
        """The columns of the chosen head in the concatenation of the heads."""
        return f"columns {self.h * self.d_head}…{(self.h + 1) * self.d_head - 1}"


Text = str | Callable[[Scores], str]


@dataclass(frozen=True)
class StepRow:
    """One row of a step table: what a step says, and which tensor its numbers come from.

    Attributes:
        key: the step's key after the sub-layer's prefix (``"dot"`` → ``"self.dot"``).
        name, formula, explanation: its texts (fixed, or written from the :class:`Scores`).
        numbers: the tensor of ``Scores.tensors`` its values are cut from.
        cut: ``"head"``, this head's row for this query of a ``(B, H, Tq, n)`` tensor;
            ``"query"``, this query's row of a ``(B, T, n)`` one; ``"all"``, all of it.
        dims: the names of the dimensions of the tensor its shape gives.
        code: the key of its cited line in :data:`~transformer.lab.inside_citations.CODE`.
        shape_of: the tensor whose shape it gives, where not ``numbers``.
        shown: which slice the values are; by default this head's row for this query.
        per_key: one number per key, labelled by the keys.
        greyed: the masked keys greyed; ``notes`` adds why each is masked.
        highlight: the chosen head's columns highlighted.
        when: whether the step is there (by default always).
    """

    key: str
    name: Text
    formula: Text
    numbers: str
    cut: str
    dims: str
    explanation: Text
    code: str
    shape_of: str | None = None
    shown: Text | None = None
    per_key: bool = False
    greyed: bool = False
    notes: bool = False
    highlight: bool = False
    when: Callable[[Scores], bool] | None = None


def _say(text: Text, scores: Scores) -> str:
    return text if isinstance(text, str) else text(scores)


def _scale_explanation(s: Scores) -> str:
    if s.module.scale_dim is None:
        return (
            f"Divided by √d_k = √{s.d_head} (the head's width, not d_model), so that wide "
            "heads do not push softmax into a one-hot corner."
        )
    return (
        f"Divided by √{s.width} (query_pre_attn_scalar), a width the model chose "
        f"for its scale, not the head's d_head = {s.d_head}."
    )


def _mask_explanation(s: Scores) -> str:
    n_off, n_keys = int(s.off.sum()), s.off.numel()
    if n_off:
        counts: dict[str, int] = {}
        for reason in s.reasons:
            if reason:
                counts[reason] = counts.get(reason, 0) + 1
        why = "; ".join(f"{n} {r}" for r, n in counts.items())
        return f"{n_off} of {n_keys} keys are set to −∞ ({why}): softmax gives them 0."
    if s.prefix == "self" and s.stack == "encoder":
        return (
            f"No key is masked: all {n_keys} keys are real tokens, and an encoder "
            "looks both ways (no causal mask)."
        )
    return f"No key is masked: all {n_keys} keys are real tokens" + (
        ", and this attention may look both ways." if s.prefix != "self" else "."
    )


def _cap(s: Scores) -> float:
    assert s.module.softcap is not None  # the soft cap step is there only with one
    return s.module.softcap


_PER_KEY = "B, H, Tq, Tk"
SCORE_STEPS: tuple[StepRow, ...] = (
    StepRow(
        "dot",
        "q·k for each key",
        "s_j = q·k_j",
        numbers="dot",
        cut="head",
        dims=_PER_KEY,
        explanation="One number per key: how well the key matches the query.",
        code="attention.dot",
        per_key=True,
    ),
    StepRow(
        "scaled",
        "÷ √d_k",
        lambda s: f"s_j / √d_k = s_j / √{s.width} = s_j × {s.module.score_scale():.4g}",
        numbers="scaled",
        cut="head",
        dims=_PER_KEY,
        explanation=_scale_explanation,
        code="attention.scale",
        per_key=True,
    ),
    StepRow(
        "softcap",
        "soft cap",
        lambda s: f"s_j = {_cap(s):g} · tanh(s_j / {_cap(s):g})",
        numbers="capped",
        cut="head",
        dims=_PER_KEY,
        explanation=lambda s: (
            f"Scores squashed into (−{_cap(s):g}, {_cap(s):g}) (Gemma 2): a "
            "small score passes almost unchanged, a large one can no longer run away and take all "
            "the weight."
        ),
        code="attention.softcap",
        per_key=True,
        when=lambda s: s.module.softcap is not None,
    ),
    StepRow(
        "masked",
        "the mask",
        "s_j = −∞ where key j may not be attended to",
        numbers="masked",
        cut="head",
        dims="B, 1, Tq, Tk",
        shape_of="allowed",
        shown=lambda s: f"query {s.token}: ({s.off.numel()},); grey = masked",
        explanation=_mask_explanation,
        code="attention.mask",
        per_key=True,
        greyed=True,
        notes=True,
    ),
    StepRow(
        "exp",
        "softmax: exp",
        "e_j = exp(s_j − max s)",
        numbers="exp",
        cut="all",
        dims=_PER_KEY,
        shape_of="weights",
        explanation=lambda s: (
            "Every score made positive (exp(−∞) = 0); subtracting the "
            f"largest score ({s.top:.3g}) keeps exp from overflowing. "
            f"Σ e = {s.tensors['exp'].sum().item():.4g}."
        ),
        code="attention.softmax",
        per_key=True,
        greyed=True,
    ),
    StepRow(
        "weights",
        "the weights",
        "a_j = e_j / Σ e   (softmax)",
        numbers="weights",
        cut="head",
        dims=_PER_KEY,
        explanation=lambda s: (
            "The attention weights: they sum to 1. The largest, "
            f"{s.head_row('weights').max().item():.3f}, goes to key "
            f"{s.key_labels[int(s.head_row('weights').argmax())]}."
        ),
        code="attention.softmax",
        per_key=True,
        greyed=True,
    ),
    StepRow(
        "head",
        lambda s: f"head {s.h + 1}'s output",
        "head = Σ_j a_j·v_j",
        numbers="heads",
        cut="head",
        dims="B, H, Tq, d_head",
        explanation="The values, mixed by the weights: what this head brings to the token.",
        code="attention.heads",
    ),
    StepRow(
        "concat",
        "all heads concatenated",
        lambda s: f"Concat(head_1, …, head_{s.module.n_heads})",
        numbers="concat",
        cut="query",
        dims="B, T, d_model",
        shown=lambda s: (
            f"query {s.token}: ({s.tensors['concat'].size(-1)},); head {s.h + 1} is {s.columns}"
        ),
        explanation=lambda s: (
            f"The {s.module.n_heads} heads' outputs side by side (each head "
            "computed its own weights the same way)."
        ),
        code="attention.concat",
        highlight=True,
    ),
    StepRow(
        "project",
        "·W_O",
        lambda s: "Concat(…)·W_O" + (" + b_O" if s.module.w_o.bias is not None else ""),
        numbers="update",
        cut="query",
        dims="B, T, d_model",
        shown=lambda s: f"query {s.token}: ({s.tensors['update'].size(-1)},)",
        explanation="The output projection mixes the heads: what this sub-layer adds to the "
        "stream.",
        code="attention.project",
    ),
)


def table_step(prefix: str, section: str, row: StepRow, scores: Scores) -> Step:
    """The step ``row`` of the table says, with its numbers cut from ``scores``."""
    s = scores
    numbers = s.tensors[row.numbers]
    whole = s.tensors[row.shape_of or row.numbers]
    if row.cut == "head":
        numbers = numbers[s.b, s.h, s.i]
    elif row.cut == "query":
        numbers = numbers[s.b, s.i]
    shown = f"head {s.h + 1}, query {s.token}: ({whole.size(-1)},)"
    return Step(
        key=f"{prefix}.{row.key}",
        name=_say(row.name, s),
        section=section,
        formula=_say(row.formula, s),
        shape=_dims(row.dims, whole),
        shown=shown if row.shown is None else _say(row.shown, s),
        values=_cpu(numbers),
        explanation=_say(row.explanation, s),
        code=CODE[row.code],
        labels=s.key_labels if row.per_key else None,
        off=s.off if row.greyed else None,
        notes=s.reasons if row.notes else None,
        highlight=(s.h * s.d_head, (s.h + 1) * s.d_head) if row.highlight else None,
    )


class _Walker:
    """Builds the steps of one walkthrough (the shared indices and labels in one place)."""

    def __init__(self, walk: LayerWalkthrough, model: Transformer) -> None:
        self.walk = walk
        self.model = model
        self.steps = walk.steps
        self.b, self.i, self.h = walk.row, walk.query, walk.head
        self.d_head = walk.config.d_head
        self.offset = 0  # the position of the stack's first token (rotary angles)
        # What the pass kept of this layer's modules (LookInside), the attention being shown.
        self.look = LookInside(walk.stack, walk.layer)
        self.module: MultiHeadAttention | None = None
        self.record: AttentionRecord | None = None
        # Per sub-layer ("self", "cross", "ff"): the pass's (B, T, d_model) update and the
        # stream after it (LayerTrace), so the residual steps show the pass's own sums.
        self.passed: dict[str, tuple[Tensor, Tensor]] = {}

    def captured(self, name: str) -> Tensor:
        """What the pass computed as ``name`` in the attention being shown."""
        return self.look.get(self.module, name)

    def normed(self, norm: LayerNorm | RMSNorm) -> tuple[Tensor, Tensor]:
        """What ``norm`` read and wrote in the pass, each ``(B, T, d_model)``."""
        return self.look.get(norm, "input"), self.look.get(norm, "output")

    def sublayer_output(self, prefix: str, residual: Residual) -> Tensor:
        """The ``(B, T, d_model)`` output of sub-layer ``prefix`` as the pass computed it,
        before any norm of it (OLMo 2's, Gemma's): else the update the residual added."""
        norm = residual.norm if residual.output_norm else residual.post_norm
        return self.passed[prefix][0] if norm is None else self.look.get(norm, "input")

    def add(
        self,
        key: str,
        section: str,
        name: str,
        formula: str,
        full: Tensor | None = None,
        dims: str = "B, T, d_model",
        per_head: Tensor | None = None,
        **rest: Any,
    ) -> None:
        """Append a step; with ``full``, a ``(B, T, n)`` tensor, the step shows this token's row
        of it, with ``per_head``, a ``(B, H, Tq, n)`` tensor, this head's row for this query (its
        shape, the slice and the values follow from it unless given)."""
        label = self.walk.query_labels[self.i]
        if full is not None:
            rest.setdefault("shape", _dims(dims, full))
            rest.setdefault("shown", f"token {label}: ({full.size(-1)},)")
            rest["values"] = _cpu(full[self.b, self.i])
        if per_head is not None:
            rest.setdefault("shape", _dims(dims, per_head))
            rest.setdefault("shown", f"head {self.h + 1}, query {label}: ({per_head.size(-1)},)")
            rest.setdefault("values", _cpu(per_head[self.b, self.h, self.i]))
        self.steps.append(Step(key=key, name=name, section=section, formula=formula, **rest))

    # -- the input -------------------------------------------------------------------------

    def embedding(self, record: StackInput, x: Tensor, decoder: bool) -> None:
        model, b, i = self.model, self.b, self.i
        embedding = model.tgt_embedding if decoder else model.src_embedding
        norm = model.tgt_embedding_norm if decoder else model.src_embedding_norm
        assert embedding is not None  # the stack this record entered exists
        token_id = int(record.tokens[b, i])
        scale = "·√d_model" if embedding.scale != 1.0 else ""
        self.add(
            "embedding.token",
            "input",
            "token embedding",
            f"e = E[{token_id}]{scale}",
            shape=_dims("B, T, d_model", record.token_embedding),
            shown=f"token {self.walk.query_labels[i]}: ({record.token_embedding.size(-1)},)",
            values=_cpu(record.token_embedding[b, i]),
            explanation=f"Row {token_id} of the learned embedding matrix"
            + (
                f", multiplied by √d_model = {embedding.scale:.3g} (paper section 3.4)."
                if scale
                else " (this model does not scale it)."
            ),
            code=CODE["embedding.token"],
        )
        if self.walk.config.positional == "rotary":
            self.layer_input(x, first=True)  # nothing is added: q and k are rotated instead
            return
        sinusoidal = self.walk.config.positional == "sinusoidal"
        position = i + record.position_offset
        self.add(
            "embedding.position",
            "input",
            "position",
            f"p = PE({position})" if sinusoidal else f"p = P[{position}]",
            shape=_dims("T, d_model", record.positional),
            shown=f"position {position}: ({record.positional.size(-1)},)",
            values=_cpu(record.positional[i]),
            explanation=(
                "Sines and cosines of the position at falling frequencies (section 3.5): fixed, "
                "not learned."
                if sinusoidal
                else "A learned vector for this position (row of the position table)."
            ),
            code=CODE["embedding.position"],
        )
        self.embedding_sum(record, x, norm)

    def embedding_sum(
        self, record: StackInput, x: Tensor, norm: LayerNorm | RMSNorm | None
    ) -> None:
        """The sum of the embedding's pieces (a token type's too), its norm where the model
        has one, and the first layer's input ``x`` ``(B, T, d_model)``."""
        b, i = self.b, self.i
        total = record.token_embedding + record.positional
        formula = "x = e + p"
        code = CODE["embedding.sum"]
        if record.token_type_embedding is not None:
            self.add(
                "embedding.token_type",
                "input",
                "token type",
                "t = T[type]",
                shape=_dims("B, T, d_model", record.token_type_embedding),
                shown=f"token {self.walk.query_labels[i]}: "
                f"({record.token_type_embedding.size(-1)},)",
                values=_cpu(record.token_type_embedding[b, i]),
                explanation="BERT adds a learned vector for the segment (sentence A = type 0).",
                code=CODE["embedding.token_type"],
            )
            total = total + record.token_type_embedding
            formula = "x = e + p + t"
            code = CODE["embedding.sum_types"]
        self.add(
            "embedding.sum",
            "input",
            "sum",
            formula,
            full=total,
            explanation="The pieces are added, number by number: one vector per token.",
            code=code,
        )
        if norm is not None:
            # The norm's output is the layer's input: the embedding dropout that follows it
            # returns its input itself at inference.
            self.add(
                "embedding.norm",
                "input",
                "embedding LayerNorm",
                f"{formula[4:]} → LayerNorm",
                full=x,
                explanation=_norm_explanation(total[b, i], norm),
                code=CODE["embedding.norm"],
            )
        self.layer_input(x, first=True)

    def layer_input(self, x: Tensor, first: bool) -> None:
        walk = self.walk
        self.add(
            "input",
            "input",
            f"x: the input of layer {walk.layer + 1}",
            ("x = the step above" if first else f"x = output of layer {walk.layer}"),
            full=x,
            explanation=(
                (
                    "What the first layer reads: the token's embedding alone. Rotary positions "
                    "add no position vector here; the attention rotates q and k by the position."
                    if walk.config.positional == "rotary"
                    else "What the first layer reads: the embedded tokens (dropout is off at "
                    "inference)."
                )
                if first
                else f"What layer {walk.layer} wrote into the residual stream at this token."
            ),
            code=CODE[f"input.{walk.stack}"],
        )

    # -- one attention sub-layer -----------------------------------------------------------

    def self_attention(
        self,
        layer: EncoderLayer | DecoderLayer,
        traced: LayerTrace,
        x: Tensor,
        causal: Tensor | None,
        real_tokens: Tensor,
    ) -> Tensor:
        """The self-attention steps over the ``(B, T, d_model)`` stream ``x``, with the pass's
        ``(T, T)`` ``causal`` mask in a decoder and its ``(B, T)`` ``real_tokens``; returns the
        stream after them."""
        record = traced.self_attention
        reasons = _mask_reasons(
            record.mask[self.b, 0, self.i].cpu(),
            real_tokens[self.b].cpu(),
            _cpu_or_none(causal) if self.walk.stack == "decoder" else None,
            self.i,
            layer.window if isinstance(layer, DecoderLayer) else None,
        )
        residual = (
            layer.attention_residual
            if isinstance(layer, EncoderLayer)
            else layer.self_attention_residual
        )
        self.module, self.record = layer.self_attention, record
        labels = self.walk.query_labels
        args = (layer.self_attention, residual, x, None, record.mask, labels, reasons)
        return self.attention("self", "self-attention", *args)

    def cross_attention(
        self, layer: DecoderLayer, traced: LayerTrace, x: Tensor, memory: Tensor, real: Tensor
    ) -> Tensor:
        """The cross-attention steps over the ``(B, T, d_model)`` stream ``x``, reading the
        encoder's ``(B, S, d_model)`` ``memory`` whose real tokens are ``real`` ``(B, S)``;
        returns the stream after them."""
        record = traced.cross_attention
        # A layer with cross-attention records it; its labels come from the source.
        assert record is not None and layer.cross_attention is not None
        assert self.walk.memory_labels is not None
        reasons = _mask_reasons(
            record.mask[self.b, 0, self.i].cpu(), real[self.b].cpu(), None, self.i
        )
        self.module, self.record = layer.cross_attention, record
        labels = self.walk.memory_labels
        residual = layer.cross_attention_residual
        args = (layer.cross_attention, residual, x, memory, record.mask, labels, reasons)
        return self.attention("cross", "cross-attention", *args)

    def attention(
        self,
        prefix: str,
        section: str,
        module: MultiHeadAttention,
        residual: Residual,
        x: Tensor,
        memory: Tensor | None,
        mask: Tensor,
        key_labels: list[str],
        reasons: list[str],
    ) -> Tensor:
        """Steps of one attention sub-layer; returns the ``(B, T, d_model)`` stream after it."""
        b, i = self.b, self.i
        pre = residual.pre_norm
        if pre and isinstance(residual.norm, RMSNorm):
            self.rms_norm(
                f"{prefix}.norm_in",
                section,
                residual.norm,
                "A pre-norm model normalises what a sub-layer reads and adds the sub-layer's "
                "output to the un-normalised stream. ",
            )
        elif pre:
            read, normed = self.normed(residual.norm)  # the stream x, what the sub-layer reads
            self.add(
                f"{prefix}.norm_in",
                section,
                "LayerNorm first (pre-LN)",
                "LN(x) = γ·(x − μ)/√(σ² + ε) + β",
                full=normed,
                explanation="A pre-LN model normalises what a sub-layer reads and adds the "
                "sub-layer's output to the un-normalised stream. "
                + _norm_explanation(read[b, i], residual.norm),
                code=CODE["residual.norm_in"],
            )
        q, k, _ = self.qkv(prefix, section, module, memory, key_labels)
        scores = self.scores(prefix, module, q, k, mask, key_labels, reasons)
        for row in SCORE_STEPS:
            if row.when is None or row.when(scores):
                self.steps.append(table_step(prefix, section, row, scores))
        update = self.output_norm(prefix, section, residual, scores.tensors["update"], "Attention")
        return self.residual(prefix, section, residual, x, update, "Attention")

    def scores(
        self,
        prefix: str,
        module: MultiHeadAttention,
        q: Tensor,
        k: Tensor,
        mask: Tensor,
        key_labels: list[str],
        reasons: list[str],
    ) -> Scores:
        """What :data:`SCORE_STEPS` read, from the pass's own scores, weights and heads and
        the pass's (rotated) q ``(B, H, Tq, d_head)`` and K ``(B, H, Tk, d_head)``."""
        b, i, h = self.b, self.i, self.h
        record = self.record
        assert record is not None and record.queries is not None and record.keys is not None
        # ÷√d_k as its own step: the unscaled product of the pass's (rotated) q and keys.
        dot = q @ k.transpose(-2, -1)  # (B, H, Tq, Tk)
        # The pass scales the queries, then multiplies by the keys: its own scores.
        scaled = record.queries @ record.keys.transpose(-2, -1)
        capped = scaled if module.softcap is None else soft_cap(scaled, module.softcap)
        allowed = mask.expand(dot.size(0), 1, dot.size(2), dot.size(3))
        masked = capped.masked_fill(~allowed, float("-inf"))
        off = ~allowed[b, 0, i].cpu()
        row = masked[b, h, i]
        finite = row[torch.isfinite(row)]
        top = finite.max() if finite.numel() else row.new_zeros(())
        exp = torch.exp(row - top).masked_fill(off.to(row.device), 0.0)
        heads = self.captured("heads")  # (B, H, Tq, d_head), as the pass mixed them
        batch, n_heads, length, _ = heads.shape
        concat = heads.transpose(1, 2).reshape(batch, length, n_heads * self.d_head)
        tensors = {
            "dot": dot,
            "scaled": scaled,
            "capped": capped,
            "allowed": allowed,
            "masked": masked,
            "exp": exp,
            "weights": record.weights,  # the pass's own (B, H, Tq, Tk)
            "heads": heads,
            "concat": concat,
            "update": self.captured("output"),  # (B, T, d_model), after W_O
        }
        return Scores(
            module=module,
            prefix=prefix,
            stack=self.walk.stack,
            b=b,
            i=i,
            h=h,
            d_head=self.d_head,
            token=self.walk.query_labels[i],
            key_labels=key_labels,
            reasons=reasons,
            off=off,
            top=top.item(),
            tensors=tensors,
        )

    def qkv(
        self,
        prefix: str,
        section: str,
        module: MultiHeadAttention,
        memory: Tensor | None,
        key_labels: list[str],
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The q, K and V steps: the paper's, or with grouped key/value heads the one this query
        head reads, and with rotary positions q and K before and after their rotation. Returns
        q ``(B, H, Tq, d_head)`` and K, V expanded to ``(B, H, Tk, d_head)`` (each query head's
        own key/value head)."""
        b, i, h, dh = self.b, self.i, self.h, self.d_head
        token = self.walk.query_labels[i]
        n_heads, n_kv = module.n_heads, module.n_kv_heads
        g = module.kv_head_of[h]  # the key/value head query head h reads (h without grouping)
        q, k = self.captured("queries"), self.captured("keys")  # QK-normed where it is
        v = self.captured("values")  # (B, H_kv, Tk, d_head)
        rotated = self.record.rotary if self.record is not None else None
        if rotated is not None:  # the pass attended with them rotated; the pair has them before
            q, k = rotated.queries_before, rotated.keys_before
        if module.q_norm is not None and module.k_norm is not None:  # shown before the norm
            q, k = self.look.get(module.q_norm, "input"), self.look.get(module.k_norm, "input")
            if module.qk_norm == "projection":  # normed whole, then split into heads
                q = operations.split_heads(q, n_heads)  # (B, H, Tq, d_head)
                k = operations.split_heads(k, n_kv)  # (B, H_kv, Tk, d_head)
        bias = {
            name: f" + b_{name[-1].upper()}" if getattr(module, name).bias is not None else ""
            for name in ("w_q", "w_k", "w_v")
        }
        where = "this token" if memory is None else "this target token"
        kv_input = "X" if memory is None else "memory"
        paper = module.rotary is None and n_kv == n_heads
        before = " (before rotation)" if module.rotary is not None else ""
        cols = f"columns {h * dh}…{(h + 1) * dh - 1}"
        self.add(
            f"{prefix}.q",
            section,
            "query q" + before,
            f"q = x·W_Q{bias['w_q']}   (head {h + 1}: {cols})",
            per_head=q,
            dims="B, H, Tq, d_head",
            shown=f"head {h + 1}, {where} {token}: ({dh},)",
            explanation=f"What {where} looks for: its vector times the query matrix, cut into "
            f"{n_heads} {'heads' if paper else 'query heads'} of d_head = {dh}.",
            code=CODE["attention.q"],
        )
        q, k = self.qk_norm(prefix, section, module, q, k)
        if module.q_norm is not None:
            before = " (QK-normed" + (", before rotation)" if module.rotary is not None else ")")
        kv = self._kv_texts(module, g, memory, paper)

        def kv_step(which: str, tensor: Tensor, name: str, cols: str, explanation: str) -> None:
            """K or V (``which``): every key's vector in key/value head ``g``."""
            w, n = f"W_{which.upper()}", tensor.size(2)
            self.add(
                f"{prefix}.{which}",
                section,
                name,
                f"{which.upper()} = {kv_input}·{w}{bias['w_' + which]}{cols}",
                shape=_dims(kv["dims"], tensor),
                shown=f"{kv['head']}, all {n} keys: ({n}, {dh})",
                values=_cpu(tensor[b, g]),
                explanation=explanation,
                code=CODE[f"attention.{which}"],
                labels=key_labels,
            )

        kv_step("k", k, f"keys K{before}{kv['name']}", kv["k_cols"], kv["k_explanation"])
        if module.rotary is not None:
            q, k = self.rotation(prefix, section, module.rotary, q, k, g, key_labels)
        kv_step("v", v, f"values V{kv['name']}", kv["v_cols"], kv["v_explanation"])
        return q, expand_kv_heads(k, n_heads), expand_kv_heads(v, n_heads)

    def qk_norm(
        self,
        prefix: str,
        section: str,
        module: MultiHeadAttention,
        q: Tensor,
        k: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """The QK-norm step (Qwen3, Gemma 3: each head's q and k; OLMo 2: the whole
        projection), where the module has one; returns q ``(B, H, Tq, d_head)`` and K ``(B,
        H_kv, Tk, d_head)`` normed (unchanged without QK-norm)."""
        if module.q_norm is None or module.k_norm is None:
            return q, k
        q, k = self.captured("queries"), self.captured("keys")  # the pass's, normed
        if self.record is not None and self.record.rotary is not None:  # before the rotation
            q, k = self.record.rotary.queries_before, self.record.rotary.keys_before
        over = (
            f"each head's {self.d_head} numbers alone"
            if module.qk_norm == "head"
            else "the whole projection (every head at once)"
        )
        self.add(
            f"{prefix}.qk_norm",
            section,
            "QK-norm: q (and every key) normalised",
            f"q = RMSNorm(q),  k = RMSNorm(k)   (over {over})",
            per_head=q,
            dims="B, H, Tq, d_head",
            explanation=f"An RMSNorm of the queries and keys over {over}, with its own learned "
            "gain, before any rotation: without it a query's and a key's length grow with their "
            "weights and the scores with both, until a few heads saturate their softmax; "
            "normalised, the scores stay at the scale training chose.",
            code=CODE["attention.qk_norm"],
        )
        return q, k

    def output_norm(
        self, prefix: str, section: str, residual: Residual, update: Tensor, what: str
    ) -> Tensor:
        """The norm of a sub-layer's ``(B, T, d_model)`` output before the residual add (OLMo
        2; Gemma 2 and 3 after their pre-norm), where the layer has one; returns what is
        added to the stream."""
        norm = residual.norm if residual.output_norm else residual.post_norm
        added = self.passed[prefix][0]  # the pass's update: after the norm where there is one
        if norm is None:
            return added
        placement = (
            "instead of a norm on its input (OLMo 2): the stream itself is never "
            "normalised, but each update arrives at a set scale."
            if residual.output_norm
            else "as well as the norm on its input (Gemma 2 and 3): what the sub-layer adds to "
            "the stream arrives at a set scale."
        )
        self.add(
            f"{prefix}.norm_out_sublayer",
            section,
            f"the {what}'s output normalised",
            f"Norm({what}(…))",
            full=added,
            explanation=f"A norm on the sub-layer's output, before it joins the stream, {placement} "
            + _norm_explanation(update[self.b, self.i], norm),
            code=CODE["residual.output_norm" if residual.output_norm else "residual.post_norm"],
        )
        return added

    def _kv_texts(
        self, module: MultiHeadAttention, g: int, memory: Tensor | None, paper: bool
    ) -> dict[str, str]:
        """What the K and V steps say: the paper's heads, or key/value head ``g`` of a grouped
        or rotating attention."""
        h, dh, n_heads, n_kv = self.h, self.d_head, module.n_heads, module.n_kv_heads
        passes = "What each key passes on if it is attended to"
        if paper:
            kv_from = (
                "every token of the layer's input" if memory is None else "the encoder's memory"
            )
            return {
                "name": " (every key)",
                "dims": "B, H, Tk, d_head",
                "head": f"head {h + 1}",
                "k_cols": "",
                "v_cols": "",
                "k_explanation": f"What each key offers to be matched on, from {kv_from}.",
                "v_explanation": passes + ".",
            }
        group = [str(n + 1) for n, kv in enumerate(module.kv_head_of) if kv == g]
        grouped = n_kv != n_heads
        return {
            "name": f": key/value head {g + 1}",
            "dims": "B, H_kv, Tk, d_head",
            "head": f"key/value head {g + 1}",
            "k_cols": f"   (key/value head {g + 1}: columns {g * dh}…{(g + 1) * dh - 1})",
            "v_cols": f"   (key/value head {g + 1}; not rotated)",
            "k_explanation": (
                f"Grouped-query attention: W_K makes only {n_kv} key/value heads for "
                f"{n_heads} query heads, and query head h reads key/value head "
                f"h // {n_heads // n_kv}. Query head {h + 1} reads key/value head {g + 1}, "
                f"shared with query heads {', '.join(group)}."
                if grouped
                else f"One key/value head per query head: query head {h + 1} reads its own."
            ),
            "v_explanation": passes
            + (f", shared by query heads {', '.join(group)}." if grouped else "."),
        }

    def rms_norm(self, key: str, section: str, norm: RMSNorm, lead: str) -> None:
        """The RMSNorm step before a sub-layer of a pre-norm model: what ``norm`` wrote, from
        the stream it read."""
        x, hs = self.normed(norm)
        gain = "(1 + w)" if norm.offset else "w"
        self.add(
            key,
            section,
            "RMSNorm first (pre-norm)",
            f"RMSNorm(x) = x / √(mean(x²) + ε) · {gain}",
            full=hs,
            explanation=lead + _norm_explanation(x[self.b, self.i], norm),
            code=CODE["rms_norm"],
        )

    def rotation(
        self,
        prefix: str,
        section: str,
        rotary: rotary_module.RotaryEmbedding,
        q: Tensor,
        k: Tensor,
        g: int,
        key_labels: list[str],
    ) -> tuple[Tensor, Tensor]:
        """The rotary steps: this position's angles, then q and key/value head ``g``'s K turned
        by them; returns q and K rotated."""
        b, i, h, dh = self.b, self.i, self.h, self.d_head
        token = self.walk.query_labels[i]
        position = i + self.offset
        turned = rotary.rotary_dims
        frequencies, _ = rotary_module.scaled_frequencies(turned, rotary.base, rotary.scaling)
        angles = position * frequencies.to(q.device)  # (rotary_dims/2,)
        scaling = (rotary.scaling or {}).get("rope_type")
        formula = f"angle_i = {position} · θ_i,   θ_i = {rotary.base:g}^(−2i/{turned})"
        if scaling:
            formula += f", scaled ({scaling})"
        if turned < dh:
            formula += f"; only dimensions 0…{turned - 1} of {dh} turn"
        self.add(
            f"{prefix}.angles",
            section,
            f"rotation angles at position {position}",
            formula,
            shape=f"(d_head/2,) = ({angles.numel()},)",
            shown=f"position {position}: ({angles.numel()},) radians",
            values=_cpu(angles),
            explanation=f"Rotary positions: dimension i and i + {turned // 2} of every query "
            f"and key head turn together by position · θ_i"
            + (
                f" (partial rotary: the other {dh - turned} dimensions carry no position)"
                if turned < dh
                else ""
            )
            + (
                f"; the frequencies are stretched ({scaling}) so that positions beyond the "
                "trained length turn by angles the model has seen"
                if scaling
                else ""
            )
            + ". The first pair turns "
            f"{angles[0].item():.3g} rad here, the last {angles[-1].item():.3g}: the first "
            "pairs spin fast, the last barely move. Nothing was added to the embedding.",
            code=CODE["rotary.angles"],
        )
        assert self.record is not None and self.record.rotary is not None
        q_rot, k_rot = self.record.rotary.queries_after, self.record.rotary.keys_after
        rotate_code = CODE["rotary.rotate"]
        self.add(
            f"{prefix}.q_rotated",
            section,
            "query q after rotation",
            "q' = q·cos(angle) + rotate_half(q)·sin(angle),  rotate_half([a, b]) = [−b, a]",
            per_head=q_rot,
            dims="B, H, Tq, d_head",
            shown=f"head {h + 1}, this token {token}: ({dh},)",
            explanation="The query turned by this position's angles, pair by pair: its "
            f"length stays {q[b, h, i].norm().item():.4g}, only its direction changes.",
            code=rotate_code,
        )
        self.add(
            f"{prefix}.k_rotated",
            section,
            f"keys K after rotation: key/value head {g + 1}",
            "k'_j = k_j·cos(angle_j) + rotate_half(k_j)·sin(angle_j)",
            shape=_dims("B, H_kv, Tk, d_head", k_rot),
            shown=f"key/value head {g + 1}, all {k.size(2)} keys: ({k.size(2)}, {dh})",
            values=_cpu(k_rot[b, g]),
            explanation="Each key turned by its own position's angles; so q'·k'_j depends "
            "on the distance between the query and key j, not on where they are.",
            code=rotate_code,
            labels=key_labels,
        )
        return q_rot, k_rot

    def residual(
        self, prefix: str, section: str, residual: Residual, x: Tensor, update: Tensor, what: str
    ) -> Tensor:
        """The residual add and, in post-LN, the norm after it; returns the new stream."""
        b, i = self.b, self.i
        summed = residual.pre_norm or residual.output_norm
        after = self.passed[prefix][1]  # the pass's stream after this sub-layer
        # Post-LN: the sum the pass normalised, x + update, as its norm read it.
        added = after if summed else self.look.get(residual.norm, "input")
        self.add(
            f"{prefix}.residual",
            section,
            "residual add",
            f"x + {what}(…)",
            full=added,
            explanation="The sub-layer's output is added to its input: the residual stream "
            "keeps what was there (dropout is off at inference).",
            code=CODE[
                "residual.add" if residual.pre_norm or residual.output_norm else "residual.norm_out"
            ],
        )
        if summed:
            return added
        normed = after
        self.add(
            f"{prefix}.norm_out",
            section,
            "LayerNorm (post-LN)",
            f"LN(x + {what}(…))",
            full=normed,
            explanation="A post-LN model (the paper, BERT, Marian) normalises after the add. "
            + _norm_explanation(added[b, i], residual.norm),
            code=CODE["residual.norm_out"],
        )
        return normed

    # -- the feed-forward sub-layer --------------------------------------------------------

    def feed_forward(
        self, layer: EncoderLayer | DecoderLayer, x: Tensor, reads: Tensor | None = None
    ) -> Tensor:
        """The feed-forward steps over the ``(B, T, d_model)`` stream ``x`` (or, in a parallel
        layer, over ``reads``, the layer's input); returns the stream after them."""
        b, i = self.b, self.i
        ff, residual = layer.feed_forward, layer.feed_forward_residual
        section = "feed-forward"
        lead = ""
        if reads is not None:  # GPT-NeoX: attention and feed-forward side by side
            lead = (
                "In parallel (GPT-NeoX): the feed-forward reads the layer's input, not the stream "
                "after attention, so the two sub-layers can run at once; both add to the stream. "
            )
            x_read = reads
        else:
            x_read = x
        if residual.pre_norm and isinstance(residual.norm, RMSNorm):
            self.rms_norm("ff.norm_in", section, residual.norm, lead)
        elif residual.pre_norm:
            read, normed = self.normed(residual.norm)  # x_read, what the sub-layer reads
            self.add(
                "ff.norm_in",
                section,
                "LayerNorm first (pre-LN)",
                "LN(x) = γ·(x − μ)/√(σ² + ε) + β",
                full=normed,
                explanation=lead + _norm_explanation(read[b, i], residual.norm),
                code=CODE["residual.norm_in"],
            )
        d_model = x_read.size(-1)
        if isinstance(ff, GatedFeedForward):
            d_ff = self.gated(ff, d_model)
            update = self.sublayer_output("ff", residual)  # W_down's output, as the pass's
            self.ff_project("·W_down", "FFN(x) = a·W_down", update, d_ff, CODE["gated.project"])
            update = self.output_norm("ff", section, residual, update, "FFN")
            return self.residual("ff", section, residual, x, update, "FFN")
        hidden = self.look.get(ff, "hidden")  # (B, T, d_ff): x·W₁ + b₁, as the pass's
        d_ff = hidden.size(-1)
        self.add(
            "ff.hidden",
            section,
            "·W₁ + b₁",
            "u = x·W₁ + b₁",
            full=hidden,
            dims="B, T, d_ff",
            explanation=f"Widened from d_model = {d_model} to d_ff = {d_ff} hidden units, "
            "each token on its own.",
            code=CODE["ff.hidden"],
        )
        activated = self.look.get(ff, "activated")  # act(u), as the pass's
        self.activation(hidden, activated, gate=False, code=CODE["ff.activation"])
        update = self.sublayer_output("ff", residual)  # W₂'s output, as the pass's
        self.ff_project("·W₂ + b₂", "FFN(x) = act(u)·W₂ + b₂", update, d_ff, CODE["ff.project"])
        update = self.output_norm("ff", section, residual, update, "FFN")
        return self.residual("ff", section, residual, x, update, "FFN")

    def ff_project(
        self, name: str, formula: str, update: Tensor, d_ff: int, code: CodeLine
    ) -> None:
        """The feed-forward's last projection, from ``d_ff`` units back to the ``(B, T,
        d_model)`` ``update``."""
        self.add(
            "ff.project",
            "feed-forward",
            name,
            formula,
            full=update,
            explanation=f"Back from {d_ff} to d_model = {update.size(-1)}: what the "
            "feed-forward network adds to the stream.",
            code=code,
        )

    def activation(self, pre: Tensor, post: Tensor, gate: bool, code: CodeLine) -> str:
        """The activation step, ``post = act(pre)`` (both ``(B, T, d_ff)``), greying the units
        it switches off (``pre`` ≤ 0): the hidden units, or with ``gate`` the gated
        feed-forward's gates. Returns the activation's formula."""
        formula, effect = _ACTIVATIONS.get(
            self.walk.config.activation, ("act(u)", "changes each unit")
        )
        off = (pre[self.b, self.i] <= 0).cpu()
        n_off, d_ff = int(off.sum()), off.numel()
        act = formula.split("(")[0]
        if gate:
            explanation = (
                f"{act} {effect}: {n_off} of {d_ff} gates are nearly closed (g ≤ 0; grey); a "
                "large positive g lets its unit through almost unchanged."
            )
        elif n_off <= d_ff // 2:
            explanation = f"{act} {effect}: it switched off {n_off} of {d_ff} units (u ≤ 0; grey): "
            explanation += f"{_list(off.nonzero().flatten())}."
        else:
            explanation = f"{act} {effect}: it switched off {n_off} of {d_ff} units (u ≤ 0; grey); "
            explanation += f"the {d_ff - n_off} still on: {_list((~off).nonzero().flatten())}."
        token = self.walk.query_labels[self.i]
        self.add(
            "ff.activation",
            "feed-forward",
            "activation of the gate" if gate else "activation",
            formula.replace("u", "g") if gate else formula,
            full=post,
            dims="B, T, d_ff",
            shown=f"token {token}: ({d_ff},); "
            + ("grey = gate nearly closed, g ≤ 0" if gate else "grey = switched off"),
            explanation=explanation,
            code=code,
            off=off,
        )
        return formula

    def gated(self, ff: GatedFeedForward, d_model: int) -> int:
        """The gated feed-forward's steps up to the unit activity (SwiGLU with SiLU), each the
        pass's own ``(B, T, d_ff)`` tensor; returns d_ff."""
        b, i = self.b, self.i
        section = "feed-forward"
        pre_gate = self.look.get(ff, "gate_in")  # (B, T, d_ff)
        up = self.look.get(ff, "up")
        d_ff = up.size(-1)
        self.add(
            "ff.gate_in",
            section,
            "·W_gate",
            "g = x·W_gate",
            full=pre_gate,
            dims="B, T, d_ff",
            explanation=f"Widened from d_model = {d_model} to d_ff = {d_ff}: the gate, "
            "which will decide how much of each unit passes.",
            code=CODE["gated.gate"],
        )
        gate = self.look.get(ff, "gate")  # act(g)
        formula = self.activation(pre_gate, gate, gate=True, code=CODE["gated.activation"])
        self.add(
            "ff.up",
            section,
            "·W_up",
            "u = x·W_up",
            full=up,
            dims="B, T, d_ff",
            explanation="A second projection to d_ff, of the same token: what the units carry.",
            code=CODE["gated.up"],
        )
        product = self.look.get(ff, "units")  # act(g) ⊙ u
        strongest = product[b, i].abs().topk(min(5, d_ff)).indices
        self.add(
            "ff.product",
            section,
            "gate ⊙ up: the unit activity",
            f"a = {formula.split('(')[0]}(g) ⊙ u",
            full=product,
            dims="B, T, d_ff",
            explanation="Each unit's carried value times its gate, number by number (SwiGLU): "
            f"the most active units here are {_list(strongest.cpu())}.",
            code=CODE["gated.product"],
        )
        return d_ff


def _mask_reasons(
    allowed: Tensor,
    real_keys: Tensor,
    causal: Tensor | None,
    query: int,
    window: int | None = None,
) -> list[str]:
    """Per key, why the mask removed it: ``"padding"``, ``"causal: a later position"``,
    outside a sliding ``window``, several of these, or ``""`` for an allowed key. ``allowed``
    and ``real_keys`` are ``(Tk,)`` bool."""
    reasons = []
    for j in range(allowed.numel()):
        if bool(allowed[j]):
            reasons.append("")
            continue
        why = []
        if not bool(real_keys[j]):
            why.append("padding")
        if causal is not None and not bool(causal[query, j]):
            why.append("causal: a later position")
        elif window is not None and query - j >= window:
            why.append(f"outside the sliding window of {window}")
        reasons.append(" and ".join(why) or "masked")
    return reasons


def _check_index(value: int, name: str, n: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if not 0 <= value < n:
        raise ValueError(f"{name} must be between 0 and {n - 1} (counted from 0), got {value}")
    return value


def query_positions(tokens: Tensor, real: Tensor, pad_id: int) -> list[int]:
    """The positions of one ``(T,)`` row of ``tokens`` a walkthrough may take as its query:
    those ``real`` (``(T,)`` bool) says are not padding, less a trailing run of ``pad_id``
    after the first position (a model that pads with a token of its text, as GPT-2 does with
    ``<|endoftext|>``, does not mask its padding, so ``real`` alone would offer it)."""
    ids = tokens.tolist()
    end = len(ids)
    while end > 1 and ids[end - 1] == pad_id:
        end -= 1
    return [i for i, keep in enumerate(real.tolist()) if keep and i < end]


@torch.no_grad()
def walkthrough(
    model: Transformer,
    analysis: Analysis,
    stack: str,
    layer: int,
    head: int,
    query: int,
    row: int = 0,
    tokenizer: Tokenizer | None = None,
) -> LayerWalkthrough:
    """Every step of one layer for one query token and one head (all counted from 0).

    Args:
        model: the model whose pass ``analysis`` captured (run again on its tokens, looking
            inside ``layer``).
        analysis: a captured pass (``transformer.lab.inspection.analyse``) without an intervention.
        stack: ``"encoder"`` or ``"decoder"`` (the model must have it).
        layer: the layer in that stack.
        head: the head whose attention arithmetic is shown (the concatenation shows them all).
        query: the position of the query token in the stack's input; a real token, not padding.
        row: the sentence of the batch.
        tokenizer: the model's tokenizer, to label the tokens as every view writes them
            (``"4:␣bread"``, not ``"4:Ġbread"``: :func:`~transformer.text.display.labels_of_pieces`);
            without it, the pieces as stored.

    Returns:
        A :class:`LayerWalkthrough` whose steps follow the model's order: the input (the
        embedding pieces in layer 0), self-attention, cross-attention in a decoder layer of an
        encoder-decoder model, the feed-forward network, the layer's output.
    """
    walk = _checked_walk(model.config, analysis, stack, layer, head, query, row, tokenizer)
    trace = analysis.trace
    layers = trace.encoder_layers if stack == "encoder" else trace.decoder_layers
    record = trace.source if stack == "encoder" else trace.target
    assert record is not None  # _checked_walk refuses an analysis without inputs
    # The layer's own pass again, on the input the analysis's pass gave it, this time keeping
    # what its modules computed (norms, q, k, v, heads, outputs, hidden units) and its weights:
    # every number shown below is that pass's, or (the ÷√d_k and exp steps) an explanatory
    # split of it.
    look = LookInside(stack, layer)
    module = cast(
        EncoderLayer | DecoderLayer,
        (model.encoder if stack == "encoder" else model.decoder).layers[layer],
    )
    with eval_mode(model):
        traced: LayerTrace = _rerun_layer(module, layers[layer], trace.memory, look)
    with eval_mode(model):
        walker = _Walker(walk, model)
        walker.offset = record.position_offset
        walker.look = look
        walker.passed = _passed(traced)
        x = traced.input
        if layer == 0:
            walker.embedding(record, x, decoder=stack == "decoder")
        else:
            walker.layer_input(x, first=False)
        x = walker.self_attention(module, traced, x, trace.causal, record.real_tokens)
        if isinstance(module, DecoderLayer) and module.cross_attention is not None:
            assert trace.source is not None and trace.memory is not None  # it read the memory
            x = walker.cross_attention(module, traced, x, trace.memory, trace.source.real_tokens)
        parallel = isinstance(module, DecoderLayer) and module.parallel
        x = walker.feed_forward(module, x, traced.input if parallel else None)
        walker.add(
            "output",
            "feed-forward",
            f"the output of layer {layer + 1}",
            "x' = the stream after the feed-forward sub-layer",
            full=x,
            explanation=_output_explanation(model.config, stack, layer + 1 == len(layers)),
            code=CODE[f"output.{stack}"],
        )
    return walk


def _output_explanation(config: ModelConfig, stack: str, last: bool) -> str:
    """What the layer's output step says: who reads it next."""
    if not last:
        return "What the next layer reads at this token."
    if config.norm == "pre":
        name = "RMSNorm" if config.norm_kind == "rms" else "LayerNorm"
        return f"The last layer's output: the stack's final {name} comes next " + (
            "(pre-norm)." if config.norm_kind == "rms" else "(pre-LN)."
        )
    if stack == "encoder" and config.has_decoder:
        return (
            "The last layer's output: the encoder's memory, which the decoder's "
            "cross-attention reads."
        )
    return "The last layer's output: what the generator turns into logits."


def _checked_walk(
    config: ModelConfig,
    analysis: Analysis,
    stack: str,
    layer: int,
    head: int,
    query: int,
    row: int,
    tokenizer: Tokenizer | None,
) -> LayerWalkthrough:
    """An empty walkthrough of the choice, once it is checked against the model and the
    analysis (``ValueError`` saying what to fix), with its tokens labelled."""
    trace = analysis.trace
    if stack not in ("encoder", "decoder"):
        raise ValueError(f"stack must be 'encoder' or 'decoder', got {stack!r}")
    if (stack == "encoder" and not config.has_encoder) or (
        stack == "decoder" and not config.has_decoder
    ):
        other = "decoder" if stack == "encoder" else "encoder"
        raise ValueError(f"a {config.architecture} model has no {stack}: choose the {other}")
    layers = trace.encoder_layers if stack == "encoder" else trace.decoder_layers
    record = trace.source if stack == "encoder" else trace.target
    if record is None:
        raise ValueError("the analysis holds no inputs: it was run without capture")
    pieces = analysis.source_pieces if stack == "encoder" else analysis.target_pieces
    _check_index(row, "row", analysis.batch_size)
    _check_index(layer, "layer", len(layers))
    _check_index(head, "head", config.n_heads)
    _check_index(query, "query", record.tokens.size(1))
    real = record.real_tokens[row].cpu()
    choosable = query_positions(record.tokens[row], real, config.pad_id)
    if query not in choosable:
        raise ValueError(
            f"token {query} is padding: choose a real token (0..{max(len(choosable) - 1, 0)})"
        )

    def numbered(sequence: list[str]) -> list[str]:
        shown = labels_of_pieces(tokenizer, sequence) if tokenizer is not None else sequence
        return [f"{n}:{piece}" for n, piece in enumerate(shown)]

    labels = numbered(pieces[row])
    memory_labels = None
    if stack == "decoder" and config.has_encoder:
        memory_labels = numbered(analysis.source_pieces[row])
    return LayerWalkthrough(
        config=config,
        stack=stack,
        layer=layer,
        head=head,
        query=query,
        row=row,
        query_labels=labels,
        key_labels=labels,
        memory_labels=memory_labels,
    )


def _rerun_layer(
    module: EncoderLayer | DecoderLayer,
    kept: LayerTrace,
    memory: Tensor | None,
    look: LookInside,
) -> LayerTrace:
    """The record of ``module`` run again alone on the ``(B, T, d_model)`` input and masks
    the analysis's pass gave it (``kept``, its record there), looking inside it (``look``).

    Only this layer runs: a layer's output depends on nothing but its input, its masks and
    the encoder's ``memory`` (cross-attention), so its numbers are those of a whole pass looking
    inside it, at a thirtieth of SmolLM2's cost. Its attention weights are not kept: the record
    computes them again when read, from the kept queries and keys, bit for bit."""
    run = Run(capture=Capture(keep_attention_weights=False, inside=look))
    with one_pass():
        if isinstance(module, EncoderLayer):
            _, traced = module(kept.input, kept.self_attention.mask, run)
        else:
            encoded = None
            if kept.cross_attention is not None:
                assert memory is not None  # a layer that cross-attended read a memory
                encoded = Encoded(memory=memory, mask=kept.cross_attention.mask)
            _, traced = module(kept.input, kept.self_attention.mask, encoded, None, run)
    assert traced is not None  # a Capture that traces records the layer
    return traced


def _passed(traced: LayerTrace) -> dict[str, tuple[Tensor, Tensor]]:
    """Each sub-layer's ``(B, T, d_model)`` update and the stream after it, as the pass kept them."""
    passed = {}
    for prefix, update, after in (
        ("self", traced.self_attention_update, traced.self_attention_output),
        ("cross", traced.cross_attention_update, traced.cross_attention_output),
        ("ff", traced.feed_forward_update, traced.feed_forward_output),
    ):
        if update is not None and after is not None:
            passed[prefix] = (update, after)
    return passed


def _cpu_or_none(tensor: Tensor | None) -> Tensor | None:
    return None if tensor is None else tensor.cpu()


def check_sentence(text: str | None) -> str:
    """The one sentence a walkthrough reads, stripped; ``ValueError`` saying what to fix."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        raise ValueError("enter a sentence to look inside the layer with")
    if len(lines) > 1:
        raise ValueError("one sentence at a time: put it on one line")
    return lines[0]


def inside_layer(
    model: Transformer,
    tokenizer: Tokenizer,
    text: str,
    stack: str,
    layer: int,
    head: int,
    query: int,
) -> LayerWalkthrough:
    """Analyse one sentence and walk through one layer for one query token and one head.

    For an encoder-decoder model the decoder reads the model's own greedy output, so the query
    of the ``"decoder"`` stack is a position of that output (0 is the start token). Layer,
    head and query are counted from 0. See :func:`walkthrough`.
    """
    sentence = check_sentence(text)
    analysis = analyse(model, tokenizer, [sentence])
    return walkthrough(model, analysis, stack, layer, head, query, tokenizer=tokenizer)
