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

Two later refinements, each chosen by a ``ModelConfig`` field:

- partial rotary (``rotary_fraction``): only a head's first ``rotary_dims`` dimensions turn
  (paired rotate-half among themselves); the others carry no position at all (Pythia turns a
  quarter, Phi-4-mini three quarters);
- frequency scaling (``rope_scaling``): a model trained on short contexts and then stretched to
  long ones divides some frequencies by a factor, so that far positions turn by angles it has
  seen (:func:`scaled_frequencies`: ``linear``, ``llama3``, ``yarn``, ``dynamic``,
  ``longrope``).
"""

from __future__ import annotations

import math
from typing import Any

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
    give the same bits. ``rotary_dims`` (default ``d_head``) of each head turn, the rest pass;
    ``scaling`` stretches the frequencies (:func:`scaled_frequencies`).
    """

    cos: Tensor  # (max_len, rotary_dims) buffers
    sin: Tensor

    def __init__(
        self,
        d_head: int,
        max_len: int,
        base: float = 10000.0,
        *,
        rotary_dims: int | None = None,
        scaling: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.d_head = d_head
        self.base = base
        self.rotary_dims = d_head if rotary_dims is None else rotary_dims
        self.scaling = scaling
        cos, sin = self.table(max_len)
        self.register_buffer("cos", cos, persistent=False)  # (max_len, rotary_dims)
        self.register_buffer("sin", sin, persistent=False)

    def table(self, max_len: int) -> tuple[Tensor, Tensor]:
        """cos and sin ``(max_len, rotary_dims)`` of positions ``0 … max_len − 1``."""
        if self.scaling is None and self.rotary_dims == self.d_head:
            return rotary_cos_sin(torch.arange(max_len), self.d_head, self.base)
        inv_freq, attention_factor = scaled_frequencies(self.rotary_dims, self.base, self.scaling)
        angles = torch.arange(max_len).float()[:, None] * inv_freq  # (max_len, rotary_dims/2)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos() * attention_factor, angles.sin() * attention_factor

    def turn(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """``(B, H, T, d_head)`` → the same, its first ``rotary_dims`` dimensions rotated."""
        if self.rotary_dims == x.shape[-1]:
            return rotate(x, cos, sin)
        turned = rotate(x[..., : self.rotary_dims], cos, sin)
        return torch.cat([turned, x[..., self.rotary_dims :]], dim=-1)

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
        return self.turn(q, cos, sin), self.turn(k, cos, sin)


# -- frequency scaling: a model stretched beyond the context it was trained on ---------------


def scaled_frequencies(
    d_rotary: int, base: float = 10000.0, scaling: dict[str, Any] | None = None
) -> tuple[Tensor, float]:
    """The frequencies ``θ_i`` ``(d_rotary/2,)`` after ``scaling`` (a ``config.json``
    ``rope_scaling`` dict; ``None``: plain RoPE), and the factor cos and sin are multiplied by
    (1 except for ``yarn`` and ``longrope``).

    - ``linear``: every θ_i divided by ``factor`` (positions squeezed ``factor`` times);
    - ``llama3``: wavelengths shorter than ``original_max_position_embeddings /
      high_freq_factor`` kept, longer than ``… / low_freq_factor`` divided by ``factor``, the
      ones between blended smoothly (Llama 3.1 and 3.2);
    - ``yarn``: the same idea with a linear ramp over the dimensions between ``beta_fast`` and
      ``beta_slow`` rotations, and an ``attention_factor`` (default ``0.1 ln(factor) + 1``)
      that sharpens the scores;
    - ``dynamic``: NTK scaling that raises the base only beyond the trained length; within it
      (the only positions our table holds: ``max_len`` is the trained length), plain RoPE;
    - ``longrope``: θ_i divided by ``short_factor[i]`` (the table within the original length;
      beyond it Phi-3 switches to ``long_factor``, which our table does not reach), with the
      ``attention_factor`` ``sqrt(1 + ln(factor) / ln(original))``.
    """
    inv_freq = rotary_frequencies(d_rotary, base)
    if not scaling:
        return inv_freq, 1.0
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return inv_freq / factor, 1.0
    if kind == "dynamic":
        return inv_freq, 1.0
    if kind == "llama3":
        return _llama3(inv_freq, factor, scaling), 1.0
    if kind == "yarn":
        return _yarn(d_rotary, base, factor, scaling)
    if kind == "longrope":
        original = int(scaling["original_max_position_embeddings"])
        short = torch.tensor(scaling["short_factor"], dtype=torch.float32)
        if short.numel() != inv_freq.numel():
            raise ValueError(
                f"rope_scaling's short_factor has {short.numel()} entries for "
                f"{inv_freq.numel()} frequencies"
            )
        attention = scaling.get("attention_factor")
        if attention is None:
            length_ratio = float(scaling.get("max_position_embeddings", original)) / original
            ratio = factor if "factor" in scaling else length_ratio
            attention = 1.0 if ratio <= 1 else math.sqrt(1 + math.log(ratio) / math.log(original))
        exponents = torch.arange(0, d_rotary, 2, dtype=torch.int64).float() / d_rotary
        return 1.0 / (short * base**exponents), float(attention)
    raise ValueError(f"rope_scaling type {kind!r} is not one of linear, dynamic, llama3, yarn")


def _llama3(inv_freq: Tensor, factor: float, scaling: dict[str, Any]) -> Tensor:
    """Llama 3's frequency scaling (see :func:`scaled_frequencies`)."""
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    original = float(scaling["original_max_position_embeddings"])
    wavelength = 2 * math.pi / inv_freq
    scaled = torch.where(wavelength > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelength < original / high) * ~(wavelength > original / low)
    return torch.where(medium, blended, scaled)


def _yarn(
    d_rotary: int, base: float, factor: float, scaling: dict[str, Any]
) -> tuple[Tensor, float]:
    """YaRN's frequencies and attention factor (Peng et al. 2023; see :func:`scaled_frequencies`)."""
    original = float(scaling["original_max_position_embeddings"])

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = scaling.get("attention_factor")
    if attention is None:
        m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
        attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def correction(rotations: float) -> float:  # the dimension that turns `rotations` times
        return d_rotary * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction(beta_fast), correction(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d_rotary - 1)
    if low == high:
        high += 0.001  # no division by zero
    ramp = ((torch.arange(d_rotary // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolated = rotary_frequencies(d_rotary, base)
    interpolated = extrapolated / factor
    keep = 1 - ramp  # 1 for the fast dimensions (kept), 0 for the slow ones (interpolated)
    return interpolated * (1 - keep) + extrapolated * keep, float(attention)
