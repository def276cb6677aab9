"""What a decoding step leaves behind: a :class:`StepRecord` per token, a :class:`Beam` per
hypothesis of beam search."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from .lens import LogitLens, ResidualNorms


@dataclass
class Beam:
    """One beam-search hypothesis after a step.

    ``tokens`` is the whole sequence (prefix included), ending at [EOS] when ``finished``;
    ``score`` the summed log-probability of its generated tokens (nats); ``rank_score`` what
    beams are ranked by (``score / length ** length_penalty``); ``parent`` the index of the beam
    it extends among the previous step's beams.
    """

    tokens: list[int]
    score: float
    rank_score: float
    finished: bool
    parent: int


@dataclass
class StepRecord:
    """What happened at one generation step.

    Attributes:
        step: index of the step, from 0.
        tokens: the ids the model read: the prefix ([BOS], or the prompt) plus earlier choices
            (for beam search, those of the best hypothesis extended at this step).
        top_ids: the ``top_k_shown`` most probable next ids, most probable first.
        top_probs: their probabilities under the model (``softmax(logits)``, temperature 1, with
            [PAD] excluded: see :func:`without_padding`).
        entropy: entropy of the model's next-token distribution, in nats.
        chosen_id: the id chosen at this step (appended to ``tokens``).
        chosen_prob: its probability under the model.
        method: how it was chosen, e.g. ``"greedy"`` or ``"sample (T=0.8, top-p=0.9)"``.
        sampling_probs: for sampling, the probability of each of ``top_ids`` under the
            distribution actually sampled from (temperature and filtering applied), else ``None``.
        chosen_sampling_prob: for sampling, the chosen id's probability under that distribution.
        chosen_rank: the chosen id's rank under the model (1 = most probable), so that a chosen
            token outside ``top_ids`` can be shown where it stands.
        self_attention: ``(L, H, Tk)`` float32, the new query row of the decoder's masked
            self-attention (keys: ``tokens``), when attention is captured.
        cross_attention: ``(L, H, Ts)`` float32, the new query row of cross-attention (keys: the
            source), when captured and the model has an encoder.
        beams: for beam search, every hypothesis after this step, best first.
        logits: ``(V,)`` float32 raw logits (the [PAD] logit as the model computed it), when
            ``keep_logits`` is set.
        top_labels / chosen_label: ``decode_token`` of ``top_ids`` / ``chosen_id`` when given.
        row: the hypothesis (row of the step's batch) the record follows: 0 unless beam search.
        lens: when ``capture_lens`` is set, the logit lens at the position that chose the token,
            read from the step's own captured pass and following ``chosen_id``.
        residual: when ``capture_lens`` is set, per hypothesis (row), the residual stream's norms
            at the positions this step's pass fed (the prefix on the first step with the cache,
            then one position; every position without it):
            :meth:`DecodingSession.residual_stream` joins them along the hypothesis.
    """

    step: int
    tokens: list[int]
    top_ids: list[int]
    top_probs: list[float]
    entropy: float
    chosen_id: int
    chosen_prob: float
    method: str
    sampling_probs: list[float] | None = None
    chosen_sampling_prob: float | None = None
    chosen_rank: int | None = None
    self_attention: np.ndarray | None = None
    cross_attention: np.ndarray | None = None
    beams: list[Beam] | None = None
    logits: np.ndarray | None = None
    top_labels: list[str] | None = None
    chosen_label: str | None = None
    row: int = 0
    lens: LogitLens | None = None
    residual: list[ResidualNorms] | None = None


_Kept = TypeVar("_Kept")


def own_storage(value: _Kept) -> _Kept:
    """``value`` with every tensor and array in it holding only its own elements: a tensor that
    views a larger storage (``probs[:, chosen]`` is a ``(L,)`` view of the whole ``(L, V)``
    distribution) is copied, and so is a numpy view of a larger array. Dataclasses, lists,
    tuples and dicts are walked; anything else is returned as it is.

    A session keeps one record per step for as long as it lives: a ``(L,)`` view of SmolLM2's
    ``(31, 49,152)`` lens distribution kept 6 MB a step alive, 243 MB for 40 tokens."""
    return _own(value)


def _own(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.untyped_storage().nbytes() > value.numel() * value.element_size():
            return value.clone()
        return value
    if isinstance(value, np.ndarray):
        return value.copy() if value.base is not None else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for item in dataclasses.fields(value):
            if not item.init:
                continue
            old = getattr(value, item.name)
            new = _own(old)
            if new is not old:
                changes[item.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, list):
        items = [_own(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, tuple):
        items = [_own(item) for item in value]
        changed = any(a is not b for a, b in zip(items, value, strict=True))
        if not changed:
            return value
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        kept = {key: _own(item) for key, item in value.items()}
        changed = any(kept[key] is not value[key] for key in value)
        return kept if changed else value
    return value
