"""Qwen3: the Llama block with an RMSNorm on each head's queries and keys before their rotation.

Why: without it, a query's or key's length grows with its weights and the scores with both, so
a few heads saturate their softmax; normalising each head's q and k (``qk_norm="head"``, the
norm's gain learned per dimension) keeps the scores at a scale the training chose. Qwen3 also
has no q/k/v biases (Qwen2 had them) and heads of their own width (``head_dim`` 128 at every
size, not ``hidden_size / num_attention_heads``). Weight names are Llama's plus
``self_attn.q_norm`` and ``self_attn.k_norm``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ..core.config import ModelConfig
from ..text.tokenization import Tokenizer
from ._common import TensorReader
from .llama import (
    LLAMA_GLOBALS,
    LLAMA_LAYER_PARTS,
    QK_NORM_PARTS,
    check_model_type,
    decoder_config,
    layer_types,
    map_named_weights,
)
from .llama import load_tokenizer as _load_tokenizer

FAMILY = "qwen3"
SUMMARY = "Qwen3 (QK-norm): continues the prompt"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("qwen3",)
PREFIXES = ("",)
PROBE = "model.embed_tokens.weight"

LAYER_PARTS = LLAMA_LAYER_PARTS | QK_NORM_PARTS


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for a Qwen3 ``config.json`` (``qk_norm="head"``; a sliding
    window only where ``use_sliding_window`` switches it on, on the layers ``layer_types``
    marks)."""
    family = check_model_type(hf, MODEL_TYPES)
    window = hf.get("sliding_window") if hf.get("use_sliding_window") else None
    types = layer_types(hf, hf.get("num_hidden_layers", 0)) if window else None
    return decoder_config(hf, family, qk_norm="head", sliding_window=window, layer_types=types)


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our parameter names → the folder's tensors (``None`` where missing)."""
    return map_named_weights(reader, config, LAYER_PARTS, LLAMA_GLOBALS)


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` of the folder (the only form read)."""
    return _load_tokenizer(folder)
