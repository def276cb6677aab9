"""Tokenize tab: text → tokens with any tokenizer (our bundled and live-trained ones, the real
BERT, GPT-2 and GPT-4 tokenizers, a pretrained model's, an upload), a replay of how the tokenizer
chose them, and a BPE tokenizer learning its merges.

Every control redraws the view (the Tokenize button stays for the ``/tokenize`` endpoint); the
view is drawn when the page opens."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.context import Context

from transformer.text.bpe_learning import learn_bpe
from transformer.text.corpus import bundled_corpus
from transformer.text.real_tokenizers import REAL_TOKENIZERS, load_real_tokenizer
from transformer.text.replay import (
    BPEReplay,
    UnigramReplay,
    WordPieceReplay,
    WordReplay,
    readable_piece,
    replay,
)
from transformer.text.tokenization import Tokenizer, TokenizerError, train_tokenizer

from .. import limits
from ..errors import friendly, scrub
from ..inputs import as_int, size_text
from ..state import TRAINED_HERE, ModelRegistry, bind

TOKENIZER_CHOICES = {
    "translate model's tokenizer (BPE)": ("bundled", "translate"),
    "reverse model's tokenizer (WordPiece)": ("bundled", "reverse"),
    "continue model's tokenizer (Unigram)": ("bundled", "continue"),
    "BPE, trained live on the bundled corpus": ("train", "bpe"),
    "byte-level BPE (GPT-2 style), trained live": ("train", "byte_bpe"),
    "WordPiece (BERT style), trained live": ("train", "wordpiece"),
    "Unigram (SentencePiece style), trained live": ("train", "unigram"),
    **{info.label: ("real", name) for name, info in REAL_TOKENIZERS.items()},
    "uploaded tokenizer.json": ("upload", ""),
}
"""The fixed menu; `tokenizer_choices` adds each pretrained model's own tokenizer."""
COLORS = {"A": "#bfdbfe", "B": "#fde68a", "special": "#d1d5db", "unknown": "#fca5a5"}
REPLAY_WORDS = 60  # words drawn in the replay (the rest are counted)
DEFAULT_VOCAB = 500

VOCAB_RANGE: dict[str, tuple[int, int]] = {
    "bpe": (115, 932),
    "byte_bpe": (263, 1055),
    "wordpiece": (144, 879),
    "unigram": (116, 779),
}
"""Vocabulary sizes each algorithm can train on the bundled corpus, measured (tests train at
both ends): below the low end Unigram and byte-level BPE refuse and BPE/WordPiece return their
alphabet anyway; above the high end every size gives the same tokenizer."""
VOCAB_INFO: dict[str, str] = {
    "bpe": "its 108 characters + 7 special tokens at least; past {hi:,} no pair occurs twice",
    "byte_bpe": "256 bytes + 7 special tokens at least; past {hi:,} no pair occurs twice",
    "wordpiece": "every character, alone and as a ##continuation, + 7 special tokens at least; "
    "past {hi:,} no pair is left to merge",
    "unigram": "room for every character at least; past {hi:,} no more pieces are worth keeping",
}


@lru_cache(maxsize=16)
def corpus_tokenizer(algorithm: str, vocab_size: int) -> Tokenizer:
    """A tokenizer trained on the bundled corpus (cached: training takes ~50 ms)."""
    return train_tokenizer(bundled_corpus(), algorithm, vocab_size)


def _pretrained_names(registry: ModelRegistry) -> list[str]:
    return [
        n
        for n in registry.model_names
        if n not in registry.bundled.models
        and n not in registry.bundled.errors
        and n != TRAINED_HERE
    ]


def tokenizer_choices(registry: ModelRegistry) -> dict[str, tuple[str, str]]:
    """Menu label → (kind, name): the fixed `TOKENIZER_CHOICES` with each pretrained model's own
    tokenizer (the shipped all-MiniLM-L6-v2, ``--model`` ones) before the upload."""
    choices = {k: v for k, v in TOKENIZER_CHOICES.items() if v[0] != "upload"}
    for name in _pretrained_names(registry):
        choices[f"{name} model's tokenizer"] = ("model", name)
    choices["uploaded tokenizer.json"] = ("upload", "")
    return choices


def vocab_in_range(algorithm: str, vocab_size: Any) -> tuple[int, str]:
    """The vocabulary size to train ``algorithm`` with, and a note when the asked size was
    moved into the range the bundled corpus allows (`VOCAB_RANGE`)."""
    asked = as_int(vocab_size, "vocabulary size", 1, 1_000_000)
    low, high = VOCAB_RANGE[algorithm]
    size = min(max(asked, low), high)
    if size == asked:
        return size, ""
    why = "the smallest" if asked < low else "the largest"
    return size, f" ({asked:,} asked; {size:,} is {why} {algorithm} can learn on this corpus)"


