"""The error policy: every error reaches the user as a short message, never a traceback, and
never in place of a control.

- A value the user (or an API caller) gave that the app refuses raises `InputError` (the
  validators in `inputs`, `limits` and `state` do), or one of the library's own typed errors
  (a bad tokenizer file, checkpoint or config). It becomes its own message, scrubbed of file
  paths and HTML, and one line in the server log.
- Out-of-memory and accelerator errors become advice.
- Anything else is a bug: logged here with its traceback (server side only) and shown as
  "something went wrong", with the app still running.

A named endpoint answers an API caller with the error (`friendly`). A live redraw
(`beside_input`) never raises: it keeps the controls and the figures as they were and writes
the message into a status line beside the input, saying that the figures are out of date.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import html
import inspect
import logging
import math
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import gradio as gr
import torch

from transformer.core.config import ConfigError
from transformer.pretrained.checkpoint import CheckpointError
from transformer.text.display import code_span as code_span
from transformer.text.tokenization import TokenizerError

log = logging.getLogger("visualiser")


class InputError(ValueError):
    """A value the user gave that the app refuses; the message says what to fix.

    A ``ValueError`` so that code catching the library's input errors catches it too."""


EXPECTED_ERRORS = (InputError, TokenizerError, CheckpointError, ConfigError)
# Errors that must pass through (the server is stopping); every other BaseException (the
# tokenizers library's Rust panic, `pyo3_runtime.PanicException`, is one) becomes a message.
PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit)
MAX_MESSAGE_CHARS = 600  # an error echoing a 100,000-character input stays readable
# An absolute path (POSIX or Windows) of at least two components, not glued to a word ("tokens/s").
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[/\\][\w.~@+-]+){2,}[/\\]?")
STALE_NOTE = "the panels below still show the last input that worked"


@contextlib.contextmanager
def user_input() -> Iterator[None]:
    """Inside this block a ``ValueError`` is the user's input refused: the library checks what
    it is given (sentences, lengths, positions) with ``ValueError``, and this block wraps only
    calls that take the user's values."""
    try:
        yield
    except InputError:
        raise
    except (TokenizerError, CheckpointError, ConfigError):
        raise
    except ValueError as error:
        raise InputError(str(error)) from None


def clean(text: str) -> str:
    """A message fit for any user, as plain text: no file paths (a path becomes its file
    name), no traceback, at most ``MAX_MESSAGE_CHARS`` characters."""
    text = text.replace(str(Path.cwd()), ".")
    text = _ABSOLUTE_PATH.sub(lambda m: re.split(r"[/\\]", m.group(0).rstrip("/\\"))[-1], text)
    text = text.split("Traceback (most recent call last)")[0].strip() or "an error occurred"
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", text)  # object addresses
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


def scrub(text: str) -> str:
    """`clean` as HTML text, for a page the app writes itself."""
    return html.escape(clean(text), quote=False)


# gradio shows an error's message as HTML in the page, and sends the same text to API clients,
# for whom entities (``&lt;img``, ``Model &amp; training``) are noise. So a message holds no
# character HTML reads as markup: a tag's brackets become their look-alikes (‹ ›), and an
# ampersand only where it would start an entity becomes the full-width ＆. Plain text for both.
_ENTITY = re.compile(r"&(?=#?\w+;)")


def plain_message(text: str) -> str:
    """`clean` as text that reads the same as plain text and as HTML (see above)."""
    text = clean(text).replace("<", "\u2039").replace(">", "\u203a")
    return _ENTITY.sub("\uff06", text)


# Every ASCII punctuation character may be backslash-escaped in Markdown (CommonMark).
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|~=^\"'$:])")


def markdown_text(text: str) -> str:
    """``text`` as Markdown that shows it as it is: never a link, an image, emphasis, a code
    span or HTML (each Markdown character escaped, ``& < >`` as entities), one line per line."""
    escaped = _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)
    escaped = escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return escaped.replace("\r\n", "\n").replace("\n", "  \n")


