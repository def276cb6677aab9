"""Replay: the steps by which a trained tokenizer turns each word of a text into its pieces.

`replay(tokenizer, text)` returns one `WordReplay` per pre-tokenised word (and per added token
such as ``[CLS]`` typed in the text). The steps are computed here, in Python, from the
tokenizer's own model: its merges (BPE), its vocabulary (WordPiece) or its scores (Unigram).
Only the text pipeline before the model is the library's: its added-token matching rules, its
normaliser and its pre-tokeniser, so the words replayed are exactly the words its model sees.

- BPE: the word's characters (bytes, for byte-level BPE such as GPT-2 and cl100k_base) and each
  merge in the order the library applies them: the lowest-ranked adjacent pair first, leftmost
  first among equal ranks. O(n log n) in the word's length (a heap, a linked list, a Fenwick
  tree for positions; a merge's ``symbols`` are rebuilt when read), so a tokenizer without a
  pre-tokeniser, which sees a whole text as one word, replays 20,000 characters in well under a
  second.
- WordPiece: greedy longest-match-first, left to right; a word with no match at some point, or
  longer than ``max_input_chars_per_word``, becomes the unknown token as a whole.
- Unigram: the Viterbi best segmentation under the pieces' log-probability scores, with an
  unknown character scored ``min(score) - 10`` as in `tokenizers` (consecutive unknowns fused).

The pieces and ids are the replay's own; every replay is then checked against the library's
encoding of the text (they must be equal), and only the words' character spans come from the
library's offsets. A tokenizer that cannot be replayed (another model type, BPE dropout), a
configuration where the replay would disagree, or any unforeseen failure raises `TokenizerError`
with the reason, never showing steps the library did not take: a caller can always show the
tokens without the steps.

`readable_piece` explains a byte-level piece (``"Ġcat"`` is a space and "cat"; ``"âĢ"`` is two
bytes of a three-byte character, shown ``<0xE2><0x80>``).
"""

from __future__ import annotations

import heapq
import json
import re
import weakref
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

import tokenizers

from .tokenization import Tokenizer, TokenizerError, check_text

MAX_REPLAY_CHARS = 20_000
"""Longest text `replay` accepts, in characters (a replay records every step of every word)."""
UNIGRAM_UNK_PENALTY = 10.0
"""`tokenizers` scores an unknown character ``min(vocab scores) - UNIGRAM_UNK_PENALTY``."""


class MergeHistory:
    """The merges of one word as linked-list operations, so that the symbols after any step can
    be rebuilt in O(word length) without storing a copy per step (which is quadratic)."""

    __slots__ = ("initial", "steps")

    def __init__(self, initial: tuple[str, ...]) -> None:
        self.initial = initial
        self.steps: list[tuple[int, int, str]] = []  # (left node, right node, merged symbol)

    def symbols_after(self, count: int) -> tuple[str, ...]:
        """The word's symbols after its first ``count`` merges."""
        symbols = list(self.initial)
        alive = [True] * len(symbols)
        for left, right, result in self.steps[:count]:
            symbols[left] = result
            alive[right] = False
        return tuple(s for s, a in zip(symbols, alive, strict=True) if a)


@dataclass(frozen=True)
class BPEMerge:
    """One merge applied to a word: ``pair`` (left, right) became ``result``.

    ``rank`` is the merge's position in the tokenizer's merge list (lower merges first; for a
    tiktoken-format tokenizer such as cl100k_base it is ``result_id - 256``), ``result_id`` the
    id of the merged token, ``position`` the index of the left symbol among the symbols before
    the merge, and ``symbols`` (computed on access) the word's symbols after it.
    """

    pair: tuple[str, str]
    rank: int
    result: str
    position: int
    result_id: int
    _history: MergeHistory = field(repr=False, compare=False)
    _index: int = field(repr=False, compare=False)

    @property
    def symbols(self) -> tuple[str, ...]:
        """The word's symbols after this merge (rebuilt on each access, O(word length))."""
        return self._history.symbols_after(self._index + 1)


