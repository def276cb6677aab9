"""Links to a view: the query string written for a view, read back and checked (bad values fall
back to the defaults with a message, never an exception)."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import gradio as gr
import pytest

from ui.links.share import TabView, check_value, decode_view, encode_view

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
    from ui.links.views import Views

    views = Views.__new__(Views)  # link() needs only the tabs
    views.tabs = {"attention": tab}
    values = [tab.defaults[k] for k in tab.controls]
    values[list(tab.controls).index("layer")] = 4
    url = views.link("http://host:7860/app/?old=1#x", "attention", *values)
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("http", "host:7860", "/app/")
    assert _params(parts.query) == {"tab": ["attention"], "layer": ["4"]}


# -- hostile links ----------------------------------------------------


def test_an_unknown_what_if_is_dropped_alone_with_a_warning(tab: TabView) -> None:
    """It used to raise IndexError ('list index out of range': the default is an empty list)
    and lose the whole link."""
    only = decode_view({"tab": ["attention"], "what_if": ["banana"]}, {"attention": tab})
    assert only.view["values"]["what_if"] == []
    assert len(only.messages) == 1 and "'banana'" in only.messages[0]
    mixed = decode_view(
        {"tab": ["attention"], "what_if": ["banana", "no √d scaling"], "layer": ["3"]},
        {"attention": tab},
    )
    assert mixed.view["values"]["what_if"] == ["no √d scaling"]
    assert mixed.view["values"]["layer"] == 3 and len(mixed.messages) == 1


def test_the_link_s_own_text_is_quoted_short_in_a_message(tab: TabView) -> None:
    restored = decode_view({"tab": ["attention"], "model": ["m" * 5_000]}, {"attention": tab})
    assert len(restored.messages[0]) < 300


def test_a_query_token_position_is_restored() -> None:
    with gr.Blocks():
        built = {"query": gr.Dropdown([("0: [CLS]", 0), ("1: the", 1)], value=1,
                                      allow_custom_value=True)}  # fmt: skip
    inside = TabView.of("Inside a layer", "inside", built)
    query = encode_view(inside, {"query": 7})
    assert _params(query) == {"tab": ["inside"], "query": ["7"]}
    restored = decode_view(_params(query), {"inside": inside})
    assert restored.messages == [] and restored.view["values"]["query"] == 7
    bad = decode_view({"tab": ["inside"], "query": ["x"]}, {"inside": inside})
    assert bad.view["values"]["query"] == 1 and "token position" in bad.messages[0]


HOSTILE = [
    "[Session expired — log in](https://evil.example/login)",
    "![x](https://evil.example/pixel.png)",
    "<img src=https://evil.example/x.png onerror=alert(1)>",
    "`code` **bold** <b>b</b> https://evil.example www.evil.example",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_link_text_in_a_message_renders_as_text(text: str) -> None:
    """Rendered by a CommonMark + linkify renderer (markdown-it, independent of the app's
    escaping), the note shows the text itself: no link, image, code span or HTML."""
    from markdown_it import MarkdownIt

    from ui.links.share import as_plain_markdown

    rendered = (
        MarkdownIt("commonmark", {"html": True, "linkify": True}).enable("linkify")
        if _has_linkify()
        else MarkdownIt("commonmark", {"html": True})
    ).render(as_plain_markdown(f"model: {text!r}"))
    for tag in ("<a", "<img", "<code", "<strong", "<b>"):
        assert tag not in rendered
    assert "evil.example" in rendered


def _has_linkify() -> bool:
    try:
        import linkify_it  # noqa: F401
    except ImportError:
        return False
    return True


class _Request:
    def __init__(self, query: str) -> None:
        from starlette.datastructures import QueryParams

        self.query_params = QueryParams(query)


def test_a_very_long_link_is_refused_with_a_message(tab: TabView, monkeypatch) -> None:
    from ui.links.views import Views

    shown: list[str] = []
    monkeypatch.setattr(gr, "Warning", shown.append)
    views = Views.__new__(Views)
    views.tabs = {"attention": tab}
    view, note = views.restore(None, _Request("tab=attention&text=" + "a" * 65_536))
    assert view is None and note and len(shown) == 1 and "65,555 characters" in shown[0]
    view, note = views.restore(None, _Request("tab=attention&model=<b>x</b>"))
    assert view["tab"] == "attention"
    assert "<b>" not in note and "<b>" not in shown[-1] and "&lt;b&gt;" in shown[-1]


class _Decoding:
    def __init__(self, end: int) -> None:
        self.records, self.end = [object()], end

    @property
    def done(self) -> bool:
        return len(self.records) >= self.end


def test_a_link_past_the_end_of_the_generation_stops_there_with_one_warning(monkeypatch) -> None:
    from ui.links.views import replay_steps

    shown: list[str] = []
    monkeypatch.setattr(gr, "Warning", shown.append)
    calls = []

    def step(source: str, state: SimpleNamespace) -> tuple:
        calls.append(source)
        state.decoding.records.append(object())
        return ("drawn", state)

    state = SimpleNamespace(decoding=_Decoding(end=6))
    result = replay_steps(step, 999, ["a b c", state], None)
    assert len(calls) == 5 and len(state.decoding.records) == 6
    assert result == ("drawn", state)
    assert len(shown) == 1 and "step 6" in shown[0]
    shown.clear()
    state = SimpleNamespace(decoding=_Decoding(end=6))
    replay_steps(step, 3, ["a b c", state], None)
    assert len(state.decoding.records) == 3 and not shown


class OneModelRegistry:
    """checkpoint(name) → the config of one architecture's model (2 layers per stack it has)."""

    def __init__(self, architecture: str = "decoder-only") -> None:
        self.architecture = architecture

    def checkpoint(self, name: str, session: object) -> SimpleNamespace:
        encoder = self.architecture != "decoder-only"
        decoder = self.architecture != "encoder-only"
        config = SimpleNamespace(
            architecture=self.architecture,
            n_encoder_layers=2 if encoder else 0,
            n_decoder_layers=2 if decoder else 0,
            n_heads=4,
            has_encoder=encoder,
            has_decoder=decoder,
        )
        return SimpleNamespace(config=config)


