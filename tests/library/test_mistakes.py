"""The seeds' mistakes as switches (``Intervention(mistakes=...)``, their records): each is checked against the
mistaken formula written out here, from the seed's own description, on the model's own numbers
(the trace's inputs to the step), never against the code's copy of it."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TINY_CONFIG, tiny_transformer

from transformer.core.run import TRACE, Call, Capture
from transformer.lab.effects import mistake_effect, real_positions
from transformer.lab.inspection import analyse
from transformer.lab.interventions import Intervention
from transformer.lab.mistakes import SEED_MISTAKES
from transformer.lab.switches import SEED_MISTAKE, applicable, by_label
from transformer.training.bundled import load_bundled

CONFIG = TINY_CONFIG
PAD = CONFIG.pad_id
D_HEAD = CONFIG.d_model // CONFIG.n_heads
build = tiny_transformer


def ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, 30, (batch, length), generator=torch.Generator().manual_seed(seed))


def mistake(label: str):
    """The record of the seeds' mistake a student reads as ``label``."""
    return by_label(label, SEED_MISTAKE)


def broken(label: str) -> Intervention:
    return Intervention(mistakes=frozenset({mistake(label)}))


LABELS = [s.label for s in SEED_MISTAKES]


def padded_source() -> torch.Tensor:
    src = ids(2, 7)
    src[1, 5:] = PAD  # sentence 2: 5 real tokens, 2 padding
    return src


# -- the paper's split, written out here (not the model's split_heads) ---------------------------


def heads(x: torch.Tensor) -> torch.Tensor:
    """(B, T, d_model) → (B, H, T, d_head): view then transpose."""
    b, t, _ = x.shape
    return x.view(b, t, CONFIG.n_heads, D_HEAD).permute(0, 2, 1, 3)


def merged(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, d_head) → (B, T, d_model)."""
    b, h, t, d = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(b, t, h * d)


def softmax_masked(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Softmax over allowed keys; a row with none receives nothing."""
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0)


# -- no switch: the pass is what it was ---------------------------------------------------------


@torch.no_grad()
def test_no_mistake_leaves_the_pass_bit_for_bit_unchanged():
    model = build()
    src, tgt = padded_source(), ids(2, 5, seed=2)
    plain = model(src, tgt, call=TRACE)
    empty = model(
        src, tgt, call=Call(ops=Intervention(mistakes=frozenset()).operations, capture=Capture())
    )
    assert torch.equal(plain.logits, empty.logits)
    # And the LayerNorm without the switch is torch's own.
    norm = model.encoder.layers[0].attention_residual.norm
    x = torch.randn(3, 5, CONFIG.d_model)
    reference = torch.nn.functional.layer_norm(x, (CONFIG.d_model,), norm.weight, norm.bias, 1e-5)
    assert torch.equal(norm(x), reference)


# -- the scale of the scores --------------------------------------------------------------------


@torch.no_grad()
@pytest.mark.parametrize(
    ("name", "scale"),
    [
        ("scores ÷ √d_model", 1 / math.sqrt(CONFIG.d_model)),  # seed 002: / math.sqrt(self.dim)
        ("scores × √d_head", math.sqrt(D_HEAD)),  # seed 004: * head_size ** 0.5
    ],
)
def test_score_scale_mistakes_match_the_seeds_formula(name, scale):
    model = build()
    src, tgt = padded_source(), ids(2, 5, seed=2)
    trace = model(src, tgt, call=Call(ops=broken(name).operations, capture=Capture()))
    layer, record = model.encoder.layers[1], trace.encoder_layers[1].self_attention
    x = trace.encoder_layers[1].input  # post-LN: the sub-layer reads x itself
    attention = layer.self_attention
    q, k = heads(attention.w_q(x)), heads(attention.w_k(x))
    scores = (q @ k.transpose(-1, -2)) * scale
    allowed = (src != PAD)[:, None, None, :].expand_as(scores)
    assert torch.allclose(record.scores[allowed], scores[allowed], atol=1e-5)
    assert torch.allclose(record.weights, softmax_masked(scores, allowed), atol=1e-6)
    # The correct pass differs (the switch does something).
    plain = model(src, tgt, call=TRACE).encoder_layers[1].self_attention
    assert (plain.weights - record.weights).abs().max() > 1e-3


