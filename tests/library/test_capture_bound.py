"""A captured pass computes every layer's and head's attention weights, T² each (it keeps them,
or, in an analysis, its views compute them again when read, the grid all of them): the library
refuses one whose weights would pass ``MAX_CAPTURED_WEIGHTS_BYTES`` (SmolLM2 at its 8,192-token
context: 72 GB) with a message that gives the length it accepts, in an analysis and in a
step-by-step decoding that records attention. The bound's arithmetic is checked against the
bytes real traces hold or compute when read."""

from __future__ import annotations

import contextlib

import pytest
import torch
from conftest import SMALL_HEADS

from transformer.core import trace as trace_module
from transformer.core.model import Transformer
from transformer.core.run import TRACE
from transformer.core.trace import Trace, captured_weight_bytes
from transformer.generation import DecodingSession, DecodingSettings
from transformer.lab.inspection import analyse, least_captured_bytes
from transformer.training.bundled import load_bundled

SENTENCE = "the small cat sees a red ball and a big dog sleeps under the old table"
WORDS = SENTENCE.split(" ")


def held_weight_bytes(trace: Trace) -> int:
    """Bytes of the attention weights a trace holds or computes when read, every kind the
    model has."""
    held = 0
    for kind in ("encoder_self", "decoder_self", "cross"):
        with contextlib.suppress(ValueError):  # the model has no such attention
            held += sum(r.weights.nbytes for r in trace.attention_records(kind))  # type: ignore[arg-type]
    return held


@pytest.fixture(scope="module")
def bundled():
    return load_bundled("cpu").models


@pytest.mark.parametrize("architecture", ["encoder-decoder", "decoder-only", "encoder-only"])
def test_the_bound_counts_exactly_the_weights_a_trace_holds(architecture):
    # unequal stacks (2 encoder layers, 3 decoder): the bound must count each stack's own layers
    config = SMALL_HEADS.replace(architecture=architecture, n_decoder_layers=3)
    model = Transformer(config).eval()
    src, tgt = torch.randint(4, 50, (2, 7)), torch.randint(4, 50, (2, 5))
    if architecture == "encoder-decoder":
        trace, source, target = model(src, tgt, call=TRACE), 7, 5
    elif architecture == "decoder-only":
        trace, source, target = model(tgt=tgt, call=TRACE), 0, 5
    else:
        trace, source, target = model(src=src, call=TRACE), 7, 0
    held = held_weight_bytes(trace)
    assert held > 0
    assert captured_weight_bytes(config, 2, source, target) == held


@pytest.mark.parametrize("name", ["translate", "continue"])
def test_an_analysis_too_long_to_keep_is_refused_with_the_length_that_fits(
    bundled, name, monkeypatch
):
    """A bound one byte under what an analysis holds refuses it (for a translation, after its
    answer is known) and names a length that does fit; a shorter text is analysed."""
    model, tokenizer = bundled[name].model, bundled[name].tokenizer
    text = " ".join(WORDS[:8])
    held = held_weight_bytes(analyse(model, tokenizer, [text]).trace)
    monkeypatch.setattr(trace_module, "MAX_CAPTURED_WEIGHTS_BYTES", held - 1)
    with pytest.raises(ValueError, match="too many to show every layer and head") as refused:
        analyse(model, tokenizer, [text])
    message = str(refused.value)
    assert "shorten the text" in message
    most = int(message.split("at most about ")[1].split(" tokens")[0].replace(",", ""))
    config = model.config
    assert captured_weight_bytes(config, 1, most, most) <= held - 1
    assert captured_weight_bytes(config, 1, most + 1, most + 1) > held - 1
    shorter = analyse(model, tokenizer, [" ".join(WORDS[:3])]).trace
    assert held_weight_bytes(shorter) <= held - 1


