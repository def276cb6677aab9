"""Metrics of a trained model on a task split: exact match, token accuracy, and for the
decoder-only task the share of continuations that stay grammatical.

Greedy outputs come from :func:`transformer.generation.greedy_batch`, the project's one decoding
loop run over a batch, starting and stopping where the model says
(:func:`transformer.generation.decoding_ends`); every model runs in eval mode and gets its
training flag back.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..core.model import Transformer
from ..core.util import eval_mode
from ..generation import decoding_ends, greedy_batch, without_padding
from ..text.tokenization import Tokenizer
from .data import Batch, EncodedPair, batches, encode_examples
from .tasks import Example, is_toy_english


def sequence_loss(logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float) -> Tensor:
    """Mean cross-entropy over non-padding targets, with label smoothing (section 5.4).

    ``logits`` ``(B, T, V)``, ``targets`` ``(B, T)``. [PAD] is not a class the model predicts:
    its logit is masked out of the softmax (:func:`~transformer.generation.without_padding`, as
    in generation) and the smoothed target gives it no mass. As in the Annotated Transformer's
    ``LabelSmoothing``, the target token gets ``1 - ε`` and the ``ε`` is spread evenly over the
    other ``V - 2`` classes. So no gradient ever reaches the [PAD] row of a tied embedding.
    """
    vocab = logits.size(-1)
    flat = targets.reshape(-1)  # (N,)
    real = (flat != pad_id).to(logits.dtype)  # (N,)
    log_probs = without_padding(logits.reshape(-1, vocab), pad_id).log_softmax(dim=-1)  # (N, V)
    # The [PAD] column is -inf; it has zero target mass, so leave it out of the sums (0·-inf).
    log_probs = log_probs.index_fill(-1, torch.tensor([pad_id], device=logits.device), 0.0)
    target_log_prob = log_probs.gather(1, flat[:, None])[:, 0]  # (N,)
    per_token = -target_log_prob
    if label_smoothing > 0 and vocab > 2:
        others = (log_probs.sum(dim=-1) - target_log_prob) / (vocab - 2)  # mean over V-2 classes
        per_token = (1 - label_smoothing) * per_token - label_smoothing * others
    return (per_token * real).sum() / real.sum().clamp(min=1)


def forward_batch(model: Transformer, batch: Batch) -> Tensor:
    """``(B, Tt, V)`` logits of one batch, whatever the architecture."""
    if model.config.has_encoder:
        return model(batch.src, batch.tgt_in)
    return model(tgt=batch.tgt_in)


@torch.no_grad()
def evaluate_batches(
    model: Transformer,
    eval_batches: Sequence[Batch],
    device: torch.device,
    with_exact_match: bool = False,
) -> dict[str, float]:
    """Teacher-forced loss (no smoothing) and token accuracy over non-padding targets, and with
    ``with_exact_match`` (encoder-decoder models) the greedy exact match of the same pairs."""
    pad_id = model.config.pad_id
    total_loss, correct, count = 0.0, 0, 0
    with eval_mode(model):
        for batch in eval_batches:
            batch = batch.to(device)
            logits = forward_batch(model, batch)
            real = batch.tgt_out != pad_id
            n = int(real.sum())
            total_loss += float(sequence_loss(logits, batch.tgt_out, pad_id, 0.0)) * n
            predicted = without_padding(logits, pad_id).argmax(-1)
            correct += int(((predicted == batch.tgt_out) & real).sum())
            count += n
    metrics = {"loss": total_loss / max(count, 1), "token_accuracy": correct / max(count, 1)}
    if with_exact_match and model.config.has_encoder and model.config.has_decoder:
        bos, eos = int(eval_batches[0].tgt_in[0, 0]), _eos_of(eval_batches[0])
        pairs = [pair for batch in eval_batches for pair in batch.pairs]
        metrics["exact_match"] = exact_match(model, pairs, bos, eos)
    return metrics


def _eos_of(batch: Batch) -> int:
    """The end token of a batch: the last real target token of its first pair."""
    return batch.pairs[0].target[-1]


@torch.no_grad()
def exact_match(
    model: Transformer,
    pairs: Sequence[EncodedPair],
    bos_id: int | None,
    eos_id: int | None,
    batch_size: int = 128,
) -> float:
    """Fraction of pairs whose greedy output equals the reference target exactly."""
    if not pairs:
        return 0.0
    device = model.device
    hits = 0
    for batch in batches(pairs, batch_size, model.config.pad_id, has_source=True):
        references = [list(p.target[1:-1]) for p in batch.pairs]  # drop BOS and EOS
        longest = max(len(r) for r in references)
        assert batch.src is not None  # batched with has_source=True
        outputs = greedy_batch(
            model, batch.src.to(device), bos_id=bos_id, eos_id=eos_id, max_new_tokens=longest + 10
        )
        hits += sum(out == ref for out, ref in zip(outputs, references, strict=True))
    return hits / len(pairs)


@torch.no_grad()
def continuation_grammaticality(
    model: Transformer, tokenizer: Tokenizer, examples: Sequence[Example], max_new_tokens: int = 40
) -> float:
    """Share of greedy continuations (decoder-only) whose full text parses as toy English."""
    if not examples:
        return 0.0
    ok = 0
    for example in examples:
        prompt = tokenizer.encode_ids(example.source, add_bos=True)
        prompts = torch.tensor([prompt], device=model.device)
        (generated,) = greedy_batch(
            model, prompts=prompts, eos_id=tokenizer.eos_id, max_new_tokens=max_new_tokens
        )
        text = tokenizer.decode(prompt[1:] + generated)
        ok += is_toy_english(text)
    return ok / len(examples)


def evaluate_model(
    model: Transformer,
    tokenizer: Tokenizer,
    examples: Sequence[Example],
    architecture: str,
    batch_size: int = 128,
) -> dict[str, float]:
    """All metrics of ``model`` on ``examples``: loss and token accuracy (teacher-forced),
    ``exact_match`` (greedy, encoder-decoder) or ``grammatical`` (decoder-only)."""
    pairs = encode_examples(examples, tokenizer, architecture)
    teacher_forced = evaluate_batches(
        model,
        batches(pairs, batch_size, model.config.pad_id, has_source=model.config.has_encoder),
        model.device,
    )
    metrics = {"loss": teacher_forced["loss"]}
    if architecture == "decoder-only":
        # Continuations are random under the grammar, so the exact text cannot be matched:
        # report how often the next token is predicted and whether continuations stay grammatical.
        metrics["next_token_accuracy"] = teacher_forced["token_accuracy"]
        metrics["grammatical"] = continuation_grammaticality(model, tokenizer, examples[:200])
    else:
        metrics["token_accuracy"] = teacher_forced["token_accuracy"]
        # Decoding starts and ends where the model says (decoding_ends), as in the app.
        bos, eos = decoding_ends(model.config, tokenizer.bos_id, tokenizer.eos_id)
        metrics["exact_match"] = exact_match(model, pairs, bos, eos, batch_size)
    metrics["examples"] = len(examples)
    return metrics
