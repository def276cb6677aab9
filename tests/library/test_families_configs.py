"""Real models' ``config.json`` files, as their folders hold them (written by transformers 4,
before ``rope_parameters`` and ``layer_types``), mapped onto our configuration: the fields each
family's difference lives in."""

from __future__ import annotations

import pytest

from transformer.pretrained import PretrainedError
from transformer.pretrained.loading import FAMILIES, family_of

LLAMA_3_2_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_hidden_layers": 16,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": True,
    "vocab_size": 128256,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
}
QWEN3_0_6B = {
    "model_type": "qwen3",
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 28,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "sliding_window": None,
    "use_sliding_window": False,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
    "eos_token_id": 151645,
    "hidden_act": "silu",
}
MISTRAL_7B = {
    "model_type": "mistral",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
    "hidden_act": "silu",
}
GEMMA_3_1B = {
    "model_type": "gemma3_text",
    "hidden_size": 1152,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "num_hidden_layers": 26,
    "intermediate_size": 6912,
    "max_position_embeddings": 32768,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "rope_local_base_freq": 10000,
    "rope_scaling": None,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "hidden_activation": "gelu_pytorch_tanh",
    "vocab_size": 262144,
}
GEMMA_2_2B = {
    "model_type": "gemma2",
    "hidden_size": 2304,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "num_hidden_layers": 26,
    "intermediate_size": 9216,
    "max_position_embeddings": 8192,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "hidden_activation": "gelu_pytorch_tanh",
    "vocab_size": 256000,
}
PHI_4_MINI = {
    "model_type": "phi3",
    "hidden_size": 3072,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "partial_rotary_factor": 0.75,
    "rope_theta": 10000.0,
    "rope_scaling": {
        "type": "longrope",
        "long_factor": [1.0 + i / 10 for i in range(48)],
        "short_factor": [1.0] * 48,
    },
    "sliding_window": 262144,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": True,
    "vocab_size": 200064,
    "hidden_act": "silu",
}
OLMO_2_1B = {
    "model_type": "olmo2",
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 16,
    "intermediate_size": 8192,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "rope_theta": 500000,
    "tie_word_embeddings": False,
    "vocab_size": 100352,
    "hidden_act": "silu",
}
PYTHIA_70M = {
    "model_type": "gpt_neox",
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_hidden_layers": 6,
    "intermediate_size": 2048,
    "max_position_embeddings": 2048,
    "layer_norm_eps": 1e-05,
    "rotary_emb_base": 10000,
    "rotary_pct": 0.25,
    "use_parallel_residual": True,
    "tie_word_embeddings": False,
    "vocab_size": 50304,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "hidden_act": "gelu",
}


def config_of(hf: dict):
    return FAMILIES[family_of(hf)].config_from_hf(hf)


def test_llama_3_2() -> None:
    config = config_of(LLAMA_3_2_1B)
    scaling = config.rope_scaling_dict
    assert scaling is not None and scaling["rope_type"] == "llama3" and scaling["factor"] == 32.0
    assert config.rope_base == 500000.0 and config.max_len == 131072
    assert config.kv_heads == 8 and config.d_head == 64 and config.tie_embeddings


def test_qwen3() -> None:
    config = config_of(QWEN3_0_6B)
    assert config.qk_norm == "head" and config.d_head == 128 and config.head_dim == 128
    assert config.sliding_window is None and config.layer_types is None


def test_mistral() -> None:
    config = config_of(MISTRAL_7B)
    assert config.sliding_window == 4096 and config.layer_window(0) == 4096
    assert config.layer_window(31) == 4096


def test_gemma_3_layers_alternate_five_local_to_one_global() -> None:
    config = config_of(GEMMA_3_1B)
    windows = [config.layer_window(i) for i in range(config.n_decoder_layers)]
    assert windows[:6] == [512] * 5 + [None] and windows[6:12] == [512] * 5 + [None]
    assert config.local_rope_base == 10000 and config.rope_base == 1000000
    assert config.qk_norm == "head" and config.norm_offset == 1.0 and config.post_sublayer_norm
    assert config.attention_softcap is None and config.score_scale_dim == 256
    assert config.tie_embeddings and config.scale_embeddings and config.activation == "gelu_tanh"


def test_gemma_2_alternates_and_caps() -> None:
    config = config_of(GEMMA_2_2B)
    windows = [config.layer_window(i) for i in range(4)]
    assert windows == [4096, None, 4096, None]
    assert config.attention_softcap == 50.0 and config.final_logit_softcap == 30.0
    assert config.d_head == 256 and config.n_heads * config.d_head != config.d_model
    assert config.qk_norm == "none" and config.local_rope_base is None


def test_phi_4_mini() -> None:
    config = config_of(PHI_4_MINI)
    assert config.rotary_fraction == 0.75 and config.rotary_dims == 96
    scaling = config.rope_scaling_dict
    assert scaling is not None and scaling["rope_type"] == "longrope"
    assert scaling["original_max_position_embeddings"] == 4096
    assert config.max_len == 4096  # longrope's short factors hold within the trained length


def test_olmo_2() -> None:
    config = config_of(OLMO_2_1B)
    assert config.norm == "output" and config.qk_norm == "projection"


def test_pythia() -> None:
    config = config_of(PYTHIA_70M)
    assert config.parallel_residual and config.rotary_fraction == 0.25 and config.rotary_dims == 16
    assert config.norm_kind == "layer" and config.attention_qkv_bias and config.eos_id == 0


def test_an_unknown_scaling_is_named() -> None:
    hf = dict(LLAMA_3_2_1B, rope_scaling={"rope_type": "mrope", "factor": 2.0})
    with pytest.raises(PretrainedError, match="rotary scaling 'mrope'"):
        config_of(hf)
