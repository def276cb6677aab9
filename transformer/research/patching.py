"""Activation patching: which activation, copied from a clean run into a corrupted one, brings
the clean answer back?

Two prompts of the same length differ in a few tokens ("The Eiffel Tower is in the city of" /
"The Colosseum is in the city of"). The metric is the logit difference of two answers at the
last position (" Paris" − " Rome"); patching one activation of the clean run into the
corrupted run and measuring again shows how much of the difference that activation carries,
on a scale where 0 is the corrupted run and 1 the clean run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import Tensor

from ..core.model import Transformer
from ..core.operations import Site
from ._common import Progress, as_ids, check_token, logits, n_layers, recorded, source_for, stack_of

PatchSite = Literal["residual", "attention", "mlp", "head", "cross"]
_WHAT = {
    "residual": "residual",
    "attention": "attention",
    "mlp": "mlp",
    "head": "heads",
    "cross": "cross",
}


def activation_patching(
    model: Transformer,
    clean_ids: Tensor | Sequence[int],
    corrupted_ids: Tensor | Sequence[int],
    answer: int,
    wrong: int,
    site: PatchSite = "residual",
    *,
    source: Tensor | Sequence[int] | None = None,
    corrupted_source: Tensor | Sequence[int] | None = None,
    progress: Progress | None = None,
    batch_size: int | None = None,
) -> Tensor:
    """Patch each activation of the clean run into the corrupted run, one at a time.

    The computation, for each layer ``l`` and position ``p`` (or head ``h``)::

        metric(run) = logits[-1, answer] − logits[-1, wrong]          # at the last position
        patched     = metric(corrupted run, with clean[l][p] in place of corrupted[l][p])
        result[l, p] = (patched − metric(corrupted)) / (metric(clean) − metric(corrupted))

    Args:
        model: a model with a decoder (decoder-only, or encoder-decoder with ``source``).
        clean_ids, corrupted_ids: the two prompts, ``(T,)`` or ``(1, T)``, of the same length.
        answer, wrong: the two answer tokens of the metric (the clean and the corrupted one).
        site: what is patched, at every layer of the decoder:

            - ``"residual"``: the residual stream *entering* each layer, at each position;
            - ``"attention"``: each self-attention layer's output (after W_O), at each position;
            - ``"mlp"``: each feed-forward's output, at each position;
            - ``"head"``: each head's output (its weighted values, before W_O), at every
              position at once;
            - ``"cross"``: each cross-attention layer's output (after W_O), at each position,
              on an encoder-decoder model: where the decoder reads the source.
        source: the encoder's input of an encoder-decoder model, the same for both runs (the
            prompts are then the decoder's input and the layers the decoder's).
        corrupted_source: the corrupted run's source where it differs from ``source`` (two
            sources one word apart, the decoder's prompt the same): the decoder's activations
            are still what is patched, so the sweep shows where in the decoder the changed
            word arrives through cross-attention.
        progress: called with ``(done, total)`` patched runs as the sweep goes.
        batch_size: patched runs computed together in one batch (default: about 512 tokens).

    Returns:
        ``(layers, positions)`` for ``"residual"``, ``"attention"`` and ``"mlp"``; ``(layers,
        heads)`` for ``"head"``: 0 where the patch changes nothing, 1 where it restores the
        clean run's logit difference.
    """
    if site not in _WHAT:
        raise ValueError(f"site must be one of {sorted(_WHAT)}, got {site!r}")
    clean, corrupted = as_ids(clean_ids, "clean_ids"), as_ids(corrupted_ids, "corrupted_ids")
    if clean.shape != corrupted.shape:
        raise ValueError(
            f"the clean and corrupted prompts must have the same number of tokens "
            f"({clean.size(1)} and {corrupted.size(1)})"
        )
    if site == "cross" and not model.config.has_encoder:
        raise ValueError("only an encoder-decoder model has cross-attention to patch")
    answer, wrong = check_token(model, answer, "answer"), check_token(model, wrong, "wrong")
    stack, src, what = stack_of(model), source_for(model, source), _WHAT[site]
    src_corrupted = src if corrupted_source is None else source_for(model, corrupted_source)
    n_layer = n_layers(model, stack)
    width = model.config.n_heads if site == "head" else clean.size(1)
    cells = [(layer, i) for layer in range(n_layer) for i in range(width)]
    rows = batch_size or max(1, 512 // clean.size(1))

    def metric(out: Tensor) -> Tensor:  # (B, T, V) → (B,) logit differences
        return out[:, -1, answer] - out[:, -1, wrong]

    with torch.inference_mode():
        clean_logits, kept = recorded(model, clean, [what], src)
        clean_metric = metric(clean_logits)[0]
        corrupted_metric = metric(logits(model, corrupted, src_corrupted))[0]
        span = clean_metric - corrupted_metric
        if abs(float(span)) < 1e-6:
            raise ValueError(
                "the clean and corrupted prompts give the same logit difference: there is "
                "nothing for a patch to restore (choose prompts or answers that differ)"
            )
        result = torch.empty(len(cells))
        for start in range(0, len(cells), rows):
            chunk = cells[start : start + rows]
            patch = _patch_of(stack, what, chunk, kept)
            out = logits(model, corrupted.expand(len(chunk), -1), src_corrupted, patch)
            result[start : start + len(chunk)] = ((metric(out) - corrupted_metric) / span).cpu()
            if progress is not None:
                progress(start + len(chunk), len(cells))
    return result.view(n_layer, width)


def _patch_of(
    stack: str, what: str, cells: list[tuple[int, int]], clean: dict[Site, Tensor]
) -> Callable[[Site, Tensor], Tensor]:
    """The patch of one batch: row ``r`` takes the clean run's activation at ``cells[r]``
    (``(layer, position)``, or ``(layer, head)`` for heads: axis 1 of ``(B, H, T, d_head)``)."""
    by_layer: dict[int, tuple[list[int], list[int]]] = {}
    for row, (layer, index) in enumerate(cells):
        rows, indices = by_layer.setdefault(layer, ([], []))
        rows.append(row)
        indices.append(index)

    def patch(site: Site, x: Tensor) -> Tensor:
        if site[0] != stack or site[2] != what or site[1] not in by_layer:
            return x
        rows, indices = by_layer[site[1]]
        x = x.clone()
        x[rows, indices] = clean[site][0, indices]  # row r, position (or head) indices[r]
        return x

    return patch
