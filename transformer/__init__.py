"""A from-scratch Transformer ("Attention Is All You Need") built to be read and inspected.

    >>> from transformer import ModelConfig, Transformer
    >>> model = Transformer(ModelConfig()).eval()
    >>> trace = model(src, tgt, capture=True)      # every step, typed
    >>> trace.attention("cross", layer=0).weights  # (B, H, Tq, Tk)

Figures live in ``transformer.figures`` (plotly); nothing here imports a UI.
"""

from .attention import KeyValueCache, MultiHeadAttention, scaled_dot_product_attention
from .checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from .config import ConfigError, ModelConfig, base_config
from .embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)
from .inspection import Analysis, analyse
from .interventions import Intervention
from .layers import LayerNorm, PositionwiseFeedForward
from .masks import causal_mask, combine_masks, padding_mask, to_torch_nn_mask
from .model import (
    DecoderCache,
    DecoderLayer,
    EncoderLayer,
    Transformer,
    count_parameters,
)
from .text.bpe_learning import BPELearningTrace, MergeStep, learn_bpe
from .text.corpus import bundled_corpus
from .text.replay import WordReplay, replay
from .text.tokenization import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    Tokenizer,
    TokenizerError,
    TokenRecord,
    train_tokenizer,
)
from .trace import AttentionRecord, LayerTrace, StackInput, Trace

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "Analysis",
    "AttentionRecord",
    "BPELearningTrace",
    "Checkpoint",
    "CheckpointError",
    "ConfigError",
    "DecoderCache",
    "DecoderLayer",
    "EncoderLayer",
    "Intervention",
    "KeyValueCache",
    "LayerNorm",
    "LayerTrace",
    "LearnedPositionalEmbedding",
    "MergeStep",
    "ModelConfig",
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "SinusoidalPositionalEncoding",
    "StackInput",
    "TokenEmbedding",
    "TokenRecord",
    "Tokenizer",
    "TokenizerError",
    "Trace",
    "Transformer",
    "WordReplay",
    "analyse",
    "base_config",
    "bundled_corpus",
    "causal_mask",
    "combine_masks",
    "count_parameters",
    "learn_bpe",
    "load_checkpoint",
    "padding_mask",
    "replay",
    "save_checkpoint",
    "scaled_dot_product_attention",
    "sinusoidal_table",
    "to_torch_nn_mask",
    "train_tokenizer",
]

# Reading an analysis, the what-ifs by name, decoding from text, parameters per component.
from .analysis import (
    WHAT_IF_SWITCHES,
    axis_pieces,
    parameter_groups,
    prompt_ids,
    real_keys,
    reference_targets,
    start_decoding,
    what_if,
)

# The seeds' mistakes as switches of the forward pass, and what each does to a model's output.
from .mistakes import MISTAKES, Mistake, MistakeEffect, mistake_effect

# Pretrained Hugging Face models (BERT, GPT-2 and Marian families) on our own Transformer.
from .pretrained import PretrainedError, load_pretrained, load_shipped, shipped_models

# Live training, loaded on first use: it pulls in the recipes and the toy tasks.
_LAZY = {
    "LiveTraining": ".training.live",
    "TaskRun": ".training.live",
    "prepare_task_run": ".training.live",
    "snapshot_checkpoint": ".training.live",
}

__all__ += [
    "MISTAKES",
    "Mistake",
    "MistakeEffect",
    "mistake_effect",
]
__all__ += [
    "WHAT_IF_SWITCHES",
    "LiveTraining",
    "PretrainedError",
    "TaskRun",
    "axis_pieces",
    "load_pretrained",
    "load_shipped",
    "parameter_groups",
    "prepare_task_run",
    "prompt_ids",
    "real_keys",
    "reference_targets",
    "shipped_models",
    "snapshot_checkpoint",
    "start_decoding",
    "what_if",
]


def __getattr__(name: str) -> object:
    """Names loaded on first use (PEP 562), so that ``import transformer`` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
