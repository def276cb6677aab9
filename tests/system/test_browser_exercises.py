"""Exercises in a room, in a real browser: a lecturer asks the room about the Attention view it
shows, three followers each answer differently, the lecturer's count reaches three, a
follower's reload finds its answer again, and the reveal shows the model's answer, equal to the
largest bar of the figure it shows, beside the class's answers on every page. Saves the
lecturer's reveal as ``exercise-reveal.png``. Reuses ``test_browser``'s browser, app and
helpers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from test_browser import _drawn, _poll
from test_browser_follow import _open_follow_me, _page, _room_code

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FOLLOWERS = 3


def _open_exercises(page: Any) -> None:
    question = page.locator("#exercise-question")
    if not page.locator("#exercise-answer").is_visible():
        page.get_by_text("Exercises: predict, then see").click()
    question.wait_for(state="attached")


def _text(page: Any, selector: str) -> str:
    found = page.locator(selector)
    return found.inner_text() if found.count() and found.is_visible() else ""


def _figure_argmax(page: Any) -> str | None:
    """The label of the largest bar of the exercise's figure on ``page`` (None: not drawn)."""
    return page.evaluate(
        """() => {
          const plot = document.querySelector('#exercise-figure .js-plotly-plot');
          // plotly keeps the typed arrays it decoded in _fullData
          const bars = plot && plot._fullData && plot._fullData[0];
          if (!bars || !bars.y || !bars.x) return null;
          const ys = Array.from(bars.y);
          let best = 0;
          ys.forEach((y, i) => { if (y > ys[best]) best = i; });
          return String(bars.x[best]);
        }"""
    )


def _checked(page: Any) -> str | None:
    return page.evaluate(
        """() => {
          const box = document.querySelector('#exercise-choices input[type=radio]:checked');
          return box ? box.value : null;
        }"""
    )


def test_a_room_answers_and_the_lecturer_reveals(
    browser: Any, app_url: str, screenshots: Path
) -> None:
    contexts = []
    try:
        lecture, lecturer = _page(browser, app_url)
        contexts.append(lecture)
        _open_follow_me(lecturer)
        lecturer.get_by_role("button", name="Host a room (lecturer)").click()
        code = _room_code(lecturer)
        students = []
        for _ in range(FOLLOWERS):
            context, student = _page(browser, app_url)
            contexts.append(context)
            _open_follow_me(student)
            student.locator("#room-code textarea, #room-code input").first.fill(code)
            student.get_by_role("button", name="Follow", exact=True).click()
            students.append(student)

        # The lecturer shows Attention and asks the room about it.
        lecturer.get_by_role("tab", name="Attention", exact=True).click()
        _drawn(lecturer, "Attention", 4)
        _open_exercises(lecturer)

        def asked() -> bool:
            if "attend to most" in _text(lecturer, "#exercise-question"):
                return True
            if not lecturer.locator(".pending, .generating").count():  # the view not yet sent
                lecturer.get_by_role("button", name="Ask my room about this view").click()
                lecturer.wait_for_timeout(800)
            return False

        _poll(lecturer, "the room asked", asked)
        assert f"Asked room {code}" in _text(lecturer, "#exercise-question")

        # Each follower answers something else.
        given = []
        for i, student in enumerate(students):
            _poll(
                student,
                "the question on a follower's page",
                lambda s=student: f"Room {code} asks" in _text(s, "#exercise-question"),
            )
            radios = student.locator("#exercise-choices input[type=radio]")
            assert radios.count() >= FOLLOWERS
            assert not student.locator("#exercise-figure .js-plotly-plot").count()  # hidden
            choice = radios.nth(i).get_attribute("value")
            radios.nth(i).check()
            student.locator("#exercise-answer").click()
            _poll(student, "answer in", lambda s=student: "is in" in _text(s, "#exercise-result"))
            given.append(choice)
        assert len(set(given)) == FOLLOWERS
        _poll(
            lecturer,
            "the count of answers",
            lambda: "3 answers so far" in _text(lecturer, "#exercise-tally"),
        )

        # A follower reloads: its page finds the question and its own answer again.
        students[1].reload()
        students[1].get_by_role("tab", name="Tokenize").wait_for()
        _poll(students[1], "the answer after a reload", lambda: _checked(students[1]) == given[1])
        assert "is in" in _text(students[1], "#exercise-result")

        # The reveal: the model's answer is the largest bar of the figure shown.
        lecturer.locator("#exercise-reveal").click()
        result = _poll(
            lecturer,
            "the reveal",
            lambda: re.search(r"The model's answer: (\S+)", _text(lecturer, "#exercise-result")),
        )
        answer = result.group(1)
        assert _poll(lecturer, "the figure", lambda: _figure_argmax(lecturer)) == answer
        assert "3 answers" in _text(lecturer, "#exercise-tally")
        lecturer.locator("#exercise-class .js-plotly-plot").wait_for()
        panel = lecturer.locator("#exercises")
        panel.scroll_into_view_if_needed()
        panel.screenshot(path=str(screenshots / "exercise-reveal.png"))

        for student, mine in zip(students, given, strict=True):
            _poll(
                student,
                "the reveal on a follower's page",
                lambda s=student: "The model's answer" in _text(s, "#exercise-result"),
            )
            assert f"Your answer: {mine}" in _text(student, "#exercise-result")
            assert _poll(student, "its figure", lambda s=student: _figure_argmax(s)) == answer
            student.locator("#exercise-class .js-plotly-plot").wait_for()
    finally:
        for context in contexts:
            context.close()
