"""Step-by-step generation: strategies agree where they must, sessions rewind exactly, bad input
is refused with a message that says what to fix."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.core.config import ModelConfig
from transformer.core.model import Transformer
from transformer.core.run import TRACE
from transformer.core.special import BOS_ID, PAD_ID
from transformer.generation import (
    MAX_NEW_TOKENS,
    DecodingSession,
    DecodingSettings,
    filter_logits,
    generate,
    greedy_batch,
    sampling_distribution,
    teacher_force,
)

CONFIG = ModelConfig(
    src_vocab_size=30, tgt_vocab_size=30, d_model=32, n_heads=4, d_ff=64, dropout=0.0
)
ARCHITECTURES = ["encoder-decoder", "decoder-only"]
EOS = 3
SOURCE = [5, 9, 12, 7, 20, 4]


def model_for(architecture: str = "encoder-decoder", **changes) -> Transformer:
    torch.manual_seed(0)
    return Transformer(CONFIG.replace(architecture=architecture, **changes)).eval()


def run(model: Transformer, source=SOURCE, eos_id: int | None = EOS, **settings) -> DecodingSession:
    session = DecodingSession(model, source, DecodingSettings(**settings), eos_id=eos_id)
    for _ in session.run():
        pass
    return session


def chosen(session: DecodingSession) -> list[int]:
    return [r.chosen_id for r in session.records]


def assert_same_records(a, b, exact: bool = True) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.step, x.tokens, x.chosen_id, x.top_ids) == (
            y.step,
            y.tokens,
            y.chosen_id,
            y.top_ids,
        )
        if exact:
            assert (x.top_probs, x.entropy, x.chosen_prob) == (
                y.top_probs,
                y.entropy,
                y.chosen_prob,
            )
            for name in ("self_attention", "cross_attention", "logits"):
                left, right = getattr(x, name), getattr(y, name)
                assert (left is None) == (right is None)
                if left is not None:
                    assert np.array_equal(left, right), name
        else:
            assert np.allclose(x.top_probs, y.top_probs, atol=1e-5)


# -- the strategies agree where they must ---------------------------------------------------------


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("capture", [False, True])
def test_greedy_with_the_cache_equals_greedy_without_it(architecture, capture):
    model = model_for(architecture, norm="pre")
    common = {"max_new_tokens": 12, "keep_logits": True, "capture_attention": capture}
    cached = run(model, eos_id=None, use_cache=True, **common)
    recomputed = run(model, eos_id=None, use_cache=False, **common)
    assert chosen(cached) == chosen(recomputed)
    assert len(cached.records) == 12
    for fast, slow in zip(cached.records, recomputed.records, strict=True):
        assert np.allclose(fast.logits, slow.logits, atol=1e-5, rtol=0)
        if capture:
            assert np.allclose(fast.self_attention, slow.self_attention, atol=1e-5)
            if architecture == "encoder-decoder":
                assert np.allclose(fast.cross_attention, slow.cross_attention, atol=1e-5)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_width_one_equals_greedy(architecture, use_cache):
    model = model_for(architecture)
    greedy = run(model, eos_id=None, max_new_tokens=10, use_cache=use_cache)
    beam = run(
        model, eos_id=None, max_new_tokens=10, use_cache=use_cache, strategy="beam", beam_width=1
    )
    assert chosen(beam) == chosen(greedy)
    assert beam.output_ids == greedy.output_ids
    assert [r.top_probs for r in beam.records] == [r.top_probs for r in greedy.records]


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_top_k_one_sampling_equals_greedy(architecture):
    model = model_for(architecture)
    greedy = run(model, eos_id=None, max_new_tokens=10)
    for seed in (0, 1):
        top1 = run(model, eos_id=None, max_new_tokens=10, strategy="sample", top_k=1, seed=seed)
        assert chosen(top1) == chosen(greedy)
        assert all(r.sampling_probs[0] == 1.0 for r in top1.records)


def test_temperature_zero_or_below_is_documented_greedy():
    model = model_for()
    greedy = run(model, eos_id=None, max_new_tokens=8)
    for temperature in (0.0, -1.0):
        cold = run(model, eos_id=None, max_new_tokens=8, strategy="sample", temperature=temperature)
        assert cold.strategy == "greedy"
        assert chosen(cold) == chosen(greedy)
        assert cold.records[0].method == "greedy (temperature ≤ 0)"


def test_beam_search_keeps_ranked_beams_whose_scores_are_their_log_probabilities():
    model = model_for()
    session = run(model, eos_id=None, max_new_tokens=6, strategy="beam", beam_width=3)
    beams = session.records[-1].beams
    assert len(beams) == 3
    assert [b.rank_score for b in beams] == sorted((b.rank_score for b in beams), reverse=True)
    assert len({tuple(b.tokens) for b in beams}) == 3  # distinct hypotheses
    for beam in beams:  # the score is the summed log-probability the model gives the beam
        forced = teacher_force(model, SOURCE, beam.tokens[1:])
        total = sum(math.log(p.reference_prob) for p in forced.positions)
        assert beam.score == pytest.approx(total, abs=1e-4)
    assert session.output_ids == beams[0].tokens[1:]


def test_beam_search_with_the_cache_equals_beam_search_without_it():
    model = model_for()
    common = {"eos_id": None, "max_new_tokens": 8, "strategy": "beam", "beam_width": 4}
    cached, recomputed = run(model, use_cache=True, **common), run(model, use_cache=False, **common)
    assert [[b.tokens for b in r.beams] for r in cached.records] == [
        [b.tokens for b in r.beams] for r in recomputed.records
    ]


# -- seeds, stepping, resuming, rewinding ---------------------------------------------------------


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_a_fixed_seed_reproduces_a_sampled_sequence(architecture):
    model = model_for(architecture)
    common = {"eos_id": None, "max_new_tokens": 15, "strategy": "sample", "temperature": 1.5}
    first, again = run(model, seed=7, **common), run(model, seed=7, **common)
    assert_same_records(first.records, again.records)
    other = run(model, seed=8, **common)
    assert chosen(other) != chosen(first)  # a different seed draws differently
    # Global RNG use in between does not disturb a session's own generator.
    torch.rand(100)
    assert chosen(run(model, seed=7, **common)) == chosen(first)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize(
    "strategy",
    [
        {"strategy": "greedy", "capture_attention": True},
        {"strategy": "sample", "temperature": 1.3, "top_p": 0.9, "capture_attention": True},
        {"strategy": "sample", "top_k": 5, "use_cache": False},
    ],
)
def test_rewinding_and_stepping_again_reproduces_the_same_records(architecture, strategy):
    model = model_for(architecture)
    session = run(model, eos_id=None, max_new_tokens=10, keep_logits=True, **strategy)
    original = list(session.records)
    for target in (7, 3, 0):
        session.rewind_to(target)
        assert session.records == original[:target] and not session.done
        for _ in session.run():
            pass
        assert_same_records(session.records, original)
    session.back()
    assert len(session.records) == 9
    assert_same_records([session.step()], original[9:])
    session.rewind(100)  # more steps than there are: back to the start
    assert session.records == [] and session.tokens == session.prefix


def test_rewinding_beam_search_reproduces_its_beams():
    model = model_for()
    session = run(model, eos_id=None, max_new_tokens=8, strategy="beam", beam_width=3)
    original = list(session.records)
    session.rewind(5)
    for _ in session.run():
        pass
    # The rebuilt cache is equal to within float rounding, so compare tokens and closeness.
    assert_same_records(session.records, original, exact=False)
    assert [[b.tokens for b in r.beams] for r in session.records] == [
        [b.tokens for b in r.beams] for r in original
    ]


def test_run_can_be_stopped_and_resumed():
    model = model_for()
    whole = run(model, eos_id=None, max_new_tokens=9, strategy="sample", seed=3)
    session = DecodingSession(
        model, SOURCE, DecodingSettings(max_new_tokens=9, strategy="sample", seed=3), eos_id=None
    )
    assert len(list(session.run(max_steps=4))) == 4 and not session.done
    record = session.step()
    assert record.step == 4
    rest = list(session.run())
    assert len(rest) == 4 and session.done and session.stop_reason == "max_new_tokens"
    assert_same_records(session.records, whole.records)
    with pytest.raises(RuntimeError, match="stopped"):
        session.step()


# -- stopping -------------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_generation_stops_at_eos(architecture, strategy):
    model = model_for(architecture)
    with torch.no_grad():
        model.generator.proj.bias[EOS] = 100.0  # a model that wants to stop at once
    session = run(model, max_new_tokens=10, strategy=strategy)
    assert session.done and session.stop_reason == "eos"
    assert len(session.records) == 1 and session.records[0].chosen_id == EOS
    assert session.output_ids == [] and session.tokens[-1] == EOS


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_generation_stops_at_eos_after_some_steps(architecture):
    # Sample a sequence with no EOS, then call its first new token after step 2 "EOS": the same
    # seed draws the same tokens, so generation must stop exactly there.
    model = model_for(architecture)
    common = {"max_new_tokens": 20, "strategy": "sample", "temperature": 2.0, "seed": 11}
    free = chosen(run(model, eos_id=None, **common))
    stop_at = next(i for i in range(2, len(free)) if free[i] not in free[:i])
    session = run(model, eos_id=free[stop_at], **common)
    assert session.stop_reason == "eos"
    assert chosen(session) == free[: stop_at + 1]
    assert session.output_ids == free[:stop_at]


def test_decoder_only_generation_stops_at_max_len():
    model = model_for("decoder-only", max_len=10)
    prompt = [5, 6, 7, 8, 9, 10, 11, 12]
    session = run(model, source=prompt, eos_id=None, max_new_tokens=50)
    # Positions 0..9 can be fed, so 10 - 8 + 1 = 3 tokens can be predicted.
    assert session.max_steps == 3 and len(session.records) == 3
    assert session.stop_reason == "max_len"
    assert len(session.tokens) == 11


# -- records --------------------------------------------------------------------------------------


def test_records_describe_the_distribution_and_the_attention_rows():
    model = model_for("encoder-decoder", n_decoder_layers=3)
    labels = {i: f"t{i}" for i in range(30)}
    session = DecodingSession(
        model,
        SOURCE,
        DecodingSettings(
            strategy="sample", top_k=4, max_new_tokens=5, capture_attention=True, top_k_shown=6
        ),
        eos_id=None,
        decode_token=labels.__getitem__,
    )
    for record in session.run():
        tokens = len(record.tokens)
        assert record.tokens == session.prefix + chosen(session)[: record.step]
        assert record.self_attention.shape == (3, 4, tokens)
        assert record.cross_attention.shape == (3, 4, len(SOURCE))
        assert record.self_attention.dtype == np.float32
        assert np.allclose(record.self_attention.sum(-1), 1, atol=1e-5)
        assert np.allclose(record.cross_attention.sum(-1), 1, atol=1e-5)
        assert len(record.top_ids) == 6 and record.top_probs == sorted(
            record.top_probs, reverse=True
        )
        assert 0 <= record.entropy <= math.log(30)
        assert record.chosen_id in record.top_ids[:4]  # top-k = 4
        assert record.sampling_probs[4:] == [0.0, 0.0]
        assert sum(record.sampling_probs) == pytest.approx(1.0, abs=1e-5)
        assert record.top_labels == [f"t{i}" for i in record.top_ids]
        assert record.chosen_label == f"t{record.chosen_id}"
        assert record.method == "sample (T=1, top-k=4)"
    plain = run(model, eos_id=None, max_new_tokens=2)
    assert plain.records[0].self_attention is None and plain.records[0].logits is None


def test_decoder_only_records_have_no_cross_attention():
    model = model_for("decoder-only")
    session = run(model, eos_id=None, max_new_tokens=3, capture_attention=True)
    assert session.prefix == SOURCE  # the prompt is the prefix, no [BOS] added
    assert session.records[0].self_attention.shape == (2, 4, len(SOURCE))
    assert session.records[0].cross_attention is None


def test_the_source_is_encoded_once_and_cross_attention_keys_computed_once():
    model = model_for()
    with mock.patch.object(model, "encode", wraps=model.encode) as encode:
        session = DecodingSession(model, SOURCE, DecodingSettings(max_new_tokens=6), eos_id=None)
        session.step()
        keys = session._cache.layers[0].cross_attention.keys
        for _ in session.run():
            pass
        session.rewind_to(0)
        session.step()
    assert encode.call_count == 1
    assert session._cache.layers[0].cross_attention.keys is keys


def test_a_model_in_training_mode_is_run_in_eval_mode_and_left_as_it_was():
    model = model_for(dropout=0.5).train()
    first = run(model, eos_id=None, max_new_tokens=6)
    assert model.training
    assert chosen(run(model, eos_id=None, max_new_tokens=6)) == chosen(first)  # no dropout


def test_every_decoding_call_leaves_a_training_model_in_training_mode():
    model = model_for(dropout=0.5)
    src = torch.tensor([SOURCE])
    expected = {  # dropout off: what the same model computes in eval mode
        "generate": generate(model, SOURCE, DecodingSettings(max_new_tokens=5), eos_id=None),
        "greedy_batch": greedy_batch(model, src, eos_id=None, max_new_tokens=5),
        "teacher_force": teacher_force(model, SOURCE, [5, 6, 7]).accuracy,
    }
    model.train()
    calls = {
        "generate": lambda: generate(
            model, SOURCE, DecodingSettings(max_new_tokens=5), eos_id=None
        ),
        "greedy_batch": lambda: greedy_batch(model, src, eos_id=None, max_new_tokens=5),
        "teacher_force": lambda: teacher_force(model, SOURCE, [5, 6, 7]).accuracy,
    }
    for name, call in calls.items():
        assert call() == expected[name], name
        assert model.training, f"{name} left the model in eval mode"


def test_generate_returns_the_output_ids():
    model = model_for()
    assert generate(model, SOURCE, DecodingSettings(max_new_tokens=5), eos_id=None) == chosen(
        run(model, eos_id=None, max_new_tokens=5)
    )


# -- greedy over a batch --------------------------------------------------------------------------


def reference_greedy(model: Transformer, prefix: list[int], src: list[int] | None, steps: int):
    """A plain greedy loop written here: one unpadded row, no cache, the whole prefix recomputed."""
    tokens = list(prefix)
    for _ in range(steps):
        if src is None:
            logits = model(tgt=torch.tensor([tokens]))
        else:
            logits = model(torch.tensor([src]), torch.tensor([tokens]))
        tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prefix) :]


def cut(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos)] if eos in row else row


def test_greedy_batch_equals_a_plain_greedy_loop_row_by_row():
    model = model_for().double()  # rounding cannot tip an argmax between batched and single rows
    sources = [SOURCE, [7, 8, 9], [11, 12, 13, 14, 15, 16, 17, 18], [6]]
    src = torch.full((len(sources), 8), PAD_ID)
    for i, row in enumerate(sources):
        src[i, : len(row)] = torch.tensor(row)
    expected = [reference_greedy(model, [BOS_ID], row, 7) for row in sources]
    assert greedy_batch(model, src, eos_id=None, max_new_tokens=7) == expected
    # A row stops at its [EOS]; the others go on.
    row, k = next(
        (i, k) for i, out in enumerate(expected) for k in range(1, 7) if out[k] not in out[:k]
    )
    eos = expected[row][k]  # this row stops after k tokens
    outputs = greedy_batch(model, src, eos_id=eos, max_new_tokens=7)
    assert outputs == [cut(out, eos) for out in expected]
    assert outputs[row] == expected[row][:k]


def test_greedy_batch_continues_decoder_only_prompts():
    model = model_for("decoder-only").double()
    prompts = [[5, 9, 12], [20, 4, 7]]
    expected = [reference_greedy(model, row, None, 6) for row in prompts]
    assert greedy_batch(model, prompts=torch.tensor(prompts), eos_id=None, max_new_tokens=6) == (
        expected
    )


def test_greedy_batch_agrees_with_a_greedy_session_and_its_max_len():
    model = model_for(max_len=8)
    session = run(model, eos_id=None, max_new_tokens=20)  # stops at max_len
    assert session.stop_reason == "max_len"
    outputs = greedy_batch(model, torch.tensor([SOURCE]), eos_id=None, max_new_tokens=20)
    assert outputs == [session.output_ids]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "decodes from src"),
        ({"src": torch.tensor([SOURCE]), "max_new_tokens": -1}, "max_new_tokens"),
        ({"src": torch.tensor(SOURCE)}, "src must be"),
    ],
)
def test_greedy_batch_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        greedy_batch(model_for(), **kwargs)


# -- filtering ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    logits=st.lists(st.floats(-20, 20), min_size=1, max_size=12),
    top_p=st.floats(0.01, 1.0),
    top_k=st.integers(0, 14),
)
def test_top_p_keeps_the_smallest_set_with_enough_mass(logits, top_p, top_k):
    logits = torch.tensor(logits)
    probs = sampling_distribution(logits, 1.0, top_k=top_k, top_p=top_p)
    kept = probs > 0
    assert kept.sum() >= 1 and kept[logits.argmax()]
    assert probs.sum() == pytest.approx(1.0, abs=1e-5)
    after_k = filter_logits(logits, top_k=top_k).softmax(-1)
    if top_k:
        assert (after_k > 0).sum() >= min(top_k, len(logits))  # ties at the k-th may stay
    # Mass ≥ p and minimal: dropping the least probable kept token would fall below p.
    mass = after_k[kept].sum()
    assert mass >= top_p - 1e-5 or bool(kept.all())
    assert after_k[kept].sum() - after_k[kept].min() < top_p + 1e-5


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([2.0, 1.0, 0.0])
    cold, warm = sampling_distribution(logits, 0.5), sampling_distribution(logits, 5.0)
    assert cold[0] > logits.softmax(-1)[0] > warm[0]
    assert torch.isfinite(sampling_distribution(logits, 1e-30)).all()  # floored, no overflow
    with pytest.raises(ValueError, match="greedy"):
        sampling_distribution(logits, 0.0)


# -- teacher forcing ------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_teacher_forcing_the_greedy_output_matches_everywhere(architecture):
    model = model_for(architecture)
    session = run(model, eos_id=None, max_new_tokens=8)
    forced = teacher_force(model, SOURCE, session.output_ids)
    assert forced.accuracy == 1.0
    assert [p.predicted_id for p in forced.positions] == session.output_ids
    for position, record in zip(forced.positions, session.records, strict=True):
        assert position.reference_prob == pytest.approx(record.chosen_prob, abs=1e-5)
        assert position.top_ids == record.top_ids
    wrong = [(i + 1) % 30 for i in session.output_ids]
    forced_wrong = teacher_force(model, SOURCE, wrong)
    assert forced_wrong.accuracy == 0.0
    assert forced_wrong.mean_log_prob < forced.mean_log_prob


def test_teacher_forcing_refuses_bad_targets():
    model = model_for(max_len=8)
    with pytest.raises(ValueError, match="target is empty"):
        teacher_force(model, SOURCE, [])
    with pytest.raises(ValueError, match="max_len=8"):
        teacher_force(model, SOURCE, list(range(4, 14)))
    with pytest.raises(ValueError, match=r"0\.\.29"):
        teacher_force(model, SOURCE, [5, 99])


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_bad_sources_are_refused_with_a_clear_message(architecture):
    model = model_for(architecture, max_len=16)
    with pytest.raises(ValueError, match="empty"):
        DecodingSession(model, [])
    with pytest.raises(ValueError, match=r"17 tokens.*max_len=16"):
        DecodingSession(model, [5] * 17)
    with pytest.raises(ValueError, match=r"0\.\.29"):
        DecodingSession(model, [5, 30])
    with pytest.raises(ValueError, match="eos_id"):
        DecodingSession(model, [5], eos_id=40)


def test_an_encoder_only_model_cannot_generate():
    with pytest.raises(ValueError, match="no decoder"):
        DecodingSession(model_for("encoder-only"), SOURCE)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_new_tokens": 0}, f"max_new_tokens must be an integer in 1..{MAX_NEW_TOKENS}"),
        ({"max_new_tokens": MAX_NEW_TOKENS + 1}, "max_new_tokens"),
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
        ({"max_new_tokens": True}, "max_new_tokens"),
        ({"temperature": float("nan")}, "temperature must be finite"),
        ({"temperature": "hot"}, "temperature must be a number"),
        ({"top_p": 0.0}, r"top_p must be None or in \(0, 1\]"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"beam_width": 0}, "beam_width"),
        ({"strategy": "nucleus"}, "strategy='nucleus' is not one of greedy, sample, beam"),
        ({"top_k_shown": 0}, "top_k_shown"),
        ({"length_penalty": -1.0}, "length_penalty"),
        ({"seed": "x"}, "seed"),
    ],
)
def test_invalid_settings_say_what_to_change(changes, message):
    with pytest.raises(ValueError, match=message):
        DecodingSettings(**changes)


def test_rewind_arguments_are_checked():
    session = run(model_for(), eos_id=None, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"0\.\.3"):
        session.rewind_to(4)
    with pytest.raises(ValueError, match="n_steps"):
        session.rewind(-1)
    empty = DecodingSession(model_for(), SOURCE)
    empty.back()  # nothing to undo: no error
    assert empty.records == []


def test_top_p_stops_as_soon_as_the_mass_is_reached_and_top_k_keeps_k():
    half = torch.tensor([math.log(2.0), 0.0, 0.0])  # probabilities .5, .25, .25
    assert (sampling_distribution(half, 1.0, top_p=0.5) > 0).tolist() == [True, False, False]
    logits = torch.tensor([math.log(2.0), 0.0, -0.1, -1.0])  # ≈ .44, .22, .20, .08
    assert (sampling_distribution(logits, 1.0, top_p=0.5) > 0).tolist() == [
        True,
        True,
        False,
        False,
    ]
    assert (sampling_distribution(logits, 1.0, top_k=3) > 0).tolist() == [True, True, True, False]
    assert (sampling_distribution(logits, 1.0, top_p=1.0) > 0).all()


# -- [PAD] is never generated ---------------------------------------------------------------------


def _pad_loving_model(architecture: str) -> Transformer:
    """A model whose raw logits always rank [PAD] first, far ahead of everything else."""
    model = model_for(architecture)
    with torch.no_grad():
        model.generator.proj.bias[PAD_ID] = 100.0
    return model


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize(
    "strategy",
    [
        {"strategy": "greedy"},
        {"strategy": "sample", "temperature": 1.0},
        {"strategy": "sample", "temperature": 5.0, "top_k": 3, "top_p": 0.9},
        {"strategy": "beam", "beam_width": 4},
    ],
)
def test_padding_is_never_generated_nor_offered(architecture, strategy):
    model = _pad_loving_model(architecture)
    raw = model(
        **({"src": torch.tensor([SOURCE])} if architecture == "encoder-decoder" else {}),
        tgt=torch.tensor([[BOS_ID] if architecture == "encoder-decoder" else SOURCE]),
    )
    assert int(raw[0, -1].argmax()) == PAD_ID  # unmasked, the model would pick [PAD]
    session = run(model, eos_id=None, max_new_tokens=6, keep_logits=True, **strategy)
    assert len(session.records) == 6
    for record in session.records:
        assert record.chosen_id != PAD_ID and PAD_ID not in record.top_ids
        # The distribution shown is the softmax over the real tokens, re-computed here.
        logits = torch.from_numpy(record.logits).double()
        real = torch.ones_like(logits, dtype=torch.bool)
        real[PAD_ID] = False
        expected = torch.zeros_like(logits)
        expected[real] = logits[real].softmax(-1)
        assert record.top_probs == pytest.approx(expected[record.top_ids].tolist(), rel=1e-4)
        for beam in record.beams or []:
            assert PAD_ID not in beam.tokens[len(session.prefix) :]


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_greedy_batch_and_teacher_forcing_never_choose_padding(architecture):
    model = _pad_loving_model(architecture)
    rows = torch.tensor([SOURCE, SOURCE[::-1]])
    inputs = {"src": rows} if architecture == "encoder-decoder" else {"prompts": rows}
    for output in greedy_batch(model, **inputs, eos_id=None, max_new_tokens=5):
        assert len(output) == 5 and PAD_ID not in output
    forced = teacher_force(model, SOURCE, [5, 6, 7])
    for position in forced.positions:
        assert position.predicted_id != PAD_ID and PAD_ID not in position.top_ids
        assert sum(position.top_probs) <= 1.0 + 1e-6


# -- token ids are checked where they enter -------------------------------------------------------


@pytest.mark.parametrize("bad", [-3, 30])
def test_a_bad_token_id_is_named_with_the_valid_range(bad):
    model = model_for()
    with pytest.raises(ValueError, match=rf"token id {bad} \(row 0, position 1\).*0\.\.29"):
        model(torch.tensor([[4, bad, 5]]), torch.tensor([[BOS_ID]]))
    with pytest.raises(ValueError, match=rf"token id {bad} \(row 1, position 0\)"):
        model.decode(torch.tensor([[4], [bad]]), model.encode(torch.tensor([[4], [5]])))
    with pytest.raises(ValueError, match=rf"source ids must lie in 0\.\.29; got {bad}"):
        DecodingSession(model, [4, bad])


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("use_cache", [True, False])
def test_ids_are_checked_once_per_sequence_not_once_per_step(architecture, use_cache):
    import transformer.core.model as model_module

    model = model_for(architecture)
    with mock.patch.object(
        model_module, "_check_token_ids", wraps=model_module._check_token_ids
    ) as check:
        session = run(model, eos_id=None, max_new_tokens=12, use_cache=use_cache)
        assert len(session.records) == 12
        # The session validated its source in Python; the encoder checks it once more at most.
        assert check.call_count <= 1
        check.reset_mock()
        rows = torch.tensor([SOURCE, SOURCE])
        inputs = {"src": rows} if architecture == "encoder-decoder" else {"prompts": rows}
        greedy_batch(model, **inputs, eos_id=None, max_new_tokens=12)
        assert check.call_count == (2 if architecture == "encoder-decoder" else 1)


# -- the lens and the residual stream come from each step's own pass ------------------------------


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("strategy", ["greedy", "beam"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_each_steps_lens_and_stream_equal_a_full_pass_over_what_it_read(
    architecture, strategy, use_cache
):
    model = model_for(architecture, norm="pre")
    session = run(
        model, eos_id=None, max_new_tokens=6, strategy=strategy, beam_width=3,
        use_cache=use_cache, capture_lens=True, lens_top_k=4,
    )  # fmt: skip
    src = torch.tensor([SOURCE]) if architecture == "encoder-decoder" else None
    for step, record in enumerate(session.records):
        with torch.no_grad():
            trace = model(src, torch.tensor([record.tokens]), call=TRACE)
        layers = trace.decoder_layers
        # The lens by hand: every layer's output at the last position read (and the input, a
        # pre-LN stack), through the final LayerNorm and the generator, [PAD] excluded.
        hidden = torch.stack([layers[0].input[0, -1], *(la.output[0, -1] for la in layers)])
        norm = model.decoder.final_norm
        hidden = torch.nn.functional.layer_norm(
            hidden, hidden.shape[-1:], norm.weight, norm.bias, norm.eps
        )
        logits = hidden @ model.generator.proj.weight.T + model.generator.proj.bias
        logits[:, PAD_ID] = float("-inf")
        probs = logits.softmax(-1)
        lens = record.lens
        assert lens.layers == [0, 1, 2]
        torch.testing.assert_close(lens.top_probs, probs.topk(4).values, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(lens.chosen_prob, probs[:, record.chosen_id], atol=1e-5, rtol=0)
        # The last row is the step's own distribution.
        assert lens.top_ids[-1].tolist() == record.top_ids[:4]
        # The stream: ‖x‖ at the input and after every sub-layer, at every position read.
        stream = session.residual_stream(step)
        rows = [layers[0].input[0]]
        for layer in layers:
            rows += [layer.self_attention_output[0]]
            if layer.cross_attention_output is not None:
                rows += [layer.cross_attention_output[0]]
            rows += [layer.feed_forward_output[0]]
        expected = torch.stack([row.pow(2).sum(-1).sqrt() for row in rows])
        assert stream.stream.shape == (len(rows), len(record.tokens))
        torch.testing.assert_close(stream.stream, expected, atol=1e-4, rtol=1e-4)
