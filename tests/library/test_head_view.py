"""transformer.lab.head_view: one head of an analysis as the Attention page draws it, built from
plain values, checked against the model's own passes run here."""

from __future__ import annotations

import pytest
import torch

from transformer import Intervention, analyse
from transformer.core.run import Call, Capture
from transformer.lab.head_view import attention_data, head_view
from transformer.lab.switches import SEED_MISTAKE, WHAT_IFS, family
from transformer.training.bundled import load_bundled


@pytest.fixture(scope="module")
def continue_model():
    return load_bundled("cpu").models["continue"]


def test_a_what_if_s_head_is_the_model_s_own_weights_before_and_after(continue_model):
    """The head before and after "causal mask off" is what the model computes with and without
    its causal mask, told so directly; the summary says how large the change is."""
    model, tokenizer = continue_model.model, continue_model.tokenizer
    sentences = ["the teacher sees a bird", "the cat"]
    analysis = analyse(model, tokenizer, sentences)
    off = next(s for s in WHAT_IFS if s.label == "causal mask off")
    changed = analyse(model, tokenizer, sentences, Intervention(causal_mask=False))
    data = attention_data(
        analysis,
        tokenizer,
        "decoder_self",
        1,
        0,
        1,
        sentences=sentences,
        kind_title="Decoder masked self-attention",
        what_if=[off],
        changed=changed,
    )
    tgt = analysis.trace.target.tokens
    with torch.no_grad():
        plain = model(tgt=tgt, call=Call(capture=Capture()))
        leaky = model(
            tgt=tgt,
            call=Call(ops=Intervention(causal_mask=False).operations, capture=Capture()),
        )
    assert data.change is not None
    want_before = plain.attention("decoder_self", 1).weights[1, 0]
    want_after = leaky.attention("decoder_self", 1).weights[1, 0]
    torch.testing.assert_close(data.change.before, want_before, atol=1e-5, rtol=0)
    torch.testing.assert_close(data.change.after, want_after, atol=1e-5, rtol=0)
    assert data.change.title == (
        "Decoder masked self-attention · layer 2, head 1 · weights, original | what-if"
    )
    largest = (leaky.logits - plain.logits).abs().amax()
    assert f"**What-if (causal mask off)**: largest change of any output logit {largest:.3f}." in (
        data.summary
    )
    # Sentence 2 is shorter: its padding is said, and the view is the same as head_view's.
    assert "Sentence 2 is padded" in data.summary or "Padding is real here" in data.summary
    view = head_view(analysis, tokenizer, "decoder_self", 1, 0, 1)
    assert data.view.query_labels == view.query_labels
    assert data.view.query_labels == [
        f"{i}:{tokenizer.id_to_token(t)}" for i, t in enumerate(tgt[1].tolist())
    ]


def test_a_mistake_whose_pass_cannot_run_says_why_and_draws_no_change(continue_model):
    """Without a changed pass, the mistake's account gives the reason it was handed, and the
    change panel waits with the mistake's name; nothing before/after is drawn."""
    model, tokenizer = continue_model.model, continue_model.tokenizer
    analysis = analyse(model, tokenizer, ["the teacher sees a bird"])
    mistake = next(s for s in family(SEED_MISTAKE) if s.applies(model.config))
    data = attention_data(
        analysis,
        tokenizer,
        "decoder_self",
        0,
        0,
        0,
        sentences=["the teacher sees a bird"],
        mistake=mistake,
        refused="the shapes clash here",
    )
    assert data.change is None
    assert data.waiting[0] == f"With “{mistake.label}”: no output"
    assert "**What it does here:** the shapes clash here" in data.summary
    assert data.summary.startswith("**Mistake of seed")
