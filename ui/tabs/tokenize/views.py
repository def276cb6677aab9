"""The token view: highlighted pieces, the token table and the stats line (with notes on
byte symbols and unreadable characters)."""

from __future__ import annotations

from typing import Any

from transformer.lab.analysis import visible_text
from transformer.text.display import (
    NAME_OPEN,
    PieceLabel,
    PieceScheme,
    invisible_name,
    label_pieces,
    readable_text,
    split_character_note,
)
from transformer.text.encoded import EncodedText, encode_text
from transformer.text.replay import (
    readable_piece,
)
from transformer.text.tokenization import Tokenizer

from ...serving import limits
from ...serving.errors import code_span

METASPACE = "▁"  # SentencePiece's word-start marker (Metaspace pre-tokenizer)
# Tokens drawn as chips (the rest are counted in a last chip): gradio sends each chip as an
# object of about 55 bytes, and 20,000 emoji are 52,000 cl100k_base tokens, 2.7 MB of chips.
# The lecture-length texts (20,000 characters of prose, about 5,000 tokens) are drawn whole.
MAX_CHIPS = 10_000
# Rows of the token table sent (the rest counted in a last row).
MAX_TABLE_ROWS = limits.MAX_TABLE_ROWS


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 token"``, ``"2 tokens"``, ``"1,000 characters"``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def visible(text: str) -> str:
    """Text for a code span: a space shown as ␣, line breaks and tabs as ↵ and ⇥ (the marks
    every view writes, :func:`transformer.lab.analysis.visible_text`)."""
    return visible_text(text)


def _named(label: PieceLabel) -> bool:
    """Whether the label names an invisible character (``⟨VS16⟩``), which the text would hide."""
    return NAME_OPEN in label.text


def unknown_message(encoded: EncodedText, text: str) -> str:
    """What to tell the user when part of the text became the unknown token (else "")."""
    unk = encoded.unk_id
    spans = [r for r in encoded.records if unk is not None and r.id == unk and r.start < r.end]
    if unk is None or not spans:
        return ""
    chars = [item for item in encoded.unreadable if len(item) == 1]
    unknown = code_span(str(encoded.unk_piece))
    if chars:
        listed = ", ".join(f"{code_span(c)} (U+{ord(c):04X})" for c in chars)
        return (
            f"\n\n⚠️ This tokenizer cannot read {plural(len(chars), 'character')}: {listed}; "
            f"{'it becomes' if len(spans) == 1 else 'they make'} "
            f"{plural(len(spans), 'unknown token')} ({unknown})."
        )
    words = ", ".join(code_span(text[r.start : r.end]) for r in spans[:5])
    return (
        f"\n\n⚠️ {plural(len(spans), 'piece')} became {unknown}: {words} "
        "cannot be built from this vocabulary's pieces, although each character alone can."
    )