@dataclass(frozen=True)
class BPEReplay:
    """BPE on one word: the initial ``symbols`` (characters or bytes, unknown ones already
    replaced by the unknown token or byte-fallback pieces) and the ``merges`` applied in order.
    ``whole_word`` is True when the model looks whole words up first (``ignore_merges``, as
    tiktoken and Llama-3 do) and found this one, so no merge ran."""

    symbols: tuple[str, ...]
    merges: tuple[BPEMerge, ...]
    whole_word: bool = False

    @property
    def final_symbols(self) -> tuple[str, ...]:
        """The word's symbols after its last merge: the pieces the model outputs."""
        return self.merges[-1].symbols if self.merges else self.symbols


@dataclass(frozen=True)
class WordPieceChoice:
    """One greedy choice: at character ``start`` of the word, the longest vocabulary entry.

    ``rejected`` lists the longer candidates tried first that were not in the vocabulary
    (continuations carry the ``##`` prefix); ``piece`` is None when nothing matched, which makes
    the whole word unknown.
    """

    start: int
    piece: str | None
    rejected: tuple[str, ...]


@dataclass(frozen=True)
class WordPieceReplay:
    """WordPiece on one word: the greedy ``choices`` and, if the word became the unknown token,
    why (``unknown_reason``)."""

    choices: tuple[WordPieceChoice, ...]
    unknown_reason: str | None = None


@dataclass(frozen=True)
class UnigramPiece:
    """One piece of the best Unigram segmentation: ``word[start:end]`` with its ``score``
    (log-probability; for an unknown run, the summed unknown penalty)."""

    piece: str
    score: float
    start: int
    end: int
    unknown: bool


@dataclass(frozen=True)
class UnigramReplay:
    """Unigram on one word: the best segmentation ``pieces``, their ``total_score``, and
    ``best_scores[i]``, the best score of any segmentation of ``word[:i]`` (the Viterbi table).
    ``unk_score`` is what one unknown character costs."""

    pieces: tuple[UnigramPiece, ...]
    total_score: float
    best_scores: tuple[float, ...]
    unk_score: float


StepDetail = BPEReplay | WordPieceReplay | UnigramReplay


@dataclass(frozen=True)
class WordReplay:
    """One word as the model saw it and the pieces it became.

    ``word`` is normalised and pre-tokenised (e.g. ``"▁hello"``, ``"Ġworld"``, lower-cased for
    BERT). ``start``/``end`` are character offsets into the original text. ``added_token`` is
    True for an added token (``[CLS]``, ``<|endoftext|>``) matched whole before the model ran;
    it has no ``steps``.
    """

    word: str
    start: int
    end: int
    pieces: tuple[str, ...]
    ids: tuple[int, ...]
    added_token: bool
    steps: StepDetail | None


@cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character table of the ByteLevel pre-tokeniser (``Ġ`` = space)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@cache
def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def byte_level_to_bytes(piece: str) -> bytes:
    """The bytes a byte-level piece stands for (``"Ġcat"`` → ``b" cat"``); unknown chars kept."""
    inverse = _unicode_to_bytes()
    out = bytearray()
    for char in piece:
        if char in inverse:
            out.append(inverse[char])
        else:
            out.extend(char.encode("utf-8"))
    return bytes(out)


_BYTE_NAMES = {0x20: "a space", 0x0A: "a newline", 0x09: "a tab", 0x0D: "a carriage return"}


@dataclass(frozen=True)
class ReadablePiece:
    """A byte-level piece as a person reads it.

    ``piece`` is the token as stored (``"Ġcat"``), ``data`` the bytes it stands for
    (``b" cat"``), ``text`` those bytes as text, with each byte that is not part of a whole
    UTF-8 character here written ``<0xE2>``, and ``notes`` what each marker means
    (``"Ġ is a space"``, ``"<0xE2><0x80> are 2 of the 3 bytes of one character; the rest is in
    the next piece"``).
    """

    piece: str
    data: bytes
    text: str
    notes: tuple[str, ...]


