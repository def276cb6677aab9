"""The visualiser: a Gradio app that shows, step by step, how a Transformer works.

    python app.py [--host 127.0.0.1] [--port 7860] [--device auto|cpu|cuda|mps] [--share]

This file lays out the UI and wires events; computation lives in ``transformer/`` and figures in
``transformer.figures`` (pure plotly functions).
"""

from __future__ import annotations

import argparse
import functools
import html
import inspect
import logging
import os
import queue
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr
import torch

from transformer import figures
from transformer.bundled import load_bundled
from transformer.checkpoint import Checkpoint, CheckpointError
from transformer.config import ConfigError, base_config
from transformer.device import pick_device
from transformer.embeddings import sinusoidal_table
from transformer.generation import MAX_NEW_TOKENS, DecodingSession, DecodingSettings, teacher_force
from transformer.inspection import Analysis, analyse, check_sentences
from transformer.model import NO_INTERVENTION, Intervention, Transformer, count_parameters
from transformer.text.bpe_learning import learn_bpe
from transformer.text.corpus import bundled_corpus
from transformer.text.replay import (
    BPEReplay,
    UnigramReplay,
    WordPieceReplay,
    WordReplay,
    replay,
)
from transformer.text.tokenization import (
    MAX_TOKENIZER_JSON_BYTES,
    Tokenizer,
    TokenizerError,
    train_tokenizer,
)
from transformer.trace import AttentionKind
from transformer.training.data import encode_examples, pad
from transformer.training.loop import train
from transformer.training.recipes import RECIPES, build_model, build_tokenizer
from transformer.training.tasks import make_task, reference_target

log = logging.getLogger("visualiser")

try:  # Hugging Face ZeroGPU: a real decorator there, a no-op everywhere else.
    import spaces  # type: ignore[import-not-found]

    gpu = spaces.GPU
except ImportError:  # pragma: no cover - depends on the host

    def gpu(fn: Callable | None = None, **_: Any) -> Callable:
        return fn if fn is not None else (lambda f: f)


TRAINED_HERE = "trained here (this session)"
ACCURACY_KEYS = ["val_token_accuracy", "val_exact_match", "val_next_token_accuracy"]
ATTENTION_KINDS: dict[str, AttentionKind] = {
    "encoder self-attention": "encoder_self",
    "decoder masked self-attention": "decoder_self",
    "cross-attention (decoder → encoder)": "cross",
}
TOKENIZER_CHOICES = {
    "translate model's tokenizer (BPE)": ("bundled", "translate"),
    "reverse model's tokenizer (WordPiece)": ("bundled", "reverse"),
    "continue model's tokenizer (Unigram)": ("bundled", "continue"),
    "BPE, trained live on the bundled corpus": ("train", "bpe"),
    "byte-level BPE (GPT-2 style), trained live": ("train", "byte_bpe"),
    "WordPiece (BERT style), trained live": ("train", "wordpiece"),
    "Unigram (SentencePiece style), trained live": ("train", "unigram"),
    "uploaded tokenizer.json": ("upload", ""),
}
MAX_TEXT = 20_000  # characters the tokenize tab accepts (the library's own limit is higher)
MAX_UPLOAD_BYTES = min(MAX_TOKENIZER_JSON_BYTES, 20 * 1024 * 1024)
# Wall-clock limits, so that one visitor's request cannot hold a worker (or the trainer) for long.
GENERATION_TIME_LIMIT_S = 60.0  # "Run to the end" pauses there; Run again continues
TRAINING_TIME_LIMIT_S = 300.0  # training stops there and keeps what it has learned
QUEUE_SIZE = 64  # requests waiting at once, all events together; more are told to retry
TRAINING_THREAD = "training"  # name prefix of training threads (tests check none outlive a run)

CSS = """
.large-font { font-size: 130% !important; }
.large-font .prose, .large-font label, .large-font button { font-size: 1.25em !important; }
"""


# -- errors become messages, never tracebacks ------------------------------------------------


EXPECTED_ERRORS = (ValueError, TokenizerError, CheckpointError, ConfigError, IndexError)
MAX_MESSAGE_CHARS = 600  # an error echoing a 100,000-character input stays readable
# An absolute path (POSIX or Windows) of at least two components, not glued to a word ("tokens/s").
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[/\\][\w.~@+-]+){2,}[/\\]?")


def _scrub(text: str) -> str:
    """A message fit for any user: no file paths (a path becomes its file name), no traceback,
    no HTML (gradio renders an error as HTML), at most ``MAX_MESSAGE_CHARS`` characters."""
    text = text.replace(str(Path.cwd()), ".")
    text = _ABSOLUTE_PATH.sub(lambda m: re.split(r"[/\\]", m.group(0).rstrip("/\\"))[-1], text)
    text = text.split("Traceback (most recent call last)")[0].strip() or "an error occurred"
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return html.escape(text, quote=False)


def _device_trouble(error: Exception) -> str | None:
    """What to tell the user about an out-of-memory or accelerator error, or None."""
    text = str(error)
    if isinstance(error, torch.OutOfMemoryError | MemoryError) or "out of memory" in text.lower():
        return "out of memory: try a shorter input, fewer sentences or fewer steps"
    if isinstance(error, RuntimeError) and any(
        word in text for word in ("CUDA", "cuDNN", "CUBLAS", "MPS", "device-side")
    ):
        return "the accelerator reported an error during this request; please try again"
    return None


def _message(error: Exception) -> gr.Error:
    """The ``gr.Error`` a user sees for ``error``. Gradio does not print its traceback to the
    server log: expected errors are the user's input, unexpected ones are logged here."""
    if isinstance(error, gr.Error):
        return error
    if isinstance(error, EXPECTED_ERRORS):
        return gr.Error(_scrub(str(error)), print_exception=False)
    trouble = _device_trouble(error)
    if trouble is not None:
        log.warning("device trouble in a request: %s: %s", type(error).__name__, error)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return gr.Error(trouble, print_exception=False)
    log.exception("unexpected error in a request")
    return gr.Error(
        f"something went wrong ({type(error).__name__}); the app is still running",
        print_exception=False,
    )


def friendly(fn: Callable) -> Callable:
    """Wrap an event handler (function or generator) so every error reaches the user as a
    ``gr.Error`` message, without a traceback or a file path."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except Exception as error:
                raise _message(error) from None

        return generator_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            raise _message(error) from None

    return wrapper


def _int(value: Any, name: str, low: int, high: int) -> int:
    """A slider or number input as an int in ``low..high`` (API callers can send anything)."""
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):  # None, "x", NaN, ±infinity
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not low <= number <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {number}")
    return number


def _float(value: Any, name: str, low: float, high: float) -> float:
    """A slider or number input as a finite float in ``low..high`` (NaN and infinity rejected)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not low <= number <= high:  # False for NaN too
        raise ValueError(f"{name} must be between {low:g} and {high:g}, got {number:g}")
    return number


# -- models ---------------------------------------------------------------------------------


