"""The captured analysis behind other tabs' attention views, from raw values validated here
(the tab's own request holds its analysis); the panels drawn from a view are in ``panels``."""

from __future__ import annotations

from typing import Any

from transformer.lab.analysis import padded_query_rows, reference_targets
from transformer.lab.head_view import AttentionView, head_view
from transformer.lab.inspection import check_sentences
from transformer.pretrained.checkpoint import Checkpoint

from ...serving.errors import InputError, readable_list, user_input
from ...serving.inputs import as_int, as_text
from ...serving.state import ModelRegistry, SessionModels
from .request import (
    ATTENTION_KINDS,
    analysis_of,
    kinds_for,
    layers_of,
    sentence_count,
)

EXAMPLE_SENTENCES = (
    "the small cat sees a red ball\na big dog sleeps\nmy old bird eats the green cake"
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
    analysis = analysis_of(registry, name, checkpoint, sentences, targets)
    if kind_label not in kinds_for(config):
        raise InputError(
            f"the {name} model is {config.architecture}: it has no {kind_label}; choose "
            f"{readable_list(kinds_for(config))}"
        )
    return head_view(
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
    "sentence_count",
]