def utf8_length(lead: int) -> int:
    """Bytes in a UTF-8 sequence that starts with ``lead`` (0 for a continuation or an invalid
    byte)."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def readable_piece(piece: str) -> ReadablePiece:
    """Explain a byte-level piece (GPT-2, cl100k_base, our ``byte_bpe``): ``"Ġcat"`` → text
    ``" cat"`` with the note "Ġ is a space"; ``"âĢ"`` (the first 2 bytes of ``’``) → text
    ``"<0xE2><0x80>"`` with a note on the partial character. Use it only for byte-level
    tokenizers (``Tokenizer.algorithm == "byte_bpe"``); other pieces are plain text already."""
    table = bytes_to_unicode()
    data = byte_level_to_bytes(piece)
    notes: list[str] = []
    for byte, name in _BYTE_NAMES.items():
        if byte in data:
            notes.append(f"{table[byte]} is {name}")
    parts: list[str] = []
    partial: list[int] = []
    i = 0
    while i < len(data):
        length = utf8_length(data[i])
        chunk = data[i : i + length] if length else b""
        try:
            char = chunk.decode("utf-8") if length and len(chunk) == length else None
        except UnicodeDecodeError:
            char = None
        if char is None:
            parts.append(f"<0x{data[i]:02X}>")
            partial.append(data[i])
            i += 1
            continue
        if length == 1 and (data[i] < 0x20 or data[i] == 0x7F) and data[i] not in _BYTE_NAMES:
            notes.append(f"{table[data[i]]} is the control byte <0x{data[i]:02X}>")
        parts.append(char)
        i += length
    if partial:
        notes.append(_partial_note(partial))
    return ReadablePiece(piece=piece, data=data, text="".join(parts), notes=tuple(notes))


def _partial_note(partial: list[int]) -> str:
    shown = "".join(f"<0x{b:02X}>" for b in partial)
    lead = partial[0]
    if utf8_length(lead) > 1:
        need = utf8_length(lead)
        return (
            f"{shown}: the first {len(partial)} of the {need} bytes of one character; the rest "
            "is in the next piece"
        )
    if 0x80 <= lead <= 0xBF:
        return (
            f"{shown}: the last bytes of a character that starts in the previous piece "
            "(UTF-8 continuation bytes)"
        )
    return f"{shown}: bytes that are not a whole UTF-8 character"


# -- the models -------------------------------------------------------------------------------


class _BPEModel:
    """The parts of a `tokenizers` BPE model that decide a word's pieces."""

    def __init__(self, model: dict[str, Any]) -> None:
        dropout = model.get("dropout")
        if dropout:
            raise TokenizerError(
                f"this BPE model uses dropout={dropout}: its merges are random, so there is no "
                "single sequence of steps to replay; set dropout to null to replay it"
            )
        self.vocab: dict[str, int] = model["vocab"]
        self.unk: str | None = model.get("unk_token")
        self.prefix: str = model.get("continuing_subword_prefix") or ""
        self.suffix: str = model.get("end_of_word_suffix") or ""
        self.fuse_unk: bool = bool(model.get("fuse_unk"))
        self.byte_fallback: bool = bool(model.get("byte_fallback"))
        self.ignore_merges: bool = bool(model.get("ignore_merges"))
        self.merges: dict[tuple[str, str], tuple[int, str]] = {}
        for rank, merge in enumerate(model.get("merges") or []):
            left, right = _merge_pair(merge)
            if self.prefix and right.startswith(self.prefix):
                result = left + right[len(self.prefix) :]
            else:
                result = left + right
            if left in self.vocab and right in self.vocab and result in self.vocab:
                self.merges[(left, right)] = (rank, result)  # a later duplicate wins, as in Rust

    def initial_symbols(self, word: str) -> list[str]:
        """Characters of ``word`` as vocabulary symbols: prefix/suffix added, unknowns replaced."""
        symbols: list[str] = []
        pending_unk = False  # an unknown token not yet emitted (it absorbs the next unknown
        # characters when fuse_unk is set), mirroring `tokenizers`' BPE::merge_word
        for i, char in enumerate(word):
            symbol = char
            if i > 0 and self.prefix:
                symbol = self.prefix + symbol
            if i == len(word) - 1 and self.suffix:
                symbol = symbol + self.suffix
            if symbol in self.vocab:
                if pending_unk:
                    symbols.append(self.unk)  # type: ignore[arg-type]
                    pending_unk = False
                symbols.append(symbol)
                continue
            if self.byte_fallback:
                fallback = [f"<0x{b:02X}>" for b in symbol.encode("utf-8")]
                if all(f in self.vocab for f in fallback):
                    symbols.extend(fallback)
                    continue
            if self.unk is not None:
                if pending_unk and not self.fuse_unk:
                    symbols.append(self.unk)
                pending_unk = True
            # without an unknown token the library drops the character silently
        if pending_unk:
            symbols.append(self.unk)  # type: ignore[arg-type]
        return symbols

    def replay(self, word: str) -> tuple[list[str], BPEReplay]:
        if self.ignore_merges and word in self.vocab:
            return [word], BPEReplay(symbols=(word,), merges=(), whole_word=True)
        symbols = self.initial_symbols(word)
        initial = tuple(symbols)
        history = MergeHistory(initial)
        # A doubly linked list over the symbols, and a heap of candidate merges ordered by
        # (rank, position): exactly the order of `tokenizers`' Word::merge_all. A Fenwick tree
        # over the live symbols gives each merge's position in O(log n): the whole word costs
        # O(n log n), so a text without a pre-tokeniser (one long word) replays in linear-ish time.
        n = len(symbols)
        nxt = [i + 1 if i + 1 < n else -1 for i in range(n)]
        prv = [i - 1 for i in range(n)]
        alive = [True] * n
        live = _Fenwick(n)
        heap: list[tuple[int, int, str]] = []
        merges = self.merges
        for i in range(n - 1):
            found = merges.get((symbols[i], symbols[i + 1]))
            if found:
                heap.append((found[0], i, found[1]))
        heapq.heapify(heap)
        steps: list[BPEMerge] = []
        while heap:
            _, pos, result = heapq.heappop(heap)
            if not alive[pos] or nxt[pos] == -1:
                continue
            right = nxt[pos]
            pair = (symbols[pos], symbols[right])
            current = merges.get(pair)
            if current is None or current[1] != result:
                continue  # stale: this pair changed since it was queued
            index = live.prefix(pos)  # live symbols before ``pos``
            symbols[pos] = result
            alive[right] = False
            live.remove(right)
            nxt[pos] = nxt[right]
            if nxt[right] != -1:
                prv[nxt[right]] = pos
            history.steps.append((pos, right, result))
            steps.append(
                BPEMerge(
                    pair=pair,
                    rank=current[0],
                    result=result,
                    position=index,
                    result_id=self.vocab[result],
                    _history=history,
                    _index=len(steps),
                )
            )
            if prv[pos] >= 0:
                found = merges.get((symbols[prv[pos]], result))
                if found:
                    heapq.heappush(heap, (found[0], prv[pos], found[1]))
            if nxt[pos] != -1:
                found = merges.get((result, symbols[nxt[pos]]))
                if found:
                    heapq.heappush(heap, (found[0], pos, found[1]))
        pieces = [s for s, a in zip(symbols, alive, strict=True) if a]
        return pieces, BPEReplay(symbols=initial, merges=tuple(steps))


