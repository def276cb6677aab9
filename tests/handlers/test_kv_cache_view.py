"""The key/value cache made visible (transformer/generation/cache_stats.py and Generate's cache
view), and Generate's silent-mistake panel, on a tiny grouped-query Llama against transformers:
byte counts from the config, the positions each step feeds, the cached-vs-uncached check, the
meter's figures and the continuation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import llama_folder

from transformer.generation import DecodingSession, DecodingSettings
from transformer.generation.cache_stats import (
    cache_bytes_per_token,
    check_next_step,
    check_session,
    layer_sizes,
    step_costs,
)
from transformer.lab.silent_mistakes import KV_TILED, ROTARY_NO_OFFSET
from transformer.lab.switches import operations
from transformer.pretrained import load_pretrained
from ui.serving.state import GenerationState, ModelRegistry, SessionModels
from ui.tabs.generate import silent
from ui.tabs.generate.cache_view import kv_cache, size

llama = pytest.importorskip("transformers.models.llama.modeling_llama")

VOCAB = 97
PROMPT = [5, 17, 3, 42, 8, 61, 29]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cache-llama")
    llama_folder(path, VOCAB, seed=3, matrices=0.2, num_attention_heads=4, num_key_value_heads=2)
    return path


@pytest.fixture(scope="module")
def reference(folder: Path) -> torch.nn.Module:
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager")
    return model.eval()


@pytest.fixture(scope="module")
def model(folder: Path):
    return load_pretrained(folder).model.eval()


def test_cache_bytes_follow_the_config(folder, model) -> None:
    hf = json.loads((folder / "config.json").read_text())
    d_head = hf["hidden_size"] // hf["num_attention_heads"]
    layers, kv, heads = (
        hf["num_hidden_layers"],
        hf["num_key_value_heads"],
        hf["num_attention_heads"],
    )
    assert cache_bytes_per_token(model.config) == 2 * layers * kv * d_head * 4
    assert cache_bytes_per_token(model.config, full_heads=True) == 2 * layers * heads * d_head * 4
    assert cache_bytes_per_token(model.config, 2) == 2 * layers * kv * d_head * 2


def test_the_cache_of_a_session_holds_what_the_formula_says(folder, model) -> None:
    hf = json.loads((folder / "config.json").read_text())
    d_head = hf["hidden_size"] // hf["num_attention_heads"]
    session = DecodingSession(model, PROMPT, DecodingSettings(max_new_tokens=10), eos_id=None)
    for _ in range(4):
        session.step()
    length = len(PROMPT) + 4 - 1  # the last choice is not fed yet
    sizes = layer_sizes(session.loop.cache)
    assert len(sizes) == hf["num_hidden_layers"]
    assert {s.shape for s in sizes} == {(1, hf["num_key_value_heads"], length, d_head)}
    per_token = 2 * hf["num_hidden_layers"] * hf["num_key_value_heads"] * d_head * 4
    assert sum(s.bytes for s in sizes) == per_token * length


def test_step_costs_are_the_positions_the_decoder_was_fed(model, monkeypatch) -> None:
    fed: list[int] = []
    decode = type(model).decode

    def counting(self, tgt, *args, **kwargs):
        fed.append(tgt.size(1))
        return decode(self, tgt, *args, **kwargs)

    monkeypatch.setattr(type(model), "decode", counting)
    for use_cache in (True, False):
        fed.clear()
        settings = DecodingSettings(max_new_tokens=5, use_cache=use_cache)
        session = DecodingSession(model, PROMPT, settings, eos_id=None)
        list(session.run())
        costs = step_costs(len(PROMPT), 5, use_cache)
        assert [c.computed for c in costs] == fed
        if use_cache:
            assert [c.length for c in costs] == [len(PROMPT) + n for n in range(5)]
            assert [c.prefill for c in costs] == [True, False, False, False, False]


def test_the_cache_check_equals_a_direct_uncached_forward(model, reference) -> None:
    tokens = torch.tensor([[*PROMPT, 11, 23, 40]])
    with torch.no_grad():
        uncached = reference(tokens).logits[:, -1]
        cache = model.new_cache()
        model.decode(tokens[:, :-1], cache=cache)
        cached = model.decode(tokens[:, -1:], cache=cache).logits[:, -1]
    expected = float((cached - uncached).abs().max())
    cache = model.new_cache()
    with torch.no_grad():
        model.decode(tokens[:, :-1], cache=cache)
    length = cache.length
    check = check_next_step(model, tokens, cache=cache)
    assert cache.length == length  # the view never feeds the decoding's own cache
    assert check.cached_positions == 1 and check.uncached_positions == tokens.size(1)
    assert check.max_abs_difference <= 1e-4 and math.isclose(
        check.max_abs_difference, expected, abs_tol=1e-4
    )
    assert check.cached_s > 0 and check.uncached_s > 0


def test_the_cache_check_shows_a_cache_that_forgets_its_offset(model, reference) -> None:
    """Rotary positions not offset by the cache: transformers fed the last token at position
    0 through its cache disagrees with its uncached pass by what the check reports."""
    tokens = torch.tensor([[*PROMPT, 11, 23, 40]])
    with torch.no_grad():
        uncached = reference(tokens).logits[:, -1]
        past = reference(tokens[:, :-1], use_cache=True).past_key_values
        cached = reference(tokens[:, -1:], past_key_values=past, position_ids=torch.tensor([[0]]))
    expected = float((cached.logits[:, -1] - uncached).abs().max())
    assert expected > 1e-2
    check = check_next_step(model, tokens, ops=operations([ROTARY_NO_OFFSET]))
    assert math.isclose(check.max_abs_difference, expected, rel_tol=1e-3, abs_tol=1e-4)


def test_a_bfloat16_cache_agrees_within_its_rounding_and_a_broken_one_does_not(folder) -> None:
    """In bfloat16 a right cache differs from the uncached pass by rounding alone (more than
    float32's 1e-3, so the view called a right cache wrong); the tolerance follows the dtype,
    and a cache that forgets its offset still misses by more. The same check in float32 is the
    reference for what a right cache gives."""
    tokens = torch.tensor([[*PROMPT, 11, 23, 40]])
    half = load_pretrained(folder, dtype="bfloat16").model.eval()
    assert next(half.parameters()).dtype == torch.bfloat16
    right = check_next_step(half, tokens)
    assert right.tolerance > 1e-3 and right.agrees, (right.max_abs_difference, right.tolerance)
    broken = check_next_step(half, tokens, ops=operations([ROTARY_NO_OFFSET]))
    assert not broken.agrees, (broken.max_abs_difference, broken.tolerance)
    full = check_next_step(load_pretrained(folder).model.eval(), tokens)
    assert full.tolerance == 1e-3 and full.agrees


def test_a_session_check_reads_the_session_where_it_stands(model) -> None:
    session = DecodingSession(model, PROMPT, DecodingSettings(max_new_tokens=6), eos_id=None)
    session.step()
    session.step()
    before = session.loop.cache.length
    check = check_session(session)
    assert check.cached_positions == 1 and check.max_abs_difference <= 1e-4
    assert session.loop.cache.length == before and len(session.records) == 2


# -- the UI handlers ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(folder: Path) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), extra_models=[str(folder)])


def _inputs(name: str, prompt: str = "w5 w17 w3 w42") -> list:
    return [prompt, name, "greedy", 1.0, 0, 1.0, 3, 20, 0, 1, 1, False]


def test_the_cache_view_follows_the_session(registry, folder) -> None:
    from ui.tabs.generate import step

    name, session, state = str(folder), SessionModels(), GenerationState()
    table, steps, check = kv_cache(registry, *_inputs(name), session, state)
    assert "No step yet" in steps and "4 positions at once" in steps
    for _ in range(3):
        step(registry, *_inputs(name), session, state)
    table, steps, check = kv_cache(registry, *_inputs(name), session, state)
    hf = json.loads((folder / "config.json").read_text())
    per_token = 2 * hf["num_hidden_layers"] * 2 * (hf["hidden_size"] // 4) * 4
    length = 4 + 3 - 1
    assert f"now ({length} positions)" in table
    assert f"| {size(per_token)} | {size(per_token * length)} |" in table
    assert "| 1 |" in steps and "| prefill | 4 |" in steps and "| decode | 1 |" in steps
    assert "agree" in check and "disagree" not in check
    assert len(state.decoding.records) == 3  # the view does not step


def test_the_follower_draws_the_same_view_while_shown(registry, folder) -> None:
    from ui.serving.state import bind
    from ui.tabs.generate.shown import if_shown

    name, session, state = str(folder), SessionModels(), GenerationState()
    shown = if_shown(bind(kv_cache, registry), 3)(*_inputs(name), session, state, True)
    direct = kv_cache(registry, *_inputs(name), session, state)
    assert shown[0] == direct[0] and shown[1] == direct[1]  # the timings (check) differ
    assert "agree" in shown[2]


def test_the_cache_view_of_a_paper_model_and_of_an_encoder(registry) -> None:
    table, *_ = kv_cache(registry, *_inputs("translate", "the cat"), SessionModels(), None)
    assert "4 heads, each with its own keys and values" in table
    text, *rest = kv_cache(registry, *_inputs("all-MiniLM-L6-v2", "a"), SessionModels(), None)
    assert "cannot write text" in text and rest == ["", ""]


def test_the_silent_panel_equals_transformers(registry, folder, reference, monkeypatch) -> None:
    name = str(folder)
    text, meter = silent.silent_mistake(registry, "w5 w17 w3 w42", name, KV_TILED.label, None)
    tokenizer = load_pretrained(folder).tokenizer
    paragraph = tokenizer.encode_ids(silent.reference_paragraph())[:64]  # the model's max_len
    ids = torch.tensor([paragraph])
    with torch.no_grad():
        correct = F.cross_entropy(reference(ids).logits[0, :-1], ids[0, 1:])
        monkeypatch.setattr(llama, "repeat_kv", lambda x, n: x.repeat(1, n, 1, 1))
        broken = F.cross_entropy(reference(ids).logits[0, :-1], ids[0, 1:])
        prompt = torch.tensor([[5, 17, 3, 42]])
        out = reference.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert f"| correct | {float(correct):.4f} | {math.exp(float(correct)):.2f} |" in meter
    assert f"| {float(broken):.4f} | {math.exp(float(broken)):.2f} |" in meter
    broken_text = tokenizer.decode(out[0, 4:].tolist())
    assert silent.markdown_text(broken_text) in text


def test_the_silent_panel_says_where_it_does_not_apply(registry) -> None:
    text, meter = silent.silent_mistake(registry, "the cat", "translate", KV_TILED.label, None)
    assert "built like the 2017 paper" in text and meter == ""
    with pytest.raises(Exception, match="choose a silent mistake"):
        silent.silent_mistake(registry, "the cat", "translate", "nope", None)
