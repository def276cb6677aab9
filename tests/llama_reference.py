"""A Llama forward pass assembled from our standalone components, for tests (not the core model)."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from transformer.core.config import ModelConfig
from transformer.core.modern import GatedFeedForward, RMSNorm, expand_kv_heads
from transformer.core.rotary import RotaryEmbedding


def assembled_llama_logits(
    weights: dict[str, torch.Tensor], config: ModelConfig, ids: torch.Tensor
) -> torch.Tensor:
    """Logits ``(B, T, V)`` of a Llama built from our RMSNorm, rotary, GatedFeedForward and
    expand_kv_heads with the weights under our parameter names (plain torch attention between
    them). Not the core model: evidence that the parts and the name mapping fit together."""
    d, h, h_kv, d_head = config.d_model, config.n_heads, config.kv_heads, config.d_head
    batch, length = ids.shape

    def norm(name: str) -> RMSNorm:
        module = RMSNorm(d, config.layer_norm_eps)
        module.weight.data = weights[name]
        return module

    def project(x: torch.Tensor, name: str, heads: int) -> torch.Tensor:
        out = F.linear(x, weights[name + ".weight"], weights.get(name + ".bias"))
        return out.view(batch, length, heads, d_head).transpose(1, 2)

    rotary = RotaryEmbedding(d_head, length, config.rope_base)
    x = weights["tgt_embedding.lookup.weight"][ids]
    for i in range(config.n_decoder_layers):
        p = f"decoder.layers.{i}."
        hidden = norm(p + "self_attention_residual.norm.weight")(x)
        q = project(hidden, p + "self_attention.w_q", h)
        k = project(hidden, p + "self_attention.w_k", h_kv)
        v = project(hidden, p + "self_attention.w_v", h_kv)
        q, k = rotary(q, k)
        k, v = expand_kv_heads(k, h), expand_kv_heads(v, h)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        merged = attended.transpose(1, 2).reshape(batch, length, d)
        x = x + F.linear(
            merged,
            weights[p + "self_attention.w_o.weight"],
            weights.get(p + "self_attention.w_o.bias"),
        )
        ff = GatedFeedForward(d, config.d_ff, config.activation, bias=config.mlp_bias)
        ff.load_state_dict(
            {
                key.removeprefix(p + "feed_forward."): value
                for key, value in weights.items()
                if key.startswith(p + "feed_forward.")
            }
        )
        x = x + ff(norm(p + "feed_forward_residual.norm.weight")(x))
    x = norm("decoder.final_norm.weight")(x)
    head = weights.get("generator.proj.weight", weights["tgt_embedding.lookup.weight"])
    return x @ head.T
