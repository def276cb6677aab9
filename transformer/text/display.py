"""Token pieces as a student reads them, in every script: one label per piece of a sequence.

A vocabulary stores its pieces in its own spelling: byte-level BPE (GPT-2, SmolLM2, cl100k_base)
writes each byte as a printable character (``"Ġ"`` is a space, ``"Ċ"`` a line break, ``"ç¾"``
two bytes of 美), SentencePiece's byte fallback writes a byte as ``"<0xE7>"``, WordPiece marks a
continuation ``"##"``. Shown as stored, a learner reads ``Ġbread`` and ``ç¾``; decoded piece by
piece, a character split across pieces is ``"�"``; and a label ``"3:ب"`` is reordered by the
bidirectional algorithm into ``"ب:3"``.

:func:`piece_labels` (ids) and :func:`label_pieces` (pieces) write every piece of a sequence as
text, reading the sequence's bytes as one stream, so that a piece holding part of a character
names that character:

- whole characters as themselves, with a space, line break, tab... as a mark
  (:data:`VISIBLE_MARKS`: ``"Ġbread"`` → ``"␣bread"``);
- a character whose bytes are split across pieces as that character and which of its bytes this
  piece holds: ``美[1-2/3]`` (bytes 1 and 2 of 3), ``美[3/3]``; a byte whose character is not in
  the sequence (its rest is not generated yet) or that is no UTF-8 at all as ``⟨0xE7⟩``;
- invisible characters by name: ``⟨VS16⟩`` (the variation selector of ☕️), ``⟨ZWJ⟩``,
  ``⟨ZWSP⟩``, control characters by their abbreviation (``⟨ESC⟩``) or ``⟨U+XXXX⟩``;
- a label holding right-to-left text inside Unicode bidi isolates (LRM, then FSI … PDI, and its
  marks in LRI … PDI), so that ``"3:"`` in front of it stays in front: ``"3:ب"`` reads
  ``3:ب``, in an SVG tick label and in an element whose direction is ``auto`` alike;
- a piece that opens with a combining mark (a Hindi vowel sign) after a dotted circle ``◌``.

Each label also has a ``hover``: the piece as stored, its byte codes and what a split or
invisible character is, for a title attribute or a plotly hover.
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .replay import byte_level_to_bytes, bytes_to_unicode, utf8_length
from .tokenization import Tokenizer, unreadable_characters

# How the app writes the characters a piece may hold that a reader cannot see: one way in
# every view (Tokenize's chips and replay, the attention axes, the menus, the logit lens).
VISIBLE_MARKS: dict[str, tuple[str, str]] = {
    " ": ("␣", "a space"),
    "\xa0": ("⍽", "a no-break space"),
    "\n": ("↵", "a line break"),
    "\r": ("␍", "a carriage return"),
    "\t": ("⇥", "a tab"),
}

# Characters that draw nothing (or only change their neighbours), by the short name a reader
# can look up. Variation selectors, tags and C0 controls are named by rule in `invisible_name`.
_INVISIBLE: dict[str, str] = {
    "\u00ad": "SHY",
    "\u034f": "CGJ",
    "\u061c": "ALM",
    "\u115f": "HCF",
    "\u1160": "HJF",
    "\u180e": "MVS",
    "\u200b": "ZWSP",
    "\u200c": "ZWNJ",
    "\u200d": "ZWJ",
    "\u200e": "LRM",
    "\u200f": "RLM",
    "\u2028": "LSEP",
    "\u2029": "PSEP",
    "\u202a": "LRE",
    "\u202b": "RLE",
    "\u202c": "PDF",
    "\u202d": "LRO",
    "\u202e": "RLO",
    "\u2060": "WJ",
    "\u2061": "FA",
    "\u2062": "IT",
    "\u2063": "IS",
    "\u2064": "IP",
    "\u2066": "LRI",
    "\u2067": "RLI",
    "\u2068": "FSI",
    "\u2069": "PDI",
    "\u3000": "IDSP",
    "\u3164": "HF",
    "\ufeff": "BOM",
    "\uffa0": "HWHF",
    "\u007f": "DEL",
}
_C0 = [
    "NUL",
    "SOH",
    "STX",
    "ETX",
    "EOT",
    "ENQ",
    "ACK",
    "BEL",
    "BS",
    "HT",
    "LF",
    "VT",
    "FF",
    "CR",
    "SO",
    "SI",
    "DLE",
    "DC1",
    "DC2",
    "DC3",
    "DC4",
    "NAK",
    "SYN",
    "ETB",
    "CAN",
    "EM",
    "SUB",
    "ESC",
    "FS",
    "GS",
    "RS",
    "US",
]

# Bidi isolates: a label with right-to-left text is first-strong isolated, its marks
# (``[1-2/3]``, ``⟨VS16⟩``) left-to-right isolated, so no digit or bracket moves across.
FSI, LRI, PDI, LRM = "\u2068", "\u2066", "\u2069", "\u200e"
ISOLATES = (LRM, FSI, LRI, PDI)
NAME_OPEN, NAME_CLOSE = "⟨", "⟩"
DOTTED_CIRCLE = "◌"
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def invisible_name(char: str) -> str | None:
    """The name a label writes for ``char`` when it draws nothing: ``"VS16"`` for U+FE0F,
    ``"ZWJ"`` for U+200D, ``"ESC"`` for U+001B, ``"U+E0067"`` for a tag character, ...; ``None``
    for a character that draws (and for those :data:`VISIBLE_MARKS` writes as a mark)."""
    if char in VISIBLE_MARKS or len(char) != 1:
        return None
    if char in _INVISIBLE:
        return _INVISIBLE[char]
    code = ord(char)
    if code < 0x20:
        return _C0[code]
    if 0xFE00 <= code <= 0xFE0F:
        return f"VS{code - 0xFE00 + 1}"
    if 0xE0100 <= code <= 0xE01EF:
        return f"VS{code - 0xE0100 + 17}"
    if 0xE0020 <= code <= 0xE007E:
        return f"TAG {chr(code - 0xE0000)}"
    if code == 0xE007F:
        return "CANCEL TAG"
    category = unicodedata.category(char)
    if category in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") or category == "Zs":
        return f"U+{code:04X}"
    return None


_WHAT_IT_DOES = {
    "\ufe0f": "invisible: asks for the emoji form of the character before it",
    "\ufe0e": "invisible: asks for the text form of the character before it",
    "\u200d": "invisible: joins the emoji around it into one (a family, a profession)",
    "\u200b": "invisible: a place a line may break",
}


def describe_char(char: str) -> str:
    """``char`` for a hover: ``"美 U+7F8E CJK UNIFIED IDEOGRAPH-7F8E"``, an invisible one by its
    label name and what it does: ``"⟨VS16⟩ U+FE0F VARIATION SELECTOR-16 (invisible: asks for
    the emoji form of the character before it)"``."""
    name = unicodedata.name(char, "")
    shown = invisible_name(char)
    mark = VISIBLE_MARKS.get(char)
    head = f"{NAME_OPEN}{shown}{NAME_CLOSE}" if shown else (mark[0] if mark else char)
    does = _WHAT_IT_DOES.get(char, "invisible" if shown else "")
    return (
        f"{head} U+{ord(char):04X}" + (f" {name}" if name else "") + (f" ({does})" if does else "")
    )


