"""The seeds' mistakes in the app: the menu offers what applies to each model (read off the
model's own modules), and the broken head beside the correct one is the model's own pass with
that mistake, made here directly through the library's forward pass."""

from __future__ import annotations

import dataclasses

import gradio as gr
import numpy as np
import pytest
import torch
from conftest import SEED_MISTAKE_LABELS

from transformer.core.embeddings import SinusoidalPositionalEncoding
from transformer.core.run import Call, Capture
from transformer.lab.interventions import Intervention
from transformer.lab.switches import SEED_MISTAKE, by_label
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs import attention
from ui.tabs.attention import mistakes

CROSS = "cross-attention (decoder → encoder)"
ENCODER_SELF = "encoder self-attention"
DECODER_SELF = "decoder masked self-attention"
MINILM = "all-MiniLM-L6-v2"
EVERY = set(SEED_MISTAKE_LABELS)


@pytest.fixture(scope="module")
def registry(hf_models) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), [str(hf_models["gpt2"]), str(hf_models["marian"])])


def _z(trace) -> np.ndarray:
    return np.asarray(trace.z, dtype=np.float64)


def _offered(dropdown) -> set[str]:
    return {c[0] if isinstance(c, tuple | list) else c for c in dropdown.choices}


def test_the_menu_offers_what_each_models_modules_can_get_wrong(registry, hf_models):
    names = ["translate", "reverse", "continue", MINILM, str(hf_models["gpt2"])]
    names.append(str(hf_models["marian"]))
    for name in names:
        model = registry.checkpoint(name, None).model
        sinusoidal = any(isinstance(m, SinusoidalPositionalEncoding) for m in model.modules())
        cross = hasattr(model, "decoder") and any(
            layer.cross_attention is not None for layer in model.decoder.layers
        )
        expected = set(EVERY)
        if not sinusoidal:
            expected.discard("sin and cos swapped, base 1000")
        if not cross:
            expected.discard("cross-attention queries from the memory")
        menu = mistakes.choices(registry, name, "mask polarity inverted", SessionModels())
        assert _offered(menu) == {mistakes.NONE, *expected}, name
        assert menu.value == "mask polarity inverted"  # kept: it applies everywhere
    # A choice that does not apply to the new model falls back to none, and the line under the
    # label says why the missing ones are missing.
    menu = mistakes.choices(registry, MINILM, "sin and cos swapped, base 1000", None)
    assert menu.value == mistakes.NONE
    assert (
        "needs sinusoidal positions" in menu.info and "needs an encoder and a decoder" in menu.info
    )


@pytest.mark.parametrize(
    ("name", "kind", "mistake"),
    [
        ("translate", CROSS, "scores × √d_head"),
        ("continue", DECODER_SELF, "mask polarity inverted"),
        (MINILM, ENCODER_SELF, "heads split with a bare view"),
        ("marian", ENCODER_SELF, "sin and cos swapped, base 1000"),
    ],
)
def test_broken_head_is_the_models_own_pass_with_the_mistake(
    registry, hf_models, name, kind, mistake
):
    name = str(hf_models.get(name, name))
    sentences = "the cat sat w9 w10 w11\nthe cat" if "marian" in name else "the cat sat\na dog"
    single, _masks, diff, summary, _grid = attention.everything(
        registry, sentences, name, kind, 1, 2, 1, [], False, None, mistake
    )
    checkpoint = registry.checkpoint(name, None)
    model, config = checkpoint.model, checkpoint.config
    plain = registry.analysis(name, checkpoint, sentences.splitlines())
    src = plain.trace.source.tokens if plain.trace.source else None
    tgt = plain.trace.target.tokens if plain.trace.target else None
    broken = Intervention(mistakes=frozenset({by_label(mistake, SEED_MISTAKE)}))
    correct = plain.trace.logits
    with torch.no_grad():
        if config.architecture == "decoder-only":
            wrong = model(tgt=tgt, call=Call(ops=broken.operations, capture=Capture()))
        elif config.architecture == "encoder-only":
            wrong = model(src=src, call=Call(ops=broken.operations, capture=Capture()))
        else:
            wrong = model(src, tgt, call=Call(ops=broken.operations, capture=Capture()))
    kind_name = attention.ATTENTION_KINDS[kind]
    expected = wrong.attention(kind_name, 0).weights[0, 1].numpy()
    before = plain.trace.attention(kind_name, 0).weights[0, 1].numpy()
    np.testing.assert_allclose(np.nan_to_num(_z(single.data[1])), expected, atol=1e-5)
    np.testing.assert_allclose(np.nan_to_num(_z(single.data[0])), before, atol=1e-5)
    np.testing.assert_allclose(np.nan_to_num(_z(diff.data[0])), expected - before, atol=1e-5)
    # The text says where the mistake came from and how large its largest logit change was.
    assert f"{mistake}." in summary and "Why it is wrong" in summary
    stack = tgt if tgt is not None else src
    real = stack != config.pad_id
    real[:, 0] = True
    change = (wrong.logits - correct).abs().amax(-1)[real].max().item()
    assert f"logits {change:.3f}" in summary or f"logit {change:.3f}" in summary


