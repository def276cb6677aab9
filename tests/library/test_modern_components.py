"""The Llama-family components (RMSNorm, rotary positions, gated feed-forward, grouped-query
key/value expansion) against the classes of Hugging Face `transformers`' Llama, and the wrong
conventions that a parity test must catch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import hf_llama_config, hf_llama_model
from llama_reference import assembled_llama_logits
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
    repeat_kv,
)

from transformer.core.modern import GatedFeedForward, RMSNorm, expand_kv_heads, kv_head_of
from transformer.core.rotary import (
    RotaryEmbedding,
    apply_rotary,
    rotary_angles,
    rotary_cos_sin,
    rotary_frequencies,
)


def hf_config(**changes: Any) -> LlamaConfig:
    """``TINY_LLAMA`` (2 key/value heads, 64 positions, rope_theta 10000) with 6 query heads of
    width 8, one layer and 50 tokens, and ``changes`` over it."""
    shape = dict(hidden_size=48, intermediate_size=80, num_attention_heads=6, num_hidden_layers=1)
    return hf_llama_config("llama", **(shape | {"vocab_size": 50, "rms_norm_eps": 1e-5} | changes))


def hf_cos_sin(config: LlamaConfig, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rotary = LlamaRotaryEmbedding(config)
    dummy = torch.zeros(1, dtype=torch.float32)
    return rotary(dummy, positions)


@pytest.mark.parametrize("eps", [1e-5, 1e-6])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_equals_llama_rms_norm(eps: float, dtype: torch.dtype) -> None:
    ours, theirs = RMSNorm(24, eps), LlamaRMSNorm(24, eps)
    weight = torch.randn(24)
    with torch.no_grad():
        ours.weight.copy_(weight)
        theirs.weight.copy_(weight)
    x = (torch.randn(3, 7, 24) * 5 + 2).to(dtype)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)
    # RMSNorm is not LayerNorm: it keeps the mean.
    layer_norm = torch.nn.functional.layer_norm(x.float(), (24,), weight, eps=eps)
    assert not torch.allclose(ours(x.float()), layer_norm, atol=1e-2)


def test_rms_norm_by_hand() -> None:
    norm = RMSNorm(4, eps=0.0)
    x = torch.tensor([[3.0, -4.0, 0.0, 0.0]])  # rms = sqrt(25 / 4) = 2.5
    torch.testing.assert_close(norm(x), torch.tensor([[1.2, -1.6, 0.0, 0.0]]))


@pytest.mark.parametrize("base", [10000.0, 100000.0, 500.0])
@pytest.mark.parametrize("d_head", [8, 64])
def test_rotary_table_equals_llama_rotary_embedding(base: float, d_head: int) -> None:
    config = hf_config(hidden_size=d_head * 2, num_attention_heads=2, rope_theta=base)
    positions = torch.tensor([[0, 1, 2, 5, 17, 63]])
    cos, sin = hf_cos_sin(config, positions)
    ours_cos, ours_sin = rotary_cos_sin(positions, d_head, base)
    torch.testing.assert_close(ours_cos, cos, rtol=0, atol=0)
    torch.testing.assert_close(ours_sin, sin, rtol=0, atol=0)
    table = RotaryEmbedding(d_head, 64, base)
    table_cos, table_sin = table.cos_sin(positions)
    torch.testing.assert_close(table_cos, cos, rtol=0, atol=0)
    torch.testing.assert_close(table_sin, sin, rtol=0, atol=0)
    assert not any(name in table.state_dict() for name in ("cos", "sin"))


def test_rotary_frequencies_by_hand() -> None:
    # θ_i = base^(-2i/d): for d = 4 and base 100 that is 1 and 1/10.
    torch.testing.assert_close(rotary_frequencies(4, 100.0), torch.tensor([1.0, 0.1]))
    angles = rotary_angles(torch.tensor([0, 3]), 4, 100.0)
    torch.testing.assert_close(angles, torch.tensor([[0.0, 0.0], [3.0, 0.3]]))


@pytest.mark.parametrize("offset", [0, 7])
def test_apply_rotary_equals_llama(offset: int) -> None:
    base, d_head, n_heads, n_kv = 100000.0, 16, 6, 2
    config = hf_config(hidden_size=d_head * n_heads, num_attention_heads=n_heads, rope_theta=base)
    q = torch.randn(2, n_heads, 5, d_head)
    k = torch.randn(2, n_kv, 5, d_head)
    positions = torch.arange(offset, offset + 5)
    cos, sin = hf_cos_sin(config, positions[None].expand(2, -1))
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)
    ours_q, ours_k = apply_rotary(q, k, offset=offset, base=base)
    torch.testing.assert_close(ours_q, expected_q, rtol=0, atol=1e-6)
    torch.testing.assert_close(ours_k, expected_k, rtol=0, atol=1e-6)
    # explicit positions (per sequence) and the precomputed table agree
    batch_positions = positions[None].expand(2, -1)
    torch.testing.assert_close(
        apply_rotary(q, k, positions=batch_positions, base=base)[0], expected_q, atol=1e-6, rtol=0
    )
    table_q, table_k = RotaryEmbedding(d_head, 32, base)(q, k, offset=offset)
    torch.testing.assert_close(table_q, expected_q, rtol=0, atol=1e-6)
    torch.testing.assert_close(table_k, expected_k, rtol=0, atol=1e-6)


def interleaved_rotary(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The RoPE paper's pairing of neighbours (2i, 2i+1): the convention HF weights do not use."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2).float() / d)
    angle = positions.float()[:, None] * theta  # (T, d/2)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * angle.cos() - odd * angle.sin()
    out[..., 1::2] = even * angle.sin() + odd * angle.cos()
    return out


def test_interleaved_pairs_on_rotate_half_weights_fail_the_comparison() -> None:
    config = hf_config(hidden_size=32, num_attention_heads=2)
    q, k = torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16)
    positions = torch.arange(6)
    cos, sin = hf_cos_sin(config, positions[None])
    expected_q, _ = apply_rotary_pos_emb(q, k, cos, sin)
    wrong = interleaved_rotary(q, positions, 10000.0)
    assert not torch.allclose(wrong, expected_q, atol=1e-3)
    # ...although both are rotations (norms kept) and agree at position 0: only parity sees it.
    torch.testing.assert_close(wrong.norm(dim=-1), expected_q.norm(dim=-1))
    torch.testing.assert_close(wrong[..., 0, :], expected_q[..., 0, :])


def test_rotated_dot_product_depends_only_on_the_distance() -> None:
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    scores = []
    for m, n in [(3, 1), (12, 10), (42, 40)]:
        q_m, _ = apply_rotary(q, q, offset=m)
        _, k_n = apply_rotary(k, k, offset=n)
        scores.append((q_m * k_n).sum())
    torch.testing.assert_close(scores[0], scores[1], atol=1e-4, rtol=0)
    torch.testing.assert_close(scores[0], scores[2], atol=1e-4, rtol=0)


def test_rotary_table_refuses_positions_beyond_max_len() -> None:
    with pytest.raises(ValueError, match="max_len"):
        RotaryEmbedding(8, 4).cos_sin(torch.tensor([4]))


@pytest.mark.parametrize("bias", [False, True])
def test_gated_feed_forward_equals_llama_mlp(bias: bool) -> None:
    config = hf_config(mlp_bias=bias)
    theirs = LlamaMLP(config)
    ours = GatedFeedForward(48, 80, activation="silu", bias=bias)
    ours.load_state_dict(
        {
            name.replace("gate_proj", "w_gate")
            .replace("up_proj", "w_up")
            .replace("down_proj", "w_down"): value
            for name, value in theirs.state_dict().items()
        }
    )
    x = torch.randn(2, 5, 48)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-6)
    gate, up, product = ours.hidden(x)
    torch.testing.assert_close(up, theirs.up_proj(x))
    torch.testing.assert_close(ours.w_down(product), theirs(x), rtol=0, atol=1e-6)
    torch.testing.assert_close(gate, torch.nn.functional.silu(theirs.gate_proj(x)))
    # swapping the roles of gate and up is a different function
    swapped = theirs.down_proj(theirs.gate_proj(x) * torch.nn.functional.silu(theirs.up_proj(x)))
    assert not torch.allclose(ours(x), swapped, atol=1e-3)


@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(6, 2), (6, 1), (6, 6), (9, 3)])
def test_expand_kv_heads_equals_repeat_kv(n_heads: int, n_kv_heads: int) -> None:
    kv = torch.randn(2, n_kv_heads, 5, 8)
    expanded = expand_kv_heads(kv, n_heads)
    torch.testing.assert_close(expanded, repeat_kv(kv, n_heads // n_kv_heads), rtol=0, atol=0)
    group = n_heads // n_kv_heads
    for h, kv_head in enumerate(kv_head_of(n_heads, n_kv_heads)):
        assert kv_head == h // group
        torch.testing.assert_close(expanded[:, h], kv[:, kv_head])


def test_repeat_instead_of_repeat_interleave_fails_the_comparison() -> None:
    kv = torch.randn(1, 3, 4, 8)
    tiled = kv.repeat(1, 3, 1, 1)  # head h reads kv head h % 3: the wrong grouping
    assert not torch.allclose(tiled, repeat_kv(kv, 3))
    torch.testing.assert_close(expand_kv_heads(kv, 9), repeat_kv(kv, 3))


def test_expand_kv_heads_refuses_a_group_that_does_not_divide() -> None:
    with pytest.raises(ValueError, match="divide"):
        expand_kv_heads(torch.randn(1, 4, 2, 8), 6)


# -- without gradients: the same numbers, written over buffers of their own making ---------------


def _mlp_pair(bias: bool = False) -> tuple[GatedFeedForward, LlamaMLP]:
    theirs = LlamaMLP(hf_config(mlp_bias=bias))
    ours = GatedFeedForward(48, 80, activation="silu", bias=bias)
    renames = {"gate_proj": "w_gate", "up_proj": "w_up", "down_proj": "w_down"}
    state = {}
    for name, value in theirs.state_dict().items():
        for old, new in renames.items():
            name = name.replace(old, new)
        state[name] = value
    ours.load_state_dict(state)
    return ours, theirs


def rotate_half_by_hand(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


@pytest.mark.parametrize("no_grad", [torch.no_grad, torch.inference_mode])
def test_components_without_gradients_give_the_same_bits_and_leave_their_input(
    no_grad: Any,
) -> None:
    """The inference path writes its products over its own intermediate buffers: bit for bit
    what transformers' Llama classes (and the rotation written here) compute, and the input
    a trace keeps (the queries before rotation, the stream) is left as it was."""
    norm, their_norm = RMSNorm(48, 1e-5), LlamaRMSNorm(48, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(48))
        their_norm.weight.copy_(norm.weight)
    mlp, their_mlp = _mlp_pair()
    x = torch.randn(2, 9, 48)
    q, k = torch.randn(2, 6, 9, 16), torch.randn(2, 2, 9, 16)
    table = RotaryEmbedding(16, 32, 100000.0)
    cos, sin = table.cos[3:12], table.sin[3:12]
    kept = x.clone(), q.clone(), k.clone()
    with no_grad():
        assert not torch.is_grad_enabled()
        torch.testing.assert_close(norm(x), their_norm(x), rtol=0, atol=0)
        torch.testing.assert_close(mlp(x), their_mlp(x), rtol=0, atol=0)
        rotated_q, rotated_k = table(q, k, offset=3)
        torch.testing.assert_close(
            rotated_q, q * cos + rotate_half_by_hand(q) * sin, rtol=0, atol=0
        )
        torch.testing.assert_close(
            rotated_k, k * cos + rotate_half_by_hand(k) * sin, rtol=0, atol=0
        )
    for before, after in zip(kept, (x, q, k), strict=True):
        assert torch.equal(before, after)
    half = x.bfloat16()  # the float32 gain promotes it, as it does in transformers
    with no_grad():
        torch.testing.assert_close(norm(half), their_norm(half), rtol=0, atol=0)


def test_components_with_gradients_give_transformers_gradients() -> None:
    """Training runs the formulas as written (the inference path writes over its buffers): the
    gradients of the input and of every weight equal those through transformers' classes."""
    norm, their_norm = RMSNorm(48, 1e-5), LlamaRMSNorm(48, 1e-5)
    mlp, their_mlp = _mlp_pair(bias=True)
    x = torch.randn(2, 9, 48)
    ours_x, theirs_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    mlp(norm(ours_x)).square().sum().backward()
    their_mlp(their_norm(theirs_x)).square().sum().backward()
    assert ours_x.grad is not None and theirs_x.grad is not None
    torch.testing.assert_close(ours_x.grad, theirs_x.grad, rtol=1e-5, atol=1e-6)
    pairs = [(norm.weight, their_norm.weight), (mlp.w_gate.weight, their_mlp.gate_proj.weight)]
    pairs += [
        (mlp.w_up.bias, their_mlp.up_proj.bias),
        (mlp.w_down.weight, their_mlp.down_proj.weight),
    ]
    for ours, theirs in pairs:
        assert ours.grad is not None and theirs.grad is not None
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)
    q = torch.randn(2, 6, 9, 16, requires_grad=True)
    k = torch.randn(2, 2, 9, 16, requires_grad=True)
    positions = torch.arange(9)[None].expand(2, -1)
    cos, sin = hf_cos_sin(hf_config(hidden_size=96, rope_theta=10000.0), positions)
    ours_q, ours_k = apply_rotary(q, k, base=10000.0)
    (ours_q.sum() + ours_k.square().sum()).backward()
    expected = [t.grad for t in (q, k)]
    q.grad = k.grad = None
    their_q, their_k = apply_rotary_pos_emb(q, k, cos, sin)
    (their_q.sum() + their_k.square().sum()).backward()
    for ours_grad, their_grad in zip(expected, (q.grad, k.grad), strict=True):
        assert ours_grad is not None and their_grad is not None
        torch.testing.assert_close(ours_grad, their_grad, rtol=1e-5, atol=1e-5)


# -- the components together: a Llama forward pass assembled from them ----------------------------


@pytest.mark.parametrize(
    ("family", "n_kv_heads", "tied", "base"),
    [("llama", 2, False, 10000.0), ("llama", 1, True, 500000.0), ("qwen2", 6, False, 1e6)],
)
def test_assembled_components_give_transformers_logits(
    family: str, n_kv_heads: int, tied: bool, base: float
) -> None:

    from transformer.pretrained.llama import config_from_hf, our_name_for_hf

    model = hf_llama_model(
        family,
        hidden_size=48,
        intermediate_size=80,
        num_attention_heads=6,
        num_key_value_heads=n_kv_heads,
        num_hidden_layers=2,
        vocab_size=60,
        rope_theta=base,
        tie_word_embeddings=tied,
    )
    hf_config = model.config
    model.eval()
    config = config_from_hf(hf_config.to_dict())
    weights = {our_name_for_hf(k): v for k, v in model.state_dict().items()}
    if tied:
        weights.pop("generator.proj.weight")
    ids = torch.randint(0, 60, (2, 9))
    with torch.no_grad():
        expected = model(ids).logits
        ours = assembled_llama_logits(weights, config, ids)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)