@dataclass
class SessionModels:
    """What one browser session owns: the model it trained (never shared with other sessions)."""

    trained: Checkpoint | None = None
    snapshots: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)


class App:
    """The app's shared state: the device, the bundled models (read-only) and a cache of their
    analyses, so that changing layer, head or view does not recompute the trace."""

    CACHE_BYTES = 512 * 1024 * 1024  # traces of long inputs are large: (L, B, H, T, T) twice

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.bundled = load_bundled(device)
        for name, reason in self.bundled.errors.items():
            log.warning("bundled model %s could not be loaded: %s", name, reason)
        self._analyses: OrderedDict[tuple, tuple[Analysis, int]] = OrderedDict()
        self._cache_lock = threading.Lock()

    def analysis(
        self,
        name: str,
        checkpoint: Checkpoint,
        sentences: list[str],
        intervention: Intervention = NO_INTERVENTION,
        targets: torch.Tensor | None = None,
    ) -> Analysis:
        """``analyse`` through an LRU cache bounded by bytes. Only bundled models are cached:
        a model trained in a session is that session's alone."""
        if self.bundled.models.get(name) is not checkpoint:
            return analyse(checkpoint.model, checkpoint.tokenizer, sentences, intervention, targets)
        key = (
            name,
            tuple(sentences),
            intervention,
            None if targets is None else str(targets.tolist()),
        )
        with self._cache_lock:
            if key in self._analyses:
                self._analyses.move_to_end(key)
                return self._analyses[key][0]
        result = analyse(checkpoint.model, checkpoint.tokenizer, sentences, intervention, targets)
        size = sum(
            r.weights.nbytes + r.scores.nbytes
            for kind in ATTENTION_KINDS.values()
            for r in _records_or_none(result.trace, kind)
        )
        with self._cache_lock:
            self._analyses[key] = (result, size)
            while (
                sum(n for _, n in self._analyses.values()) > self.CACHE_BYTES
                and len(self._analyses) > 1
            ):
                self._analyses.popitem(last=False)
        return result

    @property
    def model_names(self) -> list[str]:
        return [*self.bundled.models, TRAINED_HERE]

    def checkpoint(self, name: str, session: SessionModels | None) -> Checkpoint:
        if name == TRAINED_HERE:
            if session is None or session.trained is None:
                raise ValueError(
                    "no model has been trained in this session yet: use the Model & training tab"
                )
            return session.trained
        if name in self.bundled.errors:
            raise ValueError(
                f"the bundled model '{name}' could not be loaded: {self.bundled.errors[name]}"
            )
        if name not in self.bundled.models:
            raise ValueError(f"unknown model {name!r}; choose one of {self.model_names}")
        return self.bundled.models[name]


def _records_or_none(trace: Any, kind: AttentionKind) -> list:
    try:
        return trace.attention_records(kind)
    except ValueError:  # the architecture has no attention of this kind
        return []


# -- tokenize ---------------------------------------------------------------------------------


@lru_cache(maxsize=16)
def corpus_tokenizer(algorithm: str, vocab_size: int) -> Tokenizer:
    """A tokenizer trained on the bundled corpus (cached: training takes ~50 ms)."""
    return train_tokenizer(bundled_corpus(), algorithm, vocab_size)


def pick_tokenizer(app: App, choice: str, vocab_size: Any, upload: str | None) -> Tokenizer:
    if choice not in TOKENIZER_CHOICES:
        raise ValueError(f"unknown tokenizer {choice!r}")
    kind, name = TOKENIZER_CHOICES[choice]
    if kind == "bundled":
        return app.checkpoint(name, None).tokenizer
    if kind == "train":
        return corpus_tokenizer(name, _int(vocab_size, "vocabulary size", 60, 4000))
    if not upload:
        raise ValueError("upload a tokenizer.json file first (or pick another tokenizer)")
    path = Path(upload)
    if path.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(f"the uploaded file is larger than the limit of {_size(MAX_UPLOAD_BYTES)}")
    return Tokenizer.load(path)


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:g} MB" if n_bytes >= 2**20 else f"{n_bytes:,} bytes"


def highlighted(
    tokenizer: Tokenizer, text: str
) -> tuple[list[tuple[str, str | None]], list[list[Any]], str]:
    """HighlightedText segments, table rows and a stats line for one text."""
    records = tokenizer.encode(text)
    segments: list[tuple[str, str | None]] = []
    rows = []
    cursor = 0
    for index, record in enumerate(records):
        rows.append(
            [index, record.piece, record.id, record.start, record.end, record.special, record.word]
        )
        if record.special and record.start == record.end:
            segments.append((record.piece, "special"))
            continue
        if record.start < cursor:  # overlapping pieces (byte-level splits of one character)
            continue
        if record.start > cursor:
            segments.append((text[cursor : record.start], None))
        label = "unknown" if record.id == tokenizer.unk_id else ("A" if index % 2 == 0 else "B")
        segments.append((text[record.start : record.end], label))
        cursor = record.end
    if cursor < len(text):
        segments.append((text[cursor:], None))
    n_tokens = len(records)
    ratio = f"{len(text) / n_tokens:.2f}" if n_tokens else "–"
    stats = (
        f"**{tokenizer.algorithm}**, vocabulary {tokenizer.vocab_size:,}: {len(text):,} characters → "
        f"**{n_tokens:,} tokens**, {ratio} characters per token"
    )
    return segments, rows, stats


def replay_markdown(words: list[WordReplay], step: int) -> str:
    """Every word's replay, drawn up to ``step`` (the stepper), as markdown."""
    if not words:
        return "_Nothing to replay: the text is empty._"
    lines = []
    for word in words[:60]:
        head = f"**`{word.word}`** → " + " ".join(f"`{p}`" for p in word.pieces)
        detail = word.steps
        if word.added_token or detail is None:
            lines.append(head + " (added token, matched whole)")
        elif isinstance(detail, BPEReplay):
            if detail.whole_word:
                lines.append(head + " (whole word in the vocabulary: no merge)")
                continue
            shown = detail.merges[:step]
            symbols = shown[-1].symbols if shown else detail.symbols
            state = " ".join(f"`{s}`" for s in symbols)
            last = shown[-1] if shown else None
            note = (
                f"merge {len(shown)}/{len(detail.merges)}: `{last.pair[0]}` + `{last.pair[1]}` → "
                f"`{last.result}` (rank {last.rank})"
                if last
                else f"start: {len(detail.symbols)} symbols, {len(detail.merges)} merges to apply"
            )
            lines.append(f"{head}<br>&nbsp;&nbsp;{state} — {note}")
        elif isinstance(detail, WordPieceReplay):
            shown = detail.choices[:step] if step else detail.choices[:0]
            parts = []
            for choice in shown:
                tried = ", ".join(f"~~{r}~~" for r in choice.rejected[-3:])
                parts.append(
                    f"at {choice.start}: `{choice.piece or '[UNK]'}`"
                    + (f" (tried {tried})" if tried else "")
                )
            note = "; ".join(parts) or f"{len(detail.choices)} greedy longest-match choices"
            if detail.unknown_reason and len(shown) == len(detail.choices):
                note += f" — unknown: {detail.unknown_reason}"
            lines.append(f"{head}<br>&nbsp;&nbsp;{note}")
        elif isinstance(detail, UnigramReplay):
            shown = detail.pieces[:step] if step else detail.pieces[:0]
            parts = [f"`{p.piece}` ({p.score:.2f})" for p in shown]
            note = (
                " + ".join(parts) if parts else f"best segmentation of {len(detail.pieces)} pieces"
            )
            if len(shown) == len(detail.pieces):
                note += f" = total log-probability {detail.total_score:.2f}"
            lines.append(f"{head}<br>&nbsp;&nbsp;{note}")
    if len(words) > 60:
        lines.append(f"_… and {len(words) - 60} more words_")
    return "\n\n".join(lines)


