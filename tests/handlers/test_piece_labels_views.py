"""Every view writes a sequence's pieces one way (a split character named, ``Ġ`` never shown):
Attention's axes, Inside a layer's menu, summary and figures, Generate's summary and figures,
Tokenize's table and chips, and the embeddings' axes, on a tiny GPT-2 that reads with GPT-2's
real byte-level vocabulary. Each piece's expected label is worked out here from ``tiktoken``'s
bytes of its id, decoded by the test itself."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import build_hf_model

from transformer.text.real_tokenizers import REAL_TOKENIZERS, load_real_tokenizer
from ui.serving.state import GenerationState, ModelRegistry, SessionModels

TEXT = "مرحبا 美国 ☕️"  # Arabic, Chinese split across byte pieces, and a variation selector
NAMES = {"\ufe0f": "VS16", " ": "␣"}
BAD = ("Ġ", "Ċ", "\ufffd", "<0x", "Ã", "Ø", "ç¾", "ï¸")
ISOLATES = re.compile("[\u200e\u2066-\u2069]")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1-layer GPT-2 over GPT-2's 50,257 pieces, with GPT-2's own tokenizer."""
    folder = tmp_path_factory.mktemp("real-vocab") / "gpt2-real-vocab"
    build_hf_model("gpt2", folder, vocab=50257, width=16, layers=1, heads=2, positions=64)
    load_real_tokenizer("gpt2").save(folder)  # replaces the word-level tokenizer.json
    return folder


@pytest.fixture(scope="module")
def registry(folder: Path) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), [str(folder)])


@pytest.fixture(scope="module")
def expected(tiktoken_encodings: dict[str, Any]) -> list[str]:
    """TEXT's pieces as a student must read them, from tiktoken's bytes of each id."""
    encoding = tiktoken_encodings["gpt2"]
    datas = [encoding.decode_single_token_bytes(i) for i in encoding.encode(TEXT)]
    owners = [n for n, data in enumerate(datas) for _ in data]
    stream = b"".join(datas)
    labels = [""] * len(datas)
    start = 0
    while start < len(stream):
        end = next(e for e in range(start + 1, start + 5) if _whole(stream[start:e]))
        char = stream[start:end].decode("utf-8")
        shown = f"⟨{NAMES[char]}⟩" if char == "\ufe0f" else NAMES.get(char, char)
        holders = sorted(set(owners[start:end]))
        for n in holders:
            held = [p - start + 1 for p in range(start, end) if owners[p] == n]
            which = f"{held[0]}" if len(held) == 1 else f"{held[0]}-{held[-1]}"
            labels[n] += shown if len(holders) == 1 else f"{shown}[{which}/{end - start}]"
        start = end
    assert any("美[" in label for label in labels)  # the text does split a character
    return labels


def _whole(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _plain(label: str) -> str:
    return ISOLATES.sub("", label)


def _figure_strings(figure: Any) -> list[str]:
    """Every tick label and category of a figure (plotly's or gradio's update of one)."""
    value = getattr(figure, "value", figure)
    if isinstance(value, dict) and "plot" in value:
        data = json.loads(value["plot"])
    elif hasattr(value, "to_json"):
        data = json.loads(value.to_json())
    else:
        return []
    found: list[str] = []

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)
        elif isinstance(node, str) and key in ("ticktext", "x", "y", "text", "title"):
            found.append(node)

    walk(data)
    return found


def _assert_readable(strings: list[str], where: str) -> None:
    for text in strings:
        # The legend alone says how the vocabulary stores a mark: "␣ is a space (stored as Ġ)".
        text = re.sub(r"\(stored as [^)]*\)", "", text)
        for bad in BAD:
            assert bad not in text, (where, bad, text)


def _assert_has_labels(strings: list[str], expected: list[str], where: str) -> None:
    shown = {_plain(s).split(":", 1)[-1] for s in strings}
    shown |= {_plain(s).split(": ", 1)[-1] for s in strings}
    missing = [label for label in expected if label not in shown]
    assert not missing, (where, missing, sorted(shown)[:40])


