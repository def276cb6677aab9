"""Input attribution against captum's own integrated gradients run on ``transformers``' GPT-2
and Llama (grouped-query) with the same weights (through ``inputs_embeds``), and gradient ×
input against a gradient taken by torch on ``transformers``' model."""

from __future__ import annotations

import pytest
import torch
from research_reference import CLEAN, Pair, pair_fixture

from transformer import input_attribution

__all__ = ["pair_fixture"]  # the fixture, by its name `pair`

captum_attr = pytest.importorskip("captum.attr")
TOLERANCE = 1e-4


def _embedded(pair: Pair, ids: list[int]) -> torch.Tensor:
    return pair.theirs.get_input_embeddings()(torch.tensor([ids])).detach()


def _theirs(pair: Pair, token: int):  # type: ignore[no-untyped-def]
    def logit_of(e: torch.Tensor) -> torch.Tensor:
        return pair.theirs(inputs_embeds=e).logits[:, -1, token]

    return _embedded(pair, CLEAN), logit_of


def _padded(pair: Pair) -> list[int]:
    """The baseline's tokens: the prompt's first, then the padding token everywhere."""
    return [CLEAN[0]] + [pair.ours.config.pad_id] * (len(CLEAN) - 1)


@pytest.mark.parametrize("baseline", ["padding", "zero"])
def test_integrated_gradients_equal_captum_on_transformers(pair: Pair, baseline: str) -> None:
    token = int(pair.logits(CLEAN)[0, -1].argmax())
    ours = input_attribution(
        pair.ours,
        CLEAN,
        token,
        "integrated_gradients",
        steps=32,
        baseline=baseline,  # type: ignore[arg-type]
    )
    embeddings, logit_of = _theirs(pair, token)
    start = (
        _embedded(pair, _padded(pair)) if baseline == "padding" else torch.zeros_like(embeddings)
    )
    attributions, delta = captum_attr.IntegratedGradients(logit_of).attribute(
        embeddings, baselines=start, n_steps=32, return_convergence_delta=True
    )
    theirs = attributions.sum(-1)[0]
    scale = theirs.abs().max().item()
    assert (ours.scores - theirs).abs().max().item() <= TOLERANCE * scale
    assert ours.delta == pytest.approx(float(delta[0]), abs=TOLERANCE * scale)
    # Completeness, from transformers' own logits at the input and at the baseline.
    with torch.no_grad():
        gap = logit_of(embeddings).item() - logit_of(start).item()
    assert ours.scores.sum().item() - gap == pytest.approx(ours.delta, abs=TOLERANCE * scale)
    if baseline == "padding":
        assert ours.scores[0].item() == 0.0  # the first token is the baseline's too


def test_the_padding_baseline_is_complete_where_the_zero_one_is_not(pair: Pair) -> None:
    """Llama's first norm divides the bare embeddings by their size: near the all-zero
    baseline it divides by almost nothing, so the logit jumps at the path's start and the
    attributions miss the logit's change. From padding tokens the path is smooth."""
    token = int(pair.logits(CLEAN)[0, -1].argmax())
    gaps = {}
    for baseline in ("padding", "zero"):
        found = input_attribution(
            pair.ours, CLEAN, token, "integrated_gradients", steps=32, baseline=baseline
        )
        assert found.baseline_logit is not None and found.delta is not None
        gaps[baseline] = abs(found.delta) / abs(found.logit - found.baseline_logit)
    assert gaps["padding"] < 0.05
    if pair.name == "llama":
        assert gaps["zero"] > 0.2


def test_gradient_x_input_equals_torch_gradient_on_transformers(pair: Pair) -> None:
    token = int(pair.logits(CLEAN)[0, -1].argmax())
    ours = input_attribution(pair.ours, CLEAN, token, "gradient_x_input")
    embeddings, logit_of = _theirs(pair, token)
    inputs = embeddings.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(logit_of(inputs).sum(), inputs)
    theirs = (gradient * embeddings).sum(-1)[0]
    assert (ours.scores - theirs).abs().max().item() <= TOLERANCE * theirs.abs().max().item()
    assert ours.delta is None
    assert ours.logit == pytest.approx(pair.logits(CLEAN)[0, -1, token].item(), abs=1e-4)


def test_an_unknown_method_is_a_clear_error(pair: Pair) -> None:
    with pytest.raises(ValueError, match="method must be"):
        input_attribution(pair.ours, CLEAN, 1, "saliency")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="baseline must be"):
        input_attribution(pair.ours, CLEAN, 1, baseline="mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least two tokens"):
        input_attribution(pair.ours, CLEAN[:1], 1)