def _rtl(char: str) -> bool:
    return unicodedata.bidirectional(char) in ("R", "AL", "AN")


def readable_text(text: str, marks: bool = True) -> str:
    """``text`` as a label writes it: invisible characters named (``⟨ZWJ⟩``), and with
    ``marks`` spaces and line breaks as marks (``"␣"``, ``"↵"``); right-to-left text isolated
    (see the module's docstring)."""
    out: list[str] = []
    names: list[int] = []  # where marks went, to isolate them when the text is RTL
    for char in text:
        if marks and char in VISIBLE_MARKS:
            out.append(VISIBLE_MARKS[char][0])
            continue
        name = invisible_name(char)
        if name is not None and not (not marks and char in "\n\t\r"):
            names.append(len(out))
            out.append(f"{NAME_OPEN}{name}{NAME_CLOSE}")
        else:
            out.append(char)
    return _isolated(out, names)


def _isolated(parts: list[str], marks: list[int]) -> str:
    """``parts`` joined; when any holds right-to-left text, the marks at ``marks`` LTR-isolated
    and the whole FSI-isolated (so an index written before it keeps its side)."""
    text = "".join(parts)
    if not any(_rtl(c) for c in text):
        return text
    for i in marks:
        parts[i] = f"{LRI}{parts[i]}{PDI}"
    # LRM first: a page that sets a label's direction from its first strong character
    # (``dir="auto"``) would otherwise read the Arabic inside and put "3:" on the right.
    return f"{LRM}{FSI}{''.join(parts)}{PDI}"


