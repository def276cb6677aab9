"""The guided tour against the built app: every stop opens a tab the app has, sets controls that
tab shares, with values those controls accept; the stops follow the paper; Next and Previous
stay inside the tour; applying a view reaches each tab's live redraws."""

from __future__ import annotations

import importlib.util

import gradio as gr
import pytest

from ui.links.share import _as_text, check_value
from ui.links.views import redraw_functions
from ui.tour import STOPS, stop_text

# The tour's stops, in the paper's order: each stop's title names its topic.
PAPER_ORDER = [
    "tokens",
    "embeddings",
    "positional encoding",
    "one attention head",
    "mask",
    "multi-head",
    "feed-forward",
    "residual",
    "cross-attention",
    "generation",
    "sampling",
    "training",
    "modern block",
]
HAS_INSIDE = importlib.util.find_spec("ui.tabs.inside") is not None


@pytest.fixture(scope="module")
def demo() -> gr.Blocks:
    from ui.demo import build_demo

    built = build_demo("cpu", preload=False)
    yield built
    built.close()


def test_the_stops_follow_the_paper() -> None:
    assert len(STOPS) == len(PAPER_ORDER)
    for stop, topic in zip(STOPS, PAPER_ORDER, strict=True):
        assert topic in stop.title.lower(), (stop.title, topic)


def test_every_stop_opens_a_tab_the_app_has(demo: gr.Blocks) -> None:
    labels = set(demo.views.labels)
    shown = {stop.title for stop in demo.tour.stops}
    for stop in STOPS:
        if stop.tab == "Inside a layer" and not HAS_INSIDE:
            assert stop.title not in shown  # left out (and logged) until the tab is merged
            continue
        assert stop.tab in labels, f"stop '{stop.title}' names a tab '{stop.tab}'"
        assert stop.title in shown
    assert len(demo.tour.stops) == len(STOPS) - (0 if HAS_INSIDE else 3)


def test_every_stop_sets_controls_its_tab_shares_with_valid_values(demo: gr.Blocks) -> None:
    for stop in demo.tour.stops:
        tab = demo.views.labels[stop.tab]
        assert stop.values, f"stop '{stop.title}' presets nothing"
        for key, value in stop.values.items():
            assert key in tab.controls, f"'{stop.title}': {stop.tab} shares no control '{key}'"
            component = tab.controls[key]
            if isinstance(component, gr.Dropdown) and key != "kind":
                choices = [c[1] if isinstance(c, tuple) else c for c in component.choices]
                assert value in choices, f"'{stop.title}': {value!r} not in {key}'s menu"
            if isinstance(component, gr.Slider):
                assert component.minimum <= value <= component.maximum
            # A value survives being written into a link and read back unchanged.
            assert check_value(component, _as_text(value), tab.slug, key) == value, (
                stop.title,
                key,
            )


def test_each_stop_is_one_short_paragraph() -> None:
    for index, stop in enumerate(STOPS):
        words = len(stop.text.split())
        assert 40 <= words <= 110, f"'{stop.title}' has {words} words"
        assert "\n" not in stop.text
        shown = stop_text(index, STOPS)
        assert shown.startswith(f"**{index + 1} / {len(STOPS)} · {stop.title}**")


def test_the_teaching_facts_are_the_papers() -> None:
    text = {stop.title: stop.text for stop in STOPS}
    assert "√d_model" in text["Embeddings, scaled by √d_model"]
    assert "sin(pos / 10000^(2i/d_model))" in text["Positional encoding"]
    assert "cos(pos / 10000^(2i/d_model))" in text["Positional encoding"]
    assert "softmax(QKᵀ/√d_k)·V" in text["One attention head"]
    assert "max(0, x·W₁ + b₁)·W₂ + b₂" in text["The feed-forward network"]
    assert "LayerNorm(x + Sublayer(x))" in text["Residual connections and LayerNorm"]
    assert "x / √(mean(x²) + ε)·w" in text["2017 and today: the modern block"]


def test_next_and_previous_stay_inside_the_tour(demo: gr.Blocks) -> None:
    tour = demo.tour
    last = len(tour.stops) - 1
    assert tour.next_stop(-1)[0] == 0  # before the tour started: the first stop
    assert tour.next_stop(0)[0] == 1
    assert tour.next_stop(last)[0] == last
    assert tour.previous_stop(0)[0] == 0
    assert tour.previous_stop(3)[0] == 2
    assert tour.start_at(tour.names[4])[0] == 4
    assert tour.start_at("no such stop")[0] == 0


def test_previous_and_next_are_disabled_at_the_ends_of_the_tour(demo: gr.Blocks) -> None:
    """At the last stop Next only reloaded the stop on screen (seconds of redrawing)."""
    tour = demo.tour
    last = len(tour.stops) - 1
    enabled = {
        index: (update[5].interactive, update[6].interactive)
        for index in (0, 1, last - 1, last)
        for update in [tour.go(index)]
    }
    assert enabled == {
        0: (False, True),
        1: (True, True),
        last - 1: (True, True),
        last: (True, False),
    }
    assert tour.next_stop(last)[6].interactive is False