# -- the bare views of seed 003 -----------------------------------------------------------------


def bare_view_pass(mistake: str, stack: str, layer: int, src_len: int):
    """The tiny model's pass with ``mistake`` on: (the trace of ``stack``'s layer ``layer``, that
    layer's self-attention module)."""
    model = build()
    trace = model(
        ids(2, src_len),
        ids(2, 5, seed=2),
        call=Call(ops=broken(mistake).operations, capture=Capture()),
    )
    layers = trace.encoder_layers if stack == "encoder" else trace.decoder_layers
    module = model.encoder if stack == "encoder" else model.decoder
    return layers[layer], module.layers[layer].self_attention


@torch.no_grad()
def test_bare_view_split_matches_view_b_h_straight_from_b_t_d_model():
    traced, attention = bare_view_pass("heads split with a bare view", "encoder", 0, 8)
    x = traced.input
    b, t, _ = x.shape
    h = CONFIG.n_heads
    # Seed 003: key.view(batch_size * num_heads, -1, dim_per_head), then bmm.
    q = attention.w_q(x).view(b * h, -1, D_HEAD)
    k = attention.w_k(x).view(b * h, -1, D_HEAD)
    v = attention.w_v(x).view(b * h, -1, D_HEAD)
    scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(D_HEAD)  # (B·h, T, T)
    record = traced.self_attention
    assert torch.allclose(record.scores, scores.view(b, h, t, t), atol=1e-5)
    context = torch.bmm(torch.softmax(scores, dim=-1), v).view(b, h, t, D_HEAD)
    expected = attention.w_o(merged(context))  # merged correctly: only the split is wrong
    assert torch.allclose(traced.self_attention_update, expected, atol=1e-5)
    # Head 0 of sentence 0 sees pieces of the first T/h tokens only: row 0 is token 0's first
    # d_head dimensions, row 1 its second (not token 1).
    projected = attention.w_q(x)
    assert torch.allclose(q[0, 1], projected[0, 0, D_HEAD : 2 * D_HEAD])


@torch.no_grad()
def test_bare_view_merge_matches_view_b_minus_one_d_model_without_transpose():
    traced, attention = bare_view_pass("heads merged with a bare view", "decoder", 1, 6)
    x = traced.input
    q, k, v = heads(attention.w_q(x)), heads(attention.w_k(x)), heads(attention.w_v(x))
    t = x.size(1)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    weights = softmax_masked(q @ k.transpose(-1, -2) / math.sqrt(D_HEAD), causal)
    context = (weights @ v).reshape(-1, t, D_HEAD)  # seed 003's (batch·heads, T, d_head)
    expected = attention.w_o(context.view(x.size(0), -1, D_HEAD * CONFIG.n_heads))
    assert torch.allclose(traced.self_attention_update, expected, atol=1e-5)
    # The weights themselves are the correct ones: only what is passed on is scrambled.
    assert torch.allclose(traced.self_attention.weights, weights, atol=1e-6)


# -- seed 004's LayerNorm -----------------------------------------------------------------------


def seed_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """γ·(x − mean)/(std + eps) + β with std = √(Σ(x − mean)² / (n − 1))."""
    n = x.size(-1)
    mean = x.sum(-1, keepdim=True) / n
    std = ((x - mean) ** 2).sum(-1, keepdim=True).div(n - 1).sqrt()
    return norm.weight * (x - mean) / (std + norm.eps) + norm.bias


@torch.no_grad()
def test_layer_norm_mistake_is_unbiased_std_plus_eps_in_every_norm_post_ln():
    model = build()
    src, tgt = padded_source(), ids(2, 5, seed=2)
    trace = model(
        src,
        tgt,
        call=Call(ops=broken("LayerNorm: unbiased std + eps").operations, capture=Capture()),
    )
    for index, layer_trace in enumerate(trace.encoder_layers):
        layer = model.encoder.layers[index]
        after = seed_norm(
            layer_trace.input + layer_trace.self_attention_update, layer.attention_residual.norm
        )
        assert torch.allclose(layer_trace.self_attention_output, after, atol=1e-5)
        out = seed_norm(after + layer_trace.feed_forward_update, layer.feed_forward_residual.norm)
        assert torch.allclose(layer_trace.feed_forward_output, out, atol=1e-5)
    plain = model(src, tgt, call=TRACE)
    assert (plain.logits - trace.logits).abs().max() > 1e-4


