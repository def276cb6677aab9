"""The captured analysis behind every attention view (validated layer, head and sentence), the
kinds a model has, its padded rows, and the every-head grid."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from transformer import figures
from transformer.core.trace import AttentionKind, CaptureTooLarge
from transformer.figures.attention import GRID_MAX_CELLS
from transformer.lab.analysis import (
    axis_pieces,
    reference_targets,
    shown_pieces,
)
from transformer.lab.inspection import MAX_SENTENCES, Analysis, check_sentences
from transformer.pretrained.checkpoint import Checkpoint

from ...serving import limits
from ...serving.errors import InputError, readable_list, user_input
from ...serving.inputs import as_int, as_text
from ...serving.state import ModelRegistry, SessionModels

ATTENTION_KINDS: dict[str, AttentionKind] = {
    "encoder self-attention": "encoder_self",
    "decoder masked self-attention": "decoder_self",
    "cross-attention (decoder → encoder)": "cross",
}
# The fewest cells a grid keeps however long the text (a 6 x 12 grid: ~45 x 45 per tile).
GRID_MIN_CELLS = 150_000
EXAMPLE_SENTENCES = (
    "the small cat sees a red ball\na big dog sleeps\nmy old bird eats the green cake"
)


@dataclass(frozen=True)
class AttentionRequest:
    """What the tab's controls say, as one value: the layout's components fill it (in the
    order of :meth:`of`'s parameters, each endpoint's API signature) and the handlers receive
    it. The text is parsed once, into :attr:`lines`."""

    text: str
    model: str
    kind: str
    layer: Any = 1
    head: Any = 1
    row: Any = 1
    what_if: tuple[str, ...] = ()
    large: bool = False
    session: SessionModels | None = None
    mistake: str | None = None

    @classmethod
    def of(
        cls,
        sentences: Any,
        name: Any,
        kind: Any,
        layer: Any = 1,
        head: Any = 1,
        row: Any = 1,
        what_if: Any = None,
        large: Any = False,
        session: SessionModels | None = None,
        mistake: Any = None,
    ) -> AttentionRequest:
        """The request from the components' values, in the order the events send them."""
        if what_if is not None and not isinstance(what_if, list | tuple):
            raise InputError("what if: choose from the switches' names")
        return cls(
            as_text(sentences, "sentences"),
            name,
            kind,
            layer,
            head,
            row,
            tuple(what_if or ()),
            bool(large),
            session,
            mistake,
        )

    @functools.cached_property
    def lines(self) -> list[str]:
        """The sentences, checked (1 to ``MAX_SENTENCES`` non-empty lines)."""
        with user_input():
            return check_sentences(self.text.splitlines())

    @property
    def rows(self) -> int:
        """How many sentences the Sentence slider ranges over (at least 1, at most the limit)."""
        return min(sentence_count(self.text), MAX_SENTENCES)

    def fitted(self, kind: str, layer: int, head: int, row: int) -> AttentionRequest:
        """This request with the controls' values moved to what the model has."""
        return dataclasses.replace(self, kind=kind, layer=layer, head=head, row=row)


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
    registry: ModelRegistry,
    session: SessionModels | None,
    sentences_text: str,
    name: str,
    kind_label: str,
    layer: Any,
    head: Any,
    row: Any,
    checkpoint: Checkpoint | None = None,
    use_reference: bool = False,
    lines: list[str] | None = None,
) -> AttentionView:
    """The analysis behind every attention view (cached for bundled models) and the validated
    layer, head and sentence.

    With ``use_reference`` the decoder reads the task's correct answer (teacher forcing) instead
    of the model's own output: an early training snapshot's output is too poor to read along.
    ``lines``: the sentences already checked (a request's), else parsed from the text.
    """
    checkpoint = checkpoint or registry.checkpoint(name, session)
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    if lines is None:
        with user_input():
            lines = check_sentences(as_text(sentences_text, "sentences").splitlines())
    sentences = lines
    kind = ATTENTION_KINDS.get(kind_label) if isinstance(kind_label, str) else None
    if kind is None:
        raise InputError(f"which attention: choose {readable_list(kinds_for(config))}")
    targets = None
    if use_reference and config.has_encoder and config.has_decoder:
        targets = reference_targets(tokenizer, checkpoint.task, sentences, config.pad_id)
    try:
        analysis = registry.analysis(name, checkpoint, sentences, targets=targets)
    except InputError as error:  # user_input() leaves the library's error as its context
        if not isinstance(error.__context__, CaptureTooLarge):
            raise
        raise InputError(
            f"{error}, or paste it under “Long inputs” below, which reads up to "
            f"{limits.MAX_SCALE_TOKENS:,} tokens"
        ) from None
    try:
        records = analysis.trace.attention_records(kind)
    except ValueError:
        raise InputError(
            f"the {name} model is {config.architecture}: it has no {kind_label}; choose "
            f"{readable_list(kinds_for(config))}"
        ) from None
    row_index = as_int(row, "sentence", 1, analysis.batch_size) - 1
    queries, keys = axis_pieces(analysis, kind)
    return AttentionView(
        analysis=analysis,
        kind=kind,
        records=records,
        layer=as_int(layer, "layer", 1, len(records)) - 1,
        head=as_int(head, "head", 1, config.n_heads) - 1,
        row=row_index,
        # Byte-level pieces as Tokenize writes them (␣licenses, not Ġlicenses).
        query_labels=figures.token_labels(shown_pieces(tokenizer, queries[row_index])),
        key_labels=figures.token_labels(shown_pieces(tokenizer, keys[row_index])),
    )