def test_a_decoding_that_records_attention_is_refused_a_prompt_too_long_to_keep(
    bundled, monkeypatch
):
    """Its first step captures the whole prompt; without recording, the same prompt decodes."""
    checkpoint = bundled["continue"]
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    prompt = tokenizer.encode_ids(" ".join(WORDS), add_bos=True)
    recording = DecodingSettings(max_new_tokens=2, capture_attention=True, capture_lens=True)
    session = DecodingSession(model, prompt, recording, decode_token=tokenizer.id_to_token)
    session.step()
    weights = captured_weight_bytes(model.config, 1, 0, len(session.prefix))
    monkeypatch.setattr(trace_module, "MAX_CAPTURED_WEIGHTS_BYTES", weights - 1)
    with pytest.raises(ValueError, match=r"too many to show every layer and head"):
        DecodingSession(model, prompt, recording, decode_token=tokenizer.id_to_token)
    plain = DecodingSettings(max_new_tokens=2)
    DecodingSession(model, prompt, plain, decode_token=tokenizer.id_to_token).step()


@pytest.mark.parametrize("name", ["translate", "continue", "reverse"])
def test_the_least_bytes_known_before_an_analysis_are_a_lower_bound(bundled, name):
    """Exact where the input is the whole pass (a decoder-only or encoder-only model), a lower
    bound where the answer is decoded first."""
    model, tokenizer = bundled[name].model, bundled[name].tokenizer
    sentences = [" ".join(WORDS[:8]), " ".join(WORDS[:4])]
    if name == "reverse":
        sentences = ["k d a m q b", "a b"]
    held = held_weight_bytes(analyse(model, tokenizer, sentences).trace)
    least = least_captured_bytes(model, tokenizer, sentences)
    assert 0 < least <= held
    if not model.config.has_encoder or not model.config.has_decoder:
        assert least == held
    assert least_captured_bytes(model, tokenizer, [""]) == 0  # refused by analyse itself


@pytest.mark.parametrize("name", ["translate", "continue", "reverse"])
def test_a_pass_input_is_what_its_analysis_reads_weighed_before_it_runs(bundled, name):
    """The ids the pass reads (the tokenizer's own, padded), the tokens it reads (a
    translation's answer one token a sentence until decoded; the given targets' once known),
    and its weights' lower bound, all from one tokenization; refused input is a ValueError
    with the analysis's own message."""
    from transformer.lab.inspection import pass_input

    model, tokenizer = bundled[name].model, bundled[name].tokenizer
    config = model.config
    sentences = ["  " + " ".join(WORDS[:8]), "", " ".join(WORDS[:4])]
    if name == "reverse":
        sentences = ["k d a m q b", "", "a b"]
    kept = [s.strip() for s in sentences if s.strip()]
    planned = pass_input(model, tokenizer, sentences)
    assert planned.sentences == kept
    bos = [tokenizer.bos_id] if config.architecture == "decoder-only" and config.prompt_bos else []
    rows = [bos + tokenizer.encoding(s).ids for s in kept]
    width = max(map(len, rows))
    assert planned.ids.shape == (2, width)
    for row, ids in zip(planned.ids.tolist(), rows, strict=True):
        assert row[: len(ids)] == ids and set(row[len(ids) :]) <= {config.pad_id}
    answer = 2 if config.architecture == "encoder-decoder" else 0  # one token a sentence
    assert planned.tokens == 2 * width + answer
    assert planned.least_bytes == least_captured_bytes(model, tokenizer, kept)
    if config.architecture == "encoder-decoder":
        targets = torch.ones(2, 5, dtype=torch.long)
        assert pass_input(model, tokenizer, kept, targets).tokens == 2 * width + 10
    held = held_weight_bytes(analyse(model, tokenizer, planned).trace)
    assert 0 < planned.least_bytes <= held
    with pytest.raises(ValueError, match="at least one sentence"):
        pass_input(model, tokenizer, ["", " "])
    with pytest.raises(ValueError, match="at most 3 sentences"):
        pass_input(model, tokenizer, ["a", "b", "c", "d"])
