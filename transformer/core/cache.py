"""The key/value cache: keys and values of one attention module kept across decoding steps."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KeyValueCache:
    """Keys and values of one attention module kept across decoding steps.

    Self-attention (``static=False``) appends the new positions' keys and values each step;
    cross-attention (``static=True``) computes them from the encoder memory once and reuses them.
    A sliding-window layer's cache (``window``) keeps only the ``window − 1`` latest positions
    after each call: the next query reads those and itself, never an older one, so the memory
    stays bounded however long the text grows; ``dropped`` counts the positions let go.
    """

    keys: Tensor | None = None  # (B, H_kv, T, d_k): key/value heads, never expanded
    values: Tensor | None = None  # (B, H_kv, T, d_v), set together with the keys
    static: bool = False
    window: int | None = None
    dropped: int = 0

    @property
    def stored(self) -> int:
        """Number of positions whose keys are held."""
        return 0 if self.keys is None else self.keys.size(2)

    @property
    def length(self) -> int:
        """Number of positions seen (held, and let go by a sliding window)."""
        return self.dropped + self.stored

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Keep the new ``(B, H, T, d_k)`` keys and values (after the cached ones, unless
        static) and return every key and value this call reads (for a sliding window, those
        held before the call and the new ones)."""
        if not self.static and self.keys is not None and self.values is not None:
            keys = torch.cat([self.keys, keys], dim=2)
            values = torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        if self.window is not None and not self.static:
            excess = keys.size(2) - (self.window - 1)
            if excess > 0:
                self.keys, self.values = keys[:, :, excess:], values[:, :, excess:]
                self.dropped += excess
        return keys, values

    def can_truncate(self, length: int) -> bool:
        """Whether :meth:`truncate` to ``length`` keeps every key the next position reads (a
        sliding window may have let them go)."""
        needed_from = 0 if self.window is None else max(0, length - (self.window - 1))
        return self.dropped <= min(needed_from, length)

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (see :meth:`can_truncate`)."""
        if not self.can_truncate(length):
            raise ValueError(
                f"a sliding-window cache that let go of {self.dropped} positions cannot be "
                f"truncated to {length}: empty it and compute the text again"
            )
        if self.keys is not None and self.values is not None:
            kept = length - self.dropped
            self.keys, self.values = self.keys[:, :, :kept], self.values[:, :, :kept]
