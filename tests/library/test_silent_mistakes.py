"""The silent mistakes of the modern block, each against its wrong formula written out here on
transformers' Llama (a tiny grouped-query model: 4 query heads, 2 key/value heads), the correct
default against transformers itself, and the perplexity meter against cross_entropy."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import llama_folder

from transformer.core.config import ModelConfig
from transformer.core.model import Transformer
from transformer.core.run import Call, Capture
from transformer.generation import greedy_batch
from transformer.lab.perplexity import read_logits, read_text, reference_paragraph
from transformer.lab.silent_mistakes import (
    CAUSAL_OFF_PREFILL,
    KV_TILED,
    NO_SCALE,
    RMS_EPS_OUTSIDE,
    RMS_MEAN_SUBTRACTED,
    ROTARY_NEIGHBOURS,
    ROTARY_NO_OFFSET,
    SILENT_MISTAKES,
)
from transformer.lab.switch import Switch
from transformer.lab.switches import SILENT_MISTAKE, applicable, by_label, operations
from transformer.pretrained import load_pretrained

transformers = pytest.importorskip("transformers")
llama = pytest.importorskip("transformers.models.llama.modeling_llama")

VOCAB = 97
IDS = torch.tensor([[5, 17, 3, 42, 8, 61, 29, 77, 12, 50, 33, 9, 70, 2, 44, 18]])


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Transformer, torch.nn.Module]:
    """Our model and transformers' eager Llama with the same random weights (norm gains away
    from 1, so a wrong norm shows)."""
    folder = tmp_path_factory.mktemp("silent-llama")
    # weights large enough for every mistake to show
    reference = llama_folder(
        folder, VOCAB, seed=21, norms=0.3, matrices=0.2, eager=True, rms_norm_eps=1e-2
    )
    ours = load_pretrained(folder).model.eval()
    assert ours.config.kv_heads == 2 and ours.config.n_heads == 4
    return ours, reference


def theirs(reference: torch.nn.Module, ids: torch.Tensor = IDS) -> torch.Tensor:
    with torch.no_grad():
        return reference(ids).logits


def ours_logits(model: Transformer, name: Switch | None, capture: bool = False) -> torch.Tensor:
    ops = operations([name] if name is not None else [])
    with torch.no_grad():
        if capture:
            return model(tgt=IDS, call=Call(ops=ops, capture=Capture())).logits
        return model(tgt=IDS, call=Call(ops=ops))


def assert_close(ours: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    difference = (ours - expected).abs().max().item()
    assert difference <= 1e-4 * max(1.0, expected.abs().max().item()), (
        f"{what}: max |ours - reference| = {difference:.2e}"
    )


def assert_changed(model: Transformer, name: Switch, reference: torch.Tensor) -> None:
    """A mistake must change the logits, or its test proves nothing."""
    assert (ours_logits(model, name) - reference).abs().max() > 0.1, name.label


@pytest.mark.parametrize("capture", [False, True], ids=["fast", "captured"])
def test_the_correct_default_equals_transformers(pair, capture) -> None:
    model, reference = pair
    assert_close(ours_logits(model, None, capture), theirs(reference), "correct")


# -- each mistake against its formula, written out on transformers' Llama ----------------------


def neighbour_rotation(q, k, cos, sin, unsqueeze_dim=1):
    """Rotary with neighbour pairs: dimensions (2i, 2i+1) turned by pair i's angle (column i of
    transformers' rotate-half table)."""
    half = q.shape[-1] // 2
    c = cos[..., :half].unsqueeze(unsqueeze_dim)
    s = sin[..., :half].unsqueeze(unsqueeze_dim)

    def turn(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
        out[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
        return out

    return turn(q), turn(k)


def tiled(hidden: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Key/value heads expanded with repeat: [kv0, kv1, kv0, kv1], not [kv0, kv0, kv1, kv1]."""
    return hidden.repeat(1, n_rep, 1, 1)


def rms_centred(self, x: torch.Tensor) -> torch.Tensor:
    x = x.float() - x.float().mean(-1, keepdim=True)
    return self.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


def rms_eps_out(self, x: torch.Tensor) -> torch.Tensor:
    root = torch.sqrt(x.float().pow(2).mean(-1, keepdim=True))
    return self.weight * x.float() / (root + self.variance_epsilon)


@pytest.mark.parametrize(
    ("name", "target", "wrong"),
    [
        (ROTARY_NEIGHBOURS, "apply_rotary_pos_emb", neighbour_rotation),
        (KV_TILED, "repeat_kv", tiled),
        (CAUSAL_OFF_PREFILL, "create_causal_mask", lambda **kwargs: None),
    ],
)
@pytest.mark.parametrize("capture", [False, True], ids=["fast", "captured"])
def test_a_mistake_equals_transformers_with_its_formula(
    pair, monkeypatch, name, target, wrong, capture
) -> None:
    model, reference = pair
    assert_changed(model, name, theirs(reference))
    monkeypatch.setattr(llama, target, wrong)
    assert_close(ours_logits(model, name, capture), theirs(reference), name.label)


@pytest.mark.parametrize(
    ("name", "forward"), [(RMS_MEAN_SUBTRACTED, rms_centred), (RMS_EPS_OUTSIDE, rms_eps_out)]
)
def test_an_rms_norm_mistake_equals_transformers_with_its_formula(
    pair, monkeypatch, name, forward
) -> None:
    model, reference = pair
    assert_changed(model, name, theirs(reference))
    monkeypatch.setattr(llama.LlamaRMSNorm, "forward", forward)
    assert_close(ours_logits(model, name), theirs(reference), name.label)


def test_no_scaling_equals_transformers_with_a_scale_of_one(pair, monkeypatch) -> None:
    model, reference = pair
    assert_changed(model, NO_SCALE, theirs(reference))
    for layer in reference.model.layers:
        monkeypatch.setattr(layer.self_attn, "scaling", 1.0)
    for capture in (False, True):
        assert_close(ours_logits(model, NO_SCALE, capture), theirs(reference), NO_SCALE.label)


def test_positions_not_offset_by_the_cache_equal_transformers_fed_position_zero(pair) -> None:
    """The prefix is cached at its true positions; the next tokens, fed through the cache, are
    rotated as positions 0, 1, ... (transformers told so with position_ids)."""
    model, reference = pair
    prefix, rest = IDS[:, :10], IDS[:, 10:]
    with torch.no_grad():
        past = reference(prefix, use_cache=True).past_key_values
        positions = torch.arange(rest.size(1))[None]
        expected = reference(rest, past_key_values=past, position_ids=positions).logits
        ops = operations([ROTARY_NO_OFFSET])
        cache = model.new_cache()
        model.decode(prefix, cache=cache, call=Call(ops=ops))
        got = model.decode(rest, cache=cache, call=Call(ops=ops)).logits
        uncached = model(tgt=IDS, call=Call(ops=ops))  # an uncached pass never notices
    assert_close(got, expected, ROTARY_NO_OFFSET.label)
    assert_close(uncached, theirs(reference), "uncached")
    assert (got - theirs(reference)[:, 10:]).abs().max() > 1e-2


def test_a_mistake_reaches_the_greedy_continuation(pair, monkeypatch) -> None:
    model, reference = pair
    ours = greedy_batch(
        model, prompts=IDS[:, :6], eos_id=None, max_new_tokens=8, ops=operations([KV_TILED])
    )
    monkeypatch.setattr(llama, "repeat_kv", tiled)
    with torch.no_grad():
        expected = reference.generate(IDS[:, :6], max_new_tokens=8, do_sample=False)
    assert ours == [expected[0, 6:].tolist()]


def test_which_mistakes_apply_follow_the_configuration(pair) -> None:
    model, _ = pair
    assert applicable(model.config, SILENT_MISTAKE) == SILENT_MISTAKES
    # the paper's own block (sinusoids, LayerNorm, h key/value heads): two mistakes still apply
    plain = ModelConfig(architecture="decoder-only", d_model=16, n_heads=2, d_ff=32)
    assert applicable(plain, SILENT_MISTAKE) == (NO_SCALE, CAUSAL_OFF_PREFILL)
    with pytest.raises(ValueError, match="unknown silent mistake"):
        by_label("nope", SILENT_MISTAKE)


# -- the meter -----------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [None, 1, 5, 16])
def test_the_meter_equals_cross_entropy_over_transformers_logits(pair, chunk) -> None:
    model, reference = pair
    expected = F.cross_entropy(theirs(reference)[0, :-1], IDS[0, 1:])
    reading = read_text(model, IDS[0].tolist(), chunk=chunk)
    assert reading.tokens == IDS.size(1) - 1
    assert math.isclose(reading.nll, float(expected), abs_tol=1e-4)
    assert math.isclose(reading.perplexity, math.exp(float(expected)), rel_tol=1e-4)


def test_the_meter_reads_through_the_cache_so_a_forgotten_offset_shows(pair) -> None:
    model, _ = pair
    ops = operations([ROTARY_NO_OFFSET])
    whole = read_logits(model, IDS, ops)
    chunked = read_logits(model, IDS, ops, chunk=4)
    assert torch.allclose(whole[:, :4], chunked[:, :4], atol=1e-5)  # the first chunk is right
    assert (whole[:, 4:] - chunked[:, 4:]).abs().max() > 1e-2
    assert read_text(model, IDS[0], ops, chunk=4).nll != read_text(model, IDS[0], ops).nll


def test_the_reference_paragraph_is_plain_english_and_short_texts_are_refused(pair) -> None:
    model, _ = pair
    text = reference_paragraph()
    assert text.isascii() and 600 <= len(text) <= 1200
    with pytest.raises(ValueError, match="at least two tokens"):
        read_text(model, [1])
