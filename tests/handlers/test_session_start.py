"""A session's first request copies none of its components' configs (``ui/serving/sessions.py``):
gradio made one per component then, on the event loop, and fifty students arriving at once held
every other visitor for two seconds. What a session reads of them is what gradio's own copies
hold (a direct re-implementation of gradio's eager copy is the reference)."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pytest
from gradio.state_holder import SessionState

from ui.serving.sessions import start_sessions_on_demand


@pytest.fixture(scope="module")
def blocks() -> gr.Blocks:
    with gr.Blocks() as demo:
        text = gr.Textbox("the cat sat", label="Text")
        gr.Slider(1, 6, value=2, step=1, label="Layer")
        gr.State({"steps": [1, 2]})
        with gr.Row():
            gr.Markdown("**hello**")
        text.change(lambda t: t, text, text)
    return demo


def _eager(blocks: gr.Blocks, session: Any) -> dict[int, Any]:
    """Gradio's copies as its ``SessionState`` makes them when a session starts."""
    config = session.blocks_config
    return {
        k: config.config_for_block(k, [], v) for k, v in config.blocks.items() if k in blocks.blocks
    }


def test_a_session_starts_without_copying_a_config(blocks, monkeypatch):
    start_sessions_on_demand()
    made: list[int] = []
    config_class = type(blocks.default_config)
    original = config_class.config_for_block

    def counted(_id: int, *args: Any, **kwargs: Any) -> Any:
        made.append(_id)
        return original(_id, *args, **kwargs)

    monkeypatch.setattr(config_class, "config_for_block", staticmethod(counted))
    session = SessionState(blocks)
    assert made == []
    # One component's value changed: only its copy is made.
    text = next(k for k, b in blocks.blocks.items() if isinstance(b, gr.Textbox))
    session._update_value_in_config(text, "a dog ran")
    assert made == [text]


def test_what_a_session_reads_is_gradios_own_copy(blocks):
    start_sessions_on_demand()
    session = SessionState(blocks)
    expected = _eager(blocks, session)
    text = next(k for k, b in blocks.blocks.items() if isinstance(b, gr.Textbox))
    slider = next(k for k, b in blocks.blocks.items() if isinstance(b, gr.Slider))
    session._update_value_in_config(slider, 5)  # a later component changed first
    session._update_value_in_config(text, "a dog ran")
    expected[slider]["props"]["value"] = 5
    expected[text]["props"]["value"] = "a dog ran"
    listed = list(session.components)  # a deep link lists them all, in gradio's order
    assert listed == [c for c in expected.values() if c]
    assert session.config_values[text]["props"]["value"] == "a dog ran"
    assert 10**9 not in session.config_values
    with pytest.raises(KeyError):
        session.config_values[10**9]


def test_a_session_keeps_its_own_state_values(blocks):
    start_sessions_on_demand()
    state = next(k for k, b in blocks.blocks.items() if isinstance(b, gr.State))
    first, second = SessionState(blocks), SessionState(blocks)
    first[state]["steps"].append(3)
    assert second[state] == {"steps": [1, 2]}
    assert first[state] == {"steps": [1, 2, 3]}