def test_cross_attention_from_the_memory_shows_why_the_shapes_clash(registry):
    sentences = "the small cat sees a red ball"
    single, _, diff, summary, _ = attention.everything(
        registry,
        sentences,
        "translate",
        CROSS,
        1,
        1,
        1,
        [],
        False,
        None,
        "cross-attention queries from the memory",
    )
    checkpoint = registry.checkpoint("translate", None)
    plain = registry.analysis("translate", checkpoint, [sentences])
    n_source, n_target = plain.trace.source.tokens.size(1), plain.trace.target.tokens.size(1)
    assert n_source != n_target  # the premise
    assert f"source × source ({n_source} × {n_source})" in summary
    assert f"{n_target} target rows" in summary
    assert "no output" in diff.layout.title.text
    # The correct head stays in view: the model's own weights.
    weights = plain.trace.attention("cross", 0).weights[0, 0].numpy()
    np.testing.assert_allclose(np.nan_to_num(_z(single.data[1])), weights, atol=1e-5)


def test_a_mistake_that_does_not_apply_is_a_note_and_an_unknown_one_an_error(registry):
    *_, summary, _ = attention.everything(
        registry,
        "the cat",
        MINILM,
        ENCODER_SELF,
        1,
        1,
        1,
        [],
        False,
        None,
        "sin and cos swapped, base 1000",
    )
    assert "does not apply" in summary and "sinusoidal positions" in summary
    with pytest.raises(gr.Error, match="unknown mistake"):
        attention.attention(
            registry, "the cat", MINILM, ENCODER_SELF, 1, 1, 1, [], False, None, "typo"
        )
    # "none" is the plain view.
    single, *_ = attention.attention(
        registry, "the cat", MINILM, ENCODER_SELF, 1, 1, 1, [], False, None, mistakes.NONE
    )
    assert "scores" in single.layout.annotations[0].text.lower()


def test_mistake_with_a_what_if_compares_against_the_correct_pass(registry):
    """Both on: the broken pass has the what-if too, and the text says so."""
    sentence = "the teacher sees a bird"
    single, *_, summary, _ = attention.everything(
        registry,
        sentence,
        "continue",
        DECODER_SELF,
        2,
        1,
        1,
        ["no positional encoding"],
        False,
        None,
        "scores ÷ √d_model",
    )
    model = registry.checkpoint("continue", None).model
    tgt = registry.analysis("continue", registry.checkpoint("continue", None), [sentence])
    both = Intervention(
        positional_encoding=False, mistakes=frozenset({by_label("scores ÷ √d_model")})
    )
    with torch.no_grad():
        trace = model(
            tgt=tgt.trace.target.tokens, call=Call(ops=both.operations, capture=Capture())
        )
    expected = trace.attention("decoder_self", 1).weights[0, 0].numpy()
    np.testing.assert_allclose(np.nan_to_num(_z(single.data[1])), expected, atol=1e-5)
    assert "(with no positional encoding)" in summary


