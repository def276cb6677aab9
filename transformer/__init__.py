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
from .layers import LayerNorm, PositionwiseFeedForward
from .masks import causal_mask, combine_masks, padding_mask, to_torch_nn_mask
from .model import (
    DecoderCache,
    DecoderLayer,
    EncoderLayer,
    Intervention,
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

# Pretrained Hugging Face models (BERT, GPT-2, Marian families); appended, not merged above.
from .pretrained import PretrainedError, load_pretrained, load_shipped, shipped_models

__all__ += ["PretrainedError", "load_pretrained", "load_shipped", "shipped_models"]
