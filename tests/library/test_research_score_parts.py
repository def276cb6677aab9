"""The parts of a head's attention scores add up to the scores the pass computed (its kept
queries and keys): GPT-2 (learned positions, pre-norm), the 2017 paper's encoder-decoder
(sinusoidal positions, post-norm), Llama (rotary, grouped-query) and a model whose heads turn
only part of their width; pairing the rotary dimensions the interleaved way misses the scores."""

from __future__ import annotations

import pytest
import torch
from conftest import LLAMA_BLOCK
from research_reference import CLEAN, Pair, pair_fixture

from transformer import ModelConfig, Transformer, attention_score_parts
from transformer.core.run import TRACE
from transformer.research.score_parts import rotary_parts

__all__ = ["pair_fixture"]  # the fixture, by its name `pair`

TOLERANCE = 1e-5


def captured_scores(
    model: Transformer, layer: int, head: int, **inputs: torch.Tensor
) -> torch.Tensor:
    """``(Tq, Tk)`` scores before the mask, from the queries and keys the pass kept (the scaled
    queries times the keys), and the mask."""
    with torch.no_grad():
        trace = model(call=TRACE, **inputs)
    record = trace.attention("decoder_self" if trace.decoder_layers else "encoder_self", layer)
    return record.queries[0, head] @ record.keys[0, head].T


def check_sum(parts: dict[str, torch.Tensor], scores: torch.Tensor) -> None:
    total = sum(parts.values())
    assert isinstance(total, torch.Tensor)
    gap = (total - scores).abs().max().item()
    assert gap <= TOLERANCE, f"parts miss the scores by {gap:.2e}"


@pytest.mark.parametrize("layer", [0, 1])
def test_parts_sum_to_the_captured_scores(pair: Pair, layer: int) -> None:
    ids = torch.tensor([CLEAN])
    for head in range(pair.n_heads):
        parts = attention_score_parts(pair.ours, CLEAN, layer, head)
        check_sum(parts, captured_scores(pair.ours, layer, head, tgt=ids))
    if pair.name == "gpt2":
        assert list(parts)[:4] == [
            "token-token",
            "token-position",
            "position-token",
            "position-position",
        ]
        if layer == 0:  # the first layer reads token + position only
            assert parts["earlier layers"].abs().max().item() < 1e-5
        else:
            assert parts["earlier layers"].abs().max().item() > 1e-3
    else:
        d_head = pair.ours.config.d_head
        assert list(parts) == [f"pair {i}" for i in range(d_head // 2)]


def test_the_2017_model_parts_sum_on_both_stacks() -> None:
    torch.manual_seed(1)
    model = Transformer(ModelConfig(src_vocab_size=50, tgt_vocab_size=50, dropout=0.0)).eval()
    source, target = [4, 9, 13, 7, 22], [1, 8, 30, 2]
    for layer in (0, 1):
        parts = attention_score_parts(model, target, layer, 2, source=source)
        check_sum(
            parts,
            captured_scores(
                model, layer, 2, src=torch.tensor([source]), tgt=torch.tensor([target])
            ),
        )
    assert parts["token-position"].abs().max().item() > 1e-3


def test_partial_rotary_keeps_an_unrotated_part() -> None:
    torch.manual_seed(2)
    # ModelConfig's default width: 4 heads of 16 dimensions, of which half (8, 4 pairs) turn
    config = ModelConfig(
        **LLAMA_BLOCK, tgt_vocab_size=40, n_kv_heads=2, rotary_fraction=0.5, dropout=0.0
    )
    model = Transformer(config).eval()
    parts = attention_score_parts(model, [3, 9, 27, 4, 11], 1, 3)
    assert list(parts) == [*(f"pair {i}" for i in range(4)), "unrotated"]
    check_sum(parts, captured_scores(model, 1, 3, tgt=torch.tensor([[3, 9, 27, 4, 11]])))


def test_interleaved_pairs_miss_the_scores(pair: Pair) -> None:
    if pair.name == "gpt2":
        pytest.skip("GPT-2 has no rotary positions")
    attention = pair.ours.decoder.layers[1].self_attention
    with torch.no_grad():
        trace = pair.ours(tgt=torch.tensor([CLEAN]), call=TRACE)
    rotated = trace.attention("decoder_self", 1).rotary
    q, k = rotated.queries_before[0, 0], rotated.keys_before[0, attention.kv_head_of[0]]
    scores = captured_scores(pair.ours, 1, 0, tgt=torch.tensor([CLEAN]))
    scale = attention.score_scale()
    check_sum(rotary_parts(q, k, attention, scale, "half"), scores)
    wrong = sum(rotary_parts(q, k, attention, scale, "interleaved").values())
    assert (wrong - scores).abs().max().item() > 1000 * TOLERANCE
