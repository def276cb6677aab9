# ruff: noqa: F811  (test_browser's fixtures are imported by name, and used as arguments)
"""Typing into a control in a real browser (issue 23, item 13): a number typed into a slider's
box and confirmed with Enter redraws, as a drag of its handle does. Reuses ``test_browser``'s
browser, app and helpers."""

from __future__ import annotations

from typing import Any

import pytest
from test_browser import (  # noqa: F401  (fixtures, used by name)
    TIMEOUT_MS,
    VIEWPORT,
    _drawn,
    _poll,
    app,
    app_url,
    browser,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _titles(panel: Any) -> str:
    return " | ".join(t or "" for t in panel.locator(".gtitle").all_text_contents())


def test_enter_in_a_sliders_number_box_redraws(browser: Any, app_url: str) -> None:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(app_url)
        page.get_by_role("tab", name="Attention", exact=True).click()
        _drawn(page, "Attention", 4, ("head 1",))
        panel = page.get_by_role("tabpanel")
        for label, value, title in [("Head", "3", "head 3"), ("Layer", "3", "layer 3")]:
            box = panel.get_by_label(f"number input for {label}", exact=True)
            box.fill(value)  # typing fires .input per keystroke: nothing redraws yet
            box.press("Enter")
            _poll(page, f"{label} {value} drawn after Enter", lambda t=title: t in _titles(panel))
            _drawn(page, "Attention", 4, (title,))
            assert box.input_value() == value
        # The other slider kept its value: the heading names both.
        assert "layer 3" in _titles(panel) and "head 3" in _titles(panel)
    finally:
        context.close()