def plain_label(label: str) -> str:
    """A label without its bidi isolates (for a file a program reads)."""
    for char in ISOLATES:
        label = label.replace(char, "")
    return label


@dataclass(frozen=True)
class CharPart:
    """One character (or stray byte) of a piece.

    ``char`` is the whole character these bytes belong to (``None`` when the sequence does not
    hold its other bytes, or they are no UTF-8); ``first`` and ``last`` which of its ``size``
    bytes this piece holds (1-based: 1, 2 of 3); ``codes`` those bytes."""

    char: str | None
    first: int
    last: int
    size: int
    codes: bytes

    @property
    def partial(self) -> bool:
        """Whether this piece holds only part of the character."""
        return self.char is None or self.last - self.first + 1 < self.size


@dataclass(frozen=True)
class PieceLabel:
    """A piece as the app writes it.

    ``piece`` is the token as the vocabulary stores it; ``text`` the label (see the module's
    docstring); ``hover`` the stored piece, its bytes and what split or invisible characters
    it holds; ``data`` the bytes it stands for (``None`` for a special token, written as
    stored); ``parts`` its characters in order; ``prefix`` a WordPiece continuation mark
    (``"##"``) written before them."""

    piece: str
    text: str
    hover: str
    data: bytes | None
    parts: tuple[CharPart, ...] = ()
    prefix: str = ""


@dataclass(frozen=True)
class PieceScheme:
    """How a vocabulary spells its pieces: ``byte_level`` (GPT-2's ``Ġ``), ``continuation``
    (WordPiece's ``"##"``; ``""`` for none), and ``special`` the pieces written as stored."""

    byte_level: bool
    continuation: str = ""
    special: frozenset[str] = frozenset()


_SCHEMES: weakref.WeakKeyDictionary[Any, PieceScheme] = weakref.WeakKeyDictionary()


def piece_scheme(tokenizer: Any) -> PieceScheme:
    """The :class:`PieceScheme` of a `Tokenizer` (or anything with its ``algorithm``,
    ``spec``, ``special_ids`` and ``id_to_token``), worked out once per tokenizer."""
    try:
        return _SCHEMES[tokenizer]
    except (KeyError, TypeError):
        pass
    algorithm = getattr(tokenizer, "algorithm", "") or ""
    spec = getattr(tokenizer, "spec", None) or {}
    model = spec.get("model") or {} if isinstance(spec, dict) else {}
    prefix = ""
    if algorithm == "wordpiece":
        prefix = model.get("continuing_subword_prefix") or "##"
    special: set[str] = set()
    for token_id in getattr(tokenizer, "special_ids", ()) or ():
        piece = tokenizer.id_to_token(token_id)
        if piece is not None:
            special.add(piece)
    scheme = PieceScheme(algorithm == "byte_bpe", prefix, frozenset(special))
    with contextlib.suppress(TypeError):  # an object without weak references: each time
        _SCHEMES[tokenizer] = scheme
    return scheme


def piece_data(scheme: PieceScheme, piece: str) -> tuple[str, bytes | None]:
    """``(prefix, bytes)`` a piece stands for under ``scheme``: ``"Ġcat"`` → ``("", b" cat")``
    (byte-level), ``"<0xE7>"`` → ``("", b"\\xe7")`` (byte fallback), ``"##ing"`` →
    ``("##", b"ing")``; a special token → ``("", None)``."""
    if piece in scheme.special:
        return "", None
    if scheme.byte_level:
        return "", byte_level_to_bytes(piece)
    match = _BYTE_FALLBACK.fullmatch(piece)
    if match:
        return "", bytes([int(match.group(1), 16)])
    if (
        scheme.continuation
        and piece.startswith(scheme.continuation)
        and piece != scheme.continuation
    ):
        return scheme.continuation, piece[len(scheme.continuation) :].encode("utf-8")
    return "", piece.encode("utf-8", "surrogatepass")


