"""The Which part? tab's handlers, called directly on the bundled ``continue`` model and a tiny
random GPT-2 through the registry: what each figure holds is checked against the model run
in the test (the real logit, the real scores, layer and head counts read off the modules),
and bad input against the message a student should read."""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import replace
from unittest import mock

import gradio as gr
import numpy as np
import pytest
import torch

from transformer import research
from transformer.core.operations import PAPER
from transformer.core.run import TRACE, Call
from transformer.lab.perplexity import read_text
from ui.serving.errors import InputError
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs.research import handlers, layout, text
from ui.tabs.research.layout import PRESETS, fitting_preset

BUNDLED = "continue"
CAT = PRESETS["cat → dog"]


def _raw(handler):
    """The handler without its error wrapper, so a test sees the InputError itself."""
    return inspect.unwrap(handler)


@pytest.fixture(scope="module")
def registry(hf_models) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), [str(hf_models["gpt2"])])


@pytest.fixture
def session() -> SessionModels:
    return SessionModels()


def _z(fig) -> np.ndarray:
    return np.asarray(fig.data[0].z, dtype=float)


def _ids(registry: ModelRegistry, name: str, prompt: str) -> torch.Tensor:
    checkpoint = registry.checkpoint(name, None)
    ids = checkpoint.tokenizer.encode_ids(prompt, add_bos=checkpoint.config.prompt_bos)
    return torch.tensor([ids])


def test_patching_figure_is_layers_by_positions_or_heads(registry, session):
    model = registry.checkpoint(BUNDLED, None).model
    n_layers, n_heads = len(model.decoder.layers), model.config.n_heads
    length = _ids(registry, BUNDLED, CAT[0]).shape[1]
    fig, summary = _raw(handlers.research_patching)(
        registry, BUNDLED, *CAT, "residual", False, session
    )
    assert _z(fig).shape == (n_layers, length)
    assert "0 is the corrupted run and 1 the clean run" in summary
    fig, _ = _raw(handlers.research_patching)(registry, BUNDLED, *CAT, "head", False, session)
    assert _z(fig).shape == (n_layers, n_heads)
    assert list(fig.data[0].x) == [f"head {h + 1}" for h in range(n_heads)]


def test_patching_reports_its_progress_to_the_page(registry, session):
    calls: list[tuple] = []

    def progress(value, desc=None, **_):
        calls.append(value)

    _raw(handlers.research_patching)(
        registry, BUNDLED, *CAT, "mlp", False, session, progress=progress
    )
    assert calls, "the sweep said nothing while it ran"
    done, total = calls[-1]
    assert done == total > 1


def test_patching_refuses_prompts_of_different_lengths_naming_the_counts(registry, session):
    clean_n = _ids(registry, BUNDLED, text.CLEAN).shape[1]
    corrupted_n = _ids(registry, BUNDLED, text.CORRUPTED).shape[1]
    assert clean_n != corrupted_n  # the bundled tokenizer cuts these two differently
    with pytest.raises(InputError) as refused:
        _raw(handlers.research_patching)(
            registry,
            BUNDLED,
            text.CLEAN,
            text.CORRUPTED,
            " Paris",
            " Rome",
            "residual",
            False,
            session,
        )
    message = str(refused.value)
    assert f"has {clean_n} tokens" in message and f"one {corrupted_n}" in message


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((*CAT[:2], " cat", " cat", "residual"), "the same token"),
        ((*CAT[:2], "", " dog", "residual"), "enter the answer"),
        ((*CAT, "everything"), "site must be one of"),
        (("", CAT[1], " cat", " dog", "residual"), "enter the clean prompt"),
    ],
)
def test_patching_refuses_bad_input_in_words(registry, session, args, says):
    with pytest.raises(InputError, match=says):
        _raw(handlers.research_patching)(registry, BUNDLED, *args, False, session)


TRANSLATE = text.ENCODER_DECODER_PRESETS["translate"]
MINILM = "all-MiniLM-L6-v2"


def _translate_ids(registry: ModelRegistry, target: str = TRANSLATE[2]):
    """The bundled translate model, its clean and corrupted sources and decoder ids, as the
    model's own tokenizer and start token give them."""
    checkpoint = registry.checkpoint("translate", None)
    tokenizer = checkpoint.tokenizer
    sources = [torch.tensor([tokenizer.encoding(s).ids]) for s in TRANSLATE[:2]]
    ids = torch.tensor([[tokenizer.bos_id, *tokenizer.encode_ids(target)]])
    answer, wrong = (tokenizer.encode_ids(t)[0] for t in TRANSLATE[3:])
    return checkpoint.model, sources, ids, answer, wrong


