"""Inside a layer's compare mode in a real browser: the switch draws the paper's
block beside SmolLM2's, both columns with their code lines and the differing ones highlighted,
side by side on a laptop and in Large font at 1920×1080, stacked beside the tour's sidebar; a
link with ``compare=1`` reopens it. Saves ``block-diff.png`` (``REFRESH_SCREENSHOTS=1`` writes
it to ``docs/screenshots/`` for the README)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_browser import (
    BUSY,
    _drawn,
    _poll,
    _smollm2_or_skip,
)
from test_browser_layout import LAPTOP, PROJECTOR, _opened

from ui.tabs.inside.compare import LABEL

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TAB = "Inside a layer"
VIEW = "#block-diff"


def _compared(page: Any) -> dict[str, Any]:
    """Wait for the comparison, then what it shows: rows, sides, highlighted code lines, and
    the horizontal positions of the first row's two sides."""
    view = page.locator(VIEW)

    def ready() -> bool:
        return (
            view.count() == 1
            and view.is_visible()
            and view.locator(".bd-row").count() > 10
            and not page.locator(BUSY).count()
        )

    _poll(page, "the comparison drawn", ready)
    first = view.locator(".bd-row").first.locator(".bd-side")
    boxes = [first.nth(i).bounding_box() for i in range(first.count())]
    return {
        "rows": view.locator(".bd-row").count(),
        "sides": view.locator(".bd-side").count(),
        "differs": view.locator(".bd-code.bd-differs").count(),
        "codes": view.locator(".bd-code").count(),
        "text": view.inner_text(),
        "boxes": boxes,
    }


def _side_by_side(boxes: list[dict]) -> bool:
    left, right = boxes
    return right["x"] >= left["x"] + left["width"] - 1 and abs(right["y"] - left["y"]) < 5


def _switch_on(page: Any) -> None:
    page.get_by_role("tab", name=TAB, exact=True).click()
    _drawn(page, TAB, 2)
    switch = page.get_by_role("tabpanel").get_by_label(LABEL, exact=True)
    switch.check()


def test_compare_mode_draws_both_blocks_side_by_side(
    browser: Any, app: tuple[str, Any], screenshots: Path
) -> None:
    _smollm2_or_skip(app)
    with _opened(browser, app[0], LAPTOP) as page:
        _switch_on(page)
        shown = _compared(page)
        assert shown["sides"] == 2 * shown["rows"]
        assert 0 < shown["differs"] < shown["codes"]  # some lines differ, some are the same
        text = shown["text"]
        assert "2017 · translate" in text and "today · SmolLM2-135M-Instruct" in text
        assert "LayerNorm" in text and "RMSNorm" in text and "gate ⊙ up" in text
        assert "transformer/core/modern.py:" in text  # the modern side's code lines
        assert _side_by_side(shown["boxes"]), shown["boxes"]
        # Readable: the columns are wide enough for a code line's words.
        assert min(box["width"] for box in shown["boxes"]) > 350
        page.locator(VIEW).scroll_into_view_if_needed()
        page.locator(VIEW).evaluate("e => e.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(500)
        page.screenshot(path=str(screenshots / "block-diff.png"))
        # A narrow page (a tablet, the tour's sidebar open): the columns stack, not squeeze.
        page.set_viewport_size({"width": 900, "height": 800})
        page.wait_for_timeout(1000)
        first = page.locator(VIEW).locator(".bd-row").first.locator(".bd-side")
        boxes = [first.nth(i).bounding_box() for i in range(2)]
        assert boxes[1]["y"] >= boxes[0]["y"] + boxes[0]["height"] - 1, boxes
        assert min(box["width"] for box in boxes) > 350
        page.set_viewport_size(LAPTOP)
        # Switched off, the comparison goes.
        page.get_by_role("tabpanel").get_by_label(LABEL, exact=True).uncheck()
        _poll(page, "the comparison hidden", lambda: not page.locator(VIEW).is_visible())


def test_compare_mode_in_large_font_on_a_projector(
    browser: Any, app: tuple[str, Any], tmp_path: Path
) -> None:
    _smollm2_or_skip(app)
    with _opened(browser, app[0], PROJECTOR, large=True) as page:
        _switch_on(page)
        shown = _compared(page)
        assert _side_by_side(shown["boxes"]), shown["boxes"]
        size = page.locator(VIEW).evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
        assert size >= 20  # Large font reaches the comparison
        page.locator(VIEW).evaluate("e => e.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(500)
        page.screenshot(path=str(tmp_path / "block-diff-large.png"))  # to look at, not the README


def test_a_link_with_compare_on_reopens_the_comparison(browser: Any, app: tuple[str, Any]) -> None:
    _smollm2_or_skip(app)
    with _opened(browser, f"{app[0]}?tab=inside&model=reverse&compare=1", LAPTOP) as page:
        shown = _compared(page)
        assert "2017 · reverse" in shown["text"]
        switch = page.get_by_role("tabpanel").get_by_label(LABEL, exact=True)
        assert switch.is_checked()
