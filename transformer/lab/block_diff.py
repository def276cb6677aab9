"""2017 and today: one layer of the paper's block beside one of a modern (Llama-family) block,
step by step, for the same sentence and query token.

:func:`compare_layers` walks one layer of each model with :func:`transformer.lab.inside.walkthrough`
(so every number is the one the single-model walkthrough shows) and :func:`align` pairs their
steps row by row: LayerNorm ↔ RMSNorm, added positions ↔ rotated q and k, the two-matrix
feed-forward ↔ gate ⊙ up, h key/value heads ↔ shared ones. Each row says why the change was
made and what it costs or saves, with the numbers taken from the two models' configs
(:func:`block_costs`)::

    diff = compare_layers(paper, paper_tokenizer, smollm2, smollm2_tokenizer,
                          "the small cat sees a red ball", layer=0, head=0, query=3)
    for row in diff.rows:
        print(row.title, row.original and row.original.code, row.modern and row.modern.code)

Layers, heads and tokens are counted from 0 here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..core.config import ModelConfig
from ..core.model import Transformer
from ..text.tokenization import Tokenizer
from .analysis import kv_cache_bytes_per_token
from .inside import LayerWalkthrough, Step, check_sentence, walkthrough
from .inspection import Analysis, analyse

_ACTIVATION_NAMES = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU", "silu": "SiLU"}
FLOAT32_BYTES = 4  # the app keeps every model in float32 (SmolLM2's Q4_1 is dequantized once)


def compared_stack(config: ModelConfig) -> str:
    """The stack whose layer reads the sentence itself: a decoder-only model's decoder, else the
    encoder (an encoder-decoder's decoder reads the model's own output, not the sentence)."""
    return "decoder" if not config.has_encoder else "encoder"


@dataclass(frozen=True)
class BlockCosts:
    """Parameters of one layer's parts and the key/value cache of one token, from a config.

    Attributes:
        norm: parameters of one normalisation (γ and β for LayerNorm, w for RMSNorm).
        norms: normalisations per layer.
        query: W_Q (and its bias).
        key_value: W_K and W_V together (and their biases).
        output: W_O (and its bias).
        feed_forward: W₁, W₂ (standard) or W_gate, W_up, W_down (gated), with biases.
        positions: the position table (0 for sinusoids and rotary: nothing is learned).
        cache_layers: decoder layers, whose keys and values a generation caches (0: the model
            does not generate).
        cache_bytes: bytes of keys and values cached per generated token (float32).
        full_cache_bytes: the same with one key/value head per query head (full multi-head).
    """

    norm: int
    norms: int
    query: int
    key_value: int
    output: int
    feed_forward: int
    positions: int
    cache_layers: int
    cache_bytes: int
    full_cache_bytes: int

    @property
    def attention(self) -> int:
        """W_Q, W_K, W_V and W_O of one layer, with biases."""
        return self.query + self.key_value + self.output

    @property
    def layer(self) -> int:
        """Every parameter of one layer (self-attention, feed-forward, norms)."""
        return self.attention + self.feed_forward + self.norm * self.norms


def block_costs(config: ModelConfig, stack: str | None = None) -> BlockCosts:
    """The parameters of one layer of ``stack`` (default :func:`compared_stack`) and the
    model's per-token key/value cache, computed from the config alone."""
    stack = stack or compared_stack(config)
    d, dh, h, kv = config.d_model, config.d_head, config.n_heads, config.kv_heads
    qkv_bias, mlp_bias = config.attention_qkv_bias, config.mlp_bias
    norm = d if config.norm_kind == "rms" else 2 * d
    cross = stack == "decoder" and config.has_encoder
    if config.feed_forward_kind == "gated":
        feed_forward = 3 * d * config.d_ff + (2 * config.d_ff + d if mlp_bias else 0)
    else:
        feed_forward = 2 * d * config.d_ff + (config.d_ff + d if mlp_bias else 0)
    return BlockCosts(
        norm=norm,
        norms=(3 if cross else 2) * (2 if config.post_sublayer_norm else 1),
        query=d * h * dh + (h * dh if qkv_bias else 0),
        key_value=2 * (d * kv * dh + (kv * dh if qkv_bias else 0)),
        output=h * dh * d + (d if config.attention_output_bias else 0),
        feed_forward=feed_forward,
        positions=config.max_len * d if config.positional == "learned" else 0,
        cache_layers=config.n_decoder_layers,
        cache_bytes=kv_cache_bytes_per_token(config, bytes_per=FLOAT32_BYTES),
        full_cache_bytes=kv_cache_bytes_per_token(config, grouped=False, bytes_per=FLOAT32_BYTES),
    )


