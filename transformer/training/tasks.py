"""Toy tasks for training the small bundled models, generated deterministically from a seed.

Attention maps of a random model are noise; these tasks are chosen so a trained model's attention
shows the patterns a lecturer wants to point at:

- ``reverse``: letters reversed. Cross-attention lies on the anti-diagonal.
- ``translate``: toy English into toy French (invented words, French word order: adjectives after
  their noun, articles agreeing with the noun's gender, frequency adverbs after the verb, object
  pronouns before it). Cross-attention shows crossing alignments, not only a diagonal.
- ``continue``: toy English sentences for a decoder-only (GPT-style) model: ``source`` is a
  2–4-word prefix and ``target`` the rest of the sentence; the model is trained on
  ``source + " " + target`` as one sequence (see :func:`decoder_only_text`).

Words are whitespace-separated and every word is lower-case ASCII with no punctuation, so a
subword tokenizer trained on :func:`task_corpus` gives each symbol of ``reverse`` one token and
word-level alignments map to token positions through the tokenizer's offsets.

Determinism: all randomness comes from one ``random.Random(seed)`` and only through its
``random()`` method, the one part of the ``random`` module whose sequence Python promises to keep
across versions (``choice`` and ``randint`` may change), so the data behind a bundled checkpoint
can be regenerated later.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "ANIMATE_NOUNS",
    "NOUN_GENDER",
    "REVERSE_ALPHABET",
    "TASKS",
    "TRANSLATE_ADJECTIVES",
    "TRANSLATE_ADVERBS",
    "TRANSLATE_CONJUNCTIONS",
    "TRANSLATE_DETERMINERS",
    "TRANSLATE_INTRANSITIVE_VERBS",
    "TRANSLATE_LEXICON",
    "TRANSLATE_NOUNS",
    "TRANSLATE_PREPOSITIONS",
    "TRANSLATE_PRONOUNS",
    "TRANSLATE_TRANSITIVE_VERBS",
    "Example",
    "TaskData",
    "adjective_noun_pairs",
    "decoder_only_text",
    "is_toy_english",
    "make_task",
    "task_corpus",
    "translate",
]


@dataclass(frozen=True)
class Example:
    """One source → target pair.

    ``alignment`` holds word-level ``(target word index, source word index)`` pairs for words that
    translate one another (words are whitespace-split), sorted by target index. It is empty for
    ``continue``, where source and target are two halves of one sentence.
    """

    source: str
    target: str
    alignment: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class TaskData:
    """A task's three disjoint splits and what the UI needs to say about it."""

    name: str
    train: tuple[Example, ...]
    validation: tuple[Example, ...]
    test: tuple[Example, ...]
    architecture: str  # "encoder-decoder" or "decoder-only"
    description: str  # one sentence for the UI


# ---------------------------------------------------------------------------------------------
# Randomness through random() only (see the module docstring)

_T = TypeVar("_T")


def _randint(rng: random.Random, low: int, high: int) -> int:
    """A uniform integer in ``[low, high]`` (both inclusive)."""
    return low + int(rng.random() * (high - low + 1))


def _choice(rng: random.Random, items: Sequence[_T]) -> _T:
    return items[int(rng.random() * len(items))]


# ---------------------------------------------------------------------------------------------
# Reversal

REVERSE_ALPHABET = tuple("abcdefghijklmnopqrst")
REVERSE_MIN_LENGTH, REVERSE_MAX_LENGTH = 4, 12


def _draw_reverse(rng: random.Random) -> Example:
    n = _randint(rng, REVERSE_MIN_LENGTH, REVERSE_MAX_LENGTH)
    symbols = [_choice(rng, REVERSE_ALPHABET) for _ in range(n)]
    return Example(
        source=" ".join(symbols),
        target=" ".join(reversed(symbols)),
        alignment=tuple((i, n - 1 - i) for i in range(n)),
    )


# ---------------------------------------------------------------------------------------------
# Toy English and toy French
#
# Grammar of one clause (each word belongs to exactly one class, so tagging is a lookup):
#   clause  = NP [adverb] (intransitive | transitive (NP | pronoun)) [preposition NP]
#   NP      = determiner [adjective] noun
# and a sentence is one or more clauses joined by "and".
#
# Toy French reorders within the clause, as French does:
#   NP                    det adj noun        → article noun adj   (article agrees with gender)
#   adverb + verb         often sleeps        → verb adverb        ("dort souvent")
#   verb + pronoun        sees him            → pronoun verb       ("le voit")
# The content words are invented (they look French but are not), the articles are real French.

