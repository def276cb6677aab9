"""The Model & training tab's handlers, called directly: parameters per component against
``transformers``' own modules, a pretrained model's description, the snapshot controls and
views, cancelling a training, curves and numbers for people."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
import torch

from transformer import figures
from transformer.core.run import TRACE
from transformer.pretrained.checkpoint import load_snapshot
from ui.serving.state import TRAINED_HERE, ModelRegistry, SessionModels
from ui.tabs import training

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


@pytest.fixture(scope="module")
def tiny(tiny_hf_model) -> dict[str, tuple[Path, torch.nn.Module]]:
    """Tiny GPT-2 (3 layers, 2 heads) and BERT (no pooler) folders, with ``transformers``'
    own model of each."""
    gpt2 = tiny_hf_model("gpt2", layers=3, heads=2)
    bert = tiny_hf_model("bert", pooling=False)
    return {
        "gpt2": (gpt2, transformers.GPT2LMHeadModel.from_pretrained(gpt2)),
        "bert": (bert, transformers.BertModel.from_pretrained(bert, add_pooling_layer=False)),
    }


@pytest.fixture(scope="module")
def pretrained(tiny) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), extra_models=[str(p) for p, _ in tiny.values()])


def _numel(model: torch.nn.Module, prefix: str) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefix))


def _table(rows: list[list]) -> dict[str, int]:
    return {label: int(count.replace(",", "")) for label, count in rows}


def test_gpt2_parameters_per_component_are_transformers_own(pretrained, tiny):
    folder, hf = tiny["gpt2"]
    text, rows, config_rows = training.model_info(pretrained, str(folder), SessionModels())
    table = _table(rows)
    assert table == {
        "token embeddings (tied to the generator)": _numel(hf, "transformer.wte."),
        "positions (learned)": _numel(hf, "transformer.wpe."),
        "decoder layers": _numel(hf, "transformer.h."),
        "decoder final norm": _numel(hf, "transformer.ln_f."),
        "total": sum(p.numel() for p in hf.parameters()),  # lm_head is wte: counted once
    }
    assert "GPT-2 family" in text and str(folder) in text
    assert "3 decoder layers, 2 heads each" in text
    assert ["n_decoder_layers", "3"] in config_rows


def test_bert_parameters_per_component_are_transformers_own(pretrained, tiny):
    folder, hf = tiny["bert"]
    text, rows, _config = training.model_info(pretrained, str(folder), SessionModels())
    assert _table(rows) == {
        "token embeddings": _numel(hf, "embeddings.word_embeddings."),
        "positions (learned)": _numel(hf, "embeddings.position_embeddings."),
        "token types": _numel(hf, "embeddings.token_type_embeddings."),
        "embedding norms": _numel(hf, "embeddings.LayerNorm."),
        "encoder layers": _numel(hf, "encoder.layer."),
        "total": sum(p.numel() for p in hf.parameters()),
    }
    assert "BERT family" in text and "2 encoder layers, 4 heads each" in text


def test_bundled_model_components_add_up(registry):
    for name in ("translate", "continue"):
        model = registry.checkpoint(name, None).model
        table = _table(training.model_info(registry, name, None)[1])
        assert "other" not in table
        assert sum(n for k, n in table.items() if k != "total") == table["total"]
        assert table["decoder layers"] == _numel(model, "decoder.layers.")


def test_snapshot_slider_spans_the_snapshots_that_exist(registry):
    steps = registry.checkpoint("reverse", None).snapshot_steps
    slider, sentence = training.snapshot_controls(registry, "reverse", None)
    assert (slider["minimum"], slider["maximum"], slider["value"]) == (0, len(steps) - 1, 3)
    assert f"3 = step {steps[3]:,}" in slider["label"] and sentence["value"] == "a b c d e f"
    slider, _ = training.snapshot_controls(registry, TRAINED_HERE, SessionModels())
    assert slider["interactive"] is False and "none yet" in slider["label"]
    hint = training.snapshot_live(registry, TRAINED_HERE, 0, "a b", False, SessionModels())
    assert not hint.data and "train a model" in hint.layout.annotations[0].text


def test_a_bundled_snapshot_shows_that_snapshots_weights(registry):
    checkpoint = registry.checkpoint("reverse", None)
    first, last = checkpoint.snapshot_steps[0], checkpoint.snapshot_steps[-1]
    early = training.snapshot_live(registry, "reverse", 0, "a b c", False, None)
    late = training.snapshot_live(registry, "reverse", 3, "a b c", False, None)
    assert early.layout.title.text.startswith(f"Snapshot at step {first:,} of training")
    assert late.layout.title.text.startswith(f"Snapshot at step {last:,} of training")
    # The drawn weights are those of a forward pass through the snapshot read here.
    model = load_snapshot(checkpoint.path, first, checkpoint.config)
    tokenizer = checkpoint.tokenizer
    src = torch.tensor([tokenizer.encode_ids("a b c")])
    tgt = torch.tensor([[tokenizer.bos_id, *tokenizer.encode_ids("c b a")]])
    with torch.no_grad():
        trace = model(src, tgt, call=TRACE)
    weights = trace.attention_weights("cross")[0, 0]  # layer 1, sentence 1: (H, Tq, Tk)
    assert _grid_contains(early, weights[0]) and not _grid_contains(late, weights[0])
    with pytest.raises(Exception, match="snapshot must be between 0 and 3"):
        training.snapshot_live(registry, "reverse", 4, "a b c", False, None)


def _grid_contains(figure, head: torch.Tensor) -> bool:
    """Whether some block of the tiled grid (thousandths of attention) equals ``head``
    ``(Tq, Tk)``."""
    import numpy as np

    z = np.asarray(figure.data[0].z, dtype=np.float32) / 1000
    q, k = head.shape
    target = head.numpy()
    for r in range(z.shape[0] - q + 1):
        for c in range(z.shape[1] - k + 1):
            block = z[r : r + q, c : c + k]
            if np.allclose(block, target, atol=6e-4):
                return True
    return False


def test_cancel_says_where_training_stopped_and_keeps_the_model(registry):
    request = SimpleNamespace(session_hash="cancel-test")
    assert "No training" in training.cancel_training(request)
    updates = training.run_training(registry, "reverse", 3000, 0, False, SessionModels(), request)
    next(updates)
    assert "Stopping" in training.cancel_training(request)
    *_, (final, curves, session) = list(updates)
    assert final.startswith("**Cancelled** at step ")
    stopped = int(final.split("at step ")[1].split(" of")[0].replace(",", ""))
    assert 0 < stopped < 3000 and "of 3,000" in final
    assert "kept" in final and session.trained is not None
    assert max(session.snapshots) <= stopped
    assert max(curves.data[0].x) <= stopped
    assert "No training" in training.cancel_training(request)


def test_training_curves_have_one_colour_per_curve():
    history = [
        {"step": 10, "loss": 2.0},
        {"step": 20, "loss": 1.5, "val_loss": 1.6, "val_token_accuracy": 0.5, "val_exact": 0.1},
    ]
    figure = figures.training_curves_figure(
        history, accuracy_keys=["val_token_accuracy", "val_exact"]
    )
    colours = [trace.line.color for trace in figure.data]
    assert len(colours) == 4 and len(set(colours)) == 4


@pytest.mark.parametrize(
    ("value", "text"),
    [(883.4, "883.4"), (1234, "1,234"), (1e-9, "1e-09"), (0.0713, "0.0713"), (5000.0, "5,000")],
)
def test_numbers_are_formatted_for_people(value, text):
    assert training.human(value) == text


def test_plurals():
    assert training.plural(1, "snapshot") == "1 snapshot"
    assert training.plural(4, "snapshot") == "4 snapshots"


def test_recorded_durations_read_as_minutes_and_seconds():
    from ui.tabs.training.description import metric

    assert metric("train_seconds", 883.4) == "14 min 43 s"
    assert metric("train_seconds", 42.25) == "42.2 s"
    assert metric("exact_match", 0.997) == "99.7%"


@pytest.mark.parametrize(
    ("index", "says"), [(9, "snapshot must be between 0 and 3, got 9"), ("x", "snapshot")]
)
def test_a_snapshot_the_model_did_not_keep_is_refused_in_words(registry, index, says):
    with pytest.raises(gr.Error, match=says):
        training.snapshot_live(registry, "reverse", index, "a b c", False, None)


@pytest.mark.parametrize(("steps", "seed"), [(0, 0), (20, -1), ("many", 0)])
def test_a_training_out_of_range_is_refused_before_it_starts(registry, steps, seed):
    with pytest.raises(gr.Error, match=r"steps|seed"):
        next(training.run_training(registry, "reverse", steps, seed, False, SessionModels()))
