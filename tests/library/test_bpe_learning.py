"""The from-scratch BPE trainer learns the same merges as `tokenizers`' BpeTrainer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.text.bpe_learning import corpus_words, learn_bpe
from transformer.text.replay import replay
from transformer.text.tokenization import SPECIAL_TOKENS, Tokenizer, TokenizerError, train_tokenizer


def library_merges(tok: Tokenizer) -> list[tuple[str, str]]:
    merges = tok.spec["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def library_bpe(corpus: list[str], num_merges: int, min_frequency: int) -> Tokenizer:
    """The library trainer asked for exactly ``num_merges`` merges (plus specials and alphabet)."""
    alphabet = learn_bpe(corpus, 0).alphabet
    size = len(SPECIAL_TOKENS) + len(alphabet) + num_merges
    return train_tokenizer(corpus, "bpe", size, min_frequency=min_frequency)


@pytest.mark.parametrize("min_frequency", [0, 2, 5])
def test_merges_equal_the_library_on_the_bundled_corpus(corpus, min_frequency):
    trace = learn_bpe(corpus, 400, min_frequency=min_frequency)
    assert [m.pair for m in trace.merges] == library_merges(library_bpe(corpus, 400, min_frequency))


def test_vocabulary_equals_the_library_vocabulary(corpus):
    trace = learn_bpe(corpus, 150)
    tok = library_bpe(corpus, 150, 2)
    ours = SPECIAL_TOKENS + trace.vocabulary()
    assert {t: i for i, t in enumerate(ours)} == tok.spec["model"]["vocab"]


def test_counts_and_growing_vocabulary_are_recorded(corpus):
    trace = learn_bpe(corpus, 50)
    counts = [m.count for m in trace.merges]
    assert counts == sorted(counts, reverse=True)  # the best pair's count never goes up
    for step in trace.merges:
        assert step.token == step.pair[0] + step.pair[1]
        assert len(trace.vocabulary(after=step.rank + 1)) == step.vocab_size
        assert step.words_changed > 0
    assert trace.vocabulary(after=0) == list(trace.alphabet)


def test_segmentation_after_all_merges_matches_the_tokenizer(corpus):
    trace = learn_bpe(corpus, 300)
    tok = library_bpe(corpus, 300, 2)
    for word in ["▁attention", "▁tokenizer", "▁transformers", "▁unbelievable"]:
        (replayed,) = replay(tok, word.removeprefix("▁"))
        assert trace.segment(word) == list(replayed.pieces)


# Ties: the rule is "highest count, then the pair whose left, then right, symbol comes first in
# vocabulary order (characters by code point, then merged symbols by creation)".


@pytest.mark.parametrize(
    ("corpus", "first_pair"),
    [
        (["xy ab"], ("a", "b")),  # (a, b) and (x, y) tie: "a" comes first
        (["ba ab"], ("a", "b")),  # (a, b) and (b, a) tie: "a" comes first
        (["ab cd", "cd ab"], ("a", "b")),  # ASCII comes before "▁" (U+2581) in code-point order
        (["zz zz zz ab ab"], ("z", "z")),  # a higher count beats code-point order
    ],
)
def test_tie_breaking_rule(corpus, first_pair):
    trace = learn_bpe(corpus, 1, min_frequency=0)
    lib = library_merges(library_bpe(corpus, 1, 0))
    assert lib[0] == first_pair
    assert [m.pair for m in trace.merges] == lib


def test_merged_symbols_rank_after_characters_in_ties():
    # After (a, b) and (▁, ab), the pairs (▁ab, c), (c, d) and (▁, c) all occur twice; characters
    # come before merged symbols, and "c" before "▁", so (c, d) is the third merge.
    corpus = ["abab", "abc", "abc", "cd", "cd"]
    trace = learn_bpe(corpus, 3, min_frequency=0)
    lib = library_merges(library_bpe(corpus, 3, 0))
    assert lib == [("a", "b"), ("▁", "ab"), ("c", "d")]
    assert [m.pair for m in trace.merges] == lib


def test_min_frequency_stops_learning(corpus):
    trace = learn_bpe(["ab ab", "cd"], 10, min_frequency=2)
    assert all(m.count >= 2 for m in trace.merges)
    assert len(trace.merges) < 10


words = st.text("abcé🙂", min_size=1, max_size=6)
small_corpora = st.lists(st.lists(words, min_size=1, max_size=5).map(" ".join), min_size=1)


@given(corpus=small_corpora, num_merges=st.integers(1, 30), min_frequency=st.sampled_from([0, 2]))
@settings(max_examples=60, deadline=None)
def test_merges_equal_the_library_on_random_corpora(corpus, num_merges, min_frequency):
    trace = learn_bpe(corpus, num_merges, min_frequency=min_frequency)
    lib = library_merges(library_bpe(corpus, num_merges, min_frequency))
    assert [m.pair for m in trace.merges] == lib


def test_corpus_words_match_the_metaspace_pre_tokenizer(trained):
    pre = trained["bpe"].backend.pre_tokenizer
    for line in ["a b  c", " lead", "tab\there", "", "ﬁne ＡＢＣ"]:
        normalized = trained["bpe"].backend.normalizer.normalize_str(line)
        assert corpus_words(line) == [w for w, _ in pre.pre_tokenize_str(normalized)]


def test_bad_arguments_raise():
    with pytest.raises(TokenizerError):
        learn_bpe(["a"], -1)
    with pytest.raises(TokenizerError):
        learn_bpe(["a"], 1, min_frequency=-2)


def test_segment_word_keeps_case_as_learning_does():
    # "Hello" and "hello" are different words to learn_bpe (it is case-sensitive), so segmenting
    # "Hello" must not lower-case it: after every merge it is one piece, "▁Hello".
    corpus = ["Hello Hello Hello world", "hello"]
    trace = learn_bpe(corpus, 40, min_frequency=0)
    tok = library_bpe(corpus, len(trace.merges), 0)
    for word in ["Hello", "hello", "Hello world", "world hello", "ello"]:
        assert trace.segment_word(word) == [p for w in replay(tok, word) for p in w.pieces]
    assert trace.segment_word("Hello") == ["▁Hello"]
    assert trace.segment_word("hello") == ["▁hello"]
    assert trace.segment_word("") == []


@given(word=st.text("abcABCé🙂 ", min_size=1, max_size=12))
@settings(max_examples=100, deadline=None, derandomize=True)
def test_segment_word_equals_the_library(word):
    corpus = ["abc ABC aBc abcabc Abc", "cab CAB é🙂 éé"]
    trace = learn_bpe(corpus, 30, min_frequency=0)
    tok = library_bpe(corpus, len(trace.merges), 0)
    library = [p for w in replay(tok, word) for p in w.pieces]
    if "[UNK]" not in library:
        assert trace.segment_word(word) == library
