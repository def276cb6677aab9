"""Subword tokenizers built on Hugging Face `tokenizers`: train, load, save, encode, decode.

`train_tokenizer` trains one of four classic algorithms on a list of texts:

- ``bpe``: BPE on characters; NFKC; Metaspace pre-tokeniser and decoder (``▁`` marks a word
  start), as SentencePiece's BPE. A character never seen in training becomes ``[UNK]``.
- ``byte_bpe``: BPE on the 256 byte values; no normaliser; ByteLevel pre-tokeniser and decoder
  (``Ġ`` is a space), as GPT-2. It never needs ``[UNK]``.
- ``wordpiece``: WordPiece with ``##`` continuations; BERT normaliser (lower-case, accents
  stripped, control characters removed) and BERT pre-tokeniser (spaces and punctuation), as
  BERT uncased.
- ``unigram``: Unigram; NFKC; Metaspace, as SentencePiece's Unigram.

Every tokenizer we train starts its vocabulary with the same special tokens at fixed ids
(`SPECIAL_TOKENS`, defined in `transformer.core.special`): ``[PAD]``=0, ``[UNK]``=1, ``[BOS]``=2, ``[EOS]``=3, ``[CLS]``=4, ``[SEP]``=5,
``[MASK]``=6. They are added tokens: typed in a text, they are recognised whole.

`Tokenizer` wraps a `tokenizers.Tokenizer`, ours or any ``tokenizer.json`` a user brings (BERT's,
GPT-2's, ...). Every problem with a file or an input raises `TokenizerError` with a message that
says what to fix. Limits: a ``tokenizer.json`` may be at most `MAX_TOKENIZER_JSON_BYTES`, a text
to encode at most `MAX_TEXT_CHARS` characters (longer text is rejected, not truncated silently).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeGuard

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from ..core.special import (  # the ids are re-exported: ``from transformer.text.tokenization import PAD_ID``
    BOS_ID,  # noqa: F401
    BOS_TOKEN,
    CLS_ID,  # noqa: F401
    CLS_TOKEN,  # noqa: F401
    EOS_ID,  # noqa: F401
    EOS_TOKEN,
    MASK_ID,  # noqa: F401
    MASK_TOKEN,  # noqa: F401
    PAD_ID,  # noqa: F401
    PAD_TOKEN,
    SEP_ID,  # noqa: F401
    SEP_TOKEN,  # noqa: F401
    SPECIAL_TOKENS,
    UNK_ID,  # noqa: F401
    UNK_TOKEN,
)

Algorithm = Literal["bpe", "byte_bpe", "wordpiece", "unigram"]
ALGORITHMS: tuple[str, ...] = ("bpe", "byte_bpe", "wordpiece", "unigram")

MAX_TOKENIZER_JSON_BYTES = 64 * 1024 * 1024
"""Largest ``tokenizer.json`` accepted: 64 MiB (BERT's is 0.7 MB, GPT-2's 1.4 MB)."""
MAX_TEXT_CHARS = 100_000
"""Longest text `Tokenizer.encode` and friends accept, in characters (Python ``len``)."""
MAX_VOCAB_SIZE = 1_000_000
"""Largest vocabulary `train_tokenizer` will try to learn."""

METASPACE = "▁"  # U+2581, SentencePiece's visible word-start marker
WORDPIECE_PREFIX = "##"
_BYTE_ALPHABET_SIZE = 256

# Conventional names by which a user's file may spell the tokens our properties report.
_PAD_NAMES = (PAD_TOKEN, "<pad>")
_UNK_NAMES = (UNK_TOKEN, "<unk>")
_BOS_NAMES = (BOS_TOKEN, "<s>", "<bos>", "<|endoftext|>")
_EOS_NAMES = (EOS_TOKEN, "</s>", "<eos>", "<|endoftext|>")


def is_int(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is an integer and not a bool (as `transformer.core.util.is_int`, here so
    that the tokenizer worker process loads this module without torch)."""
    return isinstance(value, int) and not isinstance(value, bool)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class TokenizerError(ValueError):
    """A tokenizer file, a training request or a text that cannot be used; says what to fix."""


@dataclass(frozen=True)
class TokenRecord:
    """One token of an encoded text: what a UI needs to draw it over the original text.

    ``start``/``end`` are character offsets into the text given to `Tokenizer.encode`
    (``text[start:end]`` is the span the token came from; ``start == end`` for tokens the
    tokenizer inserted itself, such as BERT's ``[CLS]``). Byte-level tokens that hold part of a
    character share that character's span. ``word`` is the index of the pre-tokenised word the
    token belongs to, or None for tokens inserted by a post-processor.
    """

    piece: str
    id: int
    start: int
    end: int
    special: bool
    word: int | None


