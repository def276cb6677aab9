"""Activation patching against the same sweep done by plain forward hooks on ``transformers``'
own GPT-2 and Llama (grouped-query) with the same weights, one pass per patch."""

from __future__ import annotations

import pytest
import torch
from research_reference import CLEAN, CORRUPTED, Pair, hooked, pair_fixture, recorded

__all__ = ["pair_fixture"]  # the fixture, by its name `pair`

from transformer import activation_patching

TOLERANCE = 1e-4  # of the metric's range, 0 (corrupted) to 1 (clean)


def answers(pair: Pair) -> tuple[int, int]:
    """The clean run's top token and the corrupted run's (or its second, where they agree)."""
    clean, corrupted = pair.logits(CLEAN)[0, -1], pair.logits(CORRUPTED)[0, -1]
    answer = int(clean.argmax())
    ranked = corrupted.argsort(descending=True).tolist()
    return answer, next(t for t in ranked if t != answer)


def reference(pair: Pair, where: str, shift: int = 0) -> torch.Tensor:
    """The sweep by hooks: for each layer and position (head), the clean activation written
    into the corrupted pass; ``shift`` writes it one position off (a wrong choice)."""
    answer, wrong = answers(pair)

    def metric(out: torch.Tensor) -> float:
        return float(out[0, -1, answer] - out[0, -1, wrong])

    clean, corrupted = metric(pair.logits(CLEAN)), metric(pair.logits(CORRUPTED))
    n_layers = pair.ours.config.n_decoder_layers
    d_head = pair.ours.config.d_head
    width = pair.n_heads if where == "heads" else len(CLEAN)
    result = torch.empty(n_layers, width)
    for layer in range(n_layers):
        kept = recorded(pair, CLEAN, where, layer)
        for i in range(width):

            def edit(x: torch.Tensor, i: int = i, kept: torch.Tensor = kept) -> torch.Tensor:
                x = x.clone()
                if where == "heads":
                    cols = slice(i * d_head, (i + 1) * d_head)
                    x[:, :, cols] = kept[:, :, cols]
                else:
                    p = (i + shift) % x.size(1)
                    x[:, p] = kept[:, p]
                return x

            with hooked(pair, where, layer, edit):
                result[layer, i] = (metric(pair.logits(CORRUPTED)) - corrupted) / (
                    clean - corrupted
                )
    return result


@pytest.mark.parametrize("site", ["residual", "attention", "mlp", "head"])
def test_patching_equals_hooks_on_transformers(pair: Pair, site: str) -> None:
    answer, wrong = answers(pair)
    seen: list[tuple[int, int]] = []
    ours = activation_patching(
        pair.ours,
        CLEAN,
        CORRUPTED,
        answer,
        wrong,
        site,  # type: ignore[arg-type]
        progress=lambda done, total: seen.append((done, total)),
        batch_size=5,
    )
    theirs = reference(pair, "heads" if site == "head" else site)
    assert ours.shape == theirs.shape
    gap = (ours - theirs).abs().max().item()
    assert gap <= TOLERANCE, f"{pair.name} {site}: max gap {gap:.2e}"
    assert seen[-1][0] == seen[-1][1] == ours.numel()
    if site == "residual":
        # Where the two prompts have the same token, the first layer's inputs are equal:
        # patching one changes nothing.
        same = [i for i, (a, b) in enumerate(zip(CLEAN, CORRUPTED, strict=True)) if a == b]
        assert ours[0, same].abs().max().item() <= TOLERANCE


def test_patching_the_wrong_position_misses(pair: Pair) -> None:
    answer, wrong = answers(pair)
    ours = activation_patching(pair.ours, CLEAN, CORRUPTED, answer, wrong, "residual")
    off_by_one = reference(pair, "residual", shift=1)
    assert (ours - off_by_one).abs().max().item() > 100 * TOLERANCE


def test_bad_input_is_a_clear_error(pair: Pair) -> None:
    with pytest.raises(ValueError, match="same number of tokens"):
        activation_patching(pair.ours, CLEAN, CLEAN[:-1], 1, 2)
    with pytest.raises(ValueError, match="nothing for a patch to restore"):
        activation_patching(pair.ours, CLEAN, CLEAN, 1, 2)
    with pytest.raises(ValueError, match="site must be"):
        activation_patching(pair.ours, CLEAN, CORRUPTED, 1, 2, "everything")  # type: ignore[arg-type]
