"""Tests for the deterministic toy tasks the bundled models are trained on."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.training.bundled import BUNDLED_NAMES
from transformer.training.recipes import RECIPES, Recipe
from transformer.training.tasks import (
    ANIMATE_NOUNS,
    NOUN_GENDER,
    REVERSE_ALPHABET,
    TASKS,
    TRANSLATE_ADJECTIVES,
    TRANSLATE_ADVERBS,
    TRANSLATE_DETERMINERS,
    TRANSLATE_INTRANSITIVE_VERBS,
    TRANSLATE_LEXICON,
    TRANSLATE_NOUNS,
    TRANSLATE_PRONOUNS,
    TRANSLATE_TRANSITIVE_VERBS,
    Example,
    TaskData,
    adjective_noun_pairs,
    decoder_only_text,
    is_toy_english,
    make_task,
    task_corpus,
    translate,
)

SMALL = {"n_train": 400, "n_validation": 100, "n_test": 100}


def small(name: str, seed: int = 0) -> TaskData:
    return make_task(name, seed=seed, **SMALL)


def all_examples(task: TaskData) -> list[Example]:
    return [*task.train, *task.validation, *task.test]


def source_words(task: TaskData) -> set[str]:
    return {w for e in all_examples(task) for w in e.source.split()}


# --- The whole interface ----------------------------------------------------------------------


def test_task_names_and_architectures() -> None:
    assert TASKS == ("reverse", "translate", "continue")
    # Every task has a recipe and a bundled checkpoint, named after it.
    assert set(RECIPES) == set(BUNDLED_NAMES) == set(TASKS)
    assert all(recipe.task == name for name, recipe in RECIPES.items())
    with pytest.raises(ValueError, match="unknown task 'sort'"):
        Recipe("sort", "bpe", 100, RECIPES["reverse"].model, RECIPES["reverse"].training)
    architectures = {name: small(name).architecture for name in TASKS}
    assert architectures == {
        "reverse": "encoder-decoder",
        "translate": "encoder-decoder",
        "continue": "decoder-only",
    }
    for name in TASKS:
        task = small(name)
        assert task.name == name
        assert task.description.endswith(".") and "\n" not in task.description


def test_unknown_task_names_the_valid_ones() -> None:
    with pytest.raises(ValueError) as error:
        make_task("sort")
    assert all(name in str(error.value) for name in TASKS)


def test_negative_size_is_rejected() -> None:
    with pytest.raises(ValueError):
        make_task("reverse", n_train=-1)


def test_requested_sizes() -> None:
    task = make_task("translate", n_train=123, n_validation=45, n_test=6)
    assert (len(task.train), len(task.validation), len(task.test)) == (123, 45, 6)
    assert isinstance(task.train, tuple) and all(isinstance(e, Example) for e in task.train)


@pytest.mark.parametrize("name", TASKS)
def test_default_sizes(name: str) -> None:
    task = make_task(name)
    assert (len(task.train), len(task.validation), len(task.test)) == (20_000, 1_000, 1_000)
    # A tokenizer trained on the train split meets no unseen word at test time.
    held_out = {w for e in [*task.validation, *task.test] for w in f"{e.source} {e.target}".split()}
    assert held_out <= {w for text in task_corpus(task) for w in text.split()}


# --- Determinism and splits ---------------------------------------------------------------------


@pytest.mark.parametrize("name", TASKS)
def test_same_seed_same_data_other_seed_other_data(name: str) -> None:
    assert small(name, seed=7) == small(name, seed=7)
    assert small(name, seed=7).train != small(name, seed=8).train


def test_changing_n_train_keeps_held_out_splits() -> None:
    a = make_task("translate", seed=3, n_train=50, n_validation=20, n_test=20)
    b = make_task("translate", seed=3, n_train=500, n_validation=20, n_test=20)
    assert (a.validation, a.test) == (b.validation, b.test)


@pytest.mark.parametrize("name", TASKS)
def test_splits_disjoint_and_deduplicated(name: str) -> None:
    task = make_task(name, n_train=3000, n_validation=500, n_test=500)
    # For continue the unit is the whole sentence: its 2–4-word prefixes necessarily recur.
    key = decoder_only_text if name == "continue" else (lambda e: e.source)
    keys = [key(e) for e in all_examples(task)]
    assert len(keys) == len(set(keys))


def test_too_many_examples_asked_for_is_an_error_not_a_hang(monkeypatch) -> None:
    import transformer.training.tasks as tasks

    monkeypatch.setattr(tasks, "_MAX_CONSECUTIVE_DUPLICATES", 50)
    monkeypatch.setattr(tasks, "REVERSE_ALPHABET", ("x",))  # one sentence per length: 9 in all
    with pytest.raises(ValueError, match="too few distinct"):
        make_task("reverse", n_train=10, n_validation=0, n_test=0)


# --- Reverse ------------------------------------------------------------------------------------


def test_reverse_targets_are_reversed_sources() -> None:
    for e in all_examples(small("reverse")):
        words = e.source.split()
        assert e.source == " ".join(words)  # single spaces
        assert 4 <= len(words) <= 12
        assert set(words) <= set(REVERSE_ALPHABET)
        assert all(len(w) == 1 for w in words)  # one whole word, hence one token, per symbol
        assert e.target.split() == words[::-1]
        n = len(words)
        assert e.alignment == tuple((i, n - 1 - i) for i in range(n))


def test_reverse_uses_every_length_and_symbol() -> None:
    task = small("reverse")
    assert {len(e.source.split()) for e in all_examples(task)} == set(range(4, 13))
    assert source_words(task) == set(REVERSE_ALPHABET)


# --- Translate ----------------------------------------------------------------------------------


def test_lexicon_is_one_to_one_and_disjoint_from_english() -> None:
    french = [w for forms in TRANSLATE_LEXICON.values() for w in forms]
    assert len(french) == len(set(french))
    assert not set(french) & set(TRANSLATE_LEXICON)
    assert all(w.isascii() and w.isalpha() and w.islower() for w in [*french, *TRANSLATE_LEXICON])
    assert set(NOUN_GENDER) == set(TRANSLATE_NOUNS)
    assert set(NOUN_GENDER.values()) == {"m", "f"}
    assert set(ANIMATE_NOUNS) <= set(TRANSLATE_NOUNS)


def test_translate_sizes_of_vocabulary() -> None:
    assert len(TRANSLATE_ADJECTIVES) >= 12
    assert len(TRANSLATE_NOUNS) >= 20
    assert len(TRANSLATE_TRANSITIVE_VERBS) >= 8


def test_translate_alignment_in_range_and_lexical() -> None:
    for e in all_examples(small("translate")):
        source, target = e.source.split(), e.target.split()
        assert 4 <= len(source) <= 14
        # Every target word comes from exactly one source word and vice versa.
        assert sorted(t for t, _ in e.alignment) == list(range(len(target)))
        assert sorted(s for _, s in e.alignment) == list(range(len(source)))
        for t, s in e.alignment:
            assert target[t] in TRANSLATE_LEXICON[source[s]], (e, t, s)


def test_articles_agree_with_their_noun() -> None:
    article_gender = {}
    for masculine, feminine in TRANSLATE_DETERMINERS.values():
        article_gender[masculine], article_gender[feminine] = "m", "f"
    french_noun_gender = {TRANSLATE_NOUNS[n]: g for n, g in NOUN_GENDER.items()}
    for e in all_examples(small("translate")):
        target = e.target.split()
        for i, word in enumerate(target):
            if word in article_gender:  # the noun follows its article directly in toy French
                assert article_gender[word] == french_noun_gender[target[i + 1]], e


def test_adjectives_come_right_after_their_noun_in_the_target() -> None:
    task = small("translate")
    pairs = 0
    for e in all_examples(task):
        source, target = e.source.split(), e.target.split()
        for t, s in adjective_noun_pairs(e):
            assert source[s] in TRANSLATE_ADJECTIVES
            assert target[t] == TRANSLATE_ADJECTIVES[source[s]]
            # English: adjective then noun; toy French: noun then adjective.
            assert source[s + 1] in TRANSLATE_NOUNS
            assert target[t - 1] == TRANSLATE_NOUNS[source[s + 1]]
            pairs += 1
    assert pairs >= 200  # enough adjective–noun pairs for the trained-model attention test


def test_adverbs_follow_and_pronouns_precede_their_verb_in_the_target() -> None:
    # Crossings beyond the noun phrase: English "often sees" / "sees him" become toy French
    # "sees often" / "him sees", as in French ("voit souvent", "le voit").
    verbs = {**TRANSLATE_TRANSITIVE_VERBS, **TRANSLATE_INTRANSITIVE_VERBS}
    seen = set()
    for e in all_examples(small("translate")):
        source, target = e.source.split(), e.target.split()
        for t, s in e.alignment:
            if source[s] in TRANSLATE_ADVERBS:
                assert target[t - 1] == verbs[source[s + 1]], e
                seen.add("adverb")
            if source[s] in TRANSLATE_PRONOUNS:
                assert target[t + 1] == verbs[source[s - 1]], e
                seen.add("pronoun")
    assert seen == {"adverb", "pronoun"}


def test_translate_known_sentences() -> None:
    assert translate("the small cat sees a red ball").target == (
        "le minou petol voitte une ballette rougin"
    )
    e = translate("my girl often sees him under the old table")
    assert e.target == "ma filone lu voitte souvonte sousse la tablonne vieuro"
    assert adjective_noun_pairs(e) == [(8, 7)]


def test_translate_rejects_what_the_grammar_does_not_make() -> None:
    for bad in ["the cat", "cat the sleeps", "the cat sleeps quickly", "the dog sees", ""]:
        assert not is_toy_english(bad)
        with pytest.raises(ValueError):
            translate(bad)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**63))
def test_translate_is_a_function_of_the_source(seed: int) -> None:
    for e in make_task("translate", seed=seed, n_train=20, n_validation=0, n_test=0).train:
        assert is_toy_english(e.source)
        assert translate(e.source) == e


# --- Continue -----------------------------------------------------------------------------------


def test_continue_prefix_and_remainder() -> None:
    for e in all_examples(small("continue")):
        assert 2 <= len(e.source.split()) <= 4
        assert e.target.split()
        assert e.alignment == ()
        text = decoder_only_text(e)
        assert text == f"{e.source} {e.target}"
        assert 4 <= len(text.split()) <= 18
        assert is_toy_english(text), text


def test_continue_has_single_and_joined_sentences() -> None:
    texts = [decoder_only_text(e) for e in all_examples(small("continue"))]
    assert any(" and " in t for t in texts)
    assert any(" and " not in t for t in texts)


# --- Corpus -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TASKS)
def test_corpus_is_train_sources_and_targets(name: str) -> None:
    task = small(name)
    corpus = task_corpus(task)
    assert len(corpus) == 2 * len(task.train)
    assert set(corpus) == set(
        itertools.chain.from_iterable((e.source, e.target) for e in task.train)
    )


def test_reference_target_is_the_task_answer() -> None:
    from transformer.training.tasks import reference_target

    assert reference_target("reverse", "a b c") == "c b a"
    for example in make_task("translate", seed=2, n_train=20, n_validation=5, n_test=5).train:
        assert reference_target("translate", example.source) == example.target
    assert reference_target("translate", "zzz is not toy english") is None
    assert reference_target("continue", "the cat") is None
