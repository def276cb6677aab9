"""Generate's silent-mistake and key/value-cache panels in a real browser, on SmolLM2: a silent
mistake switched on shows the continuation correct vs broken and the meter; a Step grows the
cache view. Saves ``silent-mistakes.png`` and ``kv-cache.png`` (the README's, with
``REFRESH_SCREENSHOTS=1``). Reuses ``test_browser``'s browser, app and helpers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from test_browser import (
    BUSY,
    _drawn,
    _open,
    _poll,
    _smollm2_or_skip,
)

from transformer.lab.silent_mistakes import ROTARY_NO_OFFSET

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _positions(page: Any) -> int | None:
    """The cache length the cache view shows (``now (N positions)``), or None."""
    found = re.search(r"now \((\d+) positions", page.locator("#kv-cache-table").inner_text())
    return int(found.group(1)) if found else None


def test_a_silent_mistake_shows_its_meter_and_a_step_grows_the_cache(
    browser: Any, app: tuple[str, Any], screenshots: Path
) -> None:
    _smollm2_or_skip(app)
    context, page = _open(browser, f"{app[0]}?tab=generate")
    try:
        panel = page.get_by_role("tabpanel")
        _drawn(page, "Generate", 3)
        page.wait_for_timeout(1500)  # the link's view is applied twice: let it settle first
        _poll(page, "the page idle", lambda: not page.locator(BUSY).count())
        panel.get_by_text("Silent mistakes (modern models)").click()
        meter = page.locator("#silent-meter")
        text = page.locator("#silent-continuation")
        # Opening the panel draws its first mistake (seconds on SmolLM2): a student sees it,
        # then chooses another.
        _poll(page, "the panel drawn on opening", lambda: "perplexity" in meter.inner_text())
        menu = panel.get_by_label("Silent mistake")
        menu.click()  # typed, then Enter: the menu's list opens at the foot of the page
        menu.fill(ROTARY_NO_OFFSET.label)
        menu.press("Enter")
        _poll(
            page,
            "the meter of the chosen mistake",
            lambda: (
                ROTARY_NO_OFFSET.label in meter.inner_text() and "perplexity" in meter.inner_text()
            ),
        )
        _poll(page, "the continuation", lambda: ROTARY_NO_OFFSET.label in text.inner_text())
        assert "Paris" in text.inner_text() and "correct" in text.inner_text()
        page.wait_for_timeout(500)
        page.locator("#silent-mistakes").screenshot(path=str(screenshots / "silent-mistakes.png"))

        panel.get_by_text("Key/value cache: prefill, decode, bytes, time").click()
        before = _poll(page, "the cache view", lambda: _positions(page))
        assert "agree" in page.locator("#kv-cache-check").inner_text()
        panel.get_by_role("button", name="Step", exact=True).click()
        page.wait_for_timeout(300)
        _poll(page, "the cache grown by the step", lambda: (_positions(page) or 0) > before)
        _poll(page, "the step drawn", lambda: not page.locator(BUSY).count())
        steps = page.locator("#kv-cache-steps").inner_text()
        assert "prefill" in steps and "decode" in steps
        assert "full multi-head" in page.locator("#kv-cache-table").inner_text()
        page.wait_for_timeout(500)
        page.locator("#kv-cache").screenshot(path=str(screenshots / "kv-cache.png"))
    finally:
        context.close()
