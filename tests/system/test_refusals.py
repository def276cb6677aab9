"""Inputs the app refuses with a message that says what to fix: never "something went wrong",
never HTML entities in the text an API client reads, never a value silently read as another."""

from __future__ import annotations

import html
import math
from types import SimpleNamespace

import gradio as gr
import pytest

from ui.serving import errors, limits
from ui.tabs import positions
from ui.tabs import tokenize as tokenize_tab

BPE = "BPE, trained live on the bundled corpus"


def _message(raised: pytest.ExceptionInfo) -> str:
    return str(raised.value.message)


@pytest.mark.parametrize("metric", [None, "", "euclid", 3])
def test_a_missing_or_unknown_similarity_is_refused_with_the_choices(metric):
    with pytest.raises(gr.Error) as raised:
        positions.positional(64, 32, 10000, "0", metric, False)
    message = _message(raised)
    assert "something went wrong" not in message
    assert message.startswith("similarity: ") and "'cosine', 'dot'" in message, message
    if metric in (None, ""):
        assert "an empty choice" in message


def test_learn_bpe_segments_a_word_not_a_text():
    summary, _ = tokenize_tab.learn("", 10, "a" * limits.MAX_BPE_WORD)
    assert "a" * limits.MAX_BPE_WORD in summary  # the longest word allowed is segmented
    with pytest.raises(gr.Error) as raised:
        tokenize_tab.learn("", 10, "a" * 10_000_000)
    message = _message(raised)
    assert "10,000,000 characters" in message and f"limit is {limits.MAX_BPE_WORD}" in message


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        (
            "<img src=x onerror=alert(1)> is not a model",
            "‹img src=x onerror=alert(1)› is not a model",
        ),
        ("Model & training", "Model & training"),
        ("a &lt;b&gt; &#60; & c", "a ＆lt;b＆gt; ＆#60; & c"),
    ],
)
def test_messages_are_plain_text_that_html_reads_the_same(text, plain):
    shown = errors.plain_message(text)
    assert shown == plain
    assert html.unescape(shown) == shown  # no entity: HTML and plain text read it alike
    assert "<" not in shown and ">" not in shown  # and no markup


def _textbox_fn(*values):
    components = [gr.Textbox(label="text"), gr.Number(label="steps")]
    return SimpleNamespace(inputs=components), list(values)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (5, "a int"),
        (2.5, "a float"),
        (True, "true or false"),
        (["a"], "a list"),
        ({"a": 1}, "a dict"),
    ],
)
def test_a_text_box_given_anything_but_text_is_refused(value, kind):
    block_fn, inputs = _textbox_fn(value, 3)
    assert errors._not_text(block_fn, inputs) == f"text must be text, got {kind}"


@pytest.mark.parametrize("value", ["the cat", "", None])
def test_a_text_box_given_text_or_nothing_passes(value):
    block_fn, inputs = _textbox_fn(value, math.pi)
    assert errors._not_text(block_fn, inputs) is None


@pytest.mark.slow
def test_the_launched_app_refuses_in_plain_words():
    from serving import api_client, call, leaks, raw_call, serve

    with serve() as (_, url):
        client = api_client(url)
        for text, kind in [
            (["a"], "a list"),
            (7, "a int"),
            (True, "true or false"),
            ({"a": 1}, "a dict"),
        ]:
            ok, message = raw_call(url, "/tokenize", text, BPE, 400, None, "(none)", 5)
            assert not ok and "must be text" in message and kind in message, message
        ok, message = raw_call(url, "/positional_encoding", 64, 32, 10000, "0", None, False)
        assert not ok and "an empty choice" in message and "'cosine'" in message, message
        ok, message = raw_call(url, "/positional_encoding", 64, 32, 10000, "0", "", False)
        assert not ok and "an empty choice is not in the list of choices" in message, message
        assert "'cosine'" in message and "'dot'" in message
        ok, message = call(client, "/tokenize", "a", "<img src=x> & b", 400, None, "(none)", 5)
        assert not ok and "‹img src=x› & b" in message, message
        assert "&lt;" not in message and "&amp;" not in message and "<img" not in message
        ok, message = raw_call(url, "/learn_bpe", "the cat", 10, "a" * 200_000)
        assert not ok and "200,000 characters" in message, message
        assert not leaks(message)


@pytest.mark.parametrize(
    ("layer", "head", "query", "named"),
    [
        (1, math.nan, 4, "head"),
        (1, 1, math.inf, "query"),
        (1, 1, -math.inf, "query"),
        (1, 1, 10**400, "query"),
        (math.nan, 1, 4, "layer"),
        (1, 1, "nan: cat", "query"),
    ],
)
def test_inside_compare_refuses_what_is_no_position(layer, head, query, named):
    """A stale menu value is moved into range; NaN, infinity and 10⁴⁰⁰ are not values, and
    were drawn as the defaults without a word."""
    from ui.serving import state
    from ui.tabs.inside.compare import inside_compare

    registry = state.ModelRegistry("cpu")
    sentence = "the small cat sees a red ball"
    with pytest.raises(gr.Error) as raised:
        inside_compare(
            registry, sentence, "translate", "encoder", layer, head, query, False, True, None
        )
    message = _message(raised)
    assert message.startswith(f"{named} must be a"), message
