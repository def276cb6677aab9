"""Coercing what the UI (or an API caller, who can send anything) gives a handler: numbers in
range, lists of dimensions, sizes for messages. Bad values raise ``ValueError`` naming the input."""

from __future__ import annotations

from typing import Any


def as_int(value: Any, name: str, low: int, high: int) -> int:
    """A slider or number input as an int in ``low..high`` (API callers can send anything)."""
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):  # None, "x", NaN, ±infinity
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not low <= number <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {number}")
    return number


def as_float(value: Any, name: str, low: float, high: float) -> float:
    """A slider or number input as a finite float in ``low..high`` (NaN and infinity rejected)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not low <= number <= high:  # False for NaN too
        raise ValueError(f"{name} must be between {low:g} and {high:g}, got {number:g}")
    return number


def as_int_list(text: str | None, name: str, default: str = "0") -> list[int]:
    """Whole numbers separated by commas (or semicolons), sorted, each once."""
    try:
        return sorted({int(x) for x in (text or default).replace(";", ",").split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"{name} must be whole numbers separated by commas") from None


def size_text(n_bytes: int) -> str:
    """A byte count for a message: ``"20 MB"`` or ``"1,000 bytes"``."""
    return f"{n_bytes / 2**20:g} MB" if n_bytes >= 2**20 else f"{n_bytes:,} bytes"
