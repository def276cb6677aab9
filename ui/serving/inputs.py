"""Coercing what the UI (or an API caller, who can send anything) gives a handler: numbers in
range, lists of dimensions, sizes for messages. Bad values raise `InputError` naming the input."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformer.text.display import unreadable_note as unreadable_note
from transformer.text.tokenization import Tokenizer, TokenizerError, check_normalized_text

from .errors import InputError


def shown(value: Any, most: int = 40) -> str:
    """A value as a message quotes it: short, and a string without Python's quotes' escapes."""
    text = repr(value) if not isinstance(value, str) else f"'{value}'"
    return text if len(text) <= most else text[: most - 1] + "…"


def as_int(value: Any, name: str, low: int, high: int) -> int:
    """A slider or number input as an int in ``low..high`` (API callers can send anything)."""
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):  # None, "x", NaN, ±infinity
        raise InputError(f"{name} must be a number, got {shown(value)}") from None
    if not low <= number <= high:
        raise InputError(f"{name} must be between {low:,} and {high:,}, got {number:,}")
    return number


def clamped(value: Any, high: int, default: int = 1) -> int:
    """A live control's number fitted into ``1..high`` rather than refused (a slider may still
    hold a value from before it was fitted to a new model); ``default`` when it is no number."""
    try:
        return min(max(1, int(float(value))), high)
    except (TypeError, ValueError, OverflowError):
        return default


def as_float(value: Any, name: str, low: float, high: float) -> float:
    """A slider or number input as a finite float in ``low..high`` (NaN and infinity rejected)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{name} must be a number, got {shown(value)}") from None
    if not low <= number <= high:  # False for NaN too
        raise InputError(f"{name} must be between {low:g} and {high:g}, got {number:g}")
    return number


def as_position(value: Any, name: str) -> None:
    """Refuse a layer, head or token position that is no finite number of sensible size (NaN,
    ±infinity, 10⁴⁰⁰): a menu's stale value is moved into range, but these are not values at
    all. ``"3: cat"`` (a token menu's label) is read by its number."""
    if isinstance(value, str):
        value = value.split(":", 1)[0].strip()
    if value is None or isinstance(value, bool):
        raise InputError(f"{name} must be a number, got {shown(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{name} must be a number, got {shown(value)}") from None
    if number != number or abs(number) > 1e9:  # NaN, infinity, 10⁴⁰⁰
        raise InputError(f"{name} must be a whole number of sensible size, got {shown(value)}")


def as_int_list(text: str | None, name: str, default: str = "0") -> list[int]:
    """Whole numbers separated by commas (or semicolons), sorted, each once."""
    if text is not None and not isinstance(text, str):
        raise InputError(f"{name} must be whole numbers separated by commas")
    parts = [x.strip() for x in (text or default).replace(";", ",").split(",") if x.strip()]
    wrong = []
    numbers = set()
    for part in parts:
        try:
            numbers.add(int(part))
        except ValueError:
            wrong.append(part)
    if wrong:
        raise InputError(
            f"{name} must be whole numbers separated by commas ({shown(wrong[0])} is not one)"
        )
    return sorted(numbers)


def as_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    """A menu's value, one of ``choices`` (an API caller may send None, "" or anything)."""
    if isinstance(value, str) and value in choices:
        return value
    given = "an empty choice" if value is None or value == "" else shown(value)
    listed = ", ".join(f"'{c}'" for c in choices)
    raise InputError(f"{name}: {given} is not one of the choices ({listed})")


def as_text(value: Any, name: str) -> str:
    """A text input as a string (an API caller may send a list or a number)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{name} must be text, got {type(value).__name__}")
    return value


def normalized_text(tokenizer: Tokenizer, text: str, limit: int) -> str:
    """``text`` if the tokenizer's normaliser keeps it within ``limit`` characters (NFKC writes
    U+FDFA as 18: the limit counts what the tokenizer works on); else `InputError` saying both
    lengths. Every kind of tokenizer is counted so: the app's own here, an uploaded one in its
    worker (`transformer.text.sandbox`)."""
    try:
        return check_normalized_text(tokenizer, text, limit)
    except TokenizerError as err:
        raise InputError(str(err)) from None


def size_text(n_bytes: int) -> str:
    """A byte count for a message: ``"20 MB"`` or ``"1,000 bytes"``."""
    return f"{n_bytes / 2**20:g} MB" if n_bytes >= 2**20 else f"{n_bytes:,} bytes"
