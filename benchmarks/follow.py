"""Follow me with a class: how long a lecturer's Step, Back and tab change take to reach 30
followers' pages, and whether a follower's page ever shows another step on the way.

One lecturer's room; N followers (``--followers``, 30), each its own session on the app,
making the requests their pages make: Follow, then the poll as the page's timer sends it (the
side's own ``POLL_S``, not queued), and, when a poll found the room moved, the events the page
runs then, in order, each as the page sends it (queued); the page's own script steps (wait
until idle, scroll) are waited out as their shortest time in a browser (0.55 s, 0.3 s). The
lecturer's page is simulated in the server's process: it steps its own generation (or draws
its Attention view, which the followers then find among the shared views), and its view is
published at the next tick of its timer (a uniform wait within the side's ``PUBLISH_S``), or, for
a tab change on a side that publishes a clicked tab at once, after ``AT_ONCE_S``; the
times count from when the lecturer's page showed the change. The lecturer
steps Generate to step 2, 3, ... (one every ``--every`` seconds), goes back one step, then
switches between Attention and Generate. Per change and follower: the time from the
lecturer's change to the follower's page showing it (Generate: the summary at the lecturer's
step), and the steps shown on the way that were neither the one shown before nor the
lecturer's (a default's first step, drawn before the replay).

With ``--against REV`` (default: none) the same lecture runs on commit REV's app too (a
temporary ``git worktree``), the sides alternated for ``--rounds`` rounds; each side's server
is this script's own ``--serve`` mode run on that side's code. The load average is printed.

Usage: python -m benchmarks.follow [--followers 30] [--model translate] [--every 5]
       [--against REV] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

SOURCE = "the small cat sees a red ball"
STEPS = re.compile(r"Output so far\D{0,40}\((\d+) steps?\)")
# A tab clicked on a lecturer's page that publishes it at once: the click's event and the
# publish that follows it, two requests (the publish reads the page's hundred controls, about
# 15 ms of the server's time), each with its round trip.
AT_ONCE_S = 0.04
# The page's own script steps, as their shortest time in a browser (ui/links/views.py).
JS_WAITS = {"__viewTouchWatch": 0.55, "scrollIntoView": 0.3}


# -- the server side (run on each side's code: imports only the app's modules) ------------------


def serve(port: int, model: str) -> None:
    """Build and launch the app on ``port``, open a room, describe the follower's events on
    stdout (one JSON line), then publish the views asked for on stdin: ``publish DELAY
    QUERY`` (after DELAY seconds) answers ``{"version", "at"}``; ``quit`` ends."""
    import app as visualiser
    from ui.demo import launch_options
    from ui.links import rooms as rooms_module
    from ui.links.share import encode_view

    demo: Any = visualiser.build_demo("cpu", (), preload=False)
    demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
        **launch_options(),
    )  # fmt: skip
    demo.model_registry.checkpoint(model, None)
    follow_me, views = demo.follow_me, demo.views
    room = follow_me.rooms.open()
    fns = demo.fns

    def chain(box: Any) -> list[dict[str, Any]]:
        at: Any = next(f for f in fns.values() if (box._id, "change") in map(tuple, f.targets))
        steps = []
        while at is not None:
            js = str(at.js or "")
            wait = max([s for key, s in JS_WAITS.items() if key in js], default=0.0)
            steps.append(
                {
                    "index": at._id,
                    "fn": at.fn is not None,
                    "wait": wait,
                    "inputs": [c._id for c in at.inputs],
                    "outputs": [c._id for c in at.outputs],
                }
            )
            at = next((f for f in fns.values() if f.trigger_after == at._id), None)
        return steps

    poll = next(f for f in fns.values() if getattr(f.fn, "__name__", "") == "poll_tabs")
    follow = next(i for i, f in fns.items() if getattr(f.fn, "__name__", "") == "start_following")
    step = next(f for f in fns.values() if f.api_name == "generate_step")
    queries = {
        "generate": lambda n: encode_view(
            views.tabs["generate"], {"source": SOURCE, "model": model}, n
        ),
        "attention": lambda n: encode_view(views.tabs["attention"], {}),
    }
    info = {
        "url": f"http://127.0.0.1:{port}/",
        "code": room.code,
        "follow": follow,
        "poll": {"index": poll._id, "inputs": [c._id for c in poll.inputs],
                 "outputs": [c._id for c in poll.outputs]},
        "boxes": {slug: box._id for slug, box in follow_me.polled.items()},
        "chains": {slug: chain(follow_me.polled[slug]) for slug in ("generate", "attention")},
        "summary": step.outputs[0]._id,
        "poll_s": rooms_module.POLL_S,
        "publish_s": rooms_module.PUBLISH_S,
        # a tab clicked on the lecturer's page is published at once where the side does so
        "tab_at_once": hasattr(rooms_module, "PUBLISH_NOW_JS"),
    }  # fmt: skip
    print(json.dumps(info), flush=True)
    lecturer = Lecturer(demo, model)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        _, delay, slug, n = words
        lecturer.show(slug, int(n))  # the lecturer's page draws its view
        shown = time.time()
        time.sleep(float(delay))  # until its timer's next tick
        version = follow_me.rooms.publish(room.code, room.secret, queries[slug](int(n)))
        print(json.dumps({"version": version, "shown": shown}), flush=True)
    demo.close()


class Lecturer:
    """The lecturer's page, in the server's process: its Generate steps on a session state of
    its own, its Attention view drawn as its page draws it (which the followers' pages then
    find among the views every session shares)."""

    def __init__(self, demo: Any, model: str) -> None:
        import copy

        import gradio as gr

        self.views = demo.views
        fns = demo.fns.values()
        self.step = next(f for f in fns if f.api_name == "generate_step")
        self.back = next(f for f in fns if f.api_name == "generate_back")
        tab = self.views.tabs["generate"]
        values = {tab.controls["source"]._id: SOURCE, tab.controls["model"]._id: model}

        def value(c: Any) -> Any:
            return copy.deepcopy(c.value) if isinstance(c, gr.State) else c.value

        self.args = [values.get(c._id, value(c)) for c in self.step.inputs]
        self.page = [value(c) for c in self.views.draw_inputs]
        self.at = 0

    def show(self, slug: str, step: int) -> None:
        """Draw the view of ``slug`` (Generate at ``step``) as the lecturer's page does."""
        if slug == "attention":
            tab = self.views.tabs["attention"]
            view = {"tab": "attention", "values": dict(tab.defaults), "step": None}
            self.views.apply(view, *self.page)
            return
        while self.at != step:
            handler = self.step if step > self.at else self.back
            self.args[-1] = handler.fn(*self.args)[-1]
            self.at += 1 if step > self.at else -1