class _Fenwick:
    """Counts of live symbols, with O(log n) removal and prefix counts."""

    __slots__ = ("tree",)

    def __init__(self, n: int) -> None:
        tree = [0] * (n + 1)
        for i in range(1, n + 1):  # all ones, built in O(n)
            tree[i] += 1
            parent = i + (i & -i)
            if parent <= n:
                tree[parent] += tree[i]
        self.tree = tree

    def remove(self, index: int) -> None:
        i = index + 1
        tree = self.tree
        while i < len(tree):
            tree[i] -= 1
            i += i & -i

    def prefix(self, index: int) -> int:
        """How many live symbols come before ``index``."""
        total = 0
        i = index
        tree = self.tree
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total


class _WordPieceModel:
    def __init__(self, model: dict[str, Any]) -> None:
        self.vocab: dict[str, int] = model["vocab"]
        self.unk: str = model.get("unk_token", "[UNK]")
        self.prefix: str = model.get("continuing_subword_prefix", "##")
        self.max_chars: int = model.get("max_input_chars_per_word", 100)

    def replay(self, word: str) -> tuple[list[str], WordPieceReplay]:
        if len(word) > self.max_chars:
            reason = f"longer than max_input_chars_per_word={self.max_chars}"
            return [self.unk], WordPieceReplay(choices=(), unknown_reason=reason)
        choices: list[WordPieceChoice] = []
        start = 0
        while start < len(word):
            rejected: list[str] = []
            chosen = None
            for end in range(len(word), start, -1):
                candidate = word[start:end] if start == 0 else self.prefix + word[start:end]
                if candidate in self.vocab:
                    chosen = candidate
                    break
                rejected.append(candidate)
            choices.append(WordPieceChoice(start=start, piece=chosen, rejected=tuple(rejected)))
            if chosen is None:
                reason = f"no vocabulary entry starts the rest {word[start:]!r}"
                return [self.unk], WordPieceReplay(choices=tuple(choices), unknown_reason=reason)
            start = end
        return [c.piece for c in choices if c.piece], WordPieceReplay(choices=tuple(choices))


