"""The boundary with PyTorch's own Transformer modules, used by the parity tests and benchmarks.

``torch.nn`` masks say ``True`` = masked out; ours say ``True`` = may attend. This module is the
one place that converts, through :func:`~transformer.core.masks.to_torch_nn_mask`.

``torch.nn`` stores the Q, K, V projections packed in one ``in_proj_weight`` of shape
``(3 d_model, d_model)``; ours are three ``(d_model, d_model)`` linear maps. The copy functions
below move weights from a ``torch.nn`` module into ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .config import ModelConfig
from .layers import LayerNorm, PositionwiseFeedForward
from .masks import causal_mask, padding_mask, to_torch_nn_mask
from .model import DecoderLayer, EncoderLayer, Transformer
from .modern import GatedFeedForward, RMSNorm
from .stacks import Decoder, Encoder


@torch.no_grad()
def copy_layer_norm(ours: LayerNorm | RMSNorm, ref: nn.LayerNorm) -> None:
    """Copy γ and β (and eps) from ``nn.LayerNorm``."""
    if not isinstance(ours, LayerNorm):
        raise ValueError("torch.nn.Transformer's layers have a LayerNorm, not an RMSNorm")
    ours.weight.copy_(ref.weight)
    ours.bias.copy_(ref.bias)
    ours.eps = ref.eps


@torch.no_grad()
def copy_multihead_attention(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    """Copy the packed ``in_proj`` and the ``out_proj`` of ``nn.MultiheadAttention``."""
    if ref.in_proj_weight is None:
        raise ValueError("only nn.MultiheadAttention with equal q/k/v widths is supported")
    w_q, w_k, w_v = ref.in_proj_weight.chunk(3, dim=0)  # each (d_model, d_model)
    b_q, b_k, b_v = ref.in_proj_bias.chunk(3, dim=0)
    for linear, weight, bias in ((ours.w_q, w_q, b_q), (ours.w_k, w_k, b_k), (ours.w_v, w_v, b_v)):
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    ours.w_o.weight.copy_(ref.out_proj.weight)
    ours.w_o.bias.copy_(ref.out_proj.bias)


@torch.no_grad()
def _copy_feed_forward(
    ours: PositionwiseFeedForward | GatedFeedForward, linear1: nn.Linear, linear2: nn.Linear
) -> None:
    if not isinstance(ours, PositionwiseFeedForward):
        raise ValueError("torch.nn.Transformer's layers have a plain feed-forward, not a gated one")
    ours.linear1.load_state_dict(linear1.state_dict())
    ours.linear2.load_state_dict(linear2.state_dict())


def copy_encoder_layer(ours: EncoderLayer | DecoderLayer, ref: nn.TransformerEncoderLayer) -> None:
    """Copy an ``nn.TransformerEncoderLayer`` into an encoder layer, or into a decoder layer
    without cross-attention (a decoder-only layer is an encoder layer with a causal mask)."""
    residuals = (
        ours.attention_residual if isinstance(ours, EncoderLayer) else ours.self_attention_residual
    )
    copy_multihead_attention(ours.self_attention, ref.self_attn)
    _copy_feed_forward(ours.feed_forward, ref.linear1, ref.linear2)
    copy_layer_norm(residuals.norm, ref.norm1)
    copy_layer_norm(ours.feed_forward_residual.norm, ref.norm2)


def copy_decoder_layer(ours: DecoderLayer, ref: nn.TransformerDecoderLayer) -> None:
    """Copy an ``nn.TransformerDecoderLayer`` (self-attention, cross-attention, feed-forward)."""
    if ours.cross_attention is None:
        raise ValueError("this decoder layer has no cross-attention; use copy_encoder_layer")
    copy_multihead_attention(ours.self_attention, ref.self_attn)
    copy_multihead_attention(ours.cross_attention, ref.multihead_attn)
    _copy_feed_forward(ours.feed_forward, ref.linear1, ref.linear2)
    copy_layer_norm(ours.self_attention_residual.norm, ref.norm1)
    copy_layer_norm(ours.cross_attention_residual.norm, ref.norm2)
    copy_layer_norm(ours.feed_forward_residual.norm, ref.norm3)


def torch_reference(config: ModelConfig) -> nn.Transformer | nn.TransformerEncoder:
    """A ``torch.nn`` model with the same stacks as :class:`Transformer` built from ``config``.

    Encoder-decoder: an ``nn.Transformer`` (batch_first) whose encoder and decoder end in a
    LayerNorm only in pre-LN, as ours (``nn.Transformer``'s default always adds one).
    Encoder-only and decoder-only: an ``nn.TransformerEncoder`` (the decoder-only model is run
    with a causal mask). The nested-tensor fast path is disabled: it zeroes padded positions.
    """

    def norm() -> nn.LayerNorm | None:
        return nn.LayerNorm(config.d_model, config.layer_norm_eps) if config.norm == "pre" else None

    layer_args: dict[str, Any] = {
        "d_model": config.d_model,
        "nhead": config.n_heads,
        "dim_feedforward": config.d_ff,
        "dropout": config.dropout,
        "activation": config.activation,
        "layer_norm_eps": config.layer_norm_eps,
        "batch_first": True,
        "norm_first": config.norm == "pre",
    }
    n_self = config.n_encoder_layers if config.has_encoder else config.n_decoder_layers
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**layer_args),
        n_self,
        norm=norm(),
        enable_nested_tensor=False,
    )
    if config.architecture != "encoder-decoder":
        return encoder
    decoder = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(**layer_args), config.n_decoder_layers, norm=norm()
    )
    return nn.Transformer(
        d_model=config.d_model,
        nhead=config.n_heads,
        custom_encoder=encoder,
        custom_decoder=decoder,
        batch_first=True,
    )


@torch.no_grad()
def copy_from_torch(model: Transformer, ref: nn.Transformer | nn.TransformerEncoder) -> None:
    """Copy the stack weights of a :func:`torch_reference` module into ``model``.

    Embeddings and the generator have no ``torch.nn.Transformer`` counterpart and are kept.
    """
    config = model.config
    if isinstance(ref, nn.Transformer):
        encoder, decoder = ref.encoder, ref.decoder
    elif config.has_encoder:
        encoder, decoder = ref, None
    else:
        encoder, decoder = None, ref
    if config.has_encoder:
        _copy_stack(model.encoder, encoder, copy_encoder_layer)
    if config.has_decoder:
        copy = copy_decoder_layer if config.has_encoder else copy_encoder_layer
        _copy_stack(model.decoder, decoder, copy)


def _copy_stack(
    ours: Encoder | Decoder,
    ref: nn.TransformerEncoder | nn.TransformerDecoder | None,
    copy_layer: Callable[[Any, Any], None],
) -> None:
    if ref is None:
        raise ValueError("the torch reference has no stack for this one")
    if len(ours.layers) != len(ref.layers):
        raise ValueError(f"layer counts differ: ours {len(ours.layers)}, torch {len(ref.layers)}")
    for our_layer, ref_layer in zip(ours.layers, ref.layers, strict=True):
        copy_layer(our_layer, ref_layer)
    if (ours.final_norm is None) != (ref.norm is None):
        raise ValueError("one stack ends in a LayerNorm and the other does not")
    if ours.final_norm is not None:
        if not isinstance(ref.norm, nn.LayerNorm):
            raise ValueError("the torch stack does not end in a LayerNorm")
        copy_layer_norm(ours.final_norm, ref.norm)


def reference_forward(
    model: Transformer,
    ref: nn.Transformer | nn.TransformerEncoder,
    src: Tensor | None = None,
    tgt: Tensor | None = None,
) -> tuple[Tensor | None, Tensor | None]:
    """Run ``ref``'s stacks on ``model``'s embedded inputs, with the same masks.

    Returns ``(memory, decoder_output)``: ``(B, Ts, d_model)`` and ``(B, Tt, d_model)``
    (``None`` where the architecture has no such stack), the counterparts of
    ``model.encode(src).memory`` and ``model.decode(tgt, ...).hidden``.
    """
    config = model.config
    pad = config.pad_id

    def embedded(tokens: Tensor, embedding: nn.Module, positional: nn.Module | None) -> Tensor:
        if positional is None:
            raise ValueError("torch.nn.Transformer has no rotary positions: add a positional table")
        return model.embedding_dropout(embedding(tokens) + positional(tokens.size(1)))

    def key_padding(tokens: Tensor) -> Tensor:  # (B, T), True = padding (torch polarity)
        return to_torch_nn_mask(padding_mask(tokens, pad)[:, 0, 0])

    def future(tokens: Tensor) -> Tensor:  # (T, T), True = masked out (torch polarity)
        return to_torch_nn_mask(causal_mask(tokens.size(1), device=tokens.device)[0, 0])

    if config.has_encoder and src is None:
        raise ValueError(f"a {config.architecture} model needs src")
    if config.has_decoder and tgt is None:
        raise ValueError(f"a {config.architecture} model needs tgt")
    if config.architecture == "encoder-decoder":
        assert src is not None and tgt is not None and isinstance(ref, nn.Transformer)
        assert model.src_embedding is not None and model.tgt_embedding is not None
        x_src = embedded(src, model.src_embedding, model.src_positional)
        x_tgt = embedded(tgt, model.tgt_embedding, model.tgt_positional)
        memory = ref.encoder(x_src, src_key_padding_mask=key_padding(src))
        out = ref.decoder(
            x_tgt,
            memory,
            tgt_mask=future(tgt),
            tgt_key_padding_mask=key_padding(tgt),
            memory_key_padding_mask=key_padding(src),
        )
        return memory, out
    if config.architecture == "encoder-only":
        assert src is not None and model.src_embedding is not None
        x_src = embedded(src, model.src_embedding, model.src_positional)
        return ref(x_src, src_key_padding_mask=key_padding(src)), None
    assert tgt is not None and model.tgt_embedding is not None
    x_tgt = embedded(tgt, model.tgt_embedding, model.tgt_positional)
    return None, ref(x_tgt, mask=future(tgt), src_key_padding_mask=key_padding(tgt))
