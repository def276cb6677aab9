"""Metrics of a trained model on a task split: exact match, token accuracy, and for the
decoder-only task the share of continuations that stay grammatical."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ..model import Transformer
from ..text.tokenization import Tokenizer
from .data import Batch, EncodedPair, batches, encode_examples, pad
from .tasks import Example, is_toy_english


def sequence_loss(logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float) -> Tensor:
    """Mean cross-entropy over non-padding targets, with label smoothing (section 5.4).

    ``logits`` ``(B, T, V)``, ``targets`` ``(B, T)``. PyTorch's smoothing spreads ε over all
    V classes (padding included), a negligible difference from the paper's description.
    """
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        targets.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


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
    was_training = model.training
    model.eval()
    pad_id = model.config.pad_id
    total_loss, correct, count = 0.0, 0, 0
    for batch in eval_batches:
        batch = batch.to(device)
        logits = forward_batch(model, batch)
        real = batch.tgt_out != pad_id
        n = int(real.sum())
        total_loss += float(sequence_loss(logits, batch.tgt_out, pad_id, 0.0)) * n
        correct += int(((logits.argmax(-1) == batch.tgt_out) & real).sum())
        count += n
    metrics = {"loss": total_loss / max(count, 1), "token_accuracy": correct / max(count, 1)}
    if with_exact_match and model.config.has_encoder and model.config.has_decoder:
        bos, eos = eval_batches[0].tgt_in[0, 0].item(), _eos_of(eval_batches[0])
        pairs = [pair for batch in eval_batches for pair in batch.pairs]
        metrics["exact_match"] = exact_match(model, pairs, bos, eos)
    model.train(was_training)
    return metrics


def _eos_of(batch: Batch) -> int:
    """The end token of a batch: the last real target token of its first pair."""
    return batch.pairs[0].target[-1]


@torch.no_grad()
def greedy_decode(
    model: Transformer, src: Tensor, bos_id: int, eos_id: int, max_new_tokens: int
) -> list[list[int]]:
    """Greedy translations of a batch of sources, with the key/value cache.

    ``src`` ``(B, Ts)`` padded source ids. Returns, per row, the generated ids without [BOS]
    and up to (not including) [EOS].
    """
    model.eval()
    batch = src.size(0)
    encoded = model.encode(src)
    cache = model.new_cache()
    step_input = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    outputs: list[Tensor] = []
    limit = min(max_new_tokens, model.config.max_len - 1)
    for _ in range(limit):
        logits = model.decode(step_input, encoded, cache=cache).logits[:, -1]  # (B, V)
        chosen = logits.argmax(dim=-1)
        chosen = chosen.masked_fill(finished, model.config.pad_id)
        outputs.append(chosen)
        finished |= chosen == eos_id
        if bool(finished.all()):
            break
        step_input = chosen[:, None]
    generated = torch.stack(outputs, dim=1).tolist() if outputs else [[] for _ in range(batch)]
    result = []
    for row in generated:
        result.append(row[: row.index(eos_id)] if eos_id in row else row)
    return result


@torch.no_grad()
def exact_match(
    model: Transformer,
    pairs: Sequence[EncodedPair],
    bos_id: int,
    eos_id: int,
    batch_size: int = 128,
) -> float:
    """Fraction of pairs whose greedy output equals the reference target exactly."""
    if not pairs:
        return 0.0
    device = model.device
    hits = 0
    for batch in batches(pairs, batch_size, model.config.pad_id):
        references = [list(p.target[1:-1]) for p in batch.pairs]  # drop BOS and EOS
        longest = max(len(r) for r in references)
        outputs = greedy_decode(model, batch.src.to(device), bos_id, eos_id, longest + 10)
        hits += sum(out == ref for out, ref in zip(outputs, references, strict=True))
    return hits / len(pairs)


@torch.no_grad()
def continuation_grammaticality(
    model: Transformer, tokenizer: Tokenizer, examples: Sequence[Example], max_new_tokens: int = 40
) -> float:
    """Share of greedy continuations (decoder-only) whose full text parses as toy English."""
    if not examples:
        return 0.0
    model.eval()
    ok = 0
    for example in examples:
        prompt = tokenizer.encode_ids(example.source, add_bos=True)
        tokens = pad([prompt], model.config.pad_id).to(model.device)
        cache = model.new_cache()
        logits = model.decode(tokens, cache=cache).logits[:, -1]
        generated: list[int] = []
        for _ in range(min(max_new_tokens, model.config.max_len - len(prompt))):
            chosen = int(logits.argmax(-1))
            if chosen == tokenizer.eos_id:
                break
            generated.append(chosen)
            step = torch.tensor([[chosen]], device=model.device)
            logits = model.decode(step, cache=cache).logits[:, -1]
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
        model, batches(pairs, batch_size, model.config.pad_id), model.device
    )
    metrics = {"loss": teacher_forced["loss"]}
    if architecture == "decoder-only":
        # Continuations are random under the grammar, so the exact text cannot be matched:
        # report how often the next token is predicted and whether continuations stay grammatical.
        metrics["next_token_accuracy"] = teacher_forced["token_accuracy"]
        metrics["grammatical"] = continuation_grammaticality(model, tokenizer, examples[:200])
    else:
        metrics["token_accuracy"] = teacher_forced["token_accuracy"]
        metrics["exact_match"] = exact_match(
            model, pairs, tokenizer.bos_id, tokenizer.eos_id, batch_size
        )
    metrics["examples"] = len(examples)
    return metrics
