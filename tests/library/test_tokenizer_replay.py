"""The replay's pieces equal `tokenizers`' own output, for every algorithm and many configurations.

Parity is always checked against the library's encoding of the same text, never against numbers
taken from our own code.
"""

from __future__ import annotations

import gc
import json
import random
import weakref

import pytest
import tokenizers
from conftest import final_tokens
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import models, normalizers, pre_tokenizers

from transformer.text.corpus import bundled_corpus
from transformer.text.replay import (
    MAX_REPLAY_CHARS,
    BPEReplay,
    UnigramReplay,
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
    assert final_tokens(tok, words) == encoding.tokens
    assert [p for w in words for p in w.pieces] == encoding.tokens
    assert [i for w in words for i in w.ids] == encoding.ids
    for w in words:
        if w.added_token:
            continue
        detail = w.steps
        if isinstance(detail, BPEReplay):
            assert all(
                m.pair[0] + m.pair[1].removeprefix(tok_prefix(tok)) == m.result
                for m in detail.merges
            )
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


# -- each model's steps against a direct implementation written here ---------------------------


def naive_bpe(symbols: list[str], ranks: dict[tuple[str, str], int]):
    """Textbook BPE on one word: merge the lowest-ranked adjacent pair, leftmost among equals,
    one occurrence at a time; returns every step as (pair, rank, position, symbols after)."""
    steps = []
    while True:
        best = None
        for i in range(len(symbols) - 1):
            rank = ranks.get((symbols[i], symbols[i + 1]))
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            return steps
        rank, i = best
        pair = (symbols[i], symbols[i + 1])
        symbols = [*symbols[:i], pair[0] + pair[1], *symbols[i + 2 :]]
        steps.append((pair, rank, i, tuple(symbols)))


def whole_text_bpe(trained_bpe: Tokenizer) -> Tokenizer:
    """Our trained BPE's vocabulary and merges with no normaliser or pre-tokeniser: a text is
    one word, so random strings test the merge loop directly."""
    spec = json.loads(trained_bpe.to_json_str())
    spec["normalizer"] = None
    spec["pre_tokenizer"] = None
    spec["added_tokens"] = []
    return Tokenizer.from_json_str(json.dumps(spec))


def test_bpe_merges_equal_a_naive_implementation_on_thousands_of_words(trained):
    tok = whole_text_bpe(trained["bpe"])
    merges = tok.spec["model"]["merges"]
    ranks = {}
    for rank, merge in enumerate(merges):
        ranks.setdefault(tuple(merge.split(" ") if isinstance(merge, str) else merge), rank)
    alphabet = sorted(
        {c for m in merges for part in (m.split(" ") if isinstance(m, str) else m) for c in part}
    )
    rng = random.Random(0)
    common = [w for line in bundled_corpus()[:300] for w in line.replace(" ", " ▁").split(" ")]
    words = [
        "▁" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(1500)
    ] + [w if w.startswith("▁") else "▁" + w for w in common[:1500] if w]
    merged_some = 0
    for word in words:
        (replayed,) = replay(tok, word)
        expected = naive_bpe(list(word), ranks)
        got = [(m.pair, m.rank, m.position, m.symbols) for m in replayed.steps.merges]
        assert got == expected, word
        final = expected[-1][3] if expected else tuple(word)
        assert tuple(tok.backend.encode(word).tokens) == final
        merged_some += bool(expected)
    assert merged_some > 2000


def greedy_longest_match(word: str, vocab: set[str], prefix: str = "##") -> list[str] | None:
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            candidate = (prefix if start else "") + word[start:end]
            if candidate in vocab:
                pieces.append(candidate)
                start = end
                break
        else:
            return None
    return pieces


def test_wordpiece_choices_equal_a_direct_greedy_longest_match(trained):
    tok = trained["wordpiece"]
    vocab = set(tok.spec["model"]["vocab"])
    rng = random.Random(1)
    letters = "abcdefghijklmnopqrstuvwxyzé"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 20))) for _ in range(2000)]
    words += [w for line in bundled_corpus()[:200] for w in line.lower().split() if w.isalpha()]
    unknown = 0
    for word in words:
        replayed = replay(tok, word)
        if len(replayed) != 1:  # the BERT normaliser split the word (accents, ...): skip it
            continue
        (replayed,) = replayed
        expected = greedy_longest_match(replayed.word, vocab)
        if expected is None:
            unknown += 1
            assert replayed.steps.unknown_reason is not None
            assert replayed.pieces == ("[UNK]",)
        else:
            assert [c.piece for c in replayed.steps.choices] == expected
            for choice in replayed.steps.choices:  # every longer candidate really is absent
                assert not set(choice.rejected) & vocab
    assert unknown < len(words) / 2


def test_unigram_segmentations_equal_the_library_on_thousands_of_words(trained):
    tok = trained["unigram"]
    rng = random.Random(2)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 24))) for _ in range(2000)]
    for word in words:
        replayed = replay(tok, word)
        assert final_tokens(tok, replayed) == tok.backend.encode(word).tokens


# -- pipelines like real models', built here with `tokenizers` ----------------------------------

BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _with_byte_tokens(tok: tokenizers.Tokenizer) -> Tokenizer:
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for piece in BYTE_TOKENS:
        vocab.setdefault(piece, len(vocab))
    return Tokenizer.from_json_str(json.dumps(spec))