def learning_view(corpus_text: str, merges: Any, word: str) -> tuple[list[list[Any]], str]:
    """The from-scratch BPE trainer on a small corpus: merges table and a word segmented."""
    n = _int(merges, "number of merges", 0, 400)
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
    pieces = (
        trace.segment("▁" + word.lower(), after=n)
        if trace.alphabet and "▁" in "".join(trace.alphabet)
        else trace.segment(word, after=n)
    )
    summary = (
        f"After **{n}** of {len(trace.merges)} learned merges the vocabulary has **{len(vocab)}** symbols "
        f"({len(trace.alphabet)} characters + {len(vocab) - len(trace.alphabet)} merged). "
        f"`{word}` is now: " + " ".join(f"`{p}`" for p in pieces)
    )
    return rows, summary


def build_tokenize_tab(app: App) -> None:
    gr.Markdown(
        "Text becomes **tokens** before a Transformer sees it. Pick a tokenizer, type anything, and "
        "watch the pieces — then replay how the tokenizer chose them, merge by merge."
    )
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(
                label="Text", value="The transformer attends to every token.", lines=3
            )
        with gr.Column(scale=2):
            choice = gr.Dropdown(
                list(TOKENIZER_CHOICES),
                value="BPE, trained live on the bundled corpus",
                label="Tokenizer",
            )
            vocab = gr.Slider(
                60, 4000, value=500, step=10, label="Vocabulary size (tokenizers trained live)"
            )
            upload = gr.File(
                label="tokenizer.json (for 'uploaded')", file_types=[".json"], type="filepath"
            )
    compare = gr.Dropdown(
        ["(none)", *TOKENIZER_CHOICES],
        value="WordPiece (BERT style), trained live",
        label="Compare side by side with",
    )
    run = gr.Button("Tokenize", variant="primary")
    colors = {"A": "#bfdbfe", "B": "#fde68a", "special": "#d1d5db", "unknown": "#fca5a5"}
    with gr.Row():
        with gr.Column():
            stats = gr.Markdown()
            pieces = gr.HighlightedText(
                label="Tokens", color_map=colors, show_inline_category=False
            )
        with gr.Column():
            stats_b = gr.Markdown()
            pieces_b = gr.HighlightedText(
                label="Tokens (comparison)", color_map=colors, show_inline_category=False
            )
    table = gr.Dataframe(
        headers=["#", "piece", "id", "start", "end", "special", "word"],
        label="Tokens, ids and character offsets",
        max_height=300,
    )
    gr.Markdown("### Replay: how the tokenizer reached its pieces")
    step = gr.Slider(
        0,
        30,
        value=30,
        step=1,
        label="Step (merges for BPE, greedy choices for WordPiece, pieces for Unigram)",
    )
    replay_md = gr.Markdown()

    @friendly
    def tokenize(
        text: str, choice: str, vocab: float, upload: str | None, compare: str, step: float
    ):
        if text is None or len(text) > MAX_TEXT:
            raise ValueError(
                f"the text is longer than {MAX_TEXT:,} characters; paste a shorter one"
            )
        tokenizer = pick_tokenizer(app, choice, vocab, upload)
        segments, rows, line = highlighted(tokenizer, text)
        try:
            replay_text = replay_markdown(replay(tokenizer, text), _int(step, "step", 0, 1000))
        except TokenizerError as error:  # e.g. a WordLevel upload: tokens yes, no steps to replay
            replay_text = f"_No replay for this tokenizer: {_scrub(str(error))}_"
        out_b: tuple[Any, str] = ([], "")
        if compare and compare != "(none)":
            seg_b, _, line_b = highlighted(pick_tokenizer(app, compare, vocab, upload), text)
            out_b = (seg_b, line_b)
        return (
            line,
            segments,
            out_b[1],
            out_b[0],
            rows,
            replay_text,
        )

    inputs = [text, choice, vocab, upload, compare, step]
    outputs = [stats, pieces, stats_b, pieces_b, table, replay_md]
    run.click(tokenize, inputs, outputs, api_name="tokenize")
    text.submit(tokenize, inputs, outputs, api_visibility="private")
    step.release(tokenize, inputs, outputs, api_visibility="private")
    gr.Examples(
        [
            ["The transformer attends to every token.", "BPE, trained live on the bundled corpus"],
            ["unbelievably tokenization-friendly", "WordPiece (BERT style), trained live"],
            ["Ünïcödé, emoji 🤖 and 中文 all work", "byte-level BPE (GPT-2 style), trained live"],
            ["a big dog sleeps under the old table", "translate model's tokenizer (BPE)"],
        ],
        [text, choice],
        label="Examples for a lecture",
    )

    gr.Markdown("### Learning replay: a BPE tokenizer learns its vocabulary, merge by merge")
    with gr.Row():
        corpus_box = gr.Textbox(
            label="Corpus (one line per sentence; empty = the first 40 lines of the bundled corpus)",
            lines=4,
        )
        with gr.Column():
            merges = gr.Slider(0, 400, value=20, step=1, label="Merges learned so far")
            word = gr.Textbox(label="Segment this word with those merges", value="transformer")
    learn = gr.Button("Learn")
    learn_md = gr.Markdown()
    learn_table = gr.Dataframe(
        headers=["rank", "pair", "new token", "count", "vocabulary size"],
        max_height=300,
        label="Merges in the order they were learned",
    )
    learn_fn = friendly(lambda c, m, w: learning_view(c, m, w)[::-1])
    learn.click(learn_fn, [corpus_box, merges, word], [learn_md, learn_table], api_name="learn_bpe")
    merges.release(
        learn_fn, [corpus_box, merges, word], [learn_md, learn_table], api_visibility="private"
    )


# -- embeddings & positions -------------------------------------------------------------------


