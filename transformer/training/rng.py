"""Training's randomness kept to itself: a server runs several visitors' trainings and decoding
sessions in one process, so training must never seed or advance PyTorch's global generators
for anyone else.

PyTorch draws weight initialisation and dropout from its *global* generators (``nn.Dropout``
takes no ``generator``). The documented way to use them without disturbing others is
:func:`torch.random.fork_rng`: save the global state, draw, restore it. Here each run keeps its
own copy of the generator state and swaps it in only while it draws (:meth:`PrivateRng.active`),
under one process-wide lock, so two runs in two threads never interleave their draws and the
caller's global state is the same after a training run as before it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_GLOBAL_RNG_LOCK = threading.Lock()
"""Held whenever training has swapped its own state into the global generators."""


def _cuda_devices(device: torch.device | str | None) -> list[int]:
    device = torch.device(device) if device is not None else None
    if device is None or device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


@contextmanager
def seeded_global_rng(seed: int, device: torch.device | str | None = None) -> Iterator[None]:
    """Inside the block the global generators are seeded with ``seed``; after it they are back
    where they were (for anyone else in the process). Use it around code that draws from the
    global generators, such as building a model (its weight initialisation)."""
    with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=_cuda_devices(device)):
        torch.manual_seed(seed)
        yield


class PrivateRng:
    """One run's own state of the global CPU (and CUDA) generators, seeded with ``seed``.

    ``with rng.active():`` swaps the run's state in (the global state is restored after), so
    dropout inside the block draws from the run's stream: the same seed gives the same run, and
    nothing outside the block sees a difference.
    """

    def __init__(self, seed: int, device: torch.device | str | None = None) -> None:
        self._devices = _cuda_devices(device)
        with seeded_global_rng(seed, device):
            self._cpu = torch.get_rng_state()
            self._cuda = [torch.cuda.get_rng_state(d) for d in self._devices]

    @contextmanager
    def active(self) -> Iterator[None]:
        """The block draws from this run's stream; the global generators are untouched after."""
        with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=self._devices):
            torch.set_rng_state(self._cpu)
            for index, state in zip(self._devices, self._cuda, strict=True):
                torch.cuda.set_rng_state(state, index)
            try:
                yield
            finally:
                self._cpu = torch.get_rng_state()
                self._cuda = [torch.cuda.get_rng_state(d) for d in self._devices]