def pick_tokenizer(
    registry: ModelRegistry, choice: str, vocab_size: Any, upload: str | None
) -> Tokenizer:
    """The tokenizer a dropdown choice names (a bundled model's, one trained live, a real one, a
    pretrained model's, an upload)."""
    return _pick(registry, choice, vocab_size, upload)[0]


def _pick(
    registry: ModelRegistry, choice: str, vocab_size: Any, upload: str | None
) -> tuple[Tokenizer, str]:
    """The tokenizer and a note on its vocabulary size (for live-trained ones)."""
    choices = tokenizer_choices(registry)
    if choice not in choices:
        raise ValueError(f"unknown tokenizer {choice!r}; choose one of {list(choices)}")
    kind, name = choices[choice]
    if kind == "bundled":
        return registry.checkpoint(name, None).tokenizer, ""
    if kind == "model":
        return registry.checkpoint(name, None).tokenizer, ""
    if kind == "real":
        return load_real_tokenizer(name), ""
    if kind == "train":
        size, note = vocab_in_range(name, vocab_size)
        return corpus_tokenizer(name, size), note
    if not upload:
        raise ValueError("upload a tokenizer.json file first (or pick another tokenizer)")
    path = Path(upload)
    if path.stat().st_size > limits.MAX_UPLOAD_BYTES:
        raise ValueError(
            f"the uploaded file is larger than the limit of {size_text(limits.MAX_UPLOAD_BYTES)}"
        )
    return Tokenizer.load(path), ""


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 token"``, ``"2 tokens"``, ``"1,000 characters"``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def visible(text: str) -> str:
    """Text for a code span: a space shown as ␣, line breaks and tabs as ↵ and ⇥."""
    return text.replace(" ", "␣").replace("\n", "↵").replace("\r", "␍").replace("\t", "⇥")


def unreadable_characters(tokenizer: Tokenizer, text: str, records: list[Any]) -> list[str]:
    """The characters of ``text`` that the tokenizer reads as its unknown token, each once, in
    order: those, inside the spans that became unknown, that become unknown on their own."""
    unk = tokenizer.unk_id
    if unk is None:
        return []
    found: list[str] = []
    for record in records:
        if record.id != unk or record.start == record.end:
            continue
        for char in text[record.start : record.end]:
            if char.isspace() or char in found:
                continue
            if unk in tokenizer.encode_ids(char):
                found.append(char)
    return found


def unknown_message(tokenizer: Tokenizer, text: str, records: list[Any]) -> str:
    """What to tell the user when part of the text became the unknown token (else "")."""
    unk = tokenizer.unk_id
    spans = [r for r in records if unk is not None and r.id == unk and r.start < r.end]
    if not spans:
        return ""
    chars = unreadable_characters(tokenizer, text, records)
    if chars:
        listed = ", ".join(f"`{c}` (U+{ord(c):04X})" for c in chars)
        return (
            f"\n\n⚠️ This tokenizer cannot read {plural(len(chars), 'character')}: {listed}; "
            f"{'it becomes' if len(spans) == 1 else 'they make'} "
            f"{plural(len(spans), 'unknown token')} ({tokenizer.id_to_token(unk)})."
        )
    words = ", ".join(f"`{text[r.start : r.end]}`" for r in spans[:5])
    return (
        f"\n\n⚠️ {plural(len(spans), 'piece')} became {tokenizer.id_to_token(unk)}: {words} "
        "cannot be built from this vocabulary's pieces, although each character alone can."
    )