# -- the followers ------------------------------------------------------------------------------


@dataclass
class Lecture:
    """The changes so far (version → (when, tab, step)) and what the followers saw."""

    changes: dict[int, tuple[float, str, int]] = field(default_factory=dict)
    steps: list[float] = field(default_factory=list)  # Step or Back: seconds to the step shown
    tabs: list[float] = field(default_factory=list)  # tab change: seconds to the tab drawn
    wrong: int = 0  # steps shown on the way that were neither the last shown nor the lecturer's
    seen: int = 0  # changes seen by a follower
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _steps_in(output: dict[str, Any], outputs: list[int], summary: int) -> int | None:
    if summary not in outputs:
        return None
    value = output.get("data", [])[outputs.index(summary)]
    if isinstance(value, dict):
        value = value.get("value")
    found = STEPS.search(value) if isinstance(value, str) else None
    return int(found.group(1)) if found else None


def follower(info: dict[str, Any], lecture: Lecture, stop: threading.Event, seed: int) -> None:
    """One follower's page until ``stop`` (see the module's notes)."""
    import httpx

    from benchmarks.classroom import PageValues, _plain, _queued, page_defaults, student_client

    url = info["url"]
    rng = random.Random(seed)
    try:
        client = student_client(url, 300)
        session = client.session_hash
        http = httpx.Client(timeout=300)
        page = PageValues(page_defaults(url))
        _plain(http, url, info["follow"], session, [info["code"]])
    except Exception as error:
        with lecture.lock:
            lecture.errors.append(f"join: {type(error).__name__}: {str(error)[:150]}")
        return

    stop.wait(rng.uniform(0, info["poll_s"]))
    showing: int | None = None  # the step the page shows
    poll = info["poll"]
    while not stop.is_set():
        try:
            output = _plain(http, url, poll["index"], session, page.inputs(poll))
            page.show(poll, output)
            for slug, box in info["boxes"].items():
                value = output["data"][poll["outputs"].index(box)]
                if slug not in info["chains"] or not isinstance(value, str) or not value:
                    continue
                version = int(value.split(" ", 1)[0])
                with lecture.lock:
                    change = lecture.changes.get(version)
                reached = None
                for event in info["chains"][slug]:
                    if not event["fn"]:
                        time.sleep(event["wait"])
                        continue
                    result = _queued(http, url, event["index"], session, page.inputs(event))
                    page.show(event, result)
                    now = time.time()
                    if slug != "generate":
                        reached = reached or now
                        continue
                    steps = _steps_in(result, event["outputs"], info["summary"])
                    if steps is None or change is None:
                        continue
                    if steps == change[2]:
                        reached = reached or now
                    elif steps != showing:
                        with lecture.lock:
                            lecture.wrong += 1
                    showing = steps
                if change is not None and reached is not None:
                    with lecture.lock:
                        lecture.seen += 1
                        if change[1] == "step":
                            lecture.steps.append(reached - change[0])
                        elif change[1] == "tab":
                            lecture.tabs.append(reached - change[0])
        except Exception as error:
            with lecture.lock:
                lecture.errors.append(f"{type(error).__name__}: {str(error)[:150]}")
            stop.wait(1.0)
        stop.wait(info["poll_s"])
    client.close()


