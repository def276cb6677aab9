"""What the benchmarks share for timing a call on the CPU or a GPU."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def elapsed_ms(fn: Callable[[], object], device: torch.device) -> float:
    """Milliseconds one call of ``fn`` takes, the GPU's queued work included (synchronised
    before and after on CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1000
