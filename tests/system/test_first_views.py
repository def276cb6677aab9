"""A page opened with a link draws the link's view first: the tabs' first
views are drawn by one page-load event, which sends nothing on such a page, and afterwards by
one event, all but the linked tab's; and the link's settling pass re-applies the view only
where a control no longer shows it (a view that arrived whole is not drawn twice)."""

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
        # Events that run on page load, alone or also as a control's live redraw.
        if not function.queue or all(event != "load" for _, event in function.targets):
            continue
        outputs = {c._id for c in function.outputs}
        slug = next((s for s, ids in tabs.items() if outputs & ids), None)
        if slug is None or function.fn.__name__ == "restore":
            continue
        if slug == "tokenize" and any(event != "load" for _, event in function.targets):
            continue  # the first tab's live redraws: they draw a page without a link sooner
        found.append((function, slug))
    return found


def _skipped(out: Any) -> bool:
    return isinstance(out, dict) and out == {"__type__": "update"}


def _as_tuple(out: Any, n: int) -> tuple:
    return (out,) if n == 1 else tuple(out)


def _comparable(out: Any) -> Any:
    if isinstance(out, dict) and out.get("__type__") == "update" and "value" in out:
        out = out["value"]  # a value merged into an update that came first (see test_merge)
    if isinstance(out, go.Figure):
        return out.to_json()
    return out.constructor_args if isinstance(out, gr.blocks.Block) else out


def test_merge_keeps_what_an_earlier_update_set() -> None:
    from ui.links.views import merge_outputs

    figure = go.Figure()
    # Generate's model controls hide the cross-attention plot of a decoder-only model, and its
    # first step then draws into it: the plot stays hidden (it was shown, empty).
    merged = merge_outputs(gr.update(visible=False), figure)
    assert merged["visible"] is False and merged["value"] is figure
    assert merge_outputs(figure, gr.update(visible=True)) == {
        "__type__": "update",
        "value": figure,
        "visible": True,
    }
    assert merge_outputs(gr.update(value=1, visible=False), gr.update(value=2))["value"] == 2
    assert merge_outputs(1, 2) == 2 and merge_outputs(None, 2) == 2


def _handlers(demo: gr.Blocks) -> list[tuple[Any, list[Any], list[Any], str]]:
    """Each tab's own first-view handler (registered by the tab, no longer a page-load event
    of its own): (handler, inputs, outputs, tab)."""
    return demo.first_views.functions  # type: ignore[attr-defined]


def test_one_event_draws_the_tabs_first_views_when_a_page_opens(demo: gr.Blocks) -> None:
    # One round trip for every tab, not one per handler (each was an event the page tracked).
    loads = _page_loads(demo)
    assert [function.fn.__name__ for function, _ in loads] == ["open"], loads
    (opened, _), first_views = loads[0], demo.first_views
    every_tab_but_tokenize = {
        "embeddings",
        "attention",
        "inside",
        "generate",
        "research",
        "training",
    }
    assert {slug for *_, slug in _handlers(demo)} == every_tab_but_tokenize
    values = [getattr(c, "value", None) for c in opened.inputs]
    # On a page opened with a link it sends nothing: the link's own view comes first.
    assert all(_skipped(out) for out in opened.fn(LINK, *values))
    # Without a link it draws what each tab's own handler draws.
    drawn = dict(zip(first_views.outputs, opened.fn(PLAIN, *values), strict=True))
    known = dict(zip(opened.inputs, values, strict=True))
    tabs = set()
    for handler, inputs, outputs, slug in _handlers(demo):
        own = _as_tuple(handler(*[known[c] for c in inputs]), len(outputs))
        for component, expected in zip(outputs, own, strict=True):
            if not _skipped(expected) and not isinstance(expected, dict):
                assert _comparable(drawn[component]) == _comparable(expected), component.label
                tabs.add(slug)
    assert tabs == {slug for *_, slug in _handlers(demo)}


def test_every_follower_of_a_first_view_still_runs(demo: gr.Blocks) -> None:
    # A handler that no longer runs on page load hands its followers (Generate's teacher
    # forcing and key/value cache view) to the event that now runs it.
    never = {
        function._id
        for function in demo.fns.values()
        if not function.targets and function.trigger_after is None
    }
    assert never, "the tabs' own first-view handlers are still page-load events"
    stranded = [f.fn.__name__ for f in demo.fns.values() if f.trigger_after in never]
    assert not stranded
    (opened, _) = _page_loads(demo)[0]
    followers = {f.fn.__name__ for f in demo.fns.values() if f.trigger_after == opened._id}
    assert {"force_view", "kv_cache_if_shown"} <= followers