@dataclass
class DiffRow:
    """One row of the comparison: the same job in both blocks.

    Attributes:
        key: a stable id (``"norm"``, ``"positions"``, ``"ffn.widen"``, ...).
        title: what the row is about.
        original: the paper block's step, or None where it has no such step.
        modern: the modern block's step, or None.
        original_note, modern_note: where a side has no step, why (or where the step sits when
            it is elsewhere in that block's order).
        why: one sentence: why the change was made and what it costs or saves.
    """

    key: str
    title: str
    original: Step | None
    modern: Step | None
    original_note: str
    modern_note: str
    why: str

    @property
    def differs(self) -> bool:
        """Whether the two sides run different code (a side without a step differs)."""
        if self.original is None or self.modern is None:
            return True
        a, b = self.original.code, self.modern.code
        return (a.path, a.line) != (b.path, b.line)


@dataclass
class BlockDiff:
    """Two walkthroughs of one layer (the paper's block and a modern one) aligned row by row."""

    original: LayerWalkthrough
    modern: LayerWalkthrough
    original_costs: BlockCosts
    modern_costs: BlockCosts
    rows: list[DiffRow]

    def row(self, key: str) -> DiffRow:
        """The row called ``key``; ``KeyError`` naming the keys there are."""
        for row in self.rows:
            if row.key == key:
                return row
        raise KeyError(f"no row {key!r}; rows: {[r.key for r in self.rows]}")


def _step(walk: LayerWalkthrough, *keys: str) -> Step | None:
    """The first of ``keys`` the walkthrough has."""
    return next((walk.step(key) for key in keys if walk.has(key)), None)


def _n(value: float) -> str:
    """A count with thousands separators (``1,327,104``)."""
    return f"{value:,.0f}"


def _kb(n_bytes: int) -> str:
    return f"{n_bytes / 1024:,.1f} KiB" if n_bytes >= 1024 else f"{n_bytes} bytes"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2g}×" if b else "—"


# A row: key, title, the original's step keys (first found), the modern's, the why-sentence.
_Why = Callable[[LayerWalkthrough, LayerWalkthrough, BlockCosts, BlockCosts], str]


