"""Attention at scale: one long text, every head summarised, one head zoomed, rollout.

The ``/attention_scale`` endpoint runs one reduced pass per (model, text)
(:func:`transformer.lab.attention_stats.long_pass`, cached here) and draws from it: a control that
only changes what is drawn does not run the model again."""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import gradio as gr
import torch

from transformer import figures
from transformer.figures.attention_scale import (
    PATTERN_MARKS,
    downsampled_head_figure,
    head_overview_figure,
    rollout_figure,
    window_figure,
)
from transformer.lab.analysis import shown_pieces
from transformer.lab.attention_stats import (
    PATTERN_RULES,
    STATISTICS,
    LongPass,
    block_average,
    long_pass,
)
from transformer.pretrained.checkpoint import Checkpoint

from ...serving import limits
from ...serving.errors import InputError, friendly, gpu, readable_list
from ...serving.inputs import as_int, as_text
from ...serving.state import ModelRegistry, SessionModels, SharedViews

SCALE_EXAMPLE = (
    "The cat sat on the mat because it was tired. It slept until the sun rose over the hills, "
    "and then it walked to the kitchen, where the dog was already waiting for breakfast."
)
DOWNSAMPLED_SIDE = 200  # cells per side of a head's overview: 200 × 200 float32 is 160 KB
MAX_WINDOW = 128  # queries in a zoomed window
WINDOW_CONTEXT = 128  # keys shown before the window (and after it, for an encoder)
MAX_TOP_K = 8
CAVEAT = (
    "**What rollout tells, and what it does not.** Rollout (Abnar & Zuidema, 2020) multiplies, "
    "layer by layer, the heads' *mean* weights with the residual counted as half "
    "(`0.5·A + 0.5·I`, rows renormalised). It assumes every layer mixes tokens linearly by "
    "those weights; it ignores the values (a head may attend strongly and pass on little), the "
    "feed-forward layers, the norms and the differences between heads (averaged away). Read it "
    "as a rough map of where information *could* flow, not as an explanation of the output."
)

CACHE_PASSES = 2  # a pass of SmolLM2 at 2,000 tokens keeps about 400 MB
# The last passes of the shared models, by (model, text), bounded by count. A pass asked for
# while it runs (a text pasted, then "Show every head": the box's blur and the click each ask
# for it) is waited for rather than run a second time beside it, which on a CPU slows both.
_passes = SharedViews(max_bytes=sys.maxsize, max_entries=CACHE_PASSES)
# The (model, text) each session's figures were last drawn of (the newest sessions kept), so
# that the note on a changed text is not shown under figures already of that text.
_drawn: OrderedDict[int, tuple[str, str]] = OrderedDict()
_drawn_lock = threading.Lock()
DRAWN_SESSIONS = 1_024


GENERAL_LIMIT = (
    f"Longest input: **{limits.MAX_SCALE_TOKENS:,} tokens** (SmolLM2 reads 8,192; this view "
    "stops there to keep memory and time in bounds), or the model's own limit where lower "
    "(all-MiniLM-L6-v2: 512). Choosing a model states its own."
)


def longest_input(checkpoint: Checkpoint) -> int:
    """The most tokens this view reads with this model: the model's own limit, or ours."""
    return min(checkpoint.config.max_len, limits.MAX_SCALE_TOKENS)


def limit_line(registry: ModelRegistry, name: str, session: SessionModels | None) -> str:
    """The longest input, stated beside the text box before it is reached."""
    try:
        checkpoint = registry.checkpoint(name, session)
    except InputError as error:
        return str(error)
    own = checkpoint.config.max_len
    cap = longest_input(checkpoint)
    why = (
        f"this model reads at most {own:,} tokens"
        if cap == own
        else f"this model reads {own:,}; this view stops at {cap:,} to keep memory and time "
        "in bounds"
    )
    return f"Longest input here: **{cap:,} tokens** ({why}; about 4 characters a token)."


