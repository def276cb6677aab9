"""The research figures: each builder's figure as plotly validates it (no misspelt property),
the numbers drawn as given, layers and heads numbered from 1, and payloads small."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import transformer.figures.common as common
from transformer.figures import research as figures

RNG = np.random.default_rng(0)
LABELS = [f"{i}:w{i}" for i in range(6)]


def _builders() -> dict[str, object]:
    return {
        "layer map": lambda: figures.layer_map_figure(
            RNG.standard_normal((4, 6)), LABELS, "patching", "restored", fixed_range=(-1, 1)
        ),
        "parts": lambda: figures.parts_bar_figure(
            ["embedding", "L1H1", "L1 MLP"], [1.0, -2.0, 3.5], "dla", "logit", total=2.5
        ),
        "tokens": lambda: figures.token_bars_figure(["a", "b", "a"], [0.1, -0.2, 0.3], "ig", "x"),
        "score parts": lambda: figures.score_parts_figure(
            {name: RNG.standard_normal((6, 6)) for name in ("tt", "tp", "pt", "pp", "e")},
            LABELS,
            LABELS,
            "parts",
        ),
        "paired maps": lambda: figures.paired_heatmaps_figure(
            RNG.random((6, 6)), RNG.random((6, 6)), LABELS, ("A", "B"), "pair"
        ),
        "paired bars": lambda: figures.paired_bars_figure(
            LABELS, RNG.random(6), RNG.random(6), ("A", "B"), "loss", "nats"
        ),
        "next tokens": lambda: figures.next_tokens_figure(
            [("x", 0.5), ("y", 0.25)], [("z", 0.75)], ("A", "B"), "next"
        ),
    }


@pytest.mark.parametrize("name", list(_builders()))
def test_each_figure_validates_and_is_small(name, monkeypatch):
    build = _builders()[name]
    fast = json.loads(build().to_json())
    monkeypatch.setattr(common, "VALIDATE", True)
    checked = json.loads(build().to_json())  # plotly refuses a misspelt property here
    assert len(fast["data"]) == len(checked["data"])
    assert len(json.dumps(fast)) < 60_000


def test_layer_map_rows_are_layers_from_one_and_values_as_given():
    values = np.arange(12, dtype=np.float32).reshape(3, 4) / 12
    fig = figures.layer_map_figure(values, ["head 1", "head 2", "head 3", "head 4"], "t", "c")
    assert list(fig.data[0].y) == ["layer 1", "layer 2", "layer 3"]
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), values)
    assert fig.data[0].zmid == 0.0


def test_a_normalised_map_keeps_its_ends_unless_a_value_passes_them():
    fig = figures.layer_map_figure(
        np.array([[0.2, 0.5]]), ["a", "b"], "t", "c", fixed_range=(-1, 1)
    )
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-1.0, 1.0)
    fig = figures.layer_map_figure(
        np.array([[0.2, 2.0]]), ["a", "b"], "t", "c", fixed_range=(-1, 1)
    )
    assert fig.data[0].zmax == 2.0 and fig.data[0].zmin == -2.0


def test_the_parts_chart_says_their_sum_beside_the_real_logit():
    fig = figures.parts_bar_figure(["a", "b"], [1.25, 2.5], "t", "logit", total=3.75)
    assert "sum of the parts 3.750" in fig.layout.annotations[0].text
    assert "the real logit 3.750" in fig.layout.annotations[0].text


def test_score_parts_get_a_panel_each_on_one_colour_scale():
    parts = {name: RNG.standard_normal((3, 3)) for name in ("a", "b", "c")}
    parts["a"][0, 2] = -np.inf  # a masked cell is left blank, not drawn as -inf
    fig = figures.score_parts_figure(parts, ["q0", "q1", "q2"], ["k0", "k1", "k2"], "t")
    assert [a.text for a in fig.layout.annotations] == ["a", "b", "c"]
    assert {trace.coloraxis for trace in fig.data} == {"coloraxis"}
    assert np.isnan(np.asarray(fig.data[0].z, dtype=float)[0, 2])


def test_the_score_parts_grid_is_stacked_on_a_phone_its_titles_apart():
    """At 390 px the two columns of parts become one: each panel at the full width, in the
    grid's reading order, each title above its own panel and none on another's."""
    from transformer.figures.narrow import fit_width

    names = ["token-token", "token-position", "position-token", "position-position", "rest"]
    parts = {n: np.full((3, 3), float(i)) for i, n in enumerate(names)}
    labels = ["0:a", "1:b", "2:c"]
    fig = fit_width(figures.score_parts_figure(parts, labels, labels, "parts"), 370).to_dict()
    layout = fig["layout"]
    xs = [layout[f"xaxis{'' if i == 0 else i + 1}"]["domain"] for i in range(len(names))]
    ys = [layout[f"yaxis{'' if i == 0 else i + 1}"]["domain"] for i in range(len(names))]
    assert all(list(x) == [0.0, 1.0] for x in xs)
    for upper, lower in itertools.pairwise(ys):  # top to bottom in the grid's reading order
        assert lower[1] < upper[0]
    titles = {a["text"]: a for a in layout["annotations"] if a["text"] in names}
    for name, (_, high) in zip(names, ys, strict=True):
        assert titles[name]["y"] == pytest.approx(high) and titles[name]["x"] == 0.5
    # Each panel drawn the same height as in the grid, at least.
    assert layout["height"] > 2 * 420
