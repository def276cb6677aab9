"""Our Transformer against PyTorch's own modules, weights copied across (mask polarity converted
at the one boundary in transformer.core.torch_parity)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from torch import nn

from transformer.core.attention import MultiHeadAttention
from transformer.core.config import ModelConfig, base_config
from transformer.core.layers import Dropout, LayerNorm
from transformer.core.masks import causal_mask, padding_mask, to_torch_nn_mask
from transformer.core.model import Transformer
from transformer.core.run import Capture, Run
from transformer.core.torch_parity import (
    copy_from_torch,
    copy_layer_norm,
    copy_multihead_attention,
    reference_forward,
    torch_reference,
)

# ModelConfig's defaults give the rest: d_model 64, 4 heads, 2 + 2 layers, dropout 0.1.
SMALL = ModelConfig(src_vocab_size=50, tgt_vocab_size=60, d_ff=128)
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def padded_batch(vocab: int, lengths: list[int], pad: int = 0) -> torch.Tensor:
    """(B, max(lengths)) ids in 1..vocab-1, right-padded with ``pad``."""
    batch = torch.full((len(lengths), max(lengths)), pad, dtype=torch.long)
    for row, length in enumerate(lengths):
        batch[row, :length] = torch.randint(1, vocab, (length,))
    return batch


def paired(config: ModelConfig, dtype: torch.dtype, device: torch.device | str = "cpu"):
    ref = torch_reference(config).to(device=device, dtype=dtype).eval()
    ours = Transformer(config).to(device=device, dtype=dtype).eval()
    copy_from_torch(ours, ref)
    return ours, ref


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@contextmanager
def reference_math_path() -> Iterator[None]:
    """torch's own layers without their fused inference fast path (taken in eval mode under
    ``no_grad``): the reference is the layers' written-out math. On CUDA the fused kernels
    (GELU among them) round differently, beyond the tolerance, which says nothing of ours."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_encoder_decoder_matches_nn_transformer(norm, activation, dtype, grad, device):
    config = SMALL.replace(norm=norm, activation=activation)
    ours, ref = paired(config, dtype, device)
    src = padded_batch(config.src_vocab_size, [9, 6, 3]).to(device)  # source padding
    tgt = padded_batch(config.tgt_vocab_size, [7, 7, 4]).to(device)  # target padding
    # Ours runs with and without autograd (its no_grad path writes in place); the reference
    # runs its math path either way.
    with torch.set_grad_enabled(grad):
        with reference_math_path():
            ref_memory, ref_out = reference_forward(ours, ref, src, tgt)
        encoded = ours.encode(src)
        out = ours.decode(tgt, encoded).hidden
    assert max_diff(encoded.memory, ref_memory) <= TOLERANCE[dtype]
    assert max_diff(out, ref_out) <= TOLERANCE[dtype]


