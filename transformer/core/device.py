"""Choosing where tensors live: the GPU when there is one, the CPU otherwise."""

from __future__ import annotations

import os

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


DTYPE_CHOICES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
"""What ``--dtype`` accepts: ``auto`` is float32 on a CPU and the checkpoint's own on a GPU."""

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(
    choice: str | torch.dtype | None, device: torch.device | str, stored: torch.dtype
) -> torch.dtype:
    """The dtype a model's weights are kept in on ``device``.

    ``"auto"`` (or ``None``): float32 on a CPU (bfloat16 and float16 matrix products are
    several times slower there, and a student's laptop has the RAM of a small model), the
    checkpoint's own ``stored`` dtype elsewhere (a GPU reads bfloat16 at full speed, in half the
    memory). An explicit choice (``"bfloat16"`` or a ``torch.dtype``) is kept as given; an
    unknown name raises ``ValueError`` listing :data:`DTYPE_CHOICES`.
    """
    if isinstance(choice, torch.dtype):
        if choice not in _DTYPES.values():
            raise ValueError(
                f"dtype {choice} is not a floating type we run; use float32, bfloat16 or float16"
            )
        return choice
    name = (choice or "auto").lower()
    if name == "auto":
        return torch.float32 if torch.device(device).type == "cpu" else stored
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {choice!r}; choose one of {', '.join(DTYPE_CHOICES)}")
    return _DTYPES[name]


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    """``MemAvailable`` of Linux's ``/proc/meminfo`` in bytes (what can be allocated without
    swapping, page cache counted as free), or ``None`` where there is no such file."""
    try:
        with open(path, encoding="ascii") as lines:
            for line in lines:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def free_memory(device: torch.device | str) -> int | None:
    """Bytes that ``device`` can still hold, or ``None`` where this cannot be told.

    CPU: ``MemAvailable`` from ``/proc/meminfo`` (elsewhere the free physical pages
    ``os.sysconf`` reports); CUDA: the driver's free memory (``torch.cuda.mem_get_info``), which
    counts what other processes hold; other devices: ``None`` (not checked).
    """
    device = torch.device(device)
    if device.type == "cpu":
        available = _meminfo_available()
        if available is not None:
            return available
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return None


def format_bytes(n: int) -> str:
    """``n`` bytes for a message: ``"16.1 GB"``, ``"512 MB"`` (decimal units, as disks and
    model cards count them)."""
    if n >= 10**9:
        return f"{n / 10**9:.1f} GB"
    return f"{max(n, 0) / 10**6:.0f} MB"
