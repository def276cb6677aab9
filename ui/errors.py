"""The error policy: every error reaches the user as a short message, never a traceback.

Expected errors (the user's input) become their own message, scrubbed of file paths and HTML;
out-of-memory and accelerator errors become advice; anything else is logged here and shown as
"something went wrong", with the app still running.
"""

from __future__ import annotations

import functools
import html
import inspect
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import torch

from transformer.checkpoint import CheckpointError
from transformer.config import ConfigError
from transformer.text.tokenization import TokenizerError

log = logging.getLogger("visualiser")

EXPECTED_ERRORS = (ValueError, TokenizerError, CheckpointError, ConfigError, IndexError)
MAX_MESSAGE_CHARS = 600  # an error echoing a 100,000-character input stays readable
# An absolute path (POSIX or Windows) of at least two components, not glued to a word ("tokens/s").
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[/\\][\w.~@+-]+){2,}[/\\]?")


def scrub(text: str) -> str:
    """A message fit for any user: no file paths (a path becomes its file name), no traceback,
    no HTML (gradio renders an error as HTML), at most ``MAX_MESSAGE_CHARS`` characters."""
    text = text.replace(str(Path.cwd()), ".")
    text = _ABSOLUTE_PATH.sub(lambda m: re.split(r"[/\\]", m.group(0).rstrip("/\\"))[-1], text)
    text = text.split("Traceback (most recent call last)")[0].strip() or "an error occurred"
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return html.escape(text, quote=False)


def _device_trouble(error: Exception) -> str | None:
    """What to tell the user about an out-of-memory or accelerator error, or None."""
    text = str(error)
    if isinstance(error, torch.OutOfMemoryError | MemoryError) or "out of memory" in text.lower():
        return "out of memory: try a shorter input, fewer sentences or fewer steps"
    if isinstance(error, RuntimeError) and any(
        word in text for word in ("CUDA", "cuDNN", "CUBLAS", "MPS", "device-side")
    ):
        return "the accelerator reported an error during this request; please try again"
    return None


def message(error: Exception) -> gr.Error:
    """The ``gr.Error`` a user sees for ``error``. Gradio does not print its traceback to the
    server log: expected errors are the user's input, unexpected ones are logged here."""
    if isinstance(error, gr.Error):
        return error
    if isinstance(error, EXPECTED_ERRORS):
        return gr.Error(scrub(str(error)), print_exception=False)
    trouble = _device_trouble(error)
    if trouble is not None:
        log.warning("device trouble in a request: %s: %s", type(error).__name__, error)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return gr.Error(trouble, print_exception=False)
    log.exception("unexpected error in a request")
    return gr.Error(
        f"something went wrong ({type(error).__name__}); the app is still running",
        print_exception=False,
    )


def friendly(fn: Callable) -> Callable:
    """Wrap an event handler (function or generator) so every error reaches the user as a
    ``gr.Error`` message, without a traceback or a file path."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except Exception as error:
                raise message(error) from None

        return generator_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            raise message(error) from None

    return wrapper


try:  # Hugging Face ZeroGPU: a real decorator there, a no-op everywhere else.
    import spaces  # type: ignore[import-not-found]

    gpu = spaces.GPU
except ImportError:  # pragma: no cover - depends on the host

    def gpu(fn: Callable | None = None, **_: Any) -> Callable:
        """No-op stand-in for ``spaces.GPU`` (requests run on this machine's device)."""
        return fn if fn is not None else (lambda f: f)
