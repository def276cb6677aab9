"""How well a model reads a text: mean negative log-likelihood and perplexity.

The meter of the silent mistakes (:mod:`transformer.lab.silent_mistakes`): a broken model may still
write fluent text, but it reads a plain reference paragraph (``assets/reference/paragraph.txt``)
worse, and the number says by how much. ``NLL = −(1/N) Σ log p(token_t+1 | tokens ≤ t)`` over
the paragraph's N predicted tokens; perplexity is ``exp(NLL)``, the number of equally likely
choices the model is, on average, hesitating between.

The paragraph is read the way a long prompt is decoded: ``chunk`` tokens at a time through the
key/value cache, so a mistake that only shows once there is a cache (rotary positions that
forget the cache length) shows here too. Read correctly, the chunked and the one-pass readings
agree (a test checks it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.model import Transformer
from ..core.operations import PAPER, Operations
from ..core.run import Call
from ..core.util import eval_mode

REFERENCE_PARAGRAPH = Path(__file__).resolve().parents[2] / "assets" / "reference" / "paragraph.txt"
METER_CHUNK = 16
"""Tokens the meter feeds per call (as a prompt is prefilled, then read through the cache)."""


def reference_paragraph() -> str:
    """The meter's reference paragraph (plain English, about 150 SmolLM2 tokens)."""
    return REFERENCE_PARAGRAPH.read_text(encoding="utf-8").strip()


@dataclass(frozen=True)
class Reading:
    """How well a model read a text: mean ``nll`` (nats per token) over ``tokens`` predicted
    tokens, and ``perplexity`` = exp(nll)."""

    nll: float
    tokens: int

    @property
    def perplexity(self) -> float:
        """``exp(nll)``: the average number of choices the model hesitated between."""
        return math.exp(self.nll) if self.nll < 700 else math.inf


def read_logits(
    model: Transformer, ids: Tensor, ops: Operations = PAPER, chunk: int | None = None
) -> Tensor:
    """Next-token logits ``(B, T, V)`` of a decoder-only model for ``(B, T)`` ids, in one pass
    (``chunk=None``) or ``chunk`` positions at a time through the key/value cache."""
    if model.config.architecture != "decoder-only":
        raise ValueError(f"a {model.config.architecture} model does not read a text alone")
    if ids.dim() != 2 or ids.size(1) < 2:
        raise ValueError("give (batch, length) ids, at least two tokens long")
    if ids.size(1) > model.config.max_len:
        raise ValueError(f"the text has {ids.size(1)} tokens, more than max_len")
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    with torch.inference_mode(), eval_mode(model):
        if chunk is None:
            return model.decode(ids, call=Call(ops=ops)).logits
        cache = model.new_cache()
        parts = [
            model.decode(ids[:, start : start + chunk], cache=cache, call=Call(ops=ops)).logits
            for start in range(0, ids.size(1), chunk)
        ]
    return torch.cat(parts, dim=1)


def read_text(
    model: Transformer,
    ids: Sequence[int] | Tensor,
    ops: Operations = PAPER,
    chunk: int | None = METER_CHUNK,
) -> Reading:
    """The mean NLL and perplexity of ``model`` on one sequence of ``ids`` (``(T,)``): each
    token from the second on predicted from those before it. See :func:`read_logits`."""
    tokens = torch.as_tensor(list(ids) if not isinstance(ids, Tensor) else ids)
    tokens = tokens.to(model.device).view(1, -1)
    logits = read_logits(model, tokens, ops, chunk)  # (1, T, V)
    nll = F.cross_entropy(logits[0, :-1].float(), tokens[0, 1:])
    value = float(nll)
    return Reading(nll=value if math.isfinite(value) else math.inf, tokens=tokens.size(1) - 1)


__all__ = [
    "METER_CHUNK",
    "REFERENCE_PARAGRAPH",
    "Reading",
    "read_logits",
    "read_text",
    "reference_paragraph",
]
