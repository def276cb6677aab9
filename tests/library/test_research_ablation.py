"""Head ablation against the same ablations done by plain forward hooks on ``transformers``'
GPT-2 and Llama (grouped-query) with the same weights: a head's slice of the output
projection's input zeroed, or set to its mean over a reference text."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from research_reference import CLEAN, CORRUPTED, Pair, hooked, pair_fixture, recorded

from transformer import Intervention, head_ablation
from transformer.core.run import Call

__all__ = ["pair_fixture"]  # the fixture, by its name `pair`

TEXT = [*CLEAN, 7, 33, 2]
TOLERANCE = 1e-4


def loss(logits: torch.Tensor, ids: list[int]) -> float:
    return F.cross_entropy(logits[0, :-1], torch.tensor(ids[1:])).item()


def reference(pair: Pair, how: str) -> torch.Tensor:
    config = pair.ours.config
    d_head, n_layers = config.d_head, config.n_decoder_layers
    plain = loss(pair.logits(TEXT), TEXT)
    result = torch.empty(n_layers, pair.n_heads)
    for layer in range(n_layers):
        mean = recorded(pair, CORRUPTED, "heads", layer).mean(dim=(0, 1))  # (H·d_head,)
        for head in range(pair.n_heads):
            cols = slice(head * d_head, (head + 1) * d_head)

            def edit(
                x: torch.Tensor, cols: slice = cols, mean: torch.Tensor = mean
            ) -> torch.Tensor:
                x = x.clone()
                x[:, :, cols] = 0.0 if how == "zero" else mean[cols]
                return x

            with hooked(pair, "heads", layer, edit):
                result[layer, head] = loss(pair.logits(TEXT), TEXT) - plain
    return result


@pytest.mark.parametrize("how", ["zero", "mean"])
def test_ablation_equals_hooks_on_transformers(pair: Pair, how: str) -> None:
    reference_ids = CORRUPTED if how == "mean" else None
    ours = head_ablation(pair.ours, TEXT, how, reference_ids=reference_ids, batch_size=3)  # type: ignore[arg-type]
    theirs = reference(pair, how)
    scale = max(theirs.abs().max().item(), 1e-3)
    gap = (ours - theirs).abs().max().item()
    assert gap <= TOLERANCE * scale, f"{pair.name} {how}: max gap {gap:.2e} of {scale:.2e}"
    assert theirs.abs().max().item() > 1e-3  # the heads matter: the check can fail


def test_zero_ablation_is_the_zero_a_head_what_if(pair: Pair) -> None:
    ours = head_ablation(pair.ours, TEXT)
    ids = torch.tensor([TEXT])
    plain = loss(pair.ours(tgt=ids).detach(), TEXT)
    switched = Intervention(zero_heads=frozenset({("decoder_self", 1, 2)}))
    with torch.no_grad():
        off = loss(pair.ours(tgt=ids, call=Call(ops=switched.operations)), TEXT)
    assert ours[1, 2].item() == pytest.approx(off - plain, abs=1e-5)


def test_bad_input_is_a_clear_error(pair: Pair) -> None:
    with pytest.raises(ValueError, match="reference_ids"):
        head_ablation(pair.ours, TEXT, "mean")
    with pytest.raises(ValueError, match="two tokens"):
        head_ablation(pair.ours, TEXT[:1])
