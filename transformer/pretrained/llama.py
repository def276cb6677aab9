"""The Llama family (Llama, SmolLM, Qwen2): configuration, weight names and tokenizer mappings.

Two sources describe the same models:

- a Hugging Face folder whose ``config.json`` has ``model_type`` ``"llama"`` or ``"qwen2"``
  (Qwen2: q, k and v projections with a bias, the output projection without);
- a GGUF file (llama.cpp's format, read by :mod:`transformer.pretrained.gguf`) whose
  ``general.architecture`` is ``"llama"``: its ``llama.*`` metadata, its ``blk.{i}.*`` tensors and
  its ``tokenizer.ggml.*`` vocabulary.

Both map onto one :class:`~transformer.core.config.ModelConfig`: a decoder-only, pre-norm stack with
RMSNorm, rotary positions, a gated SiLU feed-forward and grouped-query attention, no √d_model
scaling. Our parameter names (state-dict keys)::

    tgt_embedding.lookup.weight                               token embedding (V, d)
    decoder.layers.{i}.self_attention_residual.norm.weight    RMSNorm before attention
    decoder.layers.{i}.self_attention.w_{q,k,v,o}.{weight,bias}
    decoder.layers.{i}.feed_forward_residual.norm.weight      RMSNorm before the feed-forward
    decoder.layers.{i}.feed_forward.w_{gate,up,down}.{weight,bias}
    decoder.final_norm.weight                                 RMSNorm after the last layer
    generator.proj.weight                                     LM head (absent when tied)

llama.cpp's converter permutes the rows of W_q and W_k (and their biases) within each head so
that its kernels can rotate neighbouring dimensions (2i, 2i+1); Hugging Face's weights, and our
rotary module, pair dimension i with i + d_head/2. :func:`unpermute_rotary_rows` undoes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import models, pre_tokenizers, processors
from torch import Tensor

from ..core.config import ModelConfig
from ..text.tokenization import Tokenizer
from ._common import (
    PretrainedError,
    TensorReader,
    activation,
    build_config,
    check_shapes,
    load_tokenizer_json,
    require,
    wrap,
)
from .gguf import GGUFError, GGUFFile, read_gguf
from .gpt2 import byte_level_bpe

FAMILY = "llama"
SUMMARY = "Llama family: continues the prompt"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("llama", "qwen2")
GGUF_ARCHITECTURES = ("llama",)
PREFIXES = ("",)
PROBE = "model.embed_tokens.weight"

# -- configuration -------------------------------------------------------------------------------


ROPE_SCALINGS = ("linear", "dynamic", "llama3", "yarn", "longrope")
_ORIGINAL_LENGTH_KINDS = ("llama3", "yarn", "longrope", "dynamic")


def rope_settings(hf: dict[str, Any], parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    """``rope_base``, ``rope_scaling`` and ``max_len`` for :class:`ModelConfig` from a
    config.json: ``rope_theta`` at the top level or in ``rope_parameters`` (transformers 5),
    scaling in ``rope_parameters`` or ``rope_scaling``. ``parameters`` overrides where the
    config nests one block per layer type (Gemma 3).

    ``dynamic`` and ``longrope`` change their frequencies beyond the trained length
    (``original_max_position_embeddings``): ``max_len`` stops there, where our table is exact.
    """
    nested = parameters is not None
    given: dict[str, Any] = (parameters if nested else hf.get("rope_parameters")) or {}
    scaling: dict[str, Any] = {} if nested else (hf.get("rope_scaling") or {})
    block = given if given.get("rope_type", "default") != "default" else scaling
    kind = block.get("rope_type", block.get("type"))
    max_len = hf.get("max_position_embeddings", 2048)
    found: dict[str, Any] | None = None
    if kind not in (None, "default"):
        if kind not in ROPE_SCALINGS:
            raise PretrainedError(
                f"config.json: rotary scaling {kind!r} is not supported; supported: "
                f"{', '.join(ROPE_SCALINGS)}."
            )
        skip = ("type", "rope_theta", "partial_rotary_factor")
        found = {k: v for k, v in block.items() if k not in skip and v is not None}
        found["rope_type"] = kind
        if kind in _ORIGINAL_LENGTH_KINDS:
            original = hf.get("original_max_position_embeddings") or found.get(
                "original_max_position_embeddings", max_len
            )
            found["original_max_position_embeddings"] = original
            found.setdefault("max_position_embeddings", max_len)
            if kind in ("dynamic", "longrope"):
                max_len = min(max_len, original)
        for key, value in found.items():
            if isinstance(value, list):
                found[key] = tuple(value)
    theta = (
        given.get("rope_theta", 10000.0)
        if nested
        else hf.get("rope_theta", given.get("rope_theta", 10000.0))
    )
    return {"rope_base": float(theta), "rope_scaling": found, "max_len": max_len}


def head_dim(hf: dict[str, Any], d_model: int, n_heads: int) -> int | None:
    """``head_dim`` from a config.json where it is not d_model / n_heads (Qwen3, Gemma,
    Mistral Nemo), else ``None``."""
    value = hf.get("head_dim")
    if value is None or value * n_heads == d_model:
        return None
    if not isinstance(value, int) or value < 1:
        raise PretrainedError(f"config.json: head_dim={value!r} is not a positive integer")
    return value


def special_token_id(value: Any, vocab: int) -> int | None:
    """A config's special-token entry (an id, or a list whose first id counts) as an id
    within ``vocab``; None when it is missing or out of range."""
    if isinstance(value, list):  # some configs list several end tokens: the first one
        value = value[0] if value else None
    return value if isinstance(value, int) and 0 <= value < vocab else None


def check_model_type(hf: dict[str, Any], model_types: tuple[str, ...]) -> str:
    """``hf``'s ``model_type`` if it is one of ``model_types``, else an error naming them."""
    model_type = hf.get("model_type")
    if model_type not in model_types:
        raise PretrainedError(
            f"config.json has model_type={model_type!r}; this loader reads {model_types}."
        )
    return str(model_type)


