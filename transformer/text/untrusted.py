"""Checks on a ``tokenizer.json`` nobody vouches for, made before `tokenizers` is given it.

A tokenizer file is data that behaves like code: a few hundred bytes can ask the library for
gigabytes or for minutes of one thread. Three shapes are known to:

- a vocabulary id far above the vocabulary's size (``2,147,483,647`` in a 253-byte WordLevel
  file): building the tokenizer walks every id up to it, 9.7 GB;
- a normalizer that lengthens the text again and again (20 chained ``Replace "a" → "aa"``):
  each step doubles the text, so 96 characters become 100 million;
- a regex that repeats a part that itself repeats (``(a+)+$``): the engine backtracks
  exponentially at each of the text's start positions;
- a WordPiece ``max_input_chars_per_word`` of 10⁹ (347 bytes): every word is tried whole, then
  each shorter prefix, so a 20,000-letter word makes 200 million letters of candidates.

`check_tokenizer_json` refuses these (and integers past Python's 4,300-digit limit, deep
nesting, long component chains) with a `TokenizerError` that says what was refused and why. It
is a first line only: `transformer.text.sandbox` runs what passes in a worker process with a
memory, CPU-time and wall-clock limit, which also stops shapes no check foresaw.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .tokenization import MAX_TOKENIZER_JSON_BYTES, TokenizerError

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects accepted (real files nest 4 to 8 deep)."""
MAX_ID_GAP = 65_536
"""How far the largest id may lie above the number of ids: a few unused ids are harmless, but
the library walks every id up to the largest when it builds or saves the tokenizer."""
MAX_ID = 2**32 - 1
"""The library stores ids as unsigned 32-bit integers."""
MAX_COMPONENTS = 64
"""Normalizer, pre-tokenizer or decoder steps accepted in one section (Sequences included)."""
MAX_GROWTH = 64
"""How many times longer the normalizer (or decoder) may make a text, at worst."""
MAX_WORDPIECE_CHARS = 1_000
"""Largest WordPiece ``max_input_chars_per_word`` accepted (BERT's files say 100): a word up to
that long is tried whole, then by each shorter prefix, at each of its positions."""


def check_tokenizer_json(data: str | bytes) -> dict[str, Any]:
    """Parse an untrusted ``tokenizer.json`` and check it before `tokenizers` sees it; return
    the parsed object. Raises `TokenizerError` naming what was refused and why."""
    if len(data) > MAX_TOKENIZER_JSON_BYTES:
        raise TokenizerError(
            f"the tokenizer file is {len(data) / 2**20:.1f} MiB; the limit is "
            f"{MAX_TOKENIZER_JSON_BYTES // 2**20} MiB"
        )
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise TokenizerError(
                f"the file is not UTF-8 text (bad byte at position {err.start}): "
                "a tokenizer.json is a UTF-8 JSON file"
            ) from None
    try:
        spec = json.loads(data.removeprefix("\ufeff"))
    except json.JSONDecodeError as err:
        raise TokenizerError(
            f"this is not JSON ({err.msg} at line {err.lineno}, column {err.colno}): "
            "upload the tokenizer.json file itself"
        ) from None
    except ValueError as err:  # an integer past the 4,300 digits Python converts
        digits = re.search(r"has (\d+) digits", str(err))
        size = f" ({int(digits.group(1)):,} digits)" if digits else ""
        raise TokenizerError(
            f"refused: this file holds an integer too long to read{size}; a tokenizer.json "
            "holds ids and ranks of at most 10 digits"
        ) from None
    except RecursionError:
        raise TokenizerError(
            "refused: this JSON is nested too deeply to be a tokenizer.json"
        ) from None
    depth = _depth(spec)
    if depth > MAX_JSON_DEPTH:
        raise TokenizerError(
            f"refused: this JSON nests {depth:,} levels deep; a tokenizer.json nests a few "
            f"levels (the limit is {MAX_JSON_DEPTH})"
        )
    if not isinstance(spec, dict):
        raise TokenizerError(
            f"this JSON is a {type(spec).__name__}, not an object: a tokenizer.json is an object "
            'with a "model" key'
        )
    _check_ids(spec)
    _check_model_parameters(spec.get("model"))
    for section in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
        _check_section(section, spec.get(section))
    _check_regexes(spec)
    return spec


