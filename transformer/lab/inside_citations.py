"""The code a step of Inside a layer cites: a line of the function that computes it.

Each citation names a function (or method) of ``transformer/`` and an *anchor*: a small Python
expression or statement written as the code writes it, with ``...`` standing for any
sub-expression (or, at the end of a call's arguments, for any further arguments). The cited
line is the first line of the function's source (``inspect.getsourcelines``) whose syntax tree
holds a node of that shape, so an edit elsewhere in the file never moves it, and an edit to
the function that removes or renames what the anchor names (a variable, an attribute, the
operation) makes :func:`cite` raise :class:`CitationError` instead of citing something else::

    cite(MultiHeadAttention.forward, "self.w_q(...)")   # the line that projects the queries
    cite(attention_weights, "torch.softmax(...)")       # the softmax the pass runs
    cite(Residual.forward, "sublayer(self.norm(...))")  # pre-LN: the sub-layer reads LN(x)

Matching ignores layout, comments and the load/store context of names; it compares everything
else (names, attributes, operators, constants). A call ``f(a, ...)`` matches any call of ``f``
whose first argument matches ``a``, whatever its further positional and keyword arguments
(keywords the anchor writes must be there too).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]  # the repository (paths shown as transformer/...)


class CitationError(LookupError):
    """A citation's anchor is not (or no longer) in the function it names."""


@dataclass(frozen=True)
class CodeLine:
    """One line of ``transformer/`` that a step cites.

    Attributes:
        path: the file, relative to the repository (``transformer/core/attention.py``).
        line: the cited line, counted from 1 in the file.
        text: that line, stripped.
        function: the qualified name of the function the line belongs to
            (``transformer.core.attention.MultiHeadAttention.forward``).
        first: the function's first line in the file (its ``def`` or first decorator).
        last: the function's last line in the file.
        anchor: the anchor that found the line (see :func:`cite`).
    """

    path: str
    line: int
    text: str
    function: str = ""
    first: int = 0
    last: int = 0
    anchor: str = ""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def _is_wildcard(node: Any) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _matches(pattern: Any, node: Any) -> bool:
    """Whether the syntax tree ``node`` has the shape of ``pattern`` (``...`` matches any)."""
    if _is_wildcard(pattern):
        return isinstance(node, ast.AST)
    if type(pattern) is not type(node):
        return False
    if not isinstance(pattern, ast.AST):
        return bool(pattern == node)
    open_call = (
        isinstance(pattern, ast.Call) and bool(pattern.args) and _is_wildcard(pattern.args[-1])
    )
    for name, value in ast.iter_fields(pattern):
        if name in ("ctx", "type_comment"):
            continue
        other = getattr(node, name, None)
        if open_call and name == "keywords":
            if not all(any(_matches(k, o) for o in other or ()) for k in value):
                return False
        elif isinstance(value, list):
            if not isinstance(other, list) or not _list_matches(value, other):
                return False
        elif not _matches(value, other):
            return False
    return True


def _list_matches(pattern: list[Any], nodes: list[Any]) -> bool:
    if pattern and _is_wildcard(pattern[-1]):  # f(a, ...): any further arguments
        head = pattern[:-1]
        return len(nodes) >= len(head) and all(map(_matches, head, nodes))
    return len(pattern) == len(nodes) and all(map(_matches, pattern, nodes))


def _parse_anchor(anchor: str) -> ast.AST:
    try:
        return ast.parse(anchor, mode="eval").body
    except SyntaxError:
        module = ast.parse(anchor)  # a statement: `return ...`, `x = ...`
        if len(module.body) != 1:
            raise ValueError(f"an anchor is one expression or statement, got {anchor!r}") from None
        return module.body[0]


def qualified_name(function: Callable[..., Any]) -> str:
    """``module.Class.method`` of a function or method."""
    return f"{function.__module__}.{function.__qualname__}"


def cite(function: Callable[..., Any], anchor: str) -> CodeLine:
    """The first line of ``function``'s source holding a node shaped as ``anchor``.

    Raises:
        CitationError: naming the function and the anchor, where no node has that shape (the
            code changed: update the anchor to what the function computes now).
    """
    lines, start = inspect.getsourcelines(function)
    source = Path(inspect.getsourcefile(function) or "").resolve()
    try:
        path = source.relative_to(_ROOT).as_posix()
    except ValueError:
        path = source.name
    pattern = _parse_anchor(anchor)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    found = [
        (node.lineno, node.col_offset)
        for node in ast.walk(tree)
        if isinstance(node, (ast.expr, ast.stmt)) and _matches(pattern, node)
    ]
    if not found:
        raise CitationError(
            f"{qualified_name(function)} ({path}:{start}) holds nothing shaped as {anchor!r}: "
            "its code changed; cite what it computes now"
        )
    offset = min(found)[0] - 1
    return CodeLine(
        path=path,
        line=start + offset,
        text=lines[offset].strip(),
        function=qualified_name(function),
        first=start,
        last=start + len(lines) - 1,
        anchor=anchor,
    )