@torch.no_grad()
def test_layer_norm_mistake_reaches_pre_ln_and_final_norms():
    model = build(norm="pre", architecture="decoder-only", n_encoder_layers=0)
    tgt = ids(2, 6)
    trace = model(
        tgt=tgt,
        call=Call(ops=broken("LayerNorm: unbiased std + eps").operations, capture=Capture()),
    )
    last = trace.decoder_layers[-1].output
    expected = seed_norm(last, model.decoder.final_norm)
    assert torch.allclose(trace.decoder_output, expected, atol=1e-5)
    # Inside a pre-LN layer the attention reads the mistaken norm of x.
    layer, layer_trace = model.decoder.layers[0], trace.decoder_layers[0]
    h = seed_norm(layer_trace.input, layer.self_attention_residual.norm)
    attention = layer.self_attention
    scores = heads(attention.w_q(h)) @ heads(attention.w_k(h)).transpose(-1, -2)
    causal = torch.ones(6, 6, dtype=torch.bool).tril().expand_as(scores)
    assert torch.allclose(
        layer_trace.self_attention.scores[causal], scores[causal] / math.sqrt(D_HEAD), atol=1e-5
    )


# -- seed 004's sinusoids -----------------------------------------------------------------------


def seed_004_table(length: int, d: int, halves: bool) -> torch.Tensor:
    """cos at even dimensions, sin at odd ones (or [cos | sin] in halves), base 1000."""
    table = torch.zeros(length, d, dtype=torch.float64)
    for pos in range(length):
        for i in range(d // 2):
            angle = pos / 1000 ** (2 * i / d)
            if halves:
                table[pos, i], table[pos, d // 2 + i] = math.cos(angle), math.sin(angle)
            else:
                table[pos, 2 * i], table[pos, 2 * i + 1] = math.cos(angle), math.sin(angle)
    return table.float()


@torch.no_grad()
@pytest.mark.parametrize("layout", ["interleaved", "halves"])
def test_sinusoid_mistake_swaps_sin_and_cos_with_base_1000(layout):
    model = build(sinusoidal_layout=layout)
    src, tgt = ids(2, 7), ids(2, 5, seed=2)
    trace = model(
        src,
        tgt,
        call=Call(ops=broken("sin and cos swapped, base 1000").operations, capture=Capture()),
    )
    expected = seed_004_table(7, CONFIG.d_model, layout == "halves")
    assert torch.allclose(trace.source.positional, expected, atol=1e-6)
    assert torch.allclose(trace.target.positional, expected[:5], atol=1e-6)
    assert torch.allclose(
        trace.encoder_layers[0].input, trace.source.token_embedding + expected, atol=1e-5
    )
    # A cached decoding step reads the same positions' table (offset 3 → rows 3, 4).
    encoded = model.encode(src, call=Call(ops=broken("sin and cos swapped, base 1000").operations))
    cache = model.new_cache()
    model.decode(tgt[:, :3], encoded, cache=cache, call=Call(ops=broken(SINUSOID).operations))
    step = model.decode(
        tgt[:, 3:], encoded, cache=cache, call=Call(ops=broken(SINUSOID).operations)
    )
    assert torch.allclose(step.logits, trace.logits[:, 3:], atol=1e-5)


SINUSOID = "sin and cos swapped, base 1000"


# -- the inverted mask --------------------------------------------------------------------------


@torch.no_grad()
def test_inverted_mask_lets_queries_read_only_what_was_masked():
    model = build()
    src, tgt = padded_source(), ids(2, 5, seed=2)
    trace = model(
        src, tgt, call=Call(ops=broken("mask polarity inverted").operations, capture=Capture())
    )
    # Encoder: sentence 2 reads only its two [PAD] keys; sentence 1 (unpadded) reads nothing.
    record, layer_trace = trace.encoder_layers[0].self_attention, trace.encoder_layers[0]
    attention = model.encoder.layers[0].self_attention
    x = layer_trace.input
    scores = heads(attention.w_q(x)) @ heads(attention.w_k(x)).transpose(-1, -2)
    allowed = (src == PAD)[:, None, None, :].expand_as(scores)  # True = masked, read as allowed
    assert torch.allclose(record.weights, softmax_masked(scores / math.sqrt(D_HEAD), allowed))
    assert (record.weights[0] == 0).all()
    assert torch.allclose(record.weights[1, :, :, 5:].sum(-1), torch.ones(4, 7))
    # Decoder self-attention: only the future; the last query has no key at all.
    weights = trace.decoder_layers[0].self_attention.weights
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert (weights[..., ~future] == 0).all()
    assert (weights[..., -1, :] == 0).all()
    assert torch.allclose(weights[..., :-1, :].sum(-1), torch.ones(2, 4, 4))
    # Cross-attention reads only the source's [PAD] keys.
    cross = trace.decoder_layers[0].cross_attention.weights
    assert (cross[1, ..., :5] == 0).all() and (cross[0] == 0).all()
    # The fast path (F.scaled_dot_product_attention) does the same, with no NaN.
    fast = model(src, tgt, call=Call(ops=broken("mask polarity inverted").operations))
    assert torch.isfinite(fast).all()
    assert torch.allclose(fast, trace.logits, atol=1e-5)


# -- seed 004's cross-attention -----------------------------------------------------------------


@torch.no_grad()
def test_cross_attention_from_the_memory_on_equal_lengths():
    model = build()
    src, tgt = padded_source(), ids(2, 7, seed=2)  # both 7 long
    name = "cross-attention queries from the memory"
    trace = model(src, tgt, call=Call(ops=broken(name).operations, capture=Capture()))
    attention = model.decoder.layers[0].cross_attention
    x = trace.decoder_layers[0].self_attention_output  # post-LN: the sub-layer reads x itself
    memory = trace.memory
    # Seed 004: cross_attn(q=memory, k=memory, v=x).
    q, k, v = heads(attention.w_q(memory)), heads(attention.w_k(memory)), heads(attention.w_v(x))
    allowed = (src != PAD)[:, None, None, :].expand(2, 4, 7, 7)
    weights = softmax_masked(q @ k.transpose(-1, -2) / math.sqrt(D_HEAD), allowed)
    record = trace.decoder_layers[0].cross_attention
    assert record.weights.shape == (2, 4, 7, 7)  # source × source
    assert torch.allclose(record.weights, weights, atol=1e-6)
    expected = attention.w_o(merged(weights @ v))
    assert torch.allclose(trace.decoder_layers[0].cross_attention_update, expected, atol=1e-5)
    fast = model(src, tgt, call=Call(ops=broken(name).operations))
    assert torch.allclose(fast, trace.logits, atol=1e-5)


@torch.no_grad()
def test_cross_attention_from_the_memory_on_unequal_lengths_says_why_it_cannot_run():
    model = build()
    name = "cross-attention queries from the memory"
    with pytest.raises(ValueError, match=r"source × source \(7 × 7\).*5 target rows"):
        model(padded_source(), ids(2, 5, seed=2), call=Call(ops=broken(name).operations))


# -- the fast path makes the same mistakes as the captured one ---------------------------------


@torch.no_grad()
@pytest.mark.parametrize("name", LABELS)
def test_fast_path_and_capture_agree_under_every_mistake(name):
    model = build()
    src, tgt = padded_source(), ids(2, 7, seed=2)
    captured = model(src, tgt, call=Call(ops=broken(name).operations, capture=Capture())).logits
    assert torch.allclose(
        model(src, tgt, call=Call(ops=broken(name).operations)), captured, atol=1e-5
    )
    assert (captured - model(src, tgt)).abs().max() > 1e-4, "the switch changes the output"


# -- names, and which models a mistake applies to -----------------------------------------------


def test_applies_follows_each_architecture():
    all_of_them = set(LABELS)

    def applicable_labels(config) -> set[str]:
        return {s.label for s in applicable(config, SEED_MISTAKE)}

    encoder_decoder = CONFIG  # sinusoidal, 4 heads
    decoder_only = CONFIG.replace(architecture="decoder-only", n_encoder_layers=0)
    encoder_only = CONFIG.replace(
        architecture="encoder-only", n_decoder_layers=0, positional="learned"
    )
    assert applicable_labels(encoder_decoder) == all_of_them
    assert applicable_labels(decoder_only) == all_of_them - {
        "cross-attention queries from the memory"
    }
    assert applicable_labels(encoder_only) == all_of_them - {
        "cross-attention queries from the memory",
        "sin and cos swapped, base 1000",
    }
    one_head = CONFIG.replace(n_heads=1)  # with one head the bare views and √d_model are right
    assert applicable_labels(one_head) == all_of_them - {
        "scores ÷ √d_model",
        "heads split with a bare view",
        "heads merged with a bare view",
    }
    for record in SEED_MISTAKES:
        assert record.seed and record.origin.endswith(".") and record.explanation.endswith(".")


def test_unknown_labels_labels_given_as_records_and_inapplicable_mistakes_are_clear_errors():
    with pytest.raises(ValueError, match="unknown seed mistake") as error:
        mistake("scores ÷ 2")
    for label in LABELS:
        assert label in str(error.value)
    # A label is turned into its record where it arrives; an Intervention holds records only.
    with pytest.raises(ValueError, match="switch records"):
        Intervention(mistakes=frozenset({"scores × √d_head"}))
    times = mistake("scores × √d_head")
    assert Intervention(mistakes=times).mistakes == frozenset({times})
    bundled = load_bundled(names=("continue",)).models["continue"]
    with pytest.raises(ValueError, match=r"does not apply.*an encoder and a decoder"):
        mistake_effect(bundled.model, bundled.tokenizer, ["the cat"], mistake(CROSS))


CROSS = "cross-attention queries from the memory"


# -- what a mistake did to the output -----------------------------------------------------------


@torch.no_grad()
def test_mistake_effect_compares_the_same_decoder_input():
    checkpoint = load_bundled(names=("reverse",)).models["reverse"]
    model, tokenizer = checkpoint.model.eval(), checkpoint.tokenizer
    sentences = ["a b c d e f", "k l m"]
    effect = mistake_effect(model, tokenizer, sentences, mistake("heads merged with a bare view"))
    # The reference: both passes run here by hand on the correct pass's greedy target.
    correct = analyse(model, tokenizer, sentences)
    src, tgt = correct.trace.source.tokens, correct.trace.target.tokens
    assert torch.equal(effect.broken.trace.target.tokens, tgt)
    plain = model(src, tgt)
    wrong = model(src, tgt, call=Call(ops=broken("heads merged with a bare view").operations))
    real = tgt != checkpoint.config.pad_id
    real[:, 0] = True
    delta = (wrong - plain).abs().amax(-1).masked_fill(~real, -1)
    assert effect.largest_change == pytest.approx(float(delta.max()), abs=1e-5)
    assert delta[effect.sentence, effect.position] == pytest.approx(effect.largest_change)
    plain[..., checkpoint.config.pad_id] = float("-inf")
    wrong[..., checkpoint.config.pad_id] = float("-inf")
    for b in range(2):
        before = [tokenizer.id_to_token(int(i)) for i in plain[b].argmax(-1)[real[b]]]
        after = [tokenizer.id_to_token(int(i)) for i in wrong[b].argmax(-1)[real[b]]]
        assert effect.tokens_before[b] == before and effect.tokens_after[b] == after
        assert effect.changed[b] == (before != after)
    assert effect.any_changed  # scrambling every token's heads breaks the reversal


def test_real_positions_keep_a_leading_pad_and_drop_trailing_ones():
    tokens = torch.tensor([[0, 5, 6, 0, 0], [0, 5, 0, 7, 8]])
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(real_positions(tokens, 0), expected)