def build_positions_tab(
    app: App, large: gr.Checkbox, session: gr.State
) -> tuple[Callable, list, list]:
    """Lay out the tab; returns the positional-encoding handler, inputs and outputs (drawn on load)."""
    gr.Markdown(
        "Attention itself ignores order, so the paper **adds** a sinusoidal positional encoding to "
        "each token embedding: `PE[pos, 2i] = sin(pos / 10000^(2i/d))`, `PE[pos, 2i+1] = cos(…)`."
    )
    with gr.Row():
        d_model = gr.Slider(8, 512, value=128, step=8, label="d_model")
        length = gr.Slider(4, 512, value=64, step=1, label="positions")
        base = gr.Number(value=10000, label="base", minimum=2, maximum=1e6)
        dims = gr.Textbox(value="0, 1, 6, 20", label="dimensions to draw as curves")
        metric = gr.Radio(["cosine", "dot"], value="cosine", label="similarity")
    pe_button = gr.Button("Draw positional encodings", variant="primary")
    pe_plot = gr.Plot(label="Positional encoding")
    with gr.Row():
        curves_plot = gr.Plot(label="Chosen dimensions")
        similarity_plot = gr.Plot(label="PE·PE similarity")

    @friendly
    def positional(d_model: float, length: float, base: float, dims: str, metric: str, large: bool):
        d = _int(d_model, "d_model", 2, 512)
        if d % 2:
            raise ValueError("d_model must be even (sin and cos come in pairs)")
        n = _int(length, "positions", 1, 512)
        base = _float(base, "base", 2, 1e9)
        try:
            chosen = sorted(
                {int(x) for x in (dims or "0").replace(";", ",").split(",") if x.strip()}
            )
        except ValueError:
            raise ValueError("dimensions must be whole numbers separated by commas") from None
        if not chosen or min(chosen) < 0 or max(chosen) >= d or len(chosen) > 12:
            raise ValueError(f"choose 1 to 12 dimensions between 0 and {d - 1}")
        table = sinusoidal_table(n, d, base)
        return (
            figures.positional_encoding_figure(table, large_font=large),
            figures.positional_curves_figure(table, dims=tuple(chosen), large_font=large),
            figures.positional_similarity_figure(table, metric=metric, large_font=large),
        )

    pe_inputs = [d_model, length, base, dims, metric, large]
    pe_button.click(
        positional,
        pe_inputs,
        [pe_plot, curves_plot, similarity_plot],
        api_name="positional_encoding",
    )

    gr.Markdown("### A sentence: token embedding + positional encoding")
    with gr.Row():
        sentence = gr.Textbox(value="the small cat sees a red ball", label="Sentence")
        model_name = gr.Dropdown(app.model_names, value=app.model_names[0], label="Model")
    emb_button = gr.Button("Show the model's input")
    emb_plot = gr.Plot(label="Embedding, PE and their sum")
    norm_plot = gr.Plot(label="Vector lengths")

    @friendly
    def embeddings(sentence: str, name: str, large: bool, session: SessionModels):
        checkpoint = app.checkpoint(name, session)
        analysis = analyse(checkpoint.model, checkpoint.tokenizer, [sentence])
        stack = analysis.trace.source or analysis.trace.target
        pieces = (
            analysis.source_pieces[0]
            if analysis.trace.source is not None
            else analysis.target_pieces[0]
        )
        labels = figures.token_labels(pieces)
        return (
            figures.embedding_sum_figure(
                stack.token_embedding[0], stack.positional, labels, large_font=large
            ),
            figures.embedding_norms_figure(
                stack.token_embedding[0], stack.positional, labels, large_font=large
            ),
        )

    emb_button.click(
        embeddings,
        [sentence, model_name, large, session],
        [emb_plot, norm_plot],
        api_name="embeddings",
    )
    return positional, pe_inputs, [pe_plot, curves_plot, similarity_plot]


# -- attention --------------------------------------------------------------------------------


@dataclass
class AttentionView:
    """One captured analysis and the layer, head and sentence a view draws (all 0-based)."""

    analysis: Analysis
    kind: AttentionKind
    records: list
    layer: int
    head: int
    row: int
    query_labels: list[str]
    key_labels: list[str]


def attention_view(
    app: App,
    session: SessionModels,
    sentences_text: str,
    name: str,
    kind_label: str,
    layer: Any,
    head: Any,
    row: Any,
    checkpoint: Checkpoint | None = None,
    use_reference: bool = False,
) -> AttentionView:
    """The analysis behind every attention view (cached for bundled models) and the validated
    layer, head and sentence.

    With ``use_reference`` the decoder reads the task's correct answer (teacher forcing) instead
    of the model's own output: an early training snapshot's output is too poor to read along.
    """
    checkpoint = checkpoint or app.checkpoint(name, session)
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    sentences = check_sentences((sentences_text or "").splitlines())
    kind = ATTENTION_KINDS.get(kind_label)
    if kind is None:
        raise ValueError(f"choose one of {list(ATTENTION_KINDS)}")
    targets = None
    if use_reference and config.has_encoder and config.has_decoder:
        answers = [reference_target(checkpoint.task or "", sentence) for sentence in sentences]
        if all(answer is not None for answer in answers):
            rows = [[tokenizer.bos_id, *tokenizer.encode_ids(answer)] for answer in answers]
            targets = pad(rows, config.pad_id)
    analysis = app.analysis(name, checkpoint, sentences, targets=targets)
    try:
        records = analysis.trace.attention_records(kind)
    except ValueError:
        raise ValueError(
            f"the {name} model is {config.architecture}: it has no {kind_label}"
        ) from None
    row_index = _int(row, "sentence", 1, analysis.batch_size) - 1
    queries = analysis.source_pieces if kind == "encoder_self" else analysis.target_pieces
    keys = (
        analysis.target_pieces
        if kind == "decoder_self"
        else (analysis.source_pieces or analysis.target_pieces)
    )
    return AttentionView(
        analysis=analysis,
        kind=kind,
        records=records,
        layer=_int(layer, "layer", 1, len(records)) - 1,
        head=_int(head, "head", 1, config.n_heads) - 1,
        row=row_index,
        query_labels=figures.token_labels(queries[row_index]),
        key_labels=figures.token_labels(keys[row_index]),
    )


