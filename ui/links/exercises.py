"""A room's exercises: the lecturer asks the room a question, each student's page answers it,
the lecturer reveals the model's answer beside the class's.

Kept where the room is (:mod:`ui.links.rooms`): in this process's memory
(:class:`RoomExercises`), or in Redis when several processes serve one class
(:class:`RedisRoomExercises`), so that a student answered by one process counts in the tally
the lecturer's page reads from another. Per room: the exercise asked now (its round number,
the question with the model's answer, when it was asked, whether it is revealed) and, per
round, each student's answer and how long it took. Only the lecturer's secret starts, reveals
or exports; the model's answer leaves the server only once revealed.

A student is known by a random token their browser keeps (a reload answers as the same
student); the exports name them by a digest of it, never by the token.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..serving.store import Breaker
from .rooms import (
    MAX_ROOMS,
    POLL_S,
    ROOM_IDLE_S,
    RoomError,
    RoomStore,
    ask_redis,
    normal_code,
)

if TYPE_CHECKING:
    import redis

MAX_ROUNDS = 100  # the rounds a room keeps for its export (the oldest dropped first)
MAX_STUDENTS = 1000  # answers one round takes (a hall is 30 to 300)
MAX_ANSWER_CHARS = 200
MAX_STUDENT_CHARS = 64


@dataclass
class Round:
    """One question asked of a room: its number (from 1), the asked exercise as plain values
    (``Asked.to_dict()``, the model's answer in it), when it was asked (seconds since the
    epoch, which the processes of one class share) and whether its answer is revealed."""

    number: int
    asked: dict[str, Any]
    started: float
    revealed: bool = False

    def public(self) -> dict[str, Any]:
        """What a student's page may read: the question and its choices, and only once revealed
        the model's answer, its explanation and its figure's data."""
        keys = ("exercise_id", "kind", "question", "choices", "title")
        shown = {k: self.asked.get(k) for k in keys}
        if self.revealed:
            shown = dict(self.asked)
        return {"round": self.number, "revealed": self.revealed, **shown}


@dataclass
class Tally:
    """A round's answers: how many students answered, how many chose each choice, and, once
    revealed, the model's answer (``None`` before)."""

    round: int
    total: int
    counts: dict[str, int] = field(default_factory=dict)
    answer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain values for the API."""
        return dict(self.__dict__)


class ExerciseError(RoomError):
    """An answer or a lecturer's action a room cannot take (a clear message for the page)."""


def student_label(code: str, student: str) -> str:
    """The anonymous id an export gives a student: a digest of their token and the room."""
    return hashlib.sha256(f"{code}\0{student}".encode()).hexdigest()[:10]


def _check_answer(round_: Round, student: Any, answer: Any) -> tuple[str, str]:
    if (
        not isinstance(student, str)
        or not 0 < len(student) <= MAX_STUDENT_CHARS
        or not student.isprintable()
        or not student.isascii()  # a page's id is; anything else could not be stored as given
    ):
        raise ExerciseError(
            f"an answer needs the student's id: up to {MAX_STUDENT_CHARS} printable ASCII characters"
        )
    if not isinstance(answer, str) or len(answer) > MAX_ANSWER_CHARS:
        raise ExerciseError("an answer is one of the question's choices")
    if answer not in (round_.asked.get("choices") or []):
        raise ExerciseError(f"{answer[:40]!r} is not one of this question's choices")
    if round_.revealed:
        raise ExerciseError("the answer was revealed: this question takes no more answers")
    return student, answer