@pytest.mark.parametrize("site", ["residual", "cross", "head"])
def test_translate_patching_two_sources_equals_the_library(registry, session, site):
    model, (clean, corrupted), ids, answer, wrong = _translate_ids(registry)
    fig, summary = _raw(handlers.research_patching)(
        registry, "translate", *TRANSLATE[:2], *TRANSLATE[3:], site, False, session, TRANSLATE[2]
    )
    expected = research.activation_patching(
        model, ids, ids, answer, wrong, site, source=clean, corrupted_source=corrupted
    )
    np.testing.assert_allclose(_z(fig), expected.numpy(), atol=1e-6)
    assert "encoder-decoder" in summary and "two sources" in summary


def test_patching_a_corrupted_source_matches_a_patch_written_out(registry):
    """The library's two-source sweep against the same patch done by hand: the clean run's
    cross-attention output at (last layer, last position) copied into the corrupted run."""
    model, (clean, corrupted), ids, answer, wrong = _translate_ids(registry)
    last = model.config.n_decoder_layers - 1
    kept = {}

    def keep(site, x):
        if site == ("decoder", last, "cross"):
            kept["x"] = x.clone()
        return x

    def put(site, x):
        if site == ("decoder", last, "cross"):
            x = x.clone()
            x[:, -1] = kept["x"][:, -1]
        return x

    with torch.no_grad():
        diff = [
            float(out[0, -1, answer] - out[0, -1, wrong])
            for out in (
                model(clean, ids, call=Call(ops=replace(PAPER, patch=keep))),
                model(corrupted, ids),
                model(corrupted, ids, call=Call(ops=replace(PAPER, patch=put))),
            )
        ]
    restored = (diff[2] - diff[1]) / (diff[0] - diff[1])
    swept = research.activation_patching(
        model, ids, ids, answer, wrong, "cross", source=clean, corrupted_source=corrupted
    )
    assert abs(float(swept[last, -1]) - restored) < 1e-5
    assert abs(float(swept[last, 0]) - restored) > 1e-3  # the wrong position differs


def test_translate_decoder_methods_equal_the_library(registry, session):
    model, (source, _), ids, _, _ = _translate_ids(registry)
    fig, summary = _raw(handlers.research_ablation)(
        registry, "translate", TRANSLATE[2], "zero", False, session, TRANSLATE[0]
    )
    with pytest.raises(InputError, match="loss is measured"):
        _raw(handlers.research_ablation)(
            registry, "translate", "", "zero", False, session, TRANSLATE[0]
        )
    np.testing.assert_allclose(
        _z(fig), research.head_ablation(model, ids, "zero", source=source).numpy(), atol=1e-6
    )
    with torch.no_grad():
        best = int(model(source, ids)[0, -1].argmax())
    fig, summary = _raw(handlers.research_input)(
        registry, "translate", TRANSLATE[2], "", "gradient x input", False, session, TRANSLATE[0]
    )
    expected = research.input_attribution(model, ids, best, "gradient_x_input", source=source)
    scores = expected if isinstance(expected, torch.Tensor) else expected.scores
    np.testing.assert_allclose(np.asarray(fig.data[0].y, float), scores.numpy(), atol=1e-5)
    assert "source held fixed" in summary
    fig, summary, _ = _raw(handlers.research_scores)(
        registry, "translate", TRANSLATE[2], 2, 3, False, session, TRANSLATE[0]
    )
    parts = research.attention_score_parts(model, ids, 1, 2, source=source)
    assert len(fig.data) == len(parts)
    for trace, part in zip(fig.data, parts.values(), strict=True):
        np.testing.assert_allclose(np.asarray(trace.z, float), part.numpy(), atol=1e-6)
    assert _gap(summary) < 1e-5
    # The 2017 block normalises after each sub-layer: its logit has no parts, said in words.
    fig, summary = _raw(handlers.research_logit)(
        registry, "translate", TRANSLATE[2], "", False, session, TRANSLATE[0]
    )
    assert "post-norm" in summary and fig.layout.annotations