def code_block(text: str) -> str:
    """``text`` as one fenced Markdown code block, its lines kept: the fence is longer than
    any run of backticks in it (and at least three), so no line of it can close the block."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _device_trouble(error: BaseException) -> str | None:
    """What to tell the user about an out-of-memory or accelerator error, or None."""
    text = str(error)
    if isinstance(error, torch.OutOfMemoryError | MemoryError) or "out of memory" in text.lower():
        return "out of memory: try a shorter input, fewer sentences or fewer steps"
    if isinstance(error, RuntimeError) and any(
        word in text for word in ("CUDA", "cuDNN", "CUBLAS", "MPS", "device-side")
    ):
        return "the accelerator reported an error during this request; please try again"
    return None


def describe(error: BaseException) -> str:
    """The plain-text message a user sees for ``error``, logged as the policy says: a refused
    input is one log line, a bug its traceback."""
    if isinstance(error, gr.Error):  # already a message (from a nested handler)
        return html.unescape(str(error.message))
    if isinstance(error, EXPECTED_ERRORS):
        text = clean(str(error))
        log.info("input refused: %s", text)
        return text
    trouble = _device_trouble(error)
    if trouble is not None:
        log.warning("device trouble in a request: %s: %s", type(error).__name__, error)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return trouble
    if type(error).__name__ == "PanicException":  # tokenizers' Rust panic, a BaseException
        log.warning("the tokenizers library panicked: %s", clean(str(error))[:200])
        return "the tokenizer failed on this text (the tokenizers library gave up); try another"
    log.error("unexpected error in a request", exc_info=error)
    return f"something went wrong ({type(error).__name__}); the app is still running"


def message(error: BaseException) -> gr.Error:
    """The ``gr.Error`` a user sees for ``error``. Gradio does not print its traceback to the
    server log: `describe` logs what needs logging."""
    if isinstance(error, gr.Error):
        if error.print_exception:  # gradio's own (a refused choice): one line, not a traceback
            return gr.Error(error.message, print_exception=False)
        return error
    return gr.Error(plain_message(describe(error)), print_exception=False)


def friendly(fn: Callable) -> Callable:
    """Wrap an event handler (function or generator) so every error reaches the user as a
    ``gr.Error`` message, without a traceback or a file path."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except PASS_THROUGH:
                raise
            except BaseException as error:
                raise message(error) from None

        return generator_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PASS_THROUGH:
            raise
        except BaseException as error:
            raise message(error) from None

    return wrapper


def stale(text: str) -> str:
    """The status line for a refused input: the message, as text, and that the figures are
    out of date."""
    return f"⚠️ {markdown_text(text)}  \n_({STALE_NOTE})_"


def beside_input(fn: Callable, n_outputs: int) -> Callable:
    """A live handler whose event has one more output, a status line beside the input: the
    handler's ``n_outputs`` values and an empty status when it works; when it fails, every
    output unchanged (``gr.skip()``: controls keep their values and ranges, figures stay) and
    the message in the status. Never raises, so gradio never replaces a control with an error."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        try:
            result = fn(*args, **kwargs)
        except PASS_THROUGH:
            raise
        except BaseException as error:
            return (*(gr.skip() for _ in range(n_outputs)), stale(describe(error)))
        values = result if isinstance(result, tuple) else (result,)
        return (*values, "")

    return wrapper


def readable_list(items: Sequence[Any], most: int = 8) -> str:
    """Choices for a message: ``a, b or c`` (the first ``most``, then how many more)."""
    names = [str(item) for item in items]
    if len(names) > most:
        return ", ".join(names[:most]) + f" or one of {len(names) - most} more"
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + f" or {names[-1]}"


def _offered(text: str) -> list[str]:
    """The choices gradio lists after "is not in the list of choices:" (a Python list of
    strings or numbers), or [] when there are none to read."""
    _, _, tail = text.partition("is not in the list of choices:")
    try:
        values = ast.literal_eval(tail.strip()) if tail.strip() else []
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return []
    return [str(v) for v in values] if isinstance(values, list) else []


def _choice_values(component: Any) -> list[Any]:
    """A menu's values (its choices are values or (label, value) pairs)."""
    choices = getattr(component, "choices", None) or []
    return [c[1] if isinstance(c, tuple | list) else c for c in choices]


def _refused_value(block_fn: Any, error: Exception) -> str:
    """What to tell a caller whose value gradio could not read for an input component:
    the component's label and what it takes, never the Python error or an object's address."""
    text = str(error.message) if isinstance(error, gr.Error) else str(error)
    found = re.search(r"component at index (\d+)", text)
    label = "a value"
    component = None
    if found and block_fn is not None and int(found.group(1)) < len(block_fn.inputs):
        component = block_fn.inputs[int(found.group(1))]
        label = str(getattr(component, "label", None) or component.get_block_name())
    choice = re.search(r"Value: (.*?)(?: \(type: .*?\))? is not in the list of choices", text)
    if choice:
        value = choice.group(1).strip()
        if value in ("", "''", '""', "None"):
            value = "an empty choice"
        names = _offered(text)
        if component is None and block_fn is not None and names:
            for candidate in block_fn.inputs:  # the input whose choices these are
                if [str(n) for n in _choice_values(candidate)] == names:
                    component = candidate
                    label = str(getattr(candidate, "label", None) or candidate.get_block_name())
        listed = f" ({readable_list([repr(n) for n in names], most=6)})" if names else ""
        where = f"{label}: " if component is not None else ""
        return f"{where}{value[:80]} is not in the list of choices{listed}"
    bound = re.search(
        r"Value (\S+) is (less|greater) than (minimum|maximum) value (\S+?)\.?$", text
    )
    if bound:
        value, _, side, limit = bound.groups()
        edge = "below the smallest" if side == "minimum" else "above the largest"
        return f"{value} is {edge} value this control takes ({limit})"
    if "was not uploaded" in text or "blocked_paths" in text:
        return "that file was not uploaded here: upload the file itself"
    if isinstance(error, gr.Error):
        return text
    expected = re.search(r"Expected a `(\w+)", text)
    kinds = {"float": "a number", "int": "a whole number", "str": "text", "bool": "true or false"}
    if expected and expected.group(1) in kinds:
        return f"{label} must be {kinds[expected.group(1)]}"
    return f"{label}: this value cannot be read here (wrong type or format)"


