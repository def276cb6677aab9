"""Phi-3 and Phi-4-mini: the Llama block with fused projections and, in Phi-4-mini, partial
rotary.

Why: the checkpoint stores q, k and v as one ``qkv_proj`` (rows ``[q; k; v]``) and the gate
and up projections as one ``gate_up_proj`` (rows ``[gate; up]``): one matrix product instead
of three or two, the same numbers. We split them here, at load, into our ``w_q``, ``w_k``,
``w_v``, ``w_gate`` and ``w_up``, so every view shows the usual parts. Phi-4-mini rotates
three quarters of each head (``partial_rotary_factor``, our ``rotary_fraction``); its long
context uses ``longrope`` scaling, whose short factors hold within the trained length (our
``max_len`` stops there). Phi-3-mini's ``sliding_window`` (2,047) bounds each layer's reading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ..core.config import ModelConfig
from ..text.tokenization import Tokenizer
from ._common import PretrainedError, TensorReader
from .llama import (
    LLAMA_GLOBALS,
    LLAMA_LAYER_PARTS,
    check_model_type,
    decoder_config,
    map_named_weights,
)
from .llama import load_tokenizer as _load_tokenizer

FAMILY = "phi3"
SUMMARY = "Phi-3 family (fused projections): continues the prompt"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("phi3",)
PREFIXES = ("",)
PROBE = "model.embed_tokens.weight"

# our part → (the fused tensor, which block of its rows)
_FUSED = {
    "self_attention.w_q": ("self_attn.qkv_proj", 0),
    "self_attention.w_k": ("self_attn.qkv_proj", 1),
    "self_attention.w_v": ("self_attn.qkv_proj", 2),
    "feed_forward.w_gate": ("mlp.gate_up_proj", 0),
    "feed_forward.w_up": ("mlp.gate_up_proj", 1),
}
# Llama's parts, less those cut from a fused tensor.
LAYER_PARTS = {theirs: ours for theirs, ours in LLAMA_LAYER_PARTS.items() if ours not in _FUSED}


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for a Phi-3 ``config.json``."""
    family = check_model_type(hf, MODEL_TYPES)
    parameters = hf.get("rope_parameters") or {}
    fraction = hf.get("partial_rotary_factor") or parameters.get("partial_rotary_factor", 1.0)
    return decoder_config(
        hf, family, rotary_fraction=float(fraction), sliding_window=hf.get("sliding_window")
    )


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our parameter names → the folder's tensors, the fused projections cut into theirs
    (``None`` where missing)."""
    d_q, d_kv = config.n_heads * config.d_head, config.kv_heads * config.d_head
    blocks = {"self_attn.qkv_proj": (d_q, d_kv, d_kv), "mlp.gate_up_proj": (config.d_ff,) * 2}
    read: dict[tuple[str, str, str], Tensor | None] = {}

    def fused(layer: str, part: str, kind: str) -> Tensor | None:
        if part not in _FUSED:
            raise PretrainedError(f"internal mapping error: nothing reads {part}")
        name, index = _FUSED[part]
        key = (layer, name, kind)
        if key not in read:
            read[key] = reader.get(f"model.layers.{layer}.{name}.{kind}")
        tensor = read[key]
        if tensor is None:
            return None
        sizes = blocks[name]
        if tensor.shape[0] != sum(sizes):
            raise PretrainedError(
                f"{name} of layer {layer} has {tensor.shape[0]} rows; config.json implies "
                f"{' + '.join(map(str, sizes))}"
            )
        return tensor.split(sizes, dim=0)[index].contiguous()

    return map_named_weights(reader, config, LAYER_PARTS, LLAMA_GLOBALS, fused=fused)


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` of the folder (the only form read)."""
    return _load_tokenizer(folder)
