"""The page on a phone (390×844, touch) and what a phone's fixes must not change on a laptop.

On a phone: every tab's button on screen (no "⋯" menu), the title's words whole, no sideways
scrolling, and every figure the screen's width, its title inside it and clear of the toolbar,
its panel titles, colour bars and plot areas never over each other; checked by geometry, one
page for every tab. A screenshot of each tab is kept (``docs/screenshots/phone-<tab>.png`` with
``REFRESH_SCREENSHOTS=1``). On a laptop: the tables' headers break between words only, Large
font's sentence box shows every sentence, and the tour's Next is off at its last stop.
Reuses ``test_browser``'s browser, app and helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_browser import PLOTS_ON_OPEN, TABS, TIMEOUT_MS, _drawn, _poll

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 800}
# Pieces of several scripts: the table has more to say about each, and less room per column.
TOKENIZE_LINK = (
    "?tab=tokenize&text=%E2%98%95%EF%B8%8F%20caf%C3%A9%20%E7%BE%8E%E5%91%B3%20na%C3%AFve"
)
# Tabs whose first figure (in the page's order: Attention's head map, Generate's next-token
# chart) is the lecture's essential one, and starts on the first screen of a phone.
ESSENTIALS = ("Attention", "Generate")
# Where the plot area of the visible tab's first figure starts, the page scrolled to its top.
FIRST_PLOT_TOP_JS = """
() => {
  window.scrollTo(0, 0);
  const panel = [...document.querySelectorAll('[role=tabpanel]')]
    .find((e) => e.getBoundingClientRect().width > 0);
  const area = panel && panel.querySelector('.js-plotly-plot .nsewdrag');
  return area ? area.getBoundingClientRect().top : null;
}
"""
# A figure is at least the screen's width less the page's and its panel's margins.
MARGINS = 40

# Words of ``selector``'s text broken across lines: a letter on a line below the one before it,
# with no space between them ("Transforme / r", "piec / e").
BROKEN_WORDS_JS = """
(selector) => {
  const broken = [];
  for (const el of document.querySelectorAll(selector)) {
    if (!el.getBoundingClientRect().width) continue;
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let last = null;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.length; i++) {
        const ch = node.data[i];
        if (/\\s/.test(ch)) { last = null; continue; }
        const range = document.createRange();
        range.setStart(node, i); range.setEnd(node, i + 1);
        const box = range.getBoundingClientRect();
        if (!box.height) continue;
        if (last && box.top > last.top + last.height / 2 && /[\\p{L}\\p{N}]/u.test(last.ch)
            && /[\\p{L}\\p{N}]/u.test(ch))
          broken.push(`${el.textContent.trim().slice(0, 40)}: ${last.ch} / ${ch}`);
        last = {top: box.top, height: box.height, ch};
      }
    }
  }
  return broken;
}
"""

# The page's width and every tab button's box.
PAGE_JS = """
() => ({
  scroll: document.documentElement.scrollWidth, width: window.innerWidth,
  tabs: [...document.querySelectorAll('[role=tab]')].map((t) => {
    const b = t.getBoundingClientRect();
    return {name: t.textContent.trim(), left: b.left, right: b.right, width: b.width,
            shown: getComputedStyle(t).visibility !== 'hidden'};
  }),
  menu: [...document.querySelectorAll('.overflow-menu')]
    .filter((m) => m.getBoundingClientRect().width > 0).length,
})
"""

# Every figure of the visible panel (or of the element ``selector`` names): its width, and the
# boxes that must not overlap.
FIGURES_JS = """
(selector) => {
  const panel = selector ? document.querySelector(selector)
    : [...document.querySelectorAll('[role=tabpanel]')].find((e) => e.getBoundingClientRect().width > 0);
  const box = (e) => { const r = e.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 2
    && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 2;
  const out = [];
  for (const plot of panel.querySelectorAll('.js-plotly-plot')) {
    const svg = plot.querySelector('svg.main-svg');
    if (!svg || !svg.getBoundingClientRect().width) continue;
    const frame = box(svg);
    const title = plot.querySelector('.gtitle');
    const name = title ? title.textContent.slice(0, 50) : '(untitled)';
    const problems = [];
    if (title && title.textContent.trim()) {
      const t = box(title);
      if (t.left < frame.left - 1 || t.right > frame.right + 1 || t.top < frame.top - 1)
        problems.push('title cut at the figure\\'s edge');
      const bar = plot.querySelector('.modebar');
      if (bar && bar.getBoundingClientRect().width && overlap(t, box(bar)))
        problems.push('toolbar over the title');
    }
    const areas = [...plot.querySelectorAll('.nsewdrag')].map(box);
    const notes = [...plot.querySelectorAll('g.annotation')].map((a) => ({text: a.textContent, ...box(a)}))
      .filter((b) => b.right > b.left && b.bottom > b.top);
    const bars = [...plot.querySelectorAll('g.colorbar')].map(box)
      .filter((b) => b.right > b.left);
    for (const note of notes)
      if (note.right > frame.right + 1) problems.push(`"${note.text}" cut at the figure's edge`);
    for (let i = 0; i < notes.length; i++) for (let j = i + 1; j < notes.length; j++)
      if (overlap(notes[i], notes[j])) problems.push(`"${notes[i].text}" over "${notes[j].text}"`);
    for (const bar of bars) {
      if (areas.some((a) => overlap(a, bar))) problems.push('a colour bar over a plot');
      if (notes.some((n) => overlap(n, bar))) problems.push('a colour bar over a panel title');
      if (bar.right > frame.right + 1) problems.push('a colour bar cut at the edge');
    }
    for (let i = 0; i < areas.length; i++) for (let j = i + 1; j < areas.length; j++)
      if (overlap(areas[i], areas[j])) problems.push('two plot areas over each other');
    out.push({name, width: frame.right - frame.left, problems});
  }
  return out;
}
"""


# The sizes of the figures of the visible panel (or of ``selector``'s element) as drawn now:
# plotly redraws a figure once the page's narrow layout has given it its width.
SIZES_JS = """
(selector) => {
  const root = selector ? document.querySelector(selector)
    : [...document.querySelectorAll('[role=tabpanel]')].find((e) => e.getBoundingClientRect().width > 0);
  return [...root.querySelectorAll('.js-plotly-plot svg.main-svg')].map((svg) => {
    const r = svg.getBoundingClientRect(); return [r.left, r.width, r.height]; });
}
"""

# Which part? opens with every method's first example drawn on the bundled model (the
# comparison of two models waits for its button while the second is not loaded).
RESEARCH = ("Which part?", "which-part", 5)
# A cheap exercise (the bundled model's next token): with Predict first, its figure is hidden
# until the answer.
EXERCISE = "Next token · continue · the ca"


def _phone_tabs() -> list[tuple[str, str, int]]:
    """Every tab a phone opens: its label, its screenshot's name, the figures it opens with."""
    tabs = [(spec.tab, spec.slug, PLOTS_ON_OPEN[spec.tab]) for spec in TABS]
    return tabs if any(tab == RESEARCH[0] for tab, _, _ in tabs) else [*tabs, RESEARCH]


def _open(browser: Any, url: str, viewport: dict, phone: bool) -> tuple[Any, Any]:
    context = browser.new_context(viewport=viewport, has_touch=phone, is_mobile=phone)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.get_by_role("tab", name="Tokenize").wait_for()
    return context, page


def _settled(page: Any, what: str, plots: int, selector: str | None = None) -> None:
    """At least ``plots`` figures drawn and their sizes the same twice in a row (plotly done
    with its last relayout)."""
    last: list[Any] = []

    def steady() -> bool:
        sizes = page.evaluate(SIZES_JS, selector)
        same = len(sizes) >= plots and sizes == last
        last[:] = sizes
        return same

    _poll(page, f"{what}: {plots} figures drawn and still", steady)


def _fit_the_phone(page: Any, what: str, plots: int, selector: str | None = None) -> None:
    """Every figure (at least ``plots``) the screen's width less its margins, nothing in it
    over anything else, and the page not scrolling sideways."""
    figures = page.evaluate(FIGURES_JS, selector)
    assert len(figures) >= plots, (what, figures)
    for figure in figures:
        assert figure["width"] >= PHONE["width"] - MARGINS, (what, figure)
        assert not figure["problems"], (what, figure)
    width = page.evaluate(PAGE_JS)
    assert width["scroll"] <= width["width"], f"{what}: the page scrolls sideways"


def test_every_tab_reads_on_a_phone(browser: Any, app_url: str, screenshots: Path) -> None:
    context, page = _open(browser, app_url, PHONE, phone=True)
    tabs = _phone_tabs()
    try:
        # Every tab's button on screen, whole (gradio's overflow menu hidden once the narrow
        # layout applies).
        shown = _poll(
            page,
            "every tab on screen",
            lambda: (
                (found := page.evaluate(PAGE_JS))["tabs"]
                and not found["menu"]
                and all(tab["shown"] for tab in found["tabs"])
                and found
            ),
        )
        assert {tab["name"] for tab in shown["tabs"]} == {tab for tab, _, _ in tabs}
        for tab in shown["tabs"]:
            assert tab["left"] >= 0 and tab["right"] <= PHONE["width"], tab
        assert not page.evaluate(BROKEN_WORDS_JS, "#title h2")
        for tab, slug, plots in tabs:
            page.get_by_role("tab", name=tab, exact=True).click()
            _drawn(page, tab, plots)
            _settled(page, tab, plots)
            _fit_the_phone(page, tab, plots)
            if tab in ESSENTIALS:  # the lecture's essential figure starts on the first screen
                top = page.evaluate(FIRST_PLOT_TOP_JS)
                assert top is not None and top < PHONE["height"], (tab, top)
            page.screenshot(path=str(screenshots / f"phone-{slug}.png"), full_page=True)

        # The exercises below the tabs: Predict first hides the figure until the answer, then
        # shows it at the screen's width.
        page.get_by_text("Exercises: predict, then see").click()
        page.locator("#exercise-pick input").click()
        page.get_by_role("option", name=EXERCISE, exact=True).click()
        choices = page.locator("#exercise-choices input[type=radio]")
        choices.first.wait_for()
        assert page.locator("#exercise-predict-first input").is_checked()
        figure = page.locator("#exercise-figure .js-plotly-plot")
        assert not figure.count(), "the figure shown before the answer"
        choices.first.check()
        page.locator("#exercise-answer").click()
        figure.wait_for()
        _settled(page, "the exercise", 1, "#exercises")
        _fit_the_phone(page, "the exercise", 1, "#exercises")
        assert "The model's answer" in page.locator("#exercise-result").inner_text()
        page.locator("#exercises").screenshot(path=str(screenshots / "phone-exercises.png"))
    finally:
        context.close()


def test_a_laptop_keeps_headers_whole_sentences_shown_and_the_tour_bounded(
    browser: Any, app: tuple[str, Any]
) -> None:
    url, demo = app
    context, page = _open(browser, url + TOKENIZE_LINK, LAPTOP, phone=False)
    try:
        # The Tokenize table's headers in Large font: "start" once broke as "star / t".
        large = page.get_by_label("Large font (for projecting)")
        large.check()
        table = page.get_by_role("tabpanel").locator("table th")
        _poll(page, "the pieces table", lambda: table.count() > 0)
        page.wait_for_timeout(1000)
        assert not page.evaluate(BROKEN_WORDS_JS, "[role=tabpanel] table th")
        # No figure of a laptop is laid out for a phone.
        assert page.evaluate("() => document.documentElement.classList.contains('narrow')") is False
        large.uncheck()
        # Large font, ticked with Attention open, grows the sentence box with its text: the
        # third sentence stays in sight (gradio had fixed the box's height for the small font).
        page.get_by_role("tab", name="Attention", exact=True).click()
        box = page.get_by_role("tabpanel").get_by_label("One to three sentences", exact=False)
        box.wait_for()
        page.wait_for_timeout(500)
        large.check()
        page.wait_for_timeout(500)
        sizes = box.evaluate("(e) => [e.scrollHeight, e.clientHeight]")
        assert sizes[0] <= sizes[1] + 1, f"text {sizes[0]} px in a box of {sizes[1]} px"
        # The tour's last stop: Next is off (it only reloaded the same stop).
        tour = demo.tour
        page.get_by_role("button", name="▶ Guided tour").click()
        page.locator("#tour-menu input").click()
        page.get_by_role("option", name=tour.names[-1], exact=True).click()
        last = f"{len(tour.stops)} / {len(tour.stops)}"
        _poll(page, "the last stop", lambda: last in page.locator("#tour-text").inner_text())
        next_button = page.locator("#tour-next")
        _poll(page, "Next disabled", lambda: next_button.is_disabled())
        assert page.locator("#tour-prev").is_enabled()
    finally:
        context.close()
