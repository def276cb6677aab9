"""Typing into a control in a real browser: a number typed into a slider's box and confirmed
with Enter redraws, as a drag of its handle does; text pasted into a
textbox or erased from it redraws, as typed text does. Reuses ``test_browser``'s browser, app
and helpers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from test_browser import (
    TIMEOUT_MS,
    VIEWPORT,
    _drawn,
    _poll,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _titles(panel: Any) -> str:
    return " | ".join(t or "" for t in panel.locator(".gtitle").all_text_contents())


@contextlib.contextmanager
def _attention(browser: Any, url: str, *titles: str) -> Iterator[tuple[Any, Any]]:
    """A fresh page on the Attention tab, its first view drawn: (page, the tab's panel)."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(url)
        page.get_by_role("tab", name="Attention", exact=True).click()
        _drawn(page, "Attention", 4, titles)
        yield page, page.get_by_role("tabpanel")
    finally:
        context.close()


def test_enter_in_a_sliders_number_box_redraws(browser: Any, app_url: str) -> None:
    with _attention(browser, app_url, "head 1") as (page, panel):
        for label, value, title in [("Head", "3", "head 3"), ("Layer", "3", "layer 3")]:
            box = panel.get_by_label(f"number input for {label}", exact=True)
            box.fill(value)  # typing fires .input per keystroke: nothing redraws yet
            box.press("Enter")
            _poll(page, f"{label} {value} drawn after Enter", lambda t=title: t in _titles(panel))
            _drawn(page, "Attention", 4, (title,))
            assert box.input_value() == value
        # The other slider kept its value: the heading names both.
        assert "layer 3" in _titles(panel) and "head 3" in _titles(panel)


@pytest.mark.parametrize("how", ["paste", "backspace"])
def test_text_changed_without_a_key_press_redraws(browser: Any, app_url: str, how: str) -> None:
    """Gradio's textbox fires ``.input`` on a key press only: a sentence pasted in (with the
    menu, Ctrl+V or a phone's keyboard) and characters erased with Backspace changed the text
    and redrew nothing, the figures still those of the text before."""
    with _attention(browser, app_url) as (page, panel):
        panel.get_by_label("encoder self-attention", exact=True).check()
        _poll(page, "the encoder's view", lambda: "Encoder self-attention" in _titles(panel))
        _drawn(page, "Attention", 4)
        box = panel.get_by_label("One to three sentences", exact=False)
        head_view = panel.locator(".js-plotly-plot").filter(has_text="Encoder self-attention")

        def labels() -> list[str]:
            return head_view.first.locator(".yaxislayer-above .ytick text").all_text_contents()

        box.click()
        page.keyboard.press("ControlOrMeta+A")
        if how == "paste":  # text inserted as a paste or an on-screen keyboard inserts it
            page.keyboard.insert_text("a big dog sleeps")
            _poll(page, "the pasted sentence drawn", lambda: "0:▁a" in labels())
        else:
            page.keyboard.type("a big dog sleeps")
            _poll(page, "the typed sentence drawn", lambda: "0:▁a" in labels())
            _drawn(page, "Attention", 4)
            typed = len(labels())
            for _ in range(len(" sleeps")):
                page.keyboard.press("Backspace")
            assert box.input_value() == "a big dog"
            _poll(page, "the shorter sentence drawn", lambda: 0 < len(labels()) < typed)