def kinds_for(config: Any) -> list[str]:
    """The attention kinds (their menu labels) a model of this architecture has."""
    have = {
        "encoder-only": {"encoder_self"},
        "decoder-only": {"decoder_self"},
    }.get(config.architecture, {"encoder_self", "decoder_self", "cross"})
    return [label for label, kind in ATTENTION_KINDS.items() if kind in have]


def layers_of(config: Any, kind: AttentionKind) -> int:
    """How many layers hold attention of ``kind``."""
    return config.n_encoder_layers if kind == "encoder_self" else config.n_decoder_layers


def sentence_count(sentences_text: str | None) -> int:
    """The non-empty lines given (what the Sentence slider ranges over), at least 1."""
    return max(1, len([line for line in (sentences_text or "").splitlines() if line.strip()]))


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def padded_query_rows(analysis: Analysis, kind: AttentionKind, row: int) -> Any:
    """``(Tq,)`` bool, ``True`` for the [PAD] query rows of ``kind`` in sentence ``row``: the
    run of padding ids that ends the (right-padded) sequence. A model whose pad token is a real
    token (GPT-2's ``<|endoftext|>``) does not mask these, but they are padding all the same."""
    stack = analysis.trace.source if kind == "encoder_self" else analysis.trace.target
    if stack is None:
        raise ValueError(f"this {analysis.trace.config.architecture} model has no {kind} attention")
    tokens = stack.tokens[row].cpu()
    is_pad = tokens == analysis.trace.config.pad_id
    # Trailing pads only: a decoder's first token may be the pad id (Marian, GPT-2 start there).
    trailing = is_pad.flip(0).cumprod(0).flip(0).bool()
    trailing[0] = False
    return trailing | ~stack.real_tokens[row].cpu()


def _describe(kind: AttentionKind) -> str:
    return {label: k for k, label in ATTENTION_KINDS.items()}[kind].capitalize()


def attention_grid(
    registry: ModelRegistry,
    session: SessionModels | None,
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
        registry, session, sentences_text, name, kind_label, 1, 1, row, checkpoint, use_reference
    )
    return _grid(view, large)


def _grid(view: AttentionView, large: bool) -> Any:
    """The grid of one view. Its cell budget leaves room for the single head (float32, exact,
    two grid cells' bytes per cell) that ships in the same response: together under 3 MB."""
    n_queries, n_keys = view.records[0].shape[-2:]
    budget = max(GRID_MIN_CELLS, GRID_MAX_CELLS - 2 * n_queries * n_keys)
    return figures.grid_figure(
        view.records,
        view.row,
        view.query_labels,
        view.key_labels,
        max_cells=budget,
        padded_queries=padded_query_rows(view.analysis, view.kind, view.row),
        large_font=large,
    )
