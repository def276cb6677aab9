"""One way of writing a piece everywhere: SmolLM2's byte-level pieces (ĠParis, Ċ, Âł) are
written on the Attention axes, in Inside a layer's query-token menu and in Generate's logit
lens as Tokenize writes them (␣Paris, ↵, ⍽), with a legend where the marks appear; checked
against the ``tokenizers`` library's own byte-level decoder."""

from __future__ import annotations

import json

import pytest

from transformer.pretrained.shipped import SMOLLM2
from ui.serving.state import GenerationState, ModelRegistry, SessionModels

# SmolLM2 is read from its GGUF (seconds), then runs a real 30-layer pass: the slow tier.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SMOLLM2.available, reason="needs the shipped SmolLM2"),
]

TEXT = "The GPL licenses\xa0are free."  # Attention reads one sentence a line
LINES = "The GPL licenses\tare free."  # Inside reads one line
NAME = SMOLLM2.name


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry("cpu")


def _expected(registry: ModelRegistry, text: str) -> list[str]:
    """Each token of ``text`` as the reference decoder reads it, with the marks written out."""
    from tokenizers import decoders

    tokenizer = registry.checkpoint(NAME, None).tokenizer
    reader = decoders.ByteLevel()
    pieces = [tokenizer.id_to_token(i) or "" for i in tokenizer.encode_ids(text)]
    texts = [reader.decode([p]) for p in pieces]
    marks = {" ": "␣", "\xa0": "⍽", "\n": "↵", "\t": "⇥"}
    return ["".join(marks.get(c, c) for c in t) for t in texts]


def _labels(figure) -> list[str]:
    names = []
    for axis in (figure.layout.xaxis, figure.layout.yaxis):
        names += [str(v) for v in (axis.ticktext or ())]
    for trace in figure.data:
        for values in (getattr(trace, "x", None), getattr(trace, "y", None)):
            if values is not None:
                names += [str(v) for v in values if isinstance(v, str)]
    return names


def test_the_attention_axes_write_pieces_as_tokenize_does(registry: ModelRegistry) -> None:
    from ui.tabs.attention.handlers import everything

    single, _masks, _diff, summary, _grid = everything(
        registry, TEXT, NAME, "decoder masked self-attention", 1, 1, 1, [], False, None, None
    )
    labels = _labels(single)
    pieces = {label.split(":", 1)[1] for label in labels if ":" in label}
    for expected in _expected(registry, TEXT):
        assert expected in pieces, (expected, sorted(pieces))
    assert not any(mark in label for label in labels for mark in "ĠĊł")
    assert "␣ is a space (stored as Ġ)" in summary
    assert "⍽ is a no-break space (stored as Âł)" in summary


def test_inside_s_query_menu_writes_pieces_as_tokenize_does(registry: ModelRegistry) -> None:
    from ui.tabs.inside.handlers import refresh

    outputs = refresh(registry, LINES, NAME, "decoder", 1, 1, 2, False, SessionModels())
    menu, summary = outputs[3], outputs[4]
    shown = [label.split(": ", 1)[1] for label, _ in menu.choices]
    assert shown[-len(_expected(registry, LINES)) :] == _expected(registry, LINES)
    assert "␣ is a space (stored as Ġ)" in summary
    assert "⇥ is a tab (stored as ĉ)" in summary


def test_the_logit_lens_writes_pieces_as_tokenize_does(registry: ModelRegistry) -> None:
    from ui.tabs.generate import handlers

    state = GenerationState()
    inputs = ["The capital of France is", NAME, "greedy", 1.0, 0, 1.0, 3, 8, 0, 1, 1, False]
    drawn = handlers.first_step(registry, *inputs, SessionModels(), state)
    lens, chart = drawn[4], drawn[1]
    for figure in (lens, chart):
        # Every string the figure sends (labels, hover text, annotations), as the page reads it.
        written = json.dumps(json.loads(figure.to_json()), ensure_ascii=False)
        assert "Ġ" not in written and "Ċ" not in written
        assert "␣" in written  # " Paris" and its neighbours start with a space


def test_the_chat_template_s_token_line_writes_pieces_as_tokenize_does(
    registry: ModelRegistry,
) -> None:
    from ui.tabs.generate.chat import chat_preview

    line = chat_preview(registry, True, "What is the capital of France?", NAME, SessionModels())
    assert "**`<|im_start|>`**" in line  # special tokens as they are, in bold
    assert "`␣capital`" in line and "Ġ" not in line.split("stored as")[0]
    assert "␣ is a space (stored as Ġ)" in line and "↵ is a line break (stored as Ċ)" in line
