"""Attention at scale in a real browser: a ~2,000-token text in SmolLM2 on the Attention tab's
long-input section draws the every-head overview, one head whole, a zoomed window of queries
and rollout; moving the window redraws it from the cached pass.

To refresh the README's screenshot (``docs/screenshots/attention-scale.png``), run

    REFRESH_SCREENSHOTS=1 python -m pytest tests/system/test_browser_scale.py
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import test_browser as base
from conftest import REPOSITORY as ROOT
from test_browser import BUSY, SMOLLM2, _error_toasts, _open, _poll, _smollm2_or_skip

# The browser, the app and the screenshots folder are test_browser's module fixtures.

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PASS_TIMEOUT_S = 300  # SmolLM2's pass over 2,000 tokens: 35 s alone, minutes on a loaded machine


def _long_text(app: tuple[str, Any], n_tokens: int = 2_000) -> tuple[str, int]:
    """The README repeated, cut to about ``n_tokens`` SmolLM2 tokens, and its length."""
    checkpoint = app[1].model_registry.checkpoint(SMOLLM2, None)
    tokenizer = checkpoint.tokenizer
    ids = tokenizer.encoding((ROOT / "README.md").read_text(encoding="utf-8")).ids
    while len(ids) < n_tokens:
        ids = ids + ids
    text = tokenizer.decode(ids[: n_tokens - 2])
    # as the model reads it: SmolLM2's file puts no [BOS] in front
    return text, len(tokenizer.encode_ids(text, add_bos=checkpoint.config.prompt_bos))


def _what_the_page_and_server_show(page: Any, panel: Any) -> str:
    """What a failed wait saw: the overlays still waiting, the figures' titles, the section's
    text and what every thread of the server (it runs in this process) was doing."""
    import sys
    import traceback

    threads = "\n".join(
        f"--- thread {ident}\n" + "".join(traceback.format_stack(frame)[-6:])
        for ident, frame in sys._current_frames().items()
    )
    return (
        f"waiting overlays: {page.locator(BUSY).count()}\ntitles: {_titles(panel)}\n"
        f"text: …{panel.inner_text()[-3_000:]}\nthe server's threads:\n{threads}"
    )


def _titles(section: Any) -> str:
    return " | ".join(t or "" for t in section.locator(".gtitle").all_text_contents())


def test_a_long_text_in_smollm2_draws_overview_window_and_head(
    browser: Any, app: tuple[str, Any], screenshots: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _smollm2_or_skip(app)
    # test_browser's waits, made long enough for the pass (its _poll reads this at each call).
    monkeypatch.setattr(base, "TIMEOUT_MS", PASS_TIMEOUT_S * 1000)
    text, length = _long_text(app)
    assert 1_900 <= length <= 2_048
    # Not through a link: a link's settling pass may set the text box back to the link's value
    # after the text is typed (a known race between the two).
    context, page = _open(browser, app[0])
    try:
        page.get_by_role("tab", name="Attention", exact=True).click()
        panel = page.get_by_role("tabpanel")
        page.get_by_text("Long inputs: every head at once", exact=False).first.click()
        # The controls' ids are the link keys' (ui.links.share names them "attention-<key>").
        box = page.locator("#attention-scale_text textarea")
        _poll(page, "the long-input section open", box.is_visible)
        limit = panel.get_by_text("Longest input", exact=False).first
        assert "2,048 tokens" in limit.inner_text()  # said before it is reached
        # Opening the section draws its own example first: typed before it is drawn, the text
        # would race that draw on a loaded machine.
        _poll(
            page,
            "the section's example drawn",
            lambda: not page.locator(BUSY).count() and "Every head" in _titles(panel),
        )
        box.fill(text)
        panel.get_by_role("button", name="Show every head").click()
        summary = f"{length:,} tokens, 30 layers × 9 heads = 270 heads"
        wanted = ("Every head", f"all {length:,} tokens", "queries 0–31", "Attention rollout")
        # The figures and the summary are separate outputs: a loaded machine may show the
        # figures a moment before the summary's text.
        try:
            _poll(
                page,
                "overview, head, window, rollout and summary drawn",
                lambda: (
                    not page.locator(BUSY).count()
                    and all(words in _titles(panel) for words in wanted)
                    and summary in panel.inner_text()
                ),
            )
        except AssertionError as error:
            page.screenshot(path=str(screenshots / "attention-scale-failed.png"), full_page=True)
            raise AssertionError(
                f"{error}\n{_what_the_page_and_server_show(page, panel)}"
            ) from None
        assert re.search(r"each cell the mean of \d+ × \d+ weights", _titles(panel))
        page.wait_for_timeout(500)
        # The section's header at the top of the screen: the controls and the overview below it.
        page.get_by_text("Long inputs: every head at once", exact=False).first.evaluate(
            "element => element.scrollIntoView({block: 'start'})"
        )
        page.screenshot(path=str(screenshots / "attention-scale.png"), full_page=False)
        # Zoom: the window moves to queries 1000.. from the cached pass.
        first = page.locator("#attention-scale_first_query input")
        first.fill("1000")
        first.press("Enter")
        first.press("Tab")  # leaving the box redraws too (the latest value wins)
        try:
            _poll(page, "the zoomed window", lambda: "queries 1000–1031" in _titles(panel))
        except AssertionError:
            said = [s.inner_text() for s in page.locator(".input-status").all()]
            raise AssertionError(f"no zoomed window; status lines {said}") from None
        assert not _error_toasts(page)
    finally:
        context.close()
