"""The catalogue of teaching switches (transformer.lab.switches): every what-if, seed's mistake
and silent mistake is one record, applies where it says (its pass changes the model's output
exactly there), and changes what it says, against attention written out here from the layer's
own projections (the unmasked softmax for "causal mask off", the unscaled one for "no √d
scaling", ...)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace

import pytest
import torch
from conftest import LLAMA_BLOCK, SEED_MISTAKE_LABELS, TINY_CONFIG, tiny_transformer

from transformer import WHAT_IF_SWITCHES, what_if, what_if_switches
from transformer.core.config import ModelConfig
from transformer.core.model import Transformer
from transformer.core.operations import PAPER
from transformer.core.run import Call, Capture
from transformer.lab.interventions import Intervention, combined
from transformer.lab.switches import (
    SWITCHES,
    Switch,
    by_label,
    catalogue,
    family,
    operations,
    what_ifs,
)

# The labels a student reads, as the menus have always shown them, in catalogue order.
WHAT_IF_LABELS = [
    "causal mask off",
    "padding mask off",
    "no √d scaling",
    "no positional encoding",
    "zero this head",
]
SEED_LABELS = SEED_MISTAKE_LABELS
SILENT_LABELS = [
    "rotary: neighbour pairs on rotate-half weights",
    "key/value heads tiled with repeat",
    "rotary positions not offset by the cache",
    "RMSNorm with the mean subtracted",
    "RMSNorm: eps outside the root",
    "no 1/√d_head scaling",
    "causal mask off during prefill",
]

ENCODER_DECODER = TINY_CONFIG
ENCODER_ONLY = TINY_CONFIG.replace(architecture="encoder-only", tie_embeddings=True)
ONE_HEAD = TINY_CONFIG.replace(n_heads=1)
MODERN = TINY_CONFIG.replace(**LLAMA_BLOCK, n_kv_heads=2, tie_embeddings=True)
CONFIGS = {
    "encoder-decoder": ENCODER_DECODER,
    "encoder-only": ENCODER_ONLY,
    "one head": ONE_HEAD,
    "modern": MODERN,
}
# Which switches change each model, worked out from what each one touches (not read from the
# catalogue): the causal mask needs a decoder; the seeds' split, merge and d_model scale need
# several heads; the sinusoid, a sinusoidal table; LayerNorm's, a LayerNorm; cross-attention, an
# encoder and a decoder; rotary, tiled key/value heads and RMSNorm's, a modern block; the
# silent ones are a decoder's (they are shown on generated text).
EVERY = set(WHAT_IF_LABELS) | set(SEED_LABELS)
APPLIES = {
    "encoder-decoder": EVERY | {"no 1/√d_head scaling", "causal mask off during prefill"},
    "encoder-only": (EVERY - {"causal mask off", "cross-attention queries from the memory"}),
    "one head": (
        EVERY
        - {"scores ÷ √d_model", "heads split with a bare view", "heads merged with a bare view"}
    )
    | {"no 1/√d_head scaling", "causal mask off during prefill"},
    "modern": (
        EVERY
        - {
            "sin and cos swapped, base 1000",
            "LayerNorm: unbiased std + eps",
            "cross-attention queries from the memory",
        }
    )
    | set(SILENT_LABELS),
}
# Switches that change only what this test's single pass cannot show: the rotary offset acts on a
# cached step, and there is no positional encoding to take off a rotary model.
ONLY_CACHED = {"rotary positions not offset by the cache"}


def test_the_catalogue_holds_every_switch_once_with_the_labels_students_read():
    assert [s.label for s in SWITCHES] == [*WHAT_IF_LABELS, *SEED_LABELS, *SILENT_LABELS]
    assert [s.label for s in family("what-if")] == WHAT_IF_LABELS
    assert [s.label for s in family("seed mistake")] == SEED_LABELS
    assert [s.label for s in family("silent mistake")] == SILENT_LABELS
    assert len({s.name for s in SWITCHES}) == len(SWITCHES)
    printed = catalogue().splitlines()
    assert len(printed) == len(SWITCHES)
    for line, switch in zip(printed, SWITCHES, strict=True):
        assert switch.label in line and switch.family in line and switch.explanation in line
    assert all(isinstance(s, Switch) and s.explanation for s in SWITCHES)


def test_the_public_what_if_names_keep_their_meaning():
    assert list(WHAT_IF_SWITCHES) == WHAT_IF_LABELS
    assert what_if(["causal mask off", "zero this head"], head=("cross", 1, 2)) == Intervention(
        causal_mask=False, zero_heads=frozenset({("cross", 1, 2)})
    )
    assert what_if_switches(ENCODER_ONLY) == WHAT_IF_LABELS[1:]
    assert what_if_switches(ENCODER_DECODER) == WHAT_IF_LABELS
    with pytest.raises(ValueError, match="unknown what-if"):
        what_ifs(["mask everything"])
    with pytest.raises(ValueError, match="unknown switch"):
        by_label("mask everything")


def test_switches_combine_into_one_intervention_of_records():
    inverted = by_label("mask polarity inverted")
    both = combined([by_label("no √d scaling"), inverted])
    assert both == Intervention(scale_scores=False, mistakes=frozenset({inverted}))
    pair = {by_label("scores ÷ √d_model"), by_label("scores × √d_head")}
    assert combined(pair).mistakes == pair
    with pytest.raises(ValueError, match="needs the"):
        combined([by_label("zero this head")])
    with pytest.raises(ValueError, match="needs the"):
        operations([by_label("zero this head")])
    # A silent mistake travels in an Intervention too: one route from switches to operations.
    silent = by_label("no 1/√d_head scaling")
    assert combined([silent]).operations == operations([silent])


def _twin(switch: Switch, **changed) -> Switch:
    """Another record with ``switch``'s label and texts (and ``changed`` fields)."""
    return Switch(
        switch.name,
        switch.label,
        switch.family,
        switch.explanation,
        switch.requires,
        **changed,
    )


