"""The exercises' handlers as the page calls them: alone (predict first, the score kept), and
in a room (the lecturer asks, students answer, the count, the reveal, a reloaded page that
finds its answer again, the CSV), and the two API endpoints."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import gradio as gr
import pytest

from transformer.training.bundled import load_bundled
from ui.links.exercises import RoomExercises
from ui.links.rooms import Rooms
from ui.tabs import exercises as panel


class Registry:
    """The bundled models by name, as ``ModelRegistry.checkpoint`` gives them."""

    def __init__(self) -> None:
        self.bundled = load_bundled(names=("translate", "continue"))

    def checkpoint(self, name, session):
        if name not in self.bundled.models:
            raise ValueError(f"there is no model called {name!r}")
        return self.bundled.models[name]


@pytest.fixture(scope="module")
def registry():
    return Registry()


def value(update):
    return update.value if hasattr(update, "value") else update["value"]


def test_alone_predict_first_hides_the_figure_until_answered_and_keeps_a_score(registry):
    store = RoomExercises(Rooms())
    state, question, choices, result, figure, _ = panel.pick(registry, "next-the-ca", True)
    assert "Which token will the model write next" in question
    assert figure.visible is False and "answer" not in question
    answer = state["asked"]["answer"]
    wrong = next(c for c in choices.choices if c[0] != answer)[0]
    state, result, figure, score, line = panel.submit(store, wrong, state, None, "s")
    assert figure.visible is True and "not this time" in result and answer in result
    # the figure's own argmax is the model's answer
    bars = figure.value["plot"] if isinstance(figure.value, dict) else figure.value
    assert bars is not None
    assert score == {"answered": 1, "right": 0, "done": ["next-the-ca"]}
    state2, *_ = panel.pick(registry, "positions-translate", True)
    right = state2["asked"]["answer"]
    _, result, _, score, line = panel.submit(store, right, state2, score, "s")
    assert "✅" in result and line == "**Your score:** 1 right of 2 answered."
    # a second answer to the same exercise does not count again
    _, _, _, score, _ = panel.submit(store, right, state2, score, "s")
    assert score["answered"] == 2
    # Predict first off: the figure shows at once
    assert panel.pick(registry, "next-the-ca", False)[4].visible is True


def test_a_room_asks_counts_reveals_and_exports(registry, tmp_path: Path):
    rooms = Rooms()
    store = RoomExercises(rooms)
    room = rooms.open()
    hosting = [room.code, room.secret]
    assert "host a room first" in panel.start_room(store, registry, ["", ""], "next-the-ca")[3]
    lecturer = panel.start_room(store, registry, hosting, "attention-translate-cat")
    state, question = lecturer[0], lecturer[1]
    assert state == {"mode": "lecturer", "code": room.code, "round": 1}
    assert "attend to most" in question and lecturer[7].active is True

    pages = {}
    for student in ("a", "b", "c"):
        out = panel.student_tick(store, room.code, None, student)
        pages[student] = out[0]
        assert out[0]["round"] == 1 and out[4].visible is False  # no figure before the reveal
    choices = store.current(room.code).asked["choices"]
    for student, choice in zip(("a", "b", "c"), choices, strict=False):
        pages[student], line, *_ = panel.submit(store, choice, pages[student], None, student)
        assert "is in" in line
    assert panel.lecturer_tick(store, state) == "**3** answers so far."
    # a reloaded page (its state gone, its student id kept) finds its answer again
    reloaded = panel.student_tick(store, room.code, None, "b")
    assert value(reloaded[2]) == choices[1] and "is in" in reloaded[3]

    result, figure, class_plot, tally, timer = panel.reveal(store, hosting)
    answer = store.current(room.code).asked["answer"]
    assert f"**The model's answer:** {answer}" in result and timer.active is False
    assert tally.startswith("**3** answers")
    assert class_plot.visible is True and figure.visible is True
    shown = panel.student_tick(store, room.code, pages["a"], "a")
    assert shown[4].visible is True and shown[5].visible is True
    assert f"**Your answer:** {choices[0]}" in shown[3]
    assert panel.student_tick(store, room.code, shown[0], "a")[4] == gr.skip()  # once

    file, line = panel.export(store, hosting)
    rows = list(csv.DictReader(io.StringIO(Path(file.value["path"]).read_text())))
    assert len(rows) == 3 and {r["answer"] for r in rows} == set(choices[:3])
    assert {r["right"] for r in rows} <= {"yes", "no"}


def test_the_api_answers_and_tallies(registry):
    rooms = Rooms()
    store = RoomExercises(rooms)
    room = rooms.open()
    assert "error" in panel.exercise_tally(store, room.code)
    panel.start_room(store, registry, [room.code, room.secret], "band-the-ca")
    tally = panel.exercise_tally(store, room.code)
    assert tally["total"] == 0 and tally["answer"] is None and not tally["revealed"]
    assert panel.exercise_answer(store, room.code, "x", tally["choices"][0])["round"] == 1
    assert "error" in panel.exercise_answer(store, room.code, "y", "nonsense")
    assert "error" in panel.exercise_answer(store, "NOPE9", "y", tally["choices"][0])
    assert panel.exercise_tally(store, room.code)["total"] == 1


def test_ask_about_this_view(registry):
    rooms = Rooms()
    store = RoomExercises(rooms)
    room = rooms.open()
    hosting = [room.code, room.secret]
    rooms.publish(room.code, room.secret, "tab=tokenize&text=hello")
    assert "Attention and Generate" in panel.start_view(store, rooms, registry, hosting)[3]
    rooms.publish(
        room.code,
        room.secret,
        "tab=attention&sentences=the+cat+sees+a+dog&model=translate"
        "&kind=encoder+self-attention&layer=2&head=3&row=1",
    )
    state, question, *_ = panel.start_view(store, rooms, registry, hosting)
    assert state["round"] == 1 and "layer 2, head 3" in question and "6:_dog" in question
    rooms.publish(room.code, room.secret, "tab=generate&source=the+ca&model=continue")
    state, question, *_ = panel.start_view(store, rooms, registry, hosting)
    assert state["round"] == 2 and "write next" in question


BAD = [None, "", "a" * 100_000, "\x00", "a\ud800b", 1e12, float("nan"), ["x"], {"a": 1}]


def test_the_api_answers_bad_input_with_a_message(registry):
    rooms = Rooms()
    store = RoomExercises(rooms)
    room = rooms.open()
    panel.start_room(store, registry, [room.code, room.secret], "band-the-ca")
    good = [room.code, "student", store.current(room.code).asked["choices"][0]]
    for place in range(3):
        for bad in BAD:
            args = list(good)
            args[place] = bad
            found = panel.exercise_answer(store, *args)
            assert set(found) == {"error"} and isinstance(found["error"], str), (place, bad)
            assert len(found["error"]) < 300
    for bad in BAD:
        assert set(panel.exercise_tally(store, bad)) == {"error"}
    assert panel.exercise_tally(store, room.code)["total"] == 0  # nothing bad was counted


@pytest.mark.parametrize("chosen", ["no-such-exercise", None, ["next-the-ca"]])
def test_an_exercise_the_bank_lacks_is_said_where_the_question_stands(registry, chosen):
    """The pick's request reads the menu's value once; one the bank lacks is said on the page
    (no error toast, no state kept), for the alone page and the lecturer's alike."""
    state, question, choices, *_ = panel.pick(registry, chosen, True)
    assert state is None and question.startswith("⚠️ there is no exercise")
    assert choices.choices == []
    rooms = Rooms()
    room = rooms.open()
    failed = panel.start_room(RoomExercises(rooms), registry, [room.code, room.secret], chosen)
    assert failed[3].startswith("⚠️ there is no exercise")
