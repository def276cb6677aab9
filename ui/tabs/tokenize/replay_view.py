"""The replay as markdown: how the tokenizer reached each word's pieces, step by step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from transformer.text.display import PieceScheme, label_pieces
from transformer.text.replay import (
    BPEReplay,
    UnigramReplay,
    WordPieceChoice,
    WordPieceReplay,
    WordReplay,
    readable_piece,
)

from ...serving.errors import code_span, markdown_text
from .views import plural, visible

REPLAY_WORDS = 60  # words drawn in the replay (the rest are counted)
# Symbols, pieces or choices drawn on one word's line (the rest are counted): a text without
# spaces is one word, and 20,000 emoji are 80,000 byte symbols, which drew 1.3 MB of replay.
REPLAY_SYMBOLS = 120
REPLAY_WORD_CHARS = 80  # characters of the word itself at the head of its line

_Item = TypeVar("_Item")


def _listed(items: Sequence[_Item], shown: Callable[[_Item], str], joiner: str = " ") -> str:
    """The first ``REPLAY_SYMBOLS`` items, each as ``shown`` writes it; the rest counted."""
    left = len(items) - REPLAY_SYMBOLS
    text = joiner.join(shown(item) for item in items[:REPLAY_SYMBOLS])
    return text + (f" … {left:,} more" if left > 0 else "")


def _symbol(symbol: str, byte_level: bool) -> str:
    """A symbol for the replay: byte-level ones as the text they stand for (␣ a space)."""
    return visible(readable_piece(symbol).text) if byte_level else symbol


_BYTES = PieceScheme(byte_level=True)


def _symbols(symbols: Sequence[str], byte_level: bool) -> list[str]:
    """The first symbols of a word (those drawn) as one sequence: byte-level ones as every view
    writes a piece, a byte of a split character named with its character (``美[1/3]``)."""
    drawn = list(symbols[: REPLAY_SYMBOLS + 1])
    if not byte_level:
        return drawn
    return [label.text for label in label_pieces(_BYTES, drawn)]


def _bpe_line(head: str, detail: BPEReplay, step: int, byte_level: bool = False) -> str:
    if detail.whole_word:
        return head + " (whole word in the vocabulary: no merge)"
    shown = detail.merges[:step]
    symbols = shown[-1].symbols if shown else detail.symbols
    written = _symbols(symbols, byte_level)
    state = _listed([*written, *symbols[len(written) :]], code_span)
    last = shown[-1] if shown else None
    pair = _symbols(last.pair, byte_level) if last else []
    note = (
        f"merge {len(shown)}/{len(detail.merges)}: {code_span(pair[0])} + "
        f"{code_span(pair[1])} → {code_span(_symbols([last.result], byte_level)[0])} "
        f"(rank {last.rank:,})"
        if last
        else f"start: {plural(len(detail.symbols), 'symbol')}, "
        f"{plural(len(detail.merges), 'merge')} to apply"
    )
    return f"{head}<br>&nbsp;&nbsp;{state} — {note}"


def _wordpiece_line(head: str, detail: WordPieceReplay, step: int) -> str:
    shown = detail.choices[:step] if step else detail.choices[:0]

    def written(choice: WordPieceChoice) -> str:
        tried = ", ".join(f"~~{markdown_text(r)}~~" for r in choice.rejected[-3:])
        return f"at {choice.start}: {code_span(choice.piece or '[UNK]')}" + (
            f" (tried {tried})" if tried else ""
        )

    note = _listed(shown, written, "; ") or plural(
        len(detail.choices), "greedy longest-match choice"
    )
    if detail.unknown_reason and len(shown) == len(detail.choices):
        note += f" — unknown: {detail.unknown_reason}"
    return f"{head}<br>&nbsp;&nbsp;{note}"


def _unigram_line(head: str, detail: UnigramReplay, step: int) -> str:
    shown = detail.pieces[:step] if step else detail.pieces[:0]
    note = _listed(shown, lambda p: f"{code_span(p.piece)} ({p.score:.2f})", " + ") or (
        f"best segmentation: {plural(len(detail.pieces), 'piece')}"
    )
    if len(shown) == len(detail.pieces):
        note += f" = total log-probability {detail.total_score:.2f}"
    return f"{head}<br>&nbsp;&nbsp;{note}"


def word_steps(word: WordReplay) -> int:
    """How many steps a word's replay has (merges, greedy choices or pieces)."""
    detail = word.steps
    if isinstance(detail, BPEReplay):
        return len(detail.merges)
    if isinstance(detail, WordPieceReplay):
        return len(detail.choices)
    if isinstance(detail, UnigramReplay):
        return len(detail.pieces)
    return 0


def replay_steps(words: list[WordReplay]) -> int:
    """The most steps any drawn word has: the step slider's end."""
    return max((word_steps(w) for w in words[:REPLAY_WORDS]), default=0)


def replay_markdown(words: list[WordReplay], step: int, byte_level: bool = False) -> str:
    """Every word's replay, drawn up to ``step`` (the stepper), as markdown. Byte-level words
    show their symbols as text (␣ for a space; the tokenizer stores it as Ġ)."""
    if not words:
        return "_Nothing to replay: the text is empty._"
    lines = []
    if byte_level:
        lines.append(
            "_Byte-level BPE: the text becomes bytes first (a space, ␣ here, is stored as Ġ); "
            "then the adjacent pair with the lowest rank (learned earliest) merges, again and "
            "again._"
        )
    for word in words[:REPLAY_WORDS]:
        text = _symbol(word.word, byte_level)
        if len(text) > REPLAY_WORD_CHARS:
            text = text[: REPLAY_WORD_CHARS - 1] + "…"
        pieces = _symbols(word.pieces, byte_level)
        head = f"**{code_span(text)}** → " + _listed(
            [*pieces, *word.pieces[len(pieces) :]], code_span
        )
        detail = word.steps
        if word.added_token or detail is None:
            lines.append(head + " (added token, matched whole)")
        elif isinstance(detail, BPEReplay):
            lines.append(_bpe_line(head, detail, step, byte_level))
        elif isinstance(detail, WordPieceReplay):
            lines.append(_wordpiece_line(head, detail, step))
        elif isinstance(detail, UnigramReplay):
            lines.append(_unigram_line(head, detail, step))
    if len(words) > REPLAY_WORDS:
        lines.append(f"_… and {plural(len(words) - REPLAY_WORDS, 'more word')}_")
    return "\n\n".join(lines)
