"""Generate's "Key/value cache" accordion: the cache of the session's decoding made visible.

Prefill vs decode (how many positions each step computed), what the cache holds per layer and
how it grew step by step, its bytes with the model's key/value heads vs what full multi-head
attention would keep, and the next step measured both ways (with the cache and without it:
the time each took and the largest difference of their logits). The numbers come from
:mod:`transformer.generation.cache_stats`; the view reads the session's decoding under its
lock and never steps it. It follows Step, Back, Run and Reset (chained after them in
``layout.py``) and answers ``/kv_cache``.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from transformer.generation import DecodingSession
from transformer.generation.cache_stats import (
    cache_bytes_per_token,
    check_session,
    layer_sizes,
    step_costs,
)
from transformer.lab.analysis import shown_piece

from ...serving.errors import InputError, friendly, gpu, markdown_text
from ...serving.state import ModelRegistry, bind
from .chat import GenerateCall, takes_call
from .decoding import current
from .shown import PRIVATE, if_shown, open_flag

STEPS_SHOWN = 12  # the last steps listed in the table


def size(n: float) -> str:
    """Bytes as a reader says them: ``"45.0 KiB"``."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns at MiB


def overview(decoding: DecodingSession) -> str:
    """The Markdown of what the cache holds now, per token and per layer, kept vs full
    multi-head."""
    model = decoding.model
    config = model.config
    value_bytes = model.generator.proj.weight.element_size()
    kept = cache_bytes_per_token(config, value_bytes)
    full = cache_bytes_per_token(config, value_bytes, full_heads=True)
    rows, cache = decoding.width, decoding.loop.cache
    length = cache.length if cache is not None else 0
    shared = (
        f"{config.n_heads} query heads share {config.kv_heads} key/value heads"
        if config.kv_heads < config.n_heads
        else f"{config.n_heads} heads, each with its own keys and values (full multi-head)"
    )
    beams = f" × {rows} beams" if rows > 1 else ""
    lines = [
        f"**The key/value cache**: {config.n_decoder_layers} decoder layers; {shared}; "
        f"d_head = {config.d_head}; {value_bytes * 8}-bit numbers. Per token it keeps K and V: "
        f"2 × {config.n_decoder_layers} × {config.kv_heads} × {config.d_head} × "
        f"{value_bytes} B = {size(kept)}.",
        "",
        f"| | per token | now ({length} positions{beams}) |",
        "|---|---|---|",
        f"| kept: {config.kv_heads} key/value heads | {size(kept)} | {size(kept * length * rows)} |",
        f"| full multi-head ({config.n_heads} heads) would need | {size(full)} | "
        f"{size(full * length * rows)} |",
    ]
    if cache is None:
        lines += [
            "",
            "This decoding runs **without a cache**: every step recomputes every position.",
        ]
    return "\n".join(lines)


def steps(decoding: DecodingSession, piece: Any) -> str:
    """The Markdown table of what each step computed and what the cache held after it (the
    last ``STEPS_SHOWN`` steps)."""
    config, cache = decoding.model.config, decoding.loop.cache
    kept = cache_bytes_per_token(config, decoding.model.generator.proj.weight.element_size())
    rows = decoding.width
    costs = step_costs(len(decoding.prefix), len(decoding.records), cache is not None)
    if not costs:
        return (
            f"_No step yet: the first one is the **prefill**, {len(decoding.prefix)} positions "
            "at once; each step after it feeds one token._"
        )
    lines = [
        "| step | token chosen | pass | positions computed | cache after the step | cache bytes |",
        "|---|---|---|---|---|---|",
    ]
    for cost, record in list(zip(costs, decoding.records, strict=True))[-STEPS_SHOWN:]:
        kind = "prefill" if cost.prefill else "decode"
        lines.append(
            f"| {cost.step + 1} | {markdown_text(piece(record.chosen_id))} | {kind} | "
            f"{cost.computed} | {cost.length} positions | {size(kept * cost.length * rows)} |"
        )
    sizes = layer_sizes(cache)
    if sizes and sizes[0].bytes:
        lines += ["", "| layers | K and V, each: (rows, kv heads, positions, d_head) | K + V |"]
        lines.append("|---|---|---|")
        groups: list[list[Any]] = []
        for s in sizes:  # consecutive layers that hold the same are one row
            if groups and groups[-1][1] == s.shape and groups[-1][2] == s.bytes:
                groups[-1][3] = s.layer
            else:
                groups.append([s.layer, s.shape, s.bytes, s.layer])
        for first, shape, nbytes, last in groups:
            which = f"{first + 1}" if first == last else f"{first + 1}–{last + 1}"
            each = " each" if first != last else ""
            lines.append(f"| {which} | {tuple(shape)} | {size(nbytes)}{each} |")
    return "\n".join(lines)


