"""Memory held per anonymous session: the server's resident memory (RSS) and the sessions gradio
keeps, over many plain API calls each made as a new session (what anyone can do to a public
Space: no page, no cookie, a fresh ``session_hash`` per request).

Launches the app in-process on loopback (as ``python app.py`` does, with the same launch
options), makes ``--sessions`` calls to a cheap named endpoint from ``--threads`` threads, and
prints, every ``--every`` sessions, the sessions held and the RSS. Gradio keeps up to
10,000 sessions at about 0.46 MB each; the app bounds them (``ui.demo.MAX_SESSIONS``), so RSS
must stay flat (within 10 %) once the bound is reached. ``--capacity 10000`` shows gradio's own
default for comparison.

Usage: python -m benchmarks.sessions [--sessions 2000] [--capacity N] [--threads 4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

# A cheap request that reads a gr.State (the session's models): the model description.
ENDPOINT = "model_info"
ARGS = ["translate"]


def rss_mb() -> float:
    """This process's resident memory in MB (Linux /proc)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def anonymous_call(url: str, api_name: str, data: list, session: str | None = None) -> bool:
    """One request through gradio's REST API as a new session (``session`` or a random hash);
    True when it completed."""
    session = session or uuid.uuid4().hex
    with httpx.Client(timeout=120) as client:
        posted = client.post(
            f"{url}gradio_api/call/{api_name}", json={"data": data, "session_hash": session}
        )
        if posted.status_code != 200:
            return False
        event = posted.json()["event_id"]
        stream = client.get(f"{url}gradio_api/call/{api_name}/{event}").text
    events = re.findall(r"event: (\w+)\n", stream)
    return bool(events) and events[-1] == "complete"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--capacity", type=int, default=None, help="sessions kept (app default)")
    args = parser.parse_args(argv)

    import app as visualiser
    from ui import demo as demo_module
    from ui.serving.memory import return_memory_when_idle
    from ui.testing import launched

    if args.capacity is not None:
        demo_module.MAX_SESSIONS = args.capacity
    return_memory_when_idle()
    demo = visualiser.build_demo("cpu", (), preload=False)
    capacity = demo_module.MAX_SESSIONS
    rows, latencies, failures = [], [], 0
    with launched(demo) as url:
        for _ in range(20):  # warm-up: the tokenizer trained, the queue's workers started
            anonymous_call(url, ENDPOINT, ARGS)
        base = rss_mb()
        print(f"sessions kept at most: {capacity}; RSS after warm-up {base:.0f} MB")
        print(f"{'sessions':>9} {'held':>6} {'RSS MB':>8} {'vs warm':>8}")

        def one(_: int) -> None:
            nonlocal failures
            start = time.monotonic()
            if not anonymous_call(url, ENDPOINT, ARGS):
                failures += 1
            latencies.append(time.monotonic() - start)

        done = 0
        with ThreadPoolExecutor(args.threads) as pool:
            while done < args.sessions:
                batch = min(args.every, args.sessions - done)
                list(pool.map(one, range(batch)))
                done += batch
                held = len(demo.state_holder.session_data)
                rss = rss_mb()
                rows.append((done, held, rss))
                print(f"{done:>9} {held:>6} {rss:>8.0f} {100 * (rss / base - 1):>+7.1f}%")
    latencies.sort()
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    # Flat: once the bound is reached, RSS stays within 10 % of its value there.
    reached = [rss for done, held, rss in rows if done >= capacity] or [rows[-1][2]]
    spread = (max(reached) - min(reached)) / min(reached)
    summary = {
        "sessions": args.sessions,
        "capacity": capacity,
        "held_at_end": rows[-1][1],
        "rss_warm_mb": round(base),
        "rss_end_mb": round(rows[-1][2]),
        "rss_spread_after_bound": round(spread, 3),
        "median_s": round(statistics.median(latencies), 3),
        "p95_s": round(p95, 3),
        "failures": failures,
    }
    print(json.dumps(summary))
    print(
        f"RSS {'flat' if spread <= 0.10 else 'NOT flat'} after the bound: "
        f"{100 * spread:.1f} % spread (target 10 %)"
    )
    return summary


if __name__ == "__main__":
    main()
