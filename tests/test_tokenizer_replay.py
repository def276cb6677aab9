"""The replay's pieces equal `tokenizers`' own output, for every algorithm and many configurations.

Parity is always checked against the library's encoding of the same text, never against numbers
taken from our own code.
"""

from __future__ import annotations

import json

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import normalizers, pre_tokenizers

from transformer.text.replay import (
    MAX_REPLAY_CHARS,
    BPEReplay,
    UnigramReplay,
    WordPieceReplay,
    byte_level_to_bytes,
    replay,
)
from transformer.text.tokenization import ALGORITHMS, SPECIAL_TOKENS, Tokenizer, TokenizerError

WORDS = [
    "the",
    "transformer",
    "tokenization",
    "attention",
    "unbelievable",
    "Hello",
    "café",
    "naïve",
    "東京",
    "🙂",
    "e\u0301",
    "ＡＢＣ",
    "ﬁne",
    "x\x00y",
    "مرحبا",
    "aaaaaaa",
    "##",
    "▁",
    "Ġ",
    "<0x41>",
    "don't",
    "3.14",
]
SEPARATORS = [" ", "  ", "\t", "\n", "", ", ", "-"]

# Texts mixing corpus-like words, separators, typed special tokens and arbitrary Unicode.
texts = st.lists(
    st.one_of(
        st.sampled_from(WORDS),
        st.sampled_from(SEPARATORS),
        st.sampled_from([*SPECIAL_TOKENS, "<|endoftext|>", "[cls]"]),
        st.text(max_size=8),
    ),
    max_size=12,
).map("".join)


def assert_replay_matches_library(tok: Tokenizer, text: str) -> None:
    words = replay(tok, text)
    encoding = tok.backend.encode(text, add_special_tokens=False)
    assert [p for w in words for p in w.pieces] == encoding.tokens
    assert [i for w in words for i in w.ids] == encoding.ids
    for w in words:
        if w.added_token:
            continue
        detail = w.steps
        if isinstance(detail, BPEReplay):
            final = detail.merges[-1].symbols if detail.merges else detail.symbols
            assert list(final) == list(w.pieces)
            assert all(
                m.pair[0] + m.pair[1].removeprefix(tok_prefix(tok)) == m.result
                for m in detail.merges
            )
        elif isinstance(detail, WordPieceReplay):
            chosen = [c.piece for c in detail.choices if c.piece]
            if detail.unknown_reason is None:
                assert chosen == list(w.pieces)
        elif isinstance(detail, UnigramReplay):
            assert "".join(p.piece for p in detail.pieces) == w.word
            assert detail.total_score == pytest.approx(sum(p.score for p in detail.pieces))


def tok_prefix(tok: Tokenizer) -> str:
    return tok.spec["model"].get("continuing_subword_prefix") or ""


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@given(text=texts)
@settings(max_examples=80, deadline=None)
def test_replay_equals_library_on_random_text(trained, algorithm, text):
    assert_replay_matches_library(trained[algorithm], text)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_replay_equals_library_on_the_corpus(trained, corpus, algorithm):
    for line in corpus:
        assert_replay_matches_library(trained[algorithm], line)


def test_bpe_merges_are_applied_in_rank_order(trained):
    (word,) = replay(trained["bpe"], "tokenization")
    ranks = [m.rank for m in word.steps.merges]
    assert word.steps.symbols == tuple("▁tokenization")
    # a later merge may only have a lower rank if an earlier merge created its pair
    for before, after in zip(word.steps.merges, word.steps.merges[1:], strict=False):
        if after.rank < before.rank:
            assert before.result in after.pair
    assert ranks


def test_byte_level_replay_starts_from_bytes(trained):
    (word,) = replay(trained["byte_bpe"], "東")
    assert b"".join(byte_level_to_bytes(s) for s in word.steps.symbols) == "東".encode()
    assert len(word.steps.symbols) == 3


def test_wordpiece_replay_shows_rejected_candidates(trained):
    (word,) = replay(trained["wordpiece"], "unbelievable")
    first = word.steps.choices[0]
    assert first.rejected[0] == "unbelievable"
    assert all(len(r) > len(first.piece) for r in first.rejected)
    assert all(c.piece.startswith("##") for c in word.steps.choices[1:])


def test_wordpiece_long_word_is_unknown_with_a_reason(trained):
    (word,) = replay(trained["wordpiece"], "a" * 150)
    assert word.pieces == ("[UNK]",)
    assert "max_input_chars_per_word" in word.steps.unknown_reason


def test_unigram_replay_is_the_best_segmentation(trained):
    (word,) = replay(trained["unigram"], "transformer")
    table = word.steps.best_scores
    assert table[0] == 0.0 and table[-1] == pytest.approx(word.steps.total_score)


def test_empty_text_replays_to_nothing(trained):
    for tok in trained.values():
        assert replay(tok, "") == []


def test_replay_rejects_text_over_its_limit(trained):
    with pytest.raises(TokenizerError, match="limit"):
        replay(trained["bpe"], "a" * (MAX_REPLAY_CHARS + 1))


def test_word_spans_point_into_the_text(trained):
    text = "The café   serves 東京 tea 🙂"
    for tok in trained.values():
        for w in replay(tok, text):
            assert 0 <= w.start <= w.end <= len(text)


# -- other configurations: files users bring and options our trainer does not set ------------


def _edited(tok: Tokenizer, edit) -> Tokenizer:
    spec = json.loads(tok.to_json_str())
    edit(spec)
    return Tokenizer.from_json_str(json.dumps(spec))


def _fuse_unk(spec):
    spec["model"]["fuse_unk"] = True


