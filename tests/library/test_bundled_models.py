"""The bundled checkpoints: they load, reproduce their recorded metrics, and their attention shows
the learned patterns the app points at (the anti-diagonal of reversal, crossing alignments of the
toy translation)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from transformer.core.run import TRACE
from transformer.pretrained.checkpoint import load_checkpoint
from transformer.training.bundled import BUNDLED_DIR, BUNDLED_NAMES, load_bundled
from transformer.training.evaluation import evaluate_model
from transformer.training.recipes import SAMPLE_SIZE, task_digest
from transformer.training.tasks import adjective_noun_pairs, make_task


@pytest.fixture(scope="module")
def bundled():
    loaded = load_bundled("cpu")
    assert not loaded.errors, loaded.errors
    return loaded.models


def task_of(checkpoint):
    info = checkpoint.info
    return make_task(info["task"], seed=info["task_seed"], n_train=info["task_n_train"])


@pytest.mark.parametrize("name", BUNDLED_NAMES)
def test_checkpoint_folder_is_small_and_complete(name):
    folder = BUNDLED_DIR / name
    files = {p.name for p in folder.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "metrics.json",
        "snapshots",
    } <= files
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert size < 10 * 1024 * 1024, f"{name} is {size / 2**20:.1f} MB (Spaces needs LFS over 10 MB)"
    assert not list(folder.rglob("*.pt")) and not list(folder.rglob("*.pkl"))


@pytest.mark.parametrize("name", BUNDLED_NAMES)
def test_training_data_still_regenerates(bundled, name):
    """make_task still produces exactly the data the checkpoint was trained on."""
    checkpoint = bundled[name]
    assert task_digest(task_of(checkpoint)) == checkpoint.info["data_sha256"]


@pytest.mark.slow  # runs the model over 100-200 held-out examples: minutes on 2 cores
@pytest.mark.parametrize("name", BUNDLED_NAMES)
def test_checkpoint_reproduces_its_recorded_metrics(bundled, name):
    checkpoint = bundled[name]
    recorded = checkpoint.metrics["sample"]
    sample = task_of(checkpoint).test[:SAMPLE_SIZE]
    measured = evaluate_model(
        checkpoint.model, checkpoint.tokenizer, sample, checkpoint.config.architecture
    )
    # Counts over the same examples: equal, not close (one example of 200 is 0.005).
    for key in ("exact_match", "token_accuracy", "next_token_accuracy", "grammatical"):
        if key in recorded:
            assert measured[key] == recorded[key], key
    assert measured["loss"] == pytest.approx(recorded["loss"], rel=1e-4)
    assert measured["examples"] == recorded["examples"] == SAMPLE_SIZE


def _readme_row(name: str) -> str:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    (row,) = [line for line in readme.splitlines() if line.startswith(f"| `{name}` |")]
    return row


def _percent(fraction: float, text: str) -> str:
    """``fraction`` written as the README writes ``text`` (e.g. "99.7 %", "100 %")."""
    decimals = len(text.split(" ")[0].partition(".")[2])
    return f"{100 * fraction:.{decimals}f} %" if decimals else f"{100 * fraction:.0f} %"


README_FIGURES = {
    "reverse": [
        ("exact_match", r"\*\*([\d.]+ %) exact match"),
        ("token_accuracy", r"([\d.]+ %) token"),
    ],
    "translate": [("exact_match", r"\*\*([\d.]+ %) exact match")],
    "continue": [
        ("next_token_accuracy", r"\*\*([\d.]+ %) next-token accuracy"),
        ("grammatical", r"([\d.]+ %) of greedy continuations"),
    ],
}


@pytest.mark.parametrize("name", BUNDLED_NAMES)
def test_the_readme_states_the_recorded_figures(bundled, name):
    row = _readme_row(name)
    for key, pattern in README_FIGURES[name]:
        (written,) = re.findall(pattern, row)
        assert written == _percent(bundled[name].metrics[key], written), (name, key)


@pytest.mark.slow
@pytest.mark.parametrize("name", BUNDLED_NAMES)
def test_the_whole_test_split_reproduces_the_readme_figures(bundled, name):
    """The README's figures are over the whole 1,000-example test split: recompute them there."""
    checkpoint = bundled[name]
    recorded = checkpoint.metrics
    test = task_of(checkpoint).test
    assert len(test) == recorded["examples"] == 1000
    measured = evaluate_model(
        checkpoint.model, checkpoint.tokenizer, test, checkpoint.config.architecture
    )
    row = _readme_row(name)
    for key, pattern in README_FIGURES[name]:
        assert measured[key] == recorded[key], key
        (written,) = re.findall(pattern, row)
        assert written == _percent(measured[key], written), (name, key)


