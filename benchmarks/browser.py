"""Click-to-drawn times in a real browser, against the API time of the same handler.

Run: ``python -m benchmarks.browser`` (Debian's ``chromium`` and Python ``playwright``; set
``CHROMIUM=/path`` for another build). The app is launched in-process on loopback, the browser
drives it as a student would, and each measured action waits until the page is *drawn*: gradio's
pending overlays gone, the expected text shown, and no plotly render and no DOM change in the
tab for ``QUIET_MS`` (the time reported is the last of those, not the end of the quiet window).
The API time is the same endpoint called through ``gradio_client`` against the same server.

Measured: Generate Step, Generate Run to the end (18 tokens on the first example), an Attention
control (the "no √d scaling" what-if), the guided tour's Next, and a link opening on its view.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from ui.testing import CHROMIUM_ARGS, CROSS, GENERATE, VIEWPORT, chromium, launched

BUSY = ".wrap.default:not(.hide), .wrap.center:not(.hide)"
QUIET_MS = 600
TIMEOUT_S = 120

# Installed in every page: the time of the last plotly render (react / resize resolved) and of
# the last DOM change, so "drawn" means the browser finished, not that the response arrived.
PROBE = """
(() => {
  window.__last = performance.now();
  window.__renders = 0;
  const touch = () => { window.__last = performance.now(); };
  new MutationObserver(touch).observe(document, {subtree: true, childList: true,
                                                 characterData: true, attributes: true});
  const wrap = () => {
    const P = window.Plotly;
    if (!P || P.__wrapped) return;
    for (const name of ['react', 'newPlot']) {
      const original = P[name];
      P[name] = function (...args) {
        window.__renders += 1;
        const out = original.apply(this, args);
        Promise.resolve(out).then(touch);
        return out;
      };
    }
    P.__wrapped = true;
  };
  setInterval(wrap, 20);
})();
"""


def _drawn(page: Any, t0: float, check: Callable[[], bool]) -> float:
    """Seconds from ``t0`` (page clock, ms) until the tab was drawn (see the module doc)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        if page.locator(BUSY).count() == 0 and check():
            now, last = page.evaluate("[performance.now(), window.__last]")
            if now - last >= QUIET_MS:
                return max(last - t0, 0.0) / 1000
        if time.monotonic() > deadline:
            raise TimeoutError("the page was not drawn in time")
        page.wait_for_timeout(50)


def _click(page: Any, locator: Any) -> float:
    """Click and return the page's clock (ms) just before the click."""
    locator.wait_for()
    t0 = page.evaluate("performance.now()")
    locator.click()
    return t0


def _settle(page: Any, check: Callable[[], bool] = lambda: True) -> None:
    _drawn(page, 0.0, check)


def _api(call: Callable[[], Any], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _row(name: str, browser_s: list[float], api_s: float | None) -> str:
    median = statistics.median(browser_s)
    ratio = f"{median / api_s:6.1f}×" if api_s else "     –"
    api = f"{api_s:6.2f}" if api_s is not None else "     –"
    spread = f"{min(browser_s):.2f}–{max(browser_s):.2f}"
    return f"| {name:<34} | {median:6.2f} ({spread}) | {api} | {ratio} |"


def main() -> None:
    """Launch the app, drive Chromium through each measured action, print a Markdown table."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from gradio_client import Client
    from playwright.sync_api import sync_playwright

    from app import build_demo

    _, executable = chromium()
    if executable is None:
        sys.exit("no chromium found: apt-get install chromium, or set CHROMIUM=/path")
    with launched(build_demo("cpu")) as url:
        client = Client(url, verbose=False)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            try:
                rows = _measure(browser, url, client)
            finally:
                browser.close()
    print(f"Browser: Chromium headless {VIEWPORT['width']}×{VIEWPORT['height']}; cores: ", end="")
    print(os.cpu_count())
    print("| action | browser s, median (min–max) | API s | browser / API |")
    print("|---|---|---|---|")
    print("\n".join(rows))


@contextlib.contextmanager
def _page(browser: Any, url: str) -> Iterator[Any]:
    """A fresh page of the app at ``url``, its tabs shown; its browser context closed after."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        context.add_init_script(PROBE)
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_S * 1000)
        page.goto(url)
        page.get_by_role("tab", name="Tokenize").wait_for()
        yield page
    finally:
        context.close()


def _generate(browser: Any, url: str, client: Any, steps: int) -> list[str]:
    """Generate: Step, then Run to the end."""
    rows = []
    with _page(browser, url) as page:
        page.get_by_role("tab", name="Generate", exact=True).click()
        panel = page.get_by_role("tabpanel")
        _settle(page, lambda: "Output so far (1 step)" in panel.inner_text())
        # The tab may open on another model (SmolLM2 when installed): the lecture example that
        # the API calls below use is clicked (it runs its first step).
        source = panel.get_by_label("Prompt, or source sentence to translate")
        if source.input_value() != GENERATE[0]:
            panel.get_by_text(GENERATE[0], exact=True).last.click()
            _settle(
                page,
                lambda: (
                    source.input_value() == GENERATE[0]
                    and "Output so far (1 step)" in panel.inner_text()
                    and "le" in panel.inner_text()
                ),
            )
        button = panel.get_by_role("button", name="Step", exact=True)
        times = []
        for n in range(2, 2 + steps):
            t0 = _click(page, button)
            text = f"Output so far ({n} steps)"
            times.append(_drawn(page, t0, lambda t=text: t in panel.inner_text()))
        api_step = _api(lambda: client.predict(*GENERATE, api_name="/generate_step"), steps)
        rows.append(_row("Generate: Step", times, api_step))
        times = []
        for _ in range(int(os.environ.get("BENCH_RUNS", "2"))):
            t0 = _click(page, panel.get_by_role("button", name="Reset", exact=True))
            _drawn(page, t0, lambda: "Press **Step**" in panel.inner_text() or True)
            t0 = _click(page, panel.get_by_role("button", name="Run to the end", exact=True))
            times.append(_drawn(page, t0, lambda: "Finished" in panel.inner_text()))
        summary = panel.inner_text()
        n_tokens = summary.split("Output so far (")[1].split(" step")[0]

        def api_run() -> None:
            client.predict(*GENERATE, api_name="/generate_reset")
            list(client.submit(*GENERATE, api_name="/generate"))

        rows.append(_row(f"Generate: Run to the end ({n_tokens} tokens)", times, _api(api_run, 2)))
    return rows


