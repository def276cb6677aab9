"""The app's views on the later families, each handler called directly (no server): the
parameter table against ``transformers``' count, Inside a layer's summary naming where the
norms sit, the attention tab's heads, the positions tab's rotary caption."""

from __future__ import annotations

import pytest
from conftest import family_folder
from family_checks import FAMILIES

from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs import positions
from ui.tabs.attention import handlers as attention
from ui.tabs.inside import handlers as inside
from ui.tabs.training import description

pytest.importorskip("transformers")

TEXT = "w5 w17 w3 w42 w8 w61 w29 w77"
NAMES = ("gemma2", "gemma3", "olmo2", "pythia", "phi3-longrope", "qwen3", "mistral")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("families")
    references = {}
    for name in NAMES:
        family, config, matrices, _ = FAMILIES[name]
        references[name] = family_folder(root / name, family, seed=1, matrices=matrices, **config)
    return ModelRegistry("cpu", [str(root / name) for name in NAMES]), references


@pytest.mark.parametrize("name", NAMES)
def test_every_view_draws_the_family(models, name: str) -> None:
    registry, references = models
    session = SessionModels()
    _summary, table, _config = description.model_info(registry, name, session)
    total = dict((row[0], row[1]) for row in table)["total"]
    assert int(total.replace(",", "")) == sum(p.numel() for p in references[name].parameters())
    summary = str(inside.inside_layer(registry, TEXT, name, "decoder", 2, 2, 5, False, session)[0])
    assert summary.startswith(f"**{name}**")
    if name == "olmo2":
        assert "on each sub-layer's output" in summary
    if name.startswith("gemma"):
        assert "before and after each sub-layer" in summary
    kind = "decoder masked self-attention"
    panels = attention.everything(registry, TEXT, name, kind, 1, 1, 1, [], False, session)
    assert "Error" not in str(panels[3])
    caption = str(positions.embeddings_view(registry, TEXT, name, False, session)[-1])
    assert "rotary" in caption


@pytest.mark.parametrize("name", NAMES)
def test_the_configuration_survives_json(models, name: str) -> None:
    """A loaded family's configuration written as JSON and read back is the same (its rotary
    scaling and layer types included), as a saved checkpoint needs."""
    from transformer.core.config import ModelConfig

    registry, _ = models
    config = registry.checkpoint(name, SessionModels()).config
    again = ModelConfig.from_json(config.to_json())
    assert again == config and hash(again) == hash(config)


@pytest.mark.parametrize("name", NAMES)
def test_generate_names_the_family_and_offers_every_control(models, name: str) -> None:
    from ui.tabs.generate import handlers as generate

    registry, _ = models
    updates = generate.model_controls(registry, name, SessionModels())
    note, buttons = updates[0], updates[4:]  # note, layer, head, cross-attention, buttons
    assert "continues the prompt" in note and name in note
    assert buttons and all(button["interactive"] is True for button in buttons)


@pytest.mark.parametrize("name", ["qwen3", "pythia"])
def test_every_query_the_menu_offers_is_one_the_walkthrough_takes(models, name: str) -> None:
    """A sentence the toy vocabulary does not know is all ``<unk>``, the pad token of these
    folders: the menu offered positions the walkthrough then refused as padding, so a link to
    Inside a layer on such a model drew nothing. Each offered position must draw."""
    registry, _ = models
    session = SessionModels()
    unknown = "the cat sat on the mat"
    offered = inside.controls(registry, unknown, name, "decoder", 1, 1, 0, session)[3].choices
    assert offered
    for _label, position in offered:
        summary = inside.inside_layer(
            registry, unknown, name, "decoder", 1, 1, position, False, session
        )
        assert str(summary[0]).startswith(f"**{name}**"), (position, summary[0])
