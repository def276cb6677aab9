"""Attention at each snapshot kept during training (a bundled model's, or the session's own)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import gradio as gr

from transformer import figures
from transformer.pretrained.checkpoint import Checkpoint
from transformer.training.live import snapshot_checkpoint

from ...serving.errors import InputError, friendly, gpu
from ...serving.inputs import as_int
from ...serving.state import TRAINED_HERE, ModelRegistry, SessionModels
from ..attention import attention_view, grid_panel
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


def snapshot_steps(registry: ModelRegistry, name: str, session: SessionModels | None) -> list[int]:
    """The training steps at which ``name`` kept snapshots (``[]`` before any training)."""
    if name == TRAINED_HERE:
        return sorted(session.snapshots) if session is not None and session.trained else []
    return list(registry.checkpoint(name, session).snapshot_steps)


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


@friendly
@gpu
def snapshot_live(
    registry: ModelRegistry,
    name: str,
    index: Any,
    sentence: str,
    large: bool,
    session: SessionModels | None,
) -> Any:
    """The live snapshot view (any model that kept snapshots): every head's attention at
    snapshot ``index`` of ``name``'s training (a bundled model's or the session's own), reading
    the task's correct answer where there is one; a hint figure before there is anything to
    show."""
    steps = snapshot_steps(registry, name, session)
    if not steps:
        return _hint(
            large,
            "train a model above first: its snapshots appear here"
            if name == TRAINED_HERE
            else f"{name} kept no snapshots",
        )
    i = as_int(index, "snapshot", 0, 1000)
    if i >= len(steps):
        raise InputError(f"snapshot must be between 0 and {len(steps) - 1}, got {i}")
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
def snapshot_view(
    registry: ModelRegistry, index: float, sentence: str, large: bool, session: SessionModels
) -> Any:
    """The ``/snapshot`` endpoint: every head's attention at one snapshot of the session's last
    training run (a hint figure before any training)."""
    return snapshot_live(registry, TRAINED_HERE, index, sentence, large, session)


snapshot_of = snapshot_live
"""Every head's attention at one snapshot of a model's training: :func:`snapshot_live`."""


def snapshot_controls(registry: ModelRegistry, name: str, session: SessionModels | None) -> tuple:
    """(slider, input) updates for ``name``: the slider spans the snapshots that exist."""
    steps = snapshot_steps(registry, name, session)
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