def highlighted(
    tokenizer: Tokenizer, text: str
) -> tuple[list[tuple[str, str | None]], list[list[Any]], str]:
    """HighlightedText segments, table rows and a stats line for one text.

    Byte-level tokenizers (GPT-2, cl100k_base, our byte-level BPE) show each piece as the text
    its bytes stand for (a byte that is part of a character split across pieces as ``<0xE2>``),
    and the stats line explains the byte symbols found (``Ġ`` is a space). Table rows are
    ``[index, piece, id, start, end, special, word, reads as, bytes explained]``.
    """
    records = tokenizer.encode(text)
    byte_level = tokenizer.algorithm == "byte_bpe"
    segments: list[tuple[str, str | None]] = []
    rows = []
    notes: list[str] = []
    cursor = 0
    for index, record in enumerate(records):
        label = "unknown" if record.id == tokenizer.unk_id else ("A" if index % 2 == 0 else "B")
        if record.special:
            reads, note = record.piece, "special token"
        elif byte_level:
            readable = readable_piece(record.piece)
            reads, note = readable.text, "; ".join(readable.notes)
            if not reads.strip():  # a piece of spaces or line breaks: make them visible
                reads = visible(reads)
            notes.extend(n for n in readable.notes if n not in notes)
        else:
            reads, note = text[record.start : record.end], ""
        rows.append(
            [
                index,
                record.piece,
                record.id,
                record.start,
                record.end,
                record.special,
                record.word,
                reads,
                note,
            ]
        )
        if record.special and record.start == record.end:
            segments.append((record.piece, "special"))
            continue
        if byte_level:  # every byte belongs to a piece: draw the pieces themselves
            segments.append((reads, "special" if record.special else label))
            continue
        if record.start < cursor:  # overlapping pieces (split characters)
            continue
        if record.start > cursor:
            segments.append((text[cursor : record.start], None))
        segments.append((text[record.start : record.end], label))
        cursor = record.end
    if not byte_level and cursor < len(text):
        segments.append((text[cursor:], None))
    n_tokens = len(records)
    ratio = f"{len(text) / n_tokens:.2f}" if n_tokens else "–"
    stats = (
        f"**{tokenizer.algorithm}**, vocabulary {tokenizer.vocab_size:,}: "
        f"{plural(len(text), 'character')} → **{plural(n_tokens, 'token')}**, "
        f"{ratio} characters per token"
    )
    if notes:
        shown = notes[:6] + ([f"… {len(notes) - 6} more in the table"] if len(notes) > 6 else [])
        stats += "\n\nBytes explained: " + "; ".join(shown) + "."
    stats += unknown_message(tokenizer, text, records)
    return segments, rows, stats


def _symbol(symbol: str, byte_level: bool) -> str:
    """A symbol for the replay: byte-level ones as the text they stand for (␣ a space)."""
    return visible(readable_piece(symbol).text) if byte_level else symbol


