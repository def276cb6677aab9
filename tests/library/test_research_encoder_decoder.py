"""The research methods on the 2017 encoder-decoder models read the decoder, the source held
fixed: what they return against the model's own passes (logits, the zero-a-head what-if)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer import (
    Intervention,
    ModelConfig,
    Transformer,
    activation_patching,
    direct_logit_attribution,
    head_ablation,
    input_attribution,
)
from transformer.core.run import Call

SOURCE = [4, 9, 13, 7, 22, 5]
CLEAN, CORRUPTED = [1, 8, 30, 2, 17], [1, 8, 11, 25, 17]


def model_of(norm: str) -> Transformer:
    torch.manual_seed(3)
    config = ModelConfig(src_vocab_size=40, tgt_vocab_size=40, dropout=0.0, norm=norm)  # type: ignore[arg-type]
    return Transformer(config).eval()


def last_logits(model: Transformer, target: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([SOURCE]), torch.tensor([target]))[0, -1]


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_patching_reads_the_decoder_with_the_source_fixed(norm: str) -> None:
    model = model_of(norm)
    answer, wrong = (
        int(last_logits(model, CLEAN).argmax()),
        int(last_logits(model, CORRUPTED).argmax()),
    )
    if answer == wrong:
        wrong = int(last_logits(model, CORRUPTED).argsort()[-2])
    result = activation_patching(model, CLEAN, CORRUPTED, answer, wrong, source=SOURCE)
    assert result.shape == (model.config.n_decoder_layers, len(CLEAN))
    same = [i for i, (a, b) in enumerate(zip(CLEAN, CORRUPTED, strict=True)) if a == b]
    assert result[0, same].abs().max().item() < 1e-5  # equal tokens: nothing to patch
    heads = activation_patching(model, CLEAN, CORRUPTED, answer, wrong, "head", source=SOURCE)
    assert heads.shape == (model.config.n_decoder_layers, model.config.n_heads)
    with pytest.raises(ValueError, match="source"):
        activation_patching(model, CLEAN, CORRUPTED, answer, wrong)


def test_zero_ablation_equals_the_what_if_on_the_decoder() -> None:
    model = model_of("post")
    ours = head_ablation(model, CLEAN, source=SOURCE)
    src, tgt = torch.tensor([SOURCE]), torch.tensor([CLEAN])
    with torch.no_grad():
        plain = F.cross_entropy(model(src, tgt)[0, :-1], tgt[0, 1:]).item()
        off = model(
            src,
            tgt,
            call=Call(ops=Intervention(zero_heads=frozenset({("decoder_self", 1, 3)})).operations),
        )
    assert ours[1, 3].item() == pytest.approx(
        F.cross_entropy(off[0, :-1], tgt[0, 1:]).item() - plain, abs=1e-5
    )


def test_logit_attribution_sums_to_the_logit_with_cross_attention_heads() -> None:
    model = model_of("pre")
    token = int(last_logits(model, CLEAN).argmax())
    parts = direct_logit_attribution(model, CLEAN, token, source=SOURCE)
    assert "L1 cross H3" in parts
    assert sum(parts.values()) == pytest.approx(last_logits(model, CLEAN)[token].item(), abs=1e-4)
    with pytest.raises(ValueError, match="pre-norm"):
        direct_logit_attribution(model_of("post"), CLEAN, token, source=SOURCE)


def test_integrated_gradients_complete_on_the_decoder_input() -> None:
    model = model_of("post")
    token = int(last_logits(model, CLEAN).argmax())
    result = input_attribution(model, CLEAN, token, steps=64, source=SOURCE)
    assert result.logit == pytest.approx(last_logits(model, CLEAN)[token].item(), abs=1e-4)
    assert result.scores.shape == (len(CLEAN),)
    assert result.baseline_logit is not None and result.delta is not None
    assert result.scores.sum().item() - (result.logit - result.baseline_logit) == pytest.approx(
        result.delta, abs=1e-4
    )