def measured(decoding: DecodingSession) -> str:
    """The Markdown of the next step timed with and without the cache, and their difference."""
    config = decoding.model.config
    tokens = decoding.loop.state.tokens
    if tokens.size(1) > config.max_len:
        return "_The decoding has reached the model's max_len: there is no next step to measure._"
    check = check_session(decoding)
    agree = "agree" if check.agrees else "**disagree**"
    ratio = check.uncached_s / check.cached_s if check.cached_s > 0 else float("inf")
    return "\n".join(
        [
            "**The next step, measured now** (the step that predicts the next token; the fastest "
            "of 3 timings each):",
            "",
            "| | positions computed | time |",
            "|---|---|---|",
            f"| with the cache | {check.cached_positions} | {check.cached_s * 1000:.1f} ms |",
            f"| without it (the whole sequence again) | {check.uncached_positions} | "
            f"{check.uncached_s * 1000:.1f} ms |",
            "",
            f"Without the cache this step took × {ratio:.1f} the time. The gap grows with the "
            "text: the cached step computes one position whatever the length, the uncached one "
            "all of them (on a short text the weights, read once either way, dominate).",
            "",
            f"Cached and uncached next-token logits {agree}: max |difference| = "
            f"{check.max_abs_difference:.2e} (float rounding only, when the cache is right: "
            f"up to {check.tolerance:.2g} in this model's dtype).",
        ]
    )


@friendly
@gpu
@takes_call
def kv_cache(registry: ModelRegistry, call: GenerateCall) -> tuple[str, str, str]:
    """The ``/kv_cache`` endpoint (the Generate endpoints' inputs): (what the cache of the
    session's decoding holds; what each step computed; the next step measured with and
    without the cache)."""
    request, session, state = call.request, call.session, call.state
    with state.lock:
        try:
            state, _note = current(registry, state, session, request)
        except InputError as error:  # Generate's own panels already say why
            return f"_{markdown_text(str(error))}_", "", ""
        decoding = state.decoding
        assert decoding is not None  # current() starts one
        tokenizer = registry.checkpoint(request.model, session).tokenizer

        def piece(i: int) -> str:  # the text a token adds, a line break shown as ⏎
            text = tokenizer.decode([i])
            if "\ufffd" in text:  # part of a character: named as every view names it
                return shown_piece(tokenizer, tokenizer.id_to_token(i) or "?")
            return text.replace("\n", "⏎") or tokenizer.id_to_token(i) or "?"

        return overview(decoding), steps(decoding, piece), measured(decoding)


def build_cache_view(registry: ModelRegistry, inputs: list[Any]) -> Any:
    """The accordion and its ``/kv_cache`` button; returns ``follow(event)``, which chains the
    view's update after a Generate event (Step, Back, Run, Reset, a restart).

    The view times the next step twice (with and without the cache), so it is drawn only while
    its accordion is open (:mod:`.shown`): opening it draws it, a followed event redraws it."""
    title = "Key/value cache: prefill, decode, bytes, time"
    with gr.Accordion(title, open=False, elem_id="kv-cache") as accordion:
        with gr.Row(equal_height=False):
            table = gr.Markdown(elem_id="kv-cache-table")
            with gr.Column():
                check = gr.Markdown(elem_id="kv-cache-check")
                measure = gr.Button("Measure the next step again", size="sm")
        steps_table = gr.Markdown(elem_id="kv-cache-steps")
    outputs = [table, steps_table, check]
    handler = bind(kv_cache, registry)
    measure.click(handler, inputs, outputs, api_name="kv_cache")
    shown, opened = open_flag(accordion)
    opened.then(handler, inputs, outputs, **PRIVATE)
    follower = if_shown(handler, len(outputs))

    def follow(event: Any) -> Any:
        return event.then(follower, [*inputs, shown], outputs, **PRIVATE)

    return follow
