"""The BERT family (``model_type: "bert"``; MiniLM and sentence-transformers models included).

An encoder-only Transformer: learned absolute positions, token-type (segment) embeddings, a
LayerNorm over the summed embeddings, no √d_model scaling, post-LN layers, GELU (erf) and the
file's ``layer_norm_eps``.

Tensors read (an optional ``bert.`` prefix, as in ``BertForMaskedLM``, is detected)::

    embeddings.{word,position,token_type}_embeddings.weight, embeddings.LayerNorm.*
    encoder.layer.{i}.attention.self.{query,key,value}.*   → self_attention.w_{q,k,v}
    encoder.layer.{i}.attention.output.dense.*             → self_attention.w_o
    encoder.layer.{i}.attention.output.LayerNorm.*         → attention_residual.norm
    encoder.layer.{i}.intermediate.dense.*                 → feed_forward.linear1
    encoder.layer.{i}.output.dense.*                       → feed_forward.linear2
    encoder.layer.{i}.output.LayerNorm.*                   → feed_forward_residual.norm

Ignored when present: ``pooler.*`` (the [CLS] pooler, which no view shows),
``embeddings.position_ids`` (a buffer), and the heads of task models (``cls.*`` of
``BertForMaskedLM``/``BertForPreTraining``, ``classifier.*``, ``qa_outputs.*``). The logits of
the loaded model are the final hidden states scored against the token embedding (the tied
read-out, without the MLM head's transform): BertModel itself has no language-model head.
Old checkpoints that name LayerNorm parameters ``gamma``/``beta`` are read too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors
from torch import Tensor

from ..core.config import ModelConfig
from ..text.tokenization import Tokenizer
from ._common import (
    PretrainedError,
    TensorReader,
    activation,
    build_config,
    load_tokenizer_json,
    read_json,
    require,
    wrap,
)

FAMILY = "bert"
SUMMARY = "BERT family: an encoder, reads the text whole"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("bert",)
PREFIXES = ("", "bert.")
PROBE = "embeddings.word_embeddings.weight"


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for a BERT ``config.json`` (a dict)."""
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise PretrainedError(
            f"config.json: position_embedding_type={hf['position_embedding_type']!r}; only "
            "'absolute' (learned) positions are supported."
        )
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise PretrainedError("config.json: a BERT used as a decoder is not supported")
    d_model = require(hf, "hidden_size", FAMILY)
    vocab = require(hf, "vocab_size", FAMILY)
    return build_config(
        architecture="encoder-only",
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=d_model,
        n_heads=require(hf, "num_attention_heads", FAMILY),
        d_ff=hf.get("intermediate_size", 4 * d_model),
        n_encoder_layers=require(hf, "num_hidden_layers", FAMILY),
        n_decoder_layers=0,
        dropout=float(hf.get("hidden_dropout_prob", 0.1)),
        activation=activation(hf.get("hidden_act", "gelu"), "hidden_act"),
        norm="post",
        positional="learned",
        max_len=hf.get("max_position_embeddings", 512),
        pad_id=hf.get("pad_token_id") or 0,
        tie_embeddings=True,
        layer_norm_eps=float(hf.get("layer_norm_eps", 1e-12)),
        scale_embeddings=False,
        embedding_norm=True,
        n_token_types=hf.get("type_vocab_size", 2),
        generator_bias=False,
    )


_LAYER_PARTS = {  # ours in encoder.layers.{i} → BERT's in encoder.layer.{i}
    "self_attention.w_q": "attention.self.query",
    "self_attention.w_k": "attention.self.key",
    "self_attention.w_v": "attention.self.value",
    "self_attention.w_o": "attention.output.dense",
    "attention_residual.norm": "attention.output.LayerNorm",
    "feed_forward.linear1": "intermediate.dense",
    "feed_forward.linear2": "output.dense",
    "feed_forward_residual.norm": "output.LayerNorm",
}


def _part(reader: TensorReader, ours: str, theirs: str) -> dict[str, Tensor | None]:
    """A linear layer's or a LayerNorm's weight and bias (a LayerNorm's may be named
    ``gamma``/``beta`` in old checkpoints)."""
    old = ("gamma", "beta") if theirs.endswith("LayerNorm") else None
    return reader.weight_and_bias(ours, theirs, old)


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our state-dict names → the file's tensors (``None`` where missing)."""
    weights = {
        "src_embedding.lookup.weight": reader.get("embeddings.word_embeddings.weight"),
        "src_positional.lookup.weight": reader.get("embeddings.position_embeddings.weight"),
        "token_type_embedding.weight": reader.get("embeddings.token_type_embeddings.weight"),
        **_part(reader, "src_embedding_norm", "embeddings.LayerNorm"),
    }
    for i in range(config.n_encoder_layers):
        for ours, theirs in _LAYER_PARTS.items():
            weights |= _part(reader, f"encoder.layers.{i}.{ours}", f"encoder.layer.{i}.{theirs}")
    return weights


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` if the folder has one, else a WordPiece tokenizer from ``vocab.txt``
    (lower-casing as ``tokenizer_config.json``'s ``do_lower_case`` says, default true)."""
    found = load_tokenizer_json(folder)
    if found is not None:
        return found
    vocab_path = folder / "vocab.txt"
    if not vocab_path.is_file():
        raise PretrainedError(
            f"{folder} has neither tokenizer.json nor vocab.txt: a BERT model needs one of them"
        )
    options = (
        read_json(folder / "tokenizer_config.json")
        if (folder / "tokenizer_config.json").is_file()
        else {}
    )
    lowercase = bool(options.get("do_lower_case", True))
    try:
        vocab = models.WordPiece.read_file(str(vocab_path))
    except Exception as error:  # tokenizers raises plain Exception on a bad file
        raise PretrainedError(f"vocab.txt could not be read: {error}") from error
    for token in ("[UNK]", "[CLS]", "[SEP]"):
        if token not in vocab:
            raise PretrainedError(f"vocab.txt has no {token} token")
    backend = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    specials = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t in vocab]
    backend.add_special_tokens(specials)
    return wrap(backend, "vocab.txt")