def test_a_stop_applies_its_tab_with_defaults_for_the_rest(demo: gr.Blocks) -> None:
    tour = demo.tour
    for index, stop in enumerate(tour.stops):
        _, menu, text, _, view, *_ = tour.go(index)
        tab = demo.views.labels[stop.tab]
        assert view["tab"] == tab.slug
        assert menu["value"] == tour.names[index]
        assert stop.title in text
        for key, value in view["values"].items():
            assert value == stop.values.get(key, tab.defaults[key])
        updates = demo.views._set(view)
        assert updates[0].selected == tab.slug  # the tab selector switches


def test_applying_a_view_reaches_every_tabs_live_redraw(demo: gr.Blocks) -> None:
    expected = {
        "tokenize": {"tokenize_view"},
        "embeddings": {"positional_view", "embeddings_view"},
        "attention": {"refit_everything", "everything"},
        "inside": {"refresh", "inside_layer", "inside_compare"},
        "generate": {"first_step", "redraw_attention"},
        "training": {"snapshot_live"},
    }
    for slug, names in expected.items():
        functions = redraw_functions(demo, demo.views.tabs[slug].controls.values())
        found = [f.fn.__name__ for f in functions]
        assert names <= set(found), (slug, found)
    attention = [
        f.fn.__name__
        for f in redraw_functions(demo, demo.views.tabs["attention"].controls.values())
    ]
    assert attention.index("refit_everything") < attention.index("everything")  # fit, then draw


def _session_values(demo: gr.Blocks) -> list:
    """What a fresh page sends for the inputs of applying a view: the components' defaults."""
    import copy

    return [copy.deepcopy(c.value) for c in demo.views.draw_inputs]


def test_a_link_s_first_event_applies_and_draws_its_own_view(demo: gr.Blocks) -> None:
    """The page showed the default view under the link's controls for seconds (the
    controls were set, then each redraw ran as an event of its own after a wait). The link's
    first event now sets the controls and returns the view's own figures."""
    views = demo.views
    (load,) = [
        f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "restore" and f.outputs
    ]
    plots = {c._id for c in load.outputs if isinstance(c, gr.Plot)}
    assert len(plots) >= 5  # the load event itself draws
    attention = views.tabs["attention"]
    view = views.view_of("attention", {"model": "reverse", "layer": 2, "head": 3})
    applied = views.apply(view, *_session_values(demo))
    out = dict(zip([c._id for c in views.outputs], applied, strict=True))
    titles = []
    for component in views.outputs:
        value = out[component._id]
        figure = value.get("value") if isinstance(value, dict) else value
        if isinstance(component, gr.Plot) and hasattr(figure, "layout"):
            titles.append(str(figure.layout.title.text))
    assert any("layer 2 · head 3" in title for title in titles), titles
    layer = attention.controls["layer"]
    decoder_layers = demo.model_registry.checkpoint("reverse", None).config.n_decoder_layers
    assert out[layer._id]["value"] == 2  # the default kind is cross-attention: the decoder's
    assert out[layer._id]["maximum"] == decoder_layers  # fitted to the model


def test_the_feed_forward_and_residual_stops_scroll_to_their_section(demo: gr.Blocks) -> None:
    """Those stops opened Inside a layer at its top, 2,000 px above the part
    they talk about. Their view must scroll to the feed-forward section (which ends with the
    residual add and the LayerNorm), an element the page has."""
    if not HAS_INSIDE:
        pytest.skip("no Inside a layer tab")
    tour = demo.tour
    ids = {block.elem_id: block for block in demo.blocks.values() if block.elem_id}
    for topic in ("feed-forward", "residual"):
        index = next(i for i, s in enumerate(tour.stops) if topic in s.title.lower())
        view = tour.go(index)[4]
        target = ids.get(view["focus"])
        assert isinstance(target, gr.Accordion), (topic, view["focus"])
        assert "Feed-forward" in target.label and "output" in target.label


def test_the_modern_block_stop_opens_the_comparison_on_smollm2(demo: gr.Blocks) -> None:
    """The last stop opens Inside a layer in compare mode on SmolLM2; the view it
    applies, written into a link and read back, still has the switch on and redraws the
    comparison."""
    from ui.links.share import decode_view, encode_view

    if not HAS_INSIDE:
        pytest.skip("no Inside a layer tab")
    tour = demo.tour
    index = next(i for i, s in enumerate(tour.stops) if "modern block" in s.title)
    assert index == len(tour.stops) - 1
    view = tour.go(index)[4]
    tab = demo.views.tabs[view["tab"]]
    assert tab.label == "Inside a layer"
    assert view["values"]["compare"] is True
    assert view["values"]["model"] == "SmolLM2-135M-Instruct"
    assert isinstance(tab.controls["compare"], gr.Checkbox)
    query = encode_view(tab, view["values"])
    assert "compare=1" in query
    from urllib.parse import parse_qs

    restored = decode_view(parse_qs(query), demo.views.tabs, demo.model_registry)
    assert restored.messages == []
    assert restored.view is not None and restored.view["values"]["compare"] is True
    off = encode_view(tab, {**view["values"], "compare": False})
    assert "compare" not in off  # the default (off) stays out of links
