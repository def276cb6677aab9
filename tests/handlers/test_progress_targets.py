"""Where the page shows a running event's progress: gradio's page keeps the
status of every component any event showed progress on and, at every status change of every
later event, looks each one up and copies its props and everything inside it. With gradio's
default (an event's progress on all its outputs) a Generate Step re-read every figure, control
and the tab selector that holds the app. Read here from the config the page receives, with the
page's own rule: an event's targets are its ``show_progress_on``, else all its outputs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr
import pytest

# What a student sets or what holds other components: progress never belongs on these.
CONTROLS = (
    gr.Slider, gr.Dropdown, gr.Radio, gr.Checkbox, gr.CheckboxGroup, gr.Number, gr.Button,
    gr.File, gr.Textbox, gr.State, gr.Timer,
)  # fmt: skip


@pytest.fixture(scope="module")
def demo() -> Iterator[gr.Blocks]:
    from ui.demo import build_demo

    built = build_demo("cpu", preload=False)
    yield built
    built.close()


def _targets(dependency: dict[str, Any]) -> list[int]:
    """The page's rule (gradio's Blocks.js: ``show_progress_on || outputs``)."""
    on = dependency.get("show_progress_on")
    return list(on) if on is not None else list(dependency["outputs"])


def _tab_of(block: Any) -> Any:
    while block is not None and not isinstance(block, gr.Tab):
        block = block.parent
    return block


def test_no_event_shows_progress_on_a_control_or_a_container(demo: gr.Blocks) -> None:
    for dependency in demo.get_config_file()["dependencies"]:
        for target in _targets(dependency):
            block = demo.blocks[target]
            assert not isinstance(block, CONTROLS), (dependency["api_name"], block)
            assert not getattr(block, "children", None), (dependency["api_name"], block)


def test_an_event_shows_progress_once_per_tab_and_a_hidden_one_nowhere(demo: gr.Blocks) -> None:
    for dependency in demo.get_config_file()["dependencies"]:
        targets = _targets(dependency)
        if dependency["show_progress"] == "hidden":
            assert targets == [], dependency["api_name"]
            continue
        tabs = [_tab_of(demo.blocks[target]) for target in targets]
        assert len(tabs) == len(set(map(id, tabs))), dependency["api_name"]


def test_an_event_that_draws_shows_that_it_is_running(demo: gr.Blocks) -> None:
    # Narrowed, not removed: an event that shows progress and writes a caption or a figure
    # shows it on one of them.
    shows = (gr.Markdown, gr.Plot, gr.HTML, gr.Dataframe, gr.HighlightedText, gr.Code)
    for dependency in demo.get_config_file()["dependencies"]:
        outputs = [demo.blocks[o] for o in dependency["outputs"]]
        if dependency["show_progress"] != "hidden" and any(isinstance(o, shows) for o in outputs):
            assert _targets(dependency), dependency["api_name"]


def test_an_event_that_writes_in_a_tab_shows_no_progress_outside_the_tabs(
    demo: gr.Blocks,
) -> None:
    # The link's event also writes the page's status line, usually empty: a spinner there, above
    # the tabs, said nothing the linked tab's own caption did not.
    for dependency in demo.get_config_file()["dependencies"]:
        if dependency.get("show_progress_on") is None:
            continue  # gradio's default, all outputs: the tests above
        outputs = [demo.blocks[output] for output in dependency["outputs"]]
        if not any(_tab_of(block) is not None for block in outputs):
            continue
        outside = [t for t in _targets(dependency) if _tab_of(demo.blocks[t]) is None]
        assert not outside, (dependency["api_name"], outside)
