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
- tokenizations: ``Tokenizer.encoding`` calls on a whole line of the text, per line (a single
  character looked up to name what a model cannot read is not counted);

each also as "(registry)": how many of them the shared ``ModelRegistry.analysis`` makes (it
bounds a capture's size, then runs it), which a cached analysis skips.

    python -m benchmarks.attention_request          # the table
    python -m benchmarks.attention_request --moves  # and every redraw's moves, in call order
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
def moves(listed: list[str] | None = None) -> Iterator[Counter[str]]:
    """Counts ``moves`` and ``up`` of the calls made inside the block; each move is appended to
    ``listed`` (``caller module.function → callee module.function``) when given."""
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
        if listed is not None:
            listed.append(
                f"{caller}.{caller_frame.f_code.co_name} → {callee}.{frame.f_code.co_name}"  # type: ignore[union-attr]
            )
        if caller == "ui.serving.state":
            counts["registry"] += 1
        if _rank(callee) > _rank(caller):
            counts["up"] += 1

    sys.setprofile(hook)
    try:
        yield counts
    finally:
        sys.setprofile(None)


def _in_registry() -> bool:
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith("serving/state.py"):
            return True
        frame = frame.f_back
    return False


@contextmanager
def counted(
    target: Any,
    name: str,
    counts: Counter[str],
    key: str,
    counts_call: Callable[..., bool] = lambda *args, **kwargs: True,
) -> Iterator[None]:
    """``target.name`` replaced by a wrapper that adds 1 to ``counts[key]`` per call that
    ``counts_call`` accepts (and to ``counts[key + " (registry)"]`` when the registry made it)."""
    original = getattr(target, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if counts_call(*args, **kwargs):
            counts[key] += 1
            if _in_registry():
                counts[key + " (registry)"] += 1
        return original(*args, **kwargs)

    setattr(target, name, wrapper)
    try:
        yield
    finally:
        setattr(target, name, original)


@contextmanager
def calls(lines: list[str]) -> Iterator[Counter[str]]:
    """Counts lookups, checks and tokenizations of ``lines`` inside the block."""
    counts: Counter[str] = Counter()
    whole = {line.strip() for line in lines}

    def a_line(tokenizer: Tokenizer, text: str, *args: Any, **kwargs: Any) -> bool:
        return text.strip() in whole

    sites: list[tuple[Any, str, str, Callable[..., bool]]] = [
        (ModelRegistry, "checkpoint", "lookups", _every),
        (Tokenizer, "encoding", "encodings", a_line),
        (inspection, "check_sentences", "checks", _every),
    ]
    # Modules that imported check_sentences by name check through their own reference.
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if (
            name.startswith(("ui.", "transformer."))
            and module is not inspection
            and getattr(module, "check_sentences", None) is inspection.check_sentences
        ):
            sites.append((module, "check_sentences", "checks", _every))
    with _all(sites, counts):
        yield counts


@contextmanager
def _all(
    sites: list[tuple[Any, str, str, Callable[..., bool]]], counts: Counter[str]
) -> Iterator[None]:
    if not sites:
        yield
        return
    (target, name, key, accepts), *rest = sites
    with counted(target, name, counts, key, accepts), _all(rest, counts):
        yield


def _every(*args: Any, **kwargs: Any) -> bool:
    return True


def measure(
    run: Callable[[], Any], lines: list[str], listed: list[str] | None = None
) -> dict[str, str]:
    """What one call of ``run`` (a redraw of ``lines``) does, as the table's cells (its moves
    appended to ``listed`` when given)."""
    with calls(lines) as counted_calls, moves(listed) as counted_moves:
        run()

    def cell(key: str, per: int = 1) -> str:
        total, registry = counted_calls[key] / per, counted_calls[key + " (registry)"] / per
        return f"{total:g} ({registry:g})" if registry else f"{total:g}"

    return {
        "moves": f"{counted_moves['moves']}"
        + (f" ({counted_moves['registry']})" if counted_moves["registry"] else ""),
        "up": f"{counted_moves['up']}",
        "lookups": cell("lookups"),
        "checks": cell("checks"),
        "tokenizations": cell("encodings", len(lines)),
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
    print(
        "| redraw | moves (registry) | up | lookups | checks (registry) | tokenizations (registry) |"
    )
    print("|---|---|---|---|---|---|")
    listed: dict[str, list[str]] = {}
    for label, run in redraws.items():
        m = measure(run, text.splitlines(), listed.setdefault(label, []))
        print(f"| {label} | {' | '.join(m.values())} |")
    if "--moves" in sys.argv[1:]:
        for label, moved in listed.items():
            print(f"\n{label}:")
            print("\n".join(f"  {n:2}. {move}" for n, move in enumerate(moved, 1)))


if __name__ == "__main__":
    main()
