"""The models shipped in ``assets/models/``, loaded once and reported by name when broken."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..pretrained.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from .tasks import TASKS

BUNDLED_DIR = Path(__file__).resolve().parents[2] / "assets" / "models"
# One checkpoint per task, translation first (the app opens on it).
BUNDLED_NAMES: tuple[str, ...] = ("translate", *(task for task in TASKS if task != "translate"))


@dataclass
class BundledModels:
    """Loaded checkpoints by name, and for each one that failed, the reason."""

    models: dict[str, Checkpoint] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def load_bundled(
    device: str | torch.device = "cpu",
    folder: str | Path = BUNDLED_DIR,
    names: tuple[str, ...] = BUNDLED_NAMES,
) -> BundledModels:
    """Load every bundled model; a missing or corrupted one is recorded in ``errors`` by name
    and the others still load."""
    result = BundledModels()
    for name in names:
        try:
            result.models[name] = load_checkpoint(Path(folder) / name, device)
        except CheckpointError as error:
            # Shown in the UI: name the checkpoint relative to the repository, not by its path.
            result.errors[name] = str(error).replace(str(Path(folder).resolve()), "assets/models")
        except Exception as error:  # unreadable file, device error, ...: the others still load
            result.errors[name] = f"it could not be read ({type(error).__name__})"
    return result
