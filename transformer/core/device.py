"""Choosing where tensors live: the GPU when there is one, the CPU otherwise."""

from __future__ import annotations

import torch

DEVICE_CHOICES: tuple[str, ...] = ("auto", "cpu", "cuda", "mps")


def pick_device(preference: str | None = "auto") -> torch.device:
    """The device to run on.

    ``"auto"`` (or ``None``) picks CUDA, then Apple's MPS, then the CPU. An explicit choice
    that this machine lacks raises ``ValueError`` saying what is available.
    """
    preference = (preference or "auto").lower()
    available = {
        "cuda": torch.cuda.is_available(),
        "mps": bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available(),
        "cpu": True,
    }
    if preference == "auto":
        return torch.device(next(name for name in ("cuda", "mps", "cpu") if available[name]))
    kind = preference.split(":")[0]
    if kind not in available:
        raise ValueError(
            f"unknown device {preference!r}; choose one of {', '.join(DEVICE_CHOICES)}"
        )
    if not available[kind]:
        usable = [name for name, ok in available.items() if ok]
        raise ValueError(f"device {preference!r} is not available here; available: {usable}")
    return torch.device(preference)
