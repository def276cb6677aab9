"""OLMo 2: norms on the sub-layers' outputs, not their inputs, and QK-norm over the whole
projection.

Why: in a pre-norm block the stream itself grows layer by layer while each sub-layer reads a
normalised copy; OLMo 2 normalises what each sub-layer *adds* instead (``x + Norm(Attn(x))``,
``norm="output"``), which its authors found steadier in long training. Its queries and keys are
RMS-normalised over the whole projection (all heads at once, ``qk_norm="projection"``; Qwen3
normalises each head alone) before their rotation. Weight names: Llama's, with
``post_attention_layernorm`` and ``post_feedforward_layernorm`` the output norms and
``self_attn.q_norm`` / ``k_norm`` the QK-norms.
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
    LLAMA_PROJECTIONS,
    QK_NORM_PARTS,
    check_model_type,
    decoder_config,
    map_named_weights,
)
from .llama import load_tokenizer as _load_tokenizer

FAMILY = "olmo2"
SUMMARY = "OLMo 2 (norms after the sub-layers): continues the prompt"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("olmo2",)
PREFIXES = ("",)
PROBE = "model.embed_tokens.weight"

LAYER_PARTS = (
    LLAMA_PROJECTIONS
    | QK_NORM_PARTS
    | {  # each sub-layer's one norm, on its output
        "post_attention_layernorm": "self_attention_residual.norm",
        "post_feedforward_layernorm": "feed_forward_residual.norm",
    }
)


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for an OLMo 2 ``config.json``."""
    family = check_model_type(hf, MODEL_TYPES)
    return decoder_config(hf, family, norm="output", qk_norm="projection")


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our parameter names → the folder's tensors (``None`` where missing)."""
    return map_named_weights(reader, config, LAYER_PARTS, LLAMA_GLOBALS)


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` of the folder (the only form read)."""
    return _load_tokenizer(folder)
