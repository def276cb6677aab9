"""Which part? in a real browser, one page load a screen size: the tab opens with every method
drawn on the bundled model, each beside its explanation and its code; on SmolLM2 a small
patching sweep (showing its progress while it runs), every head ablated, integrated gradients
and the single-pass methods are drawn, and two models compared; on translate the encoder's source is shown and a decoder head split; on a
phone (390 × 844) every figure fits the screen's width, the bundled model's and SmolLM2's. Saves ``research.png``
(``REFRESH_SCREENSHOTS=1`` writes it to ``docs/screenshots/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_browser import BUSY, PLOT, _poll, _smollm2_or_skip
from test_browser_layout import LAPTOP, _opened

from ui.tabs.research import text

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TAB = "Which part?"
PHONE = {"width": 390, "height": 844}
SECTIONS = {  # element id → the words its explanation starts with
    "research-patching": text.PATCHING[:40],
    "research-ablation": text.ABLATION[:40],
    "research-logit": text.LOGIT[:40],
    "research-input": text.INPUT[:40],
    "research-scores": "In the 2017 models",
    "research-side": text.SIDE[:40],
}
FIRST_PLOTS = ("patching", "ablation", "logit", "input", "scores")


def _plot(page: Any, key: str) -> Any:
    return page.locator(f"#research-{key}-plot {PLOT}")


def _drawn(page: Any, key: str, title: str = "") -> None:
    """The section's figure is on the page, idle, with ``title`` in its title."""

    def ready() -> bool:
        plot = _plot(page, key)
        if not plot.count() or page.locator(BUSY).count():
            return False
        return title in " ".join(plot.first.locator(".gtitle").all_text_contents())

    _poll(page, f"the {key} figure drawn ({title!r})", ready)


def _open_tab(page: Any) -> Any:
    tab = page.get_by_role("tab", name=TAB, exact=True)
    if tab.count() and tab.first.is_visible():
        tab.first.click()
    else:  # a narrow page keeps the tabs that do not fit in gradio's overflow menu
        page.locator(".overflow-menu > button").first.click()
        page.locator(".overflow-dropdown button", has_text=TAB).first.click()
    panel = page.get_by_role("tabpanel")
    panel.wait_for()
    for key in FIRST_PLOTS:
        _drawn(page, key)
    return panel


def _choose(page: Any, label: str, value: str) -> None:
    box = page.get_by_role("tabpanel").get_by_label(label, exact=True)
    box.click()
    page.get_by_role("option", name=value, exact=True).click()


def _check(page: Any, radio: Any) -> None:
    """Tick ``radio`` once the page is idle: a model's change redraws the presets, and a click
    that lands while they are redrawn is lost."""

    def ticked() -> bool:
        if page.locator(BUSY).count():
            return False
        if not radio.is_checked():
            radio.click()
        return bool(radio.is_checked())

    _poll(page, "the radio ticked", ticked)


def _typed(page: Any, box: Any, value: str) -> None:
    """``value`` in ``box``, typed again where a model's late fitting put its own example back
    (the methods read the box when their button is pressed)."""

    def stays() -> bool:
        if box.input_value() == value:
            return True
        box.fill(value)
        return False

    _poll(page, "the text typed", stays)