def _depth(value: Any) -> int:
    """The deepest nesting of arrays and objects in a parsed JSON value (walked without
    recursion; the parser itself refuses a nesting past Python's recursion limit)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item if isinstance(child, dict | list))
    return deepest


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ID


def _check_ids(spec: dict[str, Any]) -> None:
    """Every id a small non-negative integer, the largest not far above the number of ids."""
    model = spec.get("model")
    added = spec.get("added_tokens") or []
    ids: list[Any] = []
    count = 0
    if isinstance(model, dict):
        vocab = model.get("vocab")
        if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token → id
            ids.extend(vocab.values())
            count += len(vocab)
        elif isinstance(vocab, list):  # Unigram: [piece, score] pairs, ids are positions
            count += len(vocab)
            unk = model.get("unk_id")
            if unk is not None and not (_is_id(unk) and unk < len(vocab)):
                raise TokenizerError(
                    f"refused: the Unigram unk_id {_shown(unk)} is not a position in its "
                    f"vocabulary of {len(vocab):,} pieces"
                )
    if isinstance(added, list):
        for entry in added:
            if isinstance(entry, dict) and "id" in entry:
                ids.append(entry["id"])
                count += 1
    bad = [i for i in ids if not _is_id(i)][:1]
    if bad:
        raise TokenizerError(
            f"refused: the id {_shown(bad[0])} is not an integer from 0 to {MAX_ID:,}; "
            "ids number the vocabulary's tokens"
        )
    largest = max(ids, default=0)
    if largest > count + MAX_ID_GAP:
        raise TokenizerError(
            f"refused: the largest id is {largest:,} but the file has {count:,} tokens; the "
            f"library would reserve room for every id up to it (ids may run at most "
            f"{MAX_ID_GAP:,} past the number of tokens)"
        )


def _check_model_parameters(model: Any) -> None:
    """The model's own numbers that set how much work a word costs."""
    if not isinstance(model, dict) or model.get("type") != "WordPiece":
        return
    most = model.get("max_input_chars_per_word", 100)
    if not (isinstance(most, int) and not isinstance(most, bool) and most > 0):
        raise TokenizerError(
            f"refused: the WordPiece max_input_chars_per_word {_shown(most)} is not a positive "
            "whole number"
        )
    if most > MAX_WORDPIECE_CHARS:
        raise TokenizerError(
            f"refused: the WordPiece max_input_chars_per_word is {most:,}; each word up to that "
            "long is tried whole and then by every shorter prefix, so one long word costs the "
            f"square of its length (the limit is {MAX_WORDPIECE_CHARS:,}; BERT's files say 100)"
        )


def _shown(value: Any) -> str:
    number = isinstance(value, int) and not isinstance(value, bool)
    text = f"{value:,}" if number else json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _components(section: Any) -> list[dict[str, Any]]:
    """The steps of a normalizer / pre-tokenizer / decoder section, Sequences flattened."""
    out: list[dict[str, Any]] = []
    stack = [section]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            out.append(item)
            for key in ("normalizers", "pretokenizers", "decoders", "processors"):
                if key in item:
                    stack.append(item[key])
    return out


def _growth(step: dict[str, Any]) -> float:
    """How many times longer one step can make a text, at worst: a ``Replace`` of a string by
    a longer one, or of a regex (which may match a single character, or nothing) by anything."""
    if step.get("type") != "Replace":
        return 1.0
    content = step.get("content")
    pattern = step.get("pattern")
    if not isinstance(content, str) or not isinstance(pattern, dict):
        return 1.0
    if isinstance(pattern.get("String"), str) and pattern["String"]:
        return max(1.0, len(content) / len(pattern["String"]))
    return float(1 + len(content))  # a regex: it may match one character or the empty string


