"""STAND-IN, NOT DONE: shaped placeholders for ``transformer.research`` until that package lands
on this branch. Their numbers mean nothing; :mod:`.methods` uses them only when the package is
missing, and the page says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from transformer.core.model import Transformer


def _layers(model: Transformer) -> int:
    return model.config.n_decoder_layers


def _noise(*shape: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def activation_patching(
    model: Transformer,
    clean_ids: Tensor,
    corrupted_ids: Tensor,
    answer: int,
    wrong: int,
    site: str,
    *,
    progress: Callable[..., Any] | None = None,
) -> Tensor:
    """Stand-in: ``(layers, positions)`` or ``(layers, heads)`` of noise."""
    columns = model.config.n_heads if site == "head" else clean_ids.shape[-1]
    for done in range(_layers(model)):
        if progress is not None:
            progress(done + 1, _layers(model))
    return _noise(_layers(model), columns).sigmoid()


def head_ablation(model: Transformer, ids: Tensor, how: str, **_: Any) -> Tensor:
    """Stand-in: ``(layers, heads)`` of noise."""
    return _noise(_layers(model), model.config.n_heads).abs() * 0.1


def direct_logit_attribution(model: Transformer, ids: Tensor, token: int) -> dict[str, float]:
    """Stand-in: named parts of noise."""
    names = ["embedding"]
    for layer in range(_layers(model)):
        names += [f"L{layer + 1}H{h + 1}" for h in range(model.config.n_heads)]
        names.append(f"L{layer + 1} MLP")
    values = _noise(len(names))
    return dict(zip(names, values.tolist(), strict=True))


def input_attribution(model: Transformer, ids: Tensor, token: int, method: str) -> Tensor:
    """Stand-in: ``(positions,)`` of noise."""
    return _noise(ids.shape[-1])


def attention_score_parts(
    model: Transformer, ids: Tensor, layer: int, head: int
) -> dict[str, Tensor]:
    """Stand-in: four ``(T, T)`` parts of noise."""
    t = ids.shape[-1]
    names = ["token-token", "token-position", "position-token", "position-position"]
    return {name: _noise(t, t) for name in names}
