"""What the browser modules share: one Chromium and one app for the whole test session.

Starting Chromium and the app (with its shipped models) takes seconds on a 2-core machine, so
the browser modules share one of each for the whole test session; each test opens its own
browser context (its own gradio session), so tests still do not see each other's state.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ui.testing import CHROMIUM_ARGS, VIEWPORT, chromium, launched

ROOT = Path(__file__).resolve().parents[2]
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"  # written only with REFRESH_SCREENSHOTS=1
TIMEOUT_MS = 60_000  # generous: a 2-core CPU runs the models while the browser renders


def _browser_or_skip() -> tuple[Any, str]:
    """The playwright module and the chromium path, or a skip (a failure under REQUIRE_BROWSER=1)."""
    reason = None
    try:
        from playwright import sync_api
    except ImportError:
        sync_api, reason = None, "the playwright package is not installed (pip install playwright)"
    wanted, executable = chromium()
    if reason is None and executable is None:
        reason = f"no chromium at {wanted} or on PATH (Debian: apt-get install chromium)"
    if reason is not None:
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(f"REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    return sync_api, executable


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    sync_api, executable = _browser_or_skip()
    with sync_api.sync_playwright() as playwright:
        # launch() gives every run a fresh, temporary user-data-dir.
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def app(browser: Any) -> Iterator[tuple[str, Any]]:
    """The app launched once for every browser module: its address and the built demo."""
    from app import build_demo

    demo = build_demo("cpu")
    with launched(demo) as url:
        yield url, demo


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: a temporary folder, or the README's folder when
    ``REFRESH_SCREENSHOTS=1`` asks to refresh them."""
    if os.environ.get("REFRESH_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return DOCS_SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="session")
def app_url(app: tuple[str, Any]) -> str:
    return app[0]


@dataclass
class PageRecord:
    page: Any
    requests: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)


@pytest.fixture
def page(browser: Any, app_url: str) -> Iterator[PageRecord]:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    record = PageRecord(page)
    page.on("request", lambda request: record.requests.append(request.url))
    page.on("pageerror", lambda error: record.page_errors.append(str(error)))
    try:
        page.goto(app_url)
        page.get_by_role("tab", name="Tokenize").wait_for()
        yield record
    finally:
        context.close()
