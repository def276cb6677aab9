"""Follow me in a real browser: a lecturer hosts a room, two students (a laptop's screen and a
phone's) follow it with its code, and their pages follow the lecturer's Generate steps (never
through another step), tab and controls as they change, read-only, with Take over pinned in
sight, also after the lecturer reloads; a student who takes over gets their page back,
interactive, where it was. Reuses
``test_browser``'s browser, app and helpers."""

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

PHONE = {"width": 390, "height": 844}
# The followers' screens: a laptop's and a phone's (touch).
SCREENS = [VIEWPORT, PHONE]
# The lecturer's page opens on Generate with a small model (a link's view).
LECTURE = "?tab=generate&model=translate&source=the+small+cat+sees+a+red+ball"

# The step count Generate's summary shows (null when none): read from the text, not the layout.
STEPS_JS = r"""
() => {
  const found = document.body.textContent.match(/Output so far\D{0,40}\((\d+) steps?\)/);
  return found ? Number(found[1]) : null;
}
"""
# Every step count the page shows, in order (a change of count once), read once a frame at
# most: a follower's page must go from the step it showed straight to the lecturer's.
WATCH_STEPS_JS = (
    r"""
() => {
  window.__steps = [];
  const count = STEPS;
  let queued = false;
  const read = () => {
    queued = false;
    const n = count();
    if (n !== null && window.__steps[window.__steps.length - 1] !== n) window.__steps.push(n);
  };
  read();
  new MutationObserver(() => {
    if (!queued) { queued = true; requestAnimationFrame(read); }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}
"""
).replace("STEPS", STEPS_JS.strip())


def _page(browser: Any, url: str, viewport: dict[str, int] = VIEWPORT) -> tuple[Any, Any]:
    """A page opening ``url`` (not waited for: the pages of a test open side by side)."""
    phone = viewport["width"] < 600
    context = browser.new_context(viewport=viewport, has_touch=phone, is_mobile=phone)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url, wait_until="commit")
    return context, page


def _opened(page: Any) -> None:
    page.get_by_role("tab", name="Tokenize").wait_for(state="attached")


def _steps_shown(page: Any) -> int | None:
    """The step count Generate's summary shows (None when none is shown)."""
    shown = page.evaluate(STEPS_JS)
    return int(shown) if shown is not None else None


def _pinned(page: Any) -> bool:
    """Whether Take over is on screen, whole, narrower than the screen, wherever the page is
    scrolled (its end and its top)."""
    for where in ("document.scrollingElement.scrollHeight", "0"):
        page.evaluate(f"() => window.scrollTo(0, {where})")
        page.wait_for_timeout(100)
        box = page.evaluate(
            """() => {
              const r = document.getElementById("take-over").getBoundingClientRect();
              return [r.top, r.bottom, r.left, r.right, window.innerHeight, window.innerWidth];
            }"""
        )
        top, bottom, left, right, height, width = box
        if not (0 <= top < bottom <= height and 0 <= left < right <= width):
            return False
    return True


def _step(page: Any, button: str, wanted: int) -> None:
    page.get_by_role("button", name=button, exact=True).click()
    _poll(page, f"step {wanted}", lambda: _steps_shown(page) == wanted)


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


def _read_only(page: Any) -> bool:
    """Whether the page's tabs and controls take no input: inert, and a click where a tab is
    drawn does not reach it (the browser hit-tests past it)."""
    return page.evaluate(
        """() => {
          const tab = document.querySelector('[role="tab"]');
          const layer = document.querySelector('[role="tabpanel"] input');
          const r = tab.getBoundingClientRect();
          const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
          return Boolean(tab.closest("[inert]")) && Boolean(layer && layer.closest("[inert]"))
            && !(hit && hit.closest('[role="tab"]'));
        }"""
    )


def _take_over_button(page: Any) -> Any:
    return page.locator("#take-over")


def _set(page: Any, label: str, value: str) -> None:
    box = page.get_by_role("tabpanel").get_by_label(f"number input for {label}", exact=True)
    box.fill(value)
    box.press("Enter")