def attention_outputs(
    app: App,
    session: SessionModels,
    sentences_text: str,
    name: str,
    kind_label: str,
    layer: Any,
    head: Any,
    row: Any,
    what_if: list[str],
    large: bool,
) -> tuple[Any, ...]:
    """One head (scores beside weights), the masks, the what-if change and a summary."""
    view = attention_view(app, session, sentences_text, name, kind_label, layer, head, row)
    checkpoint = app.checkpoint(name, session)
    config = checkpoint.config
    analysis, record, row = view.analysis, view.records[view.layer], view.row
    q_labels, k_labels = view.query_labels, view.key_labels
    single = figures.scores_and_weights_figure(
        record, row, view.head, q_labels, k_labels, large_font=large
    )
    trace = analysis.trace
    source_or_target = trace.source if view.kind != "decoder_self" else trace.target
    key_padding = (source_or_target or trace.target).padding[row]
    causal = trace.causal if view.kind == "decoder_self" else None
    masks = figures.masks_figure(key_padding, q_labels, k_labels, causal=causal, large_font=large)
    summary = (
        [f"**Sentence {i + 1}** → `{out}`" for i, out in enumerate(analysis.outputs)]
        if config.has_encoder and config.has_decoder
        else []
    )
    before = record.weights[row, view.head]
    if what_if:
        intervention = Intervention(
            causal_mask="causal mask off" not in what_if,
            padding_mask="padding mask off" not in what_if,
            scale_scores="no √d scaling" not in what_if,
            positional_encoding="no positional encoding" not in what_if,
            zero_heads=(
                frozenset({(view.kind, view.layer, view.head)})
                if "zero this head" in what_if
                else frozenset()
            ),
        )
        # The same decoder input as the plain pass, so the two are comparable position by position.
        targets = trace.target.tokens if (config.has_encoder and config.has_decoder) else None
        sentences = check_sentences(sentences_text.splitlines())
        changed = app.analysis(name, checkpoint, sentences, intervention, targets)
        after = changed.trace.attention_records(view.kind)[view.layer].weights[row, view.head]
        title = (
            f"What changed with {', '.join(what_if)} (layer {view.layer + 1}, head {view.head + 1})"
        )
        delta = (changed.trace.logits - trace.logits).abs().max().item()
        summary.append(
            f"**What-if ({', '.join(what_if)})**: largest change of any output logit {delta:.3f}."
        )
        if analysis.predicted:
            summary.append(
                f"Next-token predictions before: `{analysis.predicted[row]}` — after: `{changed.predicted[row]}`"
            )
        diff = figures.attention_difference_figure(
            before, after, q_labels, k_labels, title=title, large_font=large
        )
    else:
        diff = figures.placeholder_figure(
            "What-if", "Tick a what-if switch to see what it changes", large_font=large
        )
    summary.append(
        f"Padding is real here: the {analysis.batch_size} sentences are padded to one length, and grey "
        "cells are the ones a mask removed."
    )
    return single, masks, diff, "\n\n".join(summary)


def attention_grid(
    app: App,
    session: SessionModels,
    sentences_text: str,
    name: str,
    kind_label: str,
    row: Any,
    large: bool,
    checkpoint: Checkpoint | None = None,
    use_reference: bool = False,
) -> Any:
    """Every head of every layer of one attention kind, on one colour scale."""
    view = attention_view(
        app, session, sentences_text, name, kind_label, 1, 1, row, checkpoint, use_reference
    )
    return figures.grid_figure(
        view.records, view.row, view.query_labels, view.key_labels, large_font=large
    )


def build_attention_tab(app: App, large: gr.Checkbox, session: gr.State) -> None:
    gr.Markdown(
        "Each head computes `softmax(QKᵀ/√d_k)V`. Rows are **queries** (the token that looks), "
        "columns are **keys** (the tokens looked at). Grey cells are masked."
    )
    with gr.Row():
        sentences = gr.Textbox(
            value="the small cat sees a red ball\na big dog sleeps\nmy old bird eats the green cake",
            lines=3,
            label="One to three sentences (one per line; different lengths make padding)",
        )
        with gr.Column():
            model_name = gr.Dropdown(app.model_names, value=app.model_names[0], label="Model")
            kind = gr.Radio(
                list(ATTENTION_KINDS),
                value="cross-attention (decoder → encoder)",
                label="Which attention",
            )
    with gr.Row():
        layer = gr.Slider(1, 6, value=2, step=1, label="Layer")
        head = gr.Slider(1, 8, value=1, step=1, label="Head")
        row = gr.Slider(1, 3, value=1, step=1, label="Sentence")
    what_if = gr.CheckboxGroup(
        [
            "causal mask off",
            "padding mask off",
            "no √d scaling",
            "no positional encoding",
            "zero this head",
        ],
        label="What if… (recomputed live)",
    )
    run = gr.Button("Show attention", variant="primary")
    summary = gr.Markdown()
    single = gr.Plot(label="One head: scores before softmax, weights after")
    grid = gr.Plot(label="Every head of every layer (one colour scale)")
    with gr.Row():
        masks = gr.Plot(label="Masks")
        diff = gr.Plot(label="What-if: change in this head's weights")

    @friendly
    @gpu
    def attention(sentences, name, kind, layer, head, row, what_if, large, session):
        return attention_outputs(
            app, session, sentences, name, kind, layer, head, row, what_if or [], large
        )

    @friendly
    @gpu
    def grid_view(sentences, name, kind, row, large, session):
        return attention_grid(app, session, sentences, name, kind, row, large)

    inputs = [sentences, model_name, kind, layer, head, row, what_if, large, session]
    outputs = [single, masks, diff, summary]
    grid_inputs = [sentences, model_name, kind, row, large, session]
    # The head view comes first; the grid follows from the same cached trace.
    run.click(attention, inputs, outputs, api_name="attention").success(
        grid_view, grid_inputs, [grid], api_name="attention_grid"
    )
    what_if.change(attention, inputs, outputs, api_visibility="private")
    for slider in (layer, head):
        slider.release(attention, inputs, outputs, api_visibility="private")
    gr.Examples(
        [
            [
                "the small cat sees a red ball\na big dog sleeps",
                "translate",
                "cross-attention (decoder → encoder)",
            ],
            ["a b c d e f g h\nk l m", "reverse", "cross-attention (decoder → encoder)"],
            ["the teacher sees\na bird", "continue", "decoder masked self-attention"],
            ["my quiet mouse always waits on the green cat", "translate", "encoder self-attention"],
        ],
        [sentences, model_name, kind],
        label="Examples for a lecture",
    )


# -- model & training -------------------------------------------------------------------------


def parameter_table(model: Transformer) -> list[list[Any]]:
    """Parameters per component, shared (tied) tensors counted once."""
    rows, seen = [], set()
    groups = {
        "token embeddings (shared)" if model.config.tie_embeddings else "token embeddings": [
            "src_embedding",
            "tgt_embedding",
        ],
        "positional (learned only)": ["src_positional", "tgt_positional"],
        "encoder layers": ["encoder"],
        "decoder layers": ["decoder"],
        "generator": ["generator"],
    }
    for label, prefixes in groups.items():
        total = 0
        for name, param in model.named_parameters(remove_duplicate=False):
            if name.split(".")[0] in prefixes and id(param) not in seen:
                seen.add(id(param))
                total += param.numel()
        if total:
            rows.append([label, f"{total:,}"])
    rows.append(["total", f"{count_parameters(model):,}"])
    return rows


@lru_cache(maxsize=1)
def base_parameter_count() -> int:
    """Parameters of the paper's base preset (built once: 63M parameters take a second)."""
    return count_parameters(Transformer(base_config()))