def _characters(stream: bytes) -> list[tuple[int, int, str | None]]:
    """``(start, end, char)`` over ``stream``: each whole UTF-8 character, or with ``None`` a run
    of bytes that is none: the first bytes of a character cut short, a run of continuation
    bytes whose lead is not in the stream, or one byte that is no UTF-8 at all."""
    out: list[tuple[int, int, str | None]] = []
    i, n = 0, len(stream)
    while i < n:
        length = utf8_length(stream[i])
        if length:
            try:
                out.append((i, i + length, stream[i : i + length].decode("utf-8")))
                i += length
                continue
            except UnicodeDecodeError:
                pass
        end = i + 1
        if length > 1 or _continuation(stream[i]):  # a cut character, or its tail
            limit = i + length if length > 1 else n
            while end < min(limit, n) and _continuation(stream[end]):
                end += 1
        out.append((i, end, None))
        i = end
    return out


def _continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def _codes(data: bytes) -> str:
    return " ".join(f"{b:02X}" for b in data)


def _part_text(part: CharPart) -> tuple[str, str]:
    """A part as the label writes it: ``(character, mark)``, the mark (a name ``⟨VS16⟩``, a
    byte code ``⟨0xE7⟩``, which bytes ``[1-2/3]``) being what is isolated in RTL text."""
    if part.char is None:
        codes = " ".join(f"0x{b:02X}" for b in part.codes)
        if part.size > 1:  # the first bytes of a character whose rest is not here
            which = f"{part.first}" if part.first == part.last else f"{part.first}-{part.last}"
            return "", f"{NAME_OPEN}{codes}{NAME_CLOSE}[{which}/{part.size}]"
        if _continuation(part.codes[0]):  # the last bytes of one whose start is not here
            return "", f"{NAME_OPEN}…{codes}{NAME_CLOSE}"
        return "", f"{NAME_OPEN}{codes}{NAME_CLOSE}"
    char = part.char
    name = invisible_name(char)
    if name is not None:
        text, mark = "", f"{NAME_OPEN}{name}{NAME_CLOSE}"
    else:
        text, mark = (VISIBLE_MARKS[char][0] if char in VISIBLE_MARKS else char), ""
    if part.partial:
        which = f"{part.first}" if part.first == part.last else f"{part.first}-{part.last}"
        mark += f"[{which}/{part.size}]"
    return text, mark


def _part_hover(part: CharPart) -> str:
    codes = _codes(part.codes)
    if part.char is None:
        if part.size > 1:
            return (
                f"{codes}: byte {part.first} of a {part.size}-byte character whose other bytes "
                "are not among these pieces"
            )
        if _continuation(part.codes[0]):
            return f"{codes}: the last bytes of a character that starts before these pieces"
        return f"{codes}: a byte that is no UTF-8 character"
    whole = _codes(part.char.encode("utf-8"))
    if part.partial:
        which = (
            f"byte {part.first}" if part.first == part.last else f"bytes {part.first}-{part.last}"
        )
        return (
            f"{describe_char(part.char)} is {part.size} bytes ({whole}): this piece holds "
            f"{which} ({codes}), the others are in the neighbouring piece"
        )
    return describe_char(part.char)


def _label(prefix: str, parts: Sequence[CharPart]) -> str:
    out: list[str] = [prefix] if prefix else []
    marks: list[int] = []
    for part in parts:
        text, mark = _part_text(part)
        if text:
            out.append(text)
        if mark:
            marks.append(len(out))
            out.append(mark)
    first = parts[0].char if parts else None
    if first and unicodedata.category(first) in ("Mn", "Mc", "Me") and not invisible_name(first):
        out.insert(1 if prefix else 0, DOTTED_CIRCLE)  # a vowel sign alone, on its circle
        marks = [m + 1 for m in marks]
    return _isolated(out, marks)


