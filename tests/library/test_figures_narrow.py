"""A figure laid out for a phone's width (transformer.figures.narrow): what the laptop's layout
put side by side is stacked, colour bars sit beside their own panel, titles are wrapped to the
width and start below the toolbar; a wide window's figure is left alone."""

from __future__ import annotations

import itertools

import numpy as np
import plotly.graph_objects as go
import torch

from transformer.core.trace import AttentionRecord
from transformer.figures import scores_and_weights_figure, top_k_figure, training_curves_figure
from transformer.figures.common import base_layout, figure, text_width, token_labels, wrap_words
from transformer.figures.narrow import TOOLBAR_ROOM, fit_width, is_narrow

PHONE = 362  # a 390 px window less the page's margins


def _record(length: int = 9) -> AttentionRecord:
    generator = torch.Generator().manual_seed(3)
    mask = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
    scores = torch.randn(1, 2, length, length, generator=generator).masked_fill(
        ~mask, float("-inf")
    )
    return AttentionRecord("decoder_self", 0, scores, torch.softmax(scores, -1), mask)


def _head_figure() -> go.Figure:
    labels = token_labels(["the", "small", "cat", "sees", "a", "red", "ball", "on", "mats"])
    return scores_and_weights_figure(_record(), 0, 1, labels, labels)


def test_only_a_narrow_window_is_refitted() -> None:
    fig = _head_figure()
    assert fit_width(fig, 1200) is fig and fit_width(fig, 0) is fig
    assert [is_narrow(w) for w in (None, 0, 390, 599, 600, 1280)] == [
        False,
        False,
        True,
        True,
        False,
        False,
    ]


def test_side_by_side_heat_maps_are_stacked_at_the_full_width() -> None:
    fig = _head_figure()
    before = fig.to_plotly_json()
    narrow = fit_width(fig, PHONE)
    assert fig.to_plotly_json() == before  # the figure given (a cached view) is untouched
    layout = narrow.layout
    assert list(layout.xaxis.domain) == [0, 1] and list(layout.xaxis2.domain) == [0, 1]
    top, bottom = layout.yaxis.domain, layout.yaxis2.domain
    assert bottom[1] < top[0]  # the weights below the scores, apart
    # Each panel keeps at least the plot height it had side by side.
    plot_before = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    plot_after = layout.height - layout.margin.t - layout.margin.b
    for low, high in (top, bottom):
        assert (high - low) * plot_after >= plot_before - 1
    # Each panel's title just above its own panel, over the middle of the width.
    titles = {note.text: note for note in layout.annotations}
    scores = next(n for t, n in titles.items() if t.startswith("scores"))
    weights = next(n for t, n in titles.items() if t.startswith("weights"))
    assert (scores.x, scores.y, weights.x, weights.y) == (0.5, top[1], 0.5, bottom[1])
    # Each colour bar beside its own panel (right of the plot), within that panel's height.
    for axis, (low, high) in (("coloraxis", top), ("coloraxis2", bottom)):
        bar = layout[axis].colorbar
        assert bar.x > 1 and bar.xanchor == "left" and bar.thickness <= 12
        assert low <= bar.y - bar.len / 2 and bar.y + bar.len / 2 <= high