class _UnigramModel:
    def __init__(self, model: dict[str, Any]) -> None:
        vocab = model["vocab"]
        self.scores: dict[str, float] = {}
        for piece, score in vocab:
            self.scores.setdefault(piece, float(score))  # the first occurrence keeps its id
        self.ids: dict[str, int] = {}
        for i, (piece, _) in enumerate(vocab):
            self.ids.setdefault(piece, i)
        unk_id = model.get("unk_id")
        self.unk_id: int | None = unk_id
        self.byte_fallback = bool(model.get("byte_fallback"))
        self.max_len = max((len(p) for p in self.scores), default=0)
        min_score = min((float(s) for _, s in vocab), default=0.0)
        self.unk_score = min_score - UNIGRAM_UNK_PENALTY

    def replay(self, word: str) -> tuple[list[str], UnigramReplay]:
        n = len(word)
        best = [0.0] * (n + 1)
        back: list[tuple[int, bool] | None] = [None] * (n + 1)  # (start, unknown) of best edge
        for start in range(n):
            here = best[start]
            has_single = False
            for end in range(start + 1, min(n, start + self.max_len) + 1):
                score = self.scores.get(word[start:end])
                if score is None:
                    continue
                if back[end] is None or score + here > best[end]:
                    best[end] = score + here
                    back[end] = (start, False)
                if end == start + 1:
                    has_single = True
            if not has_single:
                if self.unk_id is None:
                    raise TokenizerError(
                        f"this Unigram model has no unk_id but {word[start]!r} is not in its "
                        "vocabulary: the library cannot encode this text either"
                    )
                if back[start + 1] is None or self.unk_score + here > best[start + 1]:
                    best[start + 1] = self.unk_score + here
                    back[start + 1] = (start, True)
        # Walk back from the end; runs of unknown characters fuse into one piece (fuse_unk).
        pieces: list[UnigramPiece] = []
        end = n
        while end > 0:
            start, unknown = back[end]  # type: ignore[misc]
            score = best[end] - best[start]
            if unknown and pieces and pieces[-1].unknown:
                last = pieces.pop()
                pieces.append(
                    UnigramPiece(word[start : last.end], last.score + score, start, last.end, True)
                )
            else:
                pieces.append(UnigramPiece(word[start:end], score, start, end, unknown))
            end = start
        pieces.reverse()
        replay = UnigramReplay(
            pieces=tuple(pieces),
            total_score=best[n],
            best_scores=tuple(best),
            unk_score=self.unk_score,
        )
        return [p.piece for p in pieces], replay

    def piece_ids(self, piece: str) -> list[tuple[str, int]]:
        """Tokens for one segment piece, as `tokenizers` reports them (surface string, id)."""
        if piece in self.ids:
            return [(piece, self.ids[piece])]
        if self.byte_fallback:
            fallback = [f"<0x{b:02X}>" for b in piece.encode("utf-8")]
            if all(f in self.ids for f in fallback):
                return [(f, self.ids[f]) for f in fallback]
        return [(piece, self.unk_id)]  # type: ignore[list-item]


