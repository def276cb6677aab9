"""A room answers an exercise: ``python -m benchmarks.classroom --exercise 100``.

The lecturer's room (opened in the server's process, as the lecturer's page hosts it) is asked
an exercise of the bank; N students, each its own HTTP client, answer it through
``/exercise_answer`` at random moments within ``--spread`` seconds (10 s: a class that thinks,
then clicks), each also looking at the room every two seconds as a student's page does (through
``/exercise_tally``: one plain request, as the page's look is). The lecturer's page reads the count every ``LECTURER_TICK_S`` (as the
page's timer does, through ``/exercise_tally``). It prints when the lecturer's count was first
complete after the last answer was answered, each answer's round trip (p50, p95, max), the
errors, and the load average; then the reveal's tally and the CSV's rows."""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ui.tabs.exercises import LECTURER_TICK_S

EXERCISE_ID = "attention-translate-cat"  # a bundled model's question (the bank's first)
STUDENT_LOOK_S = 2.0  # how often a student's page looks at the room


def call(http: Any, url: str, api: str, data: list[Any], session: str | None = None) -> Any:
    """One call of a public endpoint as a client that is not a page makes it: the exercises'
    endpoints are not queued, so one plain request (``/gradio_api/run/<api>``), with the
    client's ``session`` as ``gradio_client`` sends it (gradio builds a new session, a copy of
    every component's config, for a request without one: 0.25 s of this app on a busy CPU)."""
    body: dict[str, Any] = {"data": data}
    if session is not None:
        body["session_hash"] = session
    answered = http.post(f"{url}gradio_api/run/{api}", json=body)
    answered.raise_for_status()
    return answered.json()["data"][0]


@dataclass
class ExerciseRecord:
    """When each answer was answered (wall clock), its round trip, the looks, the errors."""

    answered: list[float] = field(default_factory=list)
    trips: list[float] = field(default_factory=list)
    looks: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def student(
    url: str,
    code: str,
    choices: list[str],
    delay: float,
    index: int,
    record: ExerciseRecord,
    joined: threading.Barrier,
    stop: threading.Event,
) -> None:
    """One student: opens the page, then (once the class has) looks at the room every two
    seconds and answers after ``delay`` seconds."""
    import httpx

    rng = random.Random(index)
    session = f"exercise-student-{index}-{rng.getrandbits(32):08x}"
    answered = False
    with httpx.Client(timeout=60) as http:
        # The page was open before the question: its session exists (gradio makes one on a
        # session's first request, a copy of every component's config).
        try:
            call(http, url, "exercise_tally", [code], session)
        except Exception as error:
            with record.lock:
                record.errors.append(f"join: {error}"[:200])
        joined.wait()
        started = time.perf_counter()
        next_look = started + rng.uniform(0, STUDENT_LOOK_S)
        while not stop.is_set():
            now = time.perf_counter()
            if not answered and now - started >= delay:
                answered = True
                try:
                    sent = time.perf_counter()
                    found = call(http, url, "exercise_answer", [code, f"student-{index}",
                                 rng.choice(choices)], session)  # fmt: skip
                    if "error" in found:
                        raise RuntimeError(found["error"])
                    with record.lock:
                        record.trips.append(time.perf_counter() - sent)
                        record.answered.append(time.time())
                except Exception as error:
                    with record.lock:
                        record.errors.append(f"answer: {error}"[:200])
            elif now >= next_look:
                next_look += STUDENT_LOOK_S
                try:
                    call(http, url, "exercise_tally", [code], session)
                    with record.lock:
                        record.looks += 1
                except Exception as error:
                    with record.lock:
                        record.errors.append(f"look: {error}"[:200])
            stop.wait(0.05)


