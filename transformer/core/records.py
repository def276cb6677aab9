"""What one attention call keeps for the trace: its probe and its rotary pair.

Records, not computation: :class:`AttentionProbe` (what
:func:`~transformer.core.attention.scaled_dot_product_attention` returns beside its output) and
:class:`Rotated` (queries and keys before and after the rotary rotation) are read by the paper's
module without it depending on anything that makes a trace small. They keep no more than they
must: the scores are recomputed from the kept queries and keys when a reader asks
(:func:`~transformer.core.attention.attention_scores`), and rotated queries and keys from the
unrotated ones. A reader of the paper can skip this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class AttentionProbe:
    """What one attention call computed, for the trace.

    ``weights`` are ``softmax(Q Kᵀ / √d_k)`` ``(B, H, Tq, Tk)`` (axis 2 the query, axis 3 the
    key), exactly zero in masked cells and in rows with no allowed key. The scores themselves
    are not kept: at 512 tokens they are as large as the weights and softmax reads them once,
    so the probe keeps the scaled ``queries`` ``(B, H, Tq, d_k)``, the ``keys`` ``(B, H, Tk,
    d_k)`` and the ``mask`` (``None``: nothing masked), from which
    :func:`~transformer.core.attention.attention_scores` recomputes them.

    With grouped-query attention ``keys`` are already expanded to the H query heads (the
    cache keeps the ``H_kv`` heads); ``kv_head_of`` says which key/value head each query head
    read. With rotary positions, the ``rotary`` pair keeps q and k of the positions this call
    computed, before and after their rotation (see :class:`Rotated`).
    """

    queries: Tensor
    keys: Tensor
    weights: Tensor
    mask: Tensor | None = None
    kv_head_of: tuple[int, ...] = ()
    rotary: Rotated | None = None
    # Recomputes (queries, keys) from the rotary pair when they can be (see
    # MultiHeadAttention._keep_rotary), so that a trace need not keep them twice.
    rebuild: Callable[[], tuple[Tensor, Tensor]] | None = None
    softcap: float | None = None  # the scores' soft cap (Gemma 2), None: not capped


@dataclass(init=False)
class Rotated:
    """Queries and keys of one call before and after the rotary rotation (unscaled).

    ``queries_before`` / ``queries_after``: ``(B, H, Tq, d_head)``; ``keys_before`` /
    ``keys_after``: ``(B, H_kv, Tq, d_head)``, the ``H_kv`` key heads of the positions this call
    computed (not the cached ones); ``offset`` is the position of their first row.

    A pair kept in a trace (:meth:`detached`) keeps the tensors before the rotation and
    rotates them again when the rotated ones are read, by the pass's own rotation: the same
    numbers bit for bit, without keeping both (at SmolLM2's 512 tokens, 47 MB).
    """

    queries_before: Tensor
    keys_before: Tensor
    offset: int
    _after: tuple[Tensor, Tensor] | None = field(repr=False)
    _rotate: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = field(
        repr=False, compare=False
    )

    def __init__(
        self,
        queries_before: Tensor,
        queries_after: Tensor | None,
        keys_before: Tensor,
        keys_after: Tensor | None,
        offset: int = 0,
        *,
        rotate: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None,
    ) -> None:
        if (queries_after is None or keys_after is None) and rotate is None:
            raise TypeError("a Rotated pair needs the rotated tensors, or the rotation")
        self.queries_before, self.keys_before, self.offset = queries_before, keys_before, offset
        kept = queries_after is not None and keys_after is not None
        self._after = (queries_after, keys_after) if kept else None  # type: ignore[assignment]
        self._rotate = rotate

    def _rotated(self) -> tuple[Tensor, Tensor]:
        if self._after is not None:
            return self._after
        assert self._rotate is not None  # checked in __init__
        return self._rotate(self.queries_before, self.keys_before)

    @property
    def queries_after(self) -> Tensor:
        """``(B, H, Tq, d_head)`` the queries after their rotation."""
        return self._rotated()[0]

    @property
    def keys_after(self) -> Tensor:
        """``(B, H_kv, Tq, d_head)`` the keys after their rotation."""
        return self._rotated()[1]

    def detached(self, rotate: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]) -> Rotated:
        """For a trace: the tensors before the rotation, detached, and ``rotate`` (``(q, k)``
        → rotated ``(q, k)``, the rotation this call ran) to give the rotated ones back."""
        return Rotated(
            self.queries_before.detach(),
            None,
            self.keys_before.detach(),
            None,
            self.offset,
            rotate=rotate,
        )