def test_the_stack_follows_a_decoder_only_model_and_warns_only_when_asked_for() -> None:
    """A link to Inside a layer on a decoder-only model showed 'choose decoder' twice: the tab's
    default stack (encoder) was applied to a model that has none."""
    with gr.Blocks():
        built = {
            "model": gr.Dropdown(["translate", "continue"], value="translate"),
            "stack": gr.Radio(["encoder", "decoder"], value="encoder"),
        }
    inside = TabView.of("Inside a layer", "inside", built)
    quiet = decode_view({"tab": ["inside"], "model": ["continue"]}, {"inside": inside},
                        OneModelRegistry())  # fmt: skip
    assert quiet.view["values"]["stack"] == "decoder" and quiet.messages == []
    asked = decode_view(
        {"tab": ["inside"], "model": ["continue"], "stack": ["encoder"]},
        {"inside": inside},
        OneModelRegistry(),
    )
    assert asked.view["values"]["stack"] == "decoder"
    assert len(asked.messages) == 1 and "showing decoder" in asked.messages[0]


def test_the_attention_kind_follows_the_model_and_a_refused_one_names_what_is_shown() -> None:
    """A link to Attention on SmolLM2 with a misspelt kind said "showing 'cross-attention'"
    and showed decoder masked self-attention, the only kind the model has; a link without a
    kind kept the tab's default (cross-attention), which the model does not have."""
    with gr.Blocks():
        built = {
            "model": gr.Dropdown(["translate", "continue"], value="translate"),
            "kind": gr.Radio(
                [
                    "encoder self-attention",
                    "decoder masked self-attention",
                    "cross-attention (decoder → encoder)",
                ],
                value="cross-attention (decoder → encoder)",
            ),
        }
    attention = TabView.of("Attention", "attention", built)
    registry = OneModelRegistry()
    tabs = {"attention": attention}
    only = "decoder masked self-attention"
    quiet = decode_view({"tab": ["attention"], "model": ["continue"]}, tabs, registry)
    assert quiet.view["values"]["kind"] == only and quiet.messages == []
    asked = decode_view(
        {"tab": ["attention"], "model": ["continue"], "kind": ["encoder self-attention"]},
        tabs,
        registry,
    )
    assert asked.view["values"]["kind"] == only
    assert len(asked.messages) == 1 and f"showing '{only}'" in asked.messages[0]
    misspelt = decode_view(
        {"tab": ["attention"], "model": ["continue"], "kind": ["decoder self-attention"]},
        tabs,
        registry,
    )
    assert misspelt.view["values"]["kind"] == only
    assert len(misspelt.messages) == 1, misspelt.messages
    assert "is not one of" in misspelt.messages[0] and f"showing '{only}'" in misspelt.messages[0]
    # The choices read as a sentence, not as a Python list.
    choices = "'encoder self-attention', 'decoder masked self-attention' or 'cross-attention"
    assert choices in misspelt.messages[0] and "[" not in misspelt.messages[0]
    # A model with every kind keeps the one asked for, and the tab's default without one.
    full = decode_view(
        {"tab": ["attention"], "model": ["translate"], "kind": ["encoder self-attention"]},
        tabs,
        OneModelRegistry("encoder-decoder"),
    )
    assert full.view["values"]["kind"] == "encoder self-attention" and full.messages == []


@pytest.mark.parametrize(("raw", "shown"), [("99", 3), ("0", 1), ("-4", 1)])
def test_a_layer_past_the_slider_names_the_model_s_own_range(
    tab: TabView, raw: str, shown: int
) -> None:
    # The slider reaches 48 for every model; the message must name the 3 this model has.
    params = {"tab": ["attention"], "model": ["reverse"], "layer": [raw]}
    restored = decode_view(params, {"attention": tab}, FakeRegistry())
    assert restored.view["values"]["layer"] == shown
    assert len(restored.messages) == 1
    message = restored.messages[0]
    assert f"{raw} is outside 1 to 3" in message and "reverse has 3" in message, message
    assert "48" not in message
