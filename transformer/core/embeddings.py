"""Input embeddings (paper section 3.4) and positional encodings (section 3.5)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """Token ids to vectors, multiplied by √d_model as in section 3.4.

    The scale keeps the embedding's magnitude comparable to the positional encoding's
    (entries in [-1, 1]) when the weights are initialised small. ``scale=False`` leaves the
    vectors as they are (BERT and GPT-2 learn embeddings at the positions' magnitude).
    """

    def __init__(
        self, vocab_size: int, d_model: int, pad_id: int | None = None, scale: bool = True
    ) -> None:
        super().__init__()
        self.lookup = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.scale = math.sqrt(d_model) if scale else 1.0

    @property
    def weight(self) -> Tensor:
        """The ``(vocab_size, d_model)`` embedding matrix (unscaled)."""
        return self.lookup.weight

    def forward(self, tokens: Tensor) -> Tensor:
        """``(B, T)`` ids → ``(B, T, d_model)``."""
        vectors = self.lookup(tokens)
        return vectors * self.scale if self.scale != 1.0 else vectors


def sinusoidal_table(
    max_len: int,
    d_model: int,
    base: float = 10000.0,
    layout: str = "interleaved",
) -> Tensor:
    """The sinusoidal positional-encoding table.

    ``PE[pos, 2i] = sin(pos / base^(2i/d_model))`` and ``PE[pos, 2i+1] = cos(pos / base^(2i/d_model))``
    with ``layout="interleaved"`` (the paper). ``layout="halves"`` holds the same values with
    every sine first, then every cosine: ``PE[pos, i] = sin(...)``, ``PE[pos, d/2 + i] = cos(...)``
    (Marian, from the XLM code).

    Returns:
        ``(max_len, d_model)`` float32 (float64 arithmetic, so large positions stay accurate).
    """
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even for sin/cos pairs, got {d_model}")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,)
    angle = position / base ** (two_i / d_model)  # (max_len, d_model/2)
    first, second = torch.sin(angle), torch.cos(angle)
    if layout == "halves":
        return torch.cat([first, second], dim=1).float()
    if layout != "interleaved":
        raise ValueError(f"layout must be 'interleaved' or 'halves', got {layout!r}")
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = first
    table[:, 1::2] = second
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed positional encodings (a buffer, not a parameter: nothing here is learned)."""

    table: Tensor  # (max_len, d_model), registered as a buffer

    def __init__(
        self, d_model: int, max_len: int, base: float = 10000.0, layout: str = "interleaved"
    ) -> None:
        super().__init__()
        self.max_len = max_len
        self.layout = layout
        # persistent=False: derived from the config, so checkpoints need not store it.
        table = sinusoidal_table(max_len, d_model, base, layout)
        self.register_buffer("table", table, persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Encodings of positions ``offset .. offset+length-1`` as ``(length, d_model)``."""
        _check_length(length, offset, self.max_len)
        return self.table[offset : offset + length]


class LearnedPositionalEmbedding(nn.Module):
    """Learned positional embeddings (the paper's alternative in section 3.5, Table 3 row E)."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.lookup = nn.Embedding(max_len, d_model)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Embeddings of positions ``offset .. offset+length-1`` as ``(length, d_model)``."""
        _check_length(length, offset, self.max_len)
        positions = torch.arange(offset, offset + length, device=self.lookup.weight.device)
        return self.lookup(positions)


def _check_length(length: int, offset: int, max_len: int) -> None:
    if offset + length > max_len:
        raise ValueError(
            f"sequence of {offset + length} positions is longer than max_len={max_len}: "
            f"shorten the input or build the model with a larger max_len."
        )