def label_pieces(scheme: PieceScheme, pieces: Sequence[str]) -> list[PieceLabel]:
    """Every piece of one sequence as a :class:`PieceLabel`, its bytes read with its
    neighbours' (a special token ends a run of bytes)."""
    datas = [piece_data(scheme, piece) for piece in pieces]
    parts: list[list[CharPart]] = [[] for _ in pieces]
    run: list[int] = []  # indices of the pieces of the current run of bytes

    def flush() -> None:
        owner: list[int] = []  # the piece of each byte of the run
        stream = bytearray()
        for index in run:
            data = datas[index][1] or b""
            owner.extend([index] * len(data))
            stream.extend(data)
        for start, end, char in _characters(bytes(stream)):
            size = end - start
            position = start
            while position < end:
                index = owner[position]
                stop = position
                while stop < end and owner[stop] == index:
                    stop += 1
                parts[index].append(
                    CharPart(
                        char=char,
                        first=position - start + 1,
                        last=stop - start,
                        size=size if char is not None else utf8_length(stream[start]),
                        codes=bytes(stream[position:stop]),
                    )
                )
                position = stop
        run.clear()

    for index, (_prefix, data) in enumerate(datas):
        if data is None:
            flush()
        else:
            run.append(index)
    flush()

    labels = []
    for piece, (prefix, data), own in zip(pieces, datas, parts, strict=True):
        if data is None:
            labels.append(PieceLabel(piece, piece, f"{piece}: a special token", None))
            continue
        # A byte-level piece as stored is mojibake (``"ç¾"``): its bytes say what it holds.
        text = _label(prefix, own) or piece
        stored = not scheme.byte_level and plain_label(text) != piece
        hover = [f"stored as {piece}"] if stored else []
        hover.append(f"bytes {_codes(data)}" if data else "no bytes")
        hover += [
            f"{VISIBLE_MARKS[char][0]} is {VISIBLE_MARKS[char][1]}"
            for char in dict.fromkeys(p.char for p in own if p.char in VISIBLE_MARKS)
            if char is not None
        ]
        hover += [_part_hover(p) for p in own if p.partial or invisible_name(p.char or "a")]
        labels.append(PieceLabel(piece, text, "; ".join(hover), data, tuple(own), prefix))
    return labels


def piece_labels(tokenizer: Any, ids: Sequence[int]) -> list[PieceLabel]:
    """The :class:`PieceLabel` of every id of one sequence of ``tokenizer``'s (a `Tokenizer`:
    GPT-2's, SmolLM2's and cl100k_base's byte-level BPE, BERT's WordPiece, SentencePiece's byte
    fallback, any other)."""
    pieces = [tokenizer.id_to_token(int(i)) or "?" for i in ids]
    return label_pieces(piece_scheme(tokenizer), pieces)


def labels_of_pieces(tokenizer: Any, pieces: Sequence[str]) -> list[str]:
    """The label texts of one sequence's ``pieces`` as ``tokenizer`` stores them."""
    return [label.text for label in label_pieces(piece_scheme(tokenizer), pieces)]


def split_character_note(labels: Sequence[PieceLabel]) -> str:
    """One sentence on the first split character among ``labels``, naming what is shown
    (``"美[1-2/3] is bytes 1-2 of the 3 bytes of 美 (U+7F8E), split across pieces"``), or on a
    byte whose character is not in the sequence; ``""`` when no piece holds part of one."""
    for label in labels:
        for part in label.parts:
            if not part.partial:
                continue
            shown = "".join(_part_text(part))
            if part.char is None:
                return (
                    f"{shown} is a byte of a character whose other bytes are not among these pieces"
                )
            which = (
                f"byte {part.first}"
                if part.first == part.last
                else f"bytes {part.first}-{part.last}"
            )
            return (
                f"{shown} is {which} of the {part.size} bytes of {part.char} "
                f"(U+{ord(part.char):04X}), split across pieces"
            )
    return ""


def next_piece_label(scheme: PieceScheme, context: Sequence[str], piece: str) -> PieceLabel:
    """``piece`` labelled as it reads after the pieces ``context`` (a candidate for the next
    token): one that ends a character the context began names it (``美[3/3]``). A character has
    at most 4 bytes, so the last 3 pieces of the context are enough."""
    return label_pieces(scheme, [*context[-3:], piece])[-1]


def pending_character(labels: Sequence[PieceLabel]) -> str:
    """The first bytes of a character that the sequence ends before finishing (a generation
    whose next piece is still to come), as a label writes them (``"⟨0xE7 0xBE⟩[1-2/3]"``), or
    ``""`` when its last character is whole."""
    if not labels or labels[-1].data is None:
        return ""
    tail: list[CharPart] = []
    for label in reversed(labels):
        for part in reversed(label.parts):
            if part.char is not None or part.size < 2:
                break
            if tail and part.last != tail[-1].first - 1:
                break
            tail.append(part)
            if part.first == 1:
                break
        else:
            continue
        break
    if not tail or tail[-1].first != 1:
        return ""
    codes = b"".join(part.codes for part in reversed(tail))
    which = "1" if len(codes) == 1 else f"1-{len(codes)}"
    shown = " ".join(f"0x{b:02X}" for b in codes)
    return f"{NAME_OPEN}{shown}{NAME_CLOSE}[{which}/{tail[0].size}]"


