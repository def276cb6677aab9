"""Direct logit attribution against the same parts read by plain forward hooks on
``transformers``' GPT-2 and Llama (grouped-query) with the same weights, through their final
norm with its divisor frozen at the real pass; normalising each part on its own breaks the sum."""

from __future__ import annotations

import pytest
import torch
from research_reference import CLEAN, Pair, pair_fixture, recorded

from transformer import ModelConfig, Transformer, direct_logit_attribution

__all__ = ["pair_fixture"]  # the fixture, by its name `pair`

TOLERANCE = 1e-4


def reference_parts(pair: Pair, token: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Each part's ``(d_model,)`` write into the last position's stream, read by hooks, and
    the stream the final norm reads."""
    config = pair.ours.config
    d_head = config.d_head
    parts = {"embedding": recorded(pair, CLEAN, "residual", 0)[0, -1]}
    biases = torch.zeros(config.d_model)
    for layer in range(config.n_decoder_layers):
        z = recorded(pair, CLEAN, "heads", layer)[0, -1]  # (H·d_head,)
        projection = pair.out_projection(layer)
        for head in range(pair.n_heads):
            cols = slice(head * d_head, (head + 1) * d_head)
            if pair.name == "gpt2":  # Conv1D: x @ W, W (in, out)
                parts[f"L{layer}H{head}"] = z[cols] @ projection.weight[cols]
            else:  # Linear: W x, W (out, in)
                parts[f"L{layer}H{head}"] = projection.weight[:, cols] @ z[cols]
        if getattr(projection, "bias", None) is not None:
            biases += projection.bias.detach()
        parts[f"L{layer} MLP"] = recorded(pair, CLEAN, "mlp", layer)[0, -1]
    if biases.any():
        parts["attention biases"] = biases
    kept: list[torch.Tensor] = []
    handle = pair.final_norm().register_forward_pre_hook(lambda m, a: kept.append(a[0].clone()))
    pair.logits(CLEAN)
    handle.remove()
    return parts, kept[0][0, -1]


def frozen(pair: Pair, c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    norm = pair.final_norm()
    if pair.name == "gpt2":
        return norm.weight * (c - c.mean()) / torch.sqrt(x.var(unbiased=False) + norm.eps)
    return norm.weight * c / torch.sqrt(x.pow(2).mean() + norm.variance_epsilon)


def test_parts_equal_hooks_on_transformers_and_sum_to_the_logit(pair: Pair) -> None:
    token = int(pair.logits(CLEAN)[0, -1].argmax())
    logit = pair.logits(CLEAN)[0, -1, token].item()
    ours = direct_logit_attribution(pair.ours, CLEAN, token)
    parts, x = reference_parts(pair, token)
    u = pair.theirs.lm_head.weight[token]
    with torch.no_grad():
        theirs = {name: (frozen(pair, c, x) @ u).item() for name, c in parts.items()}
        if pair.name == "gpt2":
            theirs["final norm bias"] = (pair.final_norm().bias @ u).item()
    assert list(ours) == list(theirs)
    scale = max(abs(v) for v in theirs.values())
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(value, abs=TOLERANCE * scale), name
    assert sum(ours.values()) == pytest.approx(logit, abs=TOLERANCE * scale)
    assert sum(theirs.values()) == pytest.approx(logit, abs=TOLERANCE * scale)


def test_an_unfrozen_norm_breaks_the_sum(pair: Pair) -> None:
    """Each part normalised by its own divisor (the norm applied to it alone): no longer the
    logit."""
    token = int(pair.logits(CLEAN)[0, -1].argmax())
    logit = pair.logits(CLEAN)[0, -1, token].item()
    parts, _ = reference_parts(pair, token)
    u = pair.theirs.lm_head.weight[token]
    with torch.no_grad():
        unfrozen = sum((frozen(pair, c, c) @ u).item() for c in parts.values())
    scale = max(abs(v) for v in direct_logit_attribution(pair.ours, CLEAN, token).values())
    assert abs(unfrozen - logit) > 100 * TOLERANCE * scale


def test_a_post_norm_model_is_refused_clearly() -> None:
    model = Transformer(ModelConfig(architecture="decoder-only", n_decoder_layers=1)).eval()
    with pytest.raises(ValueError, match="pre-norm"):
        direct_logit_attribution(model, [1, 5, 6], 7)
