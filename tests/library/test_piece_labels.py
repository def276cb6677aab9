"""Every piece of every script labelled readably, on GPT-2's, cl100k_base's (GPT-4), BERT's,
SmolLM2's and a SentencePiece byte-fallback vocabulary.

The reference is the libraries' own bytes and the test's own decoding of them: a token's bytes
from ``tiktoken`` (GPT-2, cl100k_base), from GPT-2's byte table written out here (SmolLM2), the
piece's text (BERT) or its ``<0xXX>`` code (byte fallback); which character each byte belongs to
is worked out here from that stream, never from the code under test."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import pytest

from transformer.text.display import label_pieces, piece_labels, piece_scheme
from transformer.text.real_tokenizers import load_real_tokenizer

TEXTS = {
    "chinese": "我们去北京吃烤鸭，美国人也来了。",
    "japanese": "東京でラーメンを食べました。カタカナ",
    "korean": "안녕하세요, 한국어 텍스트입니다",
    "arabic": "مرحبا بالعالم 3 كتب",
    "hebrew": "שלום עולם, זה טקסט",
    "hindi": "नमस्ते दुनिया, हिन्दी पाठ",
    "flags": "🇫🇷🇯🇵🇩🇪 and 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "skin tones": "👍🏽👋🏿 ok",
    "zwj family": "👨‍👩‍👧‍👦 and 👩🏽‍💻",
    "coffee": "a ☕️ please",
    "german": "Donaudampfschifffahrtsgesellschaftskapitän und Straßenbahnhaltestelle",
    "mixed": "GPT-2 reads 美 and ب\u200bx\u00adz",
}
# Invisible characters in TEXTS and the names a reader must see (written out here).
INVISIBLE = {
    "\ufe0f": "VS16",
    "\u200d": "ZWJ",
    "\u200b": "ZWSP",
    "\u00ad": "SHY",
    **{chr(0xE0000 + ord(c)): f"TAG {c}" for c in "gbsct"},
    "\U000e007f": "CANCEL TAG",
}
MARKS = {" ": "␣", "\n": "↵", "\t": "⇥", "\xa0": "⍽", "\r": "␍"}
ISOLATES = "\u200e\u2066\u2067\u2068\u2069"


def _gpt2_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character table, as OpenAI's encoder.py writes it."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    kept += list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in kept:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _stored_to_bytes(piece: str) -> bytes:
    inverse = {c: b for b, c in _gpt2_bytes_to_unicode().items()}
    return bytes(inverse[c] for c in piece)


@pytest.fixture(scope="module")
def vocabularies(tiktoken_encodings: dict[str, Any]) -> dict[str, Any]:
    """name → (our tokenizer, ids of a text, bytes of an id (the reference), byte-level?)."""
    found: dict[str, Any] = {}
    for name in ("gpt2", "cl100k_base"):
        encoding = tiktoken_encodings[name]
        found[name] = (
            load_real_tokenizer(name),
            lambda text, e=encoding: e.encode(text, allowed_special=set()),
            lambda i, e=encoding: e.decode_single_token_bytes(i),
        )
    bert = load_real_tokenizer("bert-base-uncased")
    found["bert"] = (
        bert,
        lambda text: bert.encode_ids(text),
        lambda i: (bert.id_to_token(i) or "").removeprefix("##").encode(),
    )
    return found


def _characters(stream: bytes) -> list[tuple[int, int, str]]:
    """(start, end, character) of a valid UTF-8 stream, decoded here byte by byte."""
    out, start = [], 0
    while start < len(stream):
        for end in range(start + 1, min(start + 4, len(stream)) + 1):
            try:
                out.append((start, end, stream[start:end].decode("utf-8")))
                break
            except UnicodeDecodeError:
                continue
        else:
            raise AssertionError(f"no character at byte {start} of {stream!r}")
        start = out[-1][1]
    return out


def _written(char: str) -> str:
    """How the test expects a character to be written: its mark, its name, or itself."""
    if char in MARKS:
        return MARKS[char]
    if char in INVISIBLE:
        return f"⟨{INVISIBLE[char]}⟩"
    return char


def _check_sequence(labels: list[str], datas: list[bytes], text_chars: set[str]) -> None:
    """Each label against the pieces' bytes (``datas``, one per label), decoded here."""
    stream = b"".join(datas)
    owners: list[int] = []
    for index, data in enumerate(datas):
        owners += [index] * len(data)
    expected_parts: list[list[str]] = [[] for _ in labels]
    for start, end, char in _characters(stream):
        pieces = sorted(set(owners[start:end]))
        for index in pieces:
            held = [p - start + 1 for p in range(start, end) if owners[p] == index]
            if len(pieces) == 1:
                expected_parts[index].append(_written(char))
                continue
            which = f"{held[0]}" if len(held) == 1 else f"{held[0]}-{held[-1]}"
            expected_parts[index].append(f"{_written(char)}[{which}/{end - start}]")
    for label, parts in zip(labels, expected_parts, strict=True):
        plain = "".join(c for c in label if c not in ISOLATES).removeprefix("##")
        plain = plain.removeprefix("◌")  # a combining mark shown on its dotted circle
        assert plain == "".join(parts), (label, parts)
        for bad in ("Ġ", "Ċ", "Ã", "Â", "\ufffd", "<0x"):
            assert bad not in label or bad in text_chars, (bad, label)
        assert not any(c in INVISIBLE for c in label), label  # named, never raw
        if any(unicodedata.bidirectional(c) in ("R", "AL") for c in label):
            # FSI … PDI around the label, each mark (``[1/2]``, ``⟨ZWJ⟩``) in LRI … PDI.
            assert label.startswith("\u200e\u2068") and label.endswith("\u2069"), repr(label)
            outside = re.sub("\u2066[^\u2069]*\u2069", "", label)
            assert not re.search(r"\[\d+(?:-\d+)?/\d+\]|⟨[^⟩]*⟩", outside), repr(label)
        else:
            assert not any(c in ISOLATES for c in label), repr(label)