def test_after_the_link_one_event_draws_the_other_tabs(demo: gr.Blocks) -> None:
    first_views, views = demo.first_views, demo.views
    values = [getattr(c, "value", None) for c in first_views.inputs]
    view = views.view_of("attention", {"layer": 3})
    drawn = dict(zip(first_views.outputs, first_views.draw(LINK, view, *values), strict=True))
    # A page without a link drew its first views already: nothing more.
    assert all(_skipped(out) for out in first_views.draw(PLAIN, None, *values))
    known = dict(zip(first_views.inputs, values, strict=True))
    for handler, inputs, outputs, slug in _handlers(demo):
        own = _as_tuple(handler(*[known[c] for c in inputs]), len(outputs))
        for component, expected in zip(outputs, own, strict=True):
            if slug == "attention":  # the link drew it
                assert _skipped(drawn[component]), component.label
            elif not _skipped(expected) and not isinstance(expected, dict):
                assert _comparable(drawn[component]) == _comparable(expected), component.label


def test_a_link_to_generate_fits_its_sliders_and_chat_switch(demo: gr.Blocks) -> None:
    """A link naming Generate's default model (SmolLM2 where installed) changes no model, so
    the ``.change`` that fits the sliders and shows the chat switch never fires: the event after
    the link's fits them (30 layers and 9 heads, not the API's 48 and 64), without touching the
    values the link set or redrawing what it drew."""
    first_views, views = demo.first_views, demo.views
    values = [getattr(c, "value", None) for c in first_views.inputs]
    view = views.view_of("generate", {"layer": 2, "head": 3})
    link = _Request({"tab": "generate", "layer": "2"})
    drawn = dict(zip(first_views.outputs, first_views.draw(link, view, *values), strict=True))
    controls = views.tabs["generate"].controls
    name = view["values"]["model"]
    registry = demo.model_registry  # type: ignore[attr-defined]
    config = registry.checkpoint(name, None).config
    by_label = {getattr(c, "label", None): c for c in first_views.outputs}
    for key, count in (("layer", config.n_decoder_layers), ("head", config.n_heads)):
        update = drawn[controls[key]]
        assert update["maximum"] == max(count, 2), (key, update)
        assert "value" not in update  # the link's layer and head stay
    template = registry.checkpoint(name, None).info.get("chat_template")
    chat = drawn[by_label["chat: wrap the prompt in the model's own chat template"]]
    assert chat["visible"] is bool(template)
    # The figures the link drew are not drawn again.
    generate = {c._id for _, _, outs, slug in _handlers(demo) if slug == "generate" for c in outs}
    for component in views.drawn:
        if component._id in generate:
            out = drawn[component]
            assert isinstance(out, dict) and "value" not in out, component.label


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


def _page_app() -> Any:
    """A stand-in for gradio's page: its HTML with the module script that reads the config."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Route

    from ui.links.first_views import OpenOnLinkedTab

    page = '<html><head><script>window.gradio_config = {};</script><script type="module" src="./assets/index.js"></script></head></html>'
    return Starlette(
        routes=[
            Route("/", lambda request: HTMLResponse(page)),
            Route("/config", lambda request: JSONResponse({"tab": 1})),
        ],
        middleware=[Middleware(OpenOnLinkedTab)],
    )


def test_a_link_page_gets_the_script_that_opens_its_tab() -> None:
    from starlette.testclient import TestClient

    from ui.links.first_views import LINKED_TAB_JS

    client = TestClient(_page_app())
    linked = client.get("/?model=translate&tab=attention")
    body = linked.text
    # Before gradio's module script, after the config it edits; the length says so too.
    opening = LINKED_TAB_JS.strip()[:60]
    script = body.index(opening)
    assert body.index("window.gradio_config") < script < body.index('<script type="module"')
    assert int(linked.headers["content-length"]) == len(linked.content)
    for plain in ("/", "/?model=translate", "/?atab=1"):
        assert opening not in client.get(plain).text, plain
    assert client.get("/config?tab=attention").json() == {"tab": 1}


def test_the_settling_pass_keeps_what_the_user_changed(demo: gr.Blocks) -> None:
    views = demo.views
    view = views.view_of("attention", {"layer": 3, "head": 2})
    controls = views.tabs["attention"].controls
    values = [getattr(c, "value", None) for c in views.draw_inputs]
    layer = [c._id for c in views.draw_inputs].index(controls["layer"]._id)
    values[layer] = 1  # not the view's: a handler's reset, or the user's own change
    reset = dict(zip(views.outputs, views.settle_untouched(view, False, *values), strict=True))
    assert reset[controls["layer"]]["value"] == 3
    assert all(_skipped(out) for out in views.settle_untouched(view, True, *values))
