"""Tokenize tab: text → tokens with any tokenizer, a replay of how the tokenizer chose them, and
a BPE tokenizer learning its merges."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import gradio as gr

from transformer.text.bpe_learning import learn_bpe
from transformer.text.corpus import bundled_corpus
from transformer.text.replay import BPEReplay, UnigramReplay, WordPieceReplay, WordReplay, replay
from transformer.text.tokenization import Tokenizer, TokenizerError, train_tokenizer

from .. import limits
from ..errors import friendly, scrub
from ..inputs import as_int, size_text
from ..state import ModelRegistry, bind

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
COLORS = {"A": "#bfdbfe", "B": "#fde68a", "special": "#d1d5db", "unknown": "#fca5a5"}
REPLAY_WORDS = 60  # words drawn in the replay (the rest are counted)


@lru_cache(maxsize=16)
def corpus_tokenizer(algorithm: str, vocab_size: int) -> Tokenizer:
    """A tokenizer trained on the bundled corpus (cached: training takes ~50 ms)."""
    return train_tokenizer(bundled_corpus(), algorithm, vocab_size)


def pick_tokenizer(
    registry: ModelRegistry, choice: str, vocab_size: Any, upload: str | None
) -> Tokenizer:
    """The tokenizer a dropdown choice names (a bundled model's, one trained live, an upload)."""
    if choice not in TOKENIZER_CHOICES:
        raise ValueError(f"unknown tokenizer {choice!r}")
    kind, name = TOKENIZER_CHOICES[choice]
    if kind == "bundled":
        return registry.checkpoint(name, None).tokenizer
    if kind == "train":
        return corpus_tokenizer(name, as_int(vocab_size, "vocabulary size", 60, 4000))
    if not upload:
        raise ValueError("upload a tokenizer.json file first (or pick another tokenizer)")
    path = Path(upload)
    if path.stat().st_size > limits.MAX_UPLOAD_BYTES:
        raise ValueError(
            f"the uploaded file is larger than the limit of {size_text(limits.MAX_UPLOAD_BYTES)}"
        )
    return Tokenizer.load(path)


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


def _bpe_line(head: str, detail: BPEReplay, step: int) -> str:
    if detail.whole_word:
        return head + " (whole word in the vocabulary: no merge)"
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
    return f"{head}<br>&nbsp;&nbsp;{state} — {note}"


def _wordpiece_line(head: str, detail: WordPieceReplay, step: int) -> str:
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
    return f"{head}<br>&nbsp;&nbsp;{note}"


def _unigram_line(head: str, detail: UnigramReplay, step: int) -> str:
    shown = detail.pieces[:step] if step else detail.pieces[:0]
    parts = [f"`{p.piece}` ({p.score:.2f})" for p in shown]
    note = " + ".join(parts) if parts else f"best segmentation of {len(detail.pieces)} pieces"
    if len(shown) == len(detail.pieces):
        note += f" = total log-probability {detail.total_score:.2f}"
    return f"{head}<br>&nbsp;&nbsp;{note}"


def replay_markdown(words: list[WordReplay], step: int) -> str:
    """Every word's replay, drawn up to ``step`` (the stepper), as markdown."""
    if not words:
        return "_Nothing to replay: the text is empty._"
    lines = []
    for word in words[:REPLAY_WORDS]:
        head = f"**`{word.word}`** → " + " ".join(f"`{p}`" for p in word.pieces)
        detail = word.steps
        if word.added_token or detail is None:
            lines.append(head + " (added token, matched whole)")
        elif isinstance(detail, BPEReplay):
            lines.append(_bpe_line(head, detail, step))
        elif isinstance(detail, WordPieceReplay):
            lines.append(_wordpiece_line(head, detail, step))
        elif isinstance(detail, UnigramReplay):
            lines.append(_unigram_line(head, detail, step))
    if len(words) > REPLAY_WORDS:
        lines.append(f"_… and {len(words) - REPLAY_WORDS} more words_")
    return "\n\n".join(lines)


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
    token table, replay markdown)."""
    if text is None or len(text) > limits.MAX_TEXT:
        raise ValueError(
            f"the text is longer than {limits.MAX_TEXT:,} characters; paste a shorter one"
        )
    tokenizer = pick_tokenizer(registry, choice, vocab, upload)
    segments, rows, line = highlighted(tokenizer, text)
    try:
        replay_text = replay_markdown(replay(tokenizer, text), as_int(step, "step", 0, 1000))
    except TokenizerError as error:  # e.g. a WordLevel upload: tokens yes, no steps to replay
        replay_text = f"_No replay for this tokenizer: {scrub(str(error))}_"
    out_b: tuple[Any, str] = ([], "")
    if compare and compare != "(none)":
        seg_b, _, line_b = highlighted(pick_tokenizer(registry, compare, vocab, upload), text)
        out_b = (seg_b, line_b)
    return line, segments, out_b[1], out_b[0], rows, replay_text


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


def build(registry: ModelRegistry) -> None:
    """Lay out the tab and wire its events (``/tokenize``, ``/learn_bpe``)."""
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
    with gr.Row():
        with gr.Column():
            stats = gr.Markdown()
            pieces = gr.HighlightedText(
                label="Tokens", color_map=COLORS, show_inline_category=False
            )
        with gr.Column():
            stats_b = gr.Markdown()
            pieces_b = gr.HighlightedText(
                label="Tokens (comparison)", color_map=COLORS, show_inline_category=False
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

    handler = bind(tokenize, registry)
    inputs = [text, choice, vocab, upload, compare, step]
    outputs = [stats, pieces, stats_b, pieces_b, table, replay_md]
    run.click(handler, inputs, outputs, api_name="tokenize")
    text.submit(handler, inputs, outputs, api_visibility="private")
    step.release(handler, inputs, outputs, api_visibility="private")
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
    learn_button = gr.Button("Learn")
    learn_md = gr.Markdown()
    learn_table = gr.Dataframe(
        headers=["rank", "pair", "new token", "count", "vocabulary size"],
        max_height=300,
        label="Merges in the order they were learned",
    )
    learn_inputs = [corpus_box, merges, word]
    learn_button.click(learn, learn_inputs, [learn_md, learn_table], api_name="learn_bpe")
    merges.release(learn, learn_inputs, [learn_md, learn_table], api_visibility="private")