def clean_text(text: str) -> str:
    """Return ``text`` with lone UTF-16 surrogates replaced by U+FFFD (same length, same offsets).

    Python strings may hold unpaired surrogates (``"\\ud800"``) that are not Unicode scalar values
    and that `tokenizers` cannot accept; every other character passes through unchanged.
    """
    if not isinstance(text, str):
        raise TokenizerError(f"expected text as a str, got {type(text).__name__}")
    return _LONE_SURROGATE.sub("\ufffd", text)


def check_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """Validate a text to encode: a str of at most ``limit`` characters; return it cleaned."""
    text = clean_text(text)
    if len(text) > limit:
        raise TokenizerError(
            f"text has {len(text):,} characters; the limit is {limit:,}: "
            "shorten it or split it into parts"
        )
    return text


def check_normalized_text(tokenizer: Tokenizer, text: str, limit: int) -> str:
    """Refuse ``text`` when the tokenizer's normaliser makes it longer than ``limit``
    characters; return it cleaned. A normaliser may lengthen a text many times (NFKC writes
    U+FDFA as 18 characters), and everything after it (the model, the replay, the view)
    works on what it wrote, so a limit on the typed length alone let 20,000 characters become
    360,000. Raises `TokenizerError` saying both lengths."""
    text = check_text(text, limit)
    normalizer = tokenizer.backend.normalizer
    if normalizer is None or not text:
        return text
    try:
        written = len(normalizer.normalize_str(text))
    except Exception as err:  # the library's Rust panic, on a text it cannot normalise
        raise TokenizerError(f"this tokenizer cannot normalise the text: {err}") from None
    if written > limit:
        kind = type(normalizer).__name__
        raise TokenizerError(
            f"this tokenizer's normaliser ({kind}) makes the text {written:,} characters long "
            f"(from {len(text):,}), and the limit is {limit:,} after normalising: paste a "
            "shorter text (a character may become many: U+FDFA becomes 18)"
        )
    return text