def run_exercise(server: Any, students: int, spread: float, seed: int) -> list[str]:
    """One lecturer's question, ``students`` answers within ``spread`` seconds; the report."""
    import httpx

    room = server.ask(f"exercise {EXERCISE_ID}")
    code, choices = room["code"], room["choices"]
    record, stop = ExerciseRecord(), threading.Event()
    joined = threading.Barrier(students + 1)
    rng = random.Random(seed)
    threads = [
        threading.Thread(
            target=student,
            args=(server.url, code, choices, rng.uniform(0, spread), i, record, joined, stop),
            daemon=True,
        )
        for i in range(students)
    ]
    complete_at = None
    ticks: list[float] = []
    opening = time.perf_counter()
    for thread in threads:
        thread.start()
    joined.wait()  # every page open: the class starts answering
    start = time.perf_counter()
    opened_s = start - opening
    with httpx.Client(timeout=60) as lecturer:
        deadline = start + spread + 60
        while time.perf_counter() < deadline:
            tick = time.perf_counter()
            try:
                tally = call(lecturer, server.url, "exercise_tally", [code], "exercise-lecturer")
            except Exception as error:
                record.errors.append(f"lecturer: {error}"[:200])
                tally = {}
            ticks.append(time.perf_counter() - tick)
            if tally.get("total") == students:
                complete_at = time.time()
                break
            with record.lock:
                failed = sum(e.startswith("answer") for e in record.errors)
            if tally.get("total", 0) + failed >= students and failed:
                break  # some answers failed: the count cannot complete
            time.sleep(max(0.0, LECTURER_TICK_S - (time.perf_counter() - tick)))
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    elapsed = time.perf_counter() - start
    revealed = server.ask("reveal")
    last = max(record.answered, default=float("nan"))
    first = min(record.answered, default=float("nan"))
    behind = (complete_at - last) if complete_at is not None else float("nan")
    trips = sorted(record.trips)

    def pct(q: float) -> float:
        return trips[min(len(trips) - 1, int(q * len(trips)))] if trips else float("nan")

    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"### A room answers an exercise: 1 lecturer, {students} students, answers within "
        f"{spread:g} s",
        "",
        f"Exercise `{EXERCISE_ID}` ({len(choices)} choices). Answers answered: "
        f"{len(record.answered)} of {students}, the first to the last {last - first:.1f} s apart; "
        f"errors: {len(record.errors)}.",
        f"**The lecturer's count was complete {behind:.2f} s after the last answer was "
        f"answered** (the page reads it every {LECTURER_TICK_S:g} s; that read took p50 "
        f"{statistics.median(ticks) if ticks else float('nan'):.3f} s).",
        f"An answer's round trip: p50 {pct(0.5):.3f} s, p95 {pct(0.95):.3f} s, max "
        f"{max(trips, default=float('nan')):.3f} s; the students' looks: {record.looks} "
        f"({record.looks / elapsed:.1f}/s).",
        f"Revealed: {revealed['total']} answers, the model's answer {revealed['answer']!r} "
        f"chosen {revealed['right']} times; the CSV: {revealed['rows']} rows.",
        f"The class's pages opened (each one request that makes its session) in "
        f"{opened_s:.1f} s before the answers began.",
        f"Load average at the end: {load} ({os.cpu_count()} cores; the students' clients run "
        "on the same cores as the app).",
    ]
    for error in record.errors[:3]:
        lines.append(f"- error: {error}")
    return lines


def serve_exercise(demo: Any, registry: Any, command: str, lecturer: dict[str, Any]) -> dict:
    """The server's side of the commands ``exercise ID`` (a room opened and asked the bank's
    exercise ``ID``) and ``reveal`` (the answer revealed: the tally and the CSV's rows)."""
    from ui.demo import EXERCISES
    from ui.tabs.exercises import start_room

    if command.startswith("exercise "):
        room = demo.follow_me.rooms.open()
        lecturer.update(code=room.code, secret=room.secret)
        start_room(EXERCISES, registry, [room.code, room.secret], command.split()[1])
        current = EXERCISES.current(room.code)
        assert current is not None, "the exercise could not be asked"
        return {"code": room.code, "choices": current.asked["choices"]}
    round_ = EXERCISES.reveal(lecturer["code"], lecturer["secret"])
    tally = EXERCISES.tally(lecturer["code"])
    assert tally is not None
    rows = EXERCISES.export(lecturer["code"], lecturer["secret"]).count("\n") - 1
    answer = round_.asked["answer"]
    return {"total": tally.total, "answer": answer, "right": tally.counts.get(answer, 0),
            "rows": rows}  # fmt: skip