@pytest.mark.parametrize("architecture", ["encoder-only", "decoder-only"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_single_stack_models_match_nn_transformer_encoder(architecture, norm):
    config = SMALL.replace(architecture=architecture, norm=norm, activation="gelu")
    ours, ref = paired(config, torch.float64)
    tokens = padded_batch(config.src_vocab_size, [8, 5])
    with torch.no_grad():
        with reference_math_path():
            ref_memory, ref_out = reference_forward(
                ours, ref, *((tokens, None) if architecture == "encoder-only" else (None, tokens))
            )
        if architecture == "encoder-only":
            assert max_diff(ours.encode(tokens).memory, ref_memory) <= 1e-10
        else:
            assert max_diff(ours.decode(tokens).hidden, ref_out) <= 1e-10


def test_base_preset_matches_nn_transformer_in_float64():
    config = base_config()
    ours, ref = paired(config, torch.float64)
    src = padded_batch(config.src_vocab_size, [12, 8])
    tgt = padded_batch(config.tgt_vocab_size, [10, 6])
    with torch.no_grad(), reference_math_path():
        ref_memory, ref_out = reference_forward(ours, ref, src, tgt)
    with torch.no_grad():
        encoded = ours.encode(src)
        out = ours.decode(tgt, encoded).hidden
    assert max_diff(encoded.memory, ref_memory) <= 1e-10
    assert max_diff(out, ref_out) <= 1e-10


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_multihead_attention_matches_nn_multihead_attention(dtype, device):
    d_model, n_heads = 32, 4
    ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True).to(device, dtype).eval()
    config = ModelConfig(d_model=d_model, n_heads=n_heads, dropout=0.0)
    ours = MultiHeadAttention(config).to(device, dtype).eval()
    copy_multihead_attention(ours, ref)
    query = torch.randn(2, 5, d_model, dtype=dtype, device=device)
    memory = torch.randn(2, 7, d_model, dtype=dtype, device=device)
    keys = padded_batch(9, [7, 4]).to(device)
    # Our mask: padding of keys AND a causal-style band; torch gets both in its polarity.
    ours_mask = padding_mask(keys, 0) & causal_mask(5, 7, device=device)  # (B, 1, 5, 7)
    ref_out, ref_weights = ref(
        query,
        memory,
        memory,
        key_padding_mask=to_torch_nn_mask(padding_mask(keys, 0)[:, 0, 0]),
        attn_mask=to_torch_nn_mask(causal_mask(5, 7, device=device)[0, 0]),
        need_weights=True,
        average_attn_weights=False,
    )
    for capture in (False, True):
        run = Run(capture=Capture(trace=capture))
        out = ours(query, memory, ours_mask, run=run)
        probe = run.kept_probe(ours)
        assert max_diff(out, ref_out) <= TOLERANCE[dtype]
    assert probe.weights.shape == (2, n_heads, 5, 7)
    assert max_diff(probe.weights, ref_weights) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_norm_matches_nn_layer_norm(dtype):
    ref = nn.LayerNorm(48, eps=1e-6).to(dtype)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours = LayerNorm(48).to(dtype)
    copy_layer_norm(ours, ref)
    x = torch.randn(3, 5, 48, dtype=dtype) * 4 + 2
    assert max_diff(ours(x), ref(x)) <= TOLERANCE[dtype]


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_dropout_drops_as_nn_dropout_and_hands_back_its_input_where_it_drops_nothing(p):
    x = torch.randn(4, 6, 32, requires_grad=True)
    ours, ref = Dropout(p), nn.Dropout(p)
    torch.manual_seed(7)
    dropped = ours(x)
    torch.manual_seed(7)
    assert torch.equal(dropped, ref(x))  # training: the same cells dropped, the same scale
    assert (dropped is x) == (p == 0.0)  # p = 0 drops nothing: the input itself
    dropped.sum().backward()
    grad = x.grad.clone()
    x.grad = None
    torch.manual_seed(7)
    ref(x).sum().backward()
    assert torch.equal(grad, x.grad)
    ours.eval()
    assert ours(x) is x  # evaluation: nothing dropped, nothing copied
    assert ours.extra_repr() == ref.extra_repr()


def test_mask_polarity_conversion_is_the_inverse():
    ours = padding_mask(torch.tensor([[5, 3, 0, 0]]), pad_id=0)[0, 0, 0]
    assert ours.tolist() == [True, True, False, False]
    assert to_torch_nn_mask(ours).tolist() == [False, False, True, True]
    assert torch.equal(to_torch_nn_mask(to_torch_nn_mask(ours)), ours)
    with pytest.raises(TypeError):
        to_torch_nn_mask(torch.zeros(3))


def test_parity_fails_when_weights_are_not_copied():
    """The parity harness can fail: an uncopied model disagrees with the reference."""
    ref = torch_reference(SMALL).eval()
    ours = Transformer(SMALL).eval()
    src = padded_batch(SMALL.src_vocab_size, [5, 3])
    tgt = padded_batch(SMALL.tgt_vocab_size, [4, 4])
    with torch.no_grad(), reference_math_path():
        ref_memory, _ = reference_forward(ours, ref, src, tgt)
        assert max_diff(ours.encode(src).memory, ref_memory) > 1e-3


@pytest.mark.cuda
def test_cuda_forward_matches_cpu():
    ours, _ = paired(SMALL, torch.float32)
    src = padded_batch(SMALL.src_vocab_size, [6, 4])
    tgt = padded_batch(SMALL.tgt_vocab_size, [5, 3])
    with torch.no_grad():
        cpu = ours(src, tgt)
        gpu = ours.to("cuda")(src.cuda(), tgt.cuda()).cpu()
    assert max_diff(cpu, gpu) <= 1e-4
