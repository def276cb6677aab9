"""transformer.training.live: training in a background thread with progress, cancel, a deadline,
and in-memory snapshots."""

from __future__ import annotations

import threading

import pytest
import torch

from transformer.training.live import (
    TRAINING_THREAD,
    LiveTraining,
    history_row,
    prepare_task_run,
    snapshot_checkpoint,
)
from transformer.training.loop import Progress, TrainingConfig


def _training_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(TRAINING_THREAD)]


@pytest.mark.slow  # a real training run
def test_cancel_stops_the_thread_and_reports_the_step_it_reached():
    live = LiveTraining.for_task("reverse", steps=3000, seed=0, device="cpu")
    assert live.running and any(t.name == f"{TRAINING_THREAD}-reverse" for t in _training_threads())
    seen = []
    for report in live.reports():
        seen.append(report.step)
        if report.step == 3:
            live.cancel()
    result = live.result(timeout=60)
    assert not live.running and not _training_threads()
    # The loop stops before its next step: the thread may have begun one or two more steps while
    # the report of step 3 was on its way, and the last report names the step it stopped at.
    assert result.cancelled and result.steps_done == seen[-1]
    assert seen == list(range(1, seen[-1] + 1)) and 3 <= seen[-1] <= 10


@pytest.mark.slow  # a real training run
def test_closing_the_reports_early_cancels_the_run():
    live = LiveTraining.for_task("reverse", steps=3000, seed=0, device="cpu")
    reports = live.reports()
    assert next(reports).step == 1
    reports.close()  # as gradio does when a client goes away
    result = live.result(timeout=60)
    assert result.cancelled and result.steps_done < 3000


@pytest.mark.slow  # a real training run
def test_a_deadline_stops_the_run_and_keeps_what_it_learned():
    live = LiveTraining.for_task("reverse", steps=3000, seed=0, device="cpu", time_limit_s=0.0)
    assert list(live.reports()) == []
    result = live.result(timeout=60)
    assert result.cancelled and result.steps_done == 0


def test_an_error_in_the_thread_reaches_the_caller():
    run = prepare_task_run("reverse", steps=5, device="cpu")
    live = LiveTraining(run.model, [], TrainingConfig(steps=5, device="cpu"))
    assert list(live.reports()) == []
    with pytest.raises(ValueError, match="no training data"):
        live.result(timeout=60)
    with pytest.raises(ValueError, match="for_task"):
        live.checkpoint(None)


@pytest.mark.slow  # a real training run
def test_a_finished_run_gives_a_checkpoint_and_snapshots_of_its_weights():
    live = LiveTraining.for_task("reverse", steps=20, seed=1, device="cpu")
    reports = list(live.reports())
    result = live.result(timeout=120)
    assert [r.step for r in reports] == list(range(1, 21))  # one report per step, in order
    assert [r.step for r in reports if r.validation] == [10, 20]  # eval every max(20 // 10, 10)
    assert not result.cancelled and result.steps_done == 20
    trained = live.checkpoint(result)
    assert trained.task == "reverse" and not trained.model.training
    last_validation = next(r.validation for r in reversed(reports) if r.validation)
    assert trained.metrics == {f"validation_{k}": v for k, v in last_validation.items()}
    steps = sorted(result.snapshots)
    assert steps[-1] == 20
    step, early = snapshot_checkpoint(trained, result.snapshots, 0)
    assert step == steps[0] and not early.model.training
    for name, tensor in early.model.state_dict().items():
        assert torch.equal(tensor, result.snapshots[step][name]), name
    assert snapshot_checkpoint(trained, result.snapshots, 99)[0] == steps[-1]  # clamped
    with pytest.raises(ValueError, match="counts from 0"):
        snapshot_checkpoint(trained, result.snapshots, -1)
    with pytest.raises(ValueError, match="no snapshots"):
        snapshot_checkpoint(trained, {}, 0)


def test_history_row_names_validation_metrics():
    plain = Progress(
        step=3, total_steps=10, loss=1.5, learning_rate=0.1, tokens_per_second=9, elapsed=1
    )
    assert history_row(plain) == {"step": 3, "loss": 1.5}
    evaluated = Progress(3, 10, 1.5, 0.1, 9, 1, validation={"loss": 1.2, "exact_match": 0.5})
    assert history_row(evaluated) == {
        "step": 3,
        "loss": 1.5,
        "val_loss": 1.2,
        "val_exact_match": 0.5,
    }


def test_prepare_task_run_refuses_an_unknown_task():
    with pytest.raises(ValueError, match="unknown task 'poetry'"):
        prepare_task_run("poetry", steps=5)
