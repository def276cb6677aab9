"""A room's exercises: asked by the lecturer's secret only, answered once per student (a later
answer replaces it until the reveal), tallied, revealed, exported as CSV; the model's answer
never reaches a student's page before the reveal. The same story runs on the in-memory store
and on Redis (two processes' stores on one server), and must read the same."""

from __future__ import annotations

import csv
import io
from typing import Any

from ui.links.exercises import (
    ExerciseError,
    RedisRoomExercises,
    RoomExercises,
    make_exercises,
    student_label,
)
from ui.links.rooms import RedisRooms, RoomError, Rooms

ASKED = {
    "exercise_id": "attention-translate-cat",
    "kind": "attention",
    "question": "Which token?",
    "choices": ["0:_the", "1:_cat", "2:_"],
    "answer": "1:_cat",
    "explanation": "because",
    "title": "t",
    "labels": ["0:_the", "1:_cat", "2:_"],
    "values": [0.2, 0.7, 0.1],
    "value_name": "attention weight",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def outcome(call: Any) -> Any:
    try:
        return ("ok", call())
    except RoomError as error:  # ExerciseError is one
        return ("error", type(error).__name__, str(error))


def story(rooms: Any, store: Any, other: Any, clock: Clock) -> list[Any]:
    """One lecture on ``store`` (``other``: another process's store on the same rooms)."""
    room = rooms.open()
    code, secret = room.code, room.secret

    def tally() -> Any:
        found = other.tally(code)
        return None if found is None else found.to_dict()

    steps = [
        lambda: store.current(code),
        lambda: tally(),
        lambda: store.start(code, "guess", ASKED),  # not the lecturer
        lambda: store.start(code, secret, ASKED).number,
        lambda: other.current(code).public(),  # no answer before the reveal
        lambda: store.answer(code, 1, "student-a", "0:_the"),
        lambda: setattr(clock, "now", clock.now + 2.5),
        lambda: other.answer(code, 1, "student-b", "1:_cat"),
        lambda: store.answer(code, 1, "student-c", "1:_cat"),
        lambda: store.answer(code, 1, "student-a", "2:_"),  # changes their mind
        lambda: store.answer(code, 1, "student-d", "3:_nope"),  # not a choice
        lambda: store.answer(code, 2, "student-d", "0:_the"),  # no such round
        lambda: store.answer(code, 1, "", "0:_the"),  # no student
        lambda: store.mine(code, 1, "student-a"),
        lambda: other.mine(code, 1, "nobody"),
        lambda: tally(),
        lambda: store.reveal(code, "guess"),
        lambda: other.reveal(code, secret).revealed,
        lambda: store.current(code).public()["answer"],
        lambda: tally(),
        lambda: store.answer(code, 1, "student-e", "0:_the"),  # too late
        lambda: store.start(code, secret, {**ASKED, "exercise_id": "second"}).number,
        lambda: other.answer(code, 2, "student-a", "1:_cat"),
        lambda: tally(),
        lambda: store.export(code, "guess"),
        lambda: store.current("NOPE9"),
    ]
    return [outcome(step) for step in steps], code, secret


def check_story(results: list[Any], store: Any, code: str, secret: str) -> None:
    assert results[0] == ("ok", None) and results[1] == ("ok", None)
    assert results[2][0] == "error" and results[3] == ("ok", 1)
    public = results[4][1]
    assert public["question"] == "Which token?" and "answer" not in public
    assert "values" not in public and "explanation" not in public
    assert results[5] == ("ok", 0.0) and results[7] == ("ok", 2.5)
    assert [r[0] for r in results[10:13]] == ["error"] * 3
    assert "not one of this question's choices" in results[10][2]
    assert results[13] == ("ok", "2:_") and results[14] == ("ok", None)
    assert results[15][1] == {
        "round": 1,
        "total": 3,
        "counts": {"0:_the": 0, "1:_cat": 2, "2:_": 1},
        "answer": None,
    }
    assert results[16][0] == "error" and results[17] == ("ok", True)
    assert results[18] == ("ok", "1:_cat") and results[19][1]["answer"] == "1:_cat"
    assert results[20][0] == "error" and "revealed" in results[20][2]
    assert results[21] == ("ok", 2) and results[23][1]["total"] == 1
    assert results[24][0] == "error" and results[25][0] == "error"
    rows = list(csv.DictReader(io.StringIO(store.export(code, secret))))
    assert [r["exercise"] for r in rows] == ["attention-translate-cat"] * 3 + ["second"]
    by_student = {r["student"]: r for r in rows[:3]}
    a = by_student[student_label(code, "student-a")]
    assert (a["answer"], a["right"], a["seconds"]) == ("2:_", "no", "2.5")
    b = by_student[student_label(code, "student-b")]
    assert (b["answer"], b["right"], b["seconds"]) == ("1:_cat", "yes", "2.5")
    assert all("student-" not in value for row in rows for value in row.values())


def test_a_lecture_in_memory() -> None:
    clock = Clock()
    rooms = Rooms()
    store = RoomExercises(rooms, clock=clock)
    results, code, secret = story(rooms, store, store, clock)
    check_story(results, store, code, secret)


def test_a_lecture_in_redis_across_two_processes(redis_url: str) -> None:
    import redis

    clock = Clock()
    one, two = (redis.Redis.from_url(redis_url, socket_timeout=2) for _ in range(2))
    rooms = RedisRooms(one)
    store = make_exercises(rooms)
    assert isinstance(store, RedisRoomExercises)
    store.clock = clock
    other = RedisRoomExercises(two, RedisRooms(two), clock=clock)
    results, code, secret = story(rooms, store, other, clock)
    check_story(results, store, code, secret)
    # everything a room's exercises keep expires with the room
    keys = one.keys(f"visualiser:exercise:{code}*")
    assert keys and all(0 < one.pttl(key) <= rooms.idle_s * 1000 for key in keys)


def test_a_room_that_closed_takes_no_answer() -> None:
    clock = Clock()
    rooms = Rooms(idle_s=10, clock=clock)
    store = RoomExercises(rooms, clock=clock)
    room = rooms.open()
    store.start(room.code, room.secret, ASKED)
    clock.now += 11
    try:
        store.answer(room.code, 1, "s", "0:_the")
    except ExerciseError:
        raise AssertionError("a closed room is a RoomError, not an answer refused") from None
    except RoomError as error:
        assert "no open room" in str(error)
    else:
        raise AssertionError("answered a closed room")
