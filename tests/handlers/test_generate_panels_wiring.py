"""Generate's silent-mistake and key/value-cache panels in the built app: a link carries the
chosen mistake, the view export holds both panels, both answer a named endpoint, and the cache
view follows Step, Back, Run and Reset."""

from __future__ import annotations

from urllib.parse import parse_qs

import gradio as gr
import pytest

import app as visualiser
from transformer.lab.silent_mistakes import KV_TILED
from ui.links.share import decode_view, encode_view
from ui.serving.export import components_of


@pytest.fixture(scope="module")
def demo():
    built = visualiser.build_demo("cpu", preload=False)
    yield built
    built.close()


def test_a_link_carries_the_silent_mistake(demo) -> None:
    tab = demo.views.labels["Generate"]
    assert "silent_mistake" in tab.controls
    tiled = KV_TILED.label  # what the page and the link carry: the menu's label
    query = encode_view(tab, {**tab.defaults, "silent_mistake": tiled})
    params = parse_qs(query)
    assert params["silent_mistake"] == [tiled]
    restored = decode_view(params, {"generate": tab})
    assert restored.messages == [] and restored.view["values"]["silent_mistake"] == tiled
    assert "silent_mistake" not in encode_view(tab, tab.defaults)  # the default stays out


def test_the_view_export_holds_both_panels(demo) -> None:
    tab = next(
        b for b in demo.blocks.values() if isinstance(b, gr.Tab) and b.elem_id == "view-generate"
    )
    ids = {c.elem_id for c in components_of(tab) if isinstance(c, gr.Markdown)}
    assert {"silent-continuation", "silent-meter", "kv-cache-table", "kv-cache-steps"}
    assert "kv-cache-check" in ids <= ids


def test_both_panels_answer_a_named_endpoint_and_the_cache_follows_the_buttons(demo) -> None:
    by_api = {fn.api_name: fn for fn in demo.fns.values() if fn.api_name}
    assert by_api["silent_mistake"].name == "silent_mistake"
    assert by_api["kv_cache"].name == "kv_cache"
    for api in ("generate_step", "generate_back", "generate", "generate_reset"):
        followers = [f for f in demo.fns.values() if f.trigger_after == by_api[api]._id]
        assert any(f.name == "kv_cache_if_shown" for f in followers), api


@pytest.mark.parametrize(
    "panel, drawer, follows",
    [("kv-cache", "kv_cache", "generate_step"), ("silent-mistakes", "silent_mistake", None)],
)
def test_a_closed_panel_computes_nothing_and_opening_it_draws_it(
    demo, panel, drawer, follows
) -> None:
    """The cache view times the next step twice, the silent panel generates twice and reads a
    paragraph twice (seconds on SmolLM2): closed, a Step or an edited prompt must not pay for
    them; opening the accordion draws the panel."""
    accordion = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == panel)
    expand = [f for f in demo.fns.values() if (accordion._id, "expand") in f.targets]
    collapse = [f for f in demo.fns.values() if (accordion._id, "collapse") in f.targets]
    assert len(expand) == len(collapse) == 1
    (shown,) = expand[0].outputs
    assert isinstance(shown, gr.State) and shown.value is False  # a page opens with it closed
    assert expand[0].fn() is True and collapse[0].fn() is False and collapse[0].outputs == [shown]
    drawn = [f for f in demo.fns.values() if f.trigger_after == expand[0]._id]
    assert [f.name for f in drawn] == [drawer]  # opening it draws it
    followers = [f for f in demo.fns.values() if f.inputs and f.inputs[-1] is shown]
    assert followers and all(f.name == f"{drawer}_if_shown" for f in followers)
    if follows is not None:
        by_api = {fn.api_name: fn for fn in demo.fns.values() if fn.api_name}
        assert any(f.trigger_after == by_api[follows]._id for f in followers)
    # No page-load event draws it.
    assert not any(
        event == "load" and f.name in (drawer, f"{drawer}_if_shown")
        for f in demo.fns.values()
        for _, event in f.targets
    )
    # Closed: nothing computed, nothing sent (the inputs would fail if they were read at all).
    for follower in followers:
        skipped = follower.fn(*[object()] * (len(follower.inputs) - 1), False)
        assert skipped == tuple(gr.skip() for _ in follower.outputs)


def test_the_silent_panel_is_drawn_one_request_at_a_time_in_order(demo) -> None:
    """Each draw of the silent panel reads the mistake the page showed when it was asked: the
    draw that opening the panel asks for (seconds on SmolLM2), still running when a mistake is
    chosen, must not land after the chosen one and show the old mistake. So every event that
    draws it (the endpoint, opening, the followers) shares one queue of one."""
    accordion = next(
        b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "silent-mistakes"
    )
    (expand,) = [f for f in demo.fns.values() if (accordion._id, "expand") in f.targets]
    drawers = [
        f for f in demo.fns.values() if f.name in ("silent_mistake", "silent_mistake_if_shown")
    ]
    assert len(drawers) >= 4  # the endpoint, opening, and the prompt's and model's followers
    assert any(f.trigger_after == expand._id for f in drawers)
    assert {f.concurrency_id for f in drawers} == {"silent-mistakes"}
    assert all(f.concurrency_limit == 1 for f in drawers)


def test_every_press_of_step_and_back_counts(demo) -> None:
    # gradio's default for a button ("once") drops a press made while the last one runs: a
    # lecturer's three quick presses gave two steps. Run and Reset keep it (one run at a time).
    by_api = {fn.api_name: fn for fn in demo.fns.values() if fn.api_name}
    assert by_api["generate_step"].trigger_mode == "multiple"
    assert by_api["generate_back"].trigger_mode == "multiple"
    assert by_api["generate"].trigger_mode == "once"