def test_attention_axes(registry: ModelRegistry, folder: Path, expected: list[str]) -> None:
    from ui.tabs.attention.handlers import everything

    single, *_rest = everything(
        registry, TEXT, str(folder), "decoder masked self-attention", 1, 1, 1, [], False, None, None
    )
    strings = _figure_strings(single)
    _assert_readable(strings, "attention")
    _assert_has_labels(strings, expected, "attention")
    # An index before an Arabic piece stays before it: the piece sits in a bidi isolate.
    assert any(re.fullmatch(r"\d+:\u200e\u2068[^\u2068]*\u2069", s) for s in strings), strings


def test_inside_a_layer(registry: ModelRegistry, folder: Path, expected: list[str]) -> None:
    from ui.tabs import inside

    outputs = inside.refresh(registry, TEXT, str(folder), "decoder", 1, 1, 3, False, None)
    menu, summary = outputs[3], outputs[4]
    choices = [label for label, _ in menu.choices]
    _assert_readable(choices, "inside menu")
    _assert_has_labels(choices, expected, "inside menu")
    _assert_readable([summary], "inside summary")
    strings = [s for output in outputs[5:] for s in _figure_strings(output)]
    strings += [o for o in outputs[5:] if isinstance(o, str)]  # step lists (token 3:…)
    assert strings
    _assert_readable(strings, "inside sections")


def test_generate(registry: ModelRegistry, folder: Path, expected: list[str]) -> None:
    from ui.tabs.generate import handlers

    state = GenerationState()
    inputs = [TEXT, str(folder), "greedy", 1.0, 0, 1.0, 3, 8, 0, 1, 1, False]
    drawn = handlers.first_step(registry, *inputs, SessionModels(), state)
    summary, figures = drawn[0], drawn[1:6]
    _assert_readable([summary], "generate summary")
    strings = [s for figure in figures for s in _figure_strings(figure)]
    _assert_readable(strings, "generate figures")
    _assert_has_labels(strings, expected, "generate self-attention")


def test_output_so_far_holds_back_a_character_still_being_written() -> None:
    from ui.tabs.generate.drawing import _output_text

    tokenizer = load_real_tokenizer("gpt2")
    ids = tokenizer.encode_ids("The 美")  # "The", " " + E7, BE, 8E
    assert tokenizer.decode(ids[:-1]).endswith("\ufffd")  # what the page showed
    text, held = _output_text(tokenizer, ids[:-1])
    assert text == "The " and held == "⟨0xE7 0xBE⟩[1-2/3]"
    assert _output_text(tokenizer, ids) == ("The 美", "")


def test_tokenize_table_and_chips(registry: ModelRegistry, expected: list[str]) -> None:
    from ui.tabs.tokenize import handlers as tokenize

    stats, segments, _, _, rows, _ = tokenize.tokenize(
        registry, TEXT, REAL_TOKENIZERS["gpt2"].label, 500, None, "(none)", 1000
    )
    assert [_plain(row[1]) for row in rows] == expected
    _assert_readable([str(cell) for row in rows for cell in row], "tokenize table")
    chips = [text for text, _ in segments]
    _assert_readable(chips, "tokenize chips")
    assert "⟨VS16⟩" in chips  # the variation selector is a chip that says what it is
    assert "<0xE2>" not in stats and "ح[1/2] is byte 1 of the 2 bytes of ح" in stats


def test_embeddings_axes(registry: ModelRegistry, folder: Path, expected: list[str]) -> None:
    from ui.tabs import positions

    figures = positions.embeddings_view(registry, TEXT, str(folder), False, SessionModels())
    strings = [s for figure in figures[:2] for s in _figure_strings(figure)]
    _assert_readable(strings, "embeddings")
    _assert_has_labels(strings, expected, "embeddings")