def _attention(browser: Any, url: str, client: Any, steps: int) -> list[str]:
    """Attention: the "no √d scaling" what-if."""
    rows = []
    with _page(browser, url) as page:
        page.get_by_role("tab", name="Attention", exact=True).click()
        panel = page.get_by_role("tabpanel")
        _settle(page, lambda: panel.locator(".js-plotly-plot").count() >= 4)
        box = panel.get_by_label("no √d scaling", exact=True)
        times = []
        for _ in range(steps):
            t0 = _click(page, box)
            times.append(_drawn(page, t0, lambda: True))
        defaults = ["the cat sat on the mat", "translate", CROSS, 1, 1, 1]
        api = _api(
            lambda: client.predict(*defaults, ["no √d scaling"], False, api_name="/attention"),
            steps,
        )
        rows.append(_row("Attention: a what-if checkbox", times, api))
    return rows


def _tour(browser: Any, url: str, client: Any, steps: int) -> list[str]:
    """The guided tour's Next."""
    rows = []
    with _page(browser, url) as page:
        page.get_by_role("button", name="▶ Guided tour").click()
        text = page.locator("#tour-text")
        _settle(page, lambda: "1 / " in text.inner_text())
        times = []
        for index in range(2, 2 + steps):
            t0 = _click(page, page.locator("#tour-next"))
            times.append(_drawn(page, t0, lambda i=index: f"{i} / " in text.inner_text()))
        rows.append(_row(f"Tour: Next (stops 2–{1 + steps})", times, None))
    return rows


# Installed in a link's page: the time of the first frame after the link's figures (their
# titles name its layer and head) are in the page and its tab is no longer hidden, taken in
# the page as the other actions' times are, not when a poll through Playwright (which waits
# behind the page's own tasks) first saw them.
LINK_SHOWN = """
(() => {
  const wanted = WANTED;
  const shown = () => {
    if (document.documentElement.classList.contains('link-pending')) return false;
    const titles = [...document.querySelectorAll('.gtitle')].map((e) => e.textContent).join(' ');
    return wanted.every((w) => titles.includes(w));
  };
  const observer = new MutationObserver(() => {
    if (!shown()) return;
    observer.disconnect();
    requestAnimationFrame(() => { window.__shown = performance.now(); });
  });
  observer.observe(document, {subtree: true, childList: true, characterData: true,
                              attributes: true, attributeFilter: ['class']});
})();
"""


def _link(browser: Any, url: str, client: Any, steps: int) -> list[str]:
    """A link opening on its view."""
    rows = []
    query = "tab=attention&model=translate&kind=cross-attention+(decoder+→+encoder)&layer=3&head=2"
    wanted = ["layer 3", "head 2"]
    first, polled, quiet = [], [], []
    for _ in range(int(os.environ.get("BENCH_LINKS", "3"))):
        context = browser.new_context(viewport=VIEWPORT)
        context.add_init_script(PROBE)
        context.add_init_script(LINK_SHOWN.replace("WANTED", json.dumps(wanted)))
        try:
            page = context.new_page()
            page.goto(f"{url}?{query}")  # the page clock starts at navigation

            def shown(p: Any = page) -> bool:
                titles = " ".join(p.locator(".gtitle").all_text_contents())
                return all(w in titles for w in wanted)

            # Its own view first: the time the link's figures are on screen, then the time
            # the page is quiet (the settling that follows, if any, done).
            deadline = time.monotonic() + TIMEOUT_S
            while not page.evaluate("window.__shown !== undefined"):
                if time.monotonic() > deadline:
                    raise TimeoutError("the link's view was not drawn in time")
                page.wait_for_timeout(25)
            polled.append(page.evaluate("performance.now()") / 1000)
            first.append(page.evaluate("window.__shown") / 1000)
            _drawn(page, 0.0, shown)
            quiet.append(page.evaluate("window.__last") / 1000)
        finally:
            context.close()
    rows.append(_row("Link: its own view drawn", first, None))
    rows.append(_row("Link: … seen by a poll", polled, None))
    rows.append(_row("Link: page quiet", quiet, None))
    return rows


SECTIONS: dict[str, Callable[[Any, str, Any, int], list[str]]] = {
    "generate": _generate,
    "attention": _attention,
    "tour": _tour,
    "link": _link,
}


def _measure(browser: Any, url: str, client: Any) -> list[str]:
    """Every measured action's rows (``BENCH_ONLY=link,tour`` picks some of them)."""
    steps = int(os.environ.get("BENCH_STEPS", "4"))
    wanted = os.environ.get("BENCH_ONLY", ",".join(SECTIONS)).split(",")
    rows = []
    for name in wanted:
        rows += SECTIONS[name.strip()](browser, url, client, steps)
    return rows


if __name__ == "__main__":
    main()
