"""How each next token is chosen: :class:`DecodingSettings` and the limits on it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..core.util import is_int, is_number

MAX_NEW_TOKENS = 512
"""``max_new_tokens`` must lie in ``1..MAX_NEW_TOKENS`` (and the model's max_len bounds it too)."""
MAX_BEAM_WIDTH = 16
MAX_TOP_K_SHOWN = 100
MIN_TEMPERATURE = 1e-4
"""Positive temperatures below this are raised to it, so ``logits / T`` cannot overflow."""

Strategy = Literal["greedy", "sample", "beam"]
STRATEGIES: tuple[str, ...] = ("greedy", "sample", "beam")
StopReason = Literal["eos", "max_new_tokens", "max_len"]


@dataclass(frozen=True)
class DecodingSettings:
    """How to choose each next token.

    Attributes:
        strategy: ``"greedy"``, ``"sample"`` or ``"beam"``.
        temperature: divides the logits before sampling; ``≤ 0`` means greedy. Positive values
            below :data:`MIN_TEMPERATURE` are treated as :data:`MIN_TEMPERATURE`.
        top_k: sample only among the ``top_k`` most probable tokens (``None`` or 0: no limit).
        top_p: sample only from the smallest set of tokens whose probability mass is
            ``≥ top_p`` (nucleus sampling; ``None`` or 1: no limit). Applied after top-k.
        beam_width: hypotheses kept by beam search, ``1..MAX_BEAM_WIDTH`` (1 equals greedy).
        length_penalty: beam ranking divides the summed log-probability by
            ``length ** length_penalty`` (0: unnormalised; 1: mean log-probability).
        max_new_tokens: tokens to generate at most, ``1..MAX_NEW_TOKENS`` ([EOS] included).
        seed: seed of the sampling generator; ``None`` draws one (see
            :attr:`DecodingSession.seed`).
        use_cache: reuse keys/values of earlier positions (the fast way); ``False`` recomputes
            the whole prefix every step (the slow way, for comparison).
        capture_attention: record each step's new attention query rows (costs time; for the UI).
        keep_logits: keep each step's full ``(V,)`` logits in the record (memory; for tests).
        top_k_shown: how many of the most probable tokens a record lists,
            ``1..MAX_TOP_K_SHOWN``.
        capture_lens: record each step's logit lens and residual-stream norms, read from the
            step's own captured pass (no second pass; for the UI).
        lens_top_k: how many of the most probable ids each lens row lists,
            ``1..MAX_TOP_K_SHOWN``.
    """

    strategy: Strategy = "greedy"
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    beam_width: int = 4
    length_penalty: float = 0.0
    max_new_tokens: int = 64
    seed: int | None = 0
    use_cache: bool = True
    capture_attention: bool = False
    keep_logits: bool = False
    top_k_shown: int = 10
    capture_lens: bool = False
    lens_top_k: int = 5

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the setting to change and its valid range."""
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy={self.strategy!r} is not one of {', '.join(STRATEGIES)}.")
        if not is_int(self.max_new_tokens) or not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(
                f"max_new_tokens must be an integer in 1..{MAX_NEW_TOKENS}, "
                f"got {self.max_new_tokens!r}."
            )
        if not is_number(self.temperature):
            raise ValueError(f"temperature must be a number, got {self.temperature!r}.")
        if not math.isfinite(self.temperature):
            raise ValueError(
                f"temperature must be finite, got {self.temperature}; use a value ≤ 0 for greedy."
            )
        if self.top_k is not None and (not is_int(self.top_k) or self.top_k < 0):
            raise ValueError(
                f"top_k must be None or an integer ≥ 0 (0 = no limit), got {self.top_k!r}."
            )
        if self.top_p is not None and (not is_number(self.top_p) or not 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be None or in (0, 1], got {self.top_p!r}.")
        if not is_int(self.beam_width) or not 1 <= self.beam_width <= MAX_BEAM_WIDTH:
            raise ValueError(
                f"beam_width must be an integer in 1..{MAX_BEAM_WIDTH}, got {self.beam_width!r}."
            )
        if not (is_number(self.length_penalty) and 0.0 <= self.length_penalty <= 5.0):
            raise ValueError(f"length_penalty must be in [0, 5], got {self.length_penalty!r}.")
        if self.seed is not None and not is_int(self.seed):
            raise ValueError(f"seed must be None or an integer, got {self.seed!r}.")
        if not is_int(self.top_k_shown) or not 1 <= self.top_k_shown <= MAX_TOP_K_SHOWN:
            raise ValueError(
                f"top_k_shown must be an integer in 1..{MAX_TOP_K_SHOWN}, got {self.top_k_shown!r}."
            )
        if not is_int(self.lens_top_k) or not 1 <= self.lens_top_k <= MAX_TOP_K_SHOWN:
            raise ValueError(
                f"lens_top_k must be an integer in 1..{MAX_TOP_K_SHOWN}, got {self.lens_top_k!r}."
            )

    @property
    def effective_strategy(self) -> Strategy:
        """The strategy actually run: sampling at ``temperature ≤ 0`` is greedy."""
        if self.strategy == "sample" and self.temperature <= 0:
            return "greedy"
        return self.strategy

    def describe(self) -> str:
        """How a token is chosen, in words, e.g. ``"sample (T=0.8, top-k=5)"``."""
        strategy = self.effective_strategy
        if strategy == "greedy":
            return "greedy (temperature ≤ 0)" if self.strategy == "sample" else "greedy"
        if strategy == "beam":
            penalty = f", length penalty {self.length_penalty:g}" if self.length_penalty else ""
            return f"beam search (width {self.beam_width}{penalty})"
        parts = [f"T={max(self.temperature, MIN_TEMPERATURE):g}"]
        if self.top_k:
            parts.append(f"top-k={self.top_k}")
        if self.top_p is not None and self.top_p < 1.0:
            parts.append(f"top-p={self.top_p:g}")
        return f"sample ({', '.join(parts)})"
