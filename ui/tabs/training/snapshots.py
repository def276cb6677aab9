"""Attention at each snapshot kept during training (a bundled model's, or the session's own)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import gradio as gr

from transformer import figures
from transformer.pretrained.checkpoint import Checkpoint
from transformer.training.live import snapshot_checkpoint

from ...serving.endpoints import takes_request
from ...serving.errors import friendly, gpu
from ...serving.state import TRAINED_HERE, ModelRegistry
from ..attention import attention_view, grid_panel
from .request import (
    CONTROL_VALUES,
    LIVE_VALUES,
    VIEW_VALUES,
    SnapshotRequest,
)
from .running import remember, running_lock

# A sentence each bundled task reads, for the snapshot view.
TASK_SENTENCES = {
    "translate": "the small cat sees a red ball",
    "reverse": "a b c d e f",
    "continue": "the teacher sees",
}


def snapshot_sources(registry: ModelRegistry) -> list[str]:
    """The models whose snapshots can be shown: bundled ones that kept some, and the session's."""
    bundled = [n for n, c in registry.bundled.models.items() if c.snapshot_steps]
    return [*bundled, TRAINED_HERE]


_SNAPSHOTS: OrderedDict[tuple[str, int], Checkpoint] = OrderedDict()


def _bundled_snapshot(name: str, checkpoint: Checkpoint, step: int) -> Checkpoint:
    """A bundled model's snapshot as a checkpoint, read from disk once (a few kept)."""
    key = (name, step)
    with running_lock:
        if key in _SNAPSHOTS:
            return _SNAPSHOTS[key]
    frozen = Checkpoint(
        path=checkpoint.path,
        model=checkpoint.load_snapshot(step),
        tokenizer=checkpoint.tokenizer,
        info=checkpoint.info,
    )
    remember(_SNAPSHOTS, key, frozen)
    return frozen


def _hint(large: bool, text: str) -> Any:
    return figures.placeholder_figure("Attention at a snapshot", text, large_font=large)


def _snapshot_figure(registry: ModelRegistry, request: SnapshotRequest) -> Any:
    """Every head's attention at the snapshot asked for; a hint figure before there is one."""
    name, steps, i, session = request.name, request.steps, request.index, request.session
    sentence, large = request.sentence, request.large
    if i is None:
        return _hint(
            large,
            "train a model above first: its snapshots appear here"
            if name == TRAINED_HERE
            else f"{name} kept no snapshots",
        )
    if name == TRAINED_HERE:
        # The session's own model has snapshots (``steps``), so there is a session with one.
        assert session is not None and session.trained is not None
        step, frozen = snapshot_checkpoint(session.trained, session.snapshots, i)
    else:
        step = steps[i]
        frozen = _bundled_snapshot(name, registry.checkpoint(name, session), step)
    kind = (
        "cross-attention (decoder → encoder)"
        if frozen.config.has_encoder
        else "decoder masked self-attention"
    )
    view = attention_view(
        registry, session, sentence, name, kind, 1, 1, 1, checkpoint=frozen, use_reference=True
    )
    grid = grid_panel(view, large)
    grid.update_layout(
        title=f"Snapshot at step {step:,} of training · {kind} · every layer and head"
    )
    return grid


@friendly
@gpu
@takes_request(SnapshotRequest.of, LIVE_VALUES)
def snapshot_live(registry: ModelRegistry, request: SnapshotRequest) -> Any:
    """The live snapshot view (any model that kept snapshots): every head's attention at
    snapshot ``index`` of ``name``'s training (a bundled model's or the session's own), reading
    the task's correct answer where there is one; a hint figure before there is anything to
    show."""
    return _snapshot_figure(registry, request)


@friendly
@gpu
@takes_request(SnapshotRequest.of, VIEW_VALUES)
def snapshot_view(registry: ModelRegistry, request: SnapshotRequest) -> Any:
    """The ``/snapshot`` endpoint: every head's attention at one snapshot of the session's last
    training run (a hint figure before any training)."""
    return _snapshot_figure(registry, request)


snapshot_of = snapshot_live
"""Every head's attention at one snapshot of a model's training: :func:`snapshot_live`."""


@friendly
@takes_request(SnapshotRequest.of, CONTROL_VALUES)
def snapshot_controls(registry: ModelRegistry, request: SnapshotRequest) -> tuple:
    """(slider, input) updates for ``name``: the slider spans the snapshots that exist."""
    name, steps, session = request.name, request.steps, request.session
    last = max(len(steps) - 1, 0)
    label = (
        "Snapshot: " + ", ".join(f"{i} = step {s:,}" for i, s in enumerate(steps))
        if steps
        else "Snapshot (none yet)"
    )
    slider = gr.update(
        minimum=0, maximum=max(last, 1), value=last, label=label, interactive=len(steps) > 1
    )
    task = TRAINED_HERE
    if name != TRAINED_HERE:
        task = registry.checkpoint(name, session).task or ""
    elif session is not None and session.trained is not None:
        task = session.trained.task or ""
    sentence = TASK_SENTENCES.get(task)
    return slider, gr.update(value=sentence) if sentence else gr.update()
