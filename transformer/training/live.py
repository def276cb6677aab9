"""Live training: a recipe's task trained in a background thread that reports its progress as it
goes, can be cancelled, stops at a deadline, and keeps snapshots of the weights in memory.

    >>> run = LiveTraining.for_task("reverse", steps=200, seed=0)
    >>> for report in run.reports():      # Progress records, as the steps happen
    ...     print(report.step, report.loss)
    >>> result = run.result()             # TrainingResult (re-raises the thread's error)
    >>> trained = run.checkpoint(result)  # an in-memory Checkpoint of the trained model
    >>> step, early = snapshot_checkpoint(trained, result.snapshots, 0)

The app drives this from a request (one training per request, the thread stops when the client
goes); a notebook can use it to keep working while a model trains.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torch import Tensor

from ..core.model import Transformer
from ..pretrained.checkpoint import Checkpoint
from ..text.tokenization import Tokenizer
from .data import EncodedPair, encode_examples
from .loop import Progress, TrainingConfig, TrainingResult, train
from .recipes import RECIPES, build_model, build_tokenizer
from .tasks import make_task

TRAINING_THREAD = (
    "training"  # name prefix of every training thread (tests check none outlive a run)
)
TASK_EXAMPLES = {"n_train": 4000, "n_validation": 200, "n_test": 200}  # per live run


@dataclass
class TaskRun:
    """What a live run of a recipe trains: the task, its tokenizer and model, the encoded data and
    the training settings."""

    task: str
    tokenizer: Tokenizer
    model: Transformer
    config: TrainingConfig
    train_pairs: list[EncodedPair]
    validation_pairs: list[EncodedPair]


def prepare_task_run(task: str, steps: int, seed: int = 0, device: str = "auto") -> TaskRun:
    """A recipe's task, ready to train for ``steps`` steps: fresh data drawn with ``seed``, its
    tokenizer, a fresh model, and the recipe's settings with evaluation every tenth of the run."""
    if task not in RECIPES:
        raise ValueError(f"unknown task {task!r}; choose one of {list(RECIPES)}")
    recipe = RECIPES[task]
    config = replace(
        recipe.training,
        steps=steps,
        seed=seed,
        eval_every=max(steps // 10, 10),
        device=device,
    )
    data = make_task(task, seed=config.seed, **TASK_EXAMPLES)
    tokenizer = build_tokenizer(recipe, data)
    model = build_model(recipe, tokenizer)
    architecture = model.config.architecture
    return TaskRun(
        task=task,
        tokenizer=tokenizer,
        model=model,
        config=config,
        train_pairs=encode_examples(data.train, tokenizer, architecture),
        validation_pairs=encode_examples(data.validation, tokenizer, architecture),
    )


class LiveTraining:
    """:func:`~transformer.training.loop.train` running in a daemon thread.

    Progress reports arrive through :meth:`reports`; :meth:`cancel` (or the deadline,
    ``time_limit_s`` seconds after the start) stops the loop before its next step, keeping what
    it has learned; :meth:`result` waits for the thread and returns its ``TrainingResult``.
    """

    def __init__(
        self,
        model: Transformer,
        train_pairs: Sequence[EncodedPair],
        config: TrainingConfig,
        validation_pairs: Sequence[EncodedPair] = (),
        time_limit_s: float | None = None,
        name: str = TRAINING_THREAD,
        run: TaskRun | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.run = run
        self._reports: queue.Queue[Progress | None] = queue.Queue()
        self._stop = threading.Event()
        self._outcome: dict[str, Any] = {}
        self._deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
        self._thread = threading.Thread(
            target=self._work,
            args=(list(train_pairs), list(validation_pairs)),
            daemon=True,
            name=name,
        )
        self._thread.start()

    @classmethod
    def for_task(
        cls,
        task: str,
        steps: int,
        seed: int = 0,
        device: str = "auto",
        time_limit_s: float | None = None,
    ) -> LiveTraining:
        """Start training a recipe's task (see :func:`prepare_task_run`) in the background."""
        run = prepare_task_run(task, steps, seed, device)
        return cls(
            run.model,
            run.train_pairs,
            run.config,
            run.validation_pairs,
            time_limit_s=time_limit_s,
            name=f"{TRAINING_THREAD}-{task}",
            run=run,
        )

    def _should_stop(self) -> bool:
        return self._stop.is_set() or (
            self._deadline is not None and time.monotonic() > self._deadline
        )

    def _work(self, train_pairs: list[EncodedPair], validation_pairs: list[EncodedPair]) -> None:
        try:
            self._outcome["result"] = train(
                self.model,
                train_pairs,
                self.config,
                validation_pairs,
                callback=self._reports.put,
                should_stop=self._should_stop,
            )
        except Exception as error:  # handed to the caller by result()
            self._outcome["error"] = error
        finally:
            self._reports.put(None)

    def reports(self) -> Iterator[Progress]:
        """Every progress report, as it happens, until the run ends (finished, cancelled, past
        its deadline or failed). Closing this iterator early cancels the run."""
        try:
            while (report := self._reports.get()) is not None:
                yield report
        finally:
            if self._thread.is_alive():
                self._stop.set()

    def cancel(self) -> None:
        """Ask the loop to stop before its next step (it keeps what it has learned)."""
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def result(self, timeout: float | None = None) -> TrainingResult:
        """Wait for the thread; its ``TrainingResult``, or the exception it raised."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the training is still running after {timeout} s")
        if "error" in self._outcome:
            raise self._outcome["error"]
        return self._outcome["result"]

    def checkpoint(self, result: TrainingResult) -> Checkpoint:
        """The trained model as an in-memory :class:`Checkpoint` (in eval mode), with the last
        validation metrics; needs a run started by :meth:`for_task` (it knows the tokenizer)."""
        if self.run is None:
            raise ValueError("checkpoint() needs a run started with LiveTraining.for_task")
        last = next((r.validation for r in reversed(result.history) if r.validation), {})
        return Checkpoint(
            path=Path("."),
            model=self.model.eval(),
            tokenizer=self.run.tokenizer,
            metrics={f"validation_{k}": v for k, v in last.items()},
            info={"task": self.run.task},
        )


def history_row(report: Progress) -> dict[str, float]:
    """One row of a training history: step, loss and any validation metrics (``val_...``)."""
    row = {"step": report.step, "loss": report.loss}
    if report.validation:
        row.update({f"val_{k}": v for k, v in report.validation.items()})
    return row


def snapshot_checkpoint(
    trained: Checkpoint, snapshots: dict[int, dict[str, Tensor]], index: int
) -> tuple[int, Checkpoint]:
    """``(step, checkpoint)`` of the ``index``-th snapshot kept during training (clamped to the
    last), as an eval-mode model with ``trained``'s configuration, tokenizer and task."""
    steps = sorted(snapshots)
    if index < 0:
        raise ValueError(f"a snapshot index counts from 0, got {index}")
    if not steps:
        raise ValueError("the last training run kept no snapshots")
    step = steps[min(index, len(steps) - 1)]
    model = Transformer(trained.config)
    model.load_state_dict(snapshots[step])
    return step, Checkpoint(
        path=Path("."), model=model.eval(), tokenizer=trained.tokenizer, info=trained.info
    )


__all__ = [
    "TRAINING_THREAD",
    "LiveTraining",
    "TaskRun",
    "history_row",
    "prepare_task_run",
    "snapshot_checkpoint",
]