def _byte_fallback_bpe(spec):
    spec["model"]["byte_fallback"] = True
    vocab = spec["model"]["vocab"]
    for b in range(0, 256, 3):  # only some bytes: the rest still fall back to [UNK]
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))


def _byte_fallback_unigram(spec):
    spec["model"]["byte_fallback"] = True
    spec["model"]["vocab"] += [[f"<0x{b:02X}>", -20.0] for b in range(256)]


def _first_scheme(spec):
    for part in ("pre_tokenizer", "decoder"):
        spec[part]["prepend_scheme"] = "first"


def _ignore_merges(spec):
    spec["model"]["ignore_merges"] = True


def _normalized_added_tokens(spec):
    for token in spec["added_tokens"]:
        token["normalized"] = True
        token["lstrip"] = token["content"] == "[MASK]"
        token["rstrip"] = token["content"] == "[SEP]"
        token["single_word"] = token["content"] == "[CLS]"


def _char_bpe_with_suffix(corpus):
    impl = tokenizers.CharBPETokenizer()  # BPE with "</w>" suffix, as the original paper
    impl.train_from_iterator(corpus, vocab_size=300, special_tokens=["<unk>"])
    return Tokenizer.from_json_str(impl.to_str())


def _bert_like(corpus):
    impl = tokenizers.BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    impl.train_from_iterator(corpus, vocab_size=300)
    return Tokenizer.from_json_str(impl.to_str())


def _gpt2_like(corpus):
    impl = tokenizers.ByteLevelBPETokenizer(add_prefix_space=True)
    impl.train_from_iterator(corpus, vocab_size=400, special_tokens=["<|endoftext|>"])
    return Tokenizer.from_json_str(impl.to_str())


def _sentencepiece_unigram(corpus):
    impl = tokenizers.SentencePieceUnigramTokenizer()
    impl.train_from_iterator(
        corpus, vocab_size=200, special_tokens=["<unk>", "<s>"], unk_token="<unk>"
    )
    return Tokenizer.from_json_str(impl.to_str())


def _prefixed_bpe(corpus):
    tok = tokenizers.Tokenizer(
        tokenizers.models.BPE(unk_token="[UNK]", continuing_subword_prefix="##")
    )
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=250, special_tokens=["[UNK]"], continuing_subword_prefix="##"
    )
    tok.train_from_iterator(corpus, trainer)
    return Tokenizer(tok)


@pytest.fixture(scope="module")
def variants(trained, corpus) -> dict[str, Tokenizer]:
    return {
        "bpe_fuse_unk": _edited(trained["bpe"], _fuse_unk),
        "bpe_byte_fallback": _edited(trained["bpe"], _byte_fallback_bpe),
        "bpe_first_scheme": _edited(trained["bpe"], _first_scheme),
        "byte_bpe_ignore_merges": _edited(trained["byte_bpe"], _ignore_merges),
        "unigram_byte_fallback": _edited(trained["unigram"], _byte_fallback_unigram),
        "unigram_first_scheme": _edited(trained["unigram"], _first_scheme),
        "wordpiece_normalized_added": _edited(trained["wordpiece"], _normalized_added_tokens),
        "char_bpe_suffix": _char_bpe_with_suffix(corpus),
        "bert_cased": _bert_like(corpus),
        "gpt2_prefix_space": _gpt2_like(corpus),
        "sentencepiece_unigram": _sentencepiece_unigram(corpus),
        "bpe_prefix_nfd": _prefixed_bpe(corpus),
    }


VARIANTS = [
    "bpe_fuse_unk",
    "bpe_byte_fallback",
    "bpe_first_scheme",
    "byte_bpe_ignore_merges",
    "unigram_byte_fallback",
    "unigram_first_scheme",
    "wordpiece_normalized_added",
    "char_bpe_suffix",
    "bert_cased",
    "gpt2_prefix_space",
    "sentencepiece_unigram",
    "bpe_prefix_nfd",
]


@pytest.mark.parametrize("name", VARIANTS)
@given(text=texts)
@settings(max_examples=40, deadline=None)
def test_replay_equals_library_for_other_configurations(variants, name, text):
    assert_replay_matches_library(variants[name], text)


def test_wordlevel_cannot_be_replayed():
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    with pytest.raises(TokenizerError, match="WordLevel"):
        replay(Tokenizer(tok), "a")


def test_bpe_dropout_cannot_be_replayed(trained):
    def dropout(spec):
        spec["model"]["dropout"] = 0.1

    with pytest.raises(TokenizerError, match="dropout"):
        replay(_edited(trained["bpe"], dropout), "the cat")


def test_unigram_without_unk_raises_on_unknown_characters(corpus):
    impl = tokenizers.SentencePieceUnigramTokenizer()
    impl.train_from_iterator(corpus, vocab_size=200)
    tok = Tokenizer.from_json_str(impl.to_str())
    with pytest.raises(TokenizerError, match="cannot encode"):
        tok.encode("🦜")
    with pytest.raises(TokenizerError):
        replay(tok, "🦜")


@pytest.mark.parametrize("text", ["ab", "abab", "aab", "abc", "cab"])
def test_unigram_ties_resolve_as_the_library_does(text):
    # Equal-score segmentations ("ab" vs "a" + "b") must be broken exactly as `tokenizers` does.
    vocab = [("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("ab", -2.0), ("c", -2.0), ("abc", -4.0)]
    model = tokenizers.models.Unigram(vocab, unk_id=0, byte_fallback=False)
    tok = Tokenizer(tokenizers.Tokenizer(model))
    assert_replay_matches_library(tok, text)