def csv_text(rows: list[tuple[str, str, str, bool, float]]) -> str:
    """The export: exercise, anonymous student id, answer, right or not, seconds to answer."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["exercise", "student", "answer", "right", "seconds"])
    for exercise, student, answer, right, seconds in rows:
        writer.writerow([exercise, student, answer, "yes" if right else "no", f"{seconds:.1f}"])
    return out.getvalue()


class ExerciseStore(Protocol):
    """What a room's exercises need of their store: :class:`RoomExercises` or
    :class:`RedisRoomExercises`."""

    def start(self, code: str, secret: str, asked: dict[str, Any]) -> Round: ...

    def current(self, code: str) -> Round | None: ...

    def answer(self, code: str, number: int, student: str, answer: str) -> float: ...

    def mine(self, code: str, number: int, student: str) -> str | None: ...

    def tally(self, code: str) -> Tally | None: ...

    def reveal(self, code: str, secret: str) -> Round: ...

    def export(self, code: str, secret: str) -> str: ...


@dataclass
class _Held:
    rounds: list[Round] = field(default_factory=list)
    # round number → student → (answer, seconds to answer)
    answers: dict[int, dict[str, tuple[str, float]]] = field(default_factory=dict)


class RoomExercises:
    """The rooms' exercises in this process's memory (rooms from ``rooms``, a :class:`Rooms`).
    Safe to use from many threads."""

    def __init__(
        self,
        rooms: RoomStore,
        clock: Callable[[], float] = time.time,
        max_rounds: int = MAX_ROUNDS,
    ) -> None:
        self.rooms = rooms
        self.clock = clock
        self.max_rounds = max_rounds
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def _room(self, code: str) -> _Held:
        """The room's exercises (a room closed meanwhile: forgotten); the lock is held."""
        key = normal_code(code)
        self.rooms.latest(key)  # raises RoomError for a room that is not open
        if key not in self._held:
            self._held[key] = _Held()
            while len(self._held) > MAX_ROOMS:  # the rooms' own bound: the oldest go first
                del self._held[next(iter(self._held))]
        return self._held[key]

    def start(self, code: str, secret: str, asked: dict[str, Any]) -> Round:
        """Ask the room ``asked`` (``Asked.to_dict()``): a new round."""
        room = self.rooms.resume(code, secret)
        with self._lock:
            held = self._room(room.code)
            number = held.rounds[-1].number + 1 if held.rounds else 1
            round_ = Round(number, dict(asked), self.clock())
            held.rounds.append(round_)
            held.answers[number] = {}
            while len(held.rounds) > self.max_rounds:
                held.answers.pop(held.rounds.pop(0).number, None)
            return round_

    def current(self, code: str) -> Round | None:
        """The round asked now (None before the first)."""
        with self._lock:
            held = self._room(code)
            return held.rounds[-1] if held.rounds else None

    def answer(self, code: str, number: int, student: str, answer: str) -> float:
        """Record ``student``'s answer to round ``number`` (a later one replaces it, until the
        reveal); returns the seconds it took from the question."""
        with self._lock:
            held = self._room(code)
            if not held.rounds or held.rounds[-1].number != number:
                raise ExerciseError("this question is over: the lecturer asked another")
            round_ = held.rounds[-1]
            student, answer = _check_answer(round_, student, answer)
            answers = held.answers[number]
            if student not in answers and len(answers) >= MAX_STUDENTS:
                raise ExerciseError("this question has all the answers it takes")
            seconds = max(0.0, self.clock() - round_.started)
            answers[student] = (answer, seconds)
            return seconds

    def mine(self, code: str, number: int, student: str) -> str | None:
        """``student``'s answer to round ``number``, if any."""
        with self._lock:
            found = self._room(code).answers.get(number, {}).get(student)
            return found[0] if found else None

    def tally(self, code: str) -> Tally | None:
        """The current round's answers (None before the first round)."""
        with self._lock:
            held = self._room(code)
            if not held.rounds:
                return None
            round_ = held.rounds[-1]
            answers = list(held.answers.get(round_.number, {}).values())
        return _tally(round_, [a for a, _ in answers])

    def reveal(self, code: str, secret: str) -> Round:
        """Reveal the current round's answer (to every page of the room)."""
        room = self.rooms.resume(code, secret)
        with self._lock:
            held = self._room(room.code)
            if not held.rounds:
                raise ExerciseError("no question was asked in this room yet")
            held.rounds[-1].revealed = True
            return held.rounds[-1]

    def export(self, code: str, secret: str) -> str:
        """Every round's answers as CSV (see :func:`csv_text`)."""
        room = self.rooms.resume(code, secret)
        with self._lock:
            held = self._room(room.code)
            rows = [
                (
                    r.asked.get("exercise_id", ""),
                    student_label(room.code, student),
                    answer,
                    answer == r.asked.get("answer"),
                    seconds,
                )
                for r in held.rounds
                for student, (answer, seconds) in held.answers.get(r.number, {}).items()
            ]
        return csv_text(rows)


def _tally(round_: Round, answers: list[str]) -> Tally:
    counts = {choice: 0 for choice in round_.asked.get("choices") or []}
    for each in answers:
        counts[each] = counts.get(each, 0) + 1
    answer = round_.asked.get("answer") if round_.revealed else None
    return Tally(round_.number, len(answers), counts, answer)