def _check_section(name: str, section: Any) -> None:
    steps = _components(section)
    if len(steps) > MAX_COMPONENTS:
        raise TokenizerError(
            f"refused: the {name} has {len(steps):,} steps; the limit is {MAX_COMPONENTS}"
        )
    growth = 1.0
    growing = 0
    for step in steps:
        factor = _growth(step)
        if factor > 1:
            growing += 1
            growth *= factor
    if growth > MAX_GROWTH:
        shown = f"{growth:,.0f}" if growth < 1e15 else f"{growth:.1e}"
        raise TokenizerError(
            f"refused: the {name}'s {growing} Replace steps that lengthen the text could make it "
            f"up to {shown} times longer (a 1,000-character text would need that many "
            f"thousand characters); the limit is {MAX_GROWTH} times"
        )


def _regexes(item: Any) -> list[str]:
    """Every ``{"Regex": pattern}`` in a section."""
    found: list[str] = []
    stack = [item]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if isinstance(value.get("Regex"), str):
                found.append(value["Regex"])
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


def _check_regexes(spec: dict[str, Any]) -> None:
    for section in ("normalizer", "pre_tokenizer"):
        for pattern in _regexes(spec.get(section)):
            nested = nested_repetition(pattern)
            if nested is not None:
                raise TokenizerError(
                    f"refused: the {section}'s regex repeats {nested!r}, a part that itself "
                    "repeats; such a regex can try exponentially many ways to match each "
                    "position of a text (rewrite it without the nested repetition)"
                )


_REPEAT = re.compile(r"[+*]|\{\d*,\d*\}|\{\d+\}")


def _repeats_at(pattern: str, index: int) -> bool:
    """Whether a quantifier that repeats (``+``, ``*``, ``{n,}``, ``{n,m}`` with m > 1) starts
    at ``index`` (``?`` does not repeat)."""
    match = _REPEAT.match(pattern, index)
    if match is None:
        return False
    text = match.group(0)
    if text in "+*":
        return True
    numbers = [int(n) if n else None for n in text[1:-1].split(",")]
    if len(numbers) == 1:
        return (numbers[0] or 0) > 1
    return numbers[1] is None or numbers[1] > 1


def nested_repetition(pattern: str) -> str | None:
    """The first group of ``pattern`` that is repeated and holds a repetition itself, as
    ``(a+)+`` or ``(\\w*x)*`` (catastrophic backtracking), or None. A reading of the pattern's
    shape, not a proof: alternations such as ``(a|a)+`` pass, and the worker's limits stop them."""
    stack: list[list[Any]] = []  # [start index, holds a repetition]
    i = 0
    n = len(pattern)
    in_class = False
    while i < n:
        char = pattern[i]
        if char == "\\":
            # \p{L}, \x{41}, \k<name>: skip the braces too, they are no quantifier
            if i + 2 < n and pattern[i + 1] in "pPxhk" and pattern[i + 2] in "{<":
                close = pattern.find("}" if pattern[i + 2] == "{" else ">", i + 2)
                i = n if close == -1 else close + 1
            else:
                i += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
            i += 1
            continue
        if char == "[":
            in_class = True
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":  # a literal ] first in a class
                i += 1
            continue
        if char == "(":
            stack.append([i, False])
            i += 1
            continue
        if char == ")":
            start, inner = stack.pop() if stack else (0, False)
            i += 1
            repeated = _repeats_at(pattern, i)
            if repeated and inner:
                end = _REPEAT.match(pattern, i)
                return pattern[start : end.end() if end else i]
            if stack and (repeated or inner):
                stack[-1][1] = True
            continue
        if _repeats_at(pattern, i) and stack:
            stack[-1][1] = True
        i += 1
    return None