def test_an_encoder_decoder_model_needs_its_source(registry, session):
    with pytest.raises(InputError, match="the text the encoder reads"):
        _raw(handlers.research_scores)(registry, "translate", "le", 1, 1, False, session, "")
    with pytest.raises(InputError, match="as many tokens"):
        _raw(handlers.research_patching)(
            registry,
            "translate",
            TRANSLATE[0],
            "a cat",
            " minou",
            " chenot",
            "residual",
            False,
            session,
            "le",
        )


def test_the_page_shows_a_source_for_an_encoder_decoder_model_only(registry):
    fitted = layout.fit_inputs(registry, "translate", None, "residual")
    assert fitted[0].visible is True and fitted[0].value == TRANSLATE[0]
    assert fitted[1].label == text.TARGET_LABEL and fitted[1].value == TRANSLATE[2]
    assert "cross" in [key for _, key in fitted[7].choices]
    fitted = layout.fit_inputs(registry, BUNDLED, None, "cross")
    assert fitted[0].visible is False and fitted[7].value == "residual"
    assert "cross" not in [key for _, key in fitted[7].choices]


def test_a_model_change_clears_the_figures_and_names_the_button_that_draws_each():
    with gr.Blocks():
        sections = {
            "patching": [gr.Plot(), gr.Markdown()],
            "scores": [gr.Plot(), gr.Markdown(), gr.Markdown("what a score is made of")],
            "side": [gr.Plot(), gr.Plot(), gr.Plot(), gr.Markdown()],
        }
    patch, patch_note, scores, scores_note, why, *side = layout.cleared(sections, "a_b*")
    assert patch is None and scores is None and side[:3] == [None, None, None]
    assert patch_note == "Press **Patch** to draw it for `a_b*`."
    assert "**Split the scores**" in scores_note and "**Compare**" in side[3]
    assert why == gr.skip()  # the explanation stays until the figure is drawn


def test_why_a_head_attends_explains_the_chosen_model_before_its_figure_is_drawn(registry, session):
    said = {}
    for name, sentence in ((BUNDLED, text.TEXT), (MINILM, text.ENCODER_TEXT)):
        *_, drawn = _raw(handlers.research_scores)(registry, name, sentence, 1, 1, False, session)
        said[name] = layout.explained(registry, name, None)
        assert said[name] == drawn  # what the drawn figure brings, said when the model is chosen
    assert said[BUNDLED] == text.SCORES_2017
    assert said[MINILM] == text.SCORES_2017 + text.SCORES_ENCODER
    config = registry.checkpoint(BUNDLED, None).config
    rotary = replace(config, positional="rotary")
    assert handlers.scores_explanation(rotary) == text.SCORES_ROTARY
    assert layout.explained(registry, "no such model", None) == gr.skip()


@pytest.mark.parametrize("layer", [1, 4])
def test_minilm_score_parts_sum_to_its_captured_encoder_scores(registry, session, layer):
    checkpoint = registry.checkpoint(MINILM, None)
    sentence = text.ENCODER_TEXT
    fig, _, words = _raw(handlers.research_scores)(
        registry, MINILM, sentence, layer, 2, False, session
    )
    ids = torch.tensor([checkpoint.tokenizer.encoding(sentence).ids])
    with torch.no_grad():
        record = checkpoint.model(ids, call=TRACE).attention("encoder_self", layer - 1)
    total = sum(np.asarray(trace.z, float) for trace in fig.data)
    np.testing.assert_allclose(total, record.scores[0, 1].numpy(), atol=1e-5)
    assert "encoder" in words and "token-position" in words


@pytest.mark.parametrize(
    ("handler", "args", "says"),
    [
        (handlers.research_patching, (*CAT, "residual"), "no answer logits"),
        (handlers.research_ablation, (text.TEXT, "zero"), "no next-token loss"),
        (handlers.research_logit, (text.TEXT, ""), "not logits"),
        (handlers.research_input, (text.TEXT, "", "gradient x input"), "computes no logits"),
    ],
)
def test_an_encoder_only_model_is_told_why_a_method_needs_a_next_token(
    registry, session, handler, args, says
):
    fig, summary = _raw(handler)(registry, MINILM, *args, False, session)
    assert "encoder-only" in summary and says in summary
    assert fig.layout.annotations  # a figure that says so, not an empty plot


def test_side_by_side_tells_why_it_needs_two_models_that_continue_text(registry, session):
    with pytest.raises(InputError, match="does not continue text"):
        _raw(handlers.research_side_by_side)(
            registry, MINILM, BUNDLED, text.TEXT, 1, 1, 1, 1, False, session
        )


