"""Mistral: the Llama block whose attention reads a sliding window of the latest positions.

Why: a query at position p reads only positions p − W + 1 … p (``sliding_window`` W, 4,096 in
Mistral 7B v0.1); what lies further back still arrives, layer by layer, through the positions
in between, so a stack of L layers sees L · W back while each layer's cost and its key/value
cache stay bounded by W. The window is drawn in the attention mask (a band under the causal
triangle); the cache keeps W − 1 positions. Later Mistral releases set ``sliding_window`` to
null (every layer reads everything): then the folder is a Llama one. Weight names are Llama's.
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
    check_model_type,
    decoder_config,
    map_named_weights,
)
from .llama import load_tokenizer as _load_tokenizer

FAMILY = "mistral"
SUMMARY = "Mistral (sliding-window attention): continues the prompt"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("mistral",)
PREFIXES = ("",)
PROBE = "model.embed_tokens.weight"


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for a Mistral ``config.json``: every layer slides over
    ``sliding_window`` positions (none where it is null)."""
    family = check_model_type(hf, MODEL_TYPES)
    return decoder_config(hf, family, sliding_window=hf.get("sliding_window"))


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our parameter names → the folder's tensors (``None`` where missing)."""
    return map_named_weights(reader, config, LLAMA_LAYER_PARTS, LLAMA_GLOBALS)


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` of the folder (the only form read)."""
    return _load_tokenizer(folder)
