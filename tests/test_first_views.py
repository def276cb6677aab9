"""A page opened with a link draws the link's view first (issue 23, item 5): the tabs' first
views, drawn when a page opens, send nothing on such a page and are drawn afterwards by one
event, all but the linked tab's; and the link's settling pass re-applies the view only where a
control no longer shows it (a view that arrived whole is not drawn twice)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr
import plotly.graph_objects as go
import pytest


class _Request:
    """What the handlers read of gradio's request: the page address's query."""

    def __init__(self, query: dict[str, str]) -> None:
        self.query_params = query


LINK = _Request({"tab": "attention", "layer": "3"})
PLAIN = _Request({})


@pytest.fixture(scope="module")
def demo() -> Iterator[gr.Blocks]:
    from ui.demo import build_demo

    built = build_demo("cpu", preload=False)
    yield built
    built.close()


def _inside(block: Any) -> set[int]:
    ids: set[int] = set()
    for child in getattr(block, "children", []):
        ids |= {child._id} | _inside(child)
    return ids


def _page_loads(demo: gr.Blocks) -> list[tuple[Any, str]]:
    """The queued events that run when a page opens and draw into a tab, with the tab."""
    tabs = {
        str(block.id): _inside(block) for block in demo.blocks.values() if isinstance(block, gr.Tab)
    }
    found = []
    for function in demo.fns.values():
        # Events that run on page load alone (a control's live redraw draws on any page).
        if not function.queue or any(event != "load" for _, event in function.targets):
            continue
        outputs = {c._id for c in function.outputs}
        slug = next((s for s, ids in tabs.items() if outputs & ids), None)
        if slug is not None and function.fn.__name__ != "restore":
            found.append((function, slug))
    return found


def _skipped(out: Any) -> bool:
    return isinstance(out, dict) and out == {"__type__": "update"}


def _as_tuple(out: Any, n: int) -> tuple:
    return (out,) if n == 1 else tuple(out)


def _comparable(out: Any) -> Any:
    if isinstance(out, go.Figure):
        return out.to_json()
    return out.constructor_args if isinstance(out, gr.blocks.Block) else out


def test_on_a_link_page_the_tabs_first_views_wait(demo: gr.Blocks) -> None:
    loads = _page_loads(demo)
    assert {slug for _, slug in loads} >= {"attention", "inside", "generate", "training"}
    for function, slug in loads:
        values = [getattr(c, "value", None) for c in function.inputs]
        on_link = _as_tuple(function.fn(LINK, *values), len(function.outputs))
        assert all(_skipped(out) for out in on_link), (slug, function.fn.__name__)
    # Without a link they draw, as before: every tab gets something.
    drawn = set()
    for function, slug in loads:
        values = [getattr(c, "value", None) for c in function.inputs]
        plain = _as_tuple(function.fn(PLAIN, *values), len(function.outputs))
        if any(not _skipped(out) for out in plain):
            drawn.add(slug)
    assert drawn == {slug for _, slug in loads}


def test_after_the_link_one_event_draws_the_other_tabs(demo: gr.Blocks) -> None:
    first_views, views = demo.first_views, demo.views
    values = [getattr(c, "value", None) for c in first_views.inputs]
    view = views.view_of("attention", {"layer": 3})
    drawn = dict(zip(first_views.outputs, first_views.draw(LINK, view, *values), strict=True))
    # A page without a link drew its first views already: nothing more.
    assert all(_skipped(out) for out in first_views.draw(PLAIN, None, *values))
    for function, slug in _page_loads(demo):
        args = [getattr(c, "value", None) for c in function.inputs]
        own = _as_tuple(function.fn(PLAIN, *args), len(function.outputs))
        for component, expected in zip(function.outputs, own, strict=True):
            if slug == "attention":  # the link drew it
                assert _skipped(drawn[component]), component.label
            elif not _skipped(expected) and not isinstance(expected, dict):
                assert _comparable(drawn[component]) == _comparable(expected), component.label


def test_the_settling_pass_reapplies_only_a_changed_view(demo: gr.Blocks) -> None:
    views = demo.views
    view = views.view_of("attention", {"layer": 3, "head": 2})
    controls = views.tabs["attention"].controls
    shown = {controls[key]._id: value for key, value in view["values"].items()}
    values = [shown.get(c._id, getattr(c, "value", None)) for c in views.draw_inputs]
    assert all(_skipped(out) for out in views.settle(view, *values))
    # A handler the link's values triggered reset the layer: the view comes back.
    layer = [c._id for c in views.draw_inputs].index(controls["layer"]._id)
    values[layer] = 1
    again = dict(zip(views.outputs, views.settle(view, *values), strict=True))
    assert again[controls["layer"]]["value"] == 3
    assert again[views.tabs_block].selected == "attention"