TRANSLATE_DETERMINERS: dict[str, tuple[str, str]] = {
    # English → (masculine form, feminine form)
    "the": ("le", "la"),
    "a": ("un", "une"),
    "my": ("mon", "ma"),
}

TRANSLATE_NOUNS: dict[str, str] = {
    "cat": "minou",
    "dog": "chenot",
    "bird": "oisel",
    "fish": "poisse",
    "horse": "chevau",
    "mouse": "souritte",
    "girl": "filone",
    "boy": "garsou",
    "teacher": "maitrel",
    "ball": "ballette",
    "table": "tablonne",
    "chair": "chaisette",
    "house": "maisonne",
    "tree": "arbrot",
    "box": "boitelle",
    "book": "livrot",
    "car": "voiturel",
    "boat": "batel",
    "garden": "jardot",
    "river": "riviette",
    "apple": "pommine",
    "cake": "gatot",
    "door": "portelle",
    "window": "fenetrine",
    "flower": "fleurine",
    "hat": "chapot",
}

NOUN_GENDER: dict[str, str] = {
    **dict.fromkeys(
        ["cat", "dog", "bird", "fish", "horse", "boy", "teacher", "tree", "book", "boat"], "m"
    ),
    **dict.fromkeys(["garden", "cake", "hat"], "m"),
    **dict.fromkeys(
        ["mouse", "girl", "ball", "table", "chair", "house", "box", "car", "river", "apple"], "f"
    ),
    **dict.fromkeys(["door", "window", "flower"], "f"),
}

# Subjects are drawn from these so the sentences read sensibly ("the table eats" does not).
ANIMATE_NOUNS = ("cat", "dog", "bird", "fish", "horse", "mouse", "girl", "boy", "teacher")

TRANSLATE_ADJECTIVES: dict[str, str] = {
    "small": "petol",
    "big": "grandu",
    "old": "vieuro",
    "young": "jeunel",
    "red": "rougin",
    "blue": "bleuvre",
    "green": "vertal",
    "black": "noiret",
    "white": "blanchu",
    "happy": "contel",
    "sad": "tristou",
    "quick": "vivot",
    "quiet": "calmeux",
    "tall": "hautin",
    "new": "neuvel",
}

TRANSLATE_TRANSITIVE_VERBS: dict[str, str] = {
    "sees": "voitte",
    "likes": "aimonne",
    "finds": "trouvel",
    "takes": "prenut",
    "follows": "suivonne",
    "watches": "regardel",
    "eats": "mangeot",
    "pushes": "poussel",
    "holds": "tenoit",
    "wants": "veulot",
}

TRANSLATE_INTRANSITIVE_VERBS: dict[str, str] = {
    "sleeps": "dormot",
    "runs": "courit",
    "sits": "assiel",
    "waits": "attendol",
    "jumps": "sautel",
    "walks": "marchonne",
}

TRANSLATE_ADVERBS: dict[str, str] = {
    # Frequency adverbs: before the verb in English, after it in French.
    "often": "souvonte",
    "never": "jamou",
    "always": "toujoure",
    "sometimes": "parfoi",
}

TRANSLATE_PRONOUNS: dict[str, str] = {
    # Object pronouns: after the verb in English, before it in French.
    "him": "lu",
    "her": "li",
    "them": "lor",
}

TRANSLATE_PREPOSITIONS: dict[str, str] = {
    "under": "sousse",
    "near": "presde",
    "behind": "derrol",
    "on": "dessu",
    "with": "avecque",
}

TRANSLATE_CONJUNCTIONS: dict[str, str] = {"and": "et"}

# Every English word → every toy-French word it may become (determiners have two forms).
TRANSLATE_LEXICON: dict[str, tuple[str, ...]] = {
    **TRANSLATE_DETERMINERS,
    **{
        english: (french,)
        for table in (
            TRANSLATE_NOUNS,
            TRANSLATE_ADJECTIVES,
            TRANSLATE_TRANSITIVE_VERBS,
            TRANSLATE_INTRANSITIVE_VERBS,
            TRANSLATE_ADVERBS,
            TRANSLATE_PRONOUNS,
            TRANSLATE_PREPOSITIONS,
            TRANSLATE_CONJUNCTIONS,
        )
        for english, french in table.items()
    },
}