# The mark of a [PAD] query row: its row attends like any other, but the loss ignores its output.
PAD_ROW_MARK = "⊘"


# The most characters of a piece a label shows. A few vocabulary entries are long runs (SmolLM2
# has a newline and 80 spaces, 64 dashes, 80 "#"): one such label in a sentence of code widened
# the axis margin until the heatmaps beside it were slivers. 20 keeps every English word whole
# (BERT's longest entry is 18 characters) and cuts 0.2 % of SmolLM2's vocabulary.
MAX_LABEL_PIECE = 20


def short_piece(piece: str) -> str:
    """``piece`` as a label shows it: cut to :data:`MAX_LABEL_PIECE` characters, the cut marked
    ``…``."""
    if len(piece) <= MAX_LABEL_PIECE:
        return piece
    return piece[: MAX_LABEL_PIECE - 1] + "…"


def token_labels(pieces: Sequence[str]) -> list[str]:
    """Unique axis labels ``"index:piece"`` for a sequence of token pieces (long pieces cut,
    see :func:`short_piece`).

    Plotly merges repeated category labels (two ``"the"`` would become one row), so every
    label carries its position: ``["the", "cat", "the"]`` → ``["0:the", "1:cat", "2:the"]``.
    """
    return [f"{i}:{short_piece(piece)}" for i, piece in enumerate(pieces)]


def labels_legend(tokenizer: Any, labels: Sequence[PieceLabel]) -> str:
    """What the marks in these labels (of one sequence, :func:`label_pieces`) stand for, and
    how the vocabulary stores them: ``"␣ is a space (stored as Ġ); 美[1-2/3] is bytes 1-2 of
    the 3 bytes of 美 (U+7F8E), split across pieces"``; ``""`` for labels without marks."""
    parts = []
    if getattr(tokenizer, "algorithm", None) == "byte_bpe":
        table = bytes_to_unicode()
        text = "".join(label.text for label in labels)
        for char, (mark, name) in VISIBLE_MARKS.items():
            if mark in text:
                stored = "".join(table[b] for b in char.encode("utf-8"))
                parts.append(f"{mark} is {name} (stored as {stored})")
    split = split_character_note(labels)
    if split:
        parts.append(split)
    invisible = next(
        (p.char for label in labels for p in label.parts if p.char and invisible_name(p.char)),
        None,
    )
    if invisible is not None:
        parts.append(f"{describe_char(invisible).replace(' U+', ' is U+', 1)}")
    return "; ".join(parts)


def code_span(text: str) -> str:
    """``text`` as one Markdown code span that no backtick in it can close: the fence is one
    backtick longer than the longest run inside, with a space inside each end where the text
    starts or ends with a backtick or a space (CommonMark strips one from each end)."""
    text = text.replace("\n", " ")
    if not text:
        return "` `"
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def unreadable_note(tokenizer: Tokenizer, text: str, subject: str = "This model") -> str:
    """One sentence naming what ``tokenizer`` cannot read in ``text`` (each character it maps
    to its unknown token; a whole word where each character alone is known), or ``""``.
    The characters come from the library's one
    :func:`~transformer.text.tokenization.unreadable_characters`."""
    found = unreadable_characters(tokenizer, text)
    unk = tokenizer.unk_id
    if not found or unk is None:  # without an unknown token every character is readable
        return ""
    unknown = str(tokenizer.id_to_token(unk))
    listed = ", ".join(code_span(item) for item in found)
    reads = "it reads" if len(found) == 1 else "each reads"
    return f"⚠️ {subject} cannot read {listed}: {reads} as {code_span(unknown)}."


__all__ = [
    "FSI",
    "ISOLATES",
    "LRI",
    "LRM",
    "MAX_LABEL_PIECE",
    "PAD_ROW_MARK",
    "PDI",
    "VISIBLE_MARKS",
    "CharPart",
    "PieceLabel",
    "PieceScheme",
    "code_span",
    "describe_char",
    "invisible_name",
    "label_pieces",
    "labels_legend",
    "labels_of_pieces",
    "next_piece_label",
    "pending_character",
    "piece_data",
    "piece_labels",
    "piece_scheme",
    "plain_label",
    "readable_text",
    "short_piece",
    "split_character_note",
    "token_labels",
    "unreadable_note",
    "utf8_length",
]