def _why_input(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    return (
        f"Same job: the residual stream at this token, d_model = {o.config.d_model} numbers in "
        f"the original, {m.config.d_model} in the modern model."
    )


def _why_positions(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    table = (
        f"a learned table of {_n(co.positions)} parameters"
        if co.positions
        else "fixed sinusoids (0 parameters)"
    )
    return (
        f"The original adds {table} to x once, before layer 1, so every later layer must keep "
        "the position mixed into the content; rotary turns q and k in every layer by "
        f"position·θ_i (base {m.config.rope_base:g}), so a score depends only on the distance "
        f"between query and key: 0 parameters, and {m.config.max_len:,} positions without a "
        "table."
    )


def _why_norm(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    where = (
        "after the residual add (post-LN, the paper)"
        if o.config.norm == "post"
        else "before the sub-layer (pre-LN, as GPT-2)"
    )
    return (
        f"The original normalises {where}; the modern block normalises what each sub-layer "
        "reads and leaves the residual stream un-normalised, which trains deep stacks stably. "
        "RMSNorm skips the mean and the bias β: one pass fewer over the numbers and "
        f"{_n(cm.norm)} parameters per norm instead of 2·d_model = {_n(co.norm)} "
        f"({_n(m.config.d_model)} would be {_n(2 * m.config.d_model)} with LayerNorm), "
        "computed in float32 whatever the weights' dtype."
    )


def _why_query(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    bias = "" if m.config.attention_qkv_bias else "; the modern block drops the bias b_Q"
    return (
        f"Unchanged in kind: W_Q has {_n(co.query)} parameters in the original "
        f"({o.config.n_heads} heads × d_head {o.config.d_head}), {_n(cm.query)} in the modern "
        f"model ({m.config.n_heads} heads × d_head {m.config.d_head}){bias}."
    )


def _why_keys(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    mc = m.config
    return (
        f"Grouped-query attention: {mc.n_heads} query heads share {mc.kv_heads} key/value heads "
        f"({mc.kv_group_size} each), so W_K and W_V have {_n(cm.key_value)} parameters instead "
        f"of {_n(cm.key_value * mc.n_heads // mc.kv_heads)}, and a generated token caches "
        f"{_kb(cm.cache_bytes)} over {cm.cache_layers} layers instead of "
        f"{_kb(cm.full_cache_bytes)} ({_ratio(cm.full_cache_bytes, cm.cache_bytes)} less); "
        f"the original's {co.cache_layers} layers keep all {o.config.n_heads} heads "
        f"({_kb(co.cache_bytes)} per token). Quality drops little: heads of one group learn similar keys."
        if mc.kv_heads != mc.n_heads
        else f"One key/value head per query head in both: {_kb(cm.cache_bytes)} cached per token."
    )


def _why_rotated(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    return (
        "Rotating q and k (never v) by their positions makes q'·k' depend on the distance "
        "between the two tokens; it costs a multiply-add per number and no parameter, and the "
        "cached keys are stored already rotated."
    )


def _why_values(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    mc = m.config
    return (
        f"Values are shared like the keys: {mc.kv_heads} value heads for {mc.n_heads} query "
        "heads; half of the cache saving above is theirs."
        if mc.kv_heads != mc.n_heads
        else "One value head per query head in both."
    )


def _why_same(what: str) -> _Why:
    def why(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
        return what

    return why


def _why_output(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    return (
        f"Same job: W_O mixes the heads ({_n(co.output)} parameters in the original, "
        f"{_n(cm.output)} in the modern model"
        + ("" if m.config.attention_output_bias else ", which has no bias b_O")
        + ")."
    )


def _why_widen(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    oc, mc = o.config, m.config
    return (
        f"The original widens d_model = {oc.d_model} to d_ff = {oc.d_ff} with one matrix; the "
        f"modern block makes two d_ff = {mc.d_ff} projections (gate and up) and multiplies them. "
        f"Gating trains to lower loss for the same compute, at 3·d_model·d_ff = "
        f"{_n(cm.feed_forward)} parameters instead of 2·d_model·d_ff = "
        f"{_n(2 * mc.d_model * mc.d_ff)} at the same width, which is why d_ff is "
        f"{mc.d_ff / mc.d_model:.2g}·d_model there, not {oc.d_ff / oc.d_model:.2g}·d_model."
    )


def _why_activation(
    o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts
) -> str:
    return (
        f"{_ACTIVATION_NAMES.get(o.config.activation, o.config.activation)} "
        + (
            "cuts every negative unit to exactly 0 and its gradient with it; "
            if o.config.activation == "relu"
            else "squashes negative units towards 0; "
        )
        + f"{_ACTIVATION_NAMES.get(m.config.activation, m.config.activation)} is smooth and lets a little of each negative "
        "value through, and here it gates the up projection instead of being the output."
    )


def _why_up(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    return (
        f"The extra matrix of the gated network: d_model·d_ff = "
        f"{_n(m.config.d_model * m.config.d_ff)} parameters per layer that carry what each "
        "unit passes on."
    )


def _why_product(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    return (
        "Gate ⊙ up: each unit is a product of two projections of the token, so the network can "
        "switch a unit on by degrees instead of only cutting it at 0 (SwiGLU)."
    )


def _why_down(o: LayerWalkthrough, m: LayerWalkthrough, co: BlockCosts, cm: BlockCosts) -> str:
    return (
        f"Same job: back to d_model. The whole feed-forward network has {_n(co.feed_forward)} "
        f"parameters per layer in the original, {_n(cm.feed_forward)} in the modern model "
        f"({cm.feed_forward / cm.layer:.0%} of its layer's, against "
        f"{co.feed_forward / co.layer:.0%} in the original)."
    )


ROWS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...], _Why], ...] = (
    ("input", "the layer's input x", ("input",), ("input",), _why_input),
    (
        "positions",
        "positions: added to x ↔ rotation angles",
        ("embedding.position",),
        ("self.angles",),
        _why_positions,
    ),
    (
        "norm",
        "normalisation: LayerNorm ↔ RMSNorm",
        ("self.norm_in", "self.norm_out"),
        ("self.norm_in",),
        _why_norm,
    ),
    ("query", "query q", ("self.q",), ("self.q",), _why_query),
    (
        "keys",
        "keys: h key/value heads ↔ shared ones",
        ("self.k",),
        ("self.k",),
        _why_keys,
    ),
    (
        "qk_norm",
        "QK-norm: q and k normalised",
        (),
        ("self.qk_norm",),
        _why_same(
            "Qwen3, Gemma 3 and OLMo 2 RMS-normalise q and k before rotating them: a query's and "
            "a key's length would otherwise grow with their weights, and the scores with both, "
            "until a few heads saturate their softmax."
        ),
    ),
    ("q_rotated", "q rotated by its position", (), ("self.q_rotated",), _why_rotated),
    ("k_rotated", "keys rotated by their positions", (), ("self.k_rotated",), _why_rotated),
    ("values", "values V", ("self.v",), ("self.v",), _why_values),
    (
        "scores",
        "scores ÷ √d_head",
        ("self.scaled",),
        ("self.scaled",),
        _why_same("Unchanged since 2017: the same scaled dot product, the same line of code."),
    ),
    (
        "softcap",
        "scores soft-capped",
        (),
        ("self.softcap",),
        _why_same(
            "Gemma 2 squashes every score to cap · tanh(s / cap): small scores pass unchanged, a "
            "large one can no longer take all the weight (the paper's scores are unbounded)."
        ),
    ),
    (
        "mask",
        "the mask",
        ("self.masked",),
        ("self.masked",),
        _why_same(
            "Unchanged: masked keys get −∞ before the softmax (a decoder's causal mask; an "
            "encoder masks only padding)."
        ),
    ),
    (
        "weights",
        "attention weights",
        ("self.weights",),
        ("self.weights",),
        _why_same("Unchanged: the softmax of the scores, summing to 1."),
    ),
    (
        "head",
        "this head's output",
        ("self.head",),
        ("self.head",),
        _why_same("Unchanged: the values mixed by the weights."),
    ),
    ("output", "·W_O", ("self.project",), ("self.project",), _why_output),
    (
        "output.norm",
        "the attention's output normalised",
        (),
        ("self.norm_out_sublayer",),
        _why_same(
            "OLMo 2 (instead of the input norm) and Gemma 2 and 3 (as well as it) normalise what "
            "the sub-layer adds, so each update joins the stream at a set scale."
        ),
    ),
    (
        "residual",
        "residual add (attention)",
        ("self.residual",),
        ("self.residual",),
        _why_same(
            "Unchanged: the sub-layer's output is added to its input; only where the norm sits "
            "moved."
        ),
    ),
    (
        "ffn.norm",
        "normalisation before/after the feed-forward",
        ("ff.norm_in", "ff.norm_out"),
        ("ff.norm_in",),
        _why_norm,
    ),
    (
        "ffn.widen",
        "FFN: x·W₁ ↔ gate x·W_gate",
        ("ff.hidden",),
        ("ff.gate_in",),
        _why_widen,
    ),
    ("ffn.activation", "activation", ("ff.activation",), ("ff.activation",), _why_activation),
    ("ffn.up", "up projection x·W_up", (), ("ff.up",), _why_up),
    ("ffn.product", "gate ⊙ up", (), ("ff.product",), _why_product),
    ("ffn.down", "back to d_model: W₂ ↔ W_down", ("ff.project",), ("ff.project",), _why_down),
    (
        "ffn.output.norm",
        "the feed-forward's output normalised",
        (),
        ("ff.norm_out_sublayer",),
        _why_same(
            "The same norm on what the feed-forward adds (OLMo 2; Gemma 2 and 3), before the "
            "residual add."
        ),
    ),
    (
        "layer.output",
        "the layer's output",
        ("output",),
        ("output",),
        _why_same("Same job: what the next layer reads at this token."),
    ),
)


def _missing_note(walk: LayerWalkthrough, row: str) -> str:
    """Why a side has no step for ``row``."""
    config = walk.config
    if row == "positions":
        if config.positional == "rotary":
            return "nothing is added to x: q and k are rotated instead"
        return f"added once, before layer 1 (this is layer {walk.layer + 1})"
    if row in ("norm", "ffn.norm"):
        return "no norm here"
    if row in ("q_rotated", "k_rotated"):
        return "nothing: the position was added to x before layer 1"
    if row in ("ffn.up", "ffn.product"):
        return "no gate: the activation itself is the unit's output"
    if row == "qk_norm":
        return "no QK-norm: q and k are used as projected"
    if row == "softcap":
        return "scores are not capped"
    if row in ("output.norm", "ffn.output.norm"):
        return "no norm on the sub-layer's output"
    return "no such step"


def _placement_note(walk: LayerWalkthrough, step: Step | None) -> str:
    """Where a step stands when it is not where the row's other side has it (post-LN)."""
    if step is not None and step.key.endswith("norm_out"):
        return "after the residual add"
    return ""


def align(original: LayerWalkthrough, modern: LayerWalkthrough) -> list[DiffRow]:
    """The rows of :data:`ROWS` with each side's step; rows that neither side has are left
    out (a modern model without grouped-query heads still has every row)."""
    costs = (
        block_costs(original.config, original.stack),
        block_costs(modern.config, modern.stack),
    )
    rows = []
    for key, title, original_keys, modern_keys, why in ROWS:
        left, right = _step(original, *original_keys), _step(modern, *modern_keys)
        if left is None and right is None:
            continue
        rows.append(
            DiffRow(
                key=key,
                title=title,
                original=left,
                modern=right,
                original_note=_missing_note(original, key)
                if left is None
                else _placement_note(original, left),
                modern_note=_missing_note(modern, key) if right is None else "",
                why=why(original, modern, *costs),
            )
        )
    return rows


def block_diff(original: LayerWalkthrough, modern: LayerWalkthrough) -> BlockDiff:
    """Two walkthroughs aligned, with the two configs' costs."""
    return BlockDiff(
        original=original,
        modern=modern,
        original_costs=block_costs(original.config, original.stack),
        modern_costs=block_costs(modern.config, modern.stack),
        rows=align(original, modern),
    )


def char_starts(tokenizer: Tokenizer, sentence: str, pieces: list[str]) -> list[int | None]:
    """Per position of ``pieces`` (one analysed sentence), the character of ``sentence`` where
    its token's first visible character stands; None for special tokens (start, [CLS],
    padding), for tokens of spaces alone, and where the tokenizer's offsets cannot be matched to
    the pieces."""
    records = [r for r in tokenizer.encode(sentence) if not r.special and r.end > r.start]
    starts: list[int | None] = [None] * len(pieces)
    special = tokenizer.special_ids
    vocab_ids = [tokenizer.token_to_id(p) for p in pieces]
    n = 0
    for position, token_id in enumerate(vocab_ids):
        if token_id in special or n >= len(records):
            continue
        if records[n].piece != pieces[position]:
            return [None] * len(pieces)  # the analysis did not tokenize the same way
        start, end = records[n].start, records[n].end
        while start < end and sentence[start].isspace():  # "Ġsees" starts at its "s"
            start += 1
        starts[position] = start if start < end else None  # a token of spaces alone: none
        n += 1
    return starts


def matching_query(
    starts: list[int | None], target_starts: list[int | None], query: int, n_target: int
) -> int:
    """The position of the other tokenization whose token covers the character where token
    ``query`` starts (the last token that starts at or before it); the same relative position
    where either has no offsets there."""
    start = starts[query] if query < len(starts) else None
    if start is not None:
        best = None
        for position, other in enumerate(target_starts):
            if other is not None and other <= start:
                best = position
        if best is not None:
            return best
    relative = query / max(1, len(starts) - 1)
    return min(n_target - 1, round(relative * (n_target - 1)))


@dataclass
class Side:
    """One model of a comparison: the model, its tokenizer and the stack compared."""

    model: Transformer
    tokenizer: Tokenizer
    analysis: Analysis | None = None

    @property
    def stack(self) -> str:
        """The stack whose layer is compared (see :func:`compared_stack`)."""
        return compared_stack(self.model.config)

    def pieces(self) -> list[str]:
        """The pieces of the stack's input (the first sentence; padding excluded)."""
        assert self.analysis is not None
        trace = self.analysis.trace
        record = trace.source if self.stack == "encoder" else trace.target
        assert record is not None
        pieces = (
            self.analysis.source_pieces if self.stack == "encoder" else self.analysis.target_pieces
        )[0]
        real = record.real_tokens[0].tolist()
        return [piece for piece, keep in zip(pieces, real, strict=True) if keep]


def compare_analyses(
    original: Side,
    modern: Side,
    sentence: str,
    layer: int,
    head: int,
    query: int,
    query_of: str = "original",
) -> BlockDiff:
    """:func:`compare_layers` for two sides already analysed (``Side.analysis`` set): layer
    and head are clamped to each model, ``query`` is a position of the stack input of the side
    ``query_of`` names (``"original"`` or ``"modern"``), mapped to the other tokenization by
    its characters."""
    given, other = (original, modern) if query_of == "original" else (modern, original)
    mapped = matching_query(
        char_starts(given.tokenizer, sentence, given.pieces()),
        char_starts(other.tokenizer, sentence, other.pieces()),
        query,
        len(other.pieces()),
    )
    queries = {id(given): query, id(other): mapped}
    walks = []
    for side in (original, modern):
        config = side.model.config
        assert side.analysis is not None
        layers = config.n_decoder_layers if side.stack == "decoder" else config.n_encoder_layers
        walks.append(
            walkthrough(
                side.model,
                side.analysis,
                side.stack,
                min(layer, layers - 1),
                min(head, config.n_heads - 1),
                queries[id(side)],
                tokenizer=side.tokenizer,
            )
        )
    return block_diff(walks[0], walks[1])


def compare_layers(
    original: Transformer,
    original_tokenizer: Tokenizer,
    modern: Transformer,
    modern_tokenizer: Tokenizer,
    text: str,
    layer: int,
    head: int,
    query: int,
) -> BlockDiff:
    """One sentence through both models; one layer of each, aligned step by step.

    Args:
        original: the paper-style model (LayerNorm, added positions, ReLU/GELU, full heads).
        modern: the Llama-family model.
        text: one sentence.
        layer, head: counted from 0, clamped to each model's range.
        query: a position of the original's stack input (its encoder for an encoder-decoder),
            which must be a real token; the modern side takes the token at the same character.

    Returns:
        A :class:`BlockDiff`; each side's steps are :func:`transformer.lab.inside.walkthrough`'s.
    """
    sentence = check_sentence(text)
    left = Side(original, original_tokenizer)
    right = Side(modern, modern_tokenizer)
    for side in (left, right):
        side.analysis = analyse(side.model, side.tokenizer, [sentence])
    return compare_analyses(left, right, sentence, layer, head, query)
