"""What the research methods share: checking their inputs, running the model with a patch
(:attr:`~transformer.core.operations.Operations.patch`), and recording the activations a pass
computed at chosen sites."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

import torch
from torch import Tensor

from ..core.model import Transformer
from ..core.operations import PAPER, Site
from ..core.run import Call

Progress = Callable[[int, int], object]
"""Called with ``(done, total)`` as a method works through its passes (a page's progress bar)."""


def as_ids(ids: Tensor | Sequence[int], what: str = "ids") -> Tensor:
    """``(1, T)`` long token ids from a list, a ``(T,)`` or a ``(1, T)`` tensor; ``ValueError``
    for any other shape or an empty text."""
    tensor = torch.as_tensor(ids, dtype=torch.long)
    if tensor.dim() == 1:
        tensor = tensor[None]
    if tensor.dim() != 2 or tensor.size(0) != 1:
        raise ValueError(
            f"{what} must be one sequence of token ids, got shape {tuple(tensor.shape)}"
        )
    if tensor.size(1) == 0:
        raise ValueError(f"{what} is empty: give at least one token")
    return tensor


def stack_of(model: Transformer) -> str:
    """The stack whose layers and positions the methods read: the decoder (the stack that
    predicts the next token; of an encoder-decoder model too, its source held fixed)."""
    if not model.config.has_decoder:
        raise ValueError(
            "this model has no decoder: it predicts no next token, which these methods explain"
        )
    return "decoder"


def check_token(model: Transformer, token: int, what: str = "token") -> int:
    """``token`` as an int inside the model's output vocabulary, else ``ValueError``."""
    vocab = model.generator.proj.out_features
    if not 0 <= int(token) < vocab:
        raise ValueError(f"{what} id {token} is outside the vocabulary 0..{vocab - 1}")
    return int(token)


def source_for(model: Transformer, source: Tensor | Sequence[int] | None) -> Tensor | None:
    """The ``(1, Ts)`` source of an encoder-decoder model (required there), ``None`` for a
    decoder-only one (where giving one is an error)."""
    if model.config.has_encoder:
        if source is None:
            raise ValueError("an encoder-decoder model needs the source text: pass source=ids")
        return as_ids(source, "source")
    if source is not None:
        raise ValueError("a decoder-only model reads no source: leave source out")
    return None


def logits(
    model: Transformer,
    ids: Tensor,
    source: Tensor | None = None,
    patch: Callable[[Site, Tensor], Tensor] | None = None,
) -> Tensor:
    """``(B, T, V)`` logits of the ``(B, T)`` ``ids`` (with ``source`` repeated for each row,
    on an encoder-decoder model), every site offered to ``patch``."""
    ops = PAPER if patch is None else replace(PAPER, patch=patch)
    src = None if source is None else source.expand(ids.size(0), -1)
    return model(src, ids, call=Call(ops=ops))


def recorded(
    model: Transformer,
    ids: Tensor,
    whats: Iterable[str],
    source: Tensor | None = None,
) -> tuple[Tensor, dict[Site, Tensor]]:
    """One pass's ``(B, T, V)`` logits and what it computed at every site named in ``whats``
    (``{(stack, layer, what): tensor}``, copies)."""
    wanted = set(whats)
    kept: dict[Site, Tensor] = {}

    def keep(site: Site, x: Tensor) -> Tensor:
        if site[2] in wanted:
            kept[site] = x.detach().clone()
        return x

    return logits(model, ids, source, keep), kept


def n_layers(model: Transformer, stack: str) -> int:
    """The number of layers of ``stack``."""
    config = model.config
    return config.n_decoder_layers if stack == "decoder" else config.n_encoder_layers
