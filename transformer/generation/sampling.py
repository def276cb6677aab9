"""The distribution a token is drawn from: [PAD] excluded, then temperature, top-k and top-p."""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.config import ModelConfig
from .settings import MIN_TEMPERATURE


def never_generated(config: ModelConfig) -> int | None:
    """The class a model never writes: its [PAD], unless the pad id is also its end-of-text id
    (GPT-2 has no pad token and pads with ``<|endoftext|>``, which it must be able to write)."""
    if config.eos_id is not None and config.pad_id == config.eos_id:
        return None
    return config.pad_id


def without_padding(logits: Tensor, pad_id: int | None) -> Tensor:
    """``logits`` with the ``pad_id`` class set to ``-inf``: the distribution the model predicts
    from. Padding only fills batches; the model never generates it and training gives it no
    probability (:func:`transformer.training.evaluation.sequence_loss` masks it the same way).

    Args:
        logits: ``(..., V)`` raw logits.
        pad_id: the padding id, in ``0..V-1``; ``None`` (see :func:`never_generated`) leaves
            the logits as they are.

    Returns:
        ``(..., V)`` logits, a new tensor (the gradient does not reach the padding logit).
    """
    if pad_id is None:
        return logits
    index = torch.tensor([pad_id], device=logits.device)
    return logits.index_fill(-1, index, float("-inf"))


def best_without_padding(logits: Tensor, pad_id: int | None) -> Tensor:
    """``without_padding(logits, pad_id).argmax(-1)`` without that ``(..., V)`` copy (at
    SmolLM2's 512 tokens, 100 MB): the plain argmax, recomputed without the padding class only
    where it chose it. The same ids, ties and NaN included: an argmax that is not the padding
    class is also the first maximum once that class is removed.

    Args:
        logits: ``(..., V)`` raw logits.
        pad_id: as in :func:`without_padding`.

    Returns:
        ``(...)`` int64 ids.
    """
    best = logits.argmax(-1)
    if pad_id is None:
        return best
    chose_pad = best == pad_id
    if bool(chose_pad.any()):
        best[chose_pad] = without_padding(logits[chose_pad], pad_id).argmax(-1)
    return best


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to ``-inf`` every logit outside the top-k, then outside the top-p nucleus.

    Args:
        logits: ``(..., V)`` (already divided by the temperature).
        top_k: keep the ``top_k`` largest (``None`` or 0: keep all).
        top_p: keep the smallest set of most probable tokens whose probability is ``≥ top_p``;
            the most probable token is always kept (``None`` or 1: keep all).

    Returns:
        ``(..., V)`` logits, a new tensor.
    """
    logits = logits.clone()
    vocab = logits.size(-1)
    if top_k and top_k < vocab:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits[logits < kth] = float("-inf")
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # mass of strictly more probable tokens
        drop_sorted = mass_before >= top_p  # the first token has mass_before 0 < top_p: kept
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits[drop] = float("-inf")
    return logits


def sampling_distribution(
    logits: Tensor, temperature: float, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """The distribution sampling draws from: ``softmax(filter(logits / T))``.

    Args:
        logits: ``(..., V)`` raw logits.
        temperature: ``> 0`` (values below :data:`MIN_TEMPERATURE` are raised to it).

    Returns:
        ``(..., V)`` float32 probabilities summing to 1, zero outside the kept tokens.
    """
    if temperature <= 0:
        raise ValueError("temperature ≤ 0 means greedy: there is no distribution to sample")
    scaled = logits.float() / max(temperature, MIN_TEMPERATURE)
    return filter_logits(scaled, top_k, top_p).softmax(dim=-1)