@pytest.mark.parametrize("name", BUNDLED_NAMES)
def test_the_padding_row_of_the_tied_embedding_is_zero(bundled, name):
    """Training gives [PAD] no probability, so its row of the tied embedding never moves."""
    model = bundled[name].model
    pad = model.config.pad_id
    weight = model.generator.proj.weight
    assert weight is (model.tgt_embedding or model.src_embedding).lookup.weight  # tied
    assert torch.equal(weight[pad], torch.zeros_like(weight[pad]))
    assert float(model.generator.proj.bias[pad].detach()) == 0.0


def test_the_bundled_models_meet_their_accuracy_bars(bundled):
    assert bundled["reverse"].metrics["exact_match"] >= 0.99
    assert bundled["translate"].metrics["exact_match"] == 1.0
    assert bundled["continue"].metrics["next_token_accuracy"] >= 0.71
    assert bundled["continue"].metrics["grammatical"] == 1.0


@torch.no_grad()
def _cross_attention(checkpoint, example):
    """Teacher-forced cross-attention of one example: ``(L, H, Tq, Ts)`` and the ids."""
    tokenizer, model = checkpoint.tokenizer, checkpoint.model
    src = torch.tensor([tokenizer.encode_ids(example.source)])
    tgt = torch.tensor([tokenizer.encode_ids(example.target, add_bos=True)])
    trace = model(src, tgt, call=TRACE)
    return trace.attention_weights("cross")[:, 0], src[0], tgt[0]


@pytest.mark.slow  # runs the model over 100-200 held-out examples: minutes on 2 cores
def test_reversal_has_a_head_on_the_anti_diagonal(bundled):
    """The query that predicts output token i looks at source token n-1-i."""
    checkpoint = bundled["reverse"]
    hits, total = None, 0
    for example in task_of(checkpoint).test[:100]:
        weights, src, _ = _cross_attention(checkpoint, example)  # (L, H, Tq, Ts)
        n = src.numel()
        assert n == len(example.source.split())  # one token per symbol
        mirrored = torch.arange(n - 1, -1, -1)  # query i ↔ key n-1-i
        looked_at = weights[:, :, :n].argmax(-1)  # (L, H, n)
        agree = (looked_at == mirrored).sum(-1)  # (L, H)
        hits = agree if hits is None else hits + agree
        total += n
    assert (hits.float() / total).max() >= 0.9


@pytest.mark.slow  # runs the model over 100-200 held-out examples: minutes on 2 cores
def test_translation_aligns_target_adjectives_with_source_adjectives(bundled):
    checkpoint = bundled["translate"]
    tokenizer = checkpoint.tokenizer
    hits, total = None, 0
    for example in task_of(checkpoint).test[:150]:
        pairs = adjective_noun_pairs(example)
        if not pairs:
            continue
        weights, _, _ = _cross_attention(checkpoint, example)
        source_words = [r.word for r in tokenizer.encode(example.source, add_special_tokens=False)]
        target_words = [r.word for r in tokenizer.encode(example.target, add_special_tokens=False)]
        for target_word, source_word in pairs:
            # Decoder input is [BOS] + target: the query at position p predicts target token p.
            query = target_words.index(target_word)
            keys = torch.tensor([w == source_word for w in source_words])
            looked_at = weights[:, :, query, : len(source_words)].argmax(-1)  # (L, H)
            agree = keys[looked_at].long()
            hits = agree if hits is None else hits + agree
            total += 1
    assert total >= 50
    assert (hits.float() / total).max() >= 0.8


def test_a_corrupted_bundled_checkpoint_is_reported_by_name(tmp_path):
    import shutil

    for name in BUNDLED_NAMES:
        shutil.copytree(BUNDLED_DIR / name, tmp_path / name)
    (tmp_path / "reverse" / "model.safetensors").write_bytes(b"not safetensors")
    loaded = load_bundled("cpu", folder=tmp_path)
    assert set(loaded.models) == set(BUNDLED_NAMES) - {"reverse"}
    assert "model.safetensors" in loaded.errors["reverse"]
    assert load_checkpoint(tmp_path / "translate").task == "translate"


def test_bundled_reversal_model_reverses_held_out_inputs(bundled):
    from transformer.generation import DecodingSettings, generate

    checkpoint = bundled["reverse"]
    tokenizer = checkpoint.tokenizer
    for example in task_of(checkpoint).test[:50]:
        output = generate(
            checkpoint.model,
            tokenizer.encode_ids(example.source),
            DecodingSettings(max_new_tokens=20),
            bos_id=tokenizer.bos_id,
            eos_id=tokenizer.eos_id,
        )
        assert tokenizer.decode(output) == " ".join(reversed(example.source.split()))
