"""The views at the size of the models students open: 32 layers of 32 heads (Llama 3.1 8B's
grid, 1,024 heads) and a 128,256-id vocabulary (Llama 3's), narrow enough to run on a CPU.

What grows with the layers and heads (the head grid, the long view's overview of every head)
and with the vocabulary (the logit lens's top-k, the next-token chart) must stay within the
payload a page can take (3 MB for a whole response), and say what it drew."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import family_folder

from transformer.lab.analysis import prompt_ids
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs.attention import handlers as attention
from ui.tabs.attention import scale
from ui.tabs.generate import handlers as generate

pytestmark = pytest.mark.slow  # a 128k-id model: seconds to build and save
pytest.importorskip("transformers")

LAYERS, HEADS, VOCAB = 32, 32, 128_256
RESPONSE_BYTES = 3_000_000  # the most one click may send the page
TEXT = " ".join(f"w{i}" for i in range(5, 69))  # 64 tokens the folder's vocabulary knows


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ModelRegistry:
    folder: Path = tmp_path_factory.mktemp("llama-3-grid") / "grid"
    family_folder(
        folder,
        "llama",
        vocab=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=HEADS,
        num_key_value_heads=8,
        num_hidden_layers=LAYERS,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    return ModelRegistry(torch.device("cpu"), [str(folder)])


def _bytes(outputs: Any) -> int:
    """What a handler's figures weigh as JSON, the form the page receives them in."""
    items = outputs if isinstance(outputs, tuple | list) else (outputs,)
    return sum(len(item.to_json()) for item in items if hasattr(item, "to_json"))


def test_the_model_has_the_grid_and_vocabulary_of_llama_3(registry: ModelRegistry) -> None:
    config = registry.checkpoint("grid", None).config
    assert (config.n_decoder_layers, config.n_heads, config.output_vocab_size) == (
        LAYERS,
        HEADS,
        VOCAB,
    )


def test_the_head_grid_of_1024_heads_stays_within_a_response(registry: ModelRegistry) -> None:
    kind = "decoder masked self-attention"
    panels = attention.everything(
        registry, TEXT, "grid", kind, LAYERS, HEADS, 1, [], False, SessionModels()
    )
    assert _bytes(panels) < RESPONSE_BYTES
    grid = attention.grid(registry, TEXT, "grid", kind, 1, False, None)
    # every head is drawn: the grid's heatmap holds 32 x 32 tiles of the 64 x 64 weights
    z = grid.data[0].z
    assert len(z) >= LAYERS * 8 and len(z[0]) >= HEADS * 8, (len(z), len(z[0]))


def test_the_long_view_overview_of_1024_heads_stays_within_a_response(
    registry: ModelRegistry,
) -> None:
    figures = scale.attention_scale(
        registry, TEXT, "grid", "previous", LAYERS, HEADS, 2, 5, 2, -1, False, SessionModels()
    )
    assert _bytes(figures) < RESPONSE_BYTES
    overview = figures[0]
    shown = sum(len(trace.z) * len(trace.z[0]) for trace in overview.data if trace.z is not None)
    assert shown >= LAYERS * HEADS  # one statistic per head, at least


def test_a_generation_step_reads_the_128k_vocabulary_and_stays_small(
    registry: ModelRegistry,
) -> None:
    args = [TEXT, "grid", "greedy", 1.0, 0, 1.0, 3, 4, 0]
    outputs = generate.step(registry, *args, 1, 1, False, SessionModels(), None)
    _summary, chart, *_rest = outputs
    assert _bytes(outputs[:-1]) < RESPONSE_BYTES
    # the chart names the most probable of all 128,256 ids: the model's own argmax
    checkpoint = registry.checkpoint("grid", None)
    ids = torch.tensor([prompt_ids(checkpoint.model, checkpoint.tokenizer, TEXT)])
    with torch.no_grad():
        best = int(checkpoint.model(tgt=ids)[0, -1].argmax())
    labels = [str(label) for label in chart.data[0].y]
    assert any(str(checkpoint.tokenizer.id_to_token(best)) in label for label in labels), labels[:5]