def test_standalone_panel_draws_the_sentence_the_mistake_changed_most(registry):
    sentences = "a b c d e f\nk l m"
    single, diff, text = mistakes.panel(
        registry, "reverse", sentences, "cross", 1, 2, "heads merged with a bare view", True, None
    )
    checkpoint = registry.checkpoint("reverse", None)
    plain = registry.analysis("reverse", checkpoint, sentences.splitlines())
    src, tgt = plain.trace.source.tokens, plain.trace.target.tokens
    broken = Intervention(mistakes=frozenset({by_label("heads merged with a bare view")}))
    with torch.no_grad():
        wrong = checkpoint.model(src, tgt, call=Call(ops=broken.operations, capture=Capture()))
    real = tgt != checkpoint.config.pad_id
    real[:, 0] = True
    delta = (wrong.logits - plain.trace.logits).abs().amax(-1).masked_fill(~real, -1)
    row = int(delta.max(-1).values.argmax())
    expected = wrong.attention("cross", 0).weights[row, 1].numpy()
    n_target = int(real[row].sum())
    np.testing.assert_allclose(
        np.nan_to_num(_z(single.data[1]))[:n_target], expected[:n_target], atol=1e-5
    )
    assert f"sentence {row + 1}, layer 1, head 2" in single.layout.title.text
    assert "Mistake of seed 003" in text
    assert diff.layout.title.text.startswith("What the mistake changed (broken − correct)")
    # Large font reaches the figures.
    assert single.layout.font.size > 14
    # No mistake chosen: a prompt, not an error.
    *_, note = mistakes.panel(registry, "reverse", sentences, CROSS, 1, 1, None, False, None)
    assert "Choose one" in note


def test_inside_a_layer_names_the_kind_by_its_stack(registry):
    """The Inside-a-layer tab passes its stack radio ("encoder"/"decoder"): the panel reads it
    as that stack's self-attention, the head recomputed by the model with the mistake."""
    mistake = "scores × √d_head"
    single, _, text = mistakes.panel(
        registry,
        "translate",
        "the small cat sees a red ball",
        "decoder",
        2,
        3,
        mistake,
        False,
        None,
    )
    checkpoint = registry.checkpoint("translate", None)
    plain = registry.analysis("translate", checkpoint, ["the small cat sees a red ball"])
    with torch.no_grad():
        wrong = checkpoint.model(
            plain.trace.source.tokens,
            plain.trace.target.tokens,
            call=Call(
                ops=Intervention(mistakes=frozenset({by_label(mistake)})).operations,
                capture=Capture(),
            ),
        )
    expected = wrong.attention("decoder_self", 1).weights[0, 2].numpy()
    np.testing.assert_allclose(np.nan_to_num(_z(single.data[1])), expected, atol=1e-5)
    assert "Decoder masked self-attention" in single.layout.title.text
    assert "layer 2, head 3" in single.layout.title.text
    assert "Mistake of seed 004: scores × √d_head" in text


def test_the_broken_pass_runs_the_record_it_is_handed_not_the_one_its_label_names(registry):
    """Past the page, a mistake is its record: a twin of "scores × √d_head" (the same label and
    texts) that replaces the causal mask instead runs the causal mask off, which the model,
    told so directly, draws the same."""
    times = by_label("scores × √d_head")
    twin = dataclasses.replace(times, changes={"causal_mask": False})
    checkpoint = registry.checkpoint("continue", None)
    sentences = ["the teacher sees a bird"]
    correct = registry.analysis("continue", checkpoint, sentences)
    result = mistakes.broken_pass(registry, "continue", checkpoint, sentences, correct, twin)
    assert result.mistake is twin and result.analysis is not None
    tgt = correct.trace.target.tokens
    with torch.no_grad():
        leaky = checkpoint.model(
            tgt=tgt, call=Call(ops=Intervention(causal_mask=False).operations, capture=Capture())
        )
        scaled = checkpoint.model(
            tgt=tgt, call=Call(ops=Intervention(mistakes=times).operations, capture=Capture())
        )
    got = result.analysis.trace.attention("decoder_self", 0).weights
    torch.testing.assert_close(got, leaky.attention("decoder_self", 0).weights, atol=1e-5, rtol=0)
    assert not torch.allclose(got, scaled.attention("decoder_self", 0).weights, atol=1e-3)