def _ids(checkpoint: Checkpoint, text: str, name: str) -> torch.Tensor:
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    if config.architecture == "decoder-only":
        ids = tokenizer.encode_ids(text, add_bos=config.prompt_bos)
    else:
        ids = tokenizer.encoding(text).ids
    cap = longest_input(checkpoint)
    if len(ids) > cap:
        raise InputError(
            f"the text is {len(ids):,} tokens long; with {name} this view reads at most "
            f"{cap:,}: shorten it"
        )
    if len(ids) < 2:
        raise InputError("enter a text of at least two tokens")
    return torch.tensor(ids, dtype=torch.long)


def reduced_pass(
    registry: ModelRegistry, name: str, text: str, session: SessionModels | None
) -> tuple[LongPass, list[str]]:
    """The reduced pass of ``text`` (cached per model and text for the shared models) and the
    token pieces."""
    checkpoint = registry.checkpoint(name, session)
    text = as_text(text, "text").strip()
    if not text:
        raise InputError("enter a text")
    if len(text) > limits.MAX_TEXT:
        raise InputError(f"at most {limits.MAX_TEXT:,} characters (got {len(text):,})")
    ids = _ids(checkpoint, text, name)
    # Written as every view writes a piece (␣licenses, not Ġlicenses).
    pieces = shown_pieces(
        checkpoint.tokenizer, [checkpoint.tokenizer.id_to_token(int(i)) or "?" for i in ids]
    )
    if not registry.is_shared(name, checkpoint):
        return _timed_pass(registry, name, checkpoint, ids), pieces
    key = _key(registry, name, text)
    return _passes.get(key, lambda: (_timed_pass(registry, name, checkpoint, ids), True)), pieces


def _timed_pass(
    registry: ModelRegistry, name: str, checkpoint: Checkpoint, ids: torch.Tensor
) -> LongPass:
    """:func:`long_pass` of ``ids`` (``(T,)``), its time kept for the next estimate."""
    started = time.perf_counter()
    result = long_pass(checkpoint.model, ids, on_layer=_progress.get())
    _measured(registry.menu_name(name), checkpoint, len(ids), time.perf_counter() - started)
    return result


# Where the pass reports the layer it has reached (the page's progress bar), set per call by
# :func:`attention_scale_live`; None for the API endpoint.
_progress: contextvars.ContextVar[Callable[[int, int], None] | None] = contextvars.ContextVar(
    "scale_progress", default=None
)

# Seconds per unit of work (:func:`_work`) that the last pass of each model took here: what
# the estimate before a long view starts is made from (none before a model's first pass).
_seconds_per_work: dict[str, float] = {}


def _layers(config: Any) -> int:
    """The layers this view observes: the decoder's of a decoder-only model, else the encoder's."""
    if config.architecture == "decoder-only":
        return int(config.n_decoder_layers)
    return int(config.n_encoder_layers)


def _work(checkpoint: Checkpoint, n_tokens: int) -> float:
    """A pass's work in rough units: per observed layer, the attention's T² per head and the
    projections' and feed-forward's T·d_model."""
    config = checkpoint.config
    return _layers(config) * n_tokens * (n_tokens * config.n_heads + 12 * config.d_model)


def _measured(model: str, checkpoint: Checkpoint, n_tokens: int, seconds: float) -> None:
    if n_tokens >= 64:  # a short pass is mostly fixed overhead: it would mislead the estimate
        _seconds_per_work[model] = seconds / _work(checkpoint, n_tokens)


def estimate_seconds(model: str, checkpoint: Checkpoint, n_tokens: int) -> float | None:
    """About how long a pass of ``n_tokens`` takes here, from this model's last long pass
    (None before one has run)."""
    rate = _seconds_per_work.get(model)
    return None if rate is None else rate * _work(checkpoint, n_tokens)