def highlighted(
    tokenizer: Tokenizer | EncodedText, text: str
) -> tuple[list[tuple[str, str | None]], list[list[Any]], str]:
    """HighlightedText segments, table rows and a stats line for one text.

    Byte-level tokenizers (GPT-2, cl100k_base, our byte-level BPE) show each piece as the text
    its bytes stand for (a byte that is part of a character split across pieces as ``<0xE2>``),
    and the stats line explains the byte symbols found (``Ġ`` is a space). Table rows are
    ``[index, piece, id, start, end, special, word, reads as, bytes explained]``. The first
    ``MAX_CHIPS`` tokens are drawn, and a last segment counts the rest; past
    ``MAX_TABLE_ROWS`` tokens, the table lists one fewer and a last row counts the rest
    (a 20,000-character text has up to 20,000 tokens). ``tokenizer`` may be
    one of the app's, or an uploaded one's `EncodedText` of ``text`` (computed in a worker).
    """
    encoded = (
        tokenizer if isinstance(tokenizer, EncodedText) else encode_text(tokenizer, text, False)
    )
    records = encoded.records
    byte_level = encoded.algorithm == "byte_bpe"
    # Every piece as every view writes it: a split character named in each of its pieces
    # (美[1-2/3]), invisible characters named, right-to-left text isolated.
    scheme = PieceScheme(
        byte_level=byte_level,
        continuation="##" if encoded.algorithm == "wordpiece" else "",
        special=frozenset(r.piece for r in records if r.special),
    )
    # Only the pieces drawn (as chips or table rows) are labelled and explained: a piece's
    # label reads at most three pieces on (a character has at most four bytes), and 20,000
    # emoji are 52,000 cl100k_base pieces, whose labels alone took seconds.
    n_rows = len(records) if len(records) <= MAX_TABLE_ROWS else MAX_TABLE_ROWS - 1
    drawn = records[: max(MAX_CHIPS + 1, n_rows)]
    labels = label_pieces(scheme, [r.piece for r in records[: len(drawn) + 3]])
    segments: list[tuple[str, str | None]] = []
    rows = []
    notes: list[str] = []
    cursor = 0
    for index, record in enumerate(drawn):
        unknown = record.id == encoded.unk_id
        label = "unknown" if unknown else ("A" if index % 2 == 0 else "B")
        # SentencePiece's word-start marker as a piece of its own: the space the tokenizer
        # adds, which the library places over the next character (offsets overlap).
        marker = not byte_level and record.piece == METASPACE
        if unknown and record.start < record.end:
            reads, note = text[record.start : record.end], "unknown: this tokenizer cannot read it"
        elif record.special:
            reads, note = record.piece, "special token"
        elif marker:
            reads, note = "␣", "the word-start marker the tokenizer adds (no character of the text)"
        elif byte_level:
            readable = readable_piece(record.piece)
            shown = labels[index]
            whole = all(not part.partial for part in shown.parts)
            # Whole characters read as the text (a space as a space); a split one as its label.
            reads = readable.text if whole and not _named(shown) else shown.text
            if not reads.strip():  # a piece of spaces or line breaks: make them visible
                reads = visible(reads)
            note = shown.hover
            notes.extend(n for n in readable.notes if n not in notes and "<0x" not in n)
        else:
            reads, note = text[record.start : record.end], labels[index].hover
        if index < n_rows:
            rows.append(
                [
                    index,
                    labels[index].text,
                    record.id,
                    record.start,
                    record.end,
                    record.special,
                    record.word,
                    reads,
                    note,
                ]
            )
        if index >= MAX_CHIPS:
            continue
        if record.special and record.start == record.end:
            segments.append((record.piece, "special"))
            continue
        if marker:  # drawn as its own chip; the next piece draws the character
            segments.append((METASPACE, label))
            continue
        if byte_level:  # every byte belongs to a piece: draw the pieces themselves
            segments.append((reads, "special" if record.special else label))
            continue
        if record.start < cursor:  # overlapping pieces (split characters)
            continue
        if record.start > cursor:
            segments.append((text[cursor : record.start], None))
        span = text[record.start : record.end]
        if span and all(invisible_name(c) for c in span):  # else an empty chip: name it
            span = readable_text(span)
        segments.append((span, label))
        cursor = record.end
    n_tokens = len(records)
    if n_tokens > MAX_CHIPS:
        segments.append(
            (f" … {plural(n_tokens - MAX_CHIPS, 'more token')}, not drawn (the first "
             f"{MAX_CHIPS:,} are; the line above counts them all)", None)
        )  # fmt: skip
    elif not byte_level and cursor < len(text):
        segments.append((text[cursor:], None))
    ratio = f"{len(text) / n_tokens:.2f}" if n_tokens else "–"
    stats = (
        f"**{encoded.algorithm}**, vocabulary {encoded.vocab_size:,}: "
        f"{plural(len(text), 'character')} → **{plural(n_tokens, 'token')}**, "
        f"{ratio} characters per token"
    )
    split = split_character_note(labels)
    if split:
        notes.append(split)
    if notes:
        listed = notes[:6] + ([f"… {len(notes) - 6} more in the table"] if len(notes) > 6 else [])
        stats += "\n\nBytes explained: " + "; ".join(listed) + "."
    stats += unknown_message(encoded, text)
    if n_rows < len(records):  # the rest counted in a last row
        more = f"{len(records) - n_rows:,} more tokens (the first {n_rows:,} are listed)"
        rows.append(["…", more, *[""] * 7])
    return segments, rows, stats