def test_ablation_names_the_head_that_raises_the_loss_most(registry, session):
    fig, summary = _raw(handlers.research_ablation)(
        registry, BUNDLED, text.TEXT, "zero", False, session
    )
    z = _z(fig)
    layer, head = np.unravel_index(np.argmax(z), z.shape)
    assert f"Layer {layer + 1}, head {head + 1} matters most" in summary
    # The meter's reading without any ablation, computed here from the model.
    model = registry.checkpoint(BUNDLED, None).model
    nll = read_text(model, _ids(registry, BUNDLED, text.TEXT)[0]).nll
    assert f"{math.exp(nll):.2f} with every head" in summary


def test_logit_attribution_shows_its_parts_sum_beside_the_real_logit(registry, session, hf_models):
    name = registry.menu_name(str(hf_models["gpt2"]))  # pre-norm
    prompt = "the cat sat the"
    fig, summary = _raw(handlers.research_logit)(registry, name, prompt, "", False, session)
    model = registry.checkpoint(name, None).model
    with torch.inference_mode():
        logits = model.decode(_ids(registry, name, prompt)).logits[0, -1]
    real = float(logits.max())
    assert "the real logit of" in summary and f"{real:.4f}" in summary
    assert "read through the final norm with its scale frozen at the real pass" in summary
    bars = np.asarray(fig.data[0].y, dtype=float)
    assert bars.sum() == pytest.approx(real, abs=1e-3)
    assert "L1H1" in fig.data[0].x and "L0H0" not in fig.data[0].x  # numbered from 1


def test_logit_attribution_says_why_a_post_norm_model_has_none(registry, session):
    _, summary = _raw(handlers.research_logit)(registry, BUNDLED, text.TEXT, "", False, session)
    assert "post-norm" in summary and "pre-norm model" in summary


def test_input_attribution_has_a_bar_per_token_and_completeness(registry, session):
    prompt = "the cat sat on"  # integrated gradients runs the model 50 times
    fig, summary = _raw(handlers.research_input)(
        registry, BUNDLED, prompt, "", "integrated gradients", False, session
    )
    bars = np.asarray(fig.data[0].y, dtype=float)
    assert len(bars) == _ids(registry, BUNDLED, prompt).shape[1]
    assert f"the attributions sum to {bars.sum():.4f}" in summary
    # Completeness printed: the gap is the sum minus (logit − baseline), and the logit is the
    # model's own.
    found = re.search(r"logit (\S+) − baseline's (\S+)\); the gap is (\S+)\.", summary)
    logit, baseline, gap = (float(x) for x in found.groups())
    assert gap == pytest.approx(bars.sum() - (logit - baseline), abs=2e-3)
    model = registry.checkpoint(BUNDLED, None).model
    with torch.inference_mode():
        real = model.decode(_ids(registry, BUNDLED, prompt)).logits[0, -1].max()
    assert logit == pytest.approx(float(real), abs=1e-3)
    _, plain = _raw(handlers.research_input)(
        registry, BUNDLED, prompt, "", "gradient x input", False, session
    )
    assert "Completeness" not in plain


def _gap(summary: str) -> float:
    return float(re.search(r"the largest difference is (\S+)\.", summary).group(1))


def test_score_parts_are_drawn_one_panel_each_and_explained_for_the_model(registry, session):
    fig, summary, explanation = _raw(handlers.research_scores)(
        registry, BUNDLED, text.TEXT, 2, 1, False, session
    )
    names = {a.text for a in fig.layout.annotations}
    assert {"token-token", "token-position", "position-token", "position-position"} <= names
    assert len(fig.data) == len(names)
    assert _gap(summary) < 1e-4  # the drawn parts sum to the pass's own scores
    assert "token-position" in explanation
    with pytest.raises(InputError, match="heads 1 to"):
        _raw(handlers.research_scores)(registry, BUNDLED, text.TEXT, 1, 99, False, session)


def test_a_pretrained_family_goes_through_every_single_pass_view(registry, session, hf_models):
    name = registry.menu_name(str(hf_models["gpt2"]))
    prompt = "the cat sat"
    fig, _ = _raw(handlers.research_logit)(registry, name, prompt, "", False, session)
    assert len(fig.data[0].y) > 1
    fig, summary, _ = _raw(handlers.research_scores)(registry, name, prompt, 1, 1, False, session)
    assert fig.data and _gap(summary) < 1e-4


