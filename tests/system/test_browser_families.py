"""Later families, saved as real checkpoints of their size are (sharded, bfloat16), opened
with ``--model`` and drawn by every tab that takes a model, in a real Chromium.

The parity tests (``tests/library/test_families_*.py``) check the numbers; this checks that a
student who opens such a folder sees each tab drawn, without an error toast."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from family_checks import sharded_family_folder
from test_browser import _drawn, _error_toasts, _open

from ui.testing import launched

pytestmark = [pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("transformers")

# The family whose page differs most from the others': Gemma 3's local and global layers (two
# rotary tables, sliding windows on some layers, norms after each sub-layer). Every family's
# views are drawn by their handlers in tests/handlers/test_families_views.py, which check what
# a page is sent; a page load per tab costs seconds, so the browser opens this one, where the
# page's own drawing of a real family's folder is what is checked.
NAMES = ("gemma3",)
# The tabs that take a model, each with the plots it draws when it opens on one.
TABS = (
    ("embeddings", "Embeddings & positions", 2),
    ("attention", "Attention", 2),
    ("inside", "Inside a layer", 2),
    ("generate", "Generate", 2),
    ("training", "Model & training", 1),
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[str]:
    """The app serving one sharded bfloat16 folder of each family, as ``python app.py
    --model FOLDER ...`` serves them."""
    from app import build_demo

    root = tmp_path_factory.mktemp("families")
    for name in NAMES:
        sharded_family_folder(root / name, name, seed=2)
    demo = build_demo("cpu", tuple(str(root / name) for name in NAMES))
    with launched(demo) as url:
        yield url


@pytest.mark.parametrize("name", NAMES)
def test_every_tab_draws_a_sharded_bfloat16_folder_of_the_family(
    browser: Any, served: str, name: str, tmp_path: Path
) -> None:
    for slug, tab, plots in TABS:
        context, page = _open(browser, f"{served}?tab={slug}&model={name}")
        try:
            _drawn(page, tab, plots)
            panel = page.get_by_role("tabpanel")
            assert name in panel.inner_text() or name in _model_menus(panel), (name, tab)
            assert not _error_toasts(page), (name, tab, _error_toasts(page))
        finally:
            context.close()


def _model_menus(panel: Any) -> str:
    """The values of the tab's model menus (a dropdown shows its value in an input)."""
    return " ".join(box.input_value() for box in panel.get_by_label("Model", exact=True).all())
