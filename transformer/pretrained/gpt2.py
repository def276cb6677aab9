"""The GPT-2 family (``model_type: "gpt2"``).

A decoder-only Transformer: learned positions, pre-LN layers with a final LayerNorm, GELU with
the tanh approximation, no √d_model scaling, and the LM head tied to the token embedding with
no bias. GPT-2 stores its projections as ``Conv1D`` — ``y = x W + b`` with ``W`` of shape
``(in, out)``, the transpose of ``nn.Linear``'s — and packs Q, K and V into one ``c_attn``
of width ``3·d_model``, which is split here in that order.

Tensors read (an optional ``transformer.`` prefix, as in ``GPT2LMHeadModel``, is detected)::

    wte.weight, wpe.weight, ln_f.*
    h.{i}.ln_1.*, h.{i}.ln_2.*                    → self_attention_residual / feed_forward_residual
    h.{i}.attn.c_attn.*   (d, 3d), split, ᵀ       → self_attention.w_{q,k,v}
    h.{i}.attn.c_proj.*, h.{i}.mlp.c_fc.*, h.{i}.mlp.c_proj.*  (ᵀ)

Ignored when present: ``lm_head.weight`` (tied to ``wte``; the configuration must say
``tie_word_embeddings``), and the ``h.{i}.attn.bias`` / ``masked_bias`` causal-mask buffers
of old checkpoints. GPT-2 has no padding token: ``<|endoftext|>`` (the ``eos_token_id``)
serves as ``pad_id`` but is never masked (``mask_target_padding=False``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, processors
from torch import Tensor

from ..core.config import ModelConfig
from ..text.tokenization import Tokenizer
from ._common import (
    PretrainedError,
    TensorReader,
    activation,
    build_config,
    load_tokenizer_json,
    require,
    wrap,
)

FAMILY = "gpt2"
SUMMARY = "GPT-2 family: continues the prompt"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("gpt2",)
PREFIXES = ("", "transformer.")
PROBE = "wte.weight"


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for a GPT-2 ``config.json`` (a dict)."""
    if hf.get("scale_attn_by_inverse_layer_idx"):
        raise PretrainedError("config.json: scale_attn_by_inverse_layer_idx=true is not supported")
    if hf.get("add_cross_attention"):
        raise PretrainedError("config.json: a GPT-2 with cross-attention is not supported")
    if not hf.get("tie_word_embeddings", True):
        raise PretrainedError(
            "config.json: tie_word_embeddings=false; only GPT-2 models whose LM head is the "
            "token embedding are supported."
        )
    if not hf.get("scale_attn_weights", True):
        raise PretrainedError("config.json: scale_attn_weights=false is not supported")
    d_model = require(hf, "n_embd", FAMILY)
    vocab = require(hf, "vocab_size", FAMILY)
    eos = hf.get("eos_token_id")
    eos = eos if isinstance(eos, int) and 0 <= eos < vocab else None
    return build_config(
        architecture="decoder-only",
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=d_model,
        n_heads=require(hf, "n_head", FAMILY),
        d_ff=hf.get("n_inner") or 4 * d_model,
        n_encoder_layers=0,
        n_decoder_layers=require(hf, "n_layer", FAMILY),
        dropout=float(hf.get("resid_pdrop", 0.1)),
        activation=activation(hf.get("activation_function", "gelu_new"), "activation_function"),
        norm="pre",
        positional="learned",
        max_len=hf.get("n_positions", 1024),
        pad_id=eos if eos is not None else vocab - 1,
        tie_embeddings=True,
        layer_norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
        scale_embeddings=False,
        generator_bias=False,
        mask_target_padding=False,
        eos_id=eos,
    )


def _conv1d(reader: TensorReader, ours: str, theirs: str) -> dict[str, Tensor | None]:
    weight = reader.get(f"{theirs}.weight")
    return {
        f"{ours}.weight": None if weight is None else weight.t().contiguous(),
        f"{ours}.bias": reader.get(f"{theirs}.bias"),
    }


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our state-dict names → the file's tensors (``None`` where missing)."""
    d = config.d_model
    weights = {
        "tgt_embedding.lookup.weight": reader.get("wte.weight"),
        "tgt_positional.lookup.weight": reader.get("wpe.weight"),
        **reader.weight_and_bias("decoder.final_norm", "ln_f"),
    }
    for i in range(config.n_decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"h.{i}"
        weights |= reader.weight_and_bias(f"{ours}.self_attention_residual.norm", f"{theirs}.ln_1")
        weights |= reader.weight_and_bias(f"{ours}.feed_forward_residual.norm", f"{theirs}.ln_2")
        packed_w = reader.get(f"{theirs}.attn.c_attn.weight")  # (d, 3d)
        packed_b = reader.get(f"{theirs}.attn.c_attn.bias")  # (3d,)
        for j, name in enumerate(("w_q", "w_k", "w_v")):
            key = f"{ours}.self_attention.{name}"
            ok_w = packed_w is not None and tuple(packed_w.shape) == (d, 3 * d)
            ok_b = packed_b is not None and tuple(packed_b.shape) == (3 * d,)
            if packed_w is not None and not ok_w:
                raise PretrainedError(
                    f"model.safetensors: {theirs}.attn.c_attn.weight has shape "
                    f"{tuple(packed_w.shape)}, expected {(d, 3 * d)}"
                )
            weights[f"{key}.weight"] = (
                packed_w[:, j * d : (j + 1) * d].t().contiguous()
                if ok_w and packed_w is not None
                else None
            )
            weights[f"{key}.bias"] = (
                packed_b[j * d : (j + 1) * d].clone() if ok_b and packed_b is not None else None
            )
        weights |= _conv1d(reader, f"{ours}.self_attention.w_o", f"{theirs}.attn.c_proj")
        weights |= _conv1d(reader, f"{ours}.feed_forward.linear1", f"{theirs}.mlp.c_fc")
        weights |= _conv1d(reader, f"{ours}.feed_forward.linear2", f"{theirs}.mlp.c_proj")
    return weights


def byte_level_bpe(bpe: models.BPE) -> tokenizers.Tokenizer:
    """GPT-2's byte-level pipeline around a BPE model: bytes as printable characters split by
    GPT-2's regex (no prefix space), decoded back to bytes, offsets not trimmed. The Llama
    family's GGUF vocabularies use it too."""
    backend = tokenizers.Tokenizer(bpe)
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    return backend


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` if the folder has one, else byte-level BPE from ``vocab.json`` and
    ``merges.txt`` (GPT-2's pre-tokeniser, no prefix space, ``<|endoftext|>`` special)."""
    found = load_tokenizer_json(folder)
    if found is not None:
        return found
    vocab_path, merges_path = folder / "vocab.json", folder / "merges.txt"
    if not (vocab_path.is_file() and merges_path.is_file()):
        raise PretrainedError(
            f"{folder} has neither tokenizer.json nor vocab.json + merges.txt: a GPT-2 model "
            "needs one of them"
        )
    try:
        bpe = models.BPE.from_file(str(vocab_path), str(merges_path))
    except Exception as error:  # tokenizers raises plain Exception on a bad file
        raise PretrainedError(f"vocab.json/merges.txt could not be read: {error}") from error
    backend = byte_level_bpe(bpe)
    if backend.token_to_id("<|endoftext|>") is not None:
        backend.add_special_tokens(["<|endoftext|>"])
    return wrap(backend, "vocab.json/merges.txt")