def model_info(
    app: App, name: str, session: SessionModels
) -> tuple[list[list[Any]], list[list[Any]], str]:
    checkpoint = app.checkpoint(name, session)
    config = checkpoint.config
    config_rows = [[key, str(value)] for key, value in config.to_dict().items()]
    metrics = ", ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
        for k, v in checkpoint.metrics.items()
        if isinstance(v, int | float)  # the nested test-sample record is for the tests
    )
    base = base_parameter_count()
    text = (
        f"Running on **{app.device}**. Recorded metrics: {metrics or 'none'}.\n\n"
        f"The paper's base model (N=6, d_model=512, d_ff=2048, h=8, shared 37,000-token vocabulary, tied "
        f"embeddings) built with this code has **{base:,}** parameters; the paper reports 65M."
    )
    return config_rows, parameter_table(checkpoint.model), text


def training_curves(history: list[dict[str, float]], large: bool) -> Any:
    """Loss and accuracy curves; accuracy panels only for the metrics this run reports."""
    present = [key for key in ACCURACY_KEYS if any(key in row for row in history)]
    return figures.training_curves_figure(history, accuracy_keys=present, large_font=large)


def build_training_tab(app: App, large: gr.Checkbox, session: gr.State) -> None:
    with gr.Row():
        model_name = gr.Dropdown(app.model_names, value=app.model_names[0], label="Model")
        show = gr.Button("Describe")
    info = gr.Markdown()
    with gr.Row():
        config_table = gr.Dataframe(
            headers=["field", "value"], label="Configuration", max_height=360
        )
        params_table = gr.Dataframe(
            headers=["component", "parameters"], label="Parameters per component"
        )
    show.click(
        friendly(lambda n, s: model_info(app, n, s)[::-1]),
        [model_name, session],
        [info, params_table, config_table],
        api_name="model_info",
    )

    gr.Markdown("### Train a small model live (it belongs to your session alone)")
    with gr.Row():
        task = gr.Dropdown(list(RECIPES), value="reverse", label="Task")
        steps = gr.Slider(20, 3000, value=300, step=10, label="Steps")
        seed = gr.Number(value=0, precision=0, label="Seed")
    with gr.Row():
        start = gr.Button("Train", variant="primary")
        cancel = gr.Button("Cancel", variant="stop")
    progress = gr.Markdown()
    curves = gr.Plot(label="Loss and accuracy")
    gr.Markdown("### Attention as it formed during training")
    with gr.Row():
        snapshot = gr.Slider(
            0, 4, value=4, step=1, label="Snapshot (0 = first step … last = end of training)"
        )
        snap_sentence = gr.Textbox(value="a b c d e f", label="Input")
    snap_button = gr.Button("Draw this snapshot's attention")
    snap_plot = gr.Plot(label="Cross-attention (or self-attention) of every head, at this snapshot")

    @friendly
    @gpu
    def run_training(task: str, steps: float, seed: float, large: bool, session: SessionModels):
        if task not in RECIPES:
            raise ValueError(f"unknown task {task!r}; choose one of {list(RECIPES)}")
        recipe = RECIPES[task]
        n_steps = _int(steps, "steps", 1, 3000)
        config = replace(
            recipe.training,
            steps=n_steps,
            seed=_int(seed, "seed", 0, 2**31 - 1),
            eval_every=max(n_steps // 10, 10),
            device=str(app.device),
        )
        data = make_task(task, seed=config.seed, n_train=4000, n_validation=200, n_test=200)
        tokenizer = build_tokenizer(recipe, data)
        model = build_model(recipe, tokenizer)
        arch = model.config.architecture
        train_pairs = encode_examples(data.train, tokenizer, arch)
        validation_pairs = encode_examples(data.validation, tokenizer, arch)
        reports: queue.Queue = queue.Queue()
        stop = threading.Event()
        outcome: dict[str, Any] = {}
        deadline = time.monotonic() + TRAINING_TIME_LIMIT_S

        def should_stop() -> bool:
            return stop.is_set() or time.monotonic() > deadline

        def work() -> None:
            try:
                outcome["result"] = train(
                    model,
                    train_pairs,
                    config,
                    validation_pairs,
                    callback=reports.put,
                    should_stop=should_stop,
                )
            except Exception as error:
                outcome["error"] = error
            finally:
                reports.put(None)

        worker = threading.Thread(target=work, daemon=True, name=f"{TRAINING_THREAD}-{task}")
        worker.start()
        history: list[dict[str, float]] = []
        try:
            while True:
                report = reports.get()
                if report is None:
                    break
                row = {"step": report.step, "loss": report.loss}
                if report.validation:
                    row.update({f"val_{k}": v for k, v in report.validation.items()})
                history.append(row)
                if report.step % 10 == 0 or report.validation or report.step == n_steps:
                    bar = "█" * int(report.fraction * 30) + "░" * (30 - int(report.fraction * 30))
                    yield (
                        f"`{bar}` step {report.step}/{n_steps} · loss {report.loss:.3f} · "
                        f"{report.tokens_per_second:,.0f} tokens/s",
                        training_curves(history, large),
                        session,
                    )
        finally:
            stop.set()  # a cancelled or disconnected client stops the training thread too
        worker.join()
        if "error" in outcome:
            raise outcome["error"]
        result = outcome["result"]
        last_validation = next((r.validation for r in reversed(result.history) if r.validation), {})
        trained = Checkpoint(
            path=Path("."),
            model=model.eval(),
            tokenizer=tokenizer,
            metrics={f"validation_{k}": v for k, v in last_validation.items()},
            info={"task": task},
        )
        session = SessionModels(trained=trained, snapshots=result.snapshots)
        stopped = (
            f"Stopped at the time limit of {TRAINING_TIME_LIMIT_S:g} s. "
            if result.cancelled
            else ""
        )
        yield (
            f"{stopped}Done: {result.steps_done} steps in {result.seconds:.1f} s. The model is now "
            f"available as **{TRAINED_HERE}** in the other tabs; {len(result.snapshots)} snapshots kept.",
            training_curves(history, large),
            session,
        )

    event = start.click(
        run_training,
        [task, steps, seed, large, session],
        [progress, curves, session],
        api_name="train",
        concurrency_limit=1,
        concurrency_id="training",
    )
    cancel.click(None, None, None, cancels=[event], api_visibility="private")

    @friendly
    def snapshot_view(index: float, sentence: str, large: bool, session: SessionModels):
        if session is None or session.trained is None:
            raise ValueError("train a model first: snapshots are kept from the last training run")
        steps = sorted(session.snapshots)
        if not steps:
            raise ValueError("the last training run kept no snapshots")
        i = min(_int(index, "snapshot", 0, 100), len(steps) - 1)
        model = Transformer(session.trained.config)
        model.load_state_dict(session.snapshots[steps[i]])
        frozen = Checkpoint(
            path=Path("."),
            model=model.eval(),
            tokenizer=session.trained.tokenizer,
            info=session.trained.info,
        )
        kind = (
            "cross-attention (decoder → encoder)"
            if frozen.config.has_encoder
            else "decoder masked self-attention"
        )
        grid = attention_grid(
            app,
            session,
            sentence,
            TRAINED_HERE,
            kind,
            1,
            large,
            checkpoint=frozen,
            use_reference=True,
        )
        grid.update_layout(title=f"Snapshot at step {steps[i]} of training")
        return grid

    snap_button.click(
        snapshot_view, [snapshot, snap_sentence, large, session], [snap_plot], api_name="snapshot"
    )
    snapshot.release(
        snapshot_view,
        [snapshot, snap_sentence, large, session],
        [snap_plot],
        api_visibility="private",
    )


# -- the whole app ----------------------------------------------------------------------------


def build_demo(device: str | None = "auto") -> gr.Blocks:
    """The app (not launched). ``launch_options()`` gives the matching ``launch()`` arguments."""
    app = App(pick_device(device))
    with gr.Blocks(title="Transformer, step by step") as demo:
        session = gr.State(SessionModels())
        with gr.Row():
            gr.Markdown(
                "# Transformer, step by step\nA from-scratch PyTorch Transformer, opened up."
            )
            large = gr.Checkbox(label="Large font (for projecting)", value=False)
        if app.bundled.errors:
            gr.Markdown(
                "⚠️ "
                + "; ".join(
                    f"bundled model **{n}** unavailable: {r}" for n, r in app.bundled.errors.items()
                )
            )
        large.change(
            None, large, None, js="(on) => { document.body.classList.toggle('large-font', on); }"
        )
        with gr.Tab("Tokenize"):
            build_tokenize_tab(app)
        with gr.Tab("Embeddings & positions"):
            positional, pe_inputs, pe_outputs = build_positions_tab(app, large, session)
        with gr.Tab("Attention"):
            build_attention_tab(app, large, session)
        with gr.Tab("Generate"):
            build_generate_tab(app, large, session)
        with gr.Tab("Model & training"):
            build_training_tab(app, large, session)
        demo.load(positional, pe_inputs, pe_outputs, api_visibility="private")
    demo.queue(default_concurrency_limit=4, max_size=QUEUE_SIZE)
    return demo


@dataclass
class GenerationState:
    """One browser session's generation: the decoding session and the inputs it was made from
    (a change of any input starts a new one)."""

    key: tuple = ()
    decoding: DecodingSession | None = None
    source_pieces: list[str] = field(default_factory=list)


def _decoding_settings(
    strategy: str, temperature: Any, top_k: Any, top_p: Any, beam: Any, max_tokens: Any, seed: Any
) -> DecodingSettings:
    top_p_value = _float(top_p if top_p is not None else 1.0, "top-p", 0.0, 1.0)
    return DecodingSettings(
        strategy=strategy,
        temperature=_float(temperature, "temperature", 0.0, 100.0),
        top_k=_int(top_k, "top-k", 0, 1000) or None,
        top_p=None if top_p_value >= 1.0 else top_p_value,
        beam_width=_int(beam, "beam width", 1, 16),
        max_new_tokens=_int(max_tokens, "max tokens", 1, MAX_NEW_TOKENS),
        seed=_int(seed, "seed", 0, 2**31 - 1),
        capture_attention=True,
        top_k_shown=10,
    )


def _start_decoding(app: App, session: SessionModels, key: tuple) -> GenerationState:
    source, name, *settings = key
    checkpoint = app.checkpoint(name, session)
    tokenizer, model = checkpoint.tokenizer, checkpoint.model
    if not (source or "").strip():
        raise ValueError("enter a source sentence (or a prompt) first")
    if model.config.architecture == "decoder-only":
        source_ids = tokenizer.encode_ids(source, add_bos=True)
    else:
        source_ids = tokenizer.encode_ids(source)
    decoding = DecodingSession(
        model,
        source_ids,
        _decoding_settings(*settings),
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
        decode_token=lambda i: tokenizer.id_to_token(i) or "?",
    )
    pieces = [tokenizer.id_to_token(i) or "?" for i in source_ids]
    return GenerationState(key=key, decoding=decoding, source_pieces=pieces)


def _draw_generation(
    app: App, state: GenerationState, layer: Any, head: Any, large: bool, session: SessionModels
) -> tuple[Any, ...]:
    decoding = state.decoding
    checkpoint = app.checkpoint(state.key[1], session)
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    records = decoding.records if decoding else []
    empty = figures.top_k_figure(
        [1.0], ["(press Step)"], k=1, title="Next-token probabilities", large_font=large
    )
    if not records:
        return "_Press **Step** or **Run to the end**._", empty, empty, empty, state
    last = records[-1]
    layer_i = _int(layer, "layer", 1, 64) - 1
    layer_i = min(layer_i, config.n_decoder_layers - 1)
    head_i = min(_int(head, "head", 1, 64) - 1, config.n_heads - 1)
    probabilities = torch.zeros(tokenizer.vocab_size)
    probabilities[last.top_ids] = torch.tensor(last.top_probs)
    vocab = [tokenizer.id_to_token(i) or "?" for i in range(tokenizer.vocab_size)]
    top = figures.top_k_figure(
        probabilities,
        vocab,
        k=10,
        chosen=last.chosen_id,
        title=f"Step {last.step + 1}: next-token probabilities ({last.method})",
        large_font=large,
    )
    if last.cross_attention is not None:
        cross = figures.cross_attention_step_figure(
            last.cross_attention[layer_i],
            figures.token_labels(state.source_pieces),
            query_label=f"{len(last.tokens) - 1}:{last.chosen_label}",
            layer=layer_i + 1,
            large_font=large,
            height=360 if large else 300,
        )
    else:
        cross = figures.top_k_figure(
            [1.0],
            ["a decoder-only model has no cross-attention"],
            k=1,
            title="Cross-attention",
            large_font=large,
        )
    rows = [
        record.self_attention[layer_i, head_i]
        for record in records
        if record.self_attention is not None
    ]
    labels = figures.token_labels([tokenizer.id_to_token(i) or "?" for i in last.tokens])
    triangle = figures.causal_growth_figure(
        rows,
        labels[: len(rows[-1])] if rows else None,
        head=head_i + 1,
        layer=layer_i + 1,
        large_font=large,
    )
    output = tokenizer.decode(decoding.output_ids)
    lines = [
        f"**Output so far** ({len(records)} steps): `{output}`",
        "Pieces: " + " ".join(f"`{tokenizer.id_to_token(i)}`" for i in decoding.output_ids),
        f"Chosen at step {last.step + 1}: `{last.chosen_label}` with probability {last.chosen_prob:.3f} "
        f"({last.method}); entropy of the distribution {last.entropy:.2f} nats.",
    ]
    if last.beams:
        lines.append(
            "Beams: "
            + "; ".join(
                f"`{tokenizer.decode(b.tokens)}` (log-prob {b.score:.2f})" for b in last.beams[:4]
            )
        )
    if decoding.done:
        lines.append(f"**Finished** ({decoding.stop_reason}).")
    return "\n\n".join(lines), top, cross, triangle, state


def build_generate_tab(app: App, large: gr.Checkbox, session: gr.State) -> None:
    gr.Markdown(
        "The decoder writes one token at a time: it scores every token of the vocabulary, picks one "
        "(greedy, sampling or beam search), appends it and goes again. Step through it."
    )
    with gr.Row():
        source = gr.Textbox(
            value="the small cat sees a red ball",
            label="Source sentence (or prompt for 'continue')",
        )
        model_name = gr.Dropdown(app.model_names, value=app.model_names[0], label="Model")
    with gr.Row():
        strategy = gr.Radio(["greedy", "sample", "beam"], value="greedy", label="Decoding")
        temperature = gr.Slider(0, 2, value=1.0, step=0.05, label="Temperature (0 = greedy)")
        top_k = gr.Slider(0, 100, value=0, step=1, label="Top-k (0 = off)")
        top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label="Top-p (1 = off)")
    with gr.Row():
        beam = gr.Slider(1, 8, value=3, step=1, label="Beam width")
        max_tokens = gr.Slider(1, 128, value=40, step=1, label="Max new tokens")
        seed = gr.Number(value=0, precision=0, label="Seed")
        layer = gr.Slider(1, 6, value=1, step=1, label="Layer (attention views)")
        head = gr.Slider(1, 8, value=1, step=1, label="Head (self-attention view)")
    with gr.Row():
        step_button = gr.Button("Step", variant="primary")
        back_button = gr.Button("Back")
        run_button = gr.Button("Run to the end")
        reset_button = gr.Button("Reset")
    state = gr.State(GenerationState())
    summary = gr.Markdown()
    with gr.Row():
        top_plot = gr.Plot(label="Next-token distribution")
        cross_plot = gr.Plot(label="Cross-attention of the new token over the source")
    triangle_plot = gr.Plot(label="Decoder self-attention, one row per step")

    def key_of(source, name, *settings):
        return (source, name, *settings)

    def current(state: GenerationState, session: SessionModels, key: tuple) -> GenerationState:
        if state is None or state.decoding is None or state.key != key:
            return _start_decoding(app, session, key)
        return state

    settings = [strategy, temperature, top_k, top_p, beam, max_tokens, seed]
    inputs = [source, model_name, *settings, layer, head, large, session, state]
    outputs = [summary, top_plot, cross_plot, triangle_plot, state]

    @friendly
    @gpu
    def step(source, name, *rest):
        *settings_values, layer, head, large, session, state = rest
        state = current(state, session, key_of(source, name, *settings_values))
        if state.decoding.done:
            gr.Warning("Generation has finished: press Back or Reset.")
        else:
            state.decoding.step()
        return _draw_generation(app, state, layer, head, large, session)

    @friendly
    def back(source, name, *rest):
        *settings_values, layer, head, large, session, state = rest
        state = current(state, session, key_of(source, name, *settings_values))
        if state.decoding.records:
            state.decoding.back()
        return _draw_generation(app, state, layer, head, large, session)

    @friendly
    def reset(source, name, *rest):
        *settings_values, layer, head, large, session, state = rest
        state = _start_decoding(app, session, key_of(source, name, *settings_values))
        return _draw_generation(app, state, layer, head, large, session)

    @friendly
    @gpu
    def run(source, name, *rest):
        *settings_values, layer, head, large, session, state = rest
        state = current(state, session, key_of(source, name, *settings_values))
        if state.decoding.done:
            yield _draw_generation(app, state, layer, head, large, session)
            return
        # Bounded by max tokens and by GENERATION_TIME_LIMIT_S. A client that disconnects or
        # cancels makes gradio close this generator at its next yield: nothing runs on.
        deadline = time.monotonic() + GENERATION_TIME_LIMIT_S
        for _ in state.decoding.run():
            drawn = _draw_generation(app, state, layer, head, large, session)
            if time.monotonic() > deadline and not state.decoding.done:
                note = (
                    f"\n\n**Paused** at the time limit of {GENERATION_TIME_LIMIT_S:g} s per run: "
                    "press Run to the end again to go on."
                )
                yield (drawn[0] + note, *drawn[1:])
                return
            yield drawn

    step_button.click(step, inputs, outputs, api_name="generate_step")
    back_button.click(back, inputs, outputs, api_name="generate_back")
    run_button.click(run, inputs, outputs, api_name="generate", concurrency_limit=4)
    reset_button.click(reset, inputs, outputs, api_name="generate_reset")
    gr.Examples(
        [
            ["the small cat sees a red ball", "translate", "greedy"],
            ["k d a m z q b", "reverse", "greedy"],
            ["the teacher sees", "continue", "sample"],
            ["a big dog never eats the old cake", "translate", "beam"],
        ],
        [source, model_name, strategy],
        label="Examples for a lecture",
    )

    gr.Markdown("### Teacher forcing: the model's prediction at every position of a reference")
    reference = gr.Textbox(
        value="le minou petol voitte une ballette rougin", label="Reference target"
    )
    force_button = gr.Button("Compare with the reference")
    force_summary = gr.Markdown()
    force_table = gr.Dataframe(
        headers=["position", "reference", "p(reference)", "model's argmax", "match"], max_height=320
    )

    @friendly
    def force(source: str, name: str, reference_text: str, session: SessionModels):
        checkpoint = app.checkpoint(name, session)
        tokenizer, model = checkpoint.tokenizer, checkpoint.model
        if not (source or "").strip() or not (reference_text or "").strip():
            raise ValueError("enter both a source and a reference")
        if model.config.architecture == "decoder-only":
            raise ValueError(
                "teacher forcing here compares a translation with a reference: pick an encoder-decoder model"
            )
        result = teacher_force(
            model,
            tokenizer.encode_ids(source),
            tokenizer.encode_ids(reference_text, add_eos=True),
            bos_id=tokenizer.bos_id,
            decode_token=lambda i: tokenizer.id_to_token(i) or "?",
        )

        def piece(i: int) -> str:
            return tokenizer.id_to_token(i) or "?"

        rows = [
            [
                p.position + 1,
                piece(p.reference_id),
                round(p.reference_prob, 4),
                piece(p.predicted_id),
                "✓" if p.matches else "✗",
            ]
            for p in result.positions
        ]
        text = f"The model's argmax matches the reference at **{result.accuracy:.0%}** of positions; mean log-probability {result.mean_log_prob:.3f}."
        return text, rows

    force_button.click(
        force,
        [source, model_name, reference, session],
        [force_summary, force_table],
        api_name="teacher_forcing",
    )


def launch_options() -> dict[str, Any]:
    """Arguments for ``demo.launch()``, shared by ``python app.py`` and the tests."""
    return {
        "css": CSS,
        "theme": gr.themes.Soft(),
        "footer_links": ["api"],
        "show_error": True,
        "max_file_size": f"{MAX_UPLOAD_BYTES >> 20}mb",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The Transformer visualiser.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    parser.add_argument("--share", action="store_true", help="make a public gradio.live link")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    demo = build_demo(args.device)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, **launch_options())


if __name__ == "__main__":
    main()