def test_a_switch_is_known_by_its_record_never_by_its_label():
    times = by_label("scores × √d_head")
    # Another record reading the same label is another switch, and runs what it says.
    same_label = _twin(times, changes={"causal_mask": False})
    assert same_label != times and len({same_label, times}) == 2
    assert operations([same_label]) == replace(PAPER, causal_mask=False)
    assert operations([times]).score_scale(16, 4) == pytest.approx(4.0)  # × √d_head
    assert operations([times, same_label]).causal_mask is False
    assert Intervention(mistakes=frozenset({same_label})) != Intervention(
        mistakes=frozenset({times})
    )
    # Two catalogue switches that replace the same operation the same way stay two switches.
    leak, prefill_leak = by_label("causal mask off"), by_label("causal mask off during prefill")
    assert operations([leak]) == operations([prefill_leak])
    assert leak != prefill_leak and leak.family != prefill_leak.family
    # A label changed on a copy of a record changes which words are read, not what runs.
    relabelled = dataclasses.replace(times, label="scores × √d_k")
    assert relabelled is not times
    assert operations([relabelled]).score_scale(16, 4) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="unknown switch"):
        by_label("scores × √d_k")


@pytest.mark.parametrize("model_name", list(CONFIGS))
def test_each_switch_applies_exactly_where_it_changes_the_output(model_name):
    config = CONFIGS[model_name]
    model = tiny_transformer(config)
    assert {s.label for s in SWITCHES if s.applies(config)} == APPLIES[model_name]
    # Two sentences of different lengths (padding to mask), equally long on both sides (the
    # seeds' cross-attention from the memory only runs then).
    src = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
    tgt = torch.tensor([[1, 14, 15, 16, 17, 18], [1, 19, 20, 21, 0, 0]])
    head = ("decoder_self" if config.has_decoder else "encoder_self", 0, 1 % config.n_heads)

    def output(ops=None) -> torch.Tensor:
        kwargs = {} if ops is None else {"call": Call(ops=ops)}
        with torch.no_grad():
            if config.architecture == "decoder-only":
                return model(tgt=tgt, **kwargs)
            if config.architecture == "encoder-only":
                return model(src=src, **kwargs)
            return model(src, tgt, **kwargs)

    plain = output()
    for switch in SWITCHES:
        if switch.label in ONLY_CACHED:
            continue
        if switch.applies(config) and not switch.idle_here(config):
            changed = output(operations([switch], [head]))
            assert not torch.allclose(changed, plain, atol=1e-6), (switch.label, model_name)
            continue
        if switch.family == "silent mistake" and not config.has_decoder:
            continue  # offered only where text is generated, though some change an encoder too
        try:
            unchanged = output(operations([switch], [head]))
        except ValueError:
            continue  # refused where it cannot run (queries from the memory, unequal lengths)
        assert torch.allclose(unchanged, plain, atol=1e-6), (switch.label, model_name)
    rotary_off = by_label("no positional encoding")
    assert rotary_off.idle_here(MODERN) and rotary_off.idle_note
    assert not rotary_off.idle_here(ENCODER_DECODER)


# -- what each changes, against attention written out from the layer's own projections ----------


def _decoder_layer0_weights(model: Transformer, ops) -> tuple[torch.Tensor, torch.Tensor]:
    """(the weights the pass captured in layer 0 of the decoder, ``(B, H, T, T)``; the input its
    self-attention read, ``(B, T, d_model)``)."""
    seen = {}
    attention = model.decoder.layers[0].self_attention
    handle = attention.register_forward_pre_hook(lambda m, args: _keep(seen, "x", args[0]))
    try:
        with torch.no_grad():
            trace = model(tgt=TOKENS, call=Call(ops=ops, capture=Capture()))
    finally:
        handle.remove()
    return trace.attention_records("decoder_self")[0].weights, seen["x"]


def _keep(seen: dict, key: str, value: torch.Tensor) -> None:
    """Keep a hook's first sight of ``value`` (a hook that returns nothing changes nothing)."""
    seen.setdefault(key, value)


