"""Batched passes equal one-by-one passes: several decoding sessions' steps as one forward
(each with its own key/value cache of its own length), and several texts' captured passes as
one right-padded forward.

The reference is each session's own ``step()`` (the existing path: ``DecodingLoop.forward`` →
``Transformer.decode`` with the session's own cache) and each text's own ``model(..., call=TRACE)``; a twin session built the same way goes through the batch. Float32 results agree to
within 1e-6 (probabilities, attention weights, norms; logits relative to their size): the
batch multiplies matrices of other shapes, which sum in another order.
"""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
import torch
from conftest import LLAMA_BLOCK

from transformer import capture_together
from transformer.core.config import ModelConfig
from transformer.core.model import Transformer
from transformer.core.operations import PAPER
from transformer.core.run import Call, Capture
from transformer.core.util import pad
from transformer.generation import (
    DecodingSession,
    DecodingSettings,
    RowsToDecode,
    StepRecord,
    decode_together,
    step_together,
)
from transformer.generation import batched as batched_module
from transformer.lab.batched import analyse_together
from transformer.lab.inspection import analyse, pass_input

TOLERANCE = 1e-6

BASE = ModelConfig(
    src_vocab_size=40, tgt_vocab_size=40, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=48
)
MODERN = dict(
    LLAMA_BLOCK,
    attention_qkv_bias=False,
    attention_output_bias=False,
    mlp_bias=False,
)
KINDS = {
    # The paper: encoder-decoder, sinusoidal positions, post-LN, cross-attention.
    "2017": {},
    # GPT-2: learned positions, pre-LN, tied head; its pad id is real text (<|endoftext|>).
    "gpt2": dict(
        architecture="decoder-only",
        positional="learned",
        norm="pre",
        activation="gelu_tanh",
        tie_embeddings=True,
        mask_target_padding=False,
    ),
    # Llama: rotary positions, RMSNorm, gated feed-forward, grouped-query attention.
    "llama": dict(MODERN, n_kv_heads=2),
    # Gemma 2/3: local (sliding-window, own rotary base) and global layers, capped scores,
    # QK-norm, post-sublayer norms: a window of 3 lets go of keys within these short texts.
    "gemma": dict(
        MODERN,
        n_kv_heads=1,
        activation="gelu_tanh",
        sliding_window=3,
        layer_types=("sliding_attention", "full_attention"),
        local_rope_base=10.0,
        attention_softcap=20.0,
        qk_norm="head",
        post_sublayer_norm=True,
    ),
    # Mistral: every layer slides.
    "mistral": dict(MODERN, n_kv_heads=2, sliding_window=4),
}
PROMPTS = [[5, 9, 12], [7, 8, 9, 10, 11, 12, 13], [20], [4, 5, 6, 7, 8]]
SETTINGS = [
    dict(strategy="greedy"),
    dict(strategy="sample", seed=3, temperature=1.0, top_k=10),
    dict(strategy="beam", beam_width=2),
    dict(strategy="greedy", use_cache=False),
]


