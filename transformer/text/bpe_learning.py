"""Learning replay: BPE training from scratch, recording every merge as it is learned.

The textbook algorithm (Sennrich et al., 2016):

1. count the words of the corpus;
2. split every word into characters: the initial vocabulary is the set of characters;
3. count every adjacent pair of symbols, weighted by the word's count;
4. merge the most frequent pair everywhere into a new symbol, add it to the vocabulary, repeat.

Words are found the way this project's character-level ``bpe`` tokenizer finds them (see
`transformer.tokenization`): NFKC normalisation, then each space becomes ``▁``, a ``▁`` is put in
front of the line, and a word starts at every ``▁``. So on the same corpus `learn_bpe` learns the
same merges, in the same order, as ``train_tokenizer(corpus, "bpe", ...)``.

**Ties.** When several pairs share the highest count, the one chosen is the pair whose left symbol
comes first, then whose right symbol comes first, in *vocabulary order*: single characters in
code-point order, then merged symbols in the order they were created. This is the rule of the
`tokenizers` BpeTrainer, which breaks ties on (left id, right id); its ids follow that order.
Merging stops early when the best pair occurs fewer than ``min_frequency`` times (or not at all).

**Where they could part.** `tokenizers` also supports ``continuing_subword_prefix`` and
``end_of_word_suffix``, whose symbols it numbers in hash-map order (so its ties follow no fixed
rule); this trainer has neither. And if two different pairs ever produce the same string, the
library re-uses that symbol's id; this trainer does the same, but the library's queue may then
skip words, which no corpus in our tests triggers.
"""

from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from ..core.util import is_int
from .tokenization import METASPACE, TokenizerError, clean_text

MAX_LEARNING_CHARS = 2_000_000
"""Largest corpus (total characters) `learn_bpe` accepts: it runs in pure Python."""


@dataclass(frozen=True)
class MergeStep:
    """One learned merge: ``pair`` occurred ``count`` times (weighted by word counts) and became
    ``token``. ``rank`` is its index (0 = first learned), ``vocab_size`` the vocabulary size after
    it, ``words_changed`` how many distinct words it changed."""

    rank: int
    pair: tuple[str, str]
    count: int
    token: str
    vocab_size: int
    words_changed: int


@dataclass(frozen=True)
class BPELearningTrace:
    """Everything `learn_bpe` did: the word counts, the initial alphabet and each merge."""

    word_counts: dict[str, int]
    alphabet: tuple[str, ...]
    merges: tuple[MergeStep, ...]

    def vocabulary(self, after: int | None = None) -> list[str]:
        """The vocabulary after the first ``after`` merges (all of them by default): the alphabet
        in code-point order, then each new token in the order it was learned."""
        steps = self.merges if after is None else self.merges[:after]
        vocab = list(self.alphabet)
        seen = set(vocab)
        for step in steps:
            if step.token not in seen:
                vocab.append(step.token)
                seen.add(step.token)
        return vocab

    def segment(self, word: str, after: int | None = None) -> list[str]:
        """``word`` (already a corpus word, e.g. ``"▁token"``) split by the first ``after``
        merges, applied in the order they were learned."""
        symbols = list(word)
        for step in self.merges if after is None else self.merges[:after]:
            symbols = _merge_symbols(symbols, step.pair, step.token)
        return symbols

    def segment_word(self, word: str, after: int | None = None) -> list[str]:
        """``word`` as a user types it (``"Hello"``), found the way learning found words (NFKC,
        a ``▁`` in front, spaces as ``▁``; case kept, as learning keeps it) and split by the
        first ``after`` merges. Text with spaces gives the pieces of each of its words in turn;
        text with no characters gives ``[]``."""
        return [piece for w in corpus_words(word) for piece in self.segment(w, after)]


def corpus_words(line: str) -> list[str]:
    """The words of a line as the ``bpe`` tokenizer sees them: NFKC, spaces as ``▁``, a word
    starting at each ``▁`` (``"a b"`` → ``["▁a", "▁b"]``; two spaces give a lone ``"▁"``)."""
    text = unicodedata.normalize("NFKC", clean_text(line)).replace(" ", METASPACE)
    if not text:
        return []
    if not text.startswith(METASPACE):
        text = METASPACE + text
    words = []
    start = 0
    for i in range(1, len(text)):
        if text[i] == METASPACE:
            words.append(text[start:i])
            start = i
    words.append(text[start:])
    return words


def _merge_symbols(symbols: list[str], pair: tuple[str, str], token: str) -> list[str]:
    """Replace each occurrence of ``pair``, left to right without overlap, by ``token``."""
    out: list[str] = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(token)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def _pairs(symbols: list[str]) -> Counter[tuple[str, str]]:
    return Counter(pairwise(symbols))


def learn_bpe(corpus: Sequence[str], num_merges: int, min_frequency: int = 2) -> BPELearningTrace:
    """Learn up to ``num_merges`` BPE merges on ``corpus`` (one text per item), recording each.

    Ties and stopping follow the rules in this module's docstring, which are those of
    `tokenizers`' BpeTrainer. Raises TokenizerError for a negative ``num_merges`` or a corpus
    over `MAX_LEARNING_CHARS`.
    """
    if not is_int(num_merges) or num_merges < 0:
        raise TokenizerError(f"num_merges must be an int >= 0, got {num_merges!r}")
    if not is_int(min_frequency) or min_frequency < 0:
        raise TokenizerError(f"min_frequency must be an int >= 0, got {min_frequency!r}")
    if sum(len(line) for line in corpus) > MAX_LEARNING_CHARS:
        raise TokenizerError(
            f"the corpus is over {MAX_LEARNING_CHARS:,} characters: use a smaller sample"
        )

    # 1. count words; 2. split into characters
    word_counts: Counter[str] = Counter()
    for line in corpus:
        word_counts.update(corpus_words(line))
    alphabet = tuple(sorted({c for word in word_counts for c in word}))
    order = {symbol: i for i, symbol in enumerate(alphabet)}  # vocabulary order, for ties
    splits = {word: list(word) for word in word_counts}

    # 3. count pairs, remembering which words hold each pair
    pair_counts: Counter[tuple[str, str]] = Counter()
    where: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
    for word, count in word_counts.items():
        for pair, n in _pairs(splits[word]).items():
            pair_counts[pair] += n * count
            where[pair].add(word)

    # 4. merge the most frequent pair, again and again
    merges: list[MergeStep] = []
    while len(merges) < num_merges and pair_counts:
        pair, count = max(
            pair_counts.items(), key=lambda kv: (kv[1], -order[kv[0][0]], -order[kv[0][1]])
        )
        if count < max(min_frequency, 1):
            break
        token = pair[0] + pair[1]
        if token not in order:
            order[token] = len(order)
        changed = 0
        for word in sorted(where.pop(pair, ())):
            old = splits[word]
            new = _merge_symbols(old, pair, token)
            if new == old:
                continue
            changed += 1
            weight = word_counts[word]
            for p, n in _pairs(old).items():
                pair_counts[p] -= n * weight
                if pair_counts[p] <= 0:
                    del pair_counts[p]
            for p, n in _pairs(new).items():
                pair_counts[p] += n * weight
                where[p].add(word)
            splits[word] = new
        pair_counts.pop(pair, None)
        merges.append(
            MergeStep(
                rank=len(merges),
                pair=pair,
                count=count,
                token=token,
                vocab_size=len(order),
                words_changed=changed,
            )
        )
    return BPELearningTrace(word_counts=dict(word_counts), alphabet=alphabet, merges=tuple(merges))