def test_every_method_is_drawn_and_explained_on_a_laptop_and_a_phone(
    browser: Any, app: tuple[str, Any], screenshots: Path
) -> None:
    _smollm2_or_skip(app)
    with _opened(browser, app[0], LAPTOP) as page:
        panel = _open_tab(page)
        for key, words in SECTIONS.items():
            section = page.locator(f"#{key}")
            assert words in section.inner_text(), key
            assert section.get_by_text("The code that computes it").count() == 1, key
        # The bundled model: patching over layers × positions, its logit said to have no split.
        assert "layer 1" in _plot(page, "patching").first.inner_text()
        assert "post-norm" in page.locator("#research-logit").inner_text()

        # SmolLM2: one small patching sweep (its progress shown), the ablation of its 270
        # heads, integrated gradients and the single-pass methods, on a 5-token text.
        assert "rotary" not in page.locator("#research-scores").inner_text()
        _choose(page, "Model", "SmolLM2-135M-Instruct")
        # The bundled model's figures go, each section naming the button that draws its own.
        _poll(
            page,
            "the figures of the model before cleared",
            lambda: (
                not any(_plot(page, key).count() for key in FIRST_PLOTS)
                and "Press Patch to draw it for SmolLM2"
                in page.locator("#research-patching").inner_text()
                # Why a head attends already explains the rotary model's scores.
                and "rotary" in page.locator("#research-scores").inner_text()
            ),
        )
        _check(page, panel.get_by_role("radio", name="France → Greece"))
        text_box = panel.get_by_label("Text (methods 2 to 6)", exact=True)
        _typed(page, text_box, "The capital of France is")
        panel.get_by_role("button", name="Patch", exact=True).click()
        # The sweep shows its progress while it runs.
        _poll(
            page,
            "the patching sweep's progress",
            lambda: (
                page.locator(
                    "#research-patching .progress-text, #research-patching .eta-bar"
                ).count()
                or "layer 30" in _plot(page, "patching").first.inner_text()
            ),
        )
        _drawn(page, "patching", "Restored by patching")
        assert "layer 30" in _plot(page, "patching").first.inner_text()
        for button, key in (("Split the logit", "logit"), ("Split the scores", "scores")):
            panel.get_by_role("button", name=button, exact=True).click()
            page.wait_for_timeout(300)
            _drawn(page, key)
        assert "real logit" in page.locator("#research-logit").inner_text()
        for button, key in (("Ablate every head", "ablation"), ("Attribute to the input", "input")):
            _typed(page, text_box, "The capital of France is")
            panel.get_by_role("button", name=button, exact=True).click()
            page.wait_for_timeout(300)
            _drawn(page, key)
        assert "layer 30" in _plot(page, "ablation").first.inner_text()
        assert "matters most" in page.locator("#research-ablation").inner_text()
        assert "France" in _plot(page, "input").first.inner_text()
        assert "Completeness" in page.locator("#research-input").inner_text()
        assert "rotary" in page.locator("#research-scores").inner_text()
        # The picture of SmolLM2's page, its inputs beside the figures they drew.
        page.locator("#research-patching").evaluate("e => e.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(400)
        page.screenshot(path=str(screenshots / "research.png"))
        page.screenshot(path=str(screenshots / "research-full.png"), full_page=True)
        _choose(page, "Second model", "continue")
        panel.get_by_role("button", name="Compare", exact=True).click()
        _poll(
            page,
            "two models compared",
            lambda: (
                page.locator(f"#research-side-attention {PLOT}").count()
                and "groups" in page.locator("#research-side").inner_text()
                and not page.locator(BUSY).count()
            ),
        )
        # translate, the 2017 block: the encoder's source shown, the decoder's head split.
        _choose(page, "Model", "translate")
        source = panel.get_by_label(text.SOURCE_LABEL, exact=True)
        _poll(page, "the source box", lambda: source.is_visible() and source.input_value())
        panel.get_by_role("button", name="Split the scores", exact=True).click()
        page.wait_for_timeout(300)
        _drawn(page, "scores")
        assert "source held fixed" in page.locator("#research-scores").inner_text()

    # A phone: one column, every figure within the screen's width.
    with _opened(browser, app[0], PHONE) as page:
        _open_tab(page)
        for key in FIRST_PLOTS:
            box = _plot(page, key).first.bounding_box()
            assert box is not None and box["x"] >= -1 and box["x"] + box["width"] <= 391, key
        # The score parts' grid is stacked: taller than wide, one panel under another.
        box = _plot(page, "scores").first.bounding_box()
        assert box is not None and box["height"] > 2 * box["width"]
        # SmolLM2's 30 layers fit the phone's width too.
        panel = page.get_by_role("tabpanel")
        _choose(page, "Model", "SmolLM2-135M-Instruct")
        # Ticked once the model's inputs are fitted: the text typed next stays.
        _check(page, panel.get_by_role("radio", name="France → Greece"))
        text_box = panel.get_by_label("Text (methods 2 to 6)", exact=True)
        for button, key in (
            ("Patch", "patching"),
            ("Ablate every head", "ablation"),
            ("Split the logit", "logit"),
            ("Attribute to the input", "input"),
            ("Split the scores", "scores"),
            ("Compare", "side-attention"),
        ):
            _typed(page, text_box, "The capital of France is")
            panel.get_by_role("button", name=button, exact=True).click()
            page.wait_for_timeout(300)
            found = page.locator(f"#research-{key} {PLOT}, #research-{key}-plot {PLOT}").first
            _poll(
                page, f"{key} drawn", lambda f=found: f.count() and not page.locator(BUSY).count()
            )
            box = found.bounding_box()
            assert box is not None and box["x"] >= -1 and box["x"] + box["width"] <= 391, key
        for key in ("patching", "ablation"):
            assert "layer 30" in _plot(page, key).first.inner_text(), key
        assert "France" in _plot(page, "input").first.inner_text()
        assert "rotary" in page.locator("#research-scores").inner_text()
        page.locator("#research-patching").evaluate("e => e.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(400)
        page.screenshot(path=str(screenshots / "research-phone.png"), full_page=True)