def test_a_colour_bars_title_runs_along_it() -> None:
    # A grid of heat maps sharing one colour bar (Which part?'s score parts): the bar's title
    # printed above the bar sat over the top right panel's own title on a phone.
    traces = [
        {"type": "heatmap", "z": [[0, 1], [1, 0]], "coloraxis": "coloraxis",
         "xaxis": f"x{i or ''}", "yaxis": f"y{i or ''}"}
        for i in range(4)
    ]  # fmt: skip
    layout = {
        "coloraxis": {"colorbar": {"title": {"text": "score part"}}},
        "height": 500,
        **{
            f"xaxis{i or ''}": {"domain": [0.55 * (i % 2), 0.45 + 0.55 * (i % 2)]} for i in range(4)
        },
        **{
            f"yaxis{i or ''}": {"domain": [0.55 * (i // 2), 0.45 + 0.55 * (i // 2)]}
            for i in range(4)
        },
    }
    wide = go.Figure(traces, layout)
    assert wide.layout.coloraxis.colorbar.title.side is None  # plotly's default: above the bar
    narrow = fit_width(wide, PHONE)
    assert narrow.layout.coloraxis.colorbar.title.side == "right"
    assert narrow.layout.coloraxis.colorbar.title.text == "score part"
    assert wide.layout.coloraxis.colorbar.title.side is None  # the figure given is untouched
    assert fit_width(go.Figure(traces, layout), 1000).layout.coloraxis.colorbar.title.side is None


def test_a_title_is_wrapped_to_the_width_below_the_toolbar() -> None:
    fig = _head_figure()
    narrow = fit_width(fig, PHONE)
    title = narrow.layout.title
    lines = title.text.split("<br>")
    assert len(lines) >= 2
    assert " ".join(lines) == fig.layout.title.text  # every word kept, in order
    for line in lines:
        assert text_width(line, title.font.size) <= PHONE - 24
    assert title.yref == "container" and title.yanchor == "top"
    assert round((1 - title.y) * narrow.layout.height) == TOOLBAR_ROOM
    # The top margin holds the toolbar, every line and the panel titles' room it had.
    assert narrow.layout.margin.t >= fig.layout.margin.t + TOOLBAR_ROOM + (len(lines) - 1) * 13


def test_wrap_words_keeps_words_whole_and_lines_within_the_room() -> None:
    text = "Cross-attention (decoder → encoder) · layer 2 · head 1 · grey = masked"
    lines = wrap_words(text, 14, 200)
    assert " ".join(lines) == text
    assert all(text_width(line, 14) <= 200 for line in lines)
    # Greedy: no line could have taken the next line's first word.
    for line, following in itertools.pairwise(lines):
        assert text_width(f"{line} {following.split(' ')[0]}", 14) > 200
    assert wrap_words("supercalifragilistic", 14, 20) == ["supercalifragilistic"]
    assert wrap_words("a<br>b", 14, 200) == ["a", "b"]


TITLE = "Cross-attention of the new step from ▁ball · layer 6 · grey = masked"


def test_a_title_wraps_to_the_least_width_its_figure_is_given_between_its_parts() -> None:
    """Plotly never wraps a title; beside another figure on a projector in Large font the
    cross-attention's ran off its figure's edge."""
    for large in (False, True):
        whole = base_layout(TITLE, 300, large)
        assert base_layout(TITLE, 300, large, narrowest=2000) == whole
        wrapped = base_layout(TITLE, 300, large, narrowest=480)
        size = whole["title"]["font"]["size"]
        lines = wrapped["title"]["text"].split("<br>")
        assert len(lines) > 1
        assert all(text_width(line, size) <= 480 - 24 for line in lines)
        # Broken where its parts meet, each part's words kept in order.
        assert " ".join(lines).replace(" · ", " ") == TITLE.replace(" · ", " ")
        assert not any(line.endswith("·") or line.startswith("·") for line in lines)
        # The plot keeps its height: the figure grows by what the lines take.
        grown = round((len(lines) - 1) * 1.3 * size)
        assert wrapped["margin"]["t"] == whole["margin"]["t"] + grown
        assert wrapped["height"] == 300 + grown


def test_a_title_wrapped_by_its_builder_is_not_given_its_room_twice_on_a_phone() -> None:
    built = base_layout(TITLE, 300, False)
    for narrowest in (None, 480):
        layout = base_layout(TITLE, 300, False, narrowest=narrowest)
        fitted = fit_width(figure([{"type": "bar", "x": [1], "y": ["a"]}], layout), PHONE)
        title = fitted.layout.title
        lines = title.text.split("<br>")
        assert all(text_width(line, title.font.size) <= PHONE - 24 for line in lines)
        # Above the plot: the toolbar and each line once, whoever wrapped them.
        grown = TOOLBAR_ROOM + (len(lines) - 1) * 1.3 * title.font.size
        assert fitted.layout.margin.t == round(built["margin"]["t"] + grown), narrowest
        assert fitted.layout.height == round(300 + grown), narrowest


def test_a_bar_charts_numbers_past_the_bars_keep_room_on_the_right() -> None:
    probabilities = np.full(50, 0.011 / 49)
    probabilities[7] = 0.989
    fig = fit_width(top_k_figure(probabilities, k=5, chosen=7), PHONE)
    size = fig.layout.font.size
    # "98.9%" printed past a bar that reaches the axis's end.
    assert fig.layout.margin.r >= text_width("98.9%", size) + 4


def test_two_curves_side_by_side_are_stacked() -> None:
    history = [{"step": s, "loss": 3 / (s + 1), "accuracy": s / 10} for s in range(10)]
    fig = fit_width(training_curves_figure(history), PHONE)
    first, second = fig.layout.yaxis.domain, fig.layout.yaxis2.domain
    assert second[1] < first[0] or first[1] < second[0]


def test_a_long_caption_is_made_smaller_then_shortened_to_the_width() -> None:
    caption = "<b>5. query q</b>   q = x·W_Q + b_Q   (head 1: columns 0…15)   head 1, token 4:cat"
    short = "<b>1. the input x</b>"
    notes = [
        {"text": text, "x": 0, "y": y, "xref": "paper", "yref": "paper", "xanchor": "left"}
        for text, y in ((caption, 0.9), (short, 0.5))
    ]
    layout = base_layout("", 400, False, annotations=notes)
    fig = fit_width(figure([{"type": "bar", "x": [1], "y": ["a"]}], layout), PHONE)
    cut, kept = fig.layout.annotations
    room = PHONE - fig.layout.margin.l
    assert text_width(cut.text.replace("<b>", "").replace("</b>", ""), cut.font.size) <= room
    assert cut.text.startswith("<b>5. query q</b>   q = x·W_Q") and cut.text.endswith("…")
    assert cut.font.size >= round(13 * 0.8)
    assert kept.text == short and kept.font.size is None  # a caption that fits is left alone


def test_a_column_of_panels_keeps_its_captions_at_the_left_edge_fitted() -> None:
    """Inside a layer's blocks are one column, each block with its axes and a caption above it
    at the plot's left edge: nothing to stack, and each caption is fitted where it is (moved
    to the centre as a panel title, it ran past the figure's edge)."""
    caption = "<b>5. query q</b>   q = x·W_Q + b_Q   (head 1: columns 0…15)   head 1, token 4:cat"
    rows = ([0.7, 0.95], [0.35, 0.6], [0.0, 0.25])
    traces, layout = [], base_layout("", 600, False)
    notes = []
    for index, domain in enumerate(rows, start=1):
        suffix = "" if index == 1 else str(index)
        traces.append(
            {"type": "heatmap", "z": [[1, 2]], "xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}
        )
        layout[f"xaxis{suffix}"] = {"domain": [0, 1], "anchor": f"y{suffix}"}
        layout[f"yaxis{suffix}"] = {"domain": domain, "anchor": f"x{suffix}"}
        notes.append(
            {"text": caption, "x": 0, "y": domain[1], "xref": "paper", "yref": "paper",
             "xanchor": "left", "yanchor": "bottom"}
        )  # fmt: skip
    layout["annotations"] = notes
    fig = fit_width(figure(traces, layout), PHONE)
    assert [list(fig.layout[f"yaxis{s}"].domain) for s in ("", "2", "3")] == [*map(list, rows)]
    room = PHONE - fig.layout.margin.l
    for note in fig.layout.annotations:
        assert note.x == 0 and note.xanchor == "left"
        shown = note.text.replace("<b>", "").replace("</b>", "")
        assert text_width(shown, note.font.size) <= room and note.text.endswith("…")
