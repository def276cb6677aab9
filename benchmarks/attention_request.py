"""How much work one Attention redraw does between the text box and the figures.

Counts, for the handler the text box fires (``refit_everything``: a new text, a new model) and
for a slider's redraw (``everything``, from the cached analysis):

- moves: the distinct calls (caller function → callee function) from a module of ``ui/`` into
  another module of ``ui/`` or ``transformer/``, or back into ``ui/`` (a ``sys.setprofile`` hook; a call repeated in a
  loop, such as a forward's layers, counts once: the path, not its iterations); "up" are those
  into a higher layer (tabs > serving > the library's instruments, text, figures > its core),
  which a one-way flow should not need;
- lookups: ``ModelRegistry.checkpoint`` calls (the model resolved from its name);
- checks: ``check_sentences`` calls (the text checked);
- tokenizations: ``Tokenizer.encoding`` calls per line of the text (the text tokenized).

    python -m benchmarks.attention_request
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import torch

import transformer.lab.inspection as inspection
from transformer.text.tokenization import Tokenizer
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs.attention import handlers

ROOT = Path(__file__).resolve().parents[1]
CROSS = "cross-attention (decoder → encoder)"


def _module(frame: FrameType) -> str | None:
    path = frame.f_code.co_filename
    if not path.startswith(str(ROOT)):
        return None
    relative = Path(path).relative_to(ROOT)
    if relative.parts[0] not in ("ui", "transformer"):
        return None
    return ".".join(relative.with_suffix("").parts)


def _rank(module: str) -> int:
    if module.startswith("ui.tabs"):
        return 3
    if module.startswith("ui"):
        return 2
    if module.startswith("transformer.core"):
        return 0
    return 1


@contextmanager
def moves() -> Iterator[Counter[str]]:
    """Counts ``moves`` and ``up`` of the calls made inside the block."""
    counts: Counter[str] = Counter()
    seen: set[tuple[Any, Any]] = set()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _module(frame)
        caller_frame = frame.f_back
        # The nearest caller that is project code (library frames between are passed through).
        while caller_frame is not None and _module(caller_frame) is None:
            caller_frame = caller_frame.f_back
        caller = _module(caller_frame) if caller_frame is not None else None
        if callee is None or caller is None or callee == caller:
            return
        if not (caller.startswith("ui") or callee.startswith("ui")):
            return  # inside the library (the forward, the figures): the same on any path
        edge = (caller_frame.f_code, frame.f_code)  # type: ignore[union-attr]
        if edge in seen:
            return
        seen.add(edge)
        counts["moves"] += 1
        if _rank(callee) > _rank(caller):
            counts["up"] += 1

    sys.setprofile(hook)
    try:
        yield counts
    finally:
        sys.setprofile(None)


@contextmanager
def counted(target: Any, name: str, counts: Counter[str], key: str) -> Iterator[None]:
    """``target.name`` replaced by a wrapper that adds 1 to ``counts[key]`` per call."""
    original = getattr(target, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        counts[key] += 1
        return original(*args, **kwargs)

    setattr(target, name, wrapper)
    try:
        yield
    finally:
        setattr(target, name, original)


@contextmanager
def calls() -> Iterator[Counter[str]]:
    """Counts lookups, checks and tokenizations inside the block."""
    counts: Counter[str] = Counter()
    sites: list[tuple[Any, str, str]] = [
        (ModelRegistry, "checkpoint", "lookups"),
        (Tokenizer, "encoding", "encodings"),
        (inspection, "check_sentences", "checks"),
    ]
    # Modules that imported check_sentences by name check through their own reference.
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if (
            name.startswith(("ui.", "transformer."))
            and module is not inspection
            and getattr(module, "check_sentences", None) is inspection.check_sentences
        ):
            sites.append((module, "check_sentences", "checks"))
    with _all(sites, counts):
        yield counts


@contextmanager
def _all(sites: list[tuple[Any, str, str]], counts: Counter[str]) -> Iterator[None]:
    if not sites:
        yield
        return
    (target, name, key), *rest = sites
    with counted(target, name, counts, key), _all(rest, counts):
        yield


def measure(run: Callable[[], Any], lines: int) -> dict[str, float]:
    with calls() as counted_calls, moves() as counted_moves:
        run()
    return {
        "moves": counted_moves["moves"],
        "up": counted_moves["up"],
        "lookups": counted_calls["lookups"],
        "checks": counted_calls["checks"],
        "tokenizations": counted_calls["encodings"] / lines,
    }


def main() -> None:
    torch.set_num_threads(1)
    registry = ModelRegistry(torch.device("cpu"))
    session = SessionModels()
    text = "the small cat sees a red ball\na big dog sleeps"
    args: tuple[Any, ...] = (CROSS, 2, 1, 1, [], False, session, None)
    redraws = {
        "text box, new text (refit_everything)": lambda: handlers.refit_everything(
            registry, text, "translate", *args
        ),
        "text box, same text again (cached)": lambda: handlers.refit_everything(
            registry, text, "translate", *args
        ),
        "model change (refit_everything)": lambda: handlers.refit_everything(
            registry, text, "reverse", *args
        ),
        "slider redraw (everything, cached)": lambda: handlers.everything(
            registry, text, "reverse", *args
        ),
    }
    print("| redraw | moves | up | lookups | checks | tokenizations |")
    print("|---|---|---|---|---|---|")
    for label, run in redraws.items():
        m = measure(run, len(text.splitlines()))
        print(
            f"| {label} | {m['moves']:.0f} | {m['up']:.0f} | {m['lookups']:.0f} | "
            f"{m['checks']:.0f} | {m['tokenizations']:g} |"
        )


if __name__ == "__main__":
    main()
