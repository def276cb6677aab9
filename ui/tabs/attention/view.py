"""The captured analysis behind every attention view (a request's, or other tabs' raw values
validated here) and its padded rows; the panels drawn from a view are in ``panels``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformer import figures
from transformer.core.trace import AttentionKind, CaptureTooLarge
from transformer.lab.analysis import padded_query_rows, reference_targets, sentence_attention
from transformer.lab.inspection import Analysis, check_sentences
from transformer.lab.interventions import Intervention
from transformer.pretrained.checkpoint import Checkpoint
from transformer.text.tokenization import Tokenizer

from ...serving import limits
from ...serving.errors import InputError, readable_list, user_input
from ...serving.inputs import as_int, as_text
from ...serving.state import ModelRegistry, SessionModels
from .request import ATTENTION_KINDS, AttentionRequest, kinds_for, layers_of, sentence_count

EXAMPLE_SENTENCES = (
    "the small cat sees a red ball\na big dog sleeps\nmy old bird eats the green cake"
)


@dataclass
class AttentionView:
    """One captured analysis and the layer, head and sentence a view draws (all 0-based), with
    what every panel of that sentence reads: its axis labels and pieces (and what their marks
    stand for), its [PAD] query rows and its real keys."""

    analysis: Analysis
    kind: AttentionKind
    records: list
    layer: int
    head: int
    row: int
    query_labels: list[str]
    key_labels: list[str]
    query_pieces: list[str]
    key_pieces: list[str]
    padded: Any  # (Tq,) bool: padded_query_rows
    keys_real: Any  # (Tk,) bool: real_keys
    legend: str  # piece_legend of the pieces, "" where they hold no marks


def request_view(registry: ModelRegistry, request: AttentionRequest) -> AttentionView:
    """The analysis of a request's sentences (cached for shared models) at the head it asks
    for; the request has checked every value already."""
    analysis = _analysis(registry, request.model, request.checkpoint, list(request.lines))
    return _at(
        analysis,
        request.checkpoint.tokenizer,
        request.kind,
        request.layer,
        request.head,
        request.row,
    )


def _analysis(
    registry: ModelRegistry,
    name: str,
    checkpoint: Checkpoint,
    lines: list[str],
    targets: Any = None,
) -> Analysis:
    """The registry's analysis, a capture too large for the tab pointing to the long inputs."""
    try:
        return registry.analysis(name, checkpoint, lines, targets=targets)
    except InputError as error:  # user_input() leaves the library's error as its context
        if not isinstance(error.__context__, CaptureTooLarge):
            raise
        raise InputError(
            f"{error}, or paste it under “Long inputs” below, which reads up to "
            f"{limits.MAX_SCALE_TOKENS:,} tokens"
        ) from None


def same_input_pass(
    registry: ModelRegistry,
    name: str,
    checkpoint: Checkpoint,
    lines: list[str],
    correct: Analysis,
    intervention: Intervention,
) -> Analysis:
    """The registry's analysis of ``lines`` with ``intervention`` on, on the decoder input of
    the ``correct`` pass (an encoder-decoder's), so that the two compare position by position."""
    targets = None
    if checkpoint.config.has_encoder and checkpoint.config.has_decoder:
        assert correct.trace.target is not None  # an encoder-decoder pass reads a decoder input
        targets = correct.trace.target.tokens
    return registry.analysis(name, checkpoint, lines, intervention, targets)


def _at(
    analysis: Analysis, tokenizer: Tokenizer, kind: AttentionKind, layer: int, head: int, row: int
) -> AttentionView:
    """The view of one analysis at a checked (0-based) layer, head and sentence."""
    at = sentence_attention(analysis, tokenizer, kind, row)
    return AttentionView(
        analysis=analysis,
        kind=kind,
        records=at.records,
        layer=layer,
        head=head,
        row=row,
        query_labels=figures.token_labels(at.shown_queries),
        key_labels=figures.token_labels(at.shown_keys),
        query_pieces=at.queries,
        key_pieces=at.keys,
        padded=at.padded_queries,
        keys_real=at.real_keys,
        legend=at.legend,
    )


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
) -> AttentionView:
    """The analysis behind an attention view from raw control values (cached for bundled
    models) and the validated layer, head and sentence: for other tabs' views of attention.

    With ``use_reference`` the decoder reads the task's correct answer (teacher forcing) instead
    of the model's own output: an early training snapshot's output is too poor to read along.
    """
    checkpoint = checkpoint or registry.checkpoint(name, session)
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    with user_input():
        sentences = check_sentences(as_text(sentences_text, "sentences").splitlines())
    kind = ATTENTION_KINDS.get(kind_label) if isinstance(kind_label, str) else None
    if kind is None:
        raise InputError(f"which attention: choose {readable_list(kinds_for(config))}")
    targets = None
    if use_reference and config.has_encoder and config.has_decoder:
        targets = reference_targets(tokenizer, checkpoint.task, sentences, config.pad_id)
    analysis = _analysis(registry, name, checkpoint, sentences, targets)
    if kind_label not in kinds_for(config):
        raise InputError(
            f"the {name} model is {config.architecture}: it has no {kind_label}; choose "
            f"{readable_list(kinds_for(config))}"
        )
    return _at(
        analysis,
        tokenizer,
        kind,
        as_int(layer, "layer", 1, layers_of(config, kind)) - 1,
        as_int(head, "head", 1, config.n_heads) - 1,
        as_int(row, "sentence", 1, analysis.batch_size) - 1,
    )


__all__ = [
    "ATTENTION_KINDS",
    "EXAMPLE_SENTENCES",
    "AttentionView",
    "attention_view",
    "kinds_for",
    "layers_of",
    "padded_query_rows",
    "request_view",
    "same_input_pass",
    "sentence_count",
]