LLAMA_BLOCK: dict[str, Any] = dict(
    architecture="decoder-only",
    n_encoder_layers=0,
    norm="pre",
    norm_kind="rms",
    positional="rotary",
    feed_forward_kind="gated",
    scale_embeddings=False,
    generator_bias=False,
    mask_target_padding=False,
)
"""What makes a model Llama-shaped, as :class:`ModelConfig` fields, whether it is read from a
``config.json`` or a GGUF file: decoder-only, pre-norm RMSNorm, rotary positions, a gated
feed-forward, unscaled embeddings, no output bias, and a pad id that may be real text."""


def decoder_config(hf: dict[str, Any], family: str, **changes: Any) -> ModelConfig:
    """The Llama-shaped :class:`ModelConfig` of a ``config.json`` (decoder-only, pre-norm
    RMSNorm, rotary, gated SiLU feed-forward, grouped-query attention, no biases, untied unless
    it says so), with ``changes`` (a family's differences) over it."""
    d_model = require(hf, "hidden_size", family)
    n_heads = require(hf, "num_attention_heads", family)
    if hf.get("pretraining_tp", 1) not in (1, None):
        raise PretrainedError("config.json: pretraining_tp > 1 is not supported")
    vocab = require(hf, "vocab_size", family)
    attention_bias = bool(hf.get("attention_bias", False))
    eos = special_token_id(hf.get("eos_token_id"), vocab)
    pad = special_token_id(hf.get("pad_token_id"), vocab)
    fields: dict[str, Any] = dict(
        LLAMA_BLOCK,
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=d_model,
        n_heads=n_heads,
        head_dim=head_dim(hf, d_model, n_heads),
        n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        d_ff=require(hf, "intermediate_size", family),
        n_decoder_layers=require(hf, "num_hidden_layers", family),
        dropout=float(hf.get("attention_dropout", 0.0) or 0.0),
        activation=activation(hf.get("hidden_act", "silu"), "hidden_act"),
        pad_id=pad if pad is not None else (eos if eos is not None else 0),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        layer_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        eos_id=eos,
        attention_qkv_bias=attention_bias,
        attention_output_bias=attention_bias,
        mlp_bias=bool(hf.get("mlp_bias", False)),
    )
    fields.update(rope_settings(hf))
    fields.update(changes)
    return build_config(**fields)