def _heads(y: torch.Tensor, n_heads: int) -> torch.Tensor:
    batch, length, width = y.shape
    return y.view(batch, length, n_heads, width // n_heads).transpose(1, 2)


def _scores(model: Transformer, x: torch.Tensor) -> torch.Tensor:
    """``q·kᵀ`` of decoder layer 0, unscaled and unmasked, ``(B, H, T, T)``."""
    attention = model.decoder.layers[0].self_attention
    heads = model.config.n_heads
    q, k = _heads(attention.w_q(x), heads), _heads(attention.w_k(x), heads)
    return q @ k.transpose(-2, -1)


TOKENS = torch.tensor([[1, 14, 15, 16, 17, 18]])
CAUSAL = torch.tril(torch.ones(6, 6, dtype=torch.bool))
D_HEAD = TINY_CONFIG.d_model // TINY_CONFIG.n_heads


@pytest.fixture(scope="module")
def decoder_only() -> Transformer:
    return tiny_transformer(TINY_CONFIG, architecture="decoder-only")


@pytest.mark.parametrize(
    ("label", "scale", "causal"),
    [
        ("causal mask off", 1 / math.sqrt(D_HEAD), False),
        ("causal mask off during prefill", 1 / math.sqrt(D_HEAD), False),
        ("no √d scaling", 1.0, True),
        ("no 1/√d_head scaling", 1.0, True),
        ("scores × √d_head", math.sqrt(D_HEAD), True),
        ("scores ÷ √d_model", 1 / math.sqrt(TINY_CONFIG.d_model), True),
    ],
)
def test_a_switch_changes_the_scores_as_it_says(decoder_only, label, scale, causal):
    weights, x = _decoder_layer0_weights(decoder_only, operations([by_label(label)]))
    with torch.no_grad():
        scores = _scores(decoder_only, x) * scale
    if causal:
        scores = scores.masked_fill(~CAUSAL, float("-inf"))
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1), atol=1e-5, rtol=1e-4)
    if not causal:
        assert (weights[..., ~CAUSAL] > 0).all()  # the future is read


def test_no_positional_encoding_leaves_the_embeddings_alone(decoder_only):
    _, with_positions = _decoder_layer0_weights(
        decoder_only, operations([by_label("mask polarity inverted")])
    )
    _, without = _decoder_layer0_weights(
        decoder_only, operations([by_label("no positional encoding")])
    )
    # The paper's table, written out: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos.
    d = TINY_CONFIG.d_model
    position = torch.arange(6).unsqueeze(1).float()
    angle = position / torch.pow(10000.0, torch.arange(0, d, 2).float() / d)
    table = torch.zeros(6, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
    torch.testing.assert_close(with_positions - without, table.unsqueeze(0), atol=1e-5, rtol=0)


def test_zero_this_head_passes_nothing_on_from_that_head(decoder_only):
    attention = decoder_only.decoder.layers[0].self_attention
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        attention.register_forward_pre_hook(lambda m, args: _keep(seen, "x", args[0])),
        attention.register_forward_hook(lambda m, args, out: _keep(seen, "out", out)),
    ]
    try:
        with torch.no_grad():
            decoder_only(
                tgt=TOKENS,
                call=Call(ops=operations([by_label("zero this head")], [("decoder_self", 0, 2)])),
            )
    finally:
        for hook in hooks:
            hook.remove()
    with torch.no_grad():
        x = seen["x"]
        scores = (_scores(decoder_only, x) / math.sqrt(D_HEAD)).masked_fill(~CAUSAL, float("-inf"))
        v = _heads(attention.w_v(x), TINY_CONFIG.n_heads)
        per_head = torch.softmax(scores, dim=-1) @ v  # (B, H, T, d_head)
        per_head[:, 2] = 0
        merged = per_head.transpose(1, 2).reshape(1, 6, TINY_CONFIG.d_model)
        expected = attention.w_o(merged)
    torch.testing.assert_close(seen["out"], expected, atol=1e-5, rtol=1e-4)


def test_a_seed_mistake_switch_sets_that_mistake_and_nothing_else():
    for switch in family("seed mistake"):
        assert combined([switch]) == Intervention(mistakes=frozenset({switch}))
        assert len(switch.changes) == 1 and not switch.per_head


def test_every_switch_is_a_record_a_config_can_ask(tmp_path):
    # A ModelConfig is all a switch needs to say where it applies: no model is built.
    config = ModelConfig(architecture="decoder-only", n_heads=1, d_model=8, d_ff=16)
    assert {s.label for s in SWITCHES if s.applies(config)} >= {"causal mask off"}
    assert "scores ÷ √d_model" not in {s.label for s in SWITCHES if s.applies(config)}


def test_a_switch_says_what_its_view_holds_where_the_axes_are_no_longer_tokens():
    split = by_label("heads split with a bare view")
    cross = by_label("cross-attention queries from the memory")
    assert split.axes_note("encoder_self") == split.axes_note("cross") != ""
    assert cross.axes_note("cross") == "rows: source positions"
    assert cross.axes_note("decoder_self") == ""
    # Only the cross-attention from the memory cannot run on some inputs (unequal lengths).
    assert [s.label for s in SWITCHES if s.may_refuse] == [cross.label]