def stale_note(registry: ModelRegistry, text: str, name: str, session: SessionModels) -> Any:
    """The summary while the text box holds a text the figures are not of: its length in
    tokens, how to redraw and, where a pass of this model has run here, about how long the
    redraw will take (or why the text cannot be read). Nothing (``gr.skip()``) where the
    figures are of this text, or a redraw of it has started."""
    try:
        checkpoint = registry.checkpoint(name, session)
        text = as_text(text, "text").strip()
        if not text:
            return "⚠️ **Enter a text**: the figures below are of the text before."
        if len(text) > limits.MAX_TEXT:
            raise InputError(f"at most {limits.MAX_TEXT:,} characters (got {len(text):,})")
        ids = _ids(checkpoint, text, name)
    except (InputError, ValueError) as error:
        return f"⚠️ **The text changed**: {error}. The figures below are of the text before."
    key = _key(registry, name, text)
    # A redraw of this very text has started or ended already (the box's blur and the click on
    # "Show every head" each start one, and this note may start after them): the figures are,
    # or are about to be, of this text, and the note would stay over them. Asked in this order,
    # a pass that ends in between is found kept.
    running = _passes.computing(key)
    cached = _passes.holds(key)
    with _drawn_lock:
        drawn = session is not None and _drawn.get(id(session)) == key
    if running or drawn:
        return gr.skip()
    seconds = None if cached else estimate_seconds(registry.menu_name(name), checkpoint, len(ids))
    when = (
        " (drawn at once: this text was read before)"
        if cached
        else f" (about {seconds:.0f} s on this machine)"
        if seconds is not None and seconds >= 1
        else ""
    )
    return (
        f"⚠️ **The text changed** (now **{len(ids):,} tokens**): the figures below are still "
        f"of the text before. Click outside the box, or press **Show every head**, to redraw"
        f"{when}."
    )


def _key(registry: ModelRegistry, name: str, text: Any) -> tuple[str, str]:
    """A pass's key: the model as the menu names it and the text as the pass reads it."""
    return registry.menu_name(name), as_text(text, "text").strip()


def _remember_drawn(session: SessionModels | None, key: tuple[str, str]) -> None:
    if session is None:
        return
    with _drawn_lock:
        _drawn[id(session)] = key
        _drawn.move_to_end(id(session))
        while len(_drawn) > DRAWN_SESSIONS:
            _drawn.popitem(last=False)


def _statistic(value: Any) -> str:
    if value not in STATISTICS:
        raise InputError(f"statistic: choose {readable_list(list(STATISTICS))}")
    return str(value)


def _rules() -> str:
    rules = "; ".join(f"**{PATTERN_MARKS[n]}** {n}: {rule}" for n, rule in PATTERN_RULES)
    return f"Each head is named by the first rule that holds: {rules}."