# One letter per word class, so a sentence's tag string can be matched with a regex and a match's
# character offsets are word indices.
_WORD_CLASS: dict[str, str] = {
    **dict.fromkeys(TRANSLATE_DETERMINERS, "D"),
    **dict.fromkeys(TRANSLATE_ADJECTIVES, "J"),
    **dict.fromkeys(TRANSLATE_NOUNS, "N"),
    **dict.fromkeys(TRANSLATE_ADVERBS, "R"),
    **dict.fromkeys(TRANSLATE_INTRANSITIVE_VERBS, "I"),
    **dict.fromkeys(TRANSLATE_TRANSITIVE_VERBS, "V"),
    **dict.fromkeys(TRANSLATE_PRONOUNS, "P"),
    **dict.fromkeys(TRANSLATE_PREPOSITIONS, "S"),
    **dict.fromkeys(TRANSLATE_CONJUNCTIONS, "C"),
}
_NP = "DJ?N"
_CLAUSE = (
    rf"(?P<subject>{_NP})(?P<adverb>R)?"
    rf"(?:(?P<intransitive>I)|(?P<verb>V)(?:(?P<object>{_NP})|(?P<pronoun>P)))"
    rf"(?:(?P<preposition>S)(?P<complement>{_NP}))?"
)
_CLAUSE_RE = re.compile(_CLAUSE)
_UNNAMED_CLAUSE = re.sub(r"\?P<\w+>", "?:", _CLAUSE)  # a regex may not repeat a group name
_SENTENCE_RE = re.compile(rf"{_UNNAMED_CLAUSE}(?:C{_UNNAMED_CLAUSE})*")


def _tags(words: Sequence[str]) -> str | None:
    """One class letter per word, or None if a word is not toy English."""
    if not all(word in _WORD_CLASS for word in words):
        return None
    return "".join(_WORD_CLASS[word] for word in words)


def is_toy_english(text: str) -> bool:
    """Whether ``text`` is a sentence of the toy English grammar (syntax only).

    Useful to score a ``continue`` model: a sampled continuation should still parse.
    """
    tags = _tags(text.split())
    return tags is not None and _SENTENCE_RE.fullmatch(tags) is not None


def _translate_np(words: Sequence[str], start: int, end: int) -> list[tuple[str, int]]:
    """``det [adj] noun`` → ``article noun [adj]``, as (French word, English index) pairs."""
    noun = words[end - 1]
    masculine, feminine = TRANSLATE_DETERMINERS[words[start]]
    article = masculine if NOUN_GENDER[noun] == "m" else feminine
    out = [(article, start), (TRANSLATE_NOUNS[noun], end - 1)]
    if end - start == 3:
        out.append((TRANSLATE_ADJECTIVES[words[start + 1]], start + 1))
    return out


def _translate_clause(
    words: Sequence[str], match: re.Match[str], offset: int
) -> list[tuple[str, int]]:
    """One clause (``match`` against its tags, starting at word ``offset``) in toy French."""

    def at(group: str) -> int:
        return offset + match.start(group)

    def np(group: str) -> list[tuple[str, int]]:
        return _translate_np(words, at(group), offset + match.end(group))

    def word(group: str, table: dict[str, str]) -> list[tuple[str, int]]:
        return [(table[words[at(group)]], at(group))] if match.group(group) else []

    adverb = word("adverb", TRANSLATE_ADVERBS)
    out = np("subject")
    if match.group("intransitive"):
        out += word("intransitive", TRANSLATE_INTRANSITIVE_VERBS) + adverb
    elif match.group("pronoun"):
        out += word("pronoun", TRANSLATE_PRONOUNS)
        out += word("verb", TRANSLATE_TRANSITIVE_VERBS) + adverb
    else:
        out += word("verb", TRANSLATE_TRANSITIVE_VERBS) + adverb + np("object")
    if match.group("preposition"):
        out += word("preposition", TRANSLATE_PREPOSITIONS) + np("complement")
    return out


