"""A lesson with a whole class: N simulated students, each its own ``gradio_client`` session,
clicking through the app at once, with think time between clicks.

A lecture asks "now try your own sentence": most students (``--own-share``, 80 %) type their
own short sentences (English, German, French, Spanish, Chinese, Arabic, with emoji; a new one
each round, every one different, so that the app's shared views cannot answer them from the
cache: see ``classroom_sides.TextPool``), the others open the lecturer's presets. Each round a
student clicks Attention on their text, then another layer and head, Generate's Reset on it and
three Steps, Inside a layer, Tokenize, and now and then the long view (the costly one), with
1–3 s between clicks. Before the class one student runs the lesson alone (``--alone-rounds``,
on texts of their own, the long view each round): each action's "alone p50" is printed beside
the class's p50, p95 and max. It prints requests per second and errors, the server's resident
memory before, at its highest and after the class (and the GPU's memory on CUDA), and where a
request's time goes: the handler (our Python and torch, measured by a timing wrapper that only
this benchmark installs), gradio's pre- and post-processing (serialisation), and the rest of
the round trip (the queue's wait and the transport). With ``--sweep 5,10,15`` it runs each
class size in turn and prints the largest one whose every interactive action keeps its p95
within ``--target`` seconds, with no error. The load average is printed at the start and end.

Without ``--url`` the app is built and launched in this process's child on a free loopback port
(as ``python app.py`` launches it), which is what lets it measure handler times and memory;
with ``--url`` it drives a running app anywhere (round trips only; ``--pid`` names the server's
process on this machine for its memory, its children's counted).

With ``--against REV`` it runs the same lesson (the same seed, the same students' texts) on this
checkout's app and on commit REV's (checked out into a temporary ``git worktree``, removed at
the end), each launched as ``python app.py --port P`` with its own arguments (``--args-here
"--workers 2"``, ``--args-against ...``), the classes alternated (here, REV, here, REV, ...)
for ``--rounds`` rounds, so that a change that slows a class cannot hide in the machine's
noise; it prints a table per side and the ratios here / REV, the requests answered, and each
side's memory (its whole process tree: several workers count). Handler times are not known
there (the apps run unwrapped). Each student fetches the page first and keeps the cookies it
sets, so a load balancer's sticky-session cookie pins all its requests to one process.

With ``--follow N`` it measures follow me instead: one lecturer's room (opened and changed in
the server's process, as the lecturer's page publishes it) moves to another layer and head every
``--stop-every`` seconds while N followers, each its own session, poll the room as their pages do
(the page's own private event, over gradio's queue) and, when it moved, draw the lecturer's view
(``/attention``, a ``gradio_client`` session each). It prints p50/p95/max of the time from the
lecturer's change to a follower's page knowing it, and to its view drawn; errors; and the
server's memory before and after.

Usage: python -m benchmarks.classroom --students 15 --minutes 2 [--sweep 5,10,15,20]
       [--url URL [--pid PID]] [--model NAME] [--device cpu|cuda|auto] [--target 1.0]
       [--seed 0] [--own-share 0.8] [--alone-rounds 2]
       python -m benchmarks.classroom --students 15 --minutes 2 --against REV [--rounds 2]
       [--args-here "--workers 2"] [--args-against ""] [--port P]
       python -m benchmarks.classroom --follow 100 --minutes 2 [--stop-every 8]
       python -m benchmarks.classroom --exercise 100 [--spread 10]

With ``--exercise N`` a room answers a question instead (``benchmarks/classroom_exercise.py``):
N students answer within ``--spread`` seconds; it prints how soon after the last answer the
lecturer's count was complete.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import os
import platform
import random
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.classroom_sides import AppProcess, ServedApp, TextPool, sample, tree_rss_mb

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

SMOLLM2 = "SmolLM2-135M-Instruct"
# The lecture's prompts: most students open the first (the one on the projector).
PRESETS = [
    "The capital of France is",
    "Once upon a time, a small robot",
    "The three primary colours are",
]
PRESET_WEIGHTS = [0.7, 0.2, 0.1]
# The layers and heads a lecturer points at ("look at layer 3, head 2").
LAYERS = [1, 2, 3, 6]
HEADS = [1, 2, 3]
LONG_TEXT = " ".join(
    [
        "The cat sat on the mat because it was tired. It slept until the sun rose over the "
        "hills, and then it walked to the kitchen, where the dog was already waiting for "
        "breakfast."
    ]
    * 8
)
INTERACTIVE = ("attention", "layer/head", "reset", "step", "inside", "tokenize")
COSTLY = ("long view",)
KIND = {
    "decoder-only": ("decoder masked self-attention", "decoder"),
    "encoder-decoder": ("encoder self-attention", "encoder"),
}


@dataclass
class Record:
    """What the class measured: round trips per action, errors, handler times per endpoint."""

    trips: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, action: str, seconds: float, error: str | None = None) -> None:
        with self.lock:
            if error is None:
                self.trips[action].append(seconds)
            else:
                self.errors[action].append(error)


class ServerTimes:
    """Per endpoint, the seconds of its handler and of gradio's pre- and post-processing,
    recorded by wrappers installed on a demo in this process (only this benchmark installs
    them; the app itself runs unwrapped)."""

    def __init__(self) -> None:
        self.handler: dict[str, list[float]] = defaultdict(list)
        self.serialise: dict[str, list[float]] = defaultdict(list)
        self.wait: dict[str, list[float]] = defaultdict(list)
        self.process: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()

    def clear(self) -> None:
        with self.lock:
            for table in (self.handler, self.serialise, self.wait, self.process):
                table.clear()

    def _note(self, table: dict[str, list[float]], name: str, seconds: float) -> None:
        with self.lock:
            table[name].append(seconds)

    def install(self, demo: Any) -> None:
        """Wrap every named plain handler of ``demo`` and its ``preprocess_data`` and
        ``postprocess_data`` with timers."""
        for fn in demo.fns.values():
            handler = fn.fn
            if not fn.api_name or handler is None or not _plain(handler):
                continue
            fn.fn = self._timed(handler, fn.api_name)
        for method in ("preprocess_data", "postprocess_data"):
            original = getattr(demo, method)
            setattr(demo, method, self._timed_async(original))
        queue = getattr(demo, "_queue", None)
        if queue is not None and hasattr(queue, "process_events"):
            queue.process_events = self._timed_events(queue.process_events)

    def _timed_events(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """The queue's ``process_events``, noting how long its events waited in the queue
        (from joining it) and how long their processing took, end to end."""

        async def timed(events: list[Any], batch: bool, begin_time: float, fn: Any) -> Any:
            start = time.monotonic()
            name = str(getattr(fn, "api_name", None) or "?")
            for event in events:
                self._note(self.wait, name, start - getattr(event, "enqueue_time", start))
            try:
                return await method(events, batch, begin_time, fn)
            finally:
                self._note(self.process, name, time.monotonic() - start)

        return timed

    def _timed(self, handler: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(handler)  # keeps the signature gradio reads (via __wrapped__)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return handler(*args, **kwargs)
            finally:
                self._note(self.handler, name, time.perf_counter() - start)

        return timed

    def _timed_async(self, method: Callable[..., Any]) -> Callable[..., Any]:
        async def timed(block_fn: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await method(block_fn, *args, **kwargs)
            finally:
                name = getattr(block_fn, "api_name", None) or "?"
                self._note(self.serialise, str(name), time.perf_counter() - start)

        return timed


def _plain(handler: Callable[..., Any]) -> bool:
    return not (
        inspect.isgeneratorfunction(handler)
        or inspect.isasyncgenfunction(handler)
        or asyncio.iscoroutinefunction(handler)
    )


# The endpoint each action calls, for the breakdown of its time (the two Attention clicks share
# one endpoint, and so its server-side figures).
ENDPOINT = {
    "attention": "attention",
    "layer/head": "attention",
    "reset": "generate_reset",
    "step": "generate_step",
    "inside": "inside_layer",
    "tokenize": "tokenize",
    "long view": "attention_scale",
}
# The Tokenize tab as the page opens it: a BPE trained live, beside a WordPiece.
TOKENIZE = ["BPE, trained live on the bundled corpus", 500, None,
            "WordPiece (BERT style), trained live", 30]  # fmt: skip
OWN_SHARE = 0.8  # of a class, the students who type their own sentences


def student_client(url: str, timeout: float) -> Any:
    """A ``gradio_client`` session on ``url``, as patient as ``timeout`` seconds.

    gradio_client opens an httpx client for every request, and httpx loads the whole CA bundle
    for each (about 75 ms of CPU a round trip): on this machine's loopback that is the students'
    own cost taking the server's cores, so a certificate is checked only over https.

    The page is fetched first, as a browser opens it, and the cookies it sets (a load
    balancer's sticky-session cookie, when several processes serve the app behind one) go with
    every request of the session, its queue's event stream and heartbeat included: each
    student's generation lives in one process, which every click of theirs must reach."""
    import httpx
    from gradio_client import Client

    verify = url.startswith("https")
    first = httpx.get(url, timeout=timeout, verify=verify)
    first.raise_for_status()
    cookies = {name: value for name, value in first.cookies.items() if value is not None}
    return Client(
        url, verbose=False, ssl_verify=verify,
        httpx_kwargs={"timeout": timeout, "cookies": cookies},
    )  # fmt: skip


def lesson(
    url: str,
    model: str,
    architecture: str,
    record: Record,
    stop: threading.Event,
    seed: int,
    texts: list[str] | None = None,
    think: tuple[float, float] = (1.0, 3.0),
    long_every: float = 0.1,
    rounds: int | None = None,
) -> None:
    """One student until ``stop`` is set (or after ``rounds`` rounds): the lecture's script,
    with ``think`` seconds (uniform) between clicks; each round trip (or error) goes into
    ``record``.

    A round: "now try your own sentence", the next of ``texts`` (the lecturer's presets when
    None, most of them on the projector's): Attention on it, then at another layer and head;
    Generate's Reset on it and three Steps; Inside a layer; Tokenize; now and then (``long_every``)
    the long view, the costly one, of a long text that begins with the student's sentence."""

    rng = random.Random(seed)
    kind, stack = KIND.get(architecture, KIND["encoder-decoder"])
    try:
        # As patient as a browser opening the page (gradio_client's own limit is 20 s).
        client = student_client(url, 120)
    except Exception as error:  # a server that refuses a new page is an error of the lesson
        record.add("connect", 0.0, f"{type(error).__name__}: {error}")
        return

    def click(action: str, api_name: str, *args: Any) -> None:
        if stop.is_set():
            return
        start = time.perf_counter()
        try:
            client.predict(*args, api_name=api_name)
        except Exception as error:
            record.add(action, 0.0, f"{type(error).__name__}: {str(error)[:200]}")
        else:
            record.add(action, time.perf_counter() - start)
        stop.wait(rng.uniform(*think))

    done = 0
    while not stop.is_set() and (rounds is None or done < rounds):
        if texts is None:
            text = rng.choices(PRESETS, PRESET_WEIGHTS)[0]
        else:
            text = texts[done % len(texts)]  # past the last, a text already seen comes back
        layer, head = rng.choice(LAYERS), rng.choice(HEADS)
        attention = [text, model, kind, layer, head, 1, [], False, "none (the correct pass)"]
        click("attention", "/attention", *attention)
        other = [(lay, h) for lay in LAYERS for h in HEADS if (lay, h) != (layer, head)]
        layer, head = rng.choice(other)
        attention = [text, model, kind, layer, head, 1, [], False, "none (the correct pass)"]
        click("layer/head", "/attention", *attention)
        settings = [text, model, "greedy", 1.0, 0, 1.0, 3, 40, 0, layer, head, False]
        click("reset", "/generate_reset", *settings)
        for _ in range(3):
            click("step", "/generate_step", *settings)
        click("inside", "/inside_layer", text, model, stack, layer, head, 1, False)
        click("tokenize", "/tokenize", text, *TOKENIZE)
        if rng.random() < long_every:
            long_text = LONG_TEXT if texts is None else f"{text} {LONG_TEXT}"
            scale = [long_text, model, "first", layer, head, 0, 32, 3, -1, False]
            click("long view", "/attention_scale", *scale)
        done += 1
    client.close()  # the student leaves: the page's heartbeat ends, as a closed tab's does


def prepare(url: str, model: str, architecture: str) -> None:
    """The lecturer's preparation before class: each of the lecture's presets opened once
    (Attention and Inside a layer at the first layer and head, Generate's Reset and three
    Steps, Tokenize), and the long view once; then the lecturer's page is closed."""

    kind, stack = KIND.get(architecture, KIND["encoder-decoder"])
    client = student_client(url, 300)
    for prompt in PRESETS:
        settings = [prompt, model, "greedy", 1.0, 0, 1.0, 3, 40, 0, 1, 1, False]
        client.predict(*settings, api_name="/generate_reset")
        for _ in range(3):
            client.predict(*settings, api_name="/generate_step")
        attention = [prompt, model, kind, 1, 1, 1, [], False, "none (the correct pass)"]
        client.predict(*attention, api_name="/attention")
        client.predict(prompt, model, stack, 1, 1, 1, False, api_name="/inside_layer")
        client.predict(prompt, *TOKENIZE, api_name="/tokenize")
    scale = [LONG_TEXT, model, "first", 1, 1, 0, 32, 3, -1, False]
    client.predict(*scale, api_name="/attention_scale")
    client.close()


def settled(
    server: Server, sessions: int = 0, patience: float = 120.0, idle_for: float = 0.0
) -> dict[str, Any]:
    """The server's report once at most ``sessions`` sessions are held (the others' pages
    closed and their state freed; gradio notices a closed page when its heartbeat ends) and it
    has been idle long enough to give freed memory back, or after ``patience`` seconds; not
    before ``idle_for`` seconds (:func:`after_class_s`: the caches forget the class's texts)."""
    from ui.serving.memory import QUIET_SECONDS

    time.sleep(idle_for)
    deadline = time.monotonic() + patience
    while True:
        time.sleep(QUIET_SECONDS + 1.0)  # idle: the app gives freed memory back (memory.py)
        report = server.ask("report")
        if report.get("sessions", 0) <= sessions or time.monotonic() > deadline:
            return report


def after_class_s() -> float:
    """Seconds a server is left idle after a class before its memory is read "after": its
    sessions freed, and the analyses and views of the class's own sentences forgotten."""
    from ui.demo import SESSION_SWEEP_S
    from ui.serving.limits import CACHE_UNUSED_S
    from ui.serving.sessions import SESSION_CLOSED_S

    return max(SESSION_CLOSED_S, CACHE_UNUSED_S) + SESSION_SWEEP_S + 5.0


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0–1) of ``values``, nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rss_mb(pid: int | None = None) -> float:
    """Resident memory in MB of ``pid`` (this process when None), from Linux's /proc."""
    path = f"/proc/{pid or 'self'}/status"
    try:
        with open(path, encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def gpu_mb() -> tuple[float, float] | None:
    """(allocated, peak allocated) MB of this process on CUDA, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20


@dataclass
class Result:
    """One class size's figures."""

    students: int
    seconds: float
    record: Record
    rss_before: float
    rss_after: float
    gpu: tuple[float, float] | None
    handler: dict[str, list[float]]
    serialise: dict[str, list[float]]
    wait: dict[str, list[float]]
    process: dict[str, list[float]]
    shared: dict[str, int] | None = None
    cpu: tuple[float, float] = (float("nan"), float("nan"))  # CPU seconds: server, clients
    # What the server held before and after: sessions, and MB of its caches.
    held_before: dict[str, Any] = field(default_factory=dict)
    held_after: dict[str, Any] = field(default_factory=dict)
    load: tuple[float, ...] = ()  # the machine's load average (1, 5, 15 min) at the end
    peak: float = float("nan")  # the server's memory at its highest during the class (MB)
    own: int = 0  # the students who typed their own sentences (the others opened presets)
    alone: dict[str, list[float]] = field(default_factory=dict)  # one student's round trips

    def requests(self) -> int:
        return sum(len(v) for v in self.record.trips.values()) + self.errors()

    def errors(self) -> int:
        return sum(len(v) for v in self.record.errors.values())

    def worst_interactive_p95(self) -> float:
        p95s = [percentile(self.record.trips.get(a, []), 0.95) for a in INTERACTIVE]
        known = [p for p in p95s if p == p]
        return max(known) if known else float("nan")


def class_texts(
    pool: TextPool, students: int, seconds: float, seed: int, own_share: float = OWN_SHARE
) -> list[list[str] | None]:
    """Each student's texts for a class of ``seconds``: new ones from ``pool`` for the
    ``own_share`` who type their own sentences, None (the lecturer's presets) for the others,
    who are chosen with ``seed``."""
    presets = set(sample(range(students), round(students * (1 - own_share)), seed))
    each = int(seconds / 8) + 2  # a round is 8 clicks or more, 1 s of thought after each
    drawn = pool.draw(students, each)
    return [None if i in presets else drawn[i] for i in range(students)]


def alone(
    url: str, model: str, architecture: str, texts: list[str], rounds: int, seed: int
) -> Record:
    """One student alone on the server: ``rounds`` rounds of the lesson on their own
    ``texts``, the long view in each; their round trips."""
    record = Record()
    lesson(url, model, architecture, record, threading.Event(), seed, texts, long_every=1.0,
           rounds=rounds)  # fmt: skip
    return record


class Sampler:
    """A server's memory read every ``every`` seconds in a thread, until ``stop``: its peak."""

    def __init__(self, read: Callable[[], float], every: float = 0.5) -> None:
        self.peak = float("nan")
        self._read, self._every, self._stop = read, every, threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            value = self._read()
            if value == value and not value <= self.peak:  # the first reading, or higher
                self.peak = value
            self._stop.wait(self._every)

    def stop(self) -> float:
        """Stop sampling; the peak in MB (NaN when nothing could be read)."""
        self._stop.set()
        self._thread.join()
        return self.peak


def run_class(
    url: str,
    students: int,
    seconds: float,
    model: str,
    architecture: str,
    seed: int,
    server: Server | None,
    pid: int | None = None,
    texts: list[list[str] | None] | None = None,
    app: AppProcess | None = None,
) -> Result:
    """``students`` students on ``url`` for ``seconds``, student ``i`` on ``texts[i]`` (the
    presets when None or absent); their figures: the server's side from ``server`` when it
    was started here (its memory once it has freed the students' sessions), from ``app`` when
    it runs as a subprocess, its memory from ``pid`` otherwise (``app``'s and ``pid``'s as soon
    as the students have left)."""
    texts = texts or [None] * students
    if server:
        before = settled(server)
        read: Callable[[], float] = functools.partial(tree_rss_mb, server.process.pid)
    else:
        read = app.rss_mb if app else functools.partial(tree_rss_mb, pid) if pid else _nan
        before = {"rss": read(), **({"cpu": app.cpu_s()} if app else {})}
    clients_cpu = time.process_time()
    if server:
        server.ask("reset")
    record, stop = Record(), threading.Event()
    threads = [
        threading.Thread(
            target=lesson,
            args=(url, model, architecture, record, stop, seed * 1000 + i, texts[i]),
            name=f"student-{i}",
            daemon=True,
        )
        for i in range(students)
    ]
    sampler = Sampler(read)
    start = time.perf_counter()
    for thread in threads:
        thread.start()
        time.sleep(min(0.2, 4.0 / max(1, students)))  # a class opens the link within seconds
    stop.wait(max(0.0, seconds - (time.perf_counter() - start)))
    stop.set()
    for thread in threads:
        thread.join(timeout=180)
    elapsed = time.perf_counter() - start
    clients_cpu = time.process_time() - clients_cpu
    peak = sampler.stop()
    # The students have left (each closed its client): memory once the server has freed them.
    idle = {"rss": read(), **({"cpu": app.cpu_s()} if app else {})} if not server else {}
    after = settled(server, idle_for=after_class_s()) if server else idle
    server_cpu = after["cpu"] - before["cpu"] if "cpu" in after else float("nan")
    return Result(
        students,
        elapsed,
        record,
        before["rss"],
        after["rss"],
        after.get("gpu"),
        after.get("handler", {}),
        after.get("serialise", {}),
        after.get("wait", {}),
        after.get("process", {}),
        after.get("shared"),
        (server_cpu, clients_cpu),
        {"sessions": before.get("sessions"), **before.get("held_mb", {})},
        {"sessions": after.get("sessions"), **after.get("held_mb", {})},
        os.getloadavg(),
        peak=peak,
        own=sum(t is not None for t in texts),
    )


def _nan() -> float:
    return float("nan")


def report(result: Result) -> list[str]:
    """The table of one class size, as printed lines (Markdown). The server's columns are
    medians: the wait in gradio's queue, our handler, gradio's pre- and post-processing, and
    what is left of the round trip (sending the answer, the client's own work). The two
    Attention clicks share an endpoint, and so its server-side medians (their rest is left
    blank: a median of both would not be either's)."""
    lines = [
        f"### {result.students} students ({result.own} on their own sentences, "
        f"{result.students - result.own} on the presets), {result.seconds:.0f} s",
        "",
        "| action | requests | alone p50 (s) | p50 (s) | p95 (s) | max (s) | "
        "queue wait p50 / p95 (s) | handler p50 / p95 (s) | pre+post p50 (s) | rest p50 (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def median(table: dict[str, list[float]], name: str) -> float | None:
        return statistics.median(table[name]) if table.get(name) else None

    def cell(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}"

    for action in (*INTERACTIVE, *COSTLY):
        trips = result.record.trips.get(action, [])
        if not trips:
            if result.alone.get(action):  # the long view, which no student of the class opened
                lines.append(f"| {action} | 0 | {cell(_p50(result.alone[action]))} |"
                             + " – |" * 7)  # fmt: skip
            continue
        name = ENDPOINT[action]
        wait, process = median(result.wait, name), median(result.process, name)
        rest = None
        shared = sum(e == name for e in ENDPOINT.values()) > 1  # its times are both actions'
        if wait is not None and process is not None and not shared:
            rest = statistics.median(trips) - wait - process
        waits, handled = result.wait.get(name) or [], result.handler.get(name) or []
        lines.append(
            f"| {action} | {len(trips)} | {cell(_p50(result.alone.get(action)))} | "
            f"{percentile(trips, 0.5):.3f} | "
            f"{percentile(trips, 0.95):.3f} | {max(trips):.3f} | {cell(wait)} / "
            f"{cell(percentile(waits, 0.95) if waits else None)} | "
            f"{cell(median(result.handler, name))} / "
            f"{cell(percentile(handled, 0.95) if handled else None)} | "
            f"{cell(median(result.serialise, name))} | "
            f"{cell(rest)} |"
        )
    errors = result.errors()
    gpu = result.gpu
    lines += [
        "",
        f"Requests: {result.requests()} ({result.requests() / result.seconds:.1f}/s), "
        f"errors: {errors}; "
        + (
            f"server RSS {result.rss_before:.0f} MB before the class (the lecturer's "
            f"preparation done), {result.peak:.0f} MB at its highest during it, "
            f"{result.rss_after:.0f} MB after the students left "
            f"({100 * (result.rss_after / result.rss_before - 1):+.1f} %)"
            if result.rss_before == result.rss_before
            else "server memory unknown (--pid names a running app's process)"
        )
        + (f"; GPU memory {gpu[0]:.0f} MB allocated, {gpu[1]:.0f} MB peak" if gpu else "")
        + ".",
    ]

    def held(what: dict[str, Any]) -> str:
        return ", ".join(
            f"{k} {v:.0f} MB" if isinstance(v, float) else f"{k} {v}" for k, v in what.items()
        )

    if result.held_before.get("sessions") is not None:
        lines.append(f"Held before: {held(result.held_before)}; after: {held(result.held_after)}.")
    server_cpu = "unknown" if result.cpu[0] != result.cpu[0] else f"{result.cpu[0]:.0f} s"
    lines.append(
        f"CPU time: the server {server_cpu}, the students' clients (this process) "
        f"{result.cpu[1]:.0f} s, in {result.seconds:.0f} s on {os.cpu_count()} cores; "
        "load average at the end " + " / ".join(f"{x:.1f}" for x in result.load) + "."
    )
    if result.shared:
        lines.append(
            f"Shared views: {result.shared['hits']} served from the cache, "
            f"{result.shared['computed']} computed, {result.shared['held']} held."
        )
    for action, messages in result.record.errors.items():
        lines.append(f"- {action}: {len(messages)} error(s), first: {messages[0]}")
    return lines


def _p50(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def serve_here(port: int, device: str, model: str) -> None:
    """The server side, in its own process (so that the students' clients do not share its
    interpreter): the app built and launched on ``port``, instrumented, the model read; then
    commands on stdin, one a line: ``reset`` (forget the times so far), ``report`` (after a
    garbage collection and ``malloc_trim``, as the idle app gives memory back: one JSON
    line: handler and pre/post times per endpoint, RSS, GPU memory, shared views), ``quit``."""
    import json
    import sys

    import app as visualiser
    from ui.serving.memory import glibc_trim, return_memory_when_idle

    return_memory_when_idle()
    trim = glibc_trim()
    threads = os.environ.get("CLASSROOM_TORCH_THREADS")
    if threads:  # to compare how many threads each request's torch work should use
        import torch

        torch.set_num_threads(int(threads))
    demo = visualiser.build_demo(device, (), preload=False)
    times = ServerTimes()
    times.install(demo)
    from ui.demo import launch_options

    demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
        **launch_options(),
    )  # fmt: skip
    registry = demo.model_registry
    cold = rss_mb()  # the app started, nothing read or opened yet
    checkpoint = registry.checkpoint(model, None)  # read before the class comes
    print(
        json.dumps(
            {
                "url": f"http://127.0.0.1:{port}/",
                "architecture": checkpoint.config.architecture,
                "device": str(registry.device),
                "cold": cold,
                "loaded": rss_mb(),
            }
        ),
        flush=True,
    )
    from ui.links.share import encode_view

    lecturer = ("", "")  # the room's code and secret, once "room" opened it
    asking: dict[str, Any] = {}  # the room that "exercise" opened
    kind = ""
    for line in sys.stdin:
        command = line.strip()
        if command == "reset":
            times.clear()
            print("{}", flush=True)
        elif command == "report":
            import gc

            gc.collect()
            if trim is not None:  # as the idle app's trimmer does (ui/serving/memory.py)
                trim()
            shared = getattr(registry, "shared_views", None)
            with times.lock:
                out = {
                    "handler": dict(times.handler),
                    "serialise": dict(times.serialise),
                    "wait": dict(times.wait),
                    "process": dict(times.process),
                    "rss": rss_mb(),
                    "cpu": time.process_time(),
                    "gpu": gpu_mb(),
                    "shared": None
                    if shared is None
                    else {"hits": shared.hits, "computed": shared.computed, "held": len(shared)},
                    "sessions": len(demo.state_holder.session_data),
                    "held_mb": {
                        "analyses": sum(n for _, n in registry._analyses.values()) / 2**20,
                        "shared views": 0.0 if shared is None else shared.bytes / 2**20,
                    },
                }
            print(json.dumps(out), flush=True)
        elif command.startswith("room"):  # the lecturer hosts a room: "room KIND"
            room = demo.follow_me.rooms.open()
            lecturer = (room.code, room.secret)
            kind = command.split(" ", 1)[1]
            print(json.dumps({"code": room.code, **_follow_events(demo)}), flush=True)
        elif command.startswith("publish "):  # the lecturer's page sends its view
            layer, head = command.split()[1:3]
            values = {"sentences": PRESETS[0], "model": model, "kind": kind}
            query = encode_view(
                demo.views.tabs["attention"], {**values, "layer": int(layer), "head": int(head)}
            )
            version = demo.follow_me.rooms.publish(*lecturer, query)
            print(json.dumps({"version": version, "at": time.time()}), flush=True)
        elif command.startswith("exercise ") or command == "reveal":  # a room's question
            from benchmarks.classroom_exercise import serve_exercise

            print(json.dumps(serve_exercise(demo, registry, command, asking)), flush=True)
        elif command == "quit":
            break
    demo.close()


def _follow_events(demo: Any) -> dict[str, Any]:
    """The page's events a follower makes: Follow (its index), the poll and the follow-ups
    that run after a poll brought a view (each its index and its inputs' ids)."""
    follow_me = demo.follow_me

    def event(fn: Any) -> dict[str, Any]:
        return {
            "index": fn._id,
            "inputs": [c._id for c in fn.inputs],
            "outputs": [c._id for c in fn.outputs],
        }

    poll = next(
        fn for fn in demo.fns.values() if fn.fn is not None and fn.fn.__name__ == "poll_tabs"
    )
    polled = follow_me.polled["attention"]  # the lecturer's view is on the Attention tab
    at = next(fn for fn in demo.fns.values() if (polled._id, "change") in map(tuple, fn.targets))
    follow_ups = [event(at)]
    while True:
        after = next((fn for fn in demo.fns.values() if fn.trigger_after == at._id), None)
        if after is None:
            break
        if after.fn is not None:
            follow_ups.append(event(after))
        at = after
    return {"follow": _fn_index(demo, "start_following"), "poll": event(poll), "box": polled._id,
            "follow_ups": follow_ups}  # fmt: skip


def _fn_index(demo: Any, name: str) -> int:
    """The index of the event whose handler is called ``name`` (the page's private events
    have no API name)."""
    return next(i for i, fn in demo.fns.items() if getattr(fn.fn, "__name__", "") == name)


class Server(ServedApp):
    """The app in a child process (``serve_here``), driven through its stdin and stdout."""

    def __init__(self, device: str, model: str) -> None:
        import sys

        from ui.testing import free_port

        super().__init__(
            [sys.executable, "-m", "benchmarks.classroom", "--serve", str(free_port()),
             "--device", device, "--model", model],
        )  # fmt: skip
        ready = self.ready
        self.url, self.architecture, self.device = (
            ready["url"],
            ready["architecture"],
            ready["device"],
        )
        self.cold, self.loaded = ready["cold"], ready["loaded"]


# -- follow me ---------------------------------------------------------------------------------


@dataclass
class FollowRecord:
    """Per change of the lecturer's view: when it was published (wall clock, seconds) and
    its layer and head; per follower and change, when its poll brought the view drawn and when
    the page's follow-ups after it were done."""

    changes: list[tuple[float, int, int]] = field(default_factory=list)
    drawn: list[float] = field(default_factory=list)  # seconds after the change
    finished: list[float] = field(default_factory=list)
    without_figure: int = 0  # polls that found a change but brought no figure
    joined: list[float] = field(default_factory=list)  # seconds to open the app and follow
    polls: int = 0
    requests: int = 0  # every request the followers' pages made, the polls included
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _plain(http: Any, url: str, fn_index: int, session: str, data: list[Any]) -> dict:
    """One call of a page's event that is not queued (the Follow button, the poll), a plain
    request as the page sends it; its ``output``."""
    answer = http.post(
        f"{url}gradio_api/run/predict",
        json={"data": data, "fn_index": fn_index, "session_hash": session},
    )
    answer.raise_for_status()
    return dict(answer.json())


def _queued(http: Any, url: str, fn_index: int, session: str, data: list[Any]) -> dict:
    """One queued call of a page's event, as the page makes it: join gradio's queue, read the
    session's event stream until this call completes; its ``output``."""
    import json

    joined = http.post(
        f"{url}gradio_api/queue/join",
        json={"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None},
    )
    joined.raise_for_status()
    event = joined.json()["event_id"]
    with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}) as s:
        for line in s.iter_lines():
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("event_id") == event and message.get("msg") == "process_completed":
                if not message.get("success"):
                    raise RuntimeError(str(message.get("output"))[:200])
                return message["output"]
    raise RuntimeError("the event stream ended before the call completed")


def _has_figure(output: dict) -> bool:
    """Whether an event's answer draws a figure (a ``gr.Plot``'s value)."""
    return any(isinstance(v, dict) and v.get("type") == "plotly" for v in output.get("data", []))


def follower(
    url: str,
    code: str,
    room: dict[str, Any],
    defaults: dict[int, Any],
    record: FollowRecord,
    stop: threading.Event,
    seed: int,
) -> None:
    """One follower's page until ``stop``: open the app, follow ``code`` (the page's Follow
    button), poll every ``POLL_S`` as its timer does, sending the page's controls (their values
    as the page opens, ``defaults``); when a poll found the room moved (its answer draws the
    view), run the page's follow-ups of a drawn view. Then leave (close the page)."""
    import httpx

    from ui.links.rooms import POLL_S

    page = PageValues(defaults)

    rng = random.Random(seed)
    start = time.perf_counter()
    try:
        http = httpx.Client(timeout=120, verify=url.startswith("https"))
        # The page's config and its heartbeat (as patient as a browser opening the page).
        client = student_client(url, 120)
        session = client.session_hash
    except Exception as error:
        with record.lock:
            record.errors.append(f"open: {type(error).__name__}: {str(error)[:200]}")
        return
    try:
        # The Follow button's event: not queued; its state is kept in this session.
        _plain(http, url, room["follow"], session, [code])
        with record.lock:
            record.joined.append(time.perf_counter() - start)
            record.requests += 1
    except Exception as error:
        with record.lock:
            record.errors.append(f"follow: {type(error).__name__}: {str(error)[:200]}")
        client.close()
        return
    stop.wait(rng.uniform(0, POLL_S))  # the pages opened at different moments
    joined = False  # the view found on joining is not a change seen
    while not stop.is_set():
        try:
            poll = room["poll"]
            output = _plain(http, url, poll["index"], session, page.inputs(poll))
            page.show(poll, output)
            now = time.time()
            with record.lock:
                record.polls += 1
                record.requests += 1
                change = next((c for c in reversed(record.changes) if c[0] <= now), None)
            box = output["data"][poll["outputs"].index(room["box"])]
            moved = isinstance(box, str) and bool(box) and change is not None
            if moved:
                # As the page runs them once a poll found a change: the tab's draw (the view
                # comes with it), then its follow-ups.
                draw, *rest = room["follow_ups"]
                answer = _queued(http, url, draw["index"], session, page.inputs(draw))
                page.show(draw, answer)
                drawn = time.time()
                for follow_up in rest:
                    page.show(
                        follow_up,
                        _queued(http, url, follow_up["index"], session, page.inputs(follow_up)),
                    )
                with record.lock:
                    record.requests += len(room["follow_ups"])
            if moved and joined:
                with record.lock:
                    record.drawn.append(drawn - change[0])
                    record.finished.append(time.time() - change[0])
                    record.without_figure += not _has_figure(answer)
            joined = joined or moved
        except Exception as error:
            with record.lock:
                record.errors.append(f"{type(error).__name__}: {str(error)[:200]}")
        stop.wait(POLL_S)
    client.close()  # the student leaves


class PageValues(dict[int, Any]):
    """A page's component values (component id → value), as its events' answers set them:
    what each of its events sends."""

    def inputs(self, event: dict[str, Any]) -> list[Any]:
        """The values ``event`` sends, in the order of its inputs."""
        return [self.get(i) for i in event["inputs"]]

    def show(self, event: dict[str, Any], output: dict[str, Any]) -> None:
        """Set the values ``event``'s ``output`` gives its outputs (an update's value; not a
        figure, which the page only draws)."""
        for i, value in zip(event["outputs"], output.get("data", []), strict=False):
            if isinstance(value, dict) and value.get("__type__") == "update":
                if "value" in value:
                    self[i] = value["value"]
            elif not (isinstance(value, dict) and value.get("type") == "plotly"):
                self[i] = value


def page_defaults(url: str) -> dict[int, Any]:
    """Every component's value as a page opens (component id → value), from the app's
    config: what a follower's page sends with its poll."""
    import httpx

    config = httpx.get(f"{url}config", timeout=120).json()
    values = {}
    for component in config["components"]:
        props = component.get("props", {})
        value, choices = props.get("value"), props.get("choices")
        if choices:
            # A menu's value is one of its choices, as the page's own refit makes it on load.
            offered = [c[1] if isinstance(c, list | tuple) else c for c in choices]
            if isinstance(value, list):
                value = [v for v in value if v in offered]
            elif value not in offered:
                value = offered[0]
        values[component["id"]] = value
    return values


def run_follow(
    server: Server,
    followers: int,
    seconds: float,
    model: str,
    architecture: str,
    stop_every: float,
    seed: int,
) -> list[str]:
    """One lecturer and ``followers`` followers for ``seconds``; the report's lines."""

    kind = KIND.get(architecture, KIND["encoder-decoder"])[0]
    sentence = PRESETS[0]
    room = server.ask(f"room {kind}")
    defaults = page_defaults(server.url)
    record, stop = FollowRecord(), threading.Event()
    rng = random.Random(seed)
    lecturer = student_client(server.url, 300)

    def change(layer: int, head: int) -> None:
        # The lecturer's page draws the view (its own request), then publishes it.
        attention = [sentence, model, kind, layer, head, 1, [], False, "none (the correct pass)"]
        lecturer.predict(*attention, api_name="/attention")
        published = server.ask(f"publish {layer} {head}")
        with record.lock:
            record.changes.append((published["at"], layer, head))

    change(1, 1)
    before = settled(server, sessions=1)  # the lecturer's page
    threads = [
        threading.Thread(
            target=follower,
            args=(server.url, room["code"], room, defaults, record, stop, seed * 1000 + i),
            name=f"follower-{i}",
            daemon=True,
        )
        for i in range(followers)
    ]
    start, clients_cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
        time.sleep(min(0.2, 20.0 / max(1, followers)))  # a class opens the link within 20 s
    stop.wait(stop_every)
    while time.perf_counter() - start < seconds:
        change(rng.choice(LAYERS[:3]), rng.choice(HEADS))  # layers every model has
        stop.wait(stop_every)
    stop.set()
    for thread in threads:
        thread.join(timeout=180)
    elapsed, clients_cpu = time.perf_counter() - start, time.process_time() - clients_cpu
    lecturer.close()
    after = settled(server, idle_for=after_class_s())  # the followers and lecturer have left

    def row(what: str, values: list[float]) -> str:
        return (
            f"| {what} | {len(values)} | {percentile(values, 0.5):.3f} | "
            f"{percentile(values, 0.95):.3f} | {max(values, default=float('nan')):.3f} |"
        )

    changes = len(record.changes) - 1
    lines = [
        f"### Follow me: 1 lecturer, {followers} followers, {elapsed:.0f} s, "
        f"{changes} changes (one every {stop_every:g} s)",
        "",
        "| from the lecturer's change to a follower's page | count | p50 (s) | p95 (s) | max (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
        row("its view drawn (the poll found the change, the tab's draw answered)", record.drawn),
        *(
            [row("the page's follow-ups done (no model work)", record.finished)]
            if len(room["follow_ups"]) > 1
            else []
        ),
        "",
        f"Joining (the app opened, Follow pressed), {len(record.joined)} of {followers}: "
        f"p50 {percentile(record.joined, 0.5):.1f} s, max {max(record.joined, default=0):.1f} s, "
        f"the followers arriving {min(0.2, 20.0 / max(1, followers)) * followers:.0f} s apart "
        "from first to last.",
        f"Polls: {record.polls} ({record.polls / elapsed:.1f}/s); the followers' requests in "
        f"all: {record.requests} ({record.requests / elapsed:.1f}/s, "
        f"{len(room['follow_ups'])} queued after each change seen, the tab's draw first); changes "
        f"seen without a figure: {record.without_figure}; errors: {len(record.errors)}.",
        f"Server RSS {before['rss']:.0f} MB before (the lecturer's page open, its view drawn), "
        f"{after['rss']:.0f} MB after everyone left "
        f"({100 * (after['rss'] / before['rss'] - 1):+.1f} %); sessions held after: "
        f"{after.get('sessions')}; CPU time: the server {after['cpu'] - before['cpu']:.0f} s, "
        f"the followers' clients (this process) {clients_cpu:.0f} s, in {elapsed:.0f} s on "
        f"{os.cpu_count()} cores; load average at the end "
        + " / ".join(f"{x:.1f}" for x in os.getloadavg())
        + ".",
    ]  # fmt: skip
    kinds: dict[str, list[str]] = defaultdict(list)
    for error in record.errors:
        kind_ = error.split(":")[0]
        kinds[kind_ if kind_ in ("open", "follow") else "poll"].append(error)
    for kind_, errors in kinds.items():
        lines.append(f"- {kind_}: {len(errors)} error(s), first: {errors[0]}")
    return lines


def main(argv: list[str] | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=15)
    parser.add_argument("--minutes", type=float, default=1.0, help="per class size")
    parser.add_argument("--sweep", default="", help="class sizes to run in turn, e.g. 5,10,15")
    parser.add_argument("--url", default=None, help="a running app (else one is started here)")
    parser.add_argument("--pid", type=int, default=None, help="the running app's process id")
    parser.add_argument("--model", default=SMOLLM2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--target", type=float, default=1.0, help="interactive p95 bound (s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--own-share", type=float, default=OWN_SHARE,
        help="of the class, the share who type their own sentences (the others open presets)",
    )  # fmt: skip
    parser.add_argument(
        "--alone-rounds", type=int, default=2,
        help="rounds of the lesson one student runs alone before the class",
    )  # fmt: skip
    parser.add_argument(
        "--against", default=None, metavar="REV",
        help="also run the same lesson on commit REV (a temporary git worktree), alternated",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="with --against: classes a side")
    parser.add_argument(
        "--args-here", default="", help="with --against: this checkout's extra app.py arguments"
    )
    parser.add_argument(
        "--args-against", default="", help="with --against: REV's extra app.py arguments"
    )
    parser.add_argument(
        "--port", type=int, default=0,
        help="with --against: this checkout's app's port (REV's the next); free ports if 0",
    )  # fmt: skip
    parser.add_argument("--follow", type=int, default=0, help="followers of one lecturer")
    parser.add_argument("--stop-every", type=float, default=8.0, help="s between changes")
    parser.add_argument("--exercise", type=int, default=0, help="students answering a question")
    parser.add_argument("--spread", type=float, default=10.0, help="s over which they answer")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:  # the child process that serves the app
        serve_here(args.serve, args.device, args.model)
        return []
    if args.exercise:
        from benchmarks.classroom_exercise import run_exercise

        # The question is about a bundled model: SmolLM2 need not be read.
        model = "translate" if args.model == SMOLLM2 else args.model
        lecture = Server(args.device, model)
        try:
            print(
                f"classroom, exercise: {platform.processor() or platform.machine()}, "
                f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; load average at "
                "the start " + " / ".join(f"{x:.1f}" for x in os.getloadavg()),
                flush=True,
            )
            lines = run_exercise(lecture, args.exercise, args.spread, args.seed)
            print("\n".join(lines), flush=True)
        finally:
            lecture.close()
        return []
    if args.follow:
        lecture = Server(args.device, args.model)
        try:
            print(
                f"classroom, follow me: {args.model} on {lecture.device}; "
                f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
                f"{time.strftime('%Y-%m-%d %H:%M')}",
                flush=True,
            )
            lines = run_follow(
                lecture, args.follow, args.minutes * 60, args.model, lecture.architecture,
                args.stop_every, args.seed,
            )  # fmt: skip
            print("\n".join(lines), flush=True)
        finally:
            lecture.close()
        return []
    if not 0.0 <= args.own_share <= 1.0:
        parser.error("--own-share is a share of the class, between 0 and 1")
    if args.against:
        if args.url or args.sweep:
            parser.error("--against launches both apps itself and runs one class size "
                         "(--students): leave out --url and --sweep")  # fmt: skip
        if args.rounds < 1 or args.students < 1:
            parser.error("--rounds and --students are at least 1")
        from benchmarks.classroom_sides import run_against

        print("\n".join(run_against(args)), flush=True)
        return []
    sizes = [int(n) for n in args.sweep.split(",") if n.strip()] or [args.students]

    server = None if args.url else Server(args.device, args.model)
    url = args.url or server.url  # type: ignore[union-attr]
    architecture = server.architecture if server else "decoder-only"
    device = server.device if server else f"remote ({args.url})"
    results: list[Result] = []
    pool = TextPool(args.seed)
    try:
        # The lecturer's preparation: the model read, the lecture's presets opened once.
        prepare(url, args.model, architecture)
        print(
            f"classroom: {args.model} on {device}; {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores; {args.minutes:g} min per class size; "
            f"{time.strftime('%Y-%m-%d %H:%M')}; load average at the start "
            + " / ".join(f"{x:.1f}" for x in os.getloadavg()),
            flush=True,
        )
        if server:
            prepared = settled(server)
            print(
                f"Server RSS: {server.cold:.0f} MB cold (the app started, nothing read), "
                f"{server.loaded:.0f} MB with {args.model} read, {prepared['rss']:.0f} MB "
                "prepared (the lecture's presets opened once, as a lecturer does before "
                "class: the figure each class's 'before' starts from).\n",
                flush=True,
            )
        # One student alone first, on sentences of their own: what a click costs unhurried.
        alone_trips = alone(
            url, args.model, architecture, pool.draw(1, args.alone_rounds)[0],
            args.alone_rounds, args.seed,
        ).trips  # fmt: skip
        for n in sizes:
            texts = class_texts(pool, n, args.minutes * 60, args.seed, args.own_share)
            result = run_class(
                url, n, args.minutes * 60, args.model, architecture, args.seed, server, args.pid,
                texts=texts,
            )  # fmt: skip
            result.alone = dict(alone_trips)
            results.append(result)
            print("\n".join(report(result)) + "\n", flush=True)
    finally:
        if server:
            server.close()
    within = [
        r.students for r in results if r.errors() == 0 and r.worst_interactive_p95() <= args.target
    ]
    print(
        f"Largest class with every interactive action's p95 ≤ {args.target:g} s and no error: "
        + (str(max(within)) if within else "none of " + ", ".join(map(str, sizes)))
        + "; load average at the end "
        + " / ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    return results


if __name__ == "__main__":
    main()