def _merge_pair(merge: Any) -> tuple[str, str]:
    if isinstance(merge, str):
        parts = merge.split(" ")
        if len(parts) == 2:
            return parts[0], parts[1]
    elif isinstance(merge, list | tuple) and len(merge) == 2:
        return str(merge[0]), str(merge[1])
    raise TokenizerError(f"a BPE merge must be 'left right' or [left, right], got {merge!r}")


# -- the text pipeline before the model -------------------------------------------------------


def _prepends_first(section: Any) -> bool:
    """Whether a pre-tokeniser section (possibly a nested Sequence) has prepend_scheme "first"."""
    if isinstance(section, dict):
        if section.get("prepend_scheme") == "first":
            return True
        return any(_prepends_first(v) for v in section.values())
    if isinstance(section, list):
        return any(_prepends_first(v) for v in section)
    return False


def _never_prepend(section: Any) -> Any:
    """A copy of a pre-tokeniser section with every prepend_scheme "first" set to "never"."""
    if isinstance(section, dict):
        out = {k: _never_prepend(v) for k, v in section.items()}
        if out.get("prepend_scheme") == "first":
            out["prepend_scheme"] = "never"
        return out
    if isinstance(section, list):
        return [_never_prepend(v) for v in section]
    return section


def _build_pre_tokenizer(section: dict[str, Any]) -> Any:
    """A `tokenizers` pre-tokeniser from its JSON section (built on an empty WordLevel model)."""
    spec: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": section,
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {}, "unk_token": "[UNK]"},
    }
    return tokenizers.Tokenizer.from_str(json.dumps(spec)).pre_tokenizer


_RUST_WORDS = tokenizers.pre_tokenizers.Whitespace()  # splits on Rust regex's \\w+|[^\\w\\s]+


@lru_cache(maxsize=4096)
def _is_word_char(char: str) -> bool:
    """Whether ``char`` is a word character to `tokenizers`' ``single_word`` rule: Rust regex's
    Unicode ``\\w``, asked of the library's own Whitespace pre-tokeniser (same engine, same
    Unicode version). Python's ``\\w`` differs (``²``, characters newer than Python's tables)."""
    words = _RUST_WORDS.pre_tokenize_str(char + "a")
    return words[0][0] == char + "a"


@dataclass(frozen=True)
class _AddedToken:
    content: str
    id: int
    single_word: bool
    lstrip: bool
    rstrip: bool
    special: bool


class _AddedTokenSplitter:
    """`tokenizers`' AddedVocabulary matching: leftmost-longest, with single_word/lstrip/rstrip."""

    def __init__(self, tokens: dict[str, _AddedToken]) -> None:
        self.tokens = tokens
        ordered = sorted(tokens, key=len, reverse=True)  # regex alternation: longest first
        self.pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def split(self, text: str) -> list[tuple[int, int, _AddedToken | None]]:
        """Cover ``text`` with (start, end, token-or-None) spans, empty spans left out."""
        spans: list[tuple[int, int, _AddedToken | None]] = []
        if self.pattern is None:
            return [(0, len(text), None)] if text else []
        done = 0
        for match in self.pattern.finditer(text):
            start, stop = match.span()
            token = self.tokens[match.group()]
            if token.single_word:
                before_ok = start == 0 or not _is_word_char(text[start - 1])
                after_ok = stop == len(text) or not _is_word_char(text[stop])
                if not (before_ok and after_ok):
                    continue
            if token.lstrip:
                start = max(len(text[:start].rstrip()), done)
            if token.rstrip:
                stop += len(text[stop:]) - len(text[stop:].lstrip())
            if done < start:
                spans.append((done, start, None))
            spans.append((start, stop, token))
            done = stop
        if done < len(text):
            spans.append((done, len(text), None))
        return spans


