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


def _theirs(pair: Pair, token: int):  # type: ignore[no-untyped-def]
    embeddings = pair.theirs.get_input_embeddings()(torch.tensor([CLEAN])).detach()

    def logit_of(e: torch.Tensor) -> torch.Tensor:
        return pair.theirs(inputs_embeds=e).logits[:, -1, token]

    return embeddings, logit_of


def test_integrated_gradients_equal_captum_on_transformers(pair: Pair) -> None:
    token = int(pair.logits(CLEAN)[0, -1].argmax())
    ours = input_attribution(pair.ours, CLEAN, token, "integrated_gradients", steps=32)
    embeddings, logit_of = _theirs(pair, token)
    attributions, delta = captum_attr.IntegratedGradients(logit_of).attribute(
        embeddings,
        baselines=torch.zeros_like(embeddings),
        n_steps=32,
        return_convergence_delta=True,
    )
    theirs = attributions.sum(-1)[0]
    scale = theirs.abs().max().item()
    assert (ours.scores - theirs).abs().max().item() <= TOLERANCE * scale
    assert ours.delta == pytest.approx(float(delta[0]), abs=TOLERANCE * scale)
    # Completeness, from transformers' own logits at the input and at the baseline.
    with torch.no_grad():
        gap = logit_of(embeddings).item() - logit_of(torch.zeros_like(embeddings)).item()
    assert ours.scores.sum().item() - gap == pytest.approx(ours.delta, abs=TOLERANCE * scale)
    if pair.name == "gpt2":  # positions stay in the baseline: a smooth path, closely integrated
        assert abs(ours.delta) < 0.05 * abs(gap)
    # (Llama's first norm makes the logit blind to the embeddings' scale, except within the
    # norm's eps of zero, where it jumps: the rule misses that step, and delta says so.)


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