@pytest.mark.parametrize("name", ["gpt2", "cl100k_base", "bert"])
@pytest.mark.parametrize("script", list(TEXTS))
def test_every_piece_is_readable_and_names_its_character(
    vocabularies: dict[str, Any], name: str, script: str
) -> None:
    tokenizer, encode, reference_bytes = vocabularies[name]
    text = TEXTS[script]
    ids = encode(text)
    labels = [label.text for label in piece_labels(tokenizer, ids)]
    datas = [reference_bytes(i) for i in ids]
    special = tokenizer.special_ids
    if name != "bert":  # byte-level: the pieces' bytes are the text's, nothing lost
        assert b"".join(datas).decode("utf-8") == text
    # A special token ([UNK] for an emoji BERT cannot read) is written as it is and ends a run.
    runs: list[tuple[list[str], list[bytes]]] = [([], [])]
    for token_id, label, data in zip(ids, labels, datas, strict=True):
        if token_id in special:
            assert label == tokenizer.id_to_token(token_id)
            runs.append(([], []))
            continue
        runs[-1][0].append(label)
        runs[-1][1].append(data)
    for run_labels, run_datas in runs:
        _check_sequence(run_labels, run_datas, set(text))


def test_the_cases_the_page_got_wrong(vocabularies: dict[str, Any]) -> None:
    gpt2 = vocabularies["gpt2"][0]
    # ☕️: its variation selector is named, not an empty chip.
    coffee = [label.text for label in piece_labels(gpt2, gpt2.encode_ids("☕️"))]
    assert coffee == ["☕[1-2/3]", "☕[3/3]", "⟨VS16⟩"]
    # A piece holding a letter and the first byte of the next: both named, isolated.
    scheme = piece_scheme(gpt2)
    mixed = label_pieces(scheme, ["Ø§Ø", "¨"])  # ا then the 2 bytes of ب
    assert mixed[0].text == "\u200e\u2068اب\u2066[1/2]\u2069\u2069"
    assert "D8 A8" in mixed[0].hover and "byte 1" in mixed[0].hover
    # The index before a right-to-left piece stays before it: "3:" then an isolate.
    assert f"3:{label_pieces(scheme, ['Ø¨'])[0].text}" == "3:\u200e\u2068ب\u2069"
    # Alone, a byte whose character is not among the pieces is its code, never "�".
    assert label_pieces(scheme, ["ç"])[0].text == "⟨0xE7⟩[1/3]"
    assert label_pieces(scheme, ["¾İ"])[0].text == "⟨…0xBE 0x8E⟩"


def test_sentencepiece_byte_fallback_names_the_character() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"<unk>": 0, "▁a": 1, **{f"<0x{b:02X}>": 2 + b for b in range(256)}}
    model = tokenizers.models.BPE(vocab, [], unk_token="<unk>", byte_fallback=True)
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    from transformer.text.tokenization import Tokenizer

    tokenizer = Tokenizer(backend)
    ids = tokenizer.encode_ids("a 美")
    pieces = [tokenizer.id_to_token(i) for i in ids]
    assert pieces[-3:] == ["<0xE7>", "<0xBE>", "<0x8E>"]  # the library's own byte fallback
    labels = [label.text for label in piece_labels(tokenizer, ids)]
    datas = [bytes([int(p[3:5], 16)]) if p.startswith("<0x") else p.encode() for p in pieces]
    _check_sequence(labels, datas, set("a 美"))
    assert labels[-3:] == ["美[1/3]", "美[2/3]", "美[3/3]"]


@pytest.mark.slow  # SmolLM2's tokenizer is read from its 90 MB GGUF (seconds)
@pytest.mark.parametrize("script", list(TEXTS))
def test_smollm2_s_pieces_are_readable(smollm2_tokenizer: Any, script: str) -> None:
    text = TEXTS[script]
    ids = smollm2_tokenizer.encode_ids(text)
    labels = [label.text for label in piece_labels(smollm2_tokenizer, ids)]
    datas = [_stored_to_bytes(smollm2_tokenizer.id_to_token(i)) for i in ids]
    assert b"".join(datas).decode("utf-8") == text
    _check_sequence(labels, datas, set(text))


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> Any:
    from transformer.pretrained.gguf import read_gguf
    from transformer.pretrained.llama import tokenizer_from_gguf
    from transformer.pretrained.shipped import SMOLLM2

    if not SMOLLM2.available or SMOLLM2.folder is None:
        pytest.skip("needs the shipped SmolLM2")
    return tokenizer_from_gguf(read_gguf(SMOLLM2.folder / SMOLLM2.entry).metadata)