class RedisRoomExercises:
    """:class:`RoomExercises` kept in Redis beside the rooms (``RedisRooms``), shared by the
    processes that serve one class. Per room: a hash ``<prefix>exercise:<CODE>`` (the current
    round's number, question, start and whether revealed), a list of the past rounds (for the
    export) and per round a hash of the students' answers; all expire with the room. An
    error of Redis is a :class:`RoomsUnavailable` (the page asks again at its next tick)."""

    def __init__(
        self,
        client: redis.Redis,
        rooms: RoomStore,
        prefix: str = "visualiser:",
        idle_s: float = ROOM_IDLE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.rooms = rooms
        self.prefix = prefix
        self.idle_s = idle_s
        self.clock = clock
        self.breaker = Breaker("exercise answers", retry_after_s=POLL_S)

    def _keys(self, code: str) -> tuple[str, str]:
        base = f"{self.prefix}exercise:{code}"
        return base, f"{base}:rounds"

    def _answers_key(self, code: str, number: int) -> str:
        return f"{self.prefix}exercise:{code}:answers:{number}"

    def _call(self, work: Callable[[], Any]) -> Any:
        unavailable = "exercises are unavailable for a moment (the rooms' store does not answer)"
        return ask_redis(self.breaker, unavailable, work)

    def _ttl_ms(self) -> int:
        return max(1, round(self.idle_s * 1000))

    def start(self, code: str, secret: str, asked: dict[str, Any]) -> Round:
        """Ask the room ``asked``: a new round (its number raised atomically in Redis)."""
        room = self.rooms.resume(code, secret)
        current, rounds = self._keys(room.code)
        started = self.clock()

        def work() -> Round:
            number = int(self.client.hincrby(current, "round", 1))
            round_ = Round(number, dict(asked), started)
            pipe = self.client.pipeline()
            pipe.hset(
                current,
                mapping={"asked": json.dumps(asked), "started": repr(started), "revealed": 0},
            )
            pipe.rpush(rounds, json.dumps({"number": number, "asked": asked}))
            pipe.ltrim(rounds, -MAX_ROUNDS, -1)
            for key in (current, rounds, self._answers_key(room.code, number)):
                pipe.pexpire(key, self._ttl_ms())
            pipe.execute()
            return round_

        return self._call(work)

    def current(self, code: str) -> Round | None:
        """The round asked now (None before the first)."""
        key = normal_code(code)
        self.rooms.latest(key)  # a room that is not open: RoomError
        current, _ = self._keys(key)
        found = self._call(
            lambda: self.client.hmget(current, ["round", "asked", "started", "revealed"])
        )
        if not found or found[0] is None or found[1] is None:
            return None
        number, asked, started, revealed = found
        return Round(int(number), json.loads(asked), float(started), revealed == b"1")

    def answer(self, code: str, number: int, student: str, answer: str) -> float:
        """Record ``student``'s answer to round ``number`` (a later one replaces it, until the
        reveal); returns the seconds it took from the question."""
        key = normal_code(code)
        round_ = self.current(key)
        if round_ is None or round_.number != number:
            raise ExerciseError("this question is over: the lecturer asked another")
        student, answer = _check_answer(round_, student, answer)
        seconds = max(0.0, self.clock() - round_.started)
        answers = self._answers_key(key, number)
        value = json.dumps([answer, round(seconds, 2)])

        def work() -> int:
            pipe = self.client.pipeline()
            pipe.hlen(answers)
            pipe.hexists(answers, student)
            size, known = pipe.execute()
            if not known and size >= MAX_STUDENTS:
                raise ExerciseError("this question has all the answers it takes")
            pipe = self.client.pipeline()
            pipe.hset(answers, student, value)
            pipe.pexpire(answers, self._ttl_ms())
            return int(pipe.execute()[0])

        self._call(work)
        return seconds

    def mine(self, code: str, number: int, student: str) -> str | None:
        """``student``'s answer to round ``number``, if any."""
        found = self._call(
            lambda: self.client.hget(self._answers_key(normal_code(code), number), student)
        )
        return json.loads(found)[0] if found else None

    def tally(self, code: str) -> Tally | None:
        """The current round's answers (None before the first round)."""
        key = normal_code(code)
        round_ = self.current(key)
        if round_ is None:
            return None
        found = self._call(lambda: self.client.hvals(self._answers_key(key, round_.number)))
        return _tally(round_, [json.loads(v)[0] for v in found])

    def reveal(self, code: str, secret: str) -> Round:
        """Reveal the current round's answer (to every page of the room)."""
        room = self.rooms.resume(code, secret)
        current, _ = self._keys(room.code)
        if self.current(room.code) is None:
            raise ExerciseError("no question was asked in this room yet")
        self._call(lambda: self.client.hset(current, "revealed", 1))
        round_ = self.current(room.code)
        assert round_ is not None
        return round_

    def export(self, code: str, secret: str) -> str:
        """Every round's answers as CSV (see :func:`csv_text`)."""
        room = self.rooms.resume(code, secret)
        _, rounds_key = self._keys(room.code)

        def work() -> list[tuple[str, str, str, bool, float]]:
            rows = []
            for raw in self.client.lrange(rounds_key, 0, -1):
                past = json.loads(raw)
                asked = past["asked"]
                answers = self.client.hgetall(self._answers_key(room.code, past["number"]))
                for student, value in answers.items():
                    answer, seconds = json.loads(value)
                    rows.append(
                        (
                            asked.get("exercise_id", ""),
                            student_label(room.code, _text(student)),
                            answer,
                            answer == asked.get("answer"),
                            float(seconds),
                        )
                    )
            return rows

        return csv_text(self._call(work))


def make_exercises(rooms: RoomStore) -> ExerciseStore:
    """The rooms' exercises, kept where ``rooms`` keeps the rooms: in Redis beside
    ``RedisRooms``, else in this process's memory."""
    client = getattr(rooms, "client", None)
    if client is not None:
        return RedisRoomExercises(client, rooms)
    return RoomExercises(rooms)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
