"""A small model trained live in the background (private to the session): the training
endpoint, Cancel, the progress line and the curves."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Any

import gradio as gr

from transformer import figures
from transformer.training.live import LiveTraining, history_row

from ...serving import limits
from ...serving.endpoints import takes_request
from ...serving.errors import friendly, gpu
from ...serving.state import TRAINED_HERE, ModelRegistry, SessionModels
from .description import plural
from .request import TrainingRequest, session_key

ACCURACY_KEYS = ["val_token_accuracy", "val_exact_match", "val_next_token_accuracy"]
BAR_WIDTH = 30  # characters of the progress bar
# Trainings running now, by browser session, so that Cancel can stop its own (bounded: a
# session that never comes back leaves one small entry, dropped oldest first).
_RUNNING: OrderedDict[str, tuple[LiveTraining, threading.Event]] = OrderedDict()
_HISTORIES: OrderedDict[str, list[dict[str, float]]] = OrderedDict()
_KEEP_SESSIONS = 256
# Held while the tables above change, by the running training and by the snapshots.
running_lock = threading.Lock()


def training_curves(history: list[dict[str, float]], large: bool) -> Any:
    """Loss and accuracy curves; accuracy panels only for the metrics this run reports."""
    if not history:
        return figures.placeholder_figure(
            "Loss and accuracy",
            "press Train: the curves grow here as the model learns",
            large_font=large,
        )
    present = [key for key in ACCURACY_KEYS if any(key in row for row in history)]
    return figures.training_curves_figure(history, accuracy_keys=present, large_font=large)


def progress_line(step: int, total: int, loss: float, tokens_per_second: float) -> str:
    """A text progress bar with the step, the loss and the speed."""
    done = int(step / total * BAR_WIDTH)
    bar = "█" * done + "░" * (BAR_WIDTH - done)
    return f"`{bar}` step {step}/{total} · loss {loss:.3f} · {tokens_per_second:,.0f} tokens/s"


def remember(table: OrderedDict, key: Hashable, value: Any) -> None:
    """Store ``value`` under ``key`` as the newest entry of ``table``, under ``running_lock``."""
    with running_lock:
        table[key] = value
        table.move_to_end(key)
        while len(table) > _KEEP_SESSIONS:
            table.popitem(last=False)


@friendly
@gpu
@takes_request(TrainingRequest.of, optional=True)
def run_training(
    registry: ModelRegistry, asked_for: TrainingRequest
) -> Iterator[tuple[str, Any, SessionModels]]:
    """The ``/train`` endpoint: train a recipe's task live, streaming (progress, curves, session);
    the trained model and its snapshots end up in the session."""
    n_steps, large, session = asked_for.steps, asked_for.large, asked_for.session
    live = LiveTraining.for_task(
        asked_for.task,
        n_steps,
        seed=asked_for.seed,
        device=str(registry.device),
        time_limit_s=limits.TRAINING_TIME_LIMIT_S,
    )
    key = asked_for.key
    asked = threading.Event()  # set by Cancel
    if key is not None:
        remember(_RUNNING, key, (live, asked))
    history: list[dict[str, float]] = []
    try:
        for report in live.reports():
            history.append(history_row(report))
            if report.step % 10 == 0 or report.validation or report.step == n_steps:
                line = progress_line(report.step, n_steps, report.loss, report.tokens_per_second)
                yield line, training_curves(history, large), session
    finally:
        live.cancel()  # a cancelled or disconnected client stops the training thread too
        if key is not None:
            with running_lock:
                if _RUNNING.get(key, (None,))[0] is live:
                    del _RUNNING[key]
    if key is not None:
        remember(_HISTORIES, key, history)
    result = live.result()
    session = SessionModels(trained=live.checkpoint(result), snapshots=result.snapshots)
    kept = (
        f"The model as trained so far is kept: it is **{TRAINED_HERE}** in the other tabs; "
        f"{plural(len(result.snapshots), 'snapshot')} kept."
    )
    if result.cancelled and asked.is_set():
        head = (
            f"**Cancelled** at step {result.steps_done:,} of {n_steps:,} ({result.seconds:.1f} s). "
        )
    elif result.cancelled:
        head = (
            f"**Stopped at the time limit of {limits.TRAINING_TIME_LIMIT_S:g} s**, at step "
            f"{result.steps_done:,} of {n_steps:,}. "
        )
    else:
        head = f"Done: {plural(result.steps_done, 'step')} in {result.seconds:.1f} s. "
    yield head + kept, training_curves(history, large), session


def cancel_training(request: gr.Request) -> str:
    """Ask this session's training to stop; it reports where it stopped and keeps the model."""
    key = session_key(request)
    with running_lock:
        running = _RUNNING.get(key) if key is not None else None
    if running is None:
        return "_No training is running in this session._"
    live, asked = running
    asked.set()
    live.cancel()
    return "_Stopping after the current step…_"


def redraw_curves(large: bool, request: gr.Request) -> Any:
    """The last training's curves again (Large font switched)."""
    key = session_key(request)
    history = _HISTORIES.get(key, []) if key is not None else []
    return training_curves(history, large)