def translate(sentence: str) -> Example:
    """Translate a toy English sentence into toy French, with its word alignment.

    Raises ValueError if ``sentence`` is not toy English (see :func:`is_toy_english`).
    """
    words = sentence.split()
    if not is_toy_english(sentence):
        raise ValueError(f"not a sentence of the toy English grammar: {sentence!r}")
    pairs: list[tuple[str, int]] = []
    start = 0
    for end in [i for i, w in enumerate(words) if w in TRANSLATE_CONJUNCTIONS] + [len(words)]:
        match = _CLAUSE_RE.fullmatch(_tags(words[start:end]) or "")
        assert match is not None  # the whole sentence parsed, so each clause does
        pairs += _translate_clause(words, match, start)
        if end < len(words):
            pairs.append((TRANSLATE_CONJUNCTIONS[words[end]], end))
        start = end + 1
    return Example(
        source=" ".join(words),
        target=" ".join(french for french, _ in pairs),
        alignment=tuple((t, s) for t, (_, s) in enumerate(pairs)),
    )


def adjective_noun_pairs(example: Example) -> list[tuple[int, int]]:
    """``(target adjective index, source adjective index)`` word pairs of a translate example.

    The trained-model test maps these word indices to token positions and checks that some
    cross-attention head puts a target adjective's attention on its source adjective.
    """
    source = example.source.split()
    return [(t, s) for t, s in example.alignment if source[s] in TRANSLATE_ADJECTIVES]


# Probabilities of the optional parts: enough adjectives for the alignment test, enough of the
# other reorderings to show crossings.
_P_ADJECTIVE, _P_ADVERB, _P_INTRANSITIVE, _P_PRONOUN, _P_PREPOSITION = 0.5, 0.25, 0.3, 0.15, 0.4


def _draw_np(rng: random.Random, nouns: Sequence[str]) -> list[str]:
    words = [_choice(rng, tuple(TRANSLATE_DETERMINERS))]
    if rng.random() < _P_ADJECTIVE:
        words.append(_choice(rng, tuple(TRANSLATE_ADJECTIVES)))
    return [*words, _choice(rng, nouns)]


def _draw_clause(rng: random.Random) -> list[str]:
    words = _draw_np(rng, ANIMATE_NOUNS)
    if rng.random() < _P_ADVERB:
        words.append(_choice(rng, tuple(TRANSLATE_ADVERBS)))
    if rng.random() < _P_INTRANSITIVE:
        words.append(_choice(rng, tuple(TRANSLATE_INTRANSITIVE_VERBS)))
    else:
        words.append(_choice(rng, tuple(TRANSLATE_TRANSITIVE_VERBS)))
        if rng.random() < _P_PRONOUN:
            words.append(_choice(rng, tuple(TRANSLATE_PRONOUNS)))
        else:
            words += _draw_np(rng, tuple(TRANSLATE_NOUNS))
    if rng.random() < _P_PREPOSITION:
        words.append(_choice(rng, tuple(TRANSLATE_PREPOSITIONS)))
        words += _draw_np(rng, tuple(TRANSLATE_NOUNS))
    return words


TRANSLATE_MIN_LENGTH, TRANSLATE_MAX_LENGTH = 4, 14  # English words; one clause is at most 12


def _draw_translate(rng: random.Random) -> Example:
    while True:
        words = _draw_clause(rng)
        if len(words) >= TRANSLATE_MIN_LENGTH:  # "the cat sleeps" is too short to be worth it
            return translate(" ".join(words))


# ---------------------------------------------------------------------------------------------
# Continuation (decoder-only)

CONTINUE_MIN_LENGTH, CONTINUE_MAX_LENGTH = 4, 18
CONTINUE_MIN_PREFIX, CONTINUE_MAX_PREFIX = 2, 4
_P_SECOND_CLAUSE = 0.35


def _draw_continue(rng: random.Random) -> Example:
    while True:
        words = _draw_clause(rng)
        if rng.random() < _P_SECOND_CLAUSE:
            words += ["and", *_draw_clause(rng)]
        if CONTINUE_MIN_LENGTH <= len(words) <= CONTINUE_MAX_LENGTH:
            break
    k = _randint(rng, CONTINUE_MIN_PREFIX, min(CONTINUE_MAX_PREFIX, len(words) - 1))
    return Example(source=" ".join(words[:k]), target=" ".join(words[k:]))