# -- one side's lecture ---------------------------------------------------------------------------


class Side:
    """One side's app (this script's ``--serve`` on ``root``'s code), driven through stdin."""

    def __init__(self, name: str, root: Path, model: str) -> None:
        # Imported here: the serving side runs this script on the other commit's code.
        from benchmarks.classroom_sides import ServedApp
        from ui.testing import free_port

        self.app = ServedApp(
            [sys.executable, str(Path(__file__).resolve()), "--serve", str(free_port()),
             "--model", model],
            name=name, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
        )  # fmt: skip
        self.name, self.info = name, self.app.ready

    def publish(self, delay: float, slug: str, step: int) -> dict[str, Any]:
        """Publish ``slug``'s view at ``step`` after ``delay`` seconds: when it was shown."""
        return self.app.ask(f"publish {delay:.3f} {slug} {step}")

    def close(self) -> None:
        """End the side's app."""
        self.app.close()


def lecture(side: Side, followers: int, every: float, seed: int) -> Lecture:
    """The lecture on ``side``: its followers join, then Steps, a Back and tab changes."""
    record, stop = Lecture(), threading.Event()
    rng = random.Random(seed)
    info = side.info

    def change(kind: str, slug: str, step: int) -> None:
        delay = rng.uniform(0, info["publish_s"])
        if kind == "tab" and info.get("tab_at_once"):
            delay = AT_ONCE_S
        published = side.publish(delay, slug, step)
        with record.lock:  # from when the lecturer's page showed it
            record.changes[published["version"]] = (published["shown"], kind, step)

    change("join", "generate", 1)
    threads = [
        threading.Thread(target=follower, args=(info, record, stop, seed * 100 + i), daemon=True)
        for i in range(followers)
    ]
    for thread in threads:
        thread.start()
        time.sleep(0.1)
    time.sleep(max(10.0, every))  # every page joined and drew the first view
    script = [("step", "generate", n) for n in range(2, 8)] + [("step", "generate", 6)]
    script += [("tab", "attention", 0), ("tab", "generate", 6)] * 2
    for kind, slug, step in script:
        change(kind, slug, step)
        time.sleep(every)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    return record


def _stats(values: list[float]) -> str:
    if not values:
        return "— | — | —"
    values = sorted(values)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return f"{statistics.median(values):.2f} | {p95:.2f} | {values[-1]:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--followers", type=int, default=30)
    parser.add_argument("--model", default="translate")
    parser.add_argument("--every", type=float, default=5.0, help="s between the lecturer's changes")
    parser.add_argument("--against", default=None, metavar="REV")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.model)
        return
    from benchmarks.classroom_sides import Worktree, head

    repo = Path(__file__).resolve().parent.parent
    tree = Worktree(repo, args.against) if args.against else None
    sides = [(f"here ({head(repo)})", repo)]
    if tree is not None:
        sides.append((f"against ({tree.commit[:7]})", tree.path))
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"follow me: {args.followers} followers, {args.model}, a change every {args.every:g} s; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"{time.strftime('%Y-%m-%d %H:%M')}; load average at the start {load}",
        flush=True,
    )
    results: dict[str, list[Lecture]] = {name: [] for name, _ in sides}
    try:
        for round_ in range(args.rounds):
            for name, root in sides:
                side = Side(name, root, args.model)
                try:
                    results[name].append(lecture(side, args.followers, args.every, args.seed))
                finally:
                    side.close()
                print(f"round {round_ + 1}: {name} done", flush=True)
    finally:
        if tree is not None:
            tree.close()
    lines = [
        "",
        "| side | Step/Back p50 (s) | p95 | max | tab change p50 (s) | p95 | max | wrong steps shown "
        "| changes seen | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    medians = {}
    for name, records in results.items():
        steps = [s for r in records for s in r.steps]
        tabs = [s for r in records for s in r.tabs]
        medians[name] = (statistics.median(steps) if steps else None,
                         statistics.median(tabs) if tabs else None)  # fmt: skip
        lines.append(
            f"| {name} | {_stats(steps)} | {_stats(tabs)} | {sum(r.wrong for r in records)} | "
            f"{sum(r.seen for r in records)} | {sum(len(r.errors) for r in records)} |"
        )
        for record in records:
            for error in record.errors[:2]:
                lines.append(f"- {name}: {error}")
    if len(sides) == 2:
        here, there = (medians[name] for name, _ in sides)
        for what, a, b in (("Step/Back", here[0], there[0]), ("tab change", here[1], there[1])):
            if a and b:
                lines.append(f"- {what} median, here / against: {a / b:.2f}")
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines.append(f"- load average at the end {load}")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
