"""What a student meets in a real browser at 1280×800: a number typed outside a slider's range
is moved into it (no refusal, no red "Error" pill left over the figures), and the figures fit
the width the tour's sidebar leaves them. Reuses ``test_browser``'s browser, app and helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import TIMEOUT_MS
from test_browser import (
    BUSY,
    PLOT,
    _drawn,
    _error_toasts,
    _poll,
)

from ui.testing import VIEWPORT

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _page(browser: Any, url: str) -> tuple[Any, Any]:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    return context, page


def _titles(panel: Any) -> str:
    return " | ".join(t or "" for t in panel.locator(".gtitle").all_text_contents())


def test_a_number_out_of_a_sliders_range_is_moved_into_it(browser: Any, app_url: str) -> None:
    """9 typed into a 1..4 Head box was sent as typed, refused with a toast, and left a red
    "Error" pill over the figures."""
    context, page = _page(browser, app_url)
    try:
        page.get_by_role("tab", name="Attention", exact=True).click()
        _drawn(page, "Attention", 4, ("head 1",))
        panel = page.get_by_role("tabpanel")
        box = panel.get_by_label("number input for Head", exact=True)
        handle = panel.locator('input[type="range"][aria-label*="Head"]').first
        most = int(float(handle.get_attribute("max") or "0"))
        box.fill(str(most + 5))
        box.press("Enter")
        _poll(page, f"head {most} drawn", lambda: f"head {most}" in _titles(panel))
        _poll(page, "the page idle", lambda: not page.locator(BUSY).count())
        page.wait_for_timeout(500)
        assert box.input_value() == str(most)
        assert not _error_toasts(page)
        pills = [e for e in page.locator(".error").all() if e.is_visible()]
        assert not pills, [e.inner_text() for e in pills]
    finally:
        context.close()


def test_the_figures_fit_beside_the_tour_s_sidebar(
    browser: Any, app_url: str, screenshots: Path
) -> None:
    """At 1280×800 the opened sidebar cut Generate's next-token chart at 40 %: the figures kept
    the width they had before it opened."""
    from ui.tour import STOPS, label

    index = next(i for i, s in enumerate(STOPS) if s.tab == "Generate")
    context, page = _page(browser, app_url)
    try:
        page.get_by_role("button", name="▶ Guided tour").click()
        page.locator("#tour-menu input").click()
        page.get_by_role("option", name=label(index, STOPS[index]), exact=True).click()
        _drawn(page, "Generate", 4)
        page.wait_for_timeout(1500)  # the sidebar's slide and the figures' relayout
        panel = page.get_by_role("tabpanel")
        cut = []
        for plot in panel.locator(PLOT).all():
            if not plot.is_visible():
                continue
            svg = plot.locator("svg.main-svg").first.bounding_box()
            room = plot.locator("xpath=..").bounding_box()
            if svg and room and svg["x"] + svg["width"] > room["x"] + room["width"] + 2:
                cut.append((_titles(plot), svg["width"], room["width"]))
        page.screenshot(path=str(screenshots / "student-tour-generate.png"))
        assert not cut, f"figures wider than the room beside the sidebar: {cut}"
    finally:
        context.close()
