"""A generation session keeps what its views need to go back and redraw (ids, the chosen rows,
small records), and nothing larger: the memory a session holds stays bounded by its own
records, whatever the vocabulary, and going back still redraws what a fresh pass computes."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from conftest import TINY_CONFIG

from transformer.core.model import Transformer
from transformer.generation import DecodingSession, DecodingSettings

VOCAB = 20_000  # large, so that holding one (L, V) distribution a step would show
STEPS = 12
PROMPT = [5, 9, 12, 7, 20, 4]


def model(architecture: str = "decoder-only") -> Transformer:
    torch.manual_seed(0)
    # The shared tiny shape (4 heads, 2 + 2 layers) over a large vocabulary.
    config = TINY_CONFIG.replace(
        src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, architecture=architecture
    )
    return Transformer(config).eval()


def settings(strategy: str = "greedy", **changes) -> DecodingSettings:
    return DecodingSettings(
        strategy=strategy,
        max_new_tokens=STEPS,
        capture_attention=True,
        capture_lens=True,
        lens_top_k=5,
        top_k_shown=5,
        seed=3,
        **changes,
    )


def held(value, seen: set[int]) -> tuple[int, int]:
    """(bytes of the storages every tensor and array reachable from ``value`` keeps alive,
    bytes of their own elements), each storage counted once: written here, independently of
    the library's helpers."""
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        if storage.data_ptr() in seen:
            return 0, 0
        seen.add(storage.data_ptr())
        return storage.nbytes(), value.numel() * value.element_size()
    if isinstance(value, np.ndarray):
        base = value
        while isinstance(base.base, np.ndarray):
            base = base.base
        if id(base) in seen:
            return 0, 0
        seen.add(id(base))
        return base.nbytes, value.nbytes
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [held(getattr(value, f.name), seen) for f in dataclasses.fields(value)]
    elif isinstance(value, list | tuple):
        parts = [held(item, seen) for item in value]
    elif isinstance(value, dict):
        parts = [held(item, seen) for item in value.values()]
    else:
        return 0, 0
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_a_session_holds_only_its_records_own_bytes(strategy):
    """Before, a step's logit lens kept its chosen token's probability as a view of the whole
    (L, V) distribution: SmolLM2's 40 steps held 243 MB. Now what the records keep alive is
    what they hold, and each step costs far less than one vocabulary-sized row."""
    extra = {"beam_width": 3} if strategy == "beam" else {}
    session = DecodingSession(model(), PROMPT, settings(strategy, **extra), eos_id=None)
    sizes = []
    for _ in session.run():
        sizes.append(held(session.records, set()))
    alive, own = sizes[-1]
    assert len(session.records) == STEPS
    assert alive == own, (alive, own)  # no tensor keeps a larger storage alive
    growth = [b[0] - a[0] for a, b in itertools.pairwise(sizes)]
    assert max(growth) < VOCAB * 4, growth  # less than one float32 row of the vocabulary
    history, _ = held(session._history, set())
    assert history < STEPS * VOCAB  # the states to go back to: ids, scores, sampler states


def _view_data(record) -> dict:
    """What the Generate tab's views draw from one step's record."""
    lens = record.lens
    return {
        "tokens": record.tokens,
        "chosen": record.chosen_id,
        "top": (record.top_ids, record.top_probs),
        "attention": record.self_attention,
        "lens": (lens.top_ids, lens.top_probs, lens.chosen_rank, lens.chosen_prob),
        "residual": [(r.stream, r.added) for r in record.residual],
    }


def _same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    elif isinstance(a, np.ndarray):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6) if isinstance(a, float) else a == b


@pytest.mark.parametrize("architecture", ["decoder-only", "encoder-decoder"])
def test_going_back_redraws_what_a_fresh_session_computes(architecture):
    net = model(architecture)
    walked = DecodingSession(net, PROMPT, settings("sample"), eos_id=None)
    for _ in walked.run(8):
        pass
    walked.back()
    walked.back()
    walked.back()
    walked.step()
    fresh = DecodingSession(net, PROMPT, settings("sample"), eos_id=None)
    for _ in fresh.run(6):
        pass
    assert len(walked.records) == len(fresh.records) == 6
    for mine, theirs in zip(walked.records, fresh.records, strict=True):
        _same(_view_data(mine), _view_data(theirs))
    # and the lens at the last layer is the model's own distribution, computed apart from it
    for record in walked.records:
        assert float(record.lens.chosen_prob[-1]) == pytest.approx(record.chosen_prob, rel=1e-4)
    torch.testing.assert_close(walked.residual_stream(-1).stream, fresh.residual_stream(-1).stream)