def layer_types(hf: dict[str, Any], n_layers: int) -> tuple[str, ...] | None:
    """config.json's ``layer_types`` (which layers slide), checked, or ``None``."""
    types = hf.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n_layers:
        raise PretrainedError(
            f"config.json: layer_types must list one entry per layer ({n_layers}), got {types!r}"
        )
    return tuple(types)


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for a ``config.json`` of ``model_type`` llama or qwen2
    (Qwen2: q, k and v projections with a bias, the output projection without)."""
    model_type = check_model_type(hf, MODEL_TYPES)
    if hf.get("use_sliding_window"):
        raise PretrainedError("config.json: use_sliding_window=true is not supported")
    if model_type == "qwen2":
        return decoder_config(hf, model_type, attention_qkv_bias=True, attention_output_bias=False)
    return decoder_config(hf, model_type)


def _meta(metadata: dict[str, Any], key: str, kind: type | tuple[type, ...] = int) -> Any:
    if key not in metadata:
        raise GGUFError(f"the GGUF metadata has no {key!r}")
    value = metadata[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise GGUFError(f"the GGUF metadata's {key} = {value!r} is not a {kind}")
    return value


def config_from_gguf(metadata: dict[str, Any], tensor_names: set[str] | list[str]) -> ModelConfig:
    """Our :class:`ModelConfig` from a GGUF file's metadata (``llama.*`` keys) and tensor names
    (the LM head is tied to the embedding when the file has no ``output.weight``)."""
    arch = metadata.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise GGUFError(
            f"the GGUF file's architecture is {arch!r}; supported: "
            f"{', '.join(GGUF_ARCHITECTURES)} (the Llama family: Llama, SmolLM, ...)."
        )
    p = f"{arch}."
    d_model = _meta(metadata, p + "embedding_length")
    n_heads = _meta(metadata, p + "attention.head_count")
    if d_model % n_heads:
        raise GGUFError(
            f"{p}embedding_length={d_model} is not divisible by {p}attention.head_count={n_heads}"
        )
    rope_dims = metadata.get(p + "rope.dimension_count", d_model // n_heads)
    if rope_dims != d_model // n_heads:
        raise GGUFError(
            f"{p}rope.dimension_count={rope_dims} rotates only part of each head of "
            f"{d_model // n_heads}; partial rotary embeddings are not supported."
        )
    for key in (p + "rope.scaling.type", p + "rope.scaling.factor"):
        if metadata.get(key) not in (None, "none", 1.0, 0.0):
            raise GGUFError(f"{key}={metadata[key]!r}: rotary scaling is not supported.")
    if "token_embd.weight" not in tensor_names:
        raise GGUFError("the GGUF file has no token_embd.weight tensor")
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = metadata.get(p + "vocab_size", len(tokens) if isinstance(tokens, list) else None)
    if not isinstance(vocab, int):
        raise GGUFError(f"the GGUF metadata has neither {p}vocab_size nor tokenizer.ggml.tokens")
    eos = special_token_id(metadata.get("tokenizer.ggml.eos_token_id"), vocab)
    pad = special_token_id(metadata.get("tokenizer.ggml.padding_token_id"), vocab)
    n_kv = metadata.get(p + "attention.head_count_kv", n_heads)
    try:
        return ModelConfig(
            **LLAMA_BLOCK,
            src_vocab_size=vocab,
            tgt_vocab_size=vocab,
            d_model=d_model,
            n_heads=n_heads,
            n_kv_heads=n_kv,
            d_ff=_meta(metadata, p + "feed_forward_length"),
            n_decoder_layers=_meta(metadata, p + "block_count"),
            dropout=0.0,
            activation="silu",
            rope_base=float(metadata.get(p + "rope.freq_base", 10000.0)),
            max_len=int(metadata.get(p + "context_length", 2048)),
            pad_id=pad if pad is not None else (eos if eos is not None else 0),
            tie_embeddings="output.weight" not in tensor_names,
            layer_norm_eps=float(_meta(metadata, p + "attention.layer_norm_rms_epsilon", float)),
            prompt_bos=bool(metadata.get("tokenizer.ggml.add_bos_token", True)),
            eos_id=eos,
            attention_qkv_bias="blk.0.attn_q.bias" in tensor_names,
            attention_output_bias="blk.0.attn_output.bias" in tensor_names,
            mlp_bias="blk.0.ffn_up.bias" in tensor_names,
        )
    except (ValueError, TypeError) as error:
        raise GGUFError(f"the GGUF metadata describes a model we cannot build: {error}") from error


# -- weight names --------------------------------------------------------------------------------

# One table for both sources: (GGUF's name, Hugging Face's name, ours) of each part of a layer
# (under blk.{i} / model.layers.{i} / decoder.layers.{i}) and of each global tensor.
_LAYER_PARTS = (
    ("attn_norm", "input_layernorm", "self_attention_residual.norm"),
    ("attn_q", "self_attn.q_proj", "self_attention.w_q"),
    ("attn_k", "self_attn.k_proj", "self_attention.w_k"),
    ("attn_v", "self_attn.v_proj", "self_attention.w_v"),
    ("attn_output", "self_attn.o_proj", "self_attention.w_o"),
    ("ffn_norm", "post_attention_layernorm", "feed_forward_residual.norm"),
    ("ffn_gate", "mlp.gate_proj", "feed_forward.w_gate"),
    ("ffn_up", "mlp.up_proj", "feed_forward.w_up"),
    ("ffn_down", "mlp.down_proj", "feed_forward.w_down"),
)
_GLOBALS = (
    ("token_embd.weight", "model.embed_tokens.weight", "tgt_embedding.lookup.weight"),
    ("output_norm.weight", "model.norm.weight", "decoder.final_norm.weight"),
    ("output.weight", "lm_head.weight", "generator.proj.weight"),
)
_LAYER_PARTS_GGUF = {gguf: ours for gguf, _, ours in _LAYER_PARTS}
_LAYER_PARTS_HF = {hf: ours for _, hf, ours in _LAYER_PARTS}
_GLOBAL_GGUF = {gguf: ours for gguf, _, ours in _GLOBALS}
_GLOBAL_HF = {hf: ours for _, hf, ours in _GLOBALS}
_GGUF_LAYER = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.([a-z_.]+)\.(weight|bias)$")
IGNORED_GGUF = re.compile(r"^(rope_freqs\.weight|blk\.\d+\.attn_rot_embd)$")


def _our_name(
    name: str, global_names: dict[str, str], layer_name: re.Pattern[str], parts: dict[str, str]
) -> str | None:
    """Our parameter name for one source's tensor name: its global names, the pattern of its
    layer tensors (layer, part, kind) and its part names, each mapped to ours."""
    if name in global_names:
        return global_names[name]
    match = layer_name.match(name)
    if match is None or match.group(2) not in parts:
        return None
    layer, part, kind = match.groups()
    return f"decoder.layers.{layer}.{parts[part]}.{kind}"


def our_name_for_gguf(name: str) -> str | None:
    """Our parameter name for a GGUF tensor name (``blk.3.attn_q.weight`` →
    ``decoder.layers.3.self_attention.w_q.weight``); ``None`` for a name we do not know."""
    return _our_name(name, _GLOBAL_GGUF, _GGUF_LAYER, _LAYER_PARTS_GGUF)


def our_name_for_hf(name: str) -> str | None:
    """Our parameter name for a Hugging Face Llama/Qwen2 tensor name
    (``model.layers.3.mlp.gate_proj.weight`` → ``decoder.layers.3.feed_forward.w_gate.weight``);
    ``None`` for a name we do not know."""
    return _our_name(name, _GLOBAL_HF, _HF_LAYER, _LAYER_PARTS_HF)


def unpermute_rotary_rows(weight: Tensor, n_heads: int) -> Tensor:
    """Undo llama.cpp's row permutation of W_q or W_k (or their biases).

    llama.cpp's converter reorders each head's rows ``[r_0 … r_{d/2-1}, r_{d/2} … r_{d-1}]`` to
    ``[r_0, r_{d/2}, r_1, r_{d/2+1}, …]`` so that neighbours rotate together; this puts the even
    rows of each head first and the odd rows after them again.

    Args:
        weight: ``(n_heads · d_head, d_model)`` weight or ``(n_heads · d_head,)`` bias, as read
            from the GGUF file.
        n_heads: heads of this projection (``n_heads`` for W_q, ``n_kv_heads`` for W_k).

    Returns:
        The same shape, rows in Hugging Face's (rotate-half) order.
    """
    rows = weight.shape[0]
    if rows % (2 * n_heads):
        raise PretrainedError(
            f"a rotary projection of {rows} rows cannot be split into {n_heads} heads of an even "
            "width"
        )
    per_head = weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:])
    return per_head.transpose(1, 2).reshape(weight.shape).contiguous()


def parameter_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter a decoder-only model of ``config`` has, by our name, with its shape
    (``generator.proj.weight`` only when the embeddings are not tied): the Llama family's, and
    the later families' QK-norms, output norms, LayerNorm biases and plain feed-forward."""
    d, d_ff = config.d_model, config.d_ff
    d_q, d_kv = config.n_heads * config.d_head, config.kv_heads * config.d_head
    vocab = config.tgt_vocab_size
    layer_norm = config.norm_kind == "layer"
    shapes: dict[str, tuple[int, ...]] = {
        "tgt_embedding.lookup.weight": (vocab, d),
        "decoder.final_norm.weight": (d,),
    }
    if layer_norm:
        shapes["decoder.final_norm.bias"] = (d,)
    if not config.tie_embeddings:
        shapes["generator.proj.weight"] = (vocab, d)
    norms = ["self_attention_residual.norm", "feed_forward_residual.norm"]
    if config.post_sublayer_norm:
        norms += ["self_attention_residual.post_norm", "feed_forward_residual.post_norm"]
    if config.feed_forward_kind == "gated":
        feed_forward = [
            ("feed_forward.w_gate", d_ff, d, config.mlp_bias),
            ("feed_forward.w_up", d_ff, d, config.mlp_bias),
            ("feed_forward.w_down", d, d_ff, config.mlp_bias),
        ]
    else:
        feed_forward = [
            ("feed_forward.linear1", d_ff, d, True),
            ("feed_forward.linear2", d, d_ff, True),
        ]
    for i in range(config.n_decoder_layers):
        p = f"decoder.layers.{i}."
        for norm in norms:
            shapes[p + norm + ".weight"] = (d,)
            if layer_norm:
                shapes[p + norm + ".bias"] = (d,)
        if config.qk_norm != "none":
            per_head = config.qk_norm == "head"
            shapes[p + "self_attention.q_norm.weight"] = (config.d_head if per_head else d_q,)
            shapes[p + "self_attention.k_norm.weight"] = (config.d_head if per_head else d_kv,)
        for name, rows, cols, bias in (
            ("self_attention.w_q", d_q, d, config.attention_qkv_bias),
            ("self_attention.w_k", d_kv, d, config.attention_qkv_bias),
            ("self_attention.w_v", d_kv, d, config.attention_qkv_bias),
            ("self_attention.w_o", d, d_q, config.attention_output_bias),
            *feed_forward,
        ):
            shapes[p + name + ".weight"] = (rows, cols)
            if bias:
                shapes[p + name + ".bias"] = (rows,)
    return shapes


