"""GPT-NeoX and Pythia: attention and feed-forward side by side, rotary on part of each head.

Why: a layer computes ``x + Attn(LN₁(x)) + FF(LN₂(x))`` (``parallel_residual``): both
sub-layers read the same input, so they can run at once (GPT-J's trick, kept by GPT-NeoX for
speed at scale); rotary positions turn only the first ``rotary_pct`` of each head's
dimensions (``rotary_fraction``, a quarter in Pythia), the rest carry content alone. The norms
are LayerNorms with a bias, and every projection has one. Pythia's checkpoints across training
are what interpretability courses read.

Weight names: ``gpt_neox.embed_in``, ``gpt_neox.layers.{i}.input_layernorm`` /
``post_attention_layernorm`` (the two norms, both reading the layer's input),
``attention.query_key_value`` (q, k and v *interleaved per head*: rows ``[q₀ k₀ v₀ q₁ k₁ v₁
…]``, split here), ``attention.dense``, ``mlp.dense_h_to_4h`` / ``dense_4h_to_h``,
``gpt_neox.final_layer_norm`` and ``embed_out`` (the untied read-out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ..core.config import ModelConfig
from ..text.tokenization import Tokenizer
from ._common import PretrainedError, TensorReader, activation, require
from .llama import (
    check_model_type,
    decoder_config,
    map_named_weights,
    rope_settings,
    special_token_id,
)
from .llama import load_tokenizer as _load_tokenizer

FAMILY = "gpt_neox"
SUMMARY = "GPT-NeoX / Pythia (parallel attention and feed-forward): continues the prompt"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("gpt_neox",)
PREFIXES = ("",)
PROBE = "gpt_neox.embed_in.weight"

LAYER_PARTS = {
    "input_layernorm": "self_attention_residual.norm",
    "post_attention_layernorm": "feed_forward_residual.norm",
    "attention.dense": "self_attention.w_o",
    "mlp.dense_h_to_4h": "feed_forward.linear1",
    "mlp.dense_4h_to_h": "feed_forward.linear2",
}
GLOBALS = {
    "gpt_neox.embed_in.weight": "tgt_embedding.lookup.weight",
    "gpt_neox.final_layer_norm.weight": "decoder.final_norm.weight",
    "gpt_neox.final_layer_norm.bias": "decoder.final_norm.bias",
    "embed_out.weight": "generator.proj.weight",
}
_FUSED = {"self_attention.w_q": 0, "self_attention.w_k": 1, "self_attention.w_v": 2}


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for a GPT-NeoX ``config.json``: the Llama-shaped decoder with
    NeoX's differences (LayerNorms, a plain GELU feed-forward, biases, part-rotary heads, the two
    sub-layers in parallel)."""
    family = check_model_type(hf, MODEL_TYPES)
    vocab = require(hf, "vocab_size", family)
    rope = rope_settings(hf)
    if "rotary_emb_base" in hf:  # the name before transformers 5
        rope["rope_base"] = float(hf["rotary_emb_base"])
    parameters = hf.get("rope_parameters") or {}
    fraction = hf.get("rotary_pct", parameters.get("partial_rotary_factor", 1.0))
    eos = special_token_id(hf.get("eos_token_id"), vocab)
    bias = bool(hf.get("attention_bias", True))
    return decoder_config(
        hf,
        family,
        head_dim=None,
        n_kv_heads=None,
        activation=activation(hf.get("hidden_act", "gelu"), "hidden_act"),
        norm_kind="layer",
        rotary_fraction=float(fraction),
        feed_forward_kind="standard",
        pad_id=eos if eos is not None else 0,
        layer_norm_eps=float(hf.get("layer_norm_eps", 1e-5)),
        attention_qkv_bias=bias,
        attention_output_bias=bias,
        mlp_bias=True,
        parallel_residual=bool(hf.get("use_parallel_residual", True)),
        **rope,
    )


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our parameter names → the folder's tensors, q, k and v cut from each head's rows of
    ``query_key_value`` (``None`` where missing)."""
    read: dict[tuple[str, str], Tensor | None] = {}
    n_heads, d_head = config.n_heads, config.d_head

    def fused(layer: str, part: str, kind: str) -> Tensor | None:
        if part not in _FUSED:
            raise PretrainedError(f"internal mapping error: nothing reads {part}")
        if (layer, kind) not in read:
            read[(layer, kind)] = reader.get(
                f"gpt_neox.layers.{layer}.attention.query_key_value.{kind}"
            )
        tensor = read[(layer, kind)]
        if tensor is None:
            return None
        if tensor.shape[0] != 3 * n_heads * d_head:
            raise PretrainedError(
                f"attention.query_key_value of layer {layer} has {tensor.shape[0]} rows, not "
                f"3 × {n_heads} heads × {d_head}"
            )
        per_head = tensor.reshape(n_heads, 3, d_head, *tensor.shape[1:])  # [q_h, k_h, v_h]
        return per_head[:, _FUSED[part]].reshape(n_heads * d_head, *tensor.shape[1:]).contiguous()

    return map_named_weights(reader, config, LAYER_PARTS, GLOBALS, "gpt_neox.layers.", fused)


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` of the folder (the only form read)."""
    return _load_tokenizer(folder)
