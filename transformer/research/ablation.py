"""Head ablation: switch one attention head off and measure how much worse the model predicts
the text's next tokens.

"Off" is either zero (the head writes nothing) or its mean output over a reference text (the
head writes what it writes on average, so that only what it says about *this* text is lost,
not the typical offset that later layers expect).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.model import Transformer
from ..core.operations import Site
from ._common import Progress, as_ids, logits, n_layers, recorded, source_for, stack_of


def head_ablation(
    model: Transformer,
    ids: Tensor | Sequence[int],
    how: Literal["zero", "mean"] = "zero",
    *,
    reference_ids: Tensor | Sequence[int] | None = None,
    source: Tensor | Sequence[int] | None = None,
    progress: Progress | None = None,
    batch_size: int | None = None,
) -> Tensor:
    """Each head's effect on the mean next-token loss of ``ids``, the head switched off.

    The computation, for each layer ``l`` and head ``h``::

        loss(run)  = mean over t of −log p(ids[t + 1] | ids[..t])      # next-token loss
        off[l, h]  = 0                      (how="zero")
                   = mean of head h's output over every position of reference_ids (how="mean")
        result[l, h] = loss(with head (l, h)'s output replaced by off[l, h]) − loss(plain run)

    A head's output is its weighted values ``(T, d_head)`` before W_O (what
    :attr:`~transformer.core.operations.Operations.zero_heads`, the "zero a head" what-if,
    switches off), of the decoder's self-attention.

    Args:
        model: a model with a decoder (encoder-decoder: with ``source``, fixed).
        ids: the text, ``(T,)`` or ``(1, T)``, at least two tokens.
        how: ``"zero"`` or ``"mean"`` (needs ``reference_ids``).
        reference_ids: the text whose mean head outputs replace a head (``how="mean"``).
        source: the encoder's input of an encoder-decoder model.
        progress: called with ``(done, total)`` ablated runs.
        batch_size: ablated runs computed together (default: about 512 tokens).

    Returns:
        ``(layers, heads)``: the change in mean loss (nats); positive where the head helped.
    """
    text = as_ids(ids)
    if text.size(1) < 2:
        raise ValueError("the text needs at least two tokens: a next token to predict")
    if how not in ("zero", "mean"):
        raise ValueError(f'how must be "zero" or "mean", got {how!r}')
    if (how == "mean") != (reference_ids is not None):
        raise ValueError('reference_ids are needed by how="mean", and only there')
    stack, src = stack_of(model), source_for(model, source)
    n_layer, n_heads = n_layers(model, stack), model.config.n_heads
    cells = [(layer, head) for layer in range(n_layer) for head in range(n_heads)]
    rows = batch_size or max(1, 512 // text.size(1))
    targets = text[0, 1:]

    def loss(out: Tensor) -> Tensor:  # (B, T, V) → (B,) mean next-token loss
        log_p = F.log_softmax(out[:, :-1].float(), dim=-1)
        return -log_p[:, torch.arange(targets.numel()), targets].mean(dim=-1)

    with torch.inference_mode():
        means: dict[Site, Tensor] = {}
        if reference_ids is not None:
            _, kept = recorded(model, as_ids(reference_ids, "reference_ids"), ["heads"], src)
            means = {site: x.mean(dim=(0, 2)) for site, x in kept.items()}  # (H, d_head)
        plain = loss(logits(model, text, src))[0]
        result = torch.empty(len(cells))
        for start in range(0, len(cells), rows):
            chunk = cells[start : start + rows]
            patch = _ablation_of(stack, chunk, means, widen=src is None)
            # A decoder-only batch runs as one row up to its first ablated layer (the layers
            # below are the plain run's in every row) and widens there: about half the work.
            out = logits(model, text if src is None else text.expand(len(chunk), -1), src, patch)
            result[start : start + len(chunk)] = (loss(out) - plain).cpu()
            if progress is not None:
                progress(start + len(chunk), len(cells))
    return result.view(n_layer, n_heads)


def _ablation_of(
    stack: str, cells: list[tuple[int, int]], means: dict[Site, Tensor], *, widen: bool = False
) -> Callable[[Site, Tensor], Tensor]:
    """The patch of one batch: row ``r`` has head ``cells[r]`` (``(layer, head)``) replaced
    by zeros, or by its mean where ``means`` holds it (``(H, d_head)`` a layer). With ``widen``
    the pass starts as one row, repeated into a row a cell at the stream entering the lowest
    layer of ``cells`` (``(1, T, d_model)`` → ``(len(cells), T, d_model)``)."""
    by_layer: dict[int, tuple[list[int], list[int]]] = {}
    for row, (layer, head) in enumerate(cells):
        rows, heads = by_layer.setdefault(layer, ([], []))
        rows.append(row)
        heads.append(head)
    first = min(by_layer)

    def patch(site: Site, x: Tensor) -> Tensor:  # x: (B, H, T, d_head)
        if widen and site == (stack, first, "residual"):
            return x.expand(len(cells), -1, -1).contiguous()
        if site[0] != stack or site[2] != "heads" or site[1] not in by_layer:
            return x
        rows, heads = by_layer[site[1]]
        x = x.clone()
        x[rows, heads] = 0.0 if not means else means[site][heads][:, None, :]
        return x

    return patch