def _bpe_line(head: str, detail: BPEReplay, step: int, byte_level: bool = False) -> str:
    if detail.whole_word:
        return head + " (whole word in the vocabulary: no merge)"
    shown = detail.merges[:step]
    symbols = shown[-1].symbols if shown else detail.symbols
    state = " ".join(f"`{_symbol(s, byte_level)}`" for s in symbols)
    last = shown[-1] if shown else None
    note = (
        f"merge {len(shown)}/{len(detail.merges)}: `{_symbol(last.pair[0], byte_level)}` + "
        f"`{_symbol(last.pair[1], byte_level)}` → `{_symbol(last.result, byte_level)}` "
        f"(rank {last.rank:,})"
        if last
        else f"start: {plural(len(detail.symbols), 'symbol')}, "
        f"{plural(len(detail.merges), 'merge')} to apply"
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
    note = "; ".join(parts) or plural(len(detail.choices), "greedy longest-match choice")
    if detail.unknown_reason and len(shown) == len(detail.choices):
        note += f" — unknown: {detail.unknown_reason}"
    return f"{head}<br>&nbsp;&nbsp;{note}"


def _unigram_line(head: str, detail: UnigramReplay, step: int) -> str:
    shown = detail.pieces[:step] if step else detail.pieces[:0]
    parts = [f"`{p.piece}` ({p.score:.2f})" for p in shown]
    note = (
        " + ".join(parts) if parts else f"best segmentation: {plural(len(detail.pieces), 'piece')}"
    )
    if len(shown) == len(detail.pieces):
        note += f" = total log-probability {detail.total_score:.2f}"
    return f"{head}<br>&nbsp;&nbsp;{note}"


def word_steps(word: WordReplay) -> int:
    """How many steps a word's replay has (merges, greedy choices or pieces)."""
    detail = word.steps
    if isinstance(detail, BPEReplay):
        return len(detail.merges)
    if isinstance(detail, WordPieceReplay):
        return len(detail.choices)
    if isinstance(detail, UnigramReplay):
        return len(detail.pieces)
    return 0


def replay_steps(words: list[WordReplay]) -> int:
    """The most steps any drawn word has: the step slider's end."""
    return max((word_steps(w) for w in words[:REPLAY_WORDS]), default=0)


def replay_markdown(words: list[WordReplay], step: int, byte_level: bool = False) -> str:
    """Every word's replay, drawn up to ``step`` (the stepper), as markdown. Byte-level words
    show their symbols as text (␣ for a space; the tokenizer stores it as Ġ)."""
    if not words:
        return "_Nothing to replay: the text is empty._"
    lines = []
    if byte_level:
        lines.append(
            "_Byte-level BPE: the text becomes bytes first (a space, ␣ here, is stored as Ġ); "
            "then the adjacent pair with the lowest rank (learned earliest) merges, again and "
            "again._"
        )
    for word in words[:REPLAY_WORDS]:
        head = f"**`{_symbol(word.word, byte_level)}`** → " + " ".join(
            f"`{_symbol(p, byte_level)}`" for p in word.pieces
        )
        detail = word.steps
        if word.added_token or detail is None:
            lines.append(head + " (added token, matched whole)")
        elif isinstance(detail, BPEReplay):
            lines.append(_bpe_line(head, detail, step, byte_level))
        elif isinstance(detail, WordPieceReplay):
            lines.append(_wordpiece_line(head, detail, step))
        elif isinstance(detail, UnigramReplay):
            lines.append(_unigram_line(head, detail, step))
    if len(words) > REPLAY_WORDS:
        lines.append(f"_… and {plural(len(words) - REPLAY_WORDS, 'more word')}_")
    return "\n\n".join(lines)


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


def build(registry: ModelRegistry) -> None:
    """Lay out the tab and wire its events (``/tokenize``, ``/learn_bpe``); the view is drawn
    when the page opens and redrawn by every control."""
    gr.Markdown(
        "Text becomes **tokens** before a Transformer sees it. Pick a tokenizer — ours, or the real "
        "BERT, GPT-2 and GPT-4 ones — type anything, and watch the pieces; then replay how the "
        "tokenizer chose them, merge by merge."
    )
    choices = tokenizer_choices(registry)
    first_choice = "BPE, trained live on the bundled corpus"
    first_compare = "WordPiece (BERT style), trained live"
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(
                label="Text", value="The transformer attends to every token.", lines=3
            )
        with gr.Column(scale=2):
            choice = gr.Dropdown(list(choices), value=first_choice, label="Tokenizer")
            low, high = VOCAB_RANGE["bpe"]
            vocab = gr.Slider(
                low,
                high,
                value=DEFAULT_VOCAB,
                step=1,
                label=f"Vocabulary size (bpe trained live: {low:,} to {high:,})",
                info=VOCAB_INFO["bpe"].format(hi=high),
            )
            upload = gr.File(
                label="tokenizer.json (for 'uploaded')",
                file_types=[".json"],
                type="filepath",
                visible=False,  # shown when "uploaded tokenizer.json" is chosen
            )
    compare = gr.Dropdown(
        ["(none)", *choices], value=first_compare, label="Compare side by side with"
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
        headers=[
            "#",
            "piece",
            "id",
            "start",
            "end",
            "special",
            "word",
            "reads as",
            "bytes explained",
        ],
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
    live_inputs = [text, choice, vocab, upload, compare]
    live_outputs = [*outputs, vocab, step, upload]
    root = Context.root_block
    gr.on(
        [
            *([root.load] if root is not None else []),
            text.input,
            text.submit,
            choice.input,
            compare.input,
            vocab.release,
            upload.change,
        ],
        bind(tokenize_view, registry),
        live_inputs,
        live_outputs,
        api_visibility="private",
        trigger_mode="always_last",
    )
    step.release(handler, inputs, outputs, api_visibility="private", trigger_mode="always_last")
    gr.Examples(
        [
            ["The transformer attends to every token.", first_choice, first_compare],
            [
                "unbelievably tokenization-friendly",
                "WordPiece (BERT style), trained live",
                REAL_TOKENIZERS["bert-base-uncased"].label,
            ],
            [
                "Ünïcödé, emoji 🤖 and 中文 all work",
                REAL_TOKENIZERS["gpt2"].label,
                REAL_TOKENIZERS["cl100k_base"].label,
            ],
            [
                "def add(a, b):\n    return a + b  # 12345 tokens",
                REAL_TOKENIZERS["cl100k_base"].label,
                REAL_TOKENIZERS["gpt2"].label,
            ],
            [
                "a big dog sleeps under the old zebra",
                "translate model's tokenizer (BPE)",
                "(none)",
            ],
        ],
        [text, choice, compare],
        live_outputs,
        fn=bind(run_example, registry),
        run_on_click=True,
        cache_examples=False,  # they depend on the slider's state and the registry
        label="Examples for a lecture (click one to run it)",
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
    gr.on(
        [
            *([root.load] if root is not None else []),
            merges.release,
            word.submit,
            word.blur,
            corpus_box.blur,
        ],
        learn,
        learn_inputs,
        [learn_md, learn_table],
        api_visibility="private",
        trigger_mode="always_last",
    )
