"""What the Model & training tab's controls ask for, read once: :class:`ModelRequest`
(``/model_info``), :class:`TrainingRequest` (``/train``) and :class:`SnapshotRequest`
(``/snapshot``, the live snapshot view and its slider).

:func:`ui.serving.endpoints.takes_request` makes the tab's handlers from their builders: each
value is checked where it arrives (an unknown task, a snapshot the model did not keep: a
message naming what to choose), and the handlers read the fields only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from transformer.pretrained.checkpoint import Checkpoint
from transformer.training.recipes import RECIPES

from ...serving.errors import InputError, readable_list
from ...serving.inputs import as_int, as_text, shown
from ...serving.state import TRAINED_HERE, ModelRegistry, SessionModels


@dataclass(frozen=True)
class ModelRequest:
    """The model the Describe section names, looked up once."""

    name: str
    checkpoint: Checkpoint

    @classmethod
    def of(cls, registry: ModelRegistry, name: Any, session: SessionModels | None) -> ModelRequest:
        """The model called ``name`` (the session's own for :data:`TRAINED_HERE`)."""
        return cls(name, registry.checkpoint(name, session))


def session_key(connection: gr.Request | None) -> str | None:
    """The browser session a request comes from (``None`` for a call without one)."""
    return getattr(connection, "session_hash", None) if connection is not None else None


@dataclass(frozen=True)
class TrainingRequest:
    """One ``/train`` request, read once from the tab's controls: which task, how many steps,
    which seed; the page's Large font, the session's models, and the browser session's key
    (Cancel finds its training by it; ``None`` without one)."""

    task: str
    steps: int
    seed: int
    large: bool = False
    session: Any = None
    key: str | None = None

    @classmethod
    def of(
        cls,
        task: Any,
        steps: Any,
        seed: Any,
        large: Any,
        session: Any,
        request: gr.Request | None = None,
    ) -> TrainingRequest:
        """The request the controls' raw values ask for; ``InputError`` naming a bad value.
        ``request`` is gradio's, for the browser session."""
        if not isinstance(task, str) or task not in RECIPES:
            raise InputError(f"unknown task {shown(task)}: choose {readable_list(list(RECIPES))}")
        n = as_int(steps, "steps", 1, 3000)
        seed_value = as_int(seed, "seed", 0, 2**31 - 1)
        return cls(task, n, seed_value, bool(large), session, session_key(request))


def snapshot_steps(registry: ModelRegistry, name: str, session: SessionModels | None) -> list[int]:
    """The training steps at which ``name`` kept snapshots (``[]`` before any training)."""
    if name == TRAINED_HERE:
        return sorted(session.snapshots) if session is not None and session.trained else []
    return list(registry.checkpoint(name, session).snapshot_steps)


_UNSET: Any = object()  # a snapshot not asked for (fitting the slider): no client can send it


@dataclass(frozen=True)
class SnapshotRequest:
    """Attention at one snapshot of a model's training, read once: the model (``name``), the
    training ``steps`` it kept snapshots at (``[]``: none yet), the snapshot asked for
    (``index`` into ``steps``; ``None`` when there is none to show or none was asked), the
    sentence, Large font and the session's models."""

    name: str
    steps: tuple[int, ...]
    index: int | None
    sentence: str
    large: bool
    session: SessionModels | None

    @classmethod
    def of(
        cls,
        registry: ModelRegistry,
        index: Any = _UNSET,
        sentence: Any = "",
        large: Any = False,
        session: SessionModels | None = None,
        name: Any = TRAINED_HERE,
    ) -> SnapshotRequest:
        """The request; an :class:`InputError` for a snapshot the model did not keep. Each
        event sends its own values (:data:`LIVE_VALUES`, :data:`VIEW_VALUES`,
        :data:`CONTROL_VALUES`); ``/snapshot`` sends no name: the session's own training."""
        steps = tuple(snapshot_steps(registry, name, session))
        chosen = None
        if steps and index is not _UNSET:
            chosen = as_int(index, "snapshot", 0, 1000)
            if chosen >= len(steps):
                raise InputError(f"snapshot must be between 0 and {len(steps) - 1}, got {chosen}")
        return cls(name, steps, chosen, as_text(sentence, "input"), bool(large), session)


LIVE_VALUES = ("name", "index", "sentence", "large", "session")
"""The live snapshot view's values, in the order it sends them."""
VIEW_VALUES = ("index", "sentence", "large", "session")
"""``/snapshot``'s values: the session's own training's snapshot."""
CONTROL_VALUES = ("name", "session")
"""What fitting the slider to a model reads."""
