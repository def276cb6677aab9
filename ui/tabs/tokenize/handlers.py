"""The tab's module-level handlers (``/tokenize``, the live view, ``/learn_bpe``), taking the
registry first."""

from __future__ import annotations

from typing import Any

import gradio as gr

from transformer.text.bpe_learning import learn_bpe
from transformer.text.corpus import bundled_corpus
from transformer.text.replay import (
    replay,
)
from transformer.text.tokenization import TokenizerError

from ... import limits
from ...errors import friendly, scrub
from ...inputs import as_int
from ...state import ModelRegistry
from .choices import DEFAULT_VOCAB, VOCAB_INFO, VOCAB_RANGE, _pick, tokenizer_choices
from .replay_view import replay_markdown, replay_steps
from .views import highlighted, plural


def _views(
    registry: ModelRegistry,
    text: str,
    choice: str,
    vocab: Any,
    upload: str | None,
    compare: str,
    step: Any,
) -> tuple[tuple[str, Any, str, Any, list[list[Any]], str], int]:
    """The six outputs of ``/tokenize`` and how many replay steps the text has. ``step`` None
    draws every step."""
    if text is None or len(text) > limits.MAX_TEXT:
        raise ValueError(
            f"the text is longer than {limits.MAX_TEXT:,} characters; paste a shorter one"
        )
    tokenizer, note = _pick(registry, choice, vocab, upload)
    segments, rows, line = highlighted(tokenizer, text)
    line = line.replace(":", note + ":", 1) if note else line
    steps = 0
    try:  # a replay that fails (e.g. a WordLevel upload) never takes the token view down
        words = replay(tokenizer, text)
        steps = replay_steps(words)
        shown = steps if step is None else as_int(step, "step", 0, 1_000_000)
        replay_text = replay_markdown(words, shown, tokenizer.algorithm == "byte_bpe")
    except TokenizerError as error:
        replay_text = f"_No replay for this tokenizer: {scrub(str(error))}_"
    out_b: tuple[Any, str] = ([], "")
    if compare and compare != "(none)":
        other, note_b = _pick(registry, compare, vocab, upload)
        seg_b, _, line_b = highlighted(other, text)
        out_b = (seg_b, line_b.replace(":", note_b + ":", 1) if note_b else line_b)
    return (line, segments, out_b[1], out_b[0], rows, replay_text), steps


@friendly
def tokenize(
    registry: ModelRegistry,
    text: str,
    choice: str,
    vocab: float,
    upload: str | None,
    compare: str,
    step: float,
) -> tuple[str, Any, str, Any, list[list[Any]], str]:
    """The ``/tokenize`` endpoint: (stats, segments, comparison stats, comparison segments,
    token table, replay markdown). ``step`` draws each word's replay up to that step."""
    return _views(registry, text, choice, vocab, upload, compare, step)[0]


def trained_algorithm(registry: ModelRegistry, choice: str, compare: str) -> str | None:
    """The algorithm the vocabulary slider trains: the tokenizer's if it is trained live, else
    the comparison's, else None (the slider does not apply)."""
    choices = tokenizer_choices(registry)
    for label in (choice, compare):
        kind, name = choices.get(label, ("", ""))
        if kind == "train":
            return name
    return None


def vocab_control(registry: ModelRegistry, choice: str, compare: str, vocab: Any) -> Any:
    """The vocabulary slider for these menus: the range its algorithm trains on the bundled
    corpus, hidden when neither tokenizer is trained live."""
    algorithm = trained_algorithm(registry, choice, compare)
    if algorithm is None:
        return gr.update(visible=False)
    low, high = VOCAB_RANGE[algorithm]
    try:
        value = min(max(int(float(vocab)), low), high)
    except (TypeError, ValueError, OverflowError):
        value = min(max(DEFAULT_VOCAB, low), high)
    return gr.update(
        visible=True,
        minimum=low,
        maximum=high,
        value=value,
        label=f"Vocabulary size ({algorithm} trained live: {low:,} to {high:,})",
        info=VOCAB_INFO[algorithm].format(hi=high)
        + " (the comparison is moved into its own range if it differs)",
    )


def step_control(steps: int) -> Any:
    """The replay step slider: 0 to the most steps a word of this text has, at the end."""
    return gr.update(
        minimum=0,
        maximum=max(steps, 1),
        value=steps,
        label=f"Step (of {plural(steps, 'step')}: merges for BPE, greedy choices for WordPiece, "
        "pieces for Unigram)",
    )


@friendly
def tokenize_view(
    registry: ModelRegistry,
    text: str,
    choice: str,
    vocab: float,
    upload: str | None,
    compare: str,
) -> tuple[Any, ...]:
    """The live view: ``/tokenize``'s six outputs with every replay step shown, the vocabulary
    slider fitted to the chosen algorithm and the step slider to the text's steps."""
    slider = vocab_control(registry, choice, compare, vocab)
    if slider.get("visible"):
        vocab = slider["value"]
    choices = tokenizer_choices(registry)
    uploads = any(choices.get(label, ("",))[0] == "upload" for label in (choice, compare))
    show_upload = gr.update(visible=uploads)
    if uploads and not upload:  # just chosen: ask for the file instead of failing
        ask = "_Drop a `tokenizer.json` file in the box under the menu to see its tokens._"
        if choices.get(choice, ("",))[0] == "upload":
            return (ask, [], "", [], [], "", slider, step_control(0), show_upload)
        compare = "(none)"
        views, steps = _views(registry, text, choice, vocab, upload, compare, None)
        return (*views[:2], ask, *views[3:], slider, step_control(steps), show_upload)
    views, steps = _views(registry, text, choice, vocab, upload, compare, None)
    return (*views, slider, step_control(steps), show_upload)


def run_example(registry: ModelRegistry, text: str, choice: str, compare: str) -> tuple[Any, ...]:
    """An example row, clicked: the live view with the default vocabulary size."""
    return tokenize_view(registry, text, choice, DEFAULT_VOCAB, None, compare)


@friendly
def learn(corpus_text: str, merges: Any, word: str) -> tuple[str, list[list[Any]]]:
    """The ``/learn_bpe`` endpoint: the from-scratch BPE trainer on a small corpus, as
    (summary with a word segmented, merges table)."""
    n = as_int(merges, "number of merges", 0, 400)
    corpus = [
        line for line in (corpus_text or "").splitlines() if line.strip()
    ] or bundled_corpus()[:40]
    if sum(len(line) for line in corpus) > 50_000:
        raise ValueError("the learning replay takes at most 50,000 characters of corpus")
    trace = learn_bpe(corpus, 400)
    rows = [
        [m.rank + 1, f"{m.pair[0]} + {m.pair[1]}", m.token, m.count, m.vocab_size]
        for m in trace.merges[:n]
    ]
    vocab = trace.vocabulary(after=n)
    word = (word or "transformer").strip().split()[0] if (word or "").strip() else "transformer"
    pieces = trace.segment_word(word, after=n)
    summary = (
        f"After **{n}** of {len(trace.merges)} learned merges the vocabulary has **{len(vocab)}** symbols "
        f"({len(trace.alphabet)} characters + {len(vocab) - len(trace.alphabet)} merged). "
        f"`{word}` is now: " + " ".join(f"`{p}`" for p in pieces)
    )
    return summary, rows
