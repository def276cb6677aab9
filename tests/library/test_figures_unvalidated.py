"""The figures built without plotly's validation (``transformer.figures.common.figure``) are the
ones plotly's own validation makes from the same traces and layout: the same JSON (every value,
named colour scales and templates resolved as plotly resolves them; only the order of keys may
differ), and every property one plotly accepts (a validated build raises on a misspelt one)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

import transformer.figures.common as common
from transformer.core.run import TRACE
from transformer.figures.attention import (
    attention_difference_figure,
    attention_heatmap,
    grid_figure,
    head_figure,
    masks_figure,
    placeholder_figure,
    scores_and_weights_figure,
    weights_beside_figure,
)
from transformer.figures.generation import (
    causal_growth_figure,
    cross_attention_step_figure,
    next_token_figure,
    top_k_figure,
)
from transformer.figures.inside import section_figure
from transformer.figures.lens import logit_lens_figure, residual_norms_figure
from transformer.generation.lens import LogitLens, ResidualNorms
from transformer.lab.inside import inside_layer
from transformer.training.bundled import load_bundled

rng = np.random.default_rng(0)


def _lens(chosen: bool) -> LogitLens:
    probs = torch.tensor(rng.dirichlet(np.ones(8), size=4)[:, :5], dtype=torch.float32)
    return LogitLens(
        stack="decoder",
        position=3,
        layers=[0, 1, 2, 3],
        top_ids=torch.tensor(rng.integers(0, 50, size=(4, 5))),
        top_probs=probs,
        chosen=7 if chosen else None,
        chosen_rank=torch.tensor([3, 2, 1, 1]) if chosen else None,
        chosen_prob=torch.tensor([0.1, 0.2, 0.5, 0.7]) if chosen else None,
        final_norm=True,
    )


def _norms(big: bool) -> ResidualNorms:
    stages = ["input", "L1 self-attention", "L1 feed-forward"]
    stream = torch.tensor(rng.uniform(1, 2000 if big else 3, size=(3, 4)), dtype=torch.float32)
    added = torch.tensor(rng.uniform(0, 5, size=(2, 4)), dtype=torch.float32)
    return ResidualNorms("decoder", stages, stream, stages[1:], added, "pre")


def _sections() -> list[go.Figure]:
    models = load_bundled("cpu").models
    figures = []
    for name, stack in (("translate", "decoder"), ("continue", "decoder"), ("reverse", "encoder")):
        checkpoint = models[name]
        walk = inside_layer(checkpoint.model, checkpoint.tokenizer, "a b c", stack, 0, 0, 1)
        for key in ("input", "self-attention", "cross-attention", "feed-forward"):
            steps = walk.section(key)
            if steps:
                figures.append(section_figure(steps, 1, large_font=name == "continue"))
    return figures


def _records(kind: str) -> list[Any]:
    """A bundled translation model's attention records of one kind ("encoder_self",
    "decoder_self", "cross"), the source's second sentence padded."""
    model = load_bundled("cpu").models["translate"].model
    src = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    tgt = torch.tensor([[1, 10, 11, 12], [1, 13, 14, 15]])
    with torch.no_grad():
        trace = model.eval()(src, tgt, call=TRACE)
    return trace.attention_records(kind)


def _attention() -> list[go.Figure]:
    cross, self_ = _records("cross"), _records("decoder_self")
    queries, keys = ["0:a", "1:b", "2:c", "3:d"], ["0:v", "1:w", "2:x", "3:y", "4:z"]
    before = cross[0].weights[1, 0].numpy()
    after = np.roll(before, 1, axis=1)
    masked = cross[0].masked[1, 0].numpy()
    return [
        attention_heatmap(before, queries, keys, masked=masked, title="one"),
        head_figure(self_[1], 0, 1, queries, queries, values="scores", large_font=True),
        scores_and_weights_figure(cross[0], 1, 0, queries, keys),
        scores_and_weights_figure(self_[0], 0, 2, queries, queries, exact_scores_up_to=2),
        weights_beside_figure(before, after, queries, keys, masked_before=masked),
        grid_figure(cross, 1, queries, keys),
        grid_figure(self_, 0, queries, queries, exact_up_to=2, max_tile=2, large_font=True),
        masks_figure([True, True, True, False, False], queries, keys),
        masks_figure([True] * 4, queries, queries, causal=np.tril(np.ones((4, 4), bool))),
        attention_difference_figure(before, after, queries, keys, masked=masked),
        placeholder_figure("Nothing yet", "press Step to generate the first token " * 3),
    ]


