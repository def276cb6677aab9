"""The page's layout in a real browser: what a lecturer projecting at
1920×1080 in Large font sees first, where the tour's stops scroll to, and what fits beside the
tour's sidebar on a 1280 px laptop. Reuses ``test_browser``'s browser, app and helpers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from test_browser import (
    BUSY,
    PLOT,
    TIMEOUT_MS,
    _drawn,
    _poll,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECTOR = {"width": 1920, "height": 1080}
LAPTOP = {"width": 1280, "height": 800}


def _open(browser: Any, url: str, viewport: dict, large: bool = False) -> tuple[Any, Any]:
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.get_by_role("tab", name="Tokenize").wait_for()
    if large:
        page.get_by_label("Large font (for projecting)").check()
    return context, page


@contextlib.contextmanager
def _opened(browser: Any, url: str, viewport: dict, large: bool = False) -> Iterator[Any]:
    """The page :func:`_open` opens, its browser context closed when the block ends."""
    context, page = _open(browser, url, viewport, large)
    try:
        yield page
    finally:
        context.close()


def _visible_panel(page: Any) -> Any:
    return page.get_by_role("tabpanel")


@pytest.fixture
def projector(browser: Any, app_url: str) -> Iterator[Any]:
    context, page = _open(browser, app_url, PROJECTOR, large=True)
    try:
        yield page
    finally:
        context.close()


@pytest.mark.parametrize("tab, plots", [("Attention", 4), ("Inside a layer", 2)])
def test_the_first_figure_is_above_the_fold_in_projector_mode(
    projector: Any, tab: str, plots: int
) -> None:
    """At 1920×1080 in Large font the first screen must not be all controls."""
    projector.get_by_role("tab", name=tab, exact=True).click()
    _drawn(projector, tab, plots)
    projector.wait_for_timeout(1000)  # Large font's redraw settles
    _drawn(projector, tab, plots)
    # A redraw may be replacing the plot at this moment (no box while it is detached).
    first = _poll(
        projector,
        "the first figure laid out",
        lambda: _visible_panel(projector).locator(PLOT).first.bounding_box(),
    )
    # At least a third of the screen's height shows the figure before any scrolling.
    assert first["y"] + PROJECTOR["height"] / 3 <= PROJECTOR["height"], first


def test_the_feed_forward_and_residual_stops_scroll_to_their_section(
    browser: Any, app: tuple[str, Any]
) -> None:
    """Those stops must not open Inside a layer at its top, 2,000 px above the section."""
    url, demo = app
    tour = demo.tour
    context, page = _open(browser, url, LAPTOP)
    try:
        page.get_by_role("button", name="▶ Guided tour").click()
        text = page.locator("#tour-text")
        for topic in ("feed-forward", "residual"):
            index = next(i for i, s in enumerate(tour.stops) if topic in s.title.lower())
            page.locator("#tour-menu input").click()
            page.get_by_role("option", name=tour.names[index], exact=True).click()
            title = tour.stops[index].title
            _poll(page, title, lambda t=title: t in text.inner_text())
            _drawn(page, "Inside a layer", 2)
            section = page.locator("#inside-section-feed-forward")

            def in_view(section: Any = section) -> bool:
                box = section.bounding_box()
                return box is not None and -5 <= box["y"] <= LAPTOP["height"] / 2

            _poll(page, f"'{title}' scrolled to the feed-forward section", in_view)
    finally:
        context.close()


HEADER_SWITCH_JS = """
() => {
  const label = document.querySelector('#large-font label .label-text');
  const text = label.getBoundingClientRect();
  const bar = document.getElementById('top-bar').getBoundingClientRect();
  return {lines: Math.round(text.height / parseFloat(getComputedStyle(label).lineHeight)),
          right: text.right, edge: bar.right};
}
"""


@pytest.mark.parametrize("viewport", [PROJECTOR, LAPTOP], ids=["1920", "1280"])
def test_the_large_font_switch_reads_on_one_line_once_on(
    browser: Any, app_url: str, viewport: dict
) -> None:
    """Once on, the switch's label grew with the font it turns on and wrapped onto two lines in
    the 260 px gradio gave it. Widening the switch alone let the label run past the header's
    right edge (gradio's form around it kept 260 px), so both are checked."""
    context, page = _open(browser, app_url, viewport, large=True)
    try:
        page.wait_for_timeout(500)
        switch = page.evaluate(HEADER_SWITCH_JS)
        assert switch["lines"] == 1 and switch["right"] <= switch["edge"] + 1, switch
    finally:
        context.close()


LABEL_LINES_JS = """
(id) => {
  const label = document.querySelector(`#${id} label .label-text`);
  return Math.round(label.getBoundingClientRect().height
                    / parseFloat(getComputedStyle(label).lineHeight));
}
"""


@pytest.mark.parametrize(
    "viewport, large", [(LAPTOP, False), (PROJECTOR, True)], ids=["laptop", "projector"]
)
def test_the_compare_switch_reads_on_one_line(
    browser: Any, app_url: str, viewport: dict, large: bool
) -> None:
    """Inside a layer's compare switch wrapped at 1280 px ("… (2017 ↔" over "today)") once
    the model menu beside it was widened."""
    context, page = _open(browser, app_url, viewport, large=large)
    try:
        page.get_by_role("tab", name="Inside a layer", exact=True).click()
        page.locator("#inside-compare label .label-text").wait_for()
        page.wait_for_timeout(500)
        assert page.evaluate(LABEL_LINES_JS, "inside-compare") == 1
    finally:
        context.close()


# Tables (gradio's dataframes and example tables) and the code panel, per tab to look at.
FITS = "table, .cm-editor"
OVERFLOW_JS = """
(selector) => {
  const panel = [...document.querySelectorAll('[role=tabpanel]')]
    .find((e) => e.getBoundingClientRect().width > 0);
  const right = panel.getBoundingClientRect().right;
  const cut = [];
  for (const el of panel.querySelectorAll(selector)) {
    const box = el.getBoundingClientRect();
    if (!box.width) continue;
    // Past the panel's right edge, or wider than the box that shows it (cut, not wrapped).
    const scroller = el.querySelector('.cm-scroller') || el;
    if (box.right > right + 2 || scroller.scrollWidth > scroller.clientWidth + 2)
      cut.push(`${el.tagName}.${el.className}: right ${Math.round(box.right)} > ${Math.round(right)}`
               + ` or ${scroller.scrollWidth} > ${scroller.clientWidth}`);
  }
  return cut;
}
"""


def test_tables_and_code_fit_beside_the_tour_sidebar(browser: Any, app_url: str) -> None:
    """With the tour's sidebar open at 1280 px, tables and the code panel must not be cut off
    on the right."""
    context, page = _open(browser, app_url, LAPTOP)
    try:
        page.get_by_role("button", name="▶ Guided tour").click()
        _poll(page, "the tour open", lambda: "1 / " in page.locator("#tour-text").inner_text())
        _drawn(page, "Tokenize", 0)  # the first stop applied (it selects the Tokenize tab)
        page.wait_for_timeout(2000)
        _drawn(page, "Tokenize", 0)
        for tab, plots in [("Generate", 3), ("Model & training", 2), ("Inside a layer", 2)]:
            page.get_by_role("tab", name=tab, exact=True).click()
            _drawn(page, tab, plots)
            page.wait_for_timeout(1500)
            cut = page.evaluate(OVERFLOW_JS, FITS)
            assert not cut, f"{tab}: {cut}"
    finally:
        context.close()


def test_the_step_by_step_self_attention_is_readable_in_large_font(
    browser: Any, app_url: str
) -> None:
    """In Large font the first steps' plot was once 100 × 60 px, a label and the colour
    bar's numbers lost."""
    context, page = _open(browser, app_url, LAPTOP, large=True)
    try:
        page.get_by_role("tab", name="Generate", exact=True).click()
        _drawn(page, "Generate", 3)
        panel = _visible_panel(page)
        for _ in range(2):
            panel.get_by_role("button", name="Step", exact=True).click()
            page.wait_for_timeout(500)
            _poll(page, "the step drawn", lambda: not page.locator(BUSY).count())
        plot = panel.locator(PLOT).filter(has_text="step by step").first

        def labels() -> set[str]:
            return set(plot.locator(".yaxislayer-above .ytick text").all_text_contents())

        # A loaded machine showed the busy mark only after the half second: the second step's
        # figure came after the check for it.
        _poll(page, "a query label for each of 3 rows", lambda: len(labels()) == 3, labels)
        area = plot.locator(".nsewdrag").first.bounding_box()
        assert area is not None
        assert area["width"] >= 250 and area["height"] >= 200, area
    finally:
        context.close()


def test_every_row_of_a_short_head_view_keeps_its_label_in_large_font(projector: Any) -> None:
    """In Large font a 13-token head view kept the laptop's height per row (21 px for 19 px
    labels) and plotly left out every other query label; each row is labelled now."""
    projector.get_by_role("tab", name="Attention", exact=True).click()
    _drawn(projector, "Attention", 4)
    # Large font's redraw of the first view (started when the fixture turned it on) may still
    # be running: it must not draw the first view over the new sentence's (ui.serving.ordering).
    panel = _visible_panel(projector)
    panel.get_by_label("One to three sentences", exact=False).fill("the small cat sees a red ball")
    # The new sentence's redraw may draw the kind's radio again under a click: click until the
    # page shows it chosen (a loaded machine lost the first click).
    radio = panel.get_by_label("encoder self-attention", exact=True)

    def chosen() -> bool:
        if not projector.locator(BUSY).count() and not radio.is_checked():
            radio.click()
        return radio.is_checked()

    _poll(projector, "encoder self-attention chosen", chosen)
    head_view = panel.locator(PLOT).filter(has_text="Encoder self-attention").first

    def labels() -> list[str]:
        return head_view.locator(".yaxislayer-above .ytick text").all_text_contents()

    _poll(projector, "the head view of the new sentence", lambda: "0:▁the" in labels())
    projector.wait_for_timeout(500)
    _poll(projector, "the page settled", lambda: not projector.locator(BUSY).count())
    rows = head_view.evaluate("el => el.data[1].y.length")
    assert rows >= 10  # a sentence the translate model splits into many pieces
    assert len(labels()) == rows, labels()


OVERLAPS = """el => {
    const boxes = [...el.querySelectorAll('g.annotation')].map(a => {
        const r = a.getBoundingClientRect();
        return {text: a.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
    }).filter(b => b.right > b.left && b.bottom > b.top);
    const pairs = [];
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i], b = boxes[j];
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 2 && h > 2) pairs.push([a.text, b.text]);
    }
    // A caption cut off at the figure's right edge (plotly does not wrap its annotations).
    const edge = el.querySelector('svg.main-svg').getBoundingClientRect().right;
    const cut = boxes.filter(b => b.right > edge + 1).map(b => b.text);
    return {count: boxes.length, pairs, cut};
}"""


@pytest.mark.parametrize("large", [False, True], ids=["laptop", "projector"])
def test_no_two_captions_of_inside_a_layer_overlap(browser: Any, app_url: str, large: bool) -> None:
    """SmolLM2's rotated keys and its values stood side by side, and their captions (a long
    rotation formula beside the values') were drawn over each other at 1280×800; and a long
    caption ran past the figure's right edge, its end cut off."""
    query = "?tab=inside&model=SmolLM2-135M-Instruct"
    context, page = _open(browser, app_url + query, PROJECTOR if large else LAPTOP, large)
    try:
        _drawn(page, "Inside a layer", 2)
        page.wait_for_timeout(1000)
        _poll(page, "the page settled", lambda: not page.locator(BUSY).count())
        figures = _visible_panel(page).locator(PLOT)

        def rotated_keys_drawn() -> bool:
            return any("after rotation" in text for text in figures.all_inner_texts())

        _poll(page, "the rotated keys drawn", rotated_keys_drawn)
        for index in range(figures.count()):
            found = figures.nth(index).evaluate(OVERLAPS)
            assert not found["pairs"], found["pairs"]
            assert not found["cut"], found["cut"]
    finally:
        context.close()


# Each figure's title against the figure it heads: plotly does not wrap a title, it runs past
# the figure's edge and the svg cuts it there.
TITLES_CUT_JS = """
() => {
  const panel = [...document.querySelectorAll('[role=tabpanel]')]
    .find((e) => e.getBoundingClientRect().width > 0);
  const cut = [];
  for (const plot of panel.querySelectorAll('.js-plotly-plot')) {
    const svg = plot.querySelector('svg.main-svg').getBoundingClientRect();
    const title = plot.querySelector('.gtitle');
    if (!title || !svg.width) continue;
    const box = title.getBoundingClientRect();
    if (box.left < svg.left - 1 || box.right > svg.right + 1)
      cut.push(`${title.textContent}: ${Math.round(box.left - svg.left)} .. `
               + `${Math.round(box.right - svg.left)} in ${Math.round(svg.width)} px`);
  }
  return cut;
}
"""


# Where the tour menu's text may reach (its box less its padding) against its arrow's left edge.
MENU_TEXT_JS = """
() => {
  const menu = document.querySelector('#tour-menu');
  const input = menu.querySelector('input');
  const style = getComputedStyle(input);
  const right = input.getBoundingClientRect().right - parseFloat(style.paddingRight);
  return [right, menu.querySelector('.icon-wrap').getBoundingClientRect().left, style.textOverflow];
}
"""


@pytest.mark.parametrize(
    "viewport, large, tour",
    [
        (LAPTOP, False, True),
        (LAPTOP, False, False),
        (PROJECTOR, True, False),
        (PROJECTOR, True, True),
    ],
    ids=["laptop-tour", "laptop", "projector", "projector-tour"],
)
def test_generate_and_attention_titles_are_shown_whole(
    browser: Any, app_url: str, viewport: dict, large: bool, tour: bool
) -> None:
    """With the tour's sidebar open at 1280×800, the cross-attention figure got half the
    page's width beside the next-token chart, and its title ran off its right edge; on a
    projector in Large font with the tour open, its title ran off it at the figure's least
    width. With the tour open, Attention's head figures got 462 px beside the controls on a
    laptop and their titles ran off them (the what-if's by 170 px); on a projector the what-if
    difference's title ran past its 988 px figure."""
    from ui.tour import STOPS, label

    # The tour's Generate stop opens the translation model, whose figures include the
    # cross-attention; without the tour a link opens it.
    query = "" if tour else "?tab=generate&model=translate"
    context, page = _open(browser, app_url + query, viewport, large)
    try:
        if tour:
            index = next(i for i, s in enumerate(STOPS) if s.tab == "Generate")
            assert STOPS[index].values["model"] == "translate"
            page.get_by_role("button", name="▶ Guided tour").click()
            page.locator("#tour-menu input").click()
            page.get_by_role("option", name=label(index, STOPS[index]), exact=True).click()
        _drawn(page, "Generate", 4, ("Cross-attention of the new step from",))
        page.wait_for_timeout(1500)  # the plots settle to the page's width
        cut = page.evaluate(TITLES_CUT_JS)
        assert not cut, cut
        if tour:  # the stop's name, too long for the menu, ends with "…" clear of its arrow
            text_right, arrow_left, overflow = page.evaluate(MENU_TEXT_JS)
            assert overflow == "ellipsis" and text_right <= arrow_left, (text_right, arrow_left)
            # Attention beside the tour, its head alone and with a what-if.
            index = next(i for i, s in enumerate(STOPS) if s.tab == "Attention")
            page.locator("#tour-menu input").click()
            page.get_by_role("option", name=label(index, STOPS[index]), exact=True).click()
            _drawn(page, "Attention", 4, ("head 1",))
            page.wait_for_timeout(1500)
            assert not page.evaluate(TITLES_CUT_JS), page.evaluate(TITLES_CUT_JS)
            page.get_by_label("zero this head").check()
            _drawn(page, "Attention", 4, ("What-if change",))
            page.wait_for_timeout(1500)
            cut = page.evaluate(TITLES_CUT_JS)
            assert not cut, cut
    finally:
        context.close()


PAGE_HEIGHT_JS = "() => document.documentElement.scrollHeight"


def test_inside_a_layer_with_the_comparison_on_fits_in_a_few_screens(
    browser: Any, app: tuple[str, Any]
) -> None:
    """With the comparison on, Inside a layer was about 8,700 px tall at 1280×800: the
    comparison's 25 rows above every step of the layer's own view, all unfolded. A student
    who switched the comparison on scrolled through eleven screens to reach the cost table."""
    from test_browser import _smollm2_or_skip

    _smollm2_or_skip(app)
    context, page = _open(browser, app[0], LAPTOP)
    try:
        page.get_by_role("tab", name="Inside a layer", exact=True).click()
        _drawn(page, "Inside a layer", 2)
        page.locator("#inside-compare input").check()
        view = page.locator("#block-diff")
        _poll(
            page,
            "the comparison drawn",
            lambda: view.count() == 1 and view.is_visible() and not page.locator(BUSY).count(),
        )
        page.wait_for_timeout(1500)
        height = page.evaluate(PAGE_HEIGHT_JS)
        assert height <= 4400, f"{height} px"
        # Folded, not gone: the cost table and every step are on the page.
        assert view.locator(".bd-costs").is_visible()
        assert view.locator(".bd-row").count() > 10
        # A part the student opened stays open through a redraw (here Large font's).
        view.locator('details[data-group="attention"] > summary').click()
        page.get_by_label("Large font (for projecting)").check()
        large = page.locator("#block-diff.bd-large")
        _poll(page, "the comparison redrawn", lambda: large.count() == 1)
        page.wait_for_timeout(500)
        opened = large.evaluate("e => [...e.querySelectorAll('details.bd-group')].map(d => d.open)")
        assert opened == [True, True, False], opened
    finally:
        context.close()


def test_generate_fits_in_a_few_screens(browser: Any, app: tuple[str, Any]) -> None:
    """Generate was about 5,000 px tall at 1280×800 with SmolLM2: the logit lens and the
    residual stream's 61 rows unfolded one below the other under the step's figures."""
    from test_browser import _smollm2_or_skip

    _smollm2_or_skip(app)
    context, page = _open(browser, app[0], LAPTOP)
    try:
        page.get_by_role("tab", name="Generate", exact=True).click()
        _drawn(page, "Generate", 3)
        page.wait_for_timeout(1500)
        height = page.evaluate(PAGE_HEIGHT_JS)
        assert height <= 3900, f"{height} px"  # 5,026 px with the stream unfolded
        # Folded, not gone: opened, the residual stream shows this step's figure, at its width.
        page.locator("#residual-stream").get_by_text("residual stream", exact=False).first.click()
        section = page.locator("#residual-stream")
        _poll(page, "the stream drawn", lambda: "Residual stream of" in section.inner_text())
        area = section.locator(".nsewdrag").first.bounding_box()
        assert area is not None and area["width"] >= 200, area
    finally:
        context.close()
