"""What a captured rotary pass keeps: its scaled queries and expanded keys are not kept a second
time beside the rotary pair (at SmolLM2's 512 tokens, 70 MB), yet a record gives back exactly
the tensors the pass computed, bit for bit, and the scores from them; with cached keys before a
step's own, they are kept as before."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
import torch

from transformer.attention import AttentionProbe
from transformer.config import ModelConfig
from transformer.model import Transformer
from transformer.operations import PAPER
from transformer.silent_mistakes import tiled_kv_heads

CONFIG = ModelConfig(
    architecture="decoder-only",
    d_model=48,
    n_heads=6,
    n_kv_heads=2,
    d_ff=64,
    n_decoder_layers=2,
    tgt_vocab_size=80,
    max_len=64,
    norm="pre",
    norm_kind="rms",
    positional="rotary",
    feed_forward_kind="gated",
    activation="silu",
    dropout=0.0,
)


def _reachable_tensors(record) -> list[torch.Tensor]:
    """The tensors a record holds, through its dataclass fields (what a cache counts)."""
    found = []
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif dataclasses.is_dataclass(value):
            found += [v for v in vars(value).values() if isinstance(v, torch.Tensor)]
    return found


@pytest.mark.parametrize("grouping", ["standard", "tiled"])
def test_a_rotary_trace_gives_back_the_passes_own_queries_and_keys(grouping):
    torch.manual_seed(0)
    model = Transformer(CONFIG).eval()
    ops = PAPER if grouping == "standard" else replace(PAPER, expand_kv_heads=tiled_kv_heads)
    seen: list[AttentionProbe] = []
    ops = replace(ops, observe_attention=lambda probe, kind, layer: seen.append(probe))
    tokens = torch.randint(4, 80, (2, 9))
    with torch.no_grad():
        trace = model(tgt=tokens, capture=True, ops=ops)
    records = trace.attention_records("decoder_self")
    assert len(records) == len(seen) == 2
    for record, probe in zip(records, seen, strict=True):
        assert torch.equal(record.queries, probe.queries)  # the pass's own, bit for bit
        assert torch.equal(record.keys, probe.keys)  # expanded as the pass expanded them
        direct = probe.queries @ probe.keys.transpose(-2, -1)
        allowed = record.mask.expand_as(direct)
        assert torch.equal(record.scores[allowed], direct[allowed])
        held = {t.untyped_storage().data_ptr() for t in _reachable_tensors(record)}
        assert probe.queries.untyped_storage().data_ptr() not in held
        assert probe.keys.untyped_storage().data_ptr() not in held


def test_a_cached_step_keeps_its_keys():
    """A step after cached keys reads keys its rotary pair does not hold: they are kept, and
    they are every position's (the cached ones first)."""
    torch.manual_seed(0)
    model = Transformer(CONFIG).eval()
    tokens = torch.randint(4, 80, (1, 7))
    with torch.no_grad():
        cache = model.new_cache()
        model.decode(tokens[:, :6], cache=cache)
        step = model.decode(tokens[:, 6:], cache=cache, capture=True)
        whole = model(tgt=tokens, capture=True)
    for layer, full in zip(step.layers, whole.decoder_layers, strict=True):
        record = layer.self_attention
        assert record.keys is not None and record.keys.shape[2] == 7
        held = {t.untyped_storage().data_ptr() for t in _reachable_tensors(record)}
        assert record.keys.untyped_storage().data_ptr() in held
        torch.testing.assert_close(record.keys, full.self_attention.keys)


@pytest.mark.parametrize("pad_id", [0, 3, None])
def test_the_best_id_without_padding_equals_masking_a_copy(pad_id):
    """Against the plain formula (a masked copy, then argmax): rows where padding is the
    largest, ties with it and after it, NaN at and away from it."""
    from transformer.generation import best_without_padding

    torch.manual_seed(0)
    logits = torch.randn(4, 6, 8)
    column = 3 if pad_id is None else pad_id
    logits[0, :, column] = 10.0  # padding the largest everywhere in the first row
    logits[1, 0, column], logits[1, 0, 5] = 7.0, 7.0  # a tie with a later class
    logits[1, 1, 1], logits[1, 1, column] = 7.0, 7.0  # and with an earlier one
    logits[2, 0, column] = float("nan")
    logits[2, 1, 6] = float("nan")
    logits[2, 2, column], logits[2, 2, 7] = float("nan"), float("nan")
    original = logits.clone()
    expected = (
        logits.argmax(-1)
        if pad_id is None
        else logits.index_fill(-1, torch.tensor([pad_id]), float("-inf")).argmax(-1)
    )
    assert torch.equal(best_without_padding(logits, pad_id), expected)
    assert torch.equal(torch.nan_to_num(logits), torch.nan_to_num(original))  # not written to
