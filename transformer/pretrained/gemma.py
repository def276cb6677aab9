"""Gemma, Gemma 2 and Gemma 3 (text): the Llama block with Gemma's own choices.

Why each exists:

- the norms multiply by ``1 + w`` (``norm_offset=1``): the gain is stored as its distance from
  1, so weight decay pulls it towards the identity, not towards zero;
- the embeddings are multiplied by √d_model (``scale_embeddings``, as the 2017 paper did): the
  tied embedding is small, and the stream needs the scale of the layers' outputs;
- GeGLU: the gated feed-forward with the tanh GELU (``activation="gelu_tanh"``);
- Gemma 2 and 3 normalise each sub-layer's input *and* output (``post_sublayer_norm``): what
  a sub-layer adds to the stream arrives at a set scale;
- Gemma 2 soft-caps the attention scores and the final logits (``cap · tanh(x / cap)``:
  ``attention_softcap`` 50, ``final_logit_softcap`` 30), so that no score runs away;
- the score scale is ``1/√query_pre_attn_scalar`` (``score_scale_dim``), not ``1/√d_head``;
- local and global layers alternate (``layer_types``): the local ones read a sliding window
  (4,096 positions in Gemma 2, 512 or 1,024 in Gemma 3, five local layers to a global one),
  and in Gemma 3 turn with their own rotary base (``local_rope_base`` 10,000; the global
  layers 1,000,000, stretched by ``rope_scaling`` in the larger models);
- Gemma 3 RMS-normalises each head's q and k before their rotation (``qk_norm="head"``),
  where Gemma 2 capped the scores.

Weight names: Llama's, with ``post_attention_layernorm`` the *attention's output* norm (the
feed-forward's input norm is ``pre_feedforward_layernorm``; in Gemma 1, as in Llama,
``post_attention_layernorm`` is the feed-forward's input norm) and
``post_feedforward_layernorm``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ..core.config import ModelConfig
from ..text.tokenization import Tokenizer
from ._common import PretrainedError, TensorReader, activation
from .llama import (
    LLAMA_GLOBALS,
    LLAMA_LAYER_PARTS,
    LLAMA_PROJECTIONS,
    QK_NORM_PARTS,
    check_model_type,
    decoder_config,
    layer_types,
    map_named_weights,
    rope_settings,
)
from .llama import load_tokenizer as _load_tokenizer

FAMILY = "gemma"
SUMMARY = "Gemma family (soft caps, local and global layers): continues the prompt"
"""What the model pages say of this family: what it changes from the paper, what it does."""
MODEL_TYPES = ("gemma", "gemma2", "gemma3_text")
PREFIXES = ("",)
PROBE = "model.embed_tokens.weight"

LAYER_PARTS_2 = (
    LLAMA_PROJECTIONS
    | QK_NORM_PARTS
    | {  # two norms a sub-layer: on its input and on its output
        "input_layernorm": "self_attention_residual.norm",
        "post_attention_layernorm": "self_attention_residual.post_norm",
        "pre_feedforward_layernorm": "feed_forward_residual.norm",
        "post_feedforward_layernorm": "feed_forward_residual.post_norm",
    }
)


def _rope(hf: dict[str, Any]) -> dict[str, Any]:
    """The rotary fields: one base for every layer (Gemma 1 and 2), or the global layers'
    base and scaling and the local layers' own base (Gemma 3, nested by layer type in
    transformers 5, ``rope_local_base_freq`` before)."""
    parameters = hf.get("rope_parameters") or {}
    if "full_attention" in parameters:
        found = rope_settings(hf, parameters["full_attention"])
        local = parameters.get("sliding_attention") or {}
        if local.get("rope_type", "default") != "default":
            raise PretrainedError(
                f"config.json: the sliding layers' rotary scaling {local['rope_type']!r} is not "
                "supported"
            )
        if "rope_theta" in local:
            found["local_rope_base"] = float(local["rope_theta"])
        return found
    found = rope_settings(hf)
    if hf.get("rope_local_base_freq") is not None:
        found["local_rope_base"] = float(hf["rope_local_base_freq"])
    return found


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` for a Gemma, Gemma 2 or Gemma 3 text ``config.json``."""
    family = check_model_type(hf, MODEL_TYPES)
    later = family != "gemma"
    window = hf.get("sliding_window") if later else None
    n_layers = hf.get("num_hidden_layers", 0)
    types = layer_types(hf, n_layers) if window else None
    if window and types is None:  # configs before layer_types: a global layer every n-th
        every = hf.get("sliding_window_pattern") or (2 if family == "gemma2" else 6)
        types = tuple(
            "sliding_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)
        )
    act = hf.get("hidden_activation") or "gelu_pytorch_tanh"
    changes: dict[str, Any] = dict(
        activation=activation(act, "hidden_activation"),
        norm_offset=1.0,
        scale_embeddings=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        post_sublayer_norm=later,
        sliding_window=window,
        layer_types=types,
        attention_softcap=hf.get("attn_logit_softcapping") if later else None,
        final_logit_softcap=hf.get("final_logit_softcapping") if later else None,
        score_scale_dim=hf.get("query_pre_attn_scalar") if later else None,
        qk_norm="head" if family == "gemma3_text" else "none",
    )
    changes.update(_rope(hf))
    return decoder_config(hf, family, **changes)


def map_weights(reader: TensorReader, config: ModelConfig) -> dict[str, Tensor | None]:
    """Our parameter names → the folder's tensors (``None`` where missing)."""
    parts = LAYER_PARTS_2 if config.post_sublayer_norm else LLAMA_LAYER_PARTS
    return map_named_weights(reader, config, parts, LLAMA_GLOBALS)


def load_tokenizer(folder: Path) -> Tokenizer:
    """``tokenizer.json`` of the folder (the only form read)."""
    return _load_tokenizer(folder)