def _not_text(block_fn: Any, inputs: Any) -> str | None:
    """The message for a text box given something other than text (gradio would pass
    ``str(value)`` on: a list, a number, a dict or true read as text), or None."""
    components = getattr(block_fn, "inputs", None)
    if not components or not isinstance(inputs, list | tuple):
        return None
    for component, value in zip(components, inputs, strict=False):
        if isinstance(component, gr.Textbox) and value is not None and not isinstance(value, str):
            label = str(getattr(component, "label", None) or "a text box")
            kind = "true or false" if isinstance(value, bool) else f"a {type(value).__name__}"
            return f"{label} must be text, got {kind}"
    return None


def sliders_in_range(block_fn: Any, inputs: Any, state: Any) -> Any:
    """``inputs`` with every slider's number moved into the slider's range (this session's
    range, where a refit narrowed it), for the page's own events (private ones): else
    ``inputs`` as they are.

    A student who types 9 in a 1..4 Head box has it moved to 4 by the page when they press
    Enter or leave the box (``ui/serving/sliders.py``); an event of the page that reads the box
    meanwhile (a link's view settling, a first view drawn late on a busy server) read the 9, and
    gradio refused it with an error toast over a view that was fine. An API caller's number is
    still refused by name: it is told what the control takes."""
    if getattr(block_fn, "api_visibility", "public") != "private" or not isinstance(inputs, list):
        return inputs
    moved = list(inputs)
    for i, component in enumerate(getattr(block_fn, "inputs", [])[: len(moved)]):
        value = moved[i]
        if not isinstance(component, gr.Slider) or isinstance(value, bool):
            continue
        if not isinstance(value, int | float) or math.isnan(value):
            continue
        if state is not None and component._id in state:
            component = state[component._id]  # this session's range
        low, high = component.minimum, component.maximum
        if low is not None and value < low:
            moved[i] = low
        elif high is not None and value > high:
            moved[i] = high
    return moved


def guard_preprocessing(demo: gr.Blocks) -> None:
    """Make gradio's own refusals of a value (a choice not offered, a number out of a slider's
    range, a value of the wrong type) short messages without a traceback in the server log or
    the Python error's text in the answer: one log line each. The page's own events have a
    slider's number moved into its range first (:func:`sliders_in_range`)."""
    original = demo.preprocess_data

    async def preprocess_data(*args: Any, **kwargs: Any) -> Any:
        block_fn = args[0] if args else kwargs.get("block_fn")
        inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
        state = args[2] if len(args) > 2 else kwargs.get("state")
        inputs = sliders_in_range(block_fn, inputs, state)
        if len(args) > 1:
            args = (args[0], inputs, *args[2:])
        elif "inputs" in kwargs:
            kwargs["inputs"] = inputs
        refused = _not_text(block_fn, inputs)
        if refused is not None:
            log.info("input refused before the handler: %s", refused)
            raise gr.Error(plain_message(refused), print_exception=False)
        try:
            return await original(*args, **kwargs)
        except PASS_THROUGH:
            raise
        except Exception as error:
            block_fn = args[0] if args else kwargs.get("block_fn")
            text = _refused_value(block_fn, error)
            log.info("input refused before the handler: %s", text)
            raise gr.Error(plain_message(text), print_exception=False) from None

    demo.preprocess_data = preprocess_data  # type: ignore[method-assign]


try:  # Hugging Face ZeroGPU: a real decorator there, a no-op everywhere else.
    import spaces  # type: ignore[import-not-found]

    gpu = spaces.GPU
except ImportError:  # pragma: no cover - depends on the host

    def gpu(fn: Callable | None = None, **_: Any) -> Callable:
        """No-op stand-in for ``spaces.GPU`` (requests run on this machine's device)."""
        return fn if fn is not None else (lambda f: f)
