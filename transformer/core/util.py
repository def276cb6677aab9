"""Small helpers the whole library shares: type checks of user values, padding rows of ids into
a batch, and the eval-mode guard."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeGuard

import torch


def is_int(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is an integer and not a bool (``True`` is an ``int`` in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is an ``int`` or ``float`` and not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def pad(rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Right-pad lists of ids into a ``(len(rows), max_len)`` long tensor."""
    width = max((len(row) for row in rows), default=0)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """The model in eval mode (dropout off) inside the block, its training flag restored after.

    Every library call that runs a model for inspection, generation or evaluation uses this, so
    a model the caller is training stays in training mode.
    """
    was_training = model.training
    if was_training:
        model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()
