"""The Marian family (``model_type: "marian"``: the Helsinki-NLP opus-mt translation models).

The paper's own architecture, encoder-decoder, with Marian's choices: sinusoidal positions laid
out as ``[sin | cos]`` halves, token embeddings × √d_model (``scale_embedding``), post-LN
layers (eps 1e-5), SiLU (``swish``), one embedding shared by source, target and the LM head,
``final_logits_bias`` as the output projection's bias, and decoding that starts from the pad
token (``decoder_start_token_id``), which is therefore never masked on the target side.

Tensors read (an optional ``model.`` prefix, as in ``MarianMTModel``, is detected)::

    shared.weight (or encoder.embed_tokens.weight / decoder.embed_tokens.weight)
    {encoder,decoder}.layers.{i}.self_attn.{q,k,v,out}_proj.*   → self_attention.w_{q,k,v,o}
    {encoder,decoder}.layers.{i}.self_attn_layer_norm.*         → first residual's norm
    decoder.layers.{i}.encoder_attn.{q,k,v,out}_proj.*          → cross_attention.w_{q,k,v,o}
    decoder.layers.{i}.encoder_attn_layer_norm.*                → cross_attention_residual.norm
    {encoder,decoder}.layers.{i}.fc1.*, fc2.*, final_layer_norm.*
    final_logits_bias (1, V)                                    → generator.proj.bias

Ignored when present: ``lm_head.weight`` (tied to the shared embedding), and
``{encoder,decoder}.embed_positions.weight``, which older files store: it is checked against our
``[sin | cos]`` table and a mismatch is an error. A ``MarianModel`` without an LM head has no
``final_logits_bias``; zeros are used, as ``transformers`` does.

Tokenizer: ``tokenizer.json`` if the folder has one; otherwise Marian's own ``source.spm`` and
``vocab.json`` (what the Hub's opus-mt folders ship), read without the ``sentencepiece``
package by :mod:`.spm`. Only the source side is read: one shared vocabulary decodes both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.config import ModelConfig
from ..core.embeddings import sinusoidal_table
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
from .spm import marian_tokenizer

FAMILY = "marian"
SUMMARY = "Marian family: translates"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("marian",)
PREFIXES = ("model.", "")
PROBE = "encoder.layers.0.self_attn.q_proj.weight"


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for a Marian ``config.json`` (a dict)."""
    for ours, (a, b) in {
        "n_heads": ("encoder_attention_heads", "decoder_attention_heads"),
        "d_ff": ("encoder_ffn_dim", "decoder_ffn_dim"),
    }.items():
        if require(hf, a, FAMILY) != require(hf, b, FAMILY):
            raise PretrainedError(
                f"config.json: {a}={hf[a]} differs from {b}={hf[b]}; our model has one {ours} "
                "for both stacks."
            )
    vocab = require(hf, "vocab_size", FAMILY)
    if hf.get("decoder_vocab_size") not in (None, vocab) or not hf.get(
        "share_encoder_decoder_embeddings", True
    ):
        raise PretrainedError(
            "config.json: separate source and target vocabularies are not supported; only "
            "Marian models with one shared embedding are."
        )
    if not hf.get("tie_word_embeddings", True):
        raise PretrainedError("config.json: tie_word_embeddings=false is not supported")
    pad = require(hf, "pad_token_id", FAMILY)
    start = hf.get("decoder_start_token_id")
    eos = hf.get("eos_token_id")
    return build_config(
        architecture="encoder-decoder",
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=require(hf, "d_model", FAMILY),
        n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"],
        n_encoder_layers=require(hf, "encoder_layers", FAMILY),
        n_decoder_layers=require(hf, "decoder_layers", FAMILY),
        dropout=float(hf.get("dropout", 0.1)),
        activation=activation(hf.get("activation_function", "gelu"), "activation_function"),
        norm="post",
        positional="sinusoidal",
        sinusoidal_layout="halves",
        max_len=hf.get("max_position_embeddings", 1024),
        pad_id=pad,
        tie_embeddings=True,
        layer_norm_eps=1e-5,
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        generator_bias=True,
        mask_target_padding=False,
        decoder_start_id=start if start is not None else pad,
        eos_id=eos if isinstance(eos, int) else None,
    )


_FEED_FORWARD = {  # ours → Marian's, in every layer of both stacks
    "feed_forward.linear1": "fc1",
    "feed_forward.linear2": "fc2",
    "feed_forward_residual.norm": "final_layer_norm",
}
_LAYER_PARTS = {  # a stack's attentions (ours → Marian's) and its other weights
    "encoder": (
        {"self_attention": "self_attn"},
        {"attention_residual.norm": "self_attn_layer_norm"} | _FEED_FORWARD,
    ),
    "decoder": (
        {"self_attention": "self_attn", "cross_attention": "encoder_attn"},
        {
            "self_attention_residual.norm": "self_attn_layer_norm",
            "cross_attention_residual.norm": "encoder_attn_layer_norm",
        }
        | _FEED_FORWARD,
    ),
}
_PROJECTIONS = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "out_proj"}


def _check_positions(reader: TensorReader, config: ModelConfig) -> None:
    for stack in ("encoder", "decoder"):
        name = f"{stack}.embed_positions.weight"
        if not reader.has(name):
            continue
        stored = reader.get(name)
        assert stored is not None  # reader.has(name)
        n = min(stored.size(0), config.max_len)
        ours = sinusoidal_table(n, config.d_model, layout="halves")
        if stored.shape[1:] != ours.shape[1:] or not torch.allclose(stored[:n], ours, atol=1e-4):
            raise PretrainedError(
                f"model.safetensors: {reader.prefix}{name} is not the [sin | cos] sinusoidal "
                "table Marian models use; this model's positions are not supported."
            )


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our state-dict names → the file's tensors (``None`` where missing)."""
    _check_positions(reader, config)
    shared = reader.get(
        "shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"
    )
    bias = None
    if "final_logits_bias" in reader.names:
        stored_bias = reader.get("final_logits_bias", absolute=True)
        assert stored_bias is not None  # it is in reader.names
        bias = stored_bias.reshape(-1)
    weights = {
        "src_embedding.lookup.weight": shared,
        "generator.proj.bias": bias if bias is not None else torch.zeros(config.tgt_vocab_size),
    }
    layers = {"encoder": config.n_encoder_layers, "decoder": config.n_decoder_layers}
    for stack, (attentions, others) in _LAYER_PARTS.items():
        for i in range(layers[stack]):
            layer = f"{stack}.layers.{i}"  # the same name in both
            for ours, theirs in attentions.items():
                for w, p in _PROJECTIONS.items():
                    weights |= reader.weight_and_bias(
                        f"{layer}.{ours}.{w}", f"{layer}.{theirs}.{p}"
                    )
            for ours, theirs in others.items():
                weights |= reader.weight_and_bias(f"{layer}.{ours}", f"{layer}.{theirs}")
    return weights


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` of the folder, else Marian's ``source.spm`` + ``vocab.json`` read
    offline as a Unigram tokenizer (see :mod:`.spm`)."""
    found = load_tokenizer_json(folder)
    if found is not None:
        return found
    if not ((folder / "source.spm").is_file() and (folder / "vocab.json").is_file()):
        raise PretrainedError(
            f"{folder} has neither tokenizer.json nor source.spm + vocab.json: a Marian model "
            "needs one of them"
        )
    return wrap(marian_tokenizer(folder), "source.spm/vocab.json")