def gguf_state_dict(gguf: GGUFFile, config: ModelConfig) -> dict[str, Tensor]:
    """Every tensor of a Llama GGUF file, dequantized to float32, under our parameter names, with
    W_q / W_k rows un-permuted. Unknown tensor names raise (a file we would misread)."""
    weights: dict[str, Tensor] = {}
    for name in gguf.tensors:
        if IGNORED_GGUF.match(name):
            continue
        ours = our_name_for_gguf(name)
        if ours is None:
            raise GGUFError(f"{gguf.path.name} holds a tensor {name!r} that no Llama part reads")
        tensor = gguf.tensor(name)
        if ".attn_q." in name:
            tensor = unpermute_rotary_rows(tensor, config.n_heads)
        elif ".attn_k." in name:
            tensor = unpermute_rotary_rows(tensor, config.kv_heads)
        weights[ours] = tensor
    expected = parameter_shapes(config)
    missing = sorted(set(expected) - set(weights))
    if missing:
        shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
        raise GGUFError(f"{gguf.path.name} lacks {len(missing)} tensor(s) the model needs: {shown}")
    where = gguf.path.name.replace("{", "{{").replace("}", "}}")  # not read as a field
    check_shapes(
        weights,
        expected,
        GGUFError,
        where + ": {name} does not belong to a model of this shape",
        where + ": the tensor for {name} has shape {shape}, but the metadata implies {expected}",
    )
    return weights


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our parameter names → a Hugging Face folder's tensors (``None`` where missing, which
    ``reader.check_complete`` reports); the same interface as the other families' modules."""
    return map_named_weights(reader, config, _LAYER_PARTS_HF, _GLOBAL_HF)


