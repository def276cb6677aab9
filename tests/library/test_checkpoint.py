"""Checkpoints: safetensors + JSON round trip, and clear errors for broken or mismatched folders."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import TINY_CONFIG

from transformer.core.model import Transformer
from transformer.pretrained.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from transformer.text.tokenization import train_tokenizer


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tokenizer = train_tokenizer(["a b c d e f g", "g f e d c b a", "b a d"], "wordpiece", 30)
    vocab = tokenizer.vocab_size
    config = TINY_CONFIG.replace(
        src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, d_ff=32, tie_embeddings=True
    )
    model = Transformer(config).eval()
    snapshot = {k: v.clone() * 0.5 for k, v in model.state_dict().items()}
    folder = tmp_path_factory.mktemp("ckpt") / "model"
    save_checkpoint(
        folder, model, tokenizer, {"exact_match": 0.5}, {"task": "reverse"}, {3: snapshot}
    )
    return folder, model


def copy_of(saved, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(saved[0], folder)
    return folder


def test_round_trip_reproduces_the_model(saved):
    folder, model = saved
    checkpoint = load_checkpoint(folder)
    src, tgt = torch.tensor([[5, 6, 7]]), torch.tensor([[2, 8]])
    assert torch.equal(checkpoint.model(src, tgt), model(src, tgt))
    assert checkpoint.metrics == {"exact_match": 0.5}
    assert checkpoint.task == "reverse"
    assert checkpoint.snapshot_steps == [3]
    # Tied weights stay tied after loading.
    assert checkpoint.model.generator.proj.weight is checkpoint.model.src_embedding.weight
    early = checkpoint.load_snapshot(3)
    expected = (model.generator.proj.bias * 0.5).half().float()
    assert torch.equal(early.generator.proj.bias, expected)
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "metrics.json",
        "model.safetensors",
        "snapshots",
        "tokenizer.json",
    ]


def test_corrupted_weights_name_the_file(saved, tmp_path):
    folder = copy_of(saved, tmp_path)
    (folder / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match=r"model\.safetensors is not a readable safetensors"):
        load_checkpoint(folder)


def test_mismatched_config_names_the_tensor(saved, tmp_path):
    folder = copy_of(saved, tmp_path)
    document = json.loads((folder / "config.json").read_text())
    document["model"]["d_ff"] = 48
    (folder / "config.json").write_text(json.dumps(document))
    with pytest.raises(
        CheckpointError,
        match=r"linear1\.weight has shape \(32, 16\) but config\.json implies \(48, 16\)",
    ):
        load_checkpoint(folder)


def test_other_architecture_is_reported(saved, tmp_path):
    folder = copy_of(saved, tmp_path)
    document = json.loads((folder / "config.json").read_text())
    document["model"].update(architecture="decoder-only", n_encoder_layers=0)
    (folder / "config.json").write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="unexpected tensors"):
        load_checkpoint(folder)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json"),
        (lambda f: (f / "config.json").write_text("{not json"), r"config\.json is not valid JSON"),
        (lambda f: (f / "config.json").write_text('{"format": 99, "model": {}}'), "format 99"),
        (
            lambda f: (f / "config.json").write_text('{"format": 1, "model": {"d_model": 7}}'),
            "config.json: ",
        ),
        (lambda f: (f / "model.safetensors").unlink(), r"model\.safetensors is missing"),
    ],
)
def test_broken_folders_give_clear_errors(saved, tmp_path, damage, message):
    folder = copy_of(saved, tmp_path)
    damage(folder)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(folder)


def test_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
