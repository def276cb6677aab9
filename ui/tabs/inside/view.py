"""What the tab draws from one walkthrough: the summary, and per section its step list, its code
lines in order and its figure."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from transformer.figures.inside import section_figure
from transformer.lab.analysis import (
    piece_legend,
    shown_pieces,
    toy_vocabulary_note,
)
from transformer.lab.inside import (
    LayerWalkthrough,
    Step,
    check_sentence,
    query_positions,
    walkthrough,
)
from transformer.lab.inspection import Analysis
from transformer.pretrained.checkpoint import Checkpoint
from transformer.text.tokenization import Tokenizer

from ...serving.errors import InputError, code_span, user_input
from ...serving.inputs import as_int, as_text, shown, unreadable_note
from ...serving.state import ModelRegistry, SessionModels

EXAMPLE_TEXT = "the small cat sees a red ball"
# The sections as the tab shows them: (library name, accordion title).
SECTIONS: tuple[tuple[str, str], ...] = (
    ("input", "1 · The input x"),
    ("self-attention", "2 · Self-attention, one head, one query"),
    ("cross-attention", "3 · Cross-attention: queries from here, keys and values from the encoder"),
    ("feed-forward", "4 · Feed-forward network and the layer's output"),
)
_ACTIVATION_NAMES = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU (tanh)", "silu": "SiLU"}


@dataclass(frozen=True)
class InsideRequest:
    """What the tab's controls say, as one value: the layout's components fill it (in the
    order of :meth:`of`'s parameters, the ``/inside_layer`` API signature) and the handlers
    receive it. The sentence is checked once, into :attr:`sentence`."""

    text: str
    model: str
    stack: str
    layer: Any = 1
    head: Any = 1
    query: Any = 0
    large: bool = False
    session: SessionModels | None = None

    @classmethod
    def of(
        cls,
        text: Any,
        name: Any,
        stack: Any,
        layer: Any = 1,
        head: Any = 1,
        query: Any = 0,
        large: Any = False,
        session: SessionModels | None = None,
    ) -> InsideRequest:
        """The request from the components' values, in the order the events send them."""
        return cls(as_text(text, "sentence"), name, stack, layer, head, query, bool(large), session)

    @functools.cached_property
    def sentence(self) -> str:
        """The sentence, checked (one non-empty line)."""
        with user_input():
            return check_sentence(self.text)


@dataclass
class Chosen:
    """A validated request: the model, its analysis of the sentence, and the (0-based) stack,
    layer, head and query a walkthrough reads."""

    checkpoint: Checkpoint
    analysis: Analysis
    sentence: str
    stack: str
    layer: int
    head: int
    query: int


def stacks_for(config: Any) -> list[str]:
    """The stacks a model has, in the order data flows through them."""
    return [s for s in ("encoder", "decoder") if getattr(config, f"has_{s}")]


def layers_in(config: Any, stack: str) -> int:
    """How many layers ``stack`` has."""
    return config.n_encoder_layers if stack == "encoder" else config.n_decoder_layers


def query_choices(
    analysis: Analysis, stack: str, tokenizer: Tokenizer | None = None
) -> list[tuple[str, int]]:
    """The real tokens of the stack's input as ``("3: cat", 3)`` dropdown choices; with the
    model's ``tokenizer``, byte-level pieces written as Tokenize writes them (``"3: ␣cat"``)."""
    trace = analysis.trace
    record = trace.source if stack == "encoder" else trace.target
    if record is None:
        raise ValueError(f"this {trace.config.architecture} model has no {stack}")
    pieces = analysis.source_pieces if stack == "encoder" else analysis.target_pieces
    choosable = query_positions(record.tokens[0], record.real_tokens[0], trace.config.pad_id)
    shown = shown_pieces(tokenizer, pieces[0]) if tokenizer is not None else pieces[0]
    return [(f"{i}: {shown[i]}", i) for i in choosable]


def default_query(choices: list[tuple[str, int]]) -> int:
    """The example's query: its word "cat" where the tokenizer keeps it whole, else the third
    token (the first may be a start or [CLS] token)."""
    for label, position in choices:
        if label.split(": ", 1)[1].strip("▁Ġ␣#").lower() == "cat":
            return position
    return choices[min(2, len(choices) - 1)][1]


def as_query(value: Any) -> int:
    """A token position from the dropdown (an int) or an API caller (``3``, ``"3"``, ``"3: cat"``)."""
    if isinstance(value, str):
        value = value.split(":", 1)[0].strip()
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        raise InputError(
            f"query token must be a position like 3 or '3: cat', got {shown(value)}"
        ) from None


def choose(
    registry: ModelRegistry,
    session: SessionModels | None,
    text: str,
    name: str,
    stack: str,
    layer: Any,
    head: Any,
    query: Any,
) -> Chosen:
    """Check every input against the model (1-based layer and head, 0-based token position)
    and analyse the sentence (cached for shared models)."""
    request = InsideRequest.of(text, name, stack, layer, head, query, session=session)
    return chosen_for(registry, request)


def chosen_for(registry: ModelRegistry, request: InsideRequest) -> Chosen:
    """:func:`choose` for a request (its sentence is checked once, however often it is read)."""
    checkpoint = registry.checkpoint(request.model, request.session)
    config, name, stack = checkpoint.config, request.model, request.stack
    stacks = stacks_for(config)
    if stack not in stacks:
        raise InputError(f"the {name} model is {config.architecture}: choose {' or '.join(stacks)}")
    analysis = registry.analysis(name, checkpoint, [request.sentence])
    layer_index = as_int(request.layer, "layer", 1, layers_in(config, stack)) - 1
    head_index = as_int(request.head, "head", 1, config.n_heads) - 1
    positions = [i for _, i in query_choices(analysis, stack)]
    position = as_query(request.query)
    if position not in positions:
        raise InputError(
            f"query token must be one of the {len(positions)} tokens "
            f"(0..{positions[-1]}), got {position}"
        )
    return Chosen(checkpoint, analysis, request.sentence, stack, layer_index, head_index, position)


def summary(chosen: Chosen, walk: LayerWalkthrough, name: str) -> str:
    """A few lines: the model's shape, what the walkthrough shows, what the model read and wrote."""
    config = chosen.checkpoint.config
    norm = "pre-LN (normalise first)" if config.norm == "pre" else "post-LN (normalise after)"
    if config.norm_kind == "rms":
        norm = "RMSNorm first (pre-norm)" if config.norm == "pre" else "RMSNorm after (post-norm)"
    kind = "RMSNorm" if config.norm_kind == "rms" else "LayerNorm"
    if config.norm == "output":  # OLMo 2
        norm = f"{kind} on each sub-layer's output, before the residual add"
    elif config.post_sublayer_norm:  # Gemma 2 and 3
        norm = f"{kind} before and after each sub-layer"
    heads = f"{config.n_heads} heads"
    if config.kv_heads != config.n_heads:
        heads = f"{config.n_heads} query heads sharing {config.kv_heads} key/value heads"
    rotary = (
        f", rotary positions (base {config.rope_base:g})" if config.positional == "rotary" else ""
    )
    activation = _ACTIVATION_NAMES.get(config.activation, config.activation)
    if config.feed_forward_kind == "gated":
        activation = f"gated feed-forward {activation}(x·W_gate) ⊙ x·W_up"
    tokenizer = chosen.checkpoint.tokenizer
    analysis = chosen.analysis
    pieces = (analysis.source_pieces if chosen.stack == "encoder" else analysis.target_pieces)[0]
    query = walk.query_labels[walk.query]  # written as every view writes it
    lines = [
        f"**{name}**: {config.architecture}, {norm}{rotary}, d_model {config.d_model}, "
        f"{heads} × d_head {config.d_head}, d_ff {config.d_ff}, {activation}. "
        f"Showing layer **{walk.layer + 1}** of the {walk.stack}, head **{walk.head + 1}**, "
        f"query token {code_span(query)}: {len(walk.steps)} steps, every "
        "number recomputed from the model's weights (hover a strip for its values)."
    ]
    if config.has_encoder and config.has_decoder:  # same paragraph: the figures stay in view
        lines[0] += (
            f" The decoder reads the model's own answer {code_span(chosen.analysis.outputs[0])} "
            "(its tokens are the decoder's queries)."
        )
    note = unreadable_note(chosen.checkpoint.tokenizer, chosen.sentence)
    if note:
        lines.append(note)
    unknown = toy_vocabulary_note(chosen.checkpoint.info.get("task"), chosen.sentence)
    if unknown:
        lines.append(unknown)
    legend = piece_legend(tokenizer, pieces)
    if legend:  # the marks in the query-token menu, said where they appear
        lines.append(f"Pieces are written as the text they stand for: {legend}.")
    return "\n\n".join(lines)


def steps_markdown(steps: list[Step], first_number: int) -> str:
    """One line per step: number, name, the shape the model computes, the explanation."""
    if not steps:
        return ""
    lines = [
        f"**{n}. {step.name}** `{step.shape}`: {step.explanation}"
        for n, step in enumerate(steps, first_number)
    ]
    return "\n\n".join(lines)


def code_listing(steps: list[Step], first_number: int) -> str:
    """The section's code lines in the order they ran, each under its step and file:line."""
    blocks = [
        f"# {n}. {step.name} · {step.code}\n{step.code.text}"
        for n, step in enumerate(steps, first_number)
    ]
    return "\n".join(blocks)


def sections(walk: LayerWalkthrough, large: bool) -> list[tuple[str, str, Any, bool]]:
    """Per section of :data:`SECTIONS`: its step list, code listing, figure, and whether the
    layer has it (only a decoder layer of an encoder-decoder model cross-attends)."""
    drawn = []
    number = 1
    for key, _ in SECTIONS:
        steps = walk.section(key)
        if not steps:
            drawn.append(("", "", None, False))
            continue
        figure = section_figure(steps, number, large_font=large)
        drawn.append((steps_markdown(steps, number), code_listing(steps, number), figure, True))
        number += len(steps)
    return drawn


def draw(chosen: Chosen, name: str, large: bool) -> tuple[str, list[tuple[str, str, Any, bool]]]:
    """The summary and every section of one validated request."""
    walk = walkthrough(
        chosen.checkpoint.model,
        chosen.analysis,
        chosen.stack,
        chosen.layer,
        chosen.head,
        chosen.query,
        tokenizer=chosen.checkpoint.tokenizer,
    )
    return summary(chosen, walk, name), sections(walk, large)
