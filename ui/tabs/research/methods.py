"""The research methods the tab draws: ``transformer.research``'s, read into plain values.

The library's results are read here once (a tensor, a mapping of named parts, a record with a
completeness delta), so the handlers and figures see one shape whatever form the library
returns."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from transformer.research import (
    activation_patching,
    attention_score_parts,
    direct_logit_attribution,
    head_ablation,
    input_attribution,
)

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


BANDS = 4
"""Rotary pairs are drawn in this many bands (a head has 32 pairs in SmolLM2: too many panels)."""


def in_bands(parts: Mapping[str, Tensor], bands: int = BANDS) -> dict[str, Tensor]:
    """Rotary parts (``"pair 0"`` … fastest first) summed into ``bands`` bands of neighbouring
    frequencies, named by their pairs from 1 (``"pairs 1-8 (fastest)"``); other parts kept
    as they are. The bands sum to what the pairs sum to."""
    pairs = [name for name in parts if re.fullmatch(r"pair \d+", name)]
    if len(pairs) <= bands:
        return dict(parts)
    pairs.sort(key=lambda name: int(name.split()[1]))
    out: dict[str, Tensor] = {}
    size = -(-len(pairs) // bands)
    for band, start in enumerate(range(0, len(pairs), size)):
        chunk = pairs[start : start + size]
        first, last = int(chunk[0].split()[1]) + 1, int(chunk[-1].split()[1]) + 1
        speed = " (fastest)" if band == 0 else " (slowest)" if start + size >= len(pairs) else ""
        out[f"pairs {first}-{last}{speed}"] = torch.stack([parts[n] for n in chunk]).sum(0)
    for name, value in parts.items():
        if name not in pairs:
            out[name] = value
    return out


__all__ = [
    "activation_patching",
    "attention_score_parts",
    "direct_logit_attribution",
    "head_ablation",
    "input_attribution",
]