def llama2_legacy(corpus) -> Tokenizer:
    """Llama-2 as first converted: no pre-tokeniser (the whole text is one word), a normaliser
    that prepends ▁ and turns spaces into ▁, BPE with byte fallback and fused unknowns."""
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"]
    )
    tok.train_from_iterator(corpus, trainer)
    return _with_byte_tokens(tok)


def llama2_metaspace(corpus) -> Tokenizer:
    """Llama-2 / Mistral as converted today: Metaspace(prepend_scheme="first", split=False), so
    still one word per text (between added tokens), byte fallback."""
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="first", split=False
    )
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"]
    )
    tok.train_from_iterator(corpus, trainer)
    return _with_byte_tokens(tok)


def llama3(corpus) -> Tokenizer:
    """Llama-3: a Split regex then ByteLevel without its own regex, ignore_merges."""
    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(tokenizers.Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    return Tokenizer(tok)


def unigram_without_pre_tokenizer(trained) -> Tokenizer:
    spec = json.loads(trained["unigram"].to_json_str())
    spec["pre_tokenizer"] = None
    return Tokenizer.from_json_str(json.dumps(spec))


@pytest.fixture(scope="module")
def model_like(trained, corpus) -> dict[str, Tokenizer]:
    return {
        "llama2_legacy": llama2_legacy(corpus),
        "llama2_metaspace": llama2_metaspace(corpus),
        "llama3": llama3(corpus),
        "unigram_no_pre_tokenizer": unigram_without_pre_tokenizer(trained),
    }


model_texts = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.one_of(st.text(max_size=10), st.sampled_from([*WORDS, "<s>", "</s>", "  ", "\n"])),
        max_size=20,
    ).map("".join),
)


@pytest.mark.parametrize(
    "name", ["llama2_legacy", "llama2_metaspace", "llama3", "unigram_no_pre_tokenizer"]
)
@given(text=model_texts)
@settings(max_examples=300, deadline=None, derandomize=True)
def test_replay_equals_library_for_model_like_pipelines(model_like, name, text):
    assert_replay_matches_library(model_like[name], text)


# -- replays that once went wrong --------------------------------------------------------------


def test_a_vocabulary_holding_first_replays_with_prepend_scheme_first():
    # Llama/Mistral conversions: Metaspace(prepend_scheme="first") and a vocabulary that holds the
    # token "first". The replay once rewrote "first" everywhere in the file and crashed.
    vocab = {"<unk>": 0, "<s>": 1, "▁": 2, "f": 3, "i": 4, "r": 5, "s": 6, "t": 7}
    merges = [("f", "i"), ("fi", "r"), ("s", "t"), ("fir", "st"), ("▁", "first")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.add_special_tokens(["<s>"])
    ours = Tokenizer(tok)
    for text in ["first", "first first", "<s>first", "first<s>first", "ﬁrst"]:
        assert_replay_matches_library(ours, text)
    words = replay(ours, "first<s>first")
    assert [w.pieces for w in words] == [("▁first",), ("<s>",), ("first",)]


def test_a_replay_that_fails_raises_tokenizer_error_with_the_reason(trained, monkeypatch):
    import transformer.text.replay as module

    def broken(self, word):
        raise KeyError("something unforeseen")

    tok = _edited(trained["bpe"], lambda spec: None)
    monkeypatch.setattr(module._BPEModel, "replay", broken)
    with pytest.raises(TokenizerError, match=r"replay failed.*KeyError.*something unforeseen"):
        replay(tok, "the cat")
    tok.encode("the cat")  # the tokens themselves are unaffected


def test_the_replayer_cache_frees_tokenizers(trained):
    # An upload builds a Tokenizer and replays it; after 200 uploads none may be left alive.
    import transformer.text.replay as module

    text = trained["bpe"].to_json_str()
    refs = []
    before = len(module._REPLAYERS)
    for _ in range(200):
        tok = Tokenizer.from_json_str(text)
        replay(tok, "the attention layer")
        refs.append(weakref.ref(tok))
        del tok
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
    assert len(module._REPLAYERS) <= before


def test_one_long_word_replays_and_matches(model_like):
    # A tokenizer without a pre-tokeniser sees a whole text as one word (benchmarks/
    # tokenizers_bench.py times this at 20,000 characters).
    text = " ".join(bundled_corpus() * 2)[:MAX_REPLAY_CHARS]
    assert len(text) == MAX_REPLAY_CHARS == 20_000
    tok = model_like["llama2_legacy"]
    (word,) = replay(tok, text)
    assert len(word.steps.symbols) >= len(text)
    assert final_tokens(tok, [word]) == tok.backend.encode(text).tokens
    assert word.steps.merges[len(word.steps.merges) // 2].symbols == naive_prefix_symbols(word)


def naive_prefix_symbols(word) -> tuple[str, ...]:
    """The symbols after the first half of the merges, by applying each at its position."""
    symbols = list(word.steps.symbols)
    for merge in word.steps.merges[: len(word.steps.merges) // 2 + 1]:
        i = merge.position
        assert (symbols[i], symbols[i + 1]) == merge.pair
        symbols[i : i + 2] = [merge.result]
    return tuple(symbols)
