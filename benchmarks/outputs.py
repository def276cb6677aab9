"""What answering an event costs the server once its handler has returned: gradio's own
``postprocess_data`` against the app's lighter one (``ui/serving/outputs.py``), on the app's
own events and their handlers' real answers, timed alternately in the same run.

The events: a follower's poll that found the room where it was (every output skipped but the
state); a follower's page drawing the lecturer's Attention view and Generate step (a room's
view, as ``ui/links/rooms.py`` draws it), and a student's own Generate Step. The last column
gives what the lighter answers save at one of the lecturer's changes for ``--followers``
followers (their poll and their draw), all of it server time the last follower waits behind.

Usage: python -m benchmarks.outputs [--repeats 200] [--followers 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def _copy(predictions: Any) -> Any:
    """Gradio takes an update apart as it answers it: each answer gets its own copy."""
    if isinstance(predictions, (list, tuple)):
        return [dict(p) if isinstance(p, dict) else p for p in predictions]
    return dict(predictions) if isinstance(predictions, dict) else predictions


def _per_answer(
    postprocess: Any, function: Any, predictions: Any, state: Any, repeats: int
) -> float:
    """Milliseconds one answer takes (the copy of the predictions left out)."""
    copies = [_copy(predictions) for _ in range(repeats)]

    async def run() -> float:
        began = time.perf_counter()
        for copy in copies:
            await postprocess(function, copy, state)
        return (time.perf_counter() - began) / repeats * 1000

    return asyncio.run(run())


def _events(demo: Any) -> dict[str, tuple[Any, Any]]:
    """The events timed, each with what its handler returns: name → (function, predictions)."""
    import gradio as gr

    from ui.links.share import encode_view

    fns = list(demo.fns.values())
    follow_me, views = demo.follow_me, demo.views
    poll = next(f for f in fns if getattr(f.fn, "__name__", "") == "poll_tabs")
    found = [gr.skip()] * len(poll.outputs)
    step = next(f for f in fns if f.api_name == "generate_step")
    generate = views.tabs["generate"]
    model = "translate"
    values = {generate.controls["source"]._id: "the small cat sees a red ball"}
    values[generate.controls["model"]._id] = model
    args = [values.get(c._id, c.value) for c in step.inputs]
    stepped = step.fn(*args)
    events: dict[str, tuple[Any, Any]] = {"a follower's poll (nothing moved)": (poll, found)}
    queries = {
        "attention": encode_view(views.tabs["attention"], {}),
        "generate": encode_view(generate, {"source": values[generate.controls["source"]._id],
                                           "model": model}, 2),
    }  # fmt: skip
    for slug, query in queries.items():
        box = follow_me.polled[slug]
        draw = next(f for f in fns if (box._id, "change") in map(tuple, f.targets))
        page = [c.value for c in draw.inputs[:-1]]
        events[f"a follower's {slug} view"] = (draw, draw.fn(*page, f"1 {query}"))
    events["a student's Generate Step"] = (step, stepped)
    return events


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--followers", type=int, default=30)
    args = parser.parse_args(argv)
    import gradio as gr
    from gradio.state_holder import SessionState

    import app as visualiser

    demo = visualiser.build_demo("cpu", (), preload=False)
    lighter = demo.postprocess_data
    if not getattr(lighter, "lighter", False):
        raise SystemExit("the app did not install its lighter answers")
    gradios = gr.Blocks.postprocess_data.__get__(demo)
    events = _events(demo)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"load average at the start {load}; {args.repeats} answers per side and event, alternated"
    )
    print("| event | outputs | skipped | gradio's (ms) | lighter (ms) | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    saved = {}
    for name, (function, predictions) in events.items():
        times: dict[str, list[float]] = {"gradio": [], "lighter": []}
        for _ in range(5):  # alternated, so that a busy moment falls on both sides
            for side, postprocess in (("gradio", gradios), ("lighter", lighter)):
                state = SessionState(demo)
                times[side].append(
                    _per_answer(postprocess, function, predictions, state, args.repeats // 5)
                )
        ours, theirs = statistics.median(times["lighter"]), statistics.median(times["gradio"])
        values = predictions if isinstance(predictions, (list, tuple)) else [predictions]
        skipped = sum(isinstance(v, dict) and v == {"__type__": "update"} for v in values)
        saved[name] = theirs - ours
        print(
            f"| {name} | {len(function.outputs)} | {skipped} | {theirs:.2f} | {ours:.2f} | "
            f"{ours / theirs:.2f} |"
        )
    per_change = saved["a follower's poll (nothing moved)"] + max(
        saved["a follower's attention view"], saved["a follower's generate view"]
    )
    print(
        f"- at one of the lecturer's changes, {args.followers} followers: about "
        f"{per_change * args.followers / 1000:.2f} s less of the server's time"
    )
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"- load average at the end {load}")


if __name__ == "__main__":
    main()
