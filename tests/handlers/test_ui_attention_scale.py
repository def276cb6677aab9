"""The Attention tab's long-input section (``/attention_scale``) on the bundled models: what it
draws agrees with a full capture of the same text, its limits are refused with a message, and a
link carries its controls."""

from __future__ import annotations

import json

import gradio as gr
import numpy as np
import pytest
import torch

from transformer.core.run import TRACE
from ui.serving import limits
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs.attention import scale


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


TEXT = "the small cat sees a red ball and the big dog sleeps on the green mat"


def test_window_and_overview_agree_with_a_full_capture(registry: ModelRegistry) -> None:
    figures = scale.attention_scale(
        registry, TEXT, "continue", "previous", 2, 3, 2, 5, 2, -1, False, SessionModels()
    )
    overview, head, window, rollout, summary = figures
    checkpoint = registry.checkpoint("continue", None)
    ids = torch.tensor(checkpoint.tokenizer.encode_ids(TEXT, add_bos=True))
    trace = checkpoint.model(tgt=ids[None], call=TRACE)
    full = trace.attention_records("decoder_self")[1].weights[0, 2]  # layer 2, head 3
    drawn = np.asarray(window.data[0].z, dtype=np.float32)
    n = len(ids)
    assert np.allclose(drawn, full[2:7, 0:7].numpy(), atol=1e-5)
    # Short enough to draw whole: the head's overview is every weight, no block averaging.
    assert np.allclose(np.asarray(head.data[0].z, dtype=np.float32), full.numpy(), atol=1e-5)
    # The overview's "previous" statistic: mass on key q-1, mean over queries 1.., by hand.
    records = trace.attention_records("decoder_self")
    expected = [
        [
            float(sum(r.weights[0, h, q, q - 1] for q in range(1, n)) / (n - 1))
            for h in range(r.weights.shape[1])
        ]
        for r in records
    ]
    assert np.allclose(np.asarray(overview.data[0].z, dtype=np.float32), expected, atol=1e-5)
    assert f"{n:,} tokens" in summary
    # Rollout of the last token sums to 1 and reads only earlier tokens (causal).
    assert abs(float(np.sum(rollout.data[0].y)) - 1) < 1e-3
    for figure in figures[:4]:
        assert len(json.dumps(figure.to_plotly_json(), default=str)) < 3_000_000


def test_an_input_over_the_limit_is_refused_by_name(registry: ModelRegistry, monkeypatch) -> None:
    monkeypatch.setattr(limits, "MAX_SCALE_TOKENS", 5)
    with pytest.raises(gr.Error, match="at most 5"):
        scale.attention_scale(
            registry, TEXT, "continue", "first", 1, 1, 0, 4, 2, -1, False, SessionModels()
        )
    line = scale.limit_line(registry, "continue", None)
    assert "5 tokens" in line


def test_statistic_names_are_checked(registry: ModelRegistry) -> None:
    with pytest.raises(gr.Error, match="statistic"):
        scale.attention_scale(
            registry, TEXT, "continue", "loudness", 1, 1, 0, 4, 2, -1, False, SessionModels()
        )


def test_a_link_carries_the_long_input_controls(registry: ModelRegistry) -> None:
    from urllib.parse import parse_qs

    from ui.links.share import TabView, decode_view, encode_view
    from ui.tabs import attention

    with gr.Blocks():
        large, session = gr.Checkbox(value=False), gr.State(SessionModels())
        built = attention.build(registry, large, session)
    tab = TabView.of("Attention", "attention", built)
    values = {
        "scale_text": "a long text",
        "scale_statistic": "entropy",
        "scale_layer": 4,
        "scale_head": 2,
        "scale_first_query": 40,
        "scale_window": 16,
        "scale_top_k": 5,
        "scale_token": 12,
    }
    query = encode_view(tab, values)
    params = parse_qs(query)
    assert params["scale_first_query"] == ["40"] and params["scale_statistic"] == ["entropy"]
    restored = decode_view(params, {"attention": tab})
    assert restored.messages == []
    assert restored.view is not None
    assert {k: restored.view["values"][k] for k in values} == values


def test_two_callers_asking_for_one_text_share_one_pass(
    registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pasted text's blur and the click on "Show every head" each ask for its pass: the
    second waits for the first's result instead of running a second pass beside it; a pass
    that fails leaves the next caller to run its own."""
    import threading

    text = TEXT + " while the lamp glows"
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []
    real = scale.long_pass

    def slow_pass(*args, **kwargs):
        calls.append(1)
        started.set()
        assert release.wait(10)
        if len(calls) == 1:
            raise RuntimeError("the first pass fails")
        return real(*args, **kwargs)

    monkeypatch.setattr(scale, "long_pass", slow_pass)
    results: list[object] = []

    def ask() -> None:
        try:
            results.append(scale.reduced_pass(registry, "continue", text, SessionModels())[0])
        except RuntimeError as error:
            results.append(error)

    first = threading.Thread(target=ask)
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=ask)
    second.start()
    second.join(0.3)
    assert second.is_alive() and len(calls) == 1  # waiting on the first, not computing
    release.set()
    first.join(10)
    second.join(10)
    # The first failed; the second then ran its own pass, which the cache now serves.
    assert len(calls) == 2
    assert isinstance(results[0], RuntimeError)
    again = scale.reduced_pass(registry, "continue", text, SessionModels())[0]
    assert len(calls) == 2 and results[1] is again
    assert not scale._passes.computing(scale._key(registry, "continue", text))


def test_the_changed_text_note_never_stays_over_figures_of_that_text(
    registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text pasted, then "Show every head" at once: the note that the figures are of the
    text before may start after the redraw of the new text; written last, it stayed over the
    new figures. It now says nothing while that redraw runs or once it is drawn, and still
    speaks for a text the figures are not of."""
    import threading

    session = SessionModels()
    text = TEXT + " near the door"
    started, release = threading.Event(), threading.Event()
    real = scale.long_pass

    def held_pass(*args, **kwargs):
        started.set()
        assert release.wait(10)
        return real(*args, **kwargs)

    assert "The text changed" in scale.stale_note(registry, text, "continue", session)
    monkeypatch.setattr(scale, "long_pass", held_pass)
    draw = threading.Thread(
        target=scale.attention_scale,
        args=(registry, text, "continue", "previous", 1, 1, 0, 5, 2, -1, False, session),
    )
    draw.start()
    assert started.wait(10)
    assert scale.stale_note(registry, text, "continue", session) == gr.skip()  # being drawn
    release.set()
    draw.join(10)
    assert scale.stale_note(registry, text, "continue", session) == gr.skip()  # drawn
    other = scale.stale_note(registry, TEXT + " by the window", "continue", session)
    assert "The text changed" in other
