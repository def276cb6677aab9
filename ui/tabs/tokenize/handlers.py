"""The tab's module-level handlers (``/tokenize``, the live view, ``/learn_bpe``), taking the
registry first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import gradio as gr

from transformer.text.bpe_learning import learn_bpe
from transformer.text.corpus import bundled_corpus
from transformer.text.encoded import EncodedText
from transformer.text.replay import (
    replay,
)
from transformer.text.tokenization import Tokenizer, TokenizerError

from ...serving import endpoints, limits
from ...serving.errors import InputError, clean, code_span, describe, friendly, markdown_text, stale
from ...serving.inputs import as_int, as_text, normalized_text
from ...serving.state import ModelRegistry
from .choices import (
    DEFAULT_VOCAB,
    VOCAB_INFO,
    VOCAB_RANGE,
    UploadedFile,
    checked_choice,
    pick_with_note,
    tokenizer_choices,
)
from .replay_view import replay_markdown, replay_steps
from .views import highlighted, plural

NO_COMPARISON = "(none)"  # the comparison menu's first choice


@dataclass(frozen=True)
class TokenizeRequest:
    """What the tab's controls say, as one value, checked once: the layout's components fill
    it (in the order of :meth:`of`'s parameters, the ``/tokenize`` API signature) and the
    handlers receive it. ``choice`` is one of the menu's tokenizers, ``compare`` one too or
    :data:`NO_COMPARISON`; ``step`` None draws every replay step. ``vocab`` is read only when a
    tokenizer is trained live (its note says when it was moved into range)."""

    text: str
    choice: str
    vocab: Any
    upload: str | None
    compare: str
    step: int | None = None

    @classmethod
    def of(
        cls,
        registry: ModelRegistry,
        text: Any,
        choice: Any,
        vocab: Any,
        upload: Any,
        compare: Any,
        step: Any = None,
    ) -> TokenizeRequest:
        """The request from the components' values, in the order the events send them; an
        :class:`InputError` naming what to choose for a tokenizer the menus do not have."""
        text = as_text(text, "text")
        choice = checked_choice(registry, choice)
        if compare and compare != NO_COMPARISON:
            compare = checked_choice(registry, compare)
        else:
            compare = NO_COMPARISON
        shown = None if step is None else as_int(step, "step", 0, 1_000_000)
        return cls(text, choice, vocab, upload, compare, shown)


takes_request = endpoints.takes_request(TokenizeRequest.of)
"""``handler(registry, request)`` as an event handler taking the components' values in the
order the ``/tokenize`` API has them."""


_THREADS = limits.TOKENIZER_WORKERS
_WORKERS = ThreadPoolExecutor(_THREADS, thread_name_prefix="tokenizer")
# Work still running after its request was answered at the limit: it holds its thread until it
# ends (it cannot be stopped). Once every thread holds such work, a new request is told at once
# that the tokenizer is busy, rather than queued behind it to wait out the whole limit.
_overdue: set[Future[Any]] = set()
_overdue_lock = threading.Lock()


def _ended(future: Future[Any]) -> None:
    with _overdue_lock:
        _overdue.discard(future)


def bounded(
    work: Callable[[], Any], deadline: float | None = None, overdue: str | None = None
) -> Any:
    """``work()`` run on one of the few tokenizer threads and answered by ``deadline`` (a
    ``time.monotonic()`` time; by default ``limits.TOKENIZER_TIME_LIMIT_S`` from now): training
    a tokenizer live or drawing 20,000 characters takes a while, and a request must answer
    (an uploaded file never runs here: a worker process runs it, see `UploadedFile`). Past the deadline the request gets a message; the work cannot be
    stopped, so it finishes on its thread. While every thread holds such overdue work, the
    request is refused at once with a message (nothing is queued); ``overdue`` is the message
    past the deadline (by default: the text took too long)."""
    with _overdue_lock:
        busy = len(_overdue) >= _THREADS
    if busy:
        raise InputError(
            "the tokenizer is busy with earlier work that ran past its time limit: try again "
            "in a minute"
        )
    if deadline is None:
        deadline = time.monotonic() + limits.TOKENIZER_TIME_LIMIT_S
    future = _WORKERS.submit(work)
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        if not future.cancel():  # started: it runs on, holding its thread, until it ends
            with _overdue_lock:
                _overdue.add(future)
            future.add_done_callback(_ended)  # at once if it has ended meanwhile
        raise InputError(
            overdue
            or f"the tokenizer took longer than {limits.TOKENIZER_TIME_LIMIT_S:g} s on this "
            "text: try a shorter text or another tokenizer"
        ) from None


def _views(
    registry: ModelRegistry, request: TokenizeRequest
) -> tuple[tuple[str, Any, str, Any, list[list[Any]], str], int]:
    """The six outputs of ``/tokenize`` and how many replay steps the text has."""
    text, vocab, upload, compare = request.text, request.vocab, request.upload, request.compare
    if len(text) > limits.MAX_TEXT:
        raise InputError(
            f"the text is longer than {limits.MAX_TEXT:,} characters ({len(text):,}): "
            "paste a shorter one"
        )
    shown = request.step
    # One limit for the request: choosing each tokenizer (parsing an upload, training one live,
    # building a real one) and drawing run on the tokenizer threads within the same deadline.
    deadline = time.monotonic() + limits.TOKENIZER_TIME_LIMIT_S

    def within(work: Callable[[], Tokenizer]) -> Tokenizer:
        return bounded(work, deadline)

    def building(work: Callable[[], Tokenizer]) -> Tokenizer:
        # A real vocabulary is built once per server: its own limit, and the text's starts
        # after it (the first visitor to choose GPT-4 on a busy server is not refused).
        nonlocal deadline
        began = time.monotonic()
        try:
            return bounded(
                work,
                began + limits.TOKENIZER_BUILD_LIMIT_S,
                "building this tokenizer's vocabulary is taking longer than "
                f"{limits.TOKENIZER_BUILD_LIMIT_S:g} s on this busy server: try again in a minute",
            )
        finally:
            deadline += time.monotonic() - began

    tokenizer, note = pick_with_note(registry, request.choice, vocab, upload, within, building)
    other = None
    if compare != NO_COMPARISON:
        other = pick_with_note(registry, compare, vocab, upload, within, building)
    for picked in (tokenizer, None if other is None else other[0]):
        if isinstance(picked, Tokenizer):  # an upload's worker counts its own
            normalized_text(picked, text, limits.MAX_TEXT)
    # An upload runs in a worker process; this thread only waits on its answer.
    first = _uploaded(tokenizer, text, deadline)
    second = None if other is None else (_uploaded(other[0], text, deadline), other[1])
    return bounded(lambda: _draw(text, first, note, second, shown), deadline)


def _uploaded(
    tokenizer: Tokenizer | UploadedFile, text: str, deadline: float
) -> Tokenizer | EncodedText:
    """An uploaded file's token view, computed by a worker process; the app's own tokenizer
    as it is (it is drawn on the tokenizer threads)."""
    if isinstance(tokenizer, UploadedFile):
        return tokenizer.encode(text, deadline)
    return tokenizer


def _draw(
    text: str,
    tokenizer: Tokenizer | EncodedText,
    note: str,
    other: tuple[Tokenizer | EncodedText, str] | None,
    shown: int | None,
) -> tuple[tuple[str, Any, str, Any, list[list[Any]], str], int]:
    """What `_views` returns, from the tokenizers picked (an upload's already encoded)."""
    segments, rows, line = highlighted(tokenizer, text)
    line = line.replace(":", note + ":", 1) if note else line
    steps = 0
    algorithm = tokenizer.algorithm
    try:  # a replay that fails (e.g. a WordLevel upload) never takes the token view down
        if isinstance(tokenizer, EncodedText):
            if tokenizer.replay is None:
                raise TokenizerError(tokenizer.replay_error)
            words = list(tokenizer.replay)
        else:
            words = replay(tokenizer, text)
        steps = replay_steps(words)
        replay_text = replay_markdown(
            words, steps if shown is None else shown, algorithm == "byte_bpe"
        )
    except TokenizerError as error:
        replay_text = f"_No replay for this tokenizer: {markdown_text(clean(str(error)))}_"
    out_b: tuple[Any, str] = ([], "")
    if other is not None:
        seg_b, _, line_b = highlighted(other[0], text)
        out_b = (seg_b, line_b.replace(":", other[1] + ":", 1) if other[1] else line_b)
    return (line, segments, out_b[1], out_b[0], rows, replay_text), steps


@friendly
@takes_request
def tokenize(
    registry: ModelRegistry, request: TokenizeRequest
) -> tuple[str, Any, str, Any, list[list[Any]], str]:
    """The ``/tokenize`` endpoint: (stats, segments, comparison stats, comparison segments,
    token table, replay markdown). ``step`` draws each word's replay up to that step."""
    return _views(registry, request)[0]


def trained_algorithm(registry: ModelRegistry, choice: str, compare: str) -> str | None:
    """The algorithm the vocabulary slider trains: the tokenizer's if it is trained live, else
    the comparison's, else None (the slider does not apply)."""
    choices = tokenizer_choices(registry)
    for label in (choice, compare):
        kind, name = choices.get(label, ("", "")) if isinstance(label, str) else ("", "")
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
    """The replay step slider: 0 to the most steps a word of this text has, at the end;
    hidden when there is nothing to step through (a slider of "0 steps" says nothing)."""
    if steps == 0:
        return gr.update(minimum=0, maximum=1, value=0, visible=False)
    return gr.update(
        minimum=0,
        maximum=max(steps, 1),
        value=steps,
        visible=True,
        label=f"Step (of {plural(steps, 'step')}: merges for BPE, greedy choices for WordPiece, "
        "pieces for Unigram)",
    )


def tokenize_view(
    registry: ModelRegistry,
    text: str,
    choice: str,
    vocab: float,
    upload: str | None,
    compare: str,
) -> tuple[Any, ...]:
    """The live view: ``/tokenize``'s six outputs with every replay step shown, the vocabulary
    slider fitted to the chosen algorithm, the step slider to the text's steps, the upload box
    and a status line.

    It never raises (a control would become an error): an input it refuses (a text too long, a
    broken upload) leaves every panel and control as it was and says why in the status line;
    the upload box stays shown while "uploaded tokenizer.json" is chosen, so that a broken file
    can be replaced or removed, and is emptied when it is no longer chosen, so that choosing the
    upload again does not bring a broken file back."""
    choices = tokenizer_choices(registry)
    uploads = any(
        isinstance(label, str) and choices.get(label, ("",))[0] == "upload"
        for label in (choice, compare)
    )
    # A file left from an earlier choice is cleared; an empty box is not set again, since
    # setting it fires its change event, which runs this view a second time.
    if uploads:
        show_upload = gr.update(visible=True)
    else:
        show_upload = gr.update(visible=False, **({"value": None} if upload else {}))
    try:
        slider = vocab_control(registry, choice, compare, vocab)
        if slider.get("visible"):
            vocab = slider["value"]
        if uploads and not upload:  # just chosen: ask for the file instead of failing
            ask = "_Drop a `tokenizer.json` file in the box under the menu to see its tokens._"
            if choices.get(choice, ("",))[0] == "upload":
                return (ask, [], "", [], [], "", slider, step_control(0), show_upload, "")
            request = TokenizeRequest.of(registry, text, choice, vocab, upload, NO_COMPARISON)
            views, steps = _views(registry, request)
            return (*views[:2], ask, *views[3:], slider, step_control(steps), show_upload, "")
        request = TokenizeRequest.of(registry, text, choice, vocab, upload, compare)
        views, steps = _views(registry, request)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        return (*(gr.skip() for _ in range(8)), show_upload, stale(describe(error)))
    return (*views, slider, step_control(steps), show_upload, "")


@takes_request
def tokenize_step(registry: ModelRegistry, request: TokenizeRequest) -> tuple[Any, ...]:
    """The step slider, released: ``/tokenize``'s six outputs and the status line; a refused
    input leaves the panels as they were and says why in the status line."""
    try:
        views, _ = _views(registry, request)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        return (*(gr.skip() for _ in range(6)), stale(describe(error)))
    return (*views, "")


def run_example(registry: ModelRegistry, text: str, choice: str, compare: str) -> tuple[Any, ...]:
    """An example row, clicked: the live view with the default vocabulary size."""
    return tokenize_view(registry, text, choice, DEFAULT_VOCAB, None, compare)


@friendly
def learn(corpus_text: str, merges: Any, word: str) -> tuple[str, list[list[Any]]]:
    """The ``/learn_bpe`` endpoint: the from-scratch BPE trainer on a small corpus, as
    (summary with a word segmented, merges table)."""
    n = as_int(merges, "number of merges", 0, 400)
    word = as_text(word, "word")
    if len(word) > limits.MAX_BPE_WORD:
        raise InputError(
            f"the word to segment is {len(word):,} characters long; the limit is "
            f"{limits.MAX_BPE_WORD} (type one word)"
        )
    corpus = [
        line for line in as_text(corpus_text, "corpus").splitlines() if line.strip()
    ] or bundled_corpus()[:40]
    if sum(len(line) for line in corpus) > 50_000:
        raise InputError("the learning replay takes at most 50,000 characters of corpus")
    trace = learn_bpe(corpus, 400)
    asked, n = n, min(n, len(trace.merges))
    rows = [
        [m.rank + 1, f"{m.pair[0]} + {m.pair[1]}", m.token, m.count, m.vocab_size]
        for m in trace.merges[:n]
    ]
    vocab = trace.vocabulary(after=n)
    word = (word or "transformer").strip().split()[0] if (word or "").strip() else "transformer"
    pieces = trace.segment_word(word, after=n)
    learned = (
        f"After **{n}** of {len(trace.merges)} learned merges"
        if asked <= n
        else f"After all **{n}** merges this corpus gives ({asked:,} asked: after {n:,} no pair "
        "occurs twice),"
    )
    summary = (
        f"{learned} the vocabulary has **{len(vocab)}** symbols "
        f"({len(trace.alphabet)} characters + {len(vocab) - len(trace.alphabet)} merged). "
        f"{code_span(word)} is now: " + " ".join(code_span(p) for p in pieces)
    )
    return summary, rows
