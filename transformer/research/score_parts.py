"""Why a head attends: its pre-softmax scores split into parts that add up to them.

With absolute positions (learned or sinusoidal) the first layer reads token + position, so a
query and a key are each (token + position) times W, and their product has four parts:
token-token (content meets content), token-position, position-token and position-position
(where the head looks regardless of the words). With rotary positions nothing is added: q and
k are turned, pair of dimensions by pair of dimensions, each pair at its own frequency, so the
score is a sum over the pairs: fast pairs turn a lot between neighbours (position), slow pairs
hardly at all (content).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

import torch
from torch import Tensor

from ..core.attention import MultiHeadAttention
from ..core.layers import LayerNorm
from ..core.model import Transformer
from ..core.modern import RMSNorm
from ..core.operations import PAPER, Site
from ..core.run import Call, Capture
from ..core.stacks import DecoderLayer, EncoderLayer
from ._common import as_ids, source_for

Pairing = Literal["half", "interleaved"]


def attention_score_parts(
    model: Transformer,
    ids: Tensor | Sequence[int],
    layer: int,
    head: int,
    *,
    source: Tensor | Sequence[int] | None = None,
) -> dict[str, Tensor]:
    """One head's ``(queries, keys)`` scores, before the mask, as a sum of named parts.

    The computation. Absolute positions (``s`` and ``t`` each one of the sources ``token``,
    ``position``, ``earlier layers`` (the stream minus both, 0 in layer 0) and ``bias``)::

        h      = N(x) = Σ_s N(s) + β       # pre-norm: the norm with its divisor frozen at x
        q_s    = N(s) · W_Q                # and q_bias = β · W_Q + b_Q; k likewise
        part   = scale · q_s · k_tᵀ        # (queries, keys), for each pair (s, t)

    Rotary positions (pair ``i`` turns dimensions ``i`` and ``i + r/2`` of a head by angle
    ``position · θ_i``, ``θ_i = base^(−2i/r)``)::

        part_i = scale · (q_rot[i] k_rot[i] + q_rot[i + r/2] k_rot[i + r/2])

    Args:
        model: any model; the decoder's self-attention is read where there is a decoder (an
            encoder-decoder's, its ``source`` given), else the encoder's.
        ids: the text, ``(T,)`` or ``(1, T)`` (an encoder-only model's input).
        layer, head: which head (a query head, with grouped-query attention).
        source: the encoder's input of an encoder-decoder model.

    Returns:
        Absolute positions: ``"token-token"``, ``"token-position"``, ``"position-token"``,
        ``"position-position"``, ``"earlier layers"`` (every pair with the rest of the stream on
        a side) and ``"bias"`` (the other pairs with a bias on a side). Rotary: ``"pair 0"`` …
        ``"pair {r/2 − 1}"`` (fastest first), and ``"unrotated"`` where only part of a head
        turns. Each ``(queries, keys)``; they sum to the scores the model computes, scaled as it
        scales them (by ``1/√d_head``), before the mask and before a soft cap.
    """
    text = as_ids(ids)
    decoder = model.config.has_decoder
    stack, kind = ("decoder", "decoder_self") if decoder else ("encoder", "encoder_self")
    layers = (model.decoder if decoder else model.encoder).layers
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer must lie in 0..{len(layers) - 1}, got {layer}")
    if not 0 <= head < model.config.n_heads:
        raise ValueError(f"head must lie in 0..{model.config.n_heads - 1}, got {head}")
    block = layers[layer]
    assert isinstance(block, DecoderLayer | EncoderLayer)
    attention = block.self_attention
    src = source_for(model, source) if decoder else None
    kept: dict[Site, Tensor] = {}

    def keep(site: Site, x: Tensor) -> Tensor:
        if site == (stack, layer, "residual"):
            kept[site] = x.detach().clone()
        return x

    call = Call(ops=replace(PAPER, patch=keep), capture=Capture())
    with torch.inference_mode():
        trace = model(src, text, call=call) if decoder else model(text, call=call)
        record = trace.attention(kind, layer)
        scale = attention.score_scale()
        if attention.rotary is not None:
            assert record.rotary is not None  # a rotary attention keeps its pair
            q = record.rotary.queries_before[0, head]  # (T, d_head), before the rotation
            k = record.rotary.keys_before[0, attention.kv_head_of[head]]
            return rotary_parts(q, k, attention, scale)
        x = kept[(stack, layer, "residual")][0]  # (T, d_model): the stream entering the layer
        residual = (
            block.self_attention_residual
            if isinstance(block, DecoderLayer)
            else block.attention_residual
        )
        norm = residual.norm if residual.pre_norm else None
        embedding = model.tgt_embedding if decoder else model.src_embedding
        positional = model.tgt_positional if decoder else model.src_positional
        assert embedding is not None and positional is not None  # absolute positions
        token = embedding(text)[0]  # (T, d_model)
        position = positional(text.size(1), 0)
        return absolute_parts(x, token, position, norm, attention, head, scale)


def absolute_parts(
    x: Tensor,
    token: Tensor,
    position: Tensor,
    norm: LayerNorm | RMSNorm | None,
    attention: MultiHeadAttention,
    head: int,
    scale: float,
) -> dict[str, Tensor]:
    """The parts of head ``head``'s ``(T, T)`` scores from the ``(T, d_model)`` stream ``x``
    its layer reads, split into ``token``, ``position`` and the rest (``norm``: the pre-norm
    before the attention, its divisor frozen at ``x``; ``None`` where it reads ``x`` itself)."""
    if attention.q_norm is not None:
        raise ValueError("this model normalises q and k: their parts do not add up")
    sources = {"token": token, "position": position, "earlier layers": x - token - position}
    bias = torch.zeros_like(x[0])
    if norm is not None:
        divisor = _divisor(norm, x)  # (T, 1)
        if isinstance(norm, LayerNorm):
            read = {
                n: norm.weight * (s - s.mean(-1, keepdim=True)) / divisor
                for n, s in sources.items()
            }
            bias = norm.bias
        else:
            read = {n: (norm.offset + norm.weight) * s / divisor for n, s in sources.items()}
    else:
        read = sources
    d_head, kv = attention.d_head, attention.kv_head_of[head]
    rows_q, rows_k = (
        slice(head * d_head, (head + 1) * d_head),
        slice(kv * d_head, (kv + 1) * d_head),
    )
    w_q, w_k = attention.w_q.weight[rows_q], attention.w_k.weight[rows_k]  # (d_head, d_model)
    b_q = bias @ w_q.T + (0 if attention.w_q.bias is None else attention.w_q.bias[rows_q])
    b_k = bias @ w_k.T + (0 if attention.w_k.bias is None else attention.w_k.bias[rows_k])
    q = {n: h @ w_q.T for n, h in read.items()} | {"bias": b_q.expand(x.size(0), -1)}
    k = {n: h @ w_k.T for n, h in read.items()} | {"bias": b_k.expand(x.size(0), -1)}
    parts = {
        f"{a}-{b}": scale * q[a] @ k[b].T
        for a in ("token", "position")
        for b in ("token", "position")
    }
    rest, biases = torch.zeros_like(parts["token-token"]), torch.zeros_like(parts["token-token"])
    for a in q:
        for b in k:
            if "earlier layers" in (a, b):
                rest += scale * q[a] @ k[b].T
            elif "bias" in (a, b):
                biases += scale * q[a] @ k[b].T
    return parts | {"earlier layers": rest, "bias": biases}


def _divisor(norm: LayerNorm | RMSNorm, x: Tensor) -> Tensor:
    """The ``(T, 1)`` divisor ``norm`` applies to each row of ``x``: σ or the root mean square."""
    if isinstance(norm, LayerNorm):
        return torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + norm.eps)
    return torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + norm.eps)


def rotary_parts(
    q: Tensor, k: Tensor, attention: MultiHeadAttention, scale: float, pairing: Pairing = "half"
) -> dict[str, Tensor]:
    """The ``(T, T)`` score parts of one head, one per rotary pair, from its ``(T, d_head)``
    queries and keys *before* their rotation, turned here pair by pair by the model's own
    cos/sin table. ``pairing``: which dimensions turn together: ``"half"`` (i and i + r/2, the
    Llama family's "rotate half", what the model does) or ``"interleaved"`` (2i and 2i + 1,
    the RoFormer paper's; wrong here, kept so a test can show the parts then miss)."""
    rotary = attention.rotary
    assert rotary is not None
    length, r = q.size(0), rotary.rotary_dims
    cos, sin = rotary.cos[:length].to(q), rotary.sin[:length].to(q)  # (T, r), each angle twice
    parts = {}
    for i in range(r // 2):
        a, b = (i, i + r // 2) if pairing == "half" else (2 * i, 2 * i + 1)
        c, s = cos[:, i : i + 1], sin[:, i : i + 1]  # (T, 1): pair i's angle at each position
        q_pair = torch.cat(
            [q[:, a : a + 1] * c - q[:, b : b + 1] * s, q[:, b : b + 1] * c + q[:, a : a + 1] * s],
            1,
        )
        k_pair = torch.cat(
            [k[:, a : a + 1] * c - k[:, b : b + 1] * s, k[:, b : b + 1] * c + k[:, a : a + 1] * s],
            1,
        )
        parts[f"pair {i}"] = scale * q_pair @ k_pair.T  # (T, T)
    if r < q.size(1):
        parts["unrotated"] = scale * q[:, r:] @ k[:, r:].T
    return parts
