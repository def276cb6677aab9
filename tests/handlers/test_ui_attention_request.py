"""One Attention redraw reads its controls once: the model looked up once, the text checked once
and tokenized only by the pass that reads it (none at all when that pass is cached), however
many panels it draws. Counted with wrappers around the registry's lookup, the sentences' check
and the tokenizer, not read from the tab's own code."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest
import torch

import transformer.lab.inspection as inspection
from transformer.text.tokenization import Tokenizer
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs.attention import handlers

CROSS = "cross-attention (decoder → encoder)"
DECODER_SELF = "decoder masked self-attention"
TEXT = "the small cat sees a red ball\na big dog sleeps"
UNREADABLE = "zebra quartz\nvow"  # letters the reverse task's alphabet lacks
COUNTED_LINES = {line.strip() for text in (TEXT, UNREADABLE) for line in text.splitlines()}
"""The lines whose tokenizations are counted (a line is counted wherever it is tokenized)."""


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Per redraw: ``lookups`` (ModelRegistry.checkpoint), ``checks`` (check_sentences, through
    every module that imported it) and ``tokenizations`` (a whole line through
    Tokenizer.encoding), each outside the registry's own analysis (which checks and tokenizes
    what it is given, as a library call must) and, as ``... in the pass``, inside it."""
    counted: Counter[str] = Counter()
    inside = [0]

    def wrap(target: Any, name: str, key: str, only: Any = None) -> None:
        original = getattr(target, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if only is None or only(*args, **kwargs):
                counted[f"{key} in the pass" if inside[0] else key] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(target, name, wrapper)

    original_analysis = ModelRegistry.analysis

    def analysis(self: ModelRegistry, *args: Any, **kwargs: Any) -> Any:
        inside[0] += 1
        try:
            return original_analysis(self, *args, **kwargs)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(ModelRegistry, "analysis", analysis)
    wrap(ModelRegistry, "checkpoint", "lookups")
    wrap(
        Tokenizer,
        "encoding",
        "tokenizations",
        lambda tok, text, *a, **k: text.strip() in COUNTED_LINES,
    )
    check = inspection.check_sentences
    for module in [m for m in list(sys.modules.values()) if m is not None]:
        name = getattr(module, "__name__", "")
        if (
            name.startswith(("ui.", "transformer."))
            and vars(module).get("check_sentences") is check
        ):
            wrap(module, "check_sentences", "checks")
    return counted


def _redraw(registry: ModelRegistry, handler: Any, text: str, name: str, *rest: Any) -> None:
    args = (CROSS, 2, 1, 1, *rest) if rest else (CROSS, 2, 1, 1, [], False, SessionModels(), None)
    handler(registry, text, name, *args)


@pytest.mark.parametrize("handler", [handlers.everything, handlers.refit_everything])
def test_a_redraw_from_the_cache_looks_the_model_up_once_and_checks_the_text_once(
    registry, counts, handler
):
    handlers.everything(registry, TEXT, "translate", CROSS, 2, 1, 1, [], False, None)  # cached
    counts.clear()
    _redraw(registry, handler, TEXT, "translate")
    assert counts == Counter({"lookups": 1, "checks": 1})  # nothing tokenized: it is cached


def test_a_new_text_or_model_is_checked_once_and_tokenized_only_by_its_pass(registry, counts):
    for text, name in [(TEXT + "\na big bird eats", "translate"), (TEXT, "continue")]:
        counts.clear()
        handlers.refit_everything(registry, text, name, CROSS, 2, 1, 1, [], False, None, None)
        assert counts["lookups"] == 1 and counts["checks"] == 1
        assert counts["tokenizations"] == 0  # the tab itself tokenizes nothing
        # The pass tokenizes each counted line once: its cost estimate, its memory bound and
        # the pass itself read the same ids.
        counted = [line for line in text.splitlines() if line.strip() in COUNTED_LINES]
        assert counts["tokenizations in the pass"] == len(counted), name


def test_a_what_if_and_a_mistake_redraw_look_the_model_up_once(registry, counts):
    args = (CROSS, 2, 1, 1, ["causal mask off", "zero this head"], False, None)
    handlers.everything(registry, TEXT, "translate", *args, "mask polarity inverted")
    counts.clear()
    handlers.everything(registry, TEXT, "translate", *args, "mask polarity inverted")
    assert counts == Counter({"lookups": 1, "checks": 1})


def test_the_endpoints_look_the_model_up_once(registry, counts):
    handlers.attention(registry, TEXT, "translate", CROSS, 2, 1, 1, [], False, None)
    assert counts["lookups"] == 1 and counts["checks"] == 1
    counts.clear()
    handlers.grid(registry, TEXT, "translate", CROSS, 1, False, None)
    assert counts["lookups"] == 1 and counts["checks"] == 1


def test_naming_what_a_model_cannot_read_tokenizes_each_line_once(registry, counts):
    handlers.everything(registry, UNREADABLE, "reverse", DECODER_SELF, 1, 1, 1, [], False, None)
    counts.clear()
    _, _, _, summary, _ = handlers.everything(
        registry, UNREADABLE, "reverse", DECODER_SELF, 1, 1, 1, [], False, None
    )
    assert "cannot read" in summary
    assert counts["tokenizations"] == len(UNREADABLE.splitlines()) and counts["lookups"] == 1


def test_the_broken_view_names_what_its_axes_hold_from_the_mistakes_record(registry):
    args = (2, 1, 1, [], False, None)
    split, *_ = handlers.everything(
        registry, TEXT, "translate", CROSS, *args, "heads split with a bare view"
    )
    inverted, *_ = handlers.everything(
        registry, TEXT, "translate", CROSS, *args, "mask polarity inverted"
    )
    assert "(rows, columns: pieces of tokens)" in str(split.to_plotly_json()["layout"])
    assert "pieces of tokens" not in str(inverted.to_plotly_json()["layout"])
    assert "with “mask polarity inverted”" in str(inverted.to_plotly_json()["layout"])


def test_fitting_the_controls_alone_needs_no_text_yet(registry):
    """The controls follow the model before a sentence is typed (a link may open with none);
    the Sentence range counts the non-empty lines."""
    kind, layer, head, row = handlers.controls(registry, "", "continue", CROSS, 9, 9, 9, None)
    config = registry.checkpoint("continue", None).config
    assert kind.value == DECODER_SELF  # continue has no cross-attention
    assert layer.value == config.n_decoder_layers and head.value == config.n_heads
    assert row.value == 1 and not row.visible
    *_, rows = handlers.controls(registry, "a\n\nb\nc", "continue", CROSS, 1, 1, 9, None)
    assert rows.value == 3 and rows.visible


def test_the_handlers_take_the_values_in_the_order_of_the_api_written_once():
    """Gradio reads a handler's signature to count its inputs and to describe its API: every
    handler's is the request's parameter list (or the part of it that it names), in one order."""
    import inspect

    from ui.serving.endpoints import takes_request
    from ui.tabs.attention.request import reading

    def names(handler: Any) -> list[str]:
        return list(inspect.signature(handler).parameters)

    full = ["registry", "sentences", "name", "kind", "layer", "head", "row", "what_if"]
    full += ["large", "session", "mistake"]
    for handler in (handlers.attention, handlers.everything, handlers.refit_everything):
        assert names(handler) == full, handler.__name__
    assert names(handlers.controls) == [*full[:7], "session"]
    grid = ["registry", "sentences", "name", "kind", "row", "large", "session"]
    assert names(handlers.grid) == grid
    with pytest.raises(TypeError, match="takes no"):
        takes_request(reading(fit=True), ("sentences", "model"))


def test_the_controls_and_the_grid_read_their_values_by_name(registry):
    """Named values reach the request as named (a layer is not read as a row)."""
    kind, layer, head, row = handlers.controls(
        registry, sentences=TEXT, name="translate", kind=CROSS, layer=2, head=3, row=2, session=None
    )
    assert (kind.value, layer.value, head.value, row.value) == (CROSS, 2, 3, 2)
    everything = handlers.everything(registry, TEXT, "translate", CROSS, 1, 1, 2, [], False, None)
    grid = handlers.grid(
        registry, sentences=TEXT, name="translate", kind=CROSS, row=2, large=False, session=None
    )
    assert grid.to_plotly_json() == everything[-1].to_plotly_json()  # the same grid, sentence 2
    other = handlers.grid(registry, TEXT, "translate", CROSS, 1, False, None)
    assert other.to_plotly_json() != grid.to_plotly_json()
