"""What-if switches at the model level (:class:`transformer.lab.interventions.Intervention`): each changes
exactly what it says and nothing else, checked against direct re-computations."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import TINY_CONFIG, tiny_transformer

from transformer.core.model import Transformer
from transformer.core.operations import PAPER
from transformer.core.run import TRACE, Call, Capture
from transformer.lab.interventions import Intervention

CONFIG = TINY_CONFIG.replace(n_encoder_layers=3)
PAD = CONFIG.pad_id


def build(**changes) -> Transformer:
    return tiny_transformer(CONFIG, **changes)


def real_ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    """Ids without padding (1..28; 29 is kept out, see the padding reference below)."""
    return torch.randint(1, 29, (batch, length), generator=torch.Generator().manual_seed(seed))


# -- the padding mask -----------------------------------------------------------------------------


@torch.no_grad()
def test_padding_mask_off_changes_nothing_when_there_is_no_padding():
    model = build()
    src, tgt = real_ids(2, 7), real_ids(2, 5, seed=2)
    on = model(src, tgt, call=TRACE)
    off = model(
        src, tgt, call=Call(ops=Intervention(padding_mask=False).operations, capture=Capture())
    )
    assert torch.equal(off.memory, on.memory)
    assert torch.equal(off.logits, on.logits)


@torch.no_grad()
def test_padding_mask_off_changes_real_positions_of_a_padded_source_only():
    model = build()
    src, tgt = real_ids(2, 7), real_ids(2, 5, seed=2)
    src[0, 4:] = PAD  # row 0: 4 real tokens, 3 padding; row 1 unpadded
    on = model(src, tgt, call=TRACE)
    off = model(
        src, tgt, call=Call(ops=Intervention(padding_mask=False).operations, capture=Capture())
    )
    # Reference for "off": the same weights under a pad id that does not occur, so the [PAD]
    # tokens (zero embedding rows) are read as ordinary tokens and nothing is masked.
    reference = build(pad_id=29)
    reference.load_state_dict(model.state_dict())
    expected = reference(src, tgt, call=TRACE)
    assert torch.allclose(off.memory, expected.memory, atol=1e-6)
    assert torch.allclose(off.logits, expected.logits, atol=1e-6)
    # The padded row's real positions change, the unpadded row does not.
    assert (off.memory[0, :4] - on.memory[0, :4]).abs().max() > 1e-3
    assert (off.logits[0] - on.logits[0]).abs().max() > 1e-3
    assert torch.equal(off.memory[1], on.memory[1])
    assert torch.equal(off.logits[1], on.logits[1])


@torch.no_grad()
def test_target_padding_at_the_end_is_already_hidden_by_the_causal_mask():
    """Trailing target padding lies in every real position's future: switching the padding mask
    off changes only the padding rows themselves."""
    model = build()
    src, tgt = real_ids(1, 6), real_ids(1, 6, seed=3)
    tgt[0, 4:] = PAD
    on = model(src, tgt)
    off = model(src, tgt, call=Call(ops=Intervention(padding_mask=False).operations))
    assert torch.equal(off[0, :4], on[0, :4])


# -- switching one head off -----------------------------------------------------------------------


def _sublayer(model: Transformer, trace, kind: str, layer: int):
    """The attention module, its residual, the residual stream entering it and its trace output."""
    if kind == "encoder_self":
        block, layer_trace = model.encoder.layers[layer], trace.encoder_layers[layer]
        return (
            block.self_attention,
            block.attention_residual,
            layer_trace.input,
            layer_trace.input,
            layer_trace.self_attention_output,
        )
    block, layer_trace = model.decoder.layers[layer], trace.decoder_layers[layer]
    if kind == "decoder_self":
        return (
            block.self_attention,
            block.self_attention_residual,
            layer_trace.input,
            layer_trace.input,
            layer_trace.self_attention_output,
        )
    return (
        block.cross_attention,
        block.cross_attention_residual,
        layer_trace.self_attention_output,
        trace.memory,
        layer_trace.cross_attention_output,
    )


@torch.no_grad()
@pytest.mark.parametrize(
    ("kind", "layer", "head"), [("encoder_self", 1, 2), ("decoder_self", 1, 0), ("cross", 0, 3)]
)
def test_zeroing_a_head_removes_exactly_its_contribution_and_nothing_upstream(kind, layer, head):
    model = build()
    src, tgt = real_ids(2, 7), real_ids(2, 6, seed=4)
    src[1, 5:] = PAD
    base = model(src, tgt, call=TRACE)
    zeroed = model(
        src,
        tgt,
        call=Call(
            ops=Intervention(zero_heads=frozenset({(kind, layer, head)})).operations,
            capture=Capture(),
        ),
    )
    stack = "encoder_layers" if kind == "encoder_self" else "decoder_layers"
    # Upstream: earlier layers of the same stack, and for decoder heads the whole encoder.
    for before, after in zip(
        getattr(base, stack)[:layer], getattr(zeroed, stack)[:layer], strict=True
    ):
        assert torch.equal(before.feed_forward_output, after.feed_forward_output)
    if kind != "encoder_self":
        assert torch.equal(base.memory, zeroed.memory)
    if kind == "cross":  # the layer's self-attention comes before it
        upstream = base.decoder_layers[layer].self_attention_output
        assert torch.equal(upstream, zeroed.decoder_layers[layer].self_attention_output)
    # This sub-layer: every head's attention weights (the zeroed one's too) are unchanged.
    assert torch.equal(base.attention(kind, layer).weights, zeroed.attention(kind, layer).weights)
    # Its output is the residual plus W_o of the heads with head h set to zero, re-computed here.
    attention, residual, stream, key_value, _ = _sublayer(model, base, kind, layer)
    *_, zeroed_output = _sublayer(model, zeroed, kind, layer)
    weights = base.attention(kind, layer).weights  # (B, H, Tq, Tk)
    d_head = CONFIG.d_model // CONFIG.n_heads
    batch, n_keys = key_value.shape[0], key_value.shape[1]
    values = attention.w_v(key_value).view(batch, n_keys, CONFIG.n_heads, d_head).transpose(1, 2)
    heads = weights @ values  # (B, H, Tq, d_head)
    heads[:, head] = 0.0
    concat = heads.transpose(1, 2).reshape(batch, -1, CONFIG.d_model)
    expected = residual.norm(stream + attention.w_o(concat))  # post-LN
    assert torch.allclose(zeroed_output, expected, atol=1e-5)
    *_, base_output = _sublayer(model, base, kind, layer)
    assert (zeroed_output - base_output).abs().max() > 1e-3  # the head did contribute


# -- positional encoding off ----------------------------------------------------------------------


@torch.no_grad()
@pytest.mark.parametrize("with_padding", [False, True])
def test_without_positional_encoding_the_encoder_is_permutation_equivariant(with_padding):
    model = build()
    src, tgt = real_ids(2, 8), real_ids(2, 4, seed=5)
    if with_padding:
        src[0, 6:] = PAD
    order = torch.tensor([5, 2, 7, 0, 3, 1, 6, 4])
    no_pe = Intervention(positional_encoding=False)
    plain = model(src, tgt, call=Call(ops=no_pe.operations, capture=Capture()))
    permuted = model(src[:, order], tgt, call=Call(ops=no_pe.operations, capture=Capture()))
    for before, after in zip(plain.encoder_layers, permuted.encoder_layers, strict=True):
        assert torch.allclose(
            after.feed_forward_output, before.feed_forward_output[:, order], atol=1e-5
        )
        weights = before.self_attention.weights[:, :, order][:, :, :, order]
        assert torch.allclose(after.self_attention.weights, weights, atol=1e-6)
    # The decoder reads the memory as a set: its output does not change at all.
    assert torch.allclose(permuted.logits, plain.logits, atol=1e-5)
    # With positions the same permutation gives a different encoding.
    with_pe = model(src, tgt, call=TRACE)
    with_pe_permuted = model(src[:, order], tgt, call=TRACE)
    assert (with_pe_permuted.memory - with_pe.memory[:, order]).abs().max() > 1e-2


# -- the operations object: per call, the paper's by default --------------------------------------


def test_no_switch_runs_the_papers_operations_themselves():
    assert Intervention().operations is PAPER
    assert Intervention(causal_mask=False).operations == replace(PAPER, causal_mask=False)


@torch.no_grad()
def test_an_intervention_and_its_operations_written_out_are_one_pass():
    model = build()
    src, tgt = real_ids(2, 6), real_ids(2, 5, seed=2)
    src[1, 4:] = PAD
    named = Intervention(padding_mask=False, causal_mask=False).operations
    by_name = model(src, tgt, call=Call(ops=named))
    by_ops = model(src, tgt, call=Call(ops=replace(PAPER, padding_mask=False, causal_mask=False)))
    assert torch.equal(by_name, by_ops)


@torch.no_grad()
def test_a_what_if_leaves_nothing_behind_on_the_shared_model():
    model = build()
    src, tgt = real_ids(2, 6), real_ids(2, 5, seed=2)
    before = model(src, tgt)
    changed = model(
        src, tgt, call=Call(ops=Intervention(zero_heads=frozenset({("cross", 0, 1)})).operations)
    )
    assert not torch.allclose(changed, before)
    assert torch.equal(model(src, tgt), before)