def _table() -> dict[str, tuple[Callable[..., Any], str]]:
    """Every citation of Inside a layer: a name → (the function that computes it, anchor)."""
    from ..core import attention, operations, rotary
    from ..core.layers import PositionwiseFeedForward
    from ..core.model import Transformer
    from ..core.modern import GatedFeedForward, RMSNorm
    from ..core.stacks import Decoder, DecoderLayer, Encoder, EncoderLayer, Residual

    mha = attention.MultiHeadAttention
    return {
        "embedding.token": (Transformer._embed, "parts.embedding(...)"),
        "embedding.position": (Transformer._embed, "run.ops.positions(...)"),
        "embedding.token_type": (Transformer._source_parts, "self.token_type_embedding(...)"),
        "embedding.sum": (Transformer._embed, "token_vectors + pe"),
        "embedding.sum_types": (Transformer._embed, "x + parts.token_types"),
        "embedding.norm": (Transformer._embed, "parts.norm(...)"),
        "input.encoder": (Encoder.forward, "layer(...)"),
        "input.decoder": (Decoder.forward, "layer(...)"),
        "residual.norm_in": (Residual.forward, "sublayer(self.norm(...))"),
        "residual.output_norm": (Residual.forward, "self.norm(sublayer(...), ...)"),
        "residual.post_norm": (Residual.forward, "self.post_norm(...)"),
        "residual.add": (Residual.forward, "out = x + self.dropout(...)"),
        "residual.norm_out": (Residual.forward, "self.norm(x + self.dropout(...), ...)"),
        "rms_norm": (RMSNorm.normalise, "torch.rsqrt(...)"),
        "attention.q": (mha.forward, "self.w_q(...)"),
        "attention.k": (mha.forward, "self.w_k(...)"),
        "attention.v": (mha.forward, "self.w_v(...)"),
        "attention.qk_norm": (mha._heads, "norm(...)"),
        "attention.dot": (attention.attention_weights, "queries @ keys.transpose(...)"),
        "attention.scale": (attention.scaled_dot_product_attention, "q * scale"),
        "attention.softcap": (attention.attention_weights, "soft_cap(...)"),
        "attention.mask": (attention.attention_scores, "scores.masked_fill_(...)"),
        "attention.softmax": (attention.attention_weights, "torch.softmax(...)"),
        "attention.heads": (attention.scaled_dot_product_attention, "attended @ v"),
        "attention.concat": (operations.merge_heads, "x.transpose(...).reshape(...)"),
        "attention.project": (mha.attend, "self.w_o(...)"),
        "rotary.angles": (rotary.rotary_angles, "positions.float()[..., None]"),
        "rotary.rotate": (rotary.rotate, "rotate_half(...) * sin"),
        "ff.hidden": (PositionwiseFeedForward.units, "self.linear1(...)"),
        "ff.activation": (PositionwiseFeedForward.units, "self.activation(...)"),
        "ff.project": (PositionwiseFeedForward.forward, "self.linear2(...)"),
        "gated.gate": (GatedFeedForward.units, "self.w_gate(...)"),
        "gated.activation": (GatedFeedForward.units, "self.activation(gate)"),
        "gated.up": (GatedFeedForward.units, "self.w_up(...)"),
        "gated.product": (GatedFeedForward.units, "gate * up"),
        "gated.project": (GatedFeedForward.forward, "self.w_down(...)"),
        "output.encoder": (EncoderLayer.forward, "self.feed_forward_residual(...)"),
        "output.decoder": (DecoderLayer.forward, "self.feed_forward_residual(...)"),
    }


CITATIONS: dict[str, tuple[Callable[..., Any], str]] = _table()
"""Every citation by name: the function that computes the step and the anchor in it."""


def resolve(citations: dict[str, tuple[Callable[..., Any], str]]) -> dict[str, CodeLine]:
    """Every citation of ``citations`` found in its function's source now; raises
    :class:`CitationError` naming the first that is not there."""
    return {name: cite(function, anchor) for name, (function, anchor) in citations.items()}


CODE: dict[str, CodeLine] = resolve(CITATIONS)
"""Every citation resolved, at import: an anchor that went stale fails here, not in a figure."""