def decoder_only_text(example: Example) -> str:
    """The one sequence a decoder-only model is trained on: ``source + " " + target``."""
    return f"{example.source} {example.target}"


# ---------------------------------------------------------------------------------------------
# Building a task


@dataclass(frozen=True)
class _Spec:
    draw: Callable[[random.Random], Example]
    key: Callable[[Example], str]  # examples with equal keys are duplicates
    architecture: str
    description: str
    sizes: tuple[int, int, int]  # default (train, validation, test)


_SPECS: dict[str, _Spec] = {  # the tasks, by name (the one place their names are written)
    "reverse": _Spec(
        _draw_reverse,
        lambda e: e.source,
        "encoder-decoder",
        "Reverse a sequence of 4 to 12 letters; cross-attention should trace the anti-diagonal.",
        (20_000, 1_000, 1_000),
    ),
    "translate": _Spec(
        _draw_translate,
        lambda e: e.source,
        "encoder-decoder",
        "Translate toy English into a made-up French-like language that puts adjectives after "
        "the noun, so cross-attention shows crossing alignments.",
        (20_000, 1_000, 1_000),
    ),
    "continue": _Spec(
        _draw_continue,
        # A 2–4-word prefix recurs across thousands of sentences; a sentence must not.
        decoder_only_text,
        "decoder-only",
        "Continue a toy English sentence from its first words, one token at a time (GPT-style).",
        (20_000, 1_000, 1_000),
    ),
}

TASKS: tuple[str, ...] = tuple(_SPECS)
"""The task names, ``("reverse", "translate", "continue")``: recipes, bundled models and the CLI
use this tuple."""

# A draw that keeps repeating seen examples means the task has fewer distinct ones than asked.
_MAX_CONSECUTIVE_DUPLICATES = 10_000


def make_task(
    name: str,
    seed: int = 0,
    n_train: int | None = None,
    n_validation: int | None = None,
    n_test: int | None = None,
) -> TaskData:
    """Generate a task's train / validation / test splits deterministically from ``seed``.

    Defaults: 20,000 train, 1,000 validation and 1,000 test examples. Examples are distinct and
    the splits disjoint: no source appears twice (for ``continue``, no whole sentence, since a
    short prefix necessarily recurs). Test is drawn first, then validation, then train, so
    changing ``n_train`` leaves the held-out splits unchanged.
    """
    if name not in _SPECS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    spec = _SPECS[name]
    default_train, default_validation, default_test = spec.sizes
    sizes = (
        default_test if n_test is None else n_test,
        default_validation if n_validation is None else n_validation,
        default_train if n_train is None else n_train,
    )
    if any(size < 0 for size in sizes):
        raise ValueError(f"split sizes must be non-negative, got {sizes}")

    rng = random.Random(seed)
    seen: set[str] = set()
    splits: list[tuple[Example, ...]] = []
    for size in sizes:
        examples: list[Example] = []
        duplicates = 0
        while len(examples) < size:
            example = spec.draw(rng)
            key = spec.key(example)
            if key in seen:
                duplicates += 1
                if duplicates > _MAX_CONSECUTIVE_DUPLICATES:
                    raise ValueError(f"task {name!r} has too few distinct examples for {sizes}")
                continue
            duplicates = 0
            seen.add(key)
            examples.append(example)
        splits.append(tuple(examples))
    test, validation, train = splits
    return TaskData(name, train, validation, test, spec.architecture, spec.description)


def task_corpus(task: TaskData) -> list[str]:
    """The texts a task's tokenizer is trained on: every source and target of the train split."""
    return [text for example in task.train for text in (example.source, example.target)]


def reference_target(task_name: str, source: str) -> str | None:
    """The correct output of a task for ``source``, or ``None`` when it has no single answer.

    Reversal: the words reversed. Translation: :func:`translate` (``None`` if the sentence is not
    toy English). Continuation has no single correct continuation.
    """
    if task_name == "reverse":
        return " ".join(reversed(source.split()))
    if task_name == "translate":
        try:
            return translate(source).target
        except ValueError:
            return None
    return None
