"""The exercises' request records: what a page or a client sends is read once, and what
cannot be read is said on the page (or in the API's ``{"error"}``) before the room's store is
asked anything, where the handlers used to hand it on raw (and a browser-kept value of
another shape was a traceback)."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pytest

from ui.links.exercises import RoomExercises
from ui.links.rooms import RoomError, Rooms
from ui.tabs import exercises as panel

# What the store keeps of an asked exercise, as much as these handlers read (no figure drawn).
ASKED = {"exercise_id": "e", "question": "Which token?", "choices": ["0:_the", "1:_cat"],
         "answer": "1:_cat"}  # fmt: skip


class Untouched:
    """A store that fails the test when asked anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the store was asked {name}")


def rooms_own_words(code: str) -> str:
    try:
        Rooms().latest(code)
    except RoomError as error:
        return str(error)
    raise AssertionError("an empty code named a room")


@pytest.mark.parametrize("hosting", [5, "ABCD", {"code": "ABCD"}, None, ["", "s"], [None, "s"]])
def test_a_hosting_value_of_another_shape_asks_to_host_a_room(hosting: Any) -> None:
    # The browser keeps the lecturer's room: it may send anything back.
    store = Untouched()
    result, *rest = panel.reveal(store, hosting)
    assert result == "⚠️ host a room first (Follow a lecturer → Host a room)"
    assert all(update == gr.skip() for update in rest)
    file, line = panel.export(store, hosting)
    assert file == gr.skip() and line == result
    assert panel.start_room(store, None, hosting, "next-the-ca")[3] == result


def test_a_typed_room_code_reads_as_the_rooms_keep_it() -> None:
    rooms = Rooms()
    store = RoomExercises(rooms)
    room = rooms.open()
    store.start(room.code, room.secret, ASKED)
    typed = "-".join(room.code.lower())  # "ab-cd": any case, dashes
    assert panel.exercise_tally(store, typed)["total"] == 0
    assert panel.exercise_answer(store, f" {typed} ", "s", "1:_cat")["round"] == 1
    # the lecturer's pair read the same way: the export names the room as the rooms do
    file, line = panel.export(store, [typed, room.secret])
    assert file.value["path"].endswith(f"answers-{room.code}.csv") and "1 answer" in line


@pytest.mark.parametrize("code", ["", None, "--", " ", 12, ["ABCD"]])
def test_an_empty_room_code_is_refused_in_the_rooms_own_words_without_the_store(code: Any) -> None:
    words = rooms_own_words("")
    assert panel.exercise_tally(Untouched(), code) == {"error": words}
    assert panel.exercise_answer(Untouched(), code, "s", "1:_cat") == {"error": words}


@pytest.mark.parametrize("state", ["lecturer", ["lecturer"], {"mode": "alone"}, None, {}])
def test_the_lecturer_tick_of_a_page_that_asked_nothing_reads_nothing(state: Any) -> None:
    assert panel.lecturer_tick(Untouched(), state) == gr.skip()


def test_a_student_page_with_a_kept_value_of_another_shape_still_gets_the_question() -> None:
    rooms = Rooms()
    store = RoomExercises(rooms)
    room = rooms.open()
    store.start(room.code, room.secret, ASKED)
    out = panel.student_tick(store, room.code.lower(), "not a state", ["not", "an", "id"])
    assert out[0] == {"mode": "room", "code": room.code, "round": 1, "mine": None,
                      "revealed": False}  # fmt: skip
    assert out[1] == f"**Room {room.code} asks:** Which token?"
    # not following a room: the timer stops, nothing is read
    stopped = panel.student_tick(Untouched(), None, None, "s")
    assert stopped[:7] == (gr.skip(),) * 7 and stopped[7].active is False


@pytest.mark.parametrize(
    ("choice", "state", "said"),
    [
        ("1:_cat", "a state", "Pick an exercise first."),
        ("1:_cat", None, "Pick an exercise first."),
        (["1:_cat"], {"mode": "room", "code": "ABCD", "round": 1}, "Choose an answer first."),
        ("", {"mode": "alone"}, "Choose an answer first."),
        ("1:_cat", {"mode": "lecturer"}, "The lecturer's page does not answer its own question."),
    ],
)
def test_an_answer_the_page_cannot_take_is_said_without_the_store(
    choice: Any, state: Any, said: str
) -> None:
    out = panel.submit(Untouched(), choice, state, None, "s")
    assert out == (gr.skip(), said, gr.skip(), gr.skip(), gr.skip())