def test_a_costly_sweep_runs_in_the_costly_pool_with_its_progress(registry, session, monkeypatch):
    monkeypatch.setattr(handlers, "costly_here", lambda estimate, device: True)
    calls: list[tuple] = []
    before = registry.passes.handed
    _raw(handlers.research_patching)(
        registry,
        BUNDLED,
        *CAT,
        "attention",
        False,
        session,
        progress=lambda v, **_: calls.append(v),
    )
    assert registry.passes.handed == before + 1
    assert calls and calls[-1][0] == calls[-1][1]


def test_the_bundled_model_opens_on_a_preset_it_cuts_evenly(registry):
    label = fitting_preset(registry, BUNDLED)
    clean, corrupted, *_ = PRESETS[label]
    assert _ids(registry, BUNDLED, clean).shape == _ids(registry, BUNDLED, corrupted).shape


def test_first_views_fill_every_output(registry):
    views = layout.first_views(registry, BUNDLED, "not loaded")
    assert views is not None and len(views) == 15


def test_a_rotary_head_is_split_into_frequency_bands_that_sum_to_its_scores(session, tmp_path):
    from conftest import tiny_llama

    tiny_llama(tmp_path / "llama")
    registry = ModelRegistry(torch.device("cpu"), [str(tmp_path / "llama")])
    name = registry.menu_name(str(tmp_path / "llama"))
    fig, summary, explanation = _raw(handlers.research_scores)(
        registry, name, "w5 w6 w7 w8 w9", 1, 2, False, session
    )
    names = [a.text for a in fig.layout.annotations]
    assert names[0].startswith("pairs 1-") and "(fastest)" in names[0]
    assert any("(slowest)" in n for n in names)
    assert _gap(summary) < 1e-4
    assert "rotary" in explanation


def test_a_sweep_too_big_for_the_server_is_refused_before_it_runs(registry, session, monkeypatch):
    from ui.serving import limits

    ran: list[bool] = []
    monkeypatch.setattr(limits, "MAX_PASS_COST", 10**7)  # the bundled model: one pass fits
    monkeypatch.setattr(handlers.methods, "head_ablation", lambda *a, **k: ran.append(True))
    with pytest.raises(InputError, match="this sweep runs continue"):
        _raw(handlers.research_ablation)(registry, BUNDLED, text.TEXT, "zero", False, session)
    assert not ran


@pytest.mark.parametrize(
    ("handler", "args", "says"),
    [
        (handlers.research_ablation, (text.TEXT, "half"), "ablation is 'zero' or 'mean'"),
        (handlers.research_input, (text.TEXT, "", "saliency"), "method is 'gradient x input'"),
        (handlers.research_logit, ("", ""), "enter the text"),
        (handlers.research_scores, (text.TEXT, "x", 1), "layer must be a number from 1 to"),
    ],
)
def test_each_method_refuses_a_bad_value_in_words_before_any_pass(
    registry, session, monkeypatch, handler, args, says
):
    ran: list[str] = []
    monkeypatch.setattr(handlers, "admitted", lambda *a, **k: ran.append("pass"))
    with pytest.raises(InputError, match=says):
        _raw(handler)(registry, BUNDLED, *args, False, session)
    assert not ran


@pytest.mark.parametrize("api", ["research_logit", "research_input"])
def test_a_client_cannot_turn_one_method_into_the_other(registry, session, api):
    """The logit and input endpoints share a request; each sends its own values, so the
    input endpoint refuses a missing method rather than splitting the logit."""
    signature = inspect.signature(getattr(handlers, api))
    names = list(signature.parameters)
    assert ("method" in names) == (api == "research_input")
    if api == "research_input":
        with pytest.raises(InputError, match="method is"):
            _raw(handlers.research_input)(registry, BUNDLED, text.TEXT, "", None, False, session)


def test_a_request_looks_each_model_up_once(registry, session, monkeypatch):
    lookup = mock.Mock(wraps=registry.checkpoint)
    monkeypatch.setattr(registry, "checkpoint", lookup)
    _raw(handlers.research_scores)(registry, BUNDLED, text.TEXT, 1, 1, False, session)
    _raw(handlers.research_patching)(registry, BUNDLED, *CAT, "head", False, session)
    assert [c.args[0] for c in lookup.call_args_list] == [BUNDLED, BUNDLED]