def model_of(kind: str, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(BASE.replace(**KINDS[kind])).eval()


def sessions(model: Transformer, **common) -> list[DecodingSession]:
    """One session per prompt, each with its own settings (strategies, cache or none)."""
    return [
        DecodingSession(
            model,
            prompt,
            DecodingSettings(max_new_tokens=12, keep_logits=True, **{**common, **own}),
            eos_id=None,
        )
        for prompt, own in zip(PROMPTS, SETTINGS, strict=True)
    ]


def close(ours: object, theirs: object, what: str, scale: bool = False) -> float:
    a = np.asarray(ours, dtype=np.float64)
    b = np.asarray(theirs, dtype=np.float64)
    assert a.shape == b.shape, f"{what}: {a.shape} vs {b.shape}"
    gap = float(np.abs(a - b).max()) if a.size else 0.0
    bound = TOLERANCE * (max(1.0, float(np.abs(b).max())) if scale and b.size else 1.0)
    assert gap <= bound, f"{what} differs by {gap:.2e} (bound {bound:.1e})"
    return gap


def assert_same_record(batched: StepRecord, own: StepRecord) -> None:
    """Everything a Step records, equal to the session's own step."""
    assert (batched.step, batched.tokens, batched.row) == (own.step, own.tokens, own.row)
    assert (batched.chosen_id, batched.top_ids, batched.chosen_rank) == (
        own.chosen_id,
        own.top_ids,
        own.chosen_rank,
    )
    close(batched.logits, own.logits, "logits", scale=True)
    close(batched.top_probs, own.top_probs, "top probabilities")
    close([batched.entropy, batched.chosen_prob], [own.entropy, own.chosen_prob], "entropy")
    if own.sampling_probs is not None:
        close(batched.sampling_probs, own.sampling_probs, "sampling probabilities")
    for name in ("self_attention", "cross_attention"):
        mine, theirs = getattr(batched, name), getattr(own, name)
        assert (mine is None) == (theirs is None), name
        if theirs is not None:
            close(mine, theirs, name)
    if own.beams is not None:
        assert batched.beams is not None
        assert [b.tokens for b in batched.beams] == [b.tokens for b in own.beams]
        close(
            [b.score for b in batched.beams],
            [b.score for b in own.beams],
            "beam scores",
            scale=True,
        )
    if own.lens is not None:
        assert batched.lens is not None
        assert torch.equal(batched.lens.top_ids, own.lens.top_ids)
        close(batched.lens.top_probs, own.lens.top_probs, "logit lens")
        close(batched.lens.chosen_prob, own.lens.chosen_prob, "lens of the chosen token")
    if own.residual is not None:
        assert batched.residual is not None and len(batched.residual) == len(own.residual)
        for mine, theirs in zip(batched.residual, own.residual, strict=True):
            assert mine.stages == theirs.stages
            close(mine.stream, theirs.stream, "residual stream", scale=True)
            close(mine.added, theirs.added, "residual updates", scale=True)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("captured", [False, True], ids=["plain", "captured"])
def test_step_together_equals_each_sessions_own_step(kind: str, captured: bool) -> None:
    """Sessions of different prompts, strategies and cache lengths (two have stepped alone
    first) step together; each record and the state each is left in (its cache: the next steps
    taken alone, and a rewind over a batched step) equal its own steps'."""
    model = model_of(kind)
    flags = dict(capture_attention=captured, capture_lens=captured)
    own, twins = sessions(model, **flags), sessions(model, **flags)
    for group in (own, twins):  # different cache lengths before the first batched step
        for _ in range(3):
            group[1].step()
        group[3].step()
    for _ in range(5):
        expected = [session.step() for session in own]
        for got, want in zip(step_together(twins), expected, strict=True):
            assert_same_record(got, want)
    for session, twin in zip(own, twins, strict=True):  # then alone again, from the handed cache
        assert_same_record(twin.step(), session.step())
        assert twin.tokens == session.tokens
        twin.rewind(2)  # and back over a batched step: the handed cache truncates as its own
        session.rewind(2)
        assert_same_record(twin.step(), session.step())


def test_the_cache_keeps_key_value_heads_and_matches_its_own() -> None:
    """After a batched step each session's cache holds its own positions, ``n_kv_heads`` heads
    (never the copy expanded to the query heads), equal to the cache its own steps built."""
    model = model_of("llama")
    own, twins = sessions(model), sessions(model)
    for _ in range(2):
        for session in own:
            session.step()
        step_together(twins)
    for session, twin in zip(own, twins, strict=True):
        if session.loop.cache is None:
            assert twin.loop.cache is None
            continue
        assert twin.loop.cache is not None
        assert twin.loop.cache.length == session.loop.cache.length
        for mine, theirs in zip(twin.loop.cache.layers, session.loop.cache.layers, strict=True):
            kv, reference = mine.self_attention, theirs.self_attention
            assert kv.keys is not None and reference.keys is not None
            assert kv.keys.shape == reference.keys.shape
            assert kv.keys.size(1) == model.config.kv_heads == 2
            close(kv.keys, reference.keys, "cached keys", scale=True)
            close(kv.values, reference.values, "cached values", scale=True)


def test_a_first_step_and_later_steps_share_a_pass() -> None:
    """A session reading its whole prompt (several new positions) and sessions reading one new
    token each go through one pass: each row's logits are those of its own last position."""
    model = model_of("gpt2")
    own, twins = sessions(model)[:3], sessions(model)[:3]
    for group in (own, twins):
        group[0].step()
        group[2].step()
    expected = [session.step() for session in own]
    for got, want in zip(step_together(twins), expected, strict=True):
        assert_same_record(got, want)


def test_decode_together_against_a_direct_decode_per_row() -> None:
    """The library call itself, against each cache's own ``model.decode``: hidden states and
    logits, and the caches left equal."""
    model = model_of("llama")
    prompts = [[3, 4, 5, 6], [7], [8, 9]]
    with torch.inference_mode():
        own = [model.new_cache() for _ in prompts]
        mine = [model.new_cache() for _ in prompts]
        for cache, twin, prompt in zip(own, mine, prompts, strict=True):
            model.decode(torch.tensor([prompt]), cache=cache)
            model.decode(torch.tensor([prompt]), cache=twin)
        new = [torch.tensor([[11, 12]]), torch.tensor([[13]]), torch.tensor([[14, 15, 16]])]
        expected = [
            model.decode(tokens, cache=cache, last_only=True)
            for tokens, cache in zip(new, own, strict=True)
        ]
        parts = [RowsToDecode(tokens, cache) for tokens, cache in zip(new, mine, strict=True)]
        got = decode_together(model, parts)
    for mine_out, theirs in zip(got, expected, strict=True):
        close(mine_out.hidden, theirs.hidden, "hidden", scale=True)
        close(mine_out.logits, theirs.logits, "logits", scale=True)
    for cache, twin in zip(own, mine, strict=True):
        assert twin.length == cache.length
        assert torch.equal(twin.real_keys, cache.real_keys)


def _differs(model: Transformer, **flags: bool) -> float:
    """The largest gap between batched and own logits over two steps of sessions of different
    cache lengths."""
    own, twins = sessions(model, **flags)[:3], sessions(model, **flags)[:3]
    for group in (own, twins):
        for _ in range(3):
            group[1].step()
    gap = 0.0
    for _ in range(2):
        expected = [session.step() for session in own]
        for got, want in zip(step_together(twins), expected, strict=True):
            gap = max(gap, float(np.abs(got.logits - want.logits).max()))
    return gap


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_positions_not_offset_per_row_differ(kind: str) -> None:
    """The wrong choice: every row's new tokens at the first row's positions (one offset for
    the batch, as a plain cached decode would use) gives other logits."""
    model = model_of(kind)
    right = batched_module._row_operations

    def one_offset(ops, positions, keys_allowed):  # type: ignore[no-untyped-def]
        shared = positions[:1].expand_as(positions)
        return right(ops, shared, keys_allowed)

    with mock.patch.object(batched_module, "_row_operations", one_offset):
        assert _differs(model) > 1e-3
    assert _differs(model) <= TOLERANCE * 50  # logits of a few units: well within the bound


@pytest.mark.parametrize("kind", ["2017", "gpt2", "llama"])
def test_padded_keys_not_masked_differ(kind: str) -> None:
    """The wrong choice: the empty slots in front of a shorter cache left open (attended as
    keys of zeros) gives other logits."""
    model = model_of(kind)
    right = batched_module._row_operations

    def open_padding(ops, positions, keys_allowed):  # type: ignore[no-untyped-def]
        return right(ops, positions, torch.ones_like(keys_allowed))

    with (
        mock.patch.object(batched_module, "_row_operations", open_padding),
        mock.patch.object(
            batched_module,
            "_batch_cache",
            _without_real_keys(batched_module._batch_cache),
        ),
    ):
        assert _differs(model) > 1e-3


def _without_real_keys(build):  # type: ignore[no-untyped-def]
    """``_batch_cache`` whose flags call every slot real (the wrong choice, for every config:
    also those that mask target padding through the cache's own flags)."""

    def wrong(parts, layout):  # type: ignore[no-untyped-def]
        cache, held, stacked = build(parts, layout)
        if cache.real_keys is not None:
            cache.real_keys = torch.ones_like(cache.real_keys)
        return cache, torch.ones_like(held), stacked

    return wrong


def test_bad_batches_are_refused_before_any_session_moves() -> None:
    model, other = model_of("gpt2"), model_of("gpt2", seed=1)
    group = sessions(model)
    alien = DecodingSession(other, [3, 4], DecodingSettings(), eos_id=None)
    with pytest.raises(ValueError, match="different models"):
        step_together([group[0], alien])
    with pytest.raises(ValueError, match="twice"):
        step_together([group[0], group[0]])
    finished = DecodingSession(model, [3], DecodingSettings(max_new_tokens=1), eos_id=None)
    finished.step()
    with pytest.raises(RuntimeError, match="stopped"):
        step_together([group[0], finished])
    assert all(not session.records for session in group)
    assert step_together([]) == []


# -- captured passes of several texts ----------------------------------------------------------

TEXTS = [[5, 9, 12], [7, 8, 9, 10, 11, 12, 13], [20], [4, 5, 6, 7, 8]]
TARGETS = [[1, 5, 6], [1], [1, 7, 8, 9, 10, 11], [1, 2]]
CAPTURE_KINDS = {
    **{kind: KINDS[kind] for kind in ("2017", "gpt2", "llama", "gemma")},
    # BERT: encoder only, learned positions, embedding norm, token types.
    "bert": dict(
        architecture="encoder-only",
        positional="learned",
        embedding_norm=True,
        n_token_types=2,
        activation="gelu",
        scale_embeddings=False,
    ),
}


def _inputs(config: ModelConfig) -> dict[str, list[list[int]]]:
    given = {}
    if config.has_encoder:
        given["sources"] = TEXTS
    if config.has_decoder:
        given["targets"] = TARGETS if config.has_encoder else TEXTS
    return given


def _own_pass(model: Transformer, given: dict, i: int, capture):  # type: ignore[no-untyped-def]
    src = torch.tensor([given["sources"][i]]) if "sources" in given else None
    tgt = torch.tensor([given["targets"][i]]) if "targets" in given else None
    with torch.inference_mode():
        return model(src, tgt, call=Call(capture=capture))


@pytest.mark.parametrize("kind", list(CAPTURE_KINDS))
@pytest.mark.parametrize(
    "capture", [Capture(), Capture(keep_attention_weights=False)], ids=["kept", "light"]
)
def test_capture_together_equals_each_texts_own_pass(kind: str, capture) -> None:  # type: ignore[no-untyped-def]
    """Each text's trace, cut from the batch's, equals its own pass's: attention weights per
    layer and head trimmed to its length, logits, every layer's stream, the rotary pair."""
    torch.manual_seed(0)
    model = Transformer(BASE.replace(**CAPTURE_KINDS[kind])).eval()
    given = _inputs(model.config)
    traces = capture_together(model, capture=capture, **given)
    assert len(traces) == len(TEXTS)
    for i, trace in enumerate(traces):
        own = _own_pass(model, given, i, capture)
        close(trace.logits, own.logits, "logits", scale=True)
        for name in ("encoder_self", "decoder_self", "cross"):
            if not (own.encoder_layers if name == "encoder_self" else own.decoder_layers):
                continue
            if name == "cross" and not model.config.has_encoder:
                continue
            close(trace.attention_weights(name), own.attention_weights(name), name)
            for mine, theirs in zip(
                trace.attention_records(name), own.attention_records(name), strict=True
            ):
                assert torch.equal(mine.mask, theirs.mask.expand_as(mine.mask))
                assert (mine.kept_weights is None) == (theirs.kept_weights is None)
                close(
                    mine.scores.nan_to_num(0, 0, 0),
                    theirs.scores.nan_to_num(0, 0, 0),
                    f"{name} scores",
                    scale=True,
                )
                assert (mine.rotary is None) == (theirs.rotary is None)
                if theirs.rotary is not None:
                    assert mine.rotary is not None
                    close(mine.rotary.keys_after, theirs.rotary.keys_after, "rotated keys")
        for mine, theirs in zip(
            trace.encoder_layers + trace.decoder_layers,
            own.encoder_layers + own.decoder_layers,
            strict=True,
        ):
            close(mine.output, theirs.output, "layer output", scale=True)
            close(mine.self_attention_output, theirs.self_attention_output, "stream", scale=True)
        for stack in ("source", "target"):
            mine_in, theirs_in = getattr(trace, stack), getattr(own, stack)
            assert (mine_in is None) == (theirs_in is None)
            if theirs_in is not None:
                assert torch.equal(mine_in.tokens, theirs_in.tokens)
                close(mine_in.positional, theirs_in.positional, "positions")


def test_captured_texts_unmasked_padding_differs() -> None:
    """The wrong choice: right-padded texts through an encoder with its padding mask off (the
    padding then attended as keys) no longer give each text's own weights."""
    torch.manual_seed(0)
    model = Transformer(BASE.replace(**CAPTURE_KINDS["bert"])).eval()
    with pytest.raises(ValueError, match="padding mask"):
        capture_together(model, TEXTS, ops=replace(PAPER, padding_mask=False))
    src = pad(TEXTS, model.config.pad_id)
    with torch.inference_mode():
        leaky = model(src, call=Call(ops=replace(PAPER, padding_mask=False), capture=Capture()))
    own = _own_pass(model, {"sources": TEXTS}, 0, Capture())
    n = len(TEXTS[0])
    weights = leaky.attention_weights("encoder_self")[:, :1, :, :n, :n]
    assert float((weights - own.attention_weights("encoder_self")).abs().max()) > 1e-2


def test_capture_together_refuses_what_it_cannot_cut() -> None:
    torch.manual_seed(0)
    decoder_only = Transformer(BASE.replace(**KINDS["gpt2"])).eval()
    with pytest.raises(ValueError, match="takes no sources"):
        capture_together(decoder_only, sources=TEXTS)
    with pytest.raises(ValueError, match="at least one text"):
        capture_together(decoder_only)
    with pytest.raises(ValueError, match="at least one"):
        capture_together(decoder_only, targets=[[3], []])
    with pytest.raises(ValueError, match="traces"):
        capture_together(decoder_only, targets=TEXTS, capture=Capture(trace=False))


# -- several students' analyses as one pass ----------------------------------------------------

REQUESTS = [
    ["the cat sat on the mat", "a dog"],
    ["attention is all you need for this long sentence to be read"],
    ["hello", "the model reads three sentences", "and pads them"],
]


@pytest.mark.parametrize("architecture", ["decoder-only", "encoder-only"])
def test_analyse_together_equals_each_requests_own_analysis(architecture: str, trained) -> None:  # type: ignore[no-untyped-def]
    """Three requests (1 to 3 sentences each, each padded to its own longest) analysed in one
    pass: each Analysis equals its own ``analyse``'s (pieces, texts, predictions, trace)."""
    tokenizer = trained["bpe"]
    shape = {"gpt2": KINDS["gpt2"], "bert": CAPTURE_KINDS["bert"]}
    kind = shape["gpt2"] if architecture == "decoder-only" else shape["bert"]
    vocab = tokenizer.vocab_size
    torch.manual_seed(0)
    config = BASE.replace(**kind, src_vocab_size=vocab, tgt_vocab_size=vocab, max_len=64)
    model = Transformer(config).eval()
    planned = [pass_input(model, tokenizer, sentences) for sentences in REQUESTS]
    together = analyse_together(model, tokenizer, planned)
    for mine, request in zip(together, planned, strict=True):
        own = analyse(model, tokenizer, request)
        assert mine.source_pieces == own.source_pieces
        assert mine.target_pieces == own.target_pieces
        assert mine.outputs == own.outputs and mine.predicted == own.predicted
        close(mine.trace.logits, own.trace.logits, "logits", scale=True)
        kind_name = "decoder_self" if architecture == "decoder-only" else "encoder_self"
        close(
            mine.trace.attention_weights(kind_name),
            own.trace.attention_weights(kind_name),
            "attention",
        )
        for a, b in zip(
            mine.trace.attention_records(kind_name),
            own.trace.attention_records(kind_name),
            strict=True,
        ):
            assert torch.equal(a.mask, b.mask.expand_as(a.mask))
            assert (a.kept_weights is None) == (b.kept_weights is None)


def test_analyse_together_refuses_an_encoder_decoder() -> None:
    model = model_of("2017")
    with pytest.raises(ValueError, match="one by one"):
        analyse_together(model, None, [])  # type: ignore[arg-type]


def test_decode_together_refuses_ids_outside_the_vocabulary() -> None:
    model = model_of("llama")
    with torch.inference_mode():
        parts = [RowsToDecode(torch.tensor([[3, 4]]), model.new_cache())]
        parts.append(RowsToDecode(torch.tensor([[BASE.tgt_vocab_size]]), model.new_cache()))
        with pytest.raises(ValueError, match="outside the vocabulary"):
            decode_together(model, parts)
        assert all(part.cache.length == 0 for part in parts)  # nothing moved