BUILDERS: dict[str, Callable[[], Any]] = {
    "attention": _attention,
    "top k": lambda: top_k_figure(rng.dirichlet(np.ones(30)), [f"w{i}" for i in range(30)], k=5),
    "top k, chosen below": lambda: top_k_figure(
        rng.dirichlet(np.ones(30)), None, k=3, chosen=29, large_font=True
    ),
    "cross-attention": lambda: cross_attention_step_figure(
        rng.dirichlet(np.ones(4), size=2),
        ["0:a", "1:b", "2:<s>", "3:d"],
        masked=[False, False, False, True],
        query_label="2:x",
        layer=1,
    ),
    "causal growth": lambda: causal_growth_figure(
        [rng.dirichlet(np.ones(n)) for n in (1, 2, 3)], ["0:a", "1:b", "2:c", "3:d"], head=1
    ),
    "next token": lambda: next_token_figure(["a #1", "b #2"], [0.6, 0.3], chosen=0),
    "next token, sampled": lambda: next_token_figure(
        ["a #1", "b #2", "c #9 (rank 9)"], [0.6, 0.3, 0.01], [0.7, 0.3, 0.0], chosen=2
    ),
    "logit lens": lambda: logit_lens_figure(
        _lens(True), lambda i: f"w{i}", position_label="3:d", chosen_label="w7"
    ),
    "logit lens, nothing chosen": lambda: logit_lens_figure(_lens(False), large_font=True),
    "residual norms": lambda: residual_norms_figure(_norms(False), ["0:a", "1:b", "2:c", "3:d"]),
    "residual norms, log scale": lambda: residual_norms_figure(_norms(True), numbers=False),
    "inside sections": _sections,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_figure_is_what_plotly_s_validation_makes_of_it(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    global rng
    rng = np.random.default_rng(1)
    fast = BUILDERS[name]()
    rng = np.random.default_rng(1)
    monkeypatch.setattr(common, "VALIDATE", True)
    validated = BUILDERS[name]()
    fast = fast if isinstance(fast, list) else [fast]
    validated = validated if isinstance(validated, list) else [validated]
    assert len(fast) == len(validated) > 0
    for built, reference in zip(fast, validated, strict=True):
        assert isinstance(built, go.Figure)
        assert json.loads(built.to_json()) == json.loads(reference.to_json())


def test_a_named_colour_scale_is_written_out_as_plotly_js_cannot_read_its_name() -> None:
    built = common.figure([{"type": "heatmap", "z": [[1.0]], "colorscale": "RdBu_r"}], {})
    scale = built.to_plotly_json()["data"][0]["colorscale"]
    assert scale[0] == [0.0, "rgb(5,48,97)"] and scale[-1] == [1.0, "rgb(103,0,31)"]


def test_a_change_made_after_the_build_is_validated_as_plotly_validates_it() -> None:
    """A caller that sets a figure's title as a string (the training snapshots' grid) gets
    plotly's ``{"text": ...}``, which plotly.js reads; a string would be ignored."""
    built = causal_growth_figure([np.ones(1)], ["0:a"])
    built.update_layout(title="Snapshot", xaxis_title="key")
    built.update_traces(colorscale="RdBu_r")
    shown = built.to_plotly_json()
    assert shown["layout"]["title"] == {"text": "Snapshot"}
    assert shown["layout"]["xaxis"]["title"] == {"text": "key"}
    assert shown["data"][0]["colorscale"][0] == [0.0, "rgb(5,48,97)"]
