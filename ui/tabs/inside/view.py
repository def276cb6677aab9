"""What the tab draws from one walkthrough: the summary, and per section its step list, its code
lines in order and its figure."""

from __future__ import annotations

import functools
from collections.abc import Callable
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
from ...serving.inputs import as_int, as_text, clamped, shown, unreadable_note
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


@dataclass(frozen=True)
class InsideRequest:
    """What the tab's controls say, checked once against the model and the sentence: the
    layout's components fill it (in the order of :meth:`read`'s parameters, the
    ``/inside_layer`` API signature) and the handlers receive it.

    ``layer``, ``head`` and ``query`` are 0-based and the model and the sentence have them;
    ``stacks``, ``n_layers``, ``n_heads`` and ``choices`` are the ranges the controls offer."""

    model: str
    session: SessionModels | None
    checkpoint: Checkpoint
    analysis: Analysis
    sentence: str
    stacks: list[str]
    stack: str
    n_layers: int
    layer: int
    n_heads: int
    head: int
    choices: list[tuple[str, int]]
    query: int
    large: bool = False

    @classmethod
    def read(
        cls,
        registry: ModelRegistry,
        text: Any,
        name: Any,
        stack: Any,
        layer: Any = 1,
        head: Any = 1,
        query: Any = 0,
        large: Any = False,
        session: SessionModels | None = None,
        *,
        fit: bool,
        refuse: Callable[..., None] | None = None,
    ) -> InsideRequest:
        """The request from the components' values, in the order the events send them
        (layer and head from 1, the query by its position). With ``fit`` a value the model or
        the sentence lacks is moved into range (a live control may still hold one from before
        it was fitted); without, it is refused with a message saying what to choose.
        ``refuse(registry, text, name, session, layer=, head=, query=)`` checks the values
        first, where a view refuses more (the comparison: a text too long for either model)."""
        if refuse is not None:
            refuse(registry, text, name, session, layer=layer, head=head, query=query)
        text = as_text(text, "sentence")
        checkpoint = registry.checkpoint(name, session)
        config = checkpoint.config
        stacks = stacks_for(config)
        if stack not in stacks:
            if not fit:
                raise InputError(
                    f"the {name} model is {config.architecture}: choose {' or '.join(stacks)}"
                )
            stack = stacks[0]
        with user_input():
            sentence = check_sentence(text)
        analysis = registry.analysis(name, checkpoint, [sentence])
        n_layers, n_heads = layers_in(config, stack), config.n_heads
        choices = query_choices(analysis, stack, checkpoint.tokenizer)
        return cls(
            model=name,
            session=session,
            checkpoint=checkpoint,
            analysis=analysis,
            sentence=sentence,
            stacks=stacks,
            stack=stack,
            n_layers=n_layers,
            layer=_number(layer, "layer", n_layers, fit) - 1,
            n_heads=n_heads,
            head=_number(head, "head", n_heads, fit) - 1,
            choices=choices,
            query=_position(query, [i for _, i in choices], fit),
            large=bool(large),
        )


def reading(fit: bool) -> Callable[..., InsideRequest]:
    """:meth:`InsideRequest.read` with ``fit`` set, as the builder
    :func:`ui.serving.endpoints.takes_request` makes the tab's handlers from."""
    return functools.partial(InsideRequest.read, fit=fit)


def _number(value: Any, what: str, high: int, fit: bool) -> int:
    """A 1-based layer or head in ``1..high``: moved into range with ``fit``, else checked."""
    return clamped(value, high) if fit else as_int(value, what, 1, high)


def _position(value: Any, positions: list[int], fit: bool) -> int:
    """A query token's position, one of ``positions``: with ``fit`` the nearest one (the first
    where ``value`` is no position), else checked."""
    try:
        position = as_query(value)
    except ValueError:
        if not fit:
            raise
        return positions[0]
    if position in positions:
        return position
    if fit:
        return positions[min(len(positions) - 1, max(0, position))]
    raise InputError(
        f"query token must be one of the {len(positions)} tokens "
        f"(0..{positions[-1]}), got {position}"
    )


def choose(
    registry: ModelRegistry,
    session: SessionModels | None,
    text: str,
    name: str,
    stack: str,
    layer: Any,
    head: Any,
    query: Any,
) -> InsideRequest:
    """Check every input against the model (1-based layer and head, 0-based token position)
    and analyse the sentence (cached for shared models)."""
    return InsideRequest.read(
        registry, text, name, stack, layer, head, query, session=session, fit=False
    )


def summary(request: InsideRequest, walk: LayerWalkthrough) -> str:
    """A few lines: the model's shape, what the walkthrough shows, what the model read and wrote."""
    config = request.checkpoint.config
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
    tokenizer = request.checkpoint.tokenizer
    analysis = request.analysis
    pieces = (analysis.source_pieces if request.stack == "encoder" else analysis.target_pieces)[0]
    query = walk.query_labels[walk.query]  # written as every view writes it
    lines = [
        f"**{request.model}**: {config.architecture}, {norm}{rotary}, d_model {config.d_model}, "
        f"{heads} × d_head {config.d_head}, d_ff {config.d_ff}, {activation}. "
        f"Showing layer **{walk.layer + 1}** of the {walk.stack}, head **{walk.head + 1}**, "
        f"query token {code_span(query)}: {len(walk.steps)} steps, every "
        "number recomputed from the model's weights (hover a strip for its values)."
    ]
    if config.has_encoder and config.has_decoder:  # same paragraph: the figures stay in view
        lines[0] += (
            f" The decoder reads the model's own answer {code_span(request.analysis.outputs[0])} "
            "(its tokens are the decoder's queries)."
        )
    note = unreadable_note(request.checkpoint.tokenizer, request.sentence)
    if note:
        lines.append(note)
    unknown = toy_vocabulary_note(request.checkpoint.info.get("task"), request.sentence)
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


def draw(request: InsideRequest) -> tuple[str, list[tuple[str, str, Any, bool]]]:
    """The summary and every section of one checked request."""
    walk = walkthrough(
        request.checkpoint.model,
        request.analysis,
        request.stack,
        request.layer,
        request.head,
        request.query,
        tokenizer=request.checkpoint.tokenizer,
    )
    return summary(request, walk), sections(walk, request.large)
