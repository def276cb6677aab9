"""The research methods the tab draws: ``transformer.research``'s, read into plain values.

The library's results are read here once (a tensor, a mapping of named parts, a record with a
completeness delta), so the handlers and figures see one shape whatever form the library
returns."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

_library: Any
try:
    _library = importlib.import_module("transformer.research")
except ImportError:  # the library has not landed on this branch yet
    _library = None
_stand_in = importlib.import_module(f"{__package__}.standin")

# The methods the library does not have yet, drawn by the stand-in (the page says so).
STAND_INS = frozenset(
    name
    for name in (
        "activation_patching",
        "head_ablation",
        "direct_logit_attribution",
        "input_attribution",
        "attention_score_parts",
    )
    if getattr(_library, name, None) is None
)
STAND_IN = bool(STAND_INS)


def _method(name: str) -> Callable[..., Any]:
    found: Callable[..., Any] = getattr(_library, name, None) or getattr(_stand_in, name)
    return found


activation_patching = _method("activation_patching")
head_ablation = _method("head_ablation")
direct_logit_attribution = _method("direct_logit_attribution")
input_attribution = _method("input_attribution")
attention_score_parts = _method("attention_score_parts")

_ROOT = Path(__file__).resolve().parents[3]


def source_of(function: Callable[..., Any]) -> str:
    """The code of ``function`` as the page shows it: a first line naming its file and lines
    (``# transformer/research/patching.py, lines 40-72``), then its source."""
    target = inspect.unwrap(function)
    lines, first = inspect.getsourcelines(target)
    path = Path(inspect.getsourcefile(target) or "")
    try:
        shown = path.resolve().relative_to(_ROOT).as_posix()
    except ValueError:
        shown = path.name
    header = f"# {shown}, lines {first}-{first + len(lines) - 1}"
    return header + "\n" + "".join(lines)


@dataclass(frozen=True)
class Parts:
    """Named parts of a quantity (direct logit attribution, the score's parts)."""

    names: list[str]
    values: list[Any]


def as_parts(result: Any) -> Parts:
    """The library's named parts, whether a mapping or a record holding one (``parts``)."""
    mapping = result if isinstance(result, Mapping) else getattr(result, "parts", None)
    if not isinstance(mapping, Mapping):
        raise TypeError(f"expected named parts, got {type(result).__name__}")
    return Parts([str(name) for name in mapping], list(mapping.values()))


def shown_part(name: str) -> str:
    """A part's name as the page numbers layers and heads, from 1 (the library's ``"L0H3"``
    is ``"L1H4"``)."""
    return re.sub(r"(?<![A-Za-z])([LH])(\d+)", lambda m: f"{m[1]}{int(m[2]) + 1}", name)


def as_scalar(value: Any) -> float:
    """A number from a float or a one-element tensor."""
    return float(value.item() if isinstance(value, Tensor) else value)


def real_logit(result: Any) -> float | None:
    """The real logit a direct-logit-attribution record carries, where it carries one."""
    for name in ("logit", "real_logit", "total"):
        value = getattr(result, name, None)
        if value is not None and not callable(value):
            return as_scalar(value)
    return None


def as_scores(result: Any) -> tuple[Tensor, float | None]:
    """Input attribution's ``(positions,)`` scores and, for integrated gradients, its
    completeness delta (``None`` where the library gives none)."""
    delta = None
    if isinstance(result, tuple):
        scores, delta = result[0], (result[1] if len(result) > 1 else None)
    elif isinstance(result, Tensor):
        scores = result
    else:
        scores = getattr(result, "scores", None)
        delta = getattr(result, "delta", getattr(result, "completeness", None))
    if not isinstance(scores, Tensor):
        scores = torch.as_tensor(scores)
    return scores.detach().float().reshape(-1).cpu(), (None if delta is None else as_scalar(delta))
