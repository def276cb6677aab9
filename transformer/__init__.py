"""A from-scratch Transformer ("Attention Is All You Need") built to be read and inspected.

    >>> from transformer import TRACE, ModelConfig, Transformer
    >>> model = Transformer(ModelConfig()).eval()
    >>> trace = model(src, tgt, call=TRACE)        # every step, typed
    >>> trace.attention("cross", layer=0).weights  # (B, H, Tq, Tk)

The paper's components (config, masks, embeddings, layers, attention, model, trace) are imported
here; everything else (tokenizers, checkpoints, pretrained loaders, analysis, training) is loaded
on first use (PEP 562), so ``import transformer`` needs torch only. Figures live in
``transformer.figures`` (plotly); nothing here imports a UI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .core.attention import MultiHeadAttention, scaled_dot_product_attention
from .core.cache import KeyValueCache
from .core.config import ConfigError, ModelConfig, base_config
from .core.embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)
from .core.layers import LayerNorm, PositionwiseFeedForward
from .core.masks import causal_mask, combine_masks, padding_mask, to_torch_nn_mask
from .core.model import (
    DecoderCache,
    DecoderLayer,
    EncoderLayer,
    Transformer,
    count_parameters,
)
from .core.operations import PAPER, Operations
from .core.run import TRACE, Call, Capture
from .core.special import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID
from .core.trace import AttentionRecord, LayerTrace, StackInput, Trace

# Everything outside the paper's components, by the module that defines it: imported on first
# use, so that the core loads neither `tokenizers`, `safetensors` nor the pretrained loaders.
_LAZY: dict[str, str] = {
    # Checkpoints (safetensors + tokenizer files).
    "Checkpoint": ".pretrained.checkpoint",
    "CheckpointError": ".pretrained.checkpoint",
    "load_checkpoint": ".pretrained.checkpoint",
    "save_checkpoint": ".pretrained.checkpoint",
    # One input's analysis, and reading it.
    "Analysis": ".lab.inspection",
    "analyse": ".lab.inspection",
    "analyse_together": ".lab.batched",
    "capture_together": ".lab.batched",
    "WHAT_IF_SWITCHES": ".lab.analysis",
    "axis_pieces": ".lab.analysis",
    "parameter_groups": ".lab.analysis",
    "prompt_ids": ".lab.analysis",
    "real_keys": ".lab.analysis",
    "reference_targets": ".lab.analysis",
    "start_decoding": ".lab.analysis",
    "what_if": ".lab.analysis",
    "toy_vocabulary_note": ".lab.analysis",
    "toy_vocabulary": ".lab.analysis",
    "visible_text": ".lab.analysis",
    "piece_legend": ".lab.analysis",
    "shown_pieces": ".lab.analysis",
    "shown_piece": ".lab.analysis",
    "what_if_switches": ".lab.analysis",
    # Tokenizers (Hugging Face `tokenizers`) and how they arrive at their tokens.
    "Tokenizer": ".text.tokenization",
    "TokenizerError": ".text.tokenization",
    "TokenRecord": ".text.tokenization",
    "train_tokenizer": ".text.tokenization",
    "BPELearningTrace": ".text.bpe_learning",
    "MergeStep": ".text.bpe_learning",
    "learn_bpe": ".text.bpe_learning",
    "bundled_corpus": ".text.corpus",
    "WordReplay": ".text.replay",
    "replay": ".text.replay",
    # What-ifs by name, and the seeds' mistakes, as operations of the forward pass.
    "Intervention": ".lab.interventions",
    "SWITCHES": ".lab.switches",
    "Switch": ".lab.switches",
    "SEED_MISTAKES": ".lab.mistakes",
    "MistakeEffect": ".lab.effects",
    "mistake_effect": ".lab.effects",
    # Pretrained Hugging Face models (BERT, GPT-2 and Marian families) on our own Transformer.
    "PretrainedError": ".pretrained",
    "load_pretrained": ".pretrained",
    "load_shipped": ".pretrained",
    "shipped_models": ".pretrained",
    # What researchers do to a model: patching, ablation, attributions, score parts.
    "activation_patching": ".research",
    "head_ablation": ".research",
    "direct_logit_attribution": ".research",
    "InputAttribution": ".research",
    "input_attribution": ".research",
    "attention_score_parts": ".research",
    # Live training: the recipes and the toy tasks.
    "LiveTraining": ".training.live",
    "TaskRun": ".training.live",
    "prepare_task_run": ".training.live",
    "snapshot_checkpoint": ".training.live",
}

if TYPE_CHECKING:  # what a type checker and an editor see; at run time `__getattr__` loads these
    from .lab.analysis import (
        WHAT_IF_SWITCHES,
        axis_pieces,
        parameter_groups,
        prompt_ids,
        real_keys,
        reference_targets,
        start_decoding,
        what_if,
    )
    from .lab.batched import analyse_together, capture_together
    from .lab.effects import MistakeEffect, mistake_effect
    from .lab.inspection import Analysis, analyse
    from .lab.interventions import Intervention
    from .lab.mistakes import SEED_MISTAKES
    from .lab.switches import SWITCHES, Switch
    from .pretrained import PretrainedError, load_pretrained, load_shipped, shipped_models
    from .pretrained.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
    from .research import (
        InputAttribution,
        activation_patching,
        attention_score_parts,
        direct_logit_attribution,
        head_ablation,
        input_attribution,
    )
    from .text.bpe_learning import BPELearningTrace, MergeStep, learn_bpe
    from .text.corpus import bundled_corpus
    from .text.replay import WordReplay, replay
    from .text.tokenization import Tokenizer, TokenizerError, TokenRecord, train_tokenizer
    from .training.live import LiveTraining, TaskRun, prepare_task_run, snapshot_checkpoint

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "PAPER",
    "SEED_MISTAKES",
    "SPECIAL_TOKENS",
    "SWITCHES",
    "TRACE",
    "UNK_ID",
    "WHAT_IF_SWITCHES",
    "Analysis",
    "AttentionRecord",
    "BPELearningTrace",
    "Call",
    "Capture",
    "Checkpoint",
    "CheckpointError",
    "ConfigError",
    "DecoderCache",
    "DecoderLayer",
    "EncoderLayer",
    "InputAttribution",
    "Intervention",
    "KeyValueCache",
    "LayerNorm",
    "LayerTrace",
    "LearnedPositionalEmbedding",
    "LiveTraining",
    "MergeStep",
    "MistakeEffect",
    "ModelConfig",
    "MultiHeadAttention",
    "Operations",
    "PositionwiseFeedForward",
    "PretrainedError",
    "SinusoidalPositionalEncoding",
    "StackInput",
    "Switch",
    "TaskRun",
    "TokenEmbedding",
    "TokenRecord",
    "Tokenizer",
    "TokenizerError",
    "Trace",
    "Transformer",
    "WordReplay",
    "activation_patching",
    "analyse",
    "analyse_together",
    "attention_score_parts",
    "axis_pieces",
    "base_config",
    "bundled_corpus",
    "capture_together",
    "causal_mask",
    "combine_masks",
    "count_parameters",
    "direct_logit_attribution",
    "head_ablation",
    "input_attribution",
    "learn_bpe",
    "load_checkpoint",
    "load_pretrained",
    "load_shipped",
    "mistake_effect",
    "padding_mask",
    "parameter_groups",
    "piece_legend",
    "prepare_task_run",
    "prompt_ids",
    "real_keys",
    "reference_targets",
    "replay",
    "save_checkpoint",
    "scaled_dot_product_attention",
    "shipped_models",
    "shown_piece",
    "shown_pieces",
    "sinusoidal_table",
    "snapshot_checkpoint",
    "start_decoding",
    "to_torch_nn_mask",
    "toy_vocabulary",
    "toy_vocabulary_note",
    "train_tokenizer",
    "visible_text",
    "what_if",
    "what_if_switches",
]


def __getattr__(name: str) -> object:
    """Load a name outside the paper's components on first use (PEP 562) and keep it."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # the next access is a plain attribute lookup
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The eager names and the lazy ones, so that tab completion lists every public name."""
    return sorted(set(globals()) | set(__all__))
