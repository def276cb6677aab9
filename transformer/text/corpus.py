"""The bundled corpus: a small text written for this project, for training tokenizers offline.

About two hundred lines of plain English about tokenizers, transformers and attention, then
everyday sentences, then a handful of lines in other scripts (accents, CJK, Cyrillic, Greek,
Arabic, Hebrew, emoji, full-width letters, a ligature) so that normalisers and unknown characters
have something to show. It ships in ``assets/corpus/``; nothing is downloaded.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

CORPUS_PATH = Path(__file__).resolve().parents[2] / "assets" / "corpus" / "transformer_notes.txt"


@cache
def _read_corpus() -> tuple[str, ...]:
    text = CORPUS_PATH.read_text(encoding="utf-8")
    return tuple(line for line in text.splitlines() if line.strip())


def bundled_corpus() -> list[str]:
    """The bundled corpus, one sentence per item (non-empty lines, in file order)."""
    return list(_read_corpus())