LAYER_NAME = re.compile(r"^decoder\.layers\.(\d+)\.(.+)\.(weight|bias)$")


def map_named_weights(
    reader: TensorReader,
    config: ModelConfig,
    layer_parts: dict[str, str],
    global_names: dict[str, str],
    layer_prefix: str = "model.layers.",
    fused: Callable[[str, str, str], Tensor | None] | None = None,
) -> dict[str, Tensor | None]:
    """Every parameter of :func:`parameter_shapes` read under its Hugging Face name: a layer's
    ``decoder.layers.{i}.{ours}.{kind}`` from ``{layer_prefix}{i}.{theirs}.{kind}`` for each
    ``theirs → ours`` of ``layer_parts``, the rest by ``global_names`` (``theirs → ours``).
    A layer part that ``layer_parts`` does not name comes from ``fused(layer, ours, kind)``
    (a slice of a fused projection). ``None`` where the file lacks it (``reader.check_complete``
    reports that)."""
    theirs_of_ours = {ours: theirs for theirs, ours in layer_parts.items()}
    theirs_of_global = {ours: theirs for theirs, ours in global_names.items()}
    weights: dict[str, Tensor | None] = {}
    for name in parameter_shapes(config):
        match = LAYER_NAME.match(name)
        if match is None:
            weights[name] = reader.get(theirs_of_global[name])
            continue
        layer, part, kind = match.groups()
        if part not in theirs_of_ours:
            if fused is None:
                raise PretrainedError(f"internal mapping error: nothing reads {name}")
            weights[name] = fused(layer, part, kind)
            continue
        weights[name] = reader.get(f"{layer_prefix}{layer}.{theirs_of_ours[part]}.{kind}")
    return weights


