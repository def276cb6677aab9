"""Training as in the paper (section 5): Adam with warm-up, label smoothing, dropout; plain PyTorch.

:func:`train` runs a seeded, reproducible loop over padded batches, reports progress through a
callback (the app draws a live loss curve from it), can be cancelled between steps, evaluates
periodically and keeps a few snapshots of the weights so the app can show attention forming.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from ..core.device import pick_device
from ..core.model import Transformer
from .data import Batch, EncodedPair, batches
from .evaluation import evaluate_batches, forward_batch, sequence_loss
from .rng import PrivateRng


@dataclass(frozen=True)
class TrainingConfig:
    """How to train.

    ``lr_factor`` scales the paper's schedule (equation 3):
    ``lr = lr_factor · d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)``.
    ``snapshots`` is how many copies of the weights to keep, spread over the run (the first
    after the first step, the last at the end).
    """

    steps: int = 2000
    batch_size: int = 64
    warmup_steps: int = 400
    lr_factor: float = 1.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    eval_every: int = 250
    eval_batches: int = 4
    snapshots: int = 4
    seed: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        checks = {
            "steps": self.steps >= 1,
            "batch_size": self.batch_size >= 1,
            "warmup_steps": self.warmup_steps >= 1,
            "lr_factor": self.lr_factor > 0,
            "label_smoothing": 0 <= self.label_smoothing < 1,
            "clip_norm": self.clip_norm > 0,
            "eval_every": self.eval_every >= 1,
            "snapshots": self.snapshots >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"TrainingConfig.{name}={getattr(self, name)!r} is out of range")

    def to_dict(self) -> dict:
        """The settings as a plain dict (recorded in a checkpoint's config.json)."""
        return asdict(self)


def noam_learning_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The paper's schedule (equation 3): linear warm-up, then decay with 1/√step."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


@dataclass
class Progress:
    """One report to the progress callback (after each step, and after each evaluation)."""

    step: int
    total_steps: int
    loss: float
    learning_rate: float
    tokens_per_second: float
    elapsed: float
    validation: dict[str, float] | None = None

    @property
    def fraction(self) -> float:
        """Share of the run done, in 0..1."""
        return self.step / self.total_steps


@dataclass
class TrainingResult:
    """What :func:`train` returns: the history of reports, the snapshots and whether it was
    cancelled. ``snapshots`` maps a step to a CPU copy of the model's state dict."""

    history: list[Progress]
    snapshots: dict[int, dict[str, Tensor]] = field(default_factory=dict)
    cancelled: bool = False
    steps_done: int = 0
    seconds: float = 0.0


def _snapshot_steps(total: int, n: int) -> list[int]:
    if n <= 0:
        return []
    if n == 1:
        return [total]
    # Spread on a log scale: attention changes most early in training.
    steps = {round(math.exp(math.log(total) * i / (n - 1))) for i in range(n)}
    return sorted(min(max(s, 1), total) for s in steps)


def train(
    model: Transformer,
    train_pairs: Sequence[EncodedPair],
    config: TrainingConfig,
    validation_pairs: Sequence[EncodedPair] = (),
    callback: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    show_progress_bar: bool = False,
) -> TrainingResult:
    """Train ``model`` in place on encoded pairs.

    Args:
        model: the model (moved to ``config.device``).
        train_pairs: training data from :func:`transformer.data.encode_examples`.
        config: the :class:`TrainingConfig`.
        validation_pairs: evaluated every ``config.eval_every`` steps and at the end.
        callback: called with a :class:`Progress` after every step.
        should_stop: polled before every step; returning ``True`` cancels the run cleanly.
        show_progress_bar: draw a tqdm bar (for the command line).
    """
    if not train_pairs:
        raise ValueError("no training data")
    longest = max(max(len(p.source), len(p.target)) for p in (*train_pairs, *validation_pairs))
    if longest > model.config.max_len:
        raise ValueError(
            f"the data has sequences of {longest} tokens but the model's max_len is "
            f"{model.config.max_len}: raise max_len or use a larger tokenizer vocabulary"
        )
    device = pick_device(config.device)
    # Dropout draws from the run's own stream, shuffling from its own random.Random: the same
    # seed gives the same run, and the process's global generators are left as they were.
    dropout_rng = PrivateRng(config.seed, device)
    rng = random.Random(config.seed)
    has_source = model.config.has_encoder
    model.to(device).train()
    pad_id = model.config.pad_id
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda i: noam_learning_rate(
            i + 1, model.config.d_model, config.warmup_steps, config.lr_factor
        ),
    )
    eval_set = batches(validation_pairs, config.batch_size, pad_id, has_source=has_source)
    eval_set = eval_set[: config.eval_batches]
    snapshot_at = set(_snapshot_steps(config.steps, config.snapshots))
    result = TrainingResult(history=[])
    bar = None
    if show_progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.steps, unit="step")

    epoch: list[Batch] = []
    start = time.perf_counter()
    tokens_seen = 0
    for step in range(1, config.steps + 1):
        if should_stop is not None and should_stop():
            result.cancelled = True
            break
        if not epoch:
            epoch = batches(
                train_pairs, config.batch_size, pad_id, shuffle=True, rng=rng, has_source=has_source
            )
            epoch.reverse()  # pop() from the end walks the shuffled order
        batch = epoch.pop().to(device)
        with dropout_rng.active():
            logits = forward_batch(model, batch)
        loss = sequence_loss(logits, batch.tgt_out, pad_id, config.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
        optimizer.step()
        schedule.step()
        tokens_seen += batch.n_tokens
        elapsed = time.perf_counter() - start

        validation = None
        if eval_set and (step % config.eval_every == 0 or step == config.steps):
            validation = evaluate_batches(model, eval_set, device, with_exact_match=True)
        report = Progress(
            step=step,
            total_steps=config.steps,
            loss=loss.item(),
            learning_rate=float(schedule.get_last_lr()[0]),
            tokens_per_second=tokens_seen / max(elapsed, 1e-9),
            elapsed=elapsed,
            validation=validation,
        )
        result.history.append(report)
        result.steps_done = step
        if step in snapshot_at:
            result.snapshots[step] = {
                k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()
            }
        if callback is not None:
            callback(report)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(
                loss=f"{report.loss:.3f}",
                **({"val_acc": f"{validation['token_accuracy']:.3f}"} if validation else {}),
            )
    if bar is not None:
        bar.close()
    model.eval()
    result.seconds = time.perf_counter() - start
    return result