def test_followers_pages_follow_the_lecturer_also_after_a_reload(
    browser: Any, app_url: str
) -> None:
    contexts = []
    try:
        lecture, lecturer = _page(browser, app_url + LECTURE)
        contexts.append(lecture)
        pages = [_page(browser, app_url, screen) for screen in SCREENS]
        contexts += [context for context, _ in pages]
        _opened(lecturer)
        _poll(lecturer, "the lecture's first step", lambda: _steps_shown(lecturer) == 1)
        _open_follow_me(lecturer)
        lecturer.get_by_role("button", name="Host a room (lecturer)").click()
        code = _room_code(lecturer)

        students = []
        for screen, (_, student) in zip(SCREENS, pages, strict=True):
            _opened(student)
            _open_follow_me(student)
            box = student.locator("#room-code textarea, #room-code input").first
            box.fill(code.lower())  # typed as heard: the case does not matter
            student.get_by_role("button", name="Follow", exact=True).click()
            _poll(
                student,
                "following",
                lambda s=student: "Following room" in s.inner_text("#room-line"),
            )
            # Read-only while it follows, with the way back in sight wherever it is scrolled.
            _poll(student, "read-only", lambda s=student: _read_only(s))
            button = _take_over_button(student)
            assert button.is_visible() and button.inner_text() == f"Following {code} — Take over"
            assert button.is_enabled() and not button.evaluate("e => !!e.closest('[inert]')")
            _poll(student, "the lecture's step", lambda s=student: _steps_shown(s) == 1)
            assert _pinned(student), f"Take over not pinned at {screen}"
            students.append(student)
        assert not _read_only(lecturer)  # the lecturer's page is theirs

        # Step, Step: each follower's page goes from the step it showed straight to the
        # lecturer's, never through another (the first step, drawn by a default, was shown
        # for seconds before the lecturer's).
        for student in students:
            student.evaluate(WATCH_STEPS_JS)
        for button, wanted in (("Step", 2), ("Step", 3)):
            _step(lecturer, button, wanted)
            for student in students:
                _poll(student, f"step {wanted}", lambda s=student, w=wanted: _steps_shown(s) == w)
        for student in students:
            shown = student.evaluate("() => window.__steps")
            assert shown in ([1, 2, 3], [1, 3]), shown  # (two Steps may come as one)

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
        _opened(lecturer)
        _open_follow_me(lecturer)
        assert _room_code(lecturer) == code
        _drawn(lecturer, "Attention", 4, ("layer 3", "head 2"))
        # The followers kept the view meanwhile, read-only, and follow the next change.
        _set(lecturer, "Head", "4")
        _drawn(lecturer, "Attention", 4, ("layer 3", "head 4"))
        for student in students:
            _drawn(student, "Attention", 4, ("layer 3", "head 4"))
            assert _layer_and_head(student) == ("3", "4")
            assert _read_only(student)

        # A student takes over: the lecturer's next change no longer moves their page.
        taker = students[0]
        taker.get_by_role("button", name="Take over").click()
        _poll(taker, "taken over", lambda: "taken over" in taker.inner_text("#room-line"))
        _poll(taker, "interactive again", lambda: not _read_only(taker))
        assert not _take_over_button(taker).is_visible()
        _set(lecturer, "Layer", "2")
        _drawn(lecturer, "Attention", 4, ("layer 2", "head 4"))
        for student in students[1:]:
            _drawn(student, "Attention", 4, ("layer 2", "head 4"))
            assert _read_only(student)
        # The taker's page stayed where it was, and is theirs to change (that their generation
        # goes on from the step their page showed is checked in tests/handlers/test_rooms.py).
        assert _layer_and_head(taker) == ("3", "4")
        _set(taker, "Head", "1")
        _drawn(taker, "Attention", 4, ("layer 3", "head 1"))
    finally:
        for context in contexts:
            context.close()


def test_a_lecturers_tab_click_reaches_the_room_before_the_tick(
    browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tab clicked on a hosting page is published at once, not at the page's next publish
    tick (a quarter of a second of every tab change's way to the followers): with the tick
    set to minutes, the click alone must bring the room to the new tab."""
    import ui.links.rooms as rooms
    from ui.demo import build_demo
    from ui.testing import launched

    monkeypatch.setattr(rooms, "PUBLISH_S", 600.0)
    demo = build_demo("cpu", preload=False)
    store = demo.follow_me.rooms  # type: ignore[attr-defined]
    with launched(demo) as url:
        context, page = _page(browser, url)
        try:
            _opened(page)
            _open_follow_me(page)
            page.get_by_role("button", name="Host a room (lecturer)").click()
            code = _room_code(page)
            version, _ = store.latest(code)
            page.get_by_role("tab", name="Attention", exact=True).click()
            _poll(page, "the click published", lambda: "tab=attention" in store.latest(code)[1])
            assert store.latest(code)[0] > version
            # A page that hosts no room sends nothing at a tab click.
            before = store.latest(code)
            other, student = _page(browser, url)
            try:
                _opened(student)
                student.get_by_role("tab", name="Generate", exact=True).click()
                student.wait_for_timeout(1500)
                assert store.latest(code) == before
            finally:
                other.close()
        finally:
            context.close()
