"""What a visitor's first request costs the server's event loop: gradio's ``SessionState``
started its way (a copy of every component's config) against the app's (copies made when first
read, ``ui/serving/sessions.py``), on this app's own blocks, in the same run.

Gradio starts a session inside the queue's ``push``, on the event loop: while it runs, no other
request is answered. A class that opens the link at once starts as many sessions one after the
other, so the table also gives the time the last of ``--class-size`` arriving students waits
behind the others' starts.

Usage: python -m benchmarks.session_start [--repeats 30] [--rounds 3] [--class-size 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def _per_start(demo: Any, init: Callable[..., None], repeats: int) -> float:
    """Seconds one ``SessionState(demo)`` takes with ``init`` as its ``__init__``."""
    from gradio.state_holder import SessionState

    saved = SessionState.__init__
    SessionState.__init__ = init  # type: ignore[method-assign]
    try:
        began = time.perf_counter()
        for _ in range(repeats):
            SessionState(demo)
        return (time.perf_counter() - began) / repeats
    finally:
        SessionState.__init__ = saved  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--class-size", type=int, default=50)
    args = parser.parse_args(argv)
    from gradio.state_holder import SessionState

    gradios = SessionState.__init__  # before the app installs its own
    if getattr(gradios, "on_demand", False):
        raise SystemExit("gradio's own session start was replaced before this benchmark began")
    import app as visualiser

    demo = visualiser.build_demo("cpu", (), preload=False)
    ours = SessionState.__init__
    if not getattr(ours, "on_demand", False):
        raise SystemExit("the app did not install its on-demand session start")
    print(f"load average: {os.getloadavg()}; {len(demo.blocks)} blocks in the app")
    print(
        "| round | gradio's start (ms) | on demand (ms) | ratio | a class's last start, gradio's (s) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    ratios = []
    for n in range(1, args.rounds + 1):
        theirs = _per_start(demo, gradios, args.repeats)
        mine = _per_start(demo, ours, args.repeats)
        ratios.append(mine / theirs)
        print(
            f"| {n} | {theirs * 1e3:.1f} | {mine * 1e3:.3f} | {mine / theirs:.4f} | "
            f"{theirs * args.class_size:.2f} |"
        )
    print(f"median ratio (on demand / gradio's): {statistics.median(ratios):.4f}")


if __name__ == "__main__":
    main()