class Replayer:
    """Replays one tokenizer; build once, call `replay` for each text."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        # Only the library object is kept, never the `Tokenizer` wrapper: the module's cache is
        # keyed weakly on the wrapper, and a value that referenced its key would never be freed.
        spec = tokenizer.spec
        model = spec["model"]
        model_type = tokenizer.model_type
        if model_type == "BPE":
            self.model: _BPEModel | _WordPieceModel | _UnigramModel = _BPEModel(model)
        elif model_type == "WordPiece":
            self.model = _WordPieceModel(model)
        elif model_type == "Unigram":
            self.model = _UnigramModel(model)
        else:
            raise TokenizerError(
                f"replay covers BPE, WordPiece and Unigram models; this tokenizer's model is "
                f"{model_type}, which has no steps to show beyond a vocabulary lookup"
            )
        backend = tokenizer.backend
        self.backend = backend
        self.normalizer = backend.normalizer
        self.pre_tokenizer = backend.pre_tokenizer
        # Metaspace(prepend_scheme="first") adds "▁" only to the split that starts the text; the
        # library knows where each split came from, `pre_tokenize_str` does not, so later splits
        # use a copy of the pre-tokeniser that never prepends. Only the pre-tokeniser section is
        # edited (a vocabulary may well hold the token "first").
        self.later_pre_tokenizer = self.pre_tokenizer
        section = spec.get("pre_tokenizer")
        if _prepends_first(section):
            self.later_pre_tokenizer = _build_pre_tokenizer(_never_prepend(section))
        skip_special = bool(getattr(backend, "encode_special_tokens", False))
        raw: dict[str, _AddedToken] = {}
        normalized: dict[str, _AddedToken] = {}
        for entry in spec.get("added_tokens") or []:
            content = entry.get("content", "")
            if not content or (skip_special and entry.get("special")):
                continue
            token = _AddedToken(
                content=content,
                id=entry["id"],
                single_word=bool(entry.get("single_word")),
                lstrip=bool(entry.get("lstrip")),
                rstrip=bool(entry.get("rstrip")),
                special=bool(entry.get("special")),
            )
            if entry.get("normalized"):
                key = self.normalizer.normalize_str(content) if self.normalizer else content
                if key:
                    normalized.setdefault(key, token)
            else:
                raw.setdefault(content, token)
        self.raw_splitter = _AddedTokenSplitter(raw)
        self.normalized_splitter = _AddedTokenSplitter(normalized)

    def words(self, text: str) -> list[tuple[str, _AddedToken | None]]:
        """The model's inputs in order: (word, None) for a pre-tokenised word, (content, token)
        for an added token."""
        out: list[tuple[str, _AddedToken | None]] = []
        for start, end, token in self.raw_splitter.split(text):
            if token is not None:
                out.append((text[start:end], token))
                continue
            segment = text[start:end]
            if self.normalizer is not None:
                segment = self.normalizer.normalize_str(segment)
            for sub_start, sub_end, sub_token in self.normalized_splitter.split(segment):
                piece = segment[sub_start:sub_end]
                if sub_token is not None:
                    out.append((piece, sub_token))
                    continue
                first = start == 0 and sub_start == 0
                pre_tokenizer = self.pre_tokenizer if first else self.later_pre_tokenizer
                if pre_tokenizer is None:
                    out.append((piece, None))
                else:
                    out.extend((w, None) for w, _ in pre_tokenizer.pre_tokenize_str(piece) if w)
        return out

    def _model_tokens(self, word: str) -> tuple[list[tuple[str, int]], StepDetail]:
        pieces, detail = self.model.replay(word)
        if isinstance(self.model, _UnigramModel):
            return [t for p in pieces for t in self.model.piece_ids(p)], detail
        vocab = self.model.vocab
        return [(p, vocab[p]) for p in pieces], detail

    def replay(self, text: str) -> list[WordReplay]:
        """Replay ``text``: one `WordReplay` per word or added token (empty text gives ``[]``).

        The pieces and ids are the replay's own (from its merges, greedy choices or Viterbi
        segmentation); they are then checked against the library's encoding, and a difference
        raises TokenizerError. Only the character spans come from the library's offsets.
        """
        text = check_text(text, MAX_REPLAY_CHARS)
        if not text:
            return []
        try:
            encoding = self.backend.encode(text, add_special_tokens=False)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as err:  # an unknown char without unk_id; the library's Rust panic
            raise TokenizerError(f"this tokenizer cannot encode the text: {err}") from None
        lib = list(zip(encoding.tokens, encoding.ids, encoding.offsets, strict=True))
        result: list[WordReplay] = []
        cursor = 0  # position in the library's tokens
        last_end = 0
        for word, added in self.words(text):
            if added is not None:
                # the library names the token by the span matched, stripped spaces included
                tokens: list[tuple[str, int]] = [(word, added.id)]
                detail: StepDetail | None = None
            else:
                tokens, detail = self._model_tokens(word)
            theirs = lib[cursor : cursor + len(tokens)]
            if [t[:2] for t in theirs] != tokens:
                raise TokenizerError(
                    f"the replay of word {word[:80]!r} gives {tokens[:20]} but `tokenizers` gives "
                    f"{[(t[0], t[1]) for t in theirs][:20]}: this tokenizer's configuration is "
                    "not one the replay reproduces faithfully"
                )
            cursor += len(tokens)
            if theirs:
                start = min(t[2][0] for t in theirs)
                last_end = max(t[2][1] for t in theirs)
            else:
                start = last_end
            result.append(
                WordReplay(
                    word=word,
                    start=start,
                    end=last_end,
                    pieces=tuple(t[0] for t in tokens),
                    ids=tuple(t[1] for t in tokens),
                    added_token=added is not None,
                    steps=detail,
                )
            )
        if cursor != len(lib):
            raise TokenizerError(
                f"`tokenizers` gives {len(lib)} tokens but the replay accounts for {cursor}: this "
                "tokenizer's configuration is not one the replay reproduces faithfully"
            )
        return result


_REPLAYERS: weakref.WeakKeyDictionary[Tokenizer, Replayer] = weakref.WeakKeyDictionary()


def replay(tokenizer: Tokenizer, text: str) -> list[WordReplay]:
    """The steps by which ``tokenizer`` reaches the pieces of ``text``, word by word.

    Raises TokenizerError, with the reason, for a model type or configuration that cannot be
    replayed, for text over `MAX_REPLAY_CHARS`, or for any failure inside the replay: a caller
    that shows tokens can always catch TokenizerError and show them without the steps. The
    flattened pieces and ids always equal the library's encoding (without a post-processor's
    additions such as BERT's ``[CLS]``).
    """
    if not isinstance(tokenizer, Tokenizer):
        raise TokenizerError(f"replay needs a Tokenizer, got {type(tokenizer).__name__}")
    try:
        replayer = _REPLAYERS.get(tokenizer)
        if replayer is None:
            replayer = _REPLAYERS[tokenizer] = Replayer(tokenizer)
        return replayer.replay(text)
    except TokenizerError:
        raise
    except Exception as err:  # a file shape the replay did not foresee: say so, never crash
        raise TokenizerError(
            f"the replay failed on this tokenizer ({type(err).__name__}: {err}); its tokens are "
            "still valid, only the steps cannot be shown"
        ) from err