LLAMA_LAYER_PARTS = dict(_LAYER_PARTS_HF)
"""Hugging Face Llama's layer part names → ours (what the later families start from)."""
LLAMA_PROJECTIONS = {
    theirs: ours for theirs, ours in _LAYER_PARTS_HF.items() if not theirs.endswith("layernorm")
}
"""The attention and feed-forward projections alone, for the families that put their norms
elsewhere (OLMo 2, Gemma 2 and 3) and name those themselves."""
QK_NORM_PARTS = {
    "self_attn.q_norm": "self_attention.q_norm",
    "self_attn.k_norm": "self_attention.k_norm",
}
"""The norms on q and k (Qwen3, OLMo 2, Gemma 3), named alike in every family that has them."""
LLAMA_GLOBALS = dict(_GLOBAL_HF)
"""Hugging Face Llama's global tensor names → ours."""


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` of a Hugging Face Llama/Qwen2 folder (the only form read)."""
    found = load_tokenizer_json(folder)
    if found is None:
        raise PretrainedError(
            f"{folder} has no tokenizer.json: a Llama-family model folder needs one (its "
            "tokenizer.model / vocab.json forms are not read)"
        )
    return found


# -- tokenizer -----------------------------------------------------------------------------------

GGUF_PRE_TOKENIZERS = ("gpt2", "smollm")
"""``tokenizer.ggml.pre`` values we build: GPT-2's regex, and SmolLM's (every numeral alone, then
GPT-2's regex: llama.cpp's ``LLAMA_VOCAB_PRE_TYPE_SMOLLM``, and the ``Digits`` + ``ByteLevel``
of SmolLM2's own tokenizer.json). transformers' GGUF loader ignores ``tokenizer.ggml.pre`` and
uses GPT-2's regex alone, so it differs from SmolLM2 where whitespace precedes a numeral (it
splits ``"  0"`` as ``Ġ Ġ 0``, SmolLM2 and llama.cpp as ``ĠĠ 0``)."""
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp's token types that are added whole, not merged


def tokenizer_from_gguf(metadata: dict[str, Any]) -> Tokenizer:
    """A byte-level BPE :class:`Tokenizer` from a GGUF file's ``tokenizer.ggml.*`` metadata.

    The vocabulary is ``tokens`` (id = index), the merges ``merges`` (``"a b"`` strings, in
    priority order); tokens of type control (3) or user-defined (4) become added tokens that a
    text matches whole (SmolLM2's ``<|im_start|>``, ``<|im_end|>``, ...), control ones special.
    """
    model = metadata.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise GGUFError(
            f"tokenizer.ggml.model={model!r}: only byte-level BPE ('gpt2') vocabularies are "
            "supported."
        )
    pre = metadata.get("tokenizer.ggml.pre", "gpt2")
    if pre not in GGUF_PRE_TOKENIZERS:
        raise GGUFError(
            f"tokenizer.ggml.pre={pre!r}: supported pre-tokenizers are "
            f"{', '.join(GGUF_PRE_TOKENIZERS)}."
        )
    tokens = metadata.get("tokenizer.ggml.tokens")
    merges = metadata.get("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not isinstance(merges, list):
        raise GGUFError("the GGUF metadata lacks tokenizer.ggml.tokens or tokenizer.ggml.merges")
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise GGUFError(
            f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens"
        )
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise GGUFError("tokenizer.ggml.tokens holds the same token twice")
    pairs = []
    for merge in merges:
        left, sep, right = merge.partition(" ")
        if not sep:
            raise GGUFError(f"tokenizer.ggml.merges entry {merge!r} is not two tokens")
        pairs.append((left, right))
    backend = byte_level_bpe(models.BPE(vocab, pairs, fuse_unk=False))
    if pre == "smollm":  # every numeral alone, then GPT-2's byte-level split
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
        digits = pre_tokenizers.Digits(individual_digits=True)
        backend.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level])
    bos = metadata.get("tokenizer.ggml.bos_token_id")
    if metadata.get("tokenizer.ggml.add_bos_token") and isinstance(bos, int):
        backend.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", special_tokens=[(tokens[bos], bos)]
        )
    for kind, add in ((_CONTROL, backend.add_special_tokens), (_USER_DEFINED, backend.add_tokens)):
        chosen = [token for token, t in zip(tokens, types, strict=True) if t == kind]
        add([tokenizers.AddedToken(t, special=kind == _CONTROL, normalized=False) for t in chosen])
    return wrap(backend, "the GGUF file's tokenizer")


def chat_template(metadata: dict[str, Any]) -> str | None:
    """The Jinja chat template stored in the file (``tokenizer.chat_template``), if any."""
    value = metadata.get("tokenizer.chat_template")
    return value if isinstance(value, str) else None


def is_gguf_path(path: str | Path) -> bool:
    """Whether ``path`` names a ``.gguf`` file (what ``load_pretrained`` would route here)."""
    return Path(path).suffix.lower() == ".gguf" and Path(path).is_file()


# -- everything of one file ------------------------------------------------------------------------


@dataclass
class GGUFModel:
    """What a Llama GGUF file holds, mapped onto our names (the model is built by the caller).

    Attributes:
        config: the model's shape.
        weights: our parameter name → float32 tensor (W_q / W_k un-permuted; no
            ``generator.proj.weight`` when ``config.tie_embeddings``).
        tokenizer: the file's byte-level BPE.
        chat_template: the Jinja chat template, if the file has one.
        info: ``family``, ``architecture``, ``name`` (``general.name``), ``quantization`` (the
            ggml types of the tensors, most frequent first, e.g. ``"Q4_1, F32, Q8_0"``) and
            ``path``.
    """

    config: ModelConfig
    weights: dict[str, Tensor]
    tokenizer: Tokenizer
    chat_template: str | None
    info: dict[str, Any] = field(default_factory=dict)


def read_llama_gguf(path: str | Path) -> GGUFModel:
    """Read a Llama-family GGUF file: configuration, dequantized weights and tokenizer.

    Raises :class:`~transformer.pretrained.gguf.GGUFError` (a ``PretrainedError``) naming the
    problem: not a GGUF file, truncated, an architecture other than Llama, a quantization this
    reader does not dequantize, a tokenizer it cannot build.
    """
    file = read_gguf(path)
    config = config_from_gguf(file.metadata, set(file.tensors))
    tokenizer = tokenizer_from_gguf(file.metadata)
    if tokenizer.vocab_size > config.output_vocab_size:
        raise GGUFError(
            f"{file.path.name}: the tokenizer has {tokenizer.vocab_size} tokens but the model "
            f"predicts {config.output_vocab_size}"
        )
    weights = gguf_state_dict(file, config)
    counts: dict[str, int] = {}
    for info in file.tensors.values():
        counts[info.type_name] = counts.get(info.type_name, 0) + 1
    return GGUFModel(
        config=config,
        weights=weights,
        tokenizer=tokenizer,
        chat_template=chat_template(file.metadata),
        info={
            "family": FAMILY,
            "architecture": file.architecture,
            "name": file.metadata.get("general.name"),
            "quantization": ", ".join(sorted(counts, key=lambda k: -counts[k])),
            "path": str(file.path),
        },
    )
