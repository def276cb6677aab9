"""ModelConfig: validation messages, JSON round trip, and the paper's base preset."""

from __future__ import annotations

import json

import pytest

from transformer.core.config import ConfigError, ModelConfig, base_config
from transformer.core.model import Transformer, count_parameters


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"d_model": 60, "n_heads": 8}, "not divisible by n_heads=8"),
        ({"activation": "tanh"}, "activation='tanh' is not one of relu, gelu"),
        ({"norm": "middle"}, "norm="),
        ({"architecture": "encoder-decoder", "n_encoder_layers": 0}, "n_encoder_layers ≥ 1"),
        ({"dropout": 1.0}, "dropout must be in"),
        ({"pad_id": 5000}, "pad_id=5000 is outside"),
        ({"d_model": 33, "n_heads": 3, "positional": "sinusoidal"}, "must be even"),
        ({"tie_embeddings": True, "tgt_vocab_size": 10}, "share one vocabulary|shared vocabulary"),
        ({"d_model": 0}, "positive integer"),
    ],
)
def test_invalid_combinations_say_what_to_change(changes, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**changes)


def test_decoder_only_needs_no_encoder_layers():
    config = ModelConfig(architecture="decoder-only", n_encoder_layers=0)
    assert not config.has_encoder and config.has_decoder


def test_json_round_trip(tmp_path):
    config = ModelConfig(d_model=48, n_heads=6, norm="pre", positional="learned", activation="gelu")
    assert ModelConfig.from_json(config.to_json()) == config
    path = tmp_path / "config.json"
    config.save(path)
    assert ModelConfig.load(path) == config


def test_bad_json_names_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelConfig.from_json("{d_model: 3")
    with pytest.raises(ConfigError, match="unknown configuration keys \\['d_modle'\\]"):
        ModelConfig.from_dict({"d_modle": 64})
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"d_model": 63}))
    with pytest.raises(ConfigError, match=r"config\.json"):
        ModelConfig.load(path)


def test_base_preset_is_table_3_and_its_parameter_count_is_documented():
    config = base_config()
    assert (config.n_encoder_layers, config.d_model, config.d_ff, config.n_heads) == (
        6,
        512,
        2048,
        8,
    )
    assert config.dropout == 0.1 and config.src_vocab_size == 37000 and config.tie_embeddings
    d, f, v, n = 512, 2048, 37000, 6
    attention = 4 * (d * d + d)
    feed_forward = d * f + f + f * d + d
    norm = 2 * d
    expected = (
        v * d  # one embedding matrix shared by source, target and generator
        + n * (attention + feed_forward + 2 * norm)  # encoder layers
        + n * (2 * attention + feed_forward + 3 * norm)  # decoder layers
        + v  # generator bias
    )
    counted = count_parameters(Transformer(config))
    assert counted == expected
    assert f"{counted:,}" in (base_config.__doc__ or "")  # the documented figure is the real one
