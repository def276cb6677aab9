"""Marian's SentencePiece files as a Hugging Face ``tokenizers`` Unigram tokenizer, offline.

A ``.spm`` file is a protocol-buffer ``ModelProto``; the few fields a Unigram tokenizer needs
are read here directly (no ``sentencepiece`` or ``protobuf`` package):

- ``pieces`` (field 1): each ``piece`` (1, string), ``score`` (2, float), ``type`` (3, enum:
  1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte);
- ``trainer_spec.model_type`` (field 2 → 3): 1 is Unigram, the only kind Marian uses;
- ``normalizer_spec`` (field 3): ``precompiled_charsmap`` (2, bytes: the NFKC-style rules
  ``tokenizers.normalizers.Precompiled`` runs), ``add_dummy_prefix`` (3, default true),
  ``remove_extra_whitespaces`` (4, default true).

Marian segments the *source* with ``source.spm`` and maps each piece to its id in the shared
``vocab.json`` (unknown pieces to ``<unk>``), then appends ``</s>``. The tokenizer built here
holds ``vocab.json``'s tokens in id order, scored with ``source.spm``'s scores; tokens that
``source.spm`` cannot produce (target-only pieces, special tokens) get a score so low that
Viterbi never prefers them to a segmentation from source pieces. One known difference from
``MarianTokenizer``: a character that ``source.spm`` does not know but a target-only token
spells is encoded as that token, where SentencePiece gives ``<unk>``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import tokenizers
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors

from ._common import PretrainedError

MAX_SPM_BYTES = 64 * 1024 * 1024
_UNREACHABLE_SCORE = -1e6  # a token the source model cannot produce


@dataclass(frozen=True)
class SentencePieceModel:
    """What a Unigram tokenizer needs from a ``.spm`` file."""

    pieces: list[tuple[str, float, int]]  # (piece, score, type)
    model_type: int
    precompiled_charsmap: bytes
    add_dummy_prefix: bool
    remove_extra_whitespaces: bool


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)`` of one protobuf message, in order."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _bytes(value: int | bytes) -> bytes:
    """A length-delimited field's value (wire type 2 or a fixed 32/64-bit one)."""
    if not isinstance(value, bytes):
        raise ValueError("a varint where bytes were expected")
    return value


def _int(value: int | bytes) -> int:
    """A varint field's value (wire type 0)."""
    if not isinstance(value, int):
        raise ValueError("bytes where a varint was expected")
    return value


def read_spm(path: Path) -> SentencePieceModel:
    """Parse a SentencePiece ``.spm`` model; :class:`PretrainedError` names the file if not one."""
    if not path.is_file():
        raise PretrainedError(f"{path.name} is missing from {path.parent}")
    if path.stat().st_size > MAX_SPM_BYTES:
        raise PretrainedError(f"{path.name} is larger than {MAX_SPM_BYTES >> 20} MB")
    data = path.read_bytes()
    pieces: list[tuple[str, float, int]] = []
    model_type, charsmap, dummy_prefix, strip_spaces = 1, b"", True, True
    try:
        for number, wire, value in _fields(data):
            if number == 1 and wire == 2:
                piece, score, kind = "", 0.0, 1
                for n, w, v in _fields(_bytes(value)):
                    if n == 1 and w == 2:
                        piece = _bytes(v).decode("utf-8")
                    elif n == 2 and w == 5:
                        score = struct.unpack("<f", _bytes(v))[0]
                    elif n == 3 and w == 0:
                        kind = _int(v)
                pieces.append((piece, score, kind))
            elif number == 2 and wire == 2:
                for n, w, v in _fields(_bytes(value)):
                    if n == 3 and w == 0:
                        model_type = _int(v)
            elif number == 3 and wire == 2:
                for n, w, v in _fields(_bytes(value)):
                    if n == 2 and w == 2:
                        charsmap = _bytes(v)
                    elif n == 3 and w == 0:
                        dummy_prefix = bool(v)
                    elif n == 4 and w == 0:
                        strip_spaces = bool(v)
    except (ValueError, UnicodeDecodeError) as error:
        raise PretrainedError(f"{path.name} is not a SentencePiece model: {error}") from error
    if not pieces:
        raise PretrainedError(f"{path.name} is not a SentencePiece model: it has no pieces")
    return SentencePieceModel(pieces, model_type, charsmap, dummy_prefix, strip_spaces)


def marian_tokenizer(folder: Path) -> tokenizers.Tokenizer:
    """A ``tokenizers.Tokenizer`` for a Marian folder's ``source.spm`` and ``vocab.json``."""
    spm = read_spm(folder / "source.spm")
    if spm.model_type != 1:
        raise PretrainedError(
            f"source.spm is a model of type {spm.model_type}; only Unigram (1) is supported"
        )
    vocab_path = folder / "vocab.json"
    try:
        vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PretrainedError(f"vocab.json could not be read: {error}") from error
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise PretrainedError("vocab.json must map tokens to the ids 0..N-1, each once")
    for token in ("<unk>", "</s>"):
        if token not in vocab:
            raise PretrainedError(f"vocab.json has no {token} token")
    scores = {piece: score for piece, score, kind in spm.pieces if kind in (1, 4)}
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    unigram = [(token, scores.get(token, _UNREACHABLE_SCORE)) for token, _ in by_id]
    backend = tokenizers.Tokenizer(models.Unigram(unigram, unk_id=vocab["<unk>"]))
    steps: list[normalizers.Normalizer] = []
    if spm.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spm.precompiled_charsmap))
    if spm.remove_extra_whitespaces:
        steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    if steps:
        backend.normalizer = normalizers.Sequence(steps)
    scheme = "always" if spm.add_dummy_prefix else "never"
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme)
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)
    eos = vocab["</s>"]
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A $B </s>", special_tokens=[("</s>", eos)]
    )
    specials = ["</s>", "<unk>", "<pad>"]
    specials += [t for t in vocab if t.startswith(">>") and t.endswith("<<")]  # language codes
    backend.add_special_tokens([t for t in specials if t in vocab])
    return backend
