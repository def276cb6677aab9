"""Follow me in a real browser: a lecturer hosts a room, several students follow it with its
code, and their pages follow the lecturer's tab and controls as they change, also after the
lecturer reloads. Reuses ``test_browser``'s browser, app and helpers."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import TIMEOUT_MS
from test_browser import (
    _drawn,
    _poll,
    _selected_tab,
)

from ui.testing import VIEWPORT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FOLLOWERS = 3


def _page(browser: Any, url: str) -> tuple[Any, Any]:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.get_by_role("tab", name="Tokenize").wait_for()
    return context, page


def _open_follow_me(page: Any) -> None:
    box = page.locator("#room-code textarea, #room-code input").first
    if not box.is_visible():
        page.get_by_text("Follow a lecturer (room code)").click()
    box.wait_for(state="visible")


def _room_code(page: Any) -> str:
    def code() -> str | None:
        found = re.search(r"Room code: ([A-Z0-9]{5})", page.locator("#room-line").inner_text())
        return found.group(1) if found else None

    return _poll(page, "the room code", code)


def _layer_and_head(page: Any) -> tuple[str, str]:
    panel = page.get_by_role("tabpanel")
    return (
        panel.get_by_label("number input for Layer", exact=True).input_value(),
        panel.get_by_label("number input for Head", exact=True).input_value(),
    )


def _set(page: Any, label: str, value: str) -> None:
    box = page.get_by_role("tabpanel").get_by_label(f"number input for {label}", exact=True)
    box.fill(value)
    box.press("Enter")


def test_followers_pages_follow_the_lecturer_also_after_a_reload(
    browser: Any, app_url: str
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
            box = student.locator("#room-code textarea, #room-code input").first
            box.fill(code.lower())  # typed as heard: the case does not matter
            student.get_by_role("button", name="Follow", exact=True).click()
            _poll(
                student,
                "following",
                lambda s=student: "Following room" in s.inner_text("#room-line"),
            )
            students.append(student)

        # The lecturer opens Attention and points at layer 3, head 2.
        lecturer.get_by_role("tab", name="Attention", exact=True).click()
        _drawn(lecturer, "Attention", 4)
        _set(lecturer, "Layer", "3")
        _drawn(lecturer, "Attention", 4, ("layer 3",))
        _set(lecturer, "Head", "2")
        _drawn(lecturer, "Attention", 4, ("layer 3", "head 2"))
        for student in students:
            _poll(student, "the lecturer's tab", lambda s=student: _selected_tab(s) == "Attention")
            _drawn(student, "Attention", 4, ("layer 3", "head 2"))
            assert _layer_and_head(student) == ("3", "2")

        # The lecturer reloads: the page hosts the same room and shows its view again.
        lecturer.reload()
        lecturer.get_by_role("tab", name="Tokenize").wait_for()
        _open_follow_me(lecturer)
        assert _room_code(lecturer) == code
        _drawn(lecturer, "Attention", 4, ("layer 3", "head 2"))
        # The followers kept the view meanwhile, and follow the next change.
        _set(lecturer, "Head", "4")
        _drawn(lecturer, "Attention", 4, ("layer 3", "head 4"))
        for student in students:
            _drawn(student, "Attention", 4, ("layer 3", "head 4"))
            assert _layer_and_head(student) == ("3", "4")

        # A student takes over: the lecturer's next change no longer moves their page.
        taker = students[0]
        taker.get_by_role("button", name="Take over").click()
        _poll(taker, "taken over", lambda: "taken over" in taker.inner_text("#room-line"))
        _set(lecturer, "Layer", "2")
        _drawn(lecturer, "Attention", 4, ("layer 2", "head 4"))
        for student in students[1:]:
            _drawn(student, "Attention", 4, ("layer 2", "head 4"))
        assert _layer_and_head(taker) == ("3", "4")
    finally:
        for context in contexts:
            context.close()
