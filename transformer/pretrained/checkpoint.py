"""Checkpoints: a folder of safetensors and JSON, never a pickle.

::

    model.safetensors        the weights (float32)
    config.json              {"format": 1, "model": ModelConfig, "task": ..., "training": ...}
    tokenizer.json           the tokenizer (Hugging Face tokenizers format)
    metrics.json             test metrics recorded after training
    snapshots/step_N.safetensors   weights during training (float16, to keep the folder small)

Loading checks every file and every tensor's name and shape against the configuration and
raises :class:`CheckpointError` naming the file and what is wrong.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from ..core.config import ConfigError, ModelConfig
from ..core.model import Transformer
from ..text.tokenization import Tokenizer, TokenizerError

FORMAT_VERSION = 1
MAX_WEIGHTS_BYTES = 512 * 1024 * 1024
_SNAPSHOT = re.compile(r"^step_(\d+)\.safetensors$")


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be loaded; the message names the file and the problem."""


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode), its tokenizer and what was recorded with it."""

    path: Path
    model: Transformer
    tokenizer: Tokenizer
    metrics: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)  # task, training settings, ...
    snapshot_steps: list[int] = field(default_factory=list)

    @property
    def config(self) -> ModelConfig:
        """The model's configuration."""
        return self.model.config

    @property
    def task(self) -> str | None:
        """The bundled task the model was trained on, if any."""
        return self.info.get("task")

    def load_snapshot(self, step: int) -> Transformer:
        """The model as it was at training ``step`` (a new module; this one is unchanged)."""
        return load_snapshot(self.path, step, self.config, self.model.device)


def unique_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The state dict with tied (shared) tensors stored once, under their first name."""
    seen: set[int] = set()
    unique = {}
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        unique[name] = tensor.detach().contiguous()
    return unique


def _alias_names(model: Transformer) -> set[str]:
    return set(model.state_dict()) - set(unique_state_dict(model))


def save_checkpoint(
    folder: str | Path,
    model: Transformer,
    tokenizer: Tokenizer,
    metrics: dict[str, Any] | None = None,
    info: dict[str, Any] | None = None,
    snapshots: dict[int, dict[str, Tensor]] | None = None,
) -> Path:
    """Write a checkpoint folder (created if needed) and return its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weights = {k: v.to("cpu", torch.float32) for k, v in unique_state_dict(model).items()}
    save_file(weights, folder / "model.safetensors", metadata={"format": str(FORMAT_VERSION)})
    document = {"format": FORMAT_VERSION, "model": model.config.to_dict(), **(info or {})}
    (folder / "config.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    tokenizer.save(folder / "tokenizer.json")
    (folder / "metrics.json").write_text(
        json.dumps(metrics or {}, indent=2) + "\n", encoding="utf-8"
    )
    snapshot_dir = folder / "snapshots"
    if snapshot_dir.exists():
        for old in snapshot_dir.glob("step_*.safetensors"):
            old.unlink()
    aliases = _alias_names(model)
    for step, state in sorted((snapshots or {}).items()):
        snapshot_dir.mkdir(exist_ok=True)
        half = {
            k: v.to("cpu", torch.float16).contiguous() for k, v in state.items() if k not in aliases
        }
        save_file(half, snapshot_dir / f"step_{step:06d}.safetensors")
    return folder


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise CheckpointError(f"{path.name} is missing from {path.parent}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path.name} is not valid JSON: {error}") from error


def _read_weights(path: Path) -> dict[str, Tensor]:
    if not path.is_file():
        raise CheckpointError(f"{path.name} is missing from {path.parent}")
    if path.stat().st_size > MAX_WEIGHTS_BYTES:
        raise CheckpointError(f"{path.name} is larger than {MAX_WEIGHTS_BYTES >> 20} MB")
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path.name} is not a readable safetensors file: {error}") from error


def _apply_weights(model: Transformer, weights: dict[str, Tensor], filename: str) -> None:
    """Copy ``weights`` into ``model`` after checking names and shapes; errors name the file."""
    expected = unique_state_dict(model)
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(model.state_dict()))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing tensors {missing[:5]}{' …' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(
                f"unexpected tensors {unexpected[:5]}{' …' if len(unexpected) > 5 else ''}"
            )
        raise CheckpointError(
            f"{filename} does not match config.json ({'; '.join(parts)}): the weights come from "
            "a different architecture."
        )
    for name, tensor in expected.items():
        if tuple(weights[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"{filename}: tensor {name} has shape {tuple(weights[name].shape)} but config.json "
                f"implies {tuple(tensor.shape)}."
            )
        if not torch.isfinite(weights[name]).all():
            raise CheckpointError(f"{filename}: tensor {name} contains NaN or infinity.")
    with torch.no_grad():
        for name, tensor in expected.items():
            tensor.copy_(weights[name].to(tensor.dtype))


def read_config(folder: str | Path) -> tuple[ModelConfig, dict[str, Any]]:
    """The model configuration and the rest of ``config.json`` (task, training, ...)."""
    path = Path(folder) / "config.json"
    document = _read_json(path)
    if not isinstance(document, dict) or "model" not in document:
        raise CheckpointError(f"{path.name} has no 'model' section")
    if document.get("format") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path.name} has format {document.get('format')!r}; this code reads format {FORMAT_VERSION}"
        )
    try:
        config = ModelConfig.from_dict(document["model"])
    except ConfigError as error:
        raise CheckpointError(f"{path.name}: {error}") from error
    info = {k: v for k, v in document.items() if k not in ("model", "format")}
    return config, info


def load_checkpoint(folder: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """Load and validate a checkpoint folder; the model is returned in eval mode on ``device``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    config, info = read_config(folder)
    try:
        tokenizer = Tokenizer.load(folder / "tokenizer.json")
    except TokenizerError as error:
        raise CheckpointError(f"tokenizer.json: {error}") from error
    vocab_needed = max(config.src_vocab_size, config.tgt_vocab_size)
    if tokenizer.vocab_size > vocab_needed:
        raise CheckpointError(
            f"tokenizer.json has {tokenizer.vocab_size} tokens but config.json's model has a "
            f"vocabulary of {vocab_needed}: they do not belong together."
        )
    model = Transformer(config)
    _apply_weights(model, _read_weights(folder / "model.safetensors"), "model.safetensors")
    metrics = _read_json(folder / "metrics.json") if (folder / "metrics.json").exists() else {}
    snapshot_dir = folder / "snapshots"
    steps = []
    if snapshot_dir.is_dir():
        steps = sorted(
            int(m.group(1)) for p in snapshot_dir.iterdir() if (m := _SNAPSHOT.match(p.name))
        )
    return Checkpoint(
        path=folder,
        model=model.to(device).eval(),
        tokenizer=tokenizer,
        metrics=metrics,
        info=info,
        snapshot_steps=steps,
    )


def load_snapshot(
    folder: str | Path, step: int, config: ModelConfig, device: str | torch.device = "cpu"
) -> Transformer:
    """The model of ``folder``'s snapshot at ``step``, in eval mode on ``device``."""
    path = Path(folder) / "snapshots" / f"step_{int(step):06d}.safetensors"
    model = Transformer(config)
    _apply_weights(model, _read_weights(path), f"snapshots/{path.name}")
    return model.to(device).eval()