@friendly
@gpu
def attention_scale(
    registry: ModelRegistry,
    text: str,
    name: str,
    statistic: str,
    layer: Any,
    head: Any,
    first_query: Any,
    window: Any,
    top_k: Any,
    token: Any,
    large: bool,
    session: SessionModels,
) -> tuple[Any, Any, Any, Any, str]:
    """The ``/attention_scale`` endpoint: every head coloured by ``statistic`` (layers ×
    heads), one head downsampled, a window of its queries with their top-k keys as edges, the
    rollout of one token, and a summary. Positions are 0-based; layer and head 1-based."""
    statistic = _statistic(statistic)
    passed, pieces = reduced_pass(registry, name, text, session)
    length = passed.length
    n_layers = len(passed.layers)
    n_heads = passed.layers[0].queries.shape[0]
    layer_i = as_int(layer, "layer", 1, n_layers) - 1
    head_i = as_int(head, "head", 1, n_heads) - 1
    count = as_int(window, "window size", 1, MAX_WINDOW)
    first = as_int(first_query, "first query", 0, length - 1)
    count = min(count, length - first)
    k = as_int(top_k, "top-k", 0, MAX_TOP_K)
    token_i = as_int(token, "rollout token", -1, length - 1)
    token_i = length - 1 if token_i < 0 else token_i

    patterns = passed.patterns()
    stats = {n: passed.statistic(n) for n in STATISTICS}
    overview = head_overview_figure(
        stats[statistic],
        patterns,
        statistic,
        STATISTICS[statistic],
        stats,
        selected=(layer_i, head_i),
        large_font=large,
    )
    where = f"layer {layer_i + 1}, head {head_i + 1}"
    weights = passed.head_weights(layer_i, head_i)  # (T, T), one head only
    pooled, block = block_average(weights, DOWNSAMPLED_SIDE)
    head_fig = downsampled_head_figure(
        pooled,
        block,
        length,
        f"{where} ({patterns[layer_i][head_i]}), all {length:,} tokens",
        window=(first, count),
        large_font=large,
    )
    rows = weights[first : first + count]
    start = max(0, first - WINDOW_CONTEXT)
    stop = first + count if passed.causal else min(length, first + count + WINDOW_CONTEXT)
    window_fig = window_figure(
        rows[:, start:stop],
        first,
        (start, stop),
        pieces,
        f"{where}: queries {first}–{first + count - 1}, keys {start}–{stop - 1}",
        top_k=k,
        full_weights=rows,
        large_font=large,
    )
    rollout_fig = rollout_figure(passed.rollout_row(token_i), token_i, pieces, large_font=large)
    counts: dict[str, int] = {}
    for row in patterns:
        for p in row:
            counts[p] = counts.get(p, 0) + 1
    found = ", ".join(f"{n} {counts[n]}" for n, _ in PATTERN_RULES if n in counts)
    summary = (
        f"**{length:,} tokens**, {n_layers} layers × {n_heads} heads = {n_layers * n_heads} "
        f"heads ({found}). The overview colours every head by *{STATISTICS[statistic]}*; "
        f"choose a head with the Layer and Head sliders. {_rules()} The head's overview "
        + (
            f"averages blocks of {block} × {block} weights; "
            if block > 1
            else "shows every weight; "
        )
        + "the window shows its chosen queries exactly."
    )
    _remember_drawn(session, _key(registry, name, text))
    return overview, head_fig, window_fig, rollout_fig, summary


def _kept(value: Any, most: int) -> int:
    """A slider's value moved into 1..most (1 where it is not a number)."""
    try:
        return min(max(1, int(float(value))), most)
    except (TypeError, ValueError, OverflowError):
        return 1


# The default gradio replaces with the event's own tracker (it looks for a gr.Progress default).
_PAGE_PROGRESS = gr.Progress()


def attention_scale_live(
    registry: ModelRegistry, *inputs: Any, progress: gr.Progress = _PAGE_PROGRESS
) -> tuple[Any, Any, Any, Any, str]:
    """:func:`attention_scale` for the page's own events: while a new pass runs, a progress bar
    says the layer it has reached ("layer 12 of 30"); a pass already cached draws at once."""

    def report(done: int, total: int) -> None:
        progress((done, total), desc=f"Reading the text: layer {done} of {total}", unit="layers")

    token = _progress.set(report)
    try:
        return attention_scale(registry, *inputs)
    finally:
        _progress.reset(token)


def scale_controls(
    registry: ModelRegistry, name: str, session: SessionModels, layer: Any = 1, head: Any = 1
) -> tuple[str, Any, Any]:
    """The limit line for the chosen model (said beside the text box) and its Layer and Head
    ranges, the values kept where the model has them (moved to its last layer or head where
    not)."""
    line = limit_line(registry, name, session)
    try:
        config = registry.checkpoint(name, session).config
    except (InputError, ValueError):
        return line, gr.Slider(), gr.Slider()
    n_layers = _layers(config)
    return (
        line,
        gr.Slider(minimum=1, maximum=max(2, n_layers), value=_kept(layer, n_layers)),
        gr.Slider(minimum=1, maximum=max(2, config.n_heads), value=_kept(head, config.n_heads)),
    )


def placeholders(large: bool = False) -> tuple[Any, Any, Any, Any, str]:
    """What the section shows before its first run."""
    empty = figures.placeholder_figure("Every head", "Press Show every head", large_font=large)
    return empty, None, None, None, ""
