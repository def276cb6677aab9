"""Rotary position embedding (RoPE; Su et al. 2021), in the "rotate half" layout of Llama.

Instead of adding a position vector to the embeddings, RoPE rotates every query and key (after
their projections) by angles proportional to the token's position. Dimension pair ``i`` of a
head turns by ``position · θ_i`` with ``θ_i = base^(-2i/d_head)`` (i = 0 … d_head/2 − 1): the
first pairs spin fast, the last barely move. Because both q and k at positions m and n are
rotated, their dot product depends on ``m − n`` only, never on m and n themselves.

Which dimensions form a pair is a convention. Hugging Face Llama (and this module) pairs
dimension ``i`` with ``i + d_head/2`` ("rotate half")::

    rotate_half([x1, x2]) = [-x2, x1]          (x1, x2: the two halves of the head)
    rotated = x · cos + rotate_half(x) · sin   (cos, sin repeated over both halves)

The RoPE paper and llama.cpp's kernels pair neighbours ``(2i, 2i + 1)`` instead; a GGUF file's
W_q and W_k rows are permuted for that, which :mod:`transformer.pretrained.llama` undoes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def rotary_frequencies(d_head: int, base: float = 10000.0) -> Tensor:
    """``θ_i = base^(-2i/d_head)`` for each dimension pair: shape ``(d_head/2,)``, float32."""
    if d_head < 2 or d_head % 2:
        raise ValueError(f"rotary positions need an even head width, got d_head={d_head}")
    exponents = torch.arange(0, d_head, 2, dtype=torch.int64).float() / d_head
    return 1.0 / (base**exponents)


def rotary_angles(positions: Tensor, d_head: int, base: float = 10000.0) -> Tensor:
    """The angle ``position · θ_i`` of every dimension pair.

    Args:
        positions: integer positions, shape ``(T,)`` or ``(B, T)``.

    Returns:
        ``(..., T, d_head/2)`` float32 angles in radians (column i turns dimensions i and
        i + d_head/2).
    """
    return positions.float()[..., None] * rotary_frequencies(d_head, base).to(positions.device)


def rotary_cos_sin(positions: Tensor, d_head: int, base: float = 10000.0) -> tuple[Tensor, Tensor]:
    """cos and sin of the angles, repeated over both halves: each ``(..., T, d_head)``."""
    angles = rotary_angles(positions, d_head, base)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] → [-x2, x1]`` over the last dimension (its two halves): same shape as ``x``."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` ``(B, H, T, d_head)`` by ``cos``/``sin`` ``(T, d_head)`` or ``(B, T, d_head)``."""
    if cos.dim() == 3:  # (B, T, d_head): one table per sequence, broadcast over heads
        cos, sin = cos[:, None], sin[:, None]
    # The table is shared by every layer: where accelerate spread the layers over several GPUs
    # it sits on one of them, so it follows x (a no-op on one device).
    cos, sin = cos.to(x.device, x.dtype), sin.to(x.device, x.dtype)
    if torch.is_grad_enabled():
        return x * cos + rotate_half(x) * sin
    # Inference (no gradient): the same sum, written into the products' own buffers.
    return (x * cos).add_(rotate_half(x).mul_(sin))


def apply_rotary(
    q: Tensor,
    k: Tensor,
    positions: Tensor | None = None,
    offset: int = 0,
    base: float = 10000.0,
) -> tuple[Tensor, Tensor]:
    """Rotate queries and keys by their positions.

    Args:
        q: ``(B, H, T, d_head)`` queries.
        k: ``(B, H_kv, T, d_head)`` keys (H_kv may be smaller than H: grouped-query attention).
        positions: ``(T,)`` or ``(B, T)`` integer positions; default ``offset … offset + T − 1``.
        offset: the first position when ``positions`` is not given (a cached decoding step
            starts at the cache length).
        base: the frequency base (``rope_base``).

    Returns:
        The rotated ``q`` and ``k``, same shapes.
    """
    if positions is None:
        positions = torch.arange(offset, offset + q.shape[-2], device=q.device)
    cos, sin = rotary_cos_sin(positions, q.shape[-1], base)
    return rotate(q, cos, sin), rotate(k, cos, sin)


class RotaryEmbedding(nn.Module):
    """RoPE with the cos/sin table precomputed for positions ``0 … max_len − 1``.

    The table is a non-persistent buffer (not in the state dict: it is computed, not learned),
    and equals :func:`rotary_cos_sin` row for row, so a table lookup and a fresh computation
    give the same bits.
    """

    cos: Tensor  # (max_len, d_head) buffers
    sin: Tensor

    def __init__(self, d_head: int, max_len: int, base: float = 10000.0) -> None:
        super().__init__()
        self.d_head = d_head
        self.base = base
        cos, sin = rotary_cos_sin(torch.arange(max_len), d_head, base)
        self.register_buffer("cos", cos, persistent=False)  # (max_len, d_head)
        self.register_buffer("sin", sin, persistent=False)

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The table rows for ``positions`` ``(T,)`` or ``(B, T)``: each ``(..., T, d_head)``."""
        if positions.numel() and int(positions.max()) >= self.cos.shape[0]:
            raise ValueError(
                f"position {int(positions.max())} is beyond the rotary table's "
                f"{self.cos.shape[0]} positions (max_len)"
            )
        return self.cos[positions], self.sin[positions]

    def forward(
        self, q: Tensor, k: Tensor, positions: Tensor | None = None, offset: int = 0
    ) -> tuple[Tensor, Tensor]:
        """Rotate ``q`` ``(B, H, T, d_head)`` and ``k`` ``(B, H_kv, T, d_head)``; see
        :func:`apply_rotary`."""
        if positions is None:  # consecutive positions: a slice of the table, no device sync
            end = offset + q.shape[-2]
            if end > self.cos.shape[0]:
                raise ValueError(
                    f"position {end - 1} is beyond the rotary table's {self.cos.shape[0]} "
                    "positions (max_len)"
                )
            cos, sin = self.cos[offset:end], self.sin[offset:end]
        else:
            cos, sin = self.cos_sin(positions)
        return rotate(q, cos, sin), rotate(k, cos, sin)
