"""Inspecting a model on a few sentences: one call from text to a labelled trace.

This is what the app's attention and embedding views compute, kept here so a notebook can do the
same: ``analyse(model, tokenizer, ["the cat sees a dog", "a bird"])``.

For an encoder-decoder model the decoder needs a target: unless one is given, it is the model's
own greedy output, fed back teacher-forced, so decoder self-attention and cross-attention show
what the model attends to while producing its answer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..core.config import ModelConfig
from ..core.model import Transformer
from ..core.run import Call, Capture
from ..core.special import PAD_ID
from ..core.trace import Trace, captured_weight_bytes, check_capture_size
from ..core.util import eval_mode, pad
from ..generation import best_without_padding, decoding_ends, greedy_batch, never_generated
from ..text.tokenization import Tokenizer
from .interventions import NO_INTERVENTION, Intervention

MAX_SENTENCES = 3


@dataclass
class Analysis:
    """A captured forward pass over a padded batch, with token pieces for labelling figures.

    ``source_pieces[b]`` and ``target_pieces[b]`` have one piece per position of the padded batch
    (``"[PAD]"`` where sequence ``b`` is padding), so they line up with the trace's axes.
    ``outputs[b]`` is the decoded target text, ``predicted[b]`` the teacher-forced argmax text.
    """

    trace: Trace
    source_pieces: list[list[str]]
    target_pieces: list[list[str]]
    outputs: list[str]
    # What computes ``predicted`` when it is first read (None: no decoder, nothing predicted).
    predict: Callable[[], list[str]] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def predicted(self) -> list[str]:
        """``predicted[b]``: the teacher-forced argmax text of sentence ``b`` (``[]`` for an
        encoder-only model). Computed when first read: it projects every position onto the
        vocabulary (SmolLM2: 49,152 × 576 products each), and only a what-if's summary shows
        it, not the views of a new sentence."""
        return self.predict() if self.predict is not None else []

    @property
    def batch_size(self) -> int:
        """Number of sentences in the batch."""
        return len(self.outputs)


def least_captured_bytes(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    targets: torch.Tensor | None = None,
    *,
    ids: torch.Tensor | None = None,
) -> int:
    """A lower bound of the attention weights :func:`analyse` will compute for these sentences
    (and that its views read; it does not keep them:
    :func:`~transformer.core.trace.captured_weight_bytes`; a translation's own answer, not known
    before it is decoded, counted as one token). 0 for input :func:`analyse` refuses. ``ids``:
    the :func:`input_ids` of ``sentences`` where already computed."""
    if ids is None:
        try:
            ids = input_ids(model, tokenizer, sentences)
        except ValueError:
            return 0
    return _least_bytes(model.config, ids, targets)


def _least_bytes(config: ModelConfig, ids: torch.Tensor, targets: torch.Tensor | None) -> int:
    """:func:`least_captured_bytes` of the ``(B, T)`` input ids (and ``(B, Tt)`` targets)."""
    if config.architecture == "decoder-only":
        return captured_weight_bytes(config, ids.size(0), 0, ids.size(1))
    answer = 1 if targets is None else targets.size(1)
    return captured_weight_bytes(config, ids.size(0), ids.size(1), answer)


@dataclass(frozen=True)
class PassInput:
    """What one :func:`analyse` pass will read, known before it runs: its sentences checked
    and tokenized once (:func:`pass_input`).

    Attributes:
        sentences: the sentences as :func:`check_sentences` keeps them (stripped, non-empty).
        ids: ``(B, T)`` the :func:`input_ids` the pass feeds the model first, on the CPU.
        tokens: how many tokens the pass reads: ``ids`` and, for an encoder-decoder model,
            the decoder's (the ``(B, Tt)`` targets given, else one a sentence: its answer is
            not known before it is decoded).
        least_bytes: :func:`least_captured_bytes`, the attention weights its views will read
            at the least.
    """

    sentences: list[str]
    ids: torch.Tensor
    tokens: int
    least_bytes: int


def pass_input(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    targets: torch.Tensor | None = None,
) -> PassInput:
    """The sentences of an :func:`analyse` pass, checked and tokenized once, with what the pass
    will cost (``tokens``, ``least_bytes``), so that a server can weigh it before running it
    and then hand it on (``analyse(model, tokenizer, p)``: the pass reads the same ids).
    ``ValueError`` for input :func:`analyse` refuses, with its message."""
    cleaned = check_sentences(sentences)
    ids = _encoded(model.config, tokenizer, cleaned)
    tokens = ids.numel()
    if model.config.architecture == "encoder-decoder":
        tokens += ids.size(0) if targets is None else targets.numel()
    return PassInput(cleaned, ids, tokens, _least_bytes(model.config, ids, targets))


def input_ids(model: Transformer, tokenizer: Tokenizer, sentences: Sequence[str]) -> torch.Tensor:
    """The ``(B, T)`` ids :func:`analyse` feeds the model first, on the CPU: a decoder-only
    model's prompts (each begun with [BOS] where its prompts are, padded with its own pad id),
    else the encoder's sources. ``ValueError`` for input :func:`analyse` refuses, with its
    message. :func:`pass_input` gives them with what the pass will cost, to hand to
    :func:`analyse`, so that a text is checked and tokenized once."""
    return _encoded(model.config, tokenizer, check_sentences(sentences))


def _encoded(config: ModelConfig, tokenizer: Tokenizer, cleaned: list[str]) -> torch.Tensor:
    """:func:`input_ids` of sentences checked already."""
    if config.architecture == "decoder-only":
        return encode_batch(
            tokenizer, cleaned, config.max_len, add_bos=config.prompt_bos, pad_id=config.pad_id
        )
    return encode_batch(tokenizer, cleaned, config.max_len)


def token_pieces(tokenizer: Tokenizer, ids: torch.Tensor) -> list[list[str]]:
    """Each row of ``ids`` (batch, seq) as its tokens' text (``"?"`` for an id the
    tokenizer has no text for)."""
    return [[tokenizer.id_to_token(int(i)) or "?" for i in row] for row in ids]


def check_sentences(sentences: Sequence[str], limit: int = MAX_SENTENCES) -> list[str]:
    """Strip the sentences and drop empty ones; a clear ``ValueError`` if none or too many."""
    cleaned = [s.strip() for s in sentences if s and s.strip()]
    if not cleaned:
        raise ValueError("enter at least one sentence")
    if len(cleaned) > limit:
        raise ValueError(f"at most {limit} sentences at a time (got {len(cleaned)})")
    return cleaned


def encode_batch(
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    max_len: int,
    add_bos: bool = False,
    pad_id: int | None = None,
) -> torch.Tensor:
    """``(B, T)`` right-padded ids; ``ValueError`` naming the sentence that is too long.

    Without ``add_bos`` (an encoder's input) the tokenizer's post-processor adds its special
    tokens, if it has one (pretrained tokenizers do; the bundled ones have none). Padding is
    ``pad_id`` (the model's own, e.g. GPT-2's ``<|endoftext|>``, whose tokenizer names no pad
    token), else the tokenizer's."""
    rows = []
    for number, sentence in enumerate(sentences, 1):
        if add_bos:
            ids = tokenizer.encode_ids(sentence, add_bos=True)
        else:  # the tokenizer's own post-processor: BERT's [CLS] … [SEP], Marian's … </s>
            ids = tokenizer.encoding(sentence).ids
        if not ids:
            raise ValueError(f"sentence {number} has no tokens")
        if len(ids) > max_len:
            raise ValueError(
                f"sentence {number} is {len(ids)} tokens long; this model reads at most {max_len}"
            )
        rows.append(ids)
    if pad_id is None:
        pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else PAD_ID
    return pad(rows, pad_id)


@torch.no_grad()
def analyse(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: Sequence[str] | PassInput,
    intervention: Intervention = NO_INTERVENTION,
    targets: torch.Tensor | None = None,
) -> Analysis:
    """Capture a forward pass over 1..3 sentences (padded into one batch).

    Args:
        model: any architecture (run in eval mode, its training flag restored after).
        tokenizer: the model's tokenizer (needs [BOS]/[EOS] for encoder-decoder and decoder-only).
        sentences: the inputs; for a decoder-only model, its prompt texts. Or their
            :func:`pass_input`, checked and tokenized already: the pass reads its ids.
        intervention: what-if switches applied to the captured pass.
        targets: ``(B, Tt)`` decoder input ids to use instead of the model's greedy output (to
            compare two interventions on the same target).
    """
    if isinstance(sentences, PassInput):
        cleaned, ids = sentences.sentences, sentences.ids
    else:
        cleaned = check_sentences(sentences)
        ids = _encoded(model.config, tokenizer, cleaned)
    with eval_mode(model):
        return _analyse(model, tokenizer, cleaned, ids, intervention, targets)


# What an analysis's pass keeps: a trace without its attention weights (it computes them again,
# layer by layer, when a view reads them).
_LIGHT = Capture(keep_attention_weights=False)


def traced_pass(
    model: Transformer,
    src: torch.Tensor | None,
    tgt: torch.Tensor | None,
    intervention: Intervention,
) -> Trace:
    """The trace of one analysis's pass, under ``intervention``, its weights not kept."""
    trace = model(src, tgt, call=Call(ops=intervention.operations, capture=_LIGHT))
    assert isinstance(trace, Trace)  # a Capture that traces returns the trace
    return trace


def _analyse(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: list[str],
    ids: torch.Tensor,
    intervention: Intervention,
    targets: torch.Tensor | None,
) -> Analysis:
    config = model.config
    device = model.device
    if config.architecture == "decoder-only":
        tgt = ids.to(device)  # each prompt begun with [BOS] where the model's prompts are
        check_capture_size(config, tgt.size(0), 0, tgt.size(1))
        trace = traced_pass(model, None, tgt, intervention)
        return Analysis(
            trace=trace,
            source_pieces=[],
            target_pieces=token_pieces(tokenizer, tgt.cpu()),
            outputs=list(sentences),
            predict=functools.partial(predicted_tokens, tokenizer, trace, tgt),
        )
    src = ids.to(device)
    check_capture_size(config, src.size(0), src.size(1), 0)
    if config.architecture == "encoder-only":
        trace = traced_pass(model, src, None, intervention)
        return Analysis(trace, token_pieces(tokenizer, src.cpu()), [], list(sentences))
    if targets is None:
        # An answer much longer than its source is babble: stop it early (each step costs time).
        limit = min(config.max_len - 1, 2 * src.size(1) + 8)
        # Pretrained models name their own start and end ids (Marian starts from <pad>).
        bos, eos = decoding_ends(config, tokenizer.bos_id, tokenizer.eos_id)
        generated = greedy_batch(model, src, bos_id=bos, eos_id=eos, max_new_tokens=limit)
        assert bos is not None  # greedy_batch starts a source's answer from it, or raises
        targets = pad([[bos, *row] for row in generated], config.pad_id)
    targets = targets.to(device)
    check_capture_size(config, src.size(0), src.size(1), targets.size(1))
    trace = traced_pass(model, src, targets, intervention)
    outputs = [tokenizer.decode(row.tolist()) for row in targets]
    return Analysis(
        trace=trace,
        source_pieces=token_pieces(tokenizer, src.cpu()),
        target_pieces=token_pieces(tokenizer, targets.cpu()),
        outputs=outputs,
        predict=functools.partial(predicted_tokens, tokenizer, trace, targets),
    )


def predicted_tokens(tokenizer: Tokenizer, trace: Trace, inputs: torch.Tensor) -> list[str]:
    """Teacher-forced argmax at every real position, decoded (the logits read a few positions
    at a time: a long text's are never all held). Read lazily, after the pass's own
    ``no_grad`` has ended: the projection keeps no graph either."""
    excluded = never_generated(trace.config)  # never [PAD]
    with torch.no_grad():
        best = torch.cat(
            [
                best_without_padding(trace.logits_at(start, stop), excluded).cpu()
                for start, stop in trace.chunks()
            ],
            dim=1,
        )
    real = (inputs != trace.config.pad_id).cpu()
    return [tokenizer.decode(best[b][real[b]].tolist()) for b in range(best.size(0))]