class Tokenizer:
    """A trained subword tokenizer: a `tokenizers.Tokenizer` with a small, checked interface.

    Build one with `train_tokenizer`, `Tokenizer.load` or `Tokenizer.from_json_str`. The wrapped
    library object is ``.backend``. Padding and truncation settings of a loaded file are switched
    off: this class always encodes the whole text (up to `MAX_TEXT_CHARS`).
    """

    def __init__(self, backend: tokenizers.Tokenizer) -> None:
        """Wrap a `tokenizers.Tokenizer` (prefer the constructors below, which validate files)."""
        backend.no_padding()
        backend.no_truncation()
        self.backend = backend
        self._spec: dict[str, Any] = json.loads(backend.to_str())
        added = backend.get_added_tokens_decoder()
        self._special_ids = frozenset(i for i, tok in added.items() if tok.special)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_json_str(cls, text: str | bytes) -> Tokenizer:
        """Read a tokenizer from ``tokenizer.json`` text; raise TokenizerError if it is invalid."""
        if isinstance(text, bytes):
            if len(text) > MAX_TOKENIZER_JSON_BYTES:
                raise TokenizerError(_too_big_message(len(text)))
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as err:
                raise TokenizerError(
                    f"the file is not UTF-8 text (bad byte at position {err.start}): "
                    "a tokenizer.json is a UTF-8 JSON file"
                ) from None
        if not isinstance(text, str):
            raise TokenizerError(f"expected the JSON text as str or bytes, got {type(text)}")
        text = text.removeprefix("\ufeff")  # a byte-order mark some editors write first
        if len(text) > MAX_TOKENIZER_JSON_BYTES:  # chars <= bytes, so this check is cheap first
            raise TokenizerError(_too_big_message(len(text)))
        if len(text.encode("utf-8", "surrogatepass")) > MAX_TOKENIZER_JSON_BYTES:
            raise TokenizerError(_too_big_message(len(text.encode("utf-8", "surrogatepass"))))
        spec = _parse_tokenizer_json(text)
        try:
            backend = tokenizers.Tokenizer.from_str(text)
        except Exception as err:  # the Rust side raises plain Exception with its parse error
            raise TokenizerError(
                f"`tokenizers` cannot build a tokenizer from this file: {err}. "
                f"The model section says type {spec['model'].get('type', '(missing)')!r}; "
                "check that it was saved by a compatible version of `tokenizers`"
            ) from None
        return cls(backend)

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Load a ``tokenizer.json`` file; raise TokenizerError if it is missing or invalid."""
        path = Path(path)
        try:
            size = path.stat().st_size
        except OSError as err:
            raise TokenizerError(f"cannot read {path}: {err.strerror}") from None
        if path.is_dir():
            candidate = path / "tokenizer.json"
            if candidate.is_file():
                return cls.load(candidate)
            raise TokenizerError(f"{path} is a folder without a tokenizer.json in it")
        if size > MAX_TOKENIZER_JSON_BYTES:
            raise TokenizerError(_too_big_message(size))
        try:
            data = path.read_bytes()
        except OSError as err:
            raise TokenizerError(f"cannot read {path}: {err.strerror}") from None
        return cls.from_json_str(data)

    def to_json_str(self) -> str:
        """The tokenizer as ``tokenizer.json`` text (pretty-printed, loadable by `tokenizers`)."""
        return self.backend.to_str(pretty=True)

    def save(self, path: str | Path) -> Path:
        """Write ``tokenizer.json`` to ``path`` (a file path, or a folder to write it into)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json_str(), encoding="utf-8")
        return path

    # -- description --------------------------------------------------------------------------

    @property
    def spec(self) -> dict[str, Any]:
        """The parsed ``tokenizer.json`` (read it, do not modify it)."""
        return self._spec

    @property
    def model_type(self) -> str:
        """The model type as `tokenizers` names it: "BPE", "WordPiece", "Unigram", "WordLevel"."""
        return type(self.backend.model).__name__

    @property
    def algorithm(self) -> str:
        """Algorithm name: one of `ALGORITHMS` ("byte_bpe" is BPE on a ByteLevel pre-tokeniser),
        else the lower-cased model type (e.g. "wordlevel")."""
        model_type = self.model_type.lower()
        if model_type == "bpe" and _mentions_type(self._spec.get("pre_tokenizer"), "ByteLevel"):
            return "byte_bpe"
        return model_type

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def vocab(self) -> dict[str, int]:
        """Token → id for the whole vocabulary, added tokens included."""
        return self.backend.get_vocab(with_added_tokens=True)

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the added tokens marked special (``[PAD]``, BERT's ``[CLS]``, ...)."""
        return self._special_ids

    def token_to_id(self, token: str) -> int | None:
        """Id of ``token``, or None if it is not in the vocabulary."""
        return self.backend.token_to_id(token)

    def id_to_token(self, id: int) -> str | None:
        """Token string of ``id``, or None if the id is out of range."""
        if not is_int(id) or not 0 <= id < 2**32:
            return None
        return self.backend.id_to_token(id)

    def _first_id(self, names: Iterable[str]) -> int | None:
        for name in names:
            token_id = self.backend.token_to_id(name)
            if token_id is not None:
                return token_id
        return None

    @property
    def pad_id(self) -> int | None:
        """Id of the padding token ("[PAD]" or "<pad>"), None if there is none."""
        return self._first_id(_PAD_NAMES)

    @property
    def unk_id(self) -> int | None:
        """Id of the model's unknown token (e.g. "[UNK]"), None if the model has none (GPT-2)."""
        unk = getattr(self.backend.model, "unk_token", None)
        if unk:
            return self.backend.token_to_id(unk)
        unk_index = self._spec.get("model", {}).get("unk_id")  # Unigram stores an id
        if isinstance(unk_index, int):
            return unk_index
        return self._first_id(_UNK_NAMES)

    @property
    def bos_id(self) -> int | None:
        """Id of the begin-of-sequence token ("[BOS]", "<s>", "<bos>", GPT-2's "<|endoftext|>")."""
        return self._first_id(_BOS_NAMES)

    @property
    def eos_id(self) -> int | None:
        """Id of the end-of-sequence token ("[EOS]", "</s>", "<eos>", GPT-2's "<|endoftext|>")."""
        return self._first_id(_EOS_NAMES)

    def __repr__(self) -> str:
        return f"Tokenizer(algorithm={self.algorithm!r}, vocab_size={self.vocab_size})"

    # -- encoding and decoding ----------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[TokenRecord]:
        """Encode ``text`` into one `TokenRecord` per token (empty text gives ``[]``).

        ``add_special_tokens`` runs the file's post-processor, e.g. BERT's ``[CLS] … [SEP]``
        (tokenizers we train have none). Raises TokenizerError for text over `MAX_TEXT_CHARS`.
        """
        text = check_text(text)
        if not text:
            return []
        encoding = self.encoding(text, add_special_tokens=add_special_tokens)
        return [
            TokenRecord(
                piece=piece,
                id=token_id,
                start=start,
                end=end,
                special=token_id in self._special_ids,
                word=word,
            )
            for piece, token_id, (start, end), word in zip(
                encoding.tokens, encoding.ids, encoding.offsets, encoding.word_ids, strict=True
            )
        ]

    def encoding(self, text: str, add_special_tokens: bool = True) -> tokenizers.Encoding:
        """The library's own `tokenizers.Encoding` of ``text`` (checked and cleaned first)."""
        text = check_text(text)
        try:
            return self.backend.encode(text, add_special_tokens=add_special_tokens)
        except (KeyboardInterrupt, SystemExit):
            raise
        # Exception: e.g. a Unigram file without unk_id meeting an unknown character.
        # BaseException: the library's Rust panic (pyo3's PanicException is no Exception), e.g.
        # a pre-tokenizer's regex that backtracks past Oniguruma's retry limit.
        except BaseException as err:
            raise TokenizerError(f"this tokenizer cannot encode the text: {err}") from None

    def encode_ids(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text`` (no post-processor), with optional BOS/EOS ids around them."""
        text = check_text(text)
        ids = self.encoding(text, add_special_tokens=False).ids if text else []
        if add_bos:
            ids.insert(0, self._require(self.bos_id, "a begin-of-sequence", "add_bos"))
        if add_eos:
            ids.append(self._require(self.eos_id, "an end-of-sequence", "add_eos"))
        return ids

    def _require(self, token_id: int | None, what: str, flag: str) -> int:
        if token_id is None:
            raise TokenizerError(f"this tokenizer has no {what} token: call with {flag}=False")
        return token_id

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Text for ``ids`` through the tokenizer's decoder (``##`` joined, bytes reassembled,
        ``▁`` turned back into spaces); special tokens are dropped when ``skip_special``."""
        checked = []
        size = self.vocab_size
        for token_id in ids:
            token_id = int(token_id)  # accepts numpy / torch integer scalars
            if not 0 <= token_id < size:
                raise TokenizerError(
                    f"id {token_id} is outside this tokenizer's vocabulary (0..{size - 1})"
                )
            checked.append(token_id)
        return self.backend.decode(checked, skip_special_tokens=skip_special)


def unreadable_characters(tokenizer: Tokenizer, text: str) -> list[str]:
    """The characters of ``text`` the tokenizer cannot read: each one that it maps to its
    unknown token (``[UNK]``), in order of first appearance; ``[]`` if it reads everything or has
    no unknown token (byte-level BPE reads every byte).

    When an unknown piece is a whole word whose characters are each known alone (a word-level
    vocabulary), the word itself is reported.
    """
    unk = tokenizer.unk_id
    if unk is None or not (text or "").strip():
        return []
    text = check_text(text)
    encoding = tokenizer.encoding(text, add_special_tokens=False)
    found: list[str] = []
    for token_id, (start, end) in zip(encoding.ids, encoding.offsets, strict=True):
        if token_id != unk:
            continue
        span = text[start:end]
        chars = [
            c
            for c in dict.fromkeys(span)
            if not c.isspace() and unk in tokenizer.encoding(c, add_special_tokens=False).ids
        ]
        for item in chars or ([span] if span.strip() else []):
            if item not in found:
                found.append(item)
    return found


def _too_big_message(size: int) -> str:
    return (
        f"the tokenizer file is {size / 2**20:.1f} MiB; the limit is "
        f"{MAX_TOKENIZER_JSON_BYTES // 2**20} MiB"
    )


def _mentions_type(component: Any, type_name: str) -> bool:
    """Whether a (possibly nested Sequence) component of a tokenizer.json has ``type_name``."""
    if isinstance(component, dict):
        if component.get("type") == type_name:
            return True
        return any(_mentions_type(v, type_name) for v in component.values())
    if isinstance(component, list):
        return any(_mentions_type(v, type_name) for v in component)
    return False


def _parse_tokenizer_json(text: str) -> dict[str, Any]:
    """Parse and check the outline of a tokenizer.json, with messages that say what to fix."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise TokenizerError(
            f"this is not JSON ({err.msg} at line {err.lineno}, column {err.colno}): "
            "upload the tokenizer.json file itself"
        ) from None
    except RecursionError:
        raise TokenizerError("this JSON is nested too deeply to be a tokenizer.json") from None
    except ValueError:  # an integer past the 4,300 digits Python converts
        raise TokenizerError(
            "this file holds an integer too long to read (over 4,300 digits); a tokenizer.json "
            "holds ids and ranks of at most 10 digits"
        ) from None
    if not isinstance(spec, dict):
        raise TokenizerError(
            f"this JSON is a {type(spec).__name__}, not an object: a tokenizer.json is an object "
            'with a "model" key'
        )
    model = spec.get("model")
    if not isinstance(model, dict):
        hint = ""
        if "vocab_size" in spec or "architectures" in spec:
            hint = " (it looks like a model's config.json)"
        elif "model_max_length" in spec or "tokenizer_class" in spec:
            hint = " (it looks like a tokenizer_config.json)"
        raise TokenizerError(
            f'this JSON has no "model" object, so it is not a tokenizer.json{hint}: '
            "upload the tokenizer.json file"
        )
    if not any(key in model for key in ("vocab", "merges")):
        raise TokenizerError(
            'the "model" section has no "vocab": a tokenizer.json model lists its vocabulary'
        )
    return spec


# -- training ---------------------------------------------------------------------------------


def _pipeline(algorithm: str) -> tokenizers.Tokenizer:
    """An untrained tokenizer: the model, normaliser, pre-tokeniser and decoder of ``algorithm``."""
    if algorithm == "bpe":
        tok = tokenizers.Tokenizer(models.BPE(unk_token=UNK_TOKEN))
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    elif algorithm == "byte_bpe":
        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
    elif algorithm == "wordpiece":
        tok = tokenizers.Tokenizer(
            models.WordPiece(unk_token=UNK_TOKEN, continuing_subword_prefix=WORDPIECE_PREFIX)
        )
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix=WORDPIECE_PREFIX)
    elif algorithm == "unigram":
        tok = tokenizers.Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    else:
        raise TokenizerError(f"unknown algorithm {algorithm!r}: choose one of {ALGORITHMS}")
    return tok


def _wordpiece_alphabet(tok: tokenizers.Tokenizer, texts: Sequence[str]) -> list[str]:
    """Initial WordPiece symbols in code-point order: every character, then ``##`` + each
    character seen inside a word.

    The library's trainer gives the ``##`` symbols ids in hash-map order, which changes from run
    to run and, through tie-breaking on ids, changes the merges too. Registering them first, in a
    fixed order, makes training deterministic without changing which symbols exist.
    """
    first: set[str] = set()
    inner: set[str] = set()
    for text in texts:
        normalized = tok.normalizer.normalize_str(text)
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(normalized):
            first.update(word)
            inner.update(word[1:])
    return sorted(first | inner) + [WORDPIECE_PREFIX + c for c in sorted(inner)]


def _canonical_unigram(spec: dict[str, Any]) -> None:
    """Make a trained Unigram vocabulary independent of the trainer's hash-map order.

    The trainer's scores carry run-to-run float noise (up to ~4e-11) and it orders equal scores
    arbitrarily. Scores within 1e-7 of each other are snapped to one value, rounded to 6
    decimals, and pieces are sorted by (score descending, piece): pieces and scores are then the
    same on every run, and so are the ids but one kind: the trainer breaks ties between equally
    rare characters in hash order, so which of them earns a learned score can change, and two
    such single characters can swap ids. (A score could still differ in its 6th decimal in the
    rare run where the noise straddles a rounding boundary.)
    """
    vocab = spec["model"]["vocab"]
    head = [[p, 0.0] for p, _ in vocab[: len(SPECIAL_TOKENS)]]
    raw = sorted(((p, float(s)) for p, s in vocab[len(SPECIAL_TOKENS) :]), key=_score_key)
    tail: list[tuple[str, float]] = []
    cluster_value = 0.0
    for i, (piece, score) in enumerate(raw):
        if i == 0 or raw[i - 1][1] - score > 1e-7:  # a gap wider than noise starts a cluster
            cluster_value = round(score, 6)
        tail.append((piece, cluster_value))
    tail.sort(key=_score_key)
    # Characters the trainer must keep but did not select get made-up scores min, min + 1e-4,
    # min + 2e-4, ... handed out in hash-set order, and the first of them ties with the real
    # characters at the minimum. Hand that same multiset of scores to those characters in
    # code-point order instead (the trainer's order was arbitrary, ours is fixed).
    if tail:
        lowest = tail[-1][1]
        steps: dict[int, list[int]] = {}
        for i, (piece, score) in enumerate(tail):
            k = round((score - lowest) / 1e-4)
            if len(piece) == 1 and k < len(tail) and abs(score - lowest - k * 1e-4) < 2e-6:
                steps.setdefault(k, []).append(i)
        top = 0
        while top + 1 in steps and len(steps[top + 1]) == 1:
            top += 1
        group = [i for k in range(top + 1) for i in steps.get(k, [])]
        if top > 0:
            chars = sorted(tail[i][0] for i in group)
            scores = sorted((tail[i][1] for i in group), reverse=True)
            grouped = set(group)
            rest = [item for i, item in enumerate(tail) if i not in grouped]
            tail = sorted(rest + list(zip(chars, scores, strict=True)), key=_score_key)
    spec["model"]["vocab"] = head + [[p, s] for p, s in tail]


def _score_key(item: tuple[str, float]) -> tuple[float, str]:
    return (-item[1], item[0])


def train_tokenizer(
    texts: Iterable[str],
    algorithm: Algorithm,
    vocab_size: int,
    *,
    min_frequency: int = 2,
) -> Tokenizer:
    """Train a tokenizer of ``algorithm`` ("bpe", "byte_bpe", "wordpiece", "unigram") on ``texts``.

    ``vocab_size`` counts everything, the 7 special tokens included; the result may be smaller
    when the corpus runs out of pairs worth merging. ``min_frequency`` (BPE, WordPiece) is the
    fewest occurrences a pair needs to be merged. Deterministic: the same texts and settings give
    the same ``tokenizer.json``. Raises TokenizerError for an unknown algorithm, an impossible
    vocabulary size or a corpus with no text.
    """
    if algorithm not in ALGORITHMS:
        raise TokenizerError(f"unknown algorithm {algorithm!r}: choose one of {ALGORITHMS}")
    if not is_int(vocab_size):
        raise TokenizerError(f"vocab_size must be an int, got {vocab_size!r}")
    smallest = len(SPECIAL_TOKENS) + (_BYTE_ALPHABET_SIZE if algorithm == "byte_bpe" else 1)
    if not smallest <= vocab_size <= MAX_VOCAB_SIZE:
        raise TokenizerError(
            f"vocab_size {vocab_size} is out of range for {algorithm}: use {smallest} to "
            f"{MAX_VOCAB_SIZE:,} (the 7 special tokens"
            + (" and the 256 byte symbols" if algorithm == "byte_bpe" else "")
            + " are part of it)"
        )
    if not is_int(min_frequency) or min_frequency < 0:
        raise TokenizerError(f"min_frequency must be an int >= 0, got {min_frequency!r}")
    corpus = [clean_text(t) for t in texts]
    if not any(t.strip() for t in corpus):
        raise TokenizerError("the training corpus has no text: give at least one non-empty line")

    tok = _pipeline(algorithm)
    specials = list(SPECIAL_TOKENS)
    trainer: trainers.Trainer
    if algorithm in ("bpe", "byte_bpe"):
        alphabet = pre_tokenizers.ByteLevel.alphabet() if algorithm == "byte_bpe" else []
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=specials,
            initial_alphabet=alphabet,
            show_progress=False,
        )
    elif algorithm == "wordpiece":
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=specials + _wordpiece_alphabet(tok, corpus),
            continuing_subword_prefix=WORDPIECE_PREFIX,
            show_progress=False,
        )
    else:
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            unk_token=UNK_TOKEN,
            show_progress=False,
        )
    try:
        tok.train_from_iterator(corpus, trainer=trainer)
    except Exception as err:  # the Rust trainers raise plain Exception
        raise TokenizerError(
            f"training {algorithm} with vocab_size={vocab_size} failed: {err}"
        ) from None

    spec = json.loads(tok.to_str())
    # Only the real special tokens stay added tokens (the WordPiece alphabet went in as such
    # only to fix its ids; it stays in the model's vocabulary).
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in SPECIAL_TOKENS]
    if algorithm == "unigram":
        _canonical_unigram(spec)
    result = Tokenizer(tokenizers.Tokenizer.from_str(json.dumps(spec, ensure_ascii=False)))
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if result.token_to_id(token) != expected_id:  # guards the documented contract
            raise TokenizerError(f"internal: {token} did not land at id {expected_id}")
    return result
