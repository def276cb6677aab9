"""Links to a view: the query string written for a view, read back and checked (bad values fall
back to the defaults with a message, never an exception)."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import gradio as gr
import pytest

from ui.share import TabView, check_value, decode_view, encode_view

MODELS = ["translate", "reverse", "continue"]


@pytest.fixture(scope="module")
def tab() -> TabView:
    with gr.Blocks():
        built = {
            "text": gr.Textbox(value="the small cat"),
            "model": gr.Dropdown(MODELS, value="translate"),
            "stack": gr.Radio(["encoder", "decoder"], value="encoder"),
            "layer": gr.Slider(1, 48, value=2, step=1),
            "temperature": gr.Slider(0, 2, value=1.0, step=0.05),
            "seed": gr.Number(value=0, precision=0),
            "what_if": gr.CheckboxGroup(["causal mask off", "no √d scaling"]),
            "large": gr.Checkbox(value=False),
            "state": gr.State(None),
        }
    return TabView.of("Attention", "attention", built)


class FakeRegistry:
    """checkpoint(name) → a config with the layers and heads of a bundled-size model."""

    def checkpoint(self, name: str, session: object) -> SimpleNamespace:
        if name not in MODELS:
            raise ValueError(f"unknown model {name}")
        config = SimpleNamespace(n_encoder_layers=3, n_decoder_layers=2, n_heads=4)
        return SimpleNamespace(config=config)


def _params(query: str) -> dict[str, list[str]]:
    return parse_qs(query, keep_blank_values=True)


def test_values_and_states_are_told_apart(tab: TabView) -> None:
    assert "state" in tab.extra and "state" not in tab.controls
    assert tab.defaults == {
        "text": "the small cat",
        "model": "translate",
        "stack": "encoder",
        "layer": 2,
        "temperature": 1.0,
        "seed": 0,
        "what_if": [],
        "large": False,
    }


def test_a_view_survives_the_round_trip(tab: TabView) -> None:
    values = {
        "text": "a b & c = d? ü ✓",
        "model": "reverse",
        "stack": "decoder",
        "layer": 3,
        "temperature": 0.35,
        "seed": 42,
        "what_if": ["no √d scaling", "causal mask off"],
        "large": True,
    }
    query = encode_view(tab, values, step=4)
    params = _params(query)  # the standard library reads it back
    assert params["tab"] == ["attention"]
    assert params["text"] == ["a b & c = d? ü ✓"]
    assert params["layer"] == ["3"] and params["seed"] == ["42"] and params["large"] == ["1"]
    assert sorted(params["what_if"]) == ["causal mask off", "no √d scaling"]
    restored = decode_view(params, {"attention": tab})
    assert restored.messages == []
    assert restored.view == {
        "tab": "attention",
        "values": {**values, "what_if": ["causal mask off", "no √d scaling"]},  # menu order
        "step": 4,
    }


def test_defaults_are_left_out_so_links_stay_short(tab: TabView) -> None:
    query = encode_view(tab, {**tab.defaults, "layer": 2.0, "head": 9}, step=None)
    assert query == "tab=attention"
    query = encode_view(tab, {**tab.defaults, "model": "continue"})
    assert query == "tab=attention&model=continue"


def test_a_link_without_a_tab_restores_nothing(tab: TabView) -> None:
    assert decode_view({}, {"attention": tab}).view is None
    assert decode_view({"utm_source": ["x"]}, {"attention": tab}).messages == []


@pytest.mark.parametrize(
    ("key", "raw", "expected_default", "says"),
    [
        ("model", "gpt-17", "translate", "'gpt-17' is not one of"),
        ("layer", "99", 2, "99 is outside 1 to 48"),
        ("layer", "0", 2, "outside"),
        ("layer", "two", 2, "'two' is not a number"),
        ("layer", "nan", 2, "not a finite number"),
        ("temperature", "inf", 1.0, "not a finite number"),
        ("stack", "sideways", "encoder", "not one of"),
        ("large", "maybe", False, "is not 1 or 0"),
        ("text", "x" * 2001, "the small cat", "longer than 2,000 characters"),
    ],
)
def test_a_bad_value_falls_back_with_a_message(
    tab: TabView, key: str, raw: str, expected_default: object, says: str
) -> None:
    restored = decode_view({"tab": ["attention"], key: [raw]}, {"attention": tab})
    assert restored.view["values"][key] == expected_default
    assert len(restored.messages) == 1 and says in restored.messages[0]
    assert key in restored.messages[0]


def test_unknown_tab_key_and_step_are_reported(tab: TabView) -> None:
    restored = decode_view({"tab": ["nowhere"]}, {"attention": tab})
    assert restored.view is None and "nowhere" in restored.messages[0]
    restored = decode_view(
        {"tab": ["attention"], "colour": ["red"], "step": ["-2"]}, {"attention": tab}
    )
    assert restored.view["step"] is None
    assert any("'colour' is not a control" in m for m in restored.messages)
    assert any("step '-2'" in m for m in restored.messages)


def test_layers_and_heads_beyond_the_model_are_clamped(tab: TabView) -> None:
    params = {"tab": ["attention"], "model": ["reverse"], "layer": ["7"]}
    restored = decode_view(params, {"attention": tab}, FakeRegistry())
    assert restored.view["values"]["layer"] == 3  # its larger stack has 3 layers
    assert "reverse has 3" in restored.messages[0]
    fine = decode_view({**params, "layer": ["3"]}, {"attention": tab}, FakeRegistry())
    assert fine.messages == [] and fine.view["values"]["layer"] == 3


def test_slider_values_land_on_the_step(tab: TabView) -> None:
    temperature = tab.controls["temperature"]
    assert check_value(temperature, ["0.7300000001"]) == pytest.approx(0.75)
    assert check_value(tab.controls["layer"], ["2.0"]) == 2
    assert isinstance(check_value(tab.controls["layer"], ["2.0"]), int)
    assert check_value(tab.controls["seed"], ["7.4"]) == 7


def test_the_link_is_the_page_address_with_the_view(tab: TabView) -> None:
    from ui.views import Views

    views = Views.__new__(Views)  # link() needs only the tabs
    views.tabs = {"attention": tab}
    values = [tab.defaults[k] for k in tab.controls]
    values[list(tab.controls).index("layer")] = 4
    url = views.link("http://host:7860/app/?old=1#x", "attention", *values)
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("http", "host:7860", "/app/")
    assert _params(parts.query) == {"tab": ["attention"], "layer": ["4"]}
