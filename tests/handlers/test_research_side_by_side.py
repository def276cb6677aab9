"""Two models side by side: the token alignment against a direct re-implementation (tokens
joined when they share a character, groups as the connected pieces), the losses against
``F.cross_entropy`` on the model's own logits, and the handler's figures."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from transformer.lab import side_by_side as pair
from transformer.text.real_tokenizers import load_gpt2
from ui.serving.errors import InputError
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs.research import handlers

TEXTS = [
    "The Colosseum is in the city of Rome",
    "café ünïcode 😀 naïve façade!",
    "Tokenizers cut   spaces\tand tabs differently",
]


def reference_groups(
    text_length: int, spans_a: list[tuple[int, int]], spans_b: list[tuple[int, int]]
) -> list[tuple[list[int], list[int]]]:
    """Written out: every character names the token of each side that covers it; two tokens
    are in one group when they cover a common character (union-find over characters); a
    zero-width token sits with the token before it, or, at the start, in a group of the
    leading inserted tokens."""
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def union(x, y):
        parent[find(x)] = find(y)

    owner: dict[str, list[int | None]] = {}
    for side, spans in (("a", spans_a), ("b", spans_b)):
        cover: list[int | None] = [None] * text_length
        for index, (start, end) in enumerate(spans):
            find((side, index))
            for c in range(start, end):
                cover[c] = index
        owner[side] = cover
    for c in range(text_length):
        a, b = owner["a"][c], owner["b"][c]
        if a is not None and b is not None:
            union(("a", a), ("b", b))
    for side, spans in (("a", spans_a), ("b", spans_b)):
        # a token's own characters are all its own; zero-width tokens after the start join the
        # token before them
        seen_text = False
        for index, (start, end) in enumerate(spans):
            if end > start:
                seen_text = True
            elif seen_text:
                union((side, index), (side, index - 1))
    lead = [
        (s, i)
        for s, spans in (("a", spans_a), ("b", spans_b))
        for i, (_, e) in enumerate(spans)
        if e == 0
    ]
    for x in lead[1:]:
        union(x, lead[0])
    components: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
    for side, spans in (("a", spans_a), ("b", spans_b)):
        for index in range(len(spans)):
            group = components.setdefault(find((side, index)), ([], []))
            group[0 if side == "a" else 1].append(index)
    return list(components.values())


@pytest.fixture(scope="module")
def registry(hf_models) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), [str(hf_models["gpt2"])])


@pytest.mark.parametrize("text", TEXTS)
def test_alignment_equals_the_characters_shared(registry, text):
    # The bundled model's small vocabulary (with its [BOS]) against GPT-2's byte-level BPE,
    # which splits a character over several tokens.
    a = registry.checkpoint("continue", None).tokenizer
    b = load_gpt2()
    ids_a = a.encode_ids(text, add_bos=True)
    ids_b = b.encode_ids(text)
    spans_a = pair.token_spans(a, text, ids_a)
    spans_b = pair.token_spans(b, text, ids_b)
    # The spans tile the text: each token starts where the one before ended.
    for spans in (spans_a, spans_b):
        ends = [e for _, e in spans]
        assert ends == sorted(ends) and ends[-1] <= len(text)
    got = pair.align(spans_a, spans_b)
    assert sorted(got) == sorted(reference_groups(len(text), spans_a, spans_b))
    # Every token in exactly one group, in order.
    assert [i for g, _ in got for i in g] == list(range(len(ids_a)))
    assert [i for _, g in got for i in g] == list(range(len(ids_b)))


def test_a_wrong_alignment_fails_the_reference():
    # Two cuts of "abcd": a = ab|cd, b = a|bcd: one group only, since no inner end is shared.
    spans_a, spans_b = [(0, 2), (2, 4)], [(0, 1), (1, 4)]
    assert pair.align(spans_a, spans_b) == [([0, 1], [0, 1])]
    assert reference_groups(4, spans_a, spans_b) == [([0, 1], [0, 1])]
    assert reference_groups(4, spans_a, spans_b) != [([0], [0]), ([1], [1])]


def test_losses_and_attention_are_the_models_own(registry):
    checkpoint = registry.checkpoint("continue", None)
    text = TEXTS[0]
    reading = pair.read(checkpoint.model, checkpoint.tokenizer, text, 1, 2)
    ids = torch.tensor([checkpoint.tokenizer.encode_ids(text, add_bos=True)])
    with torch.inference_mode():
        logits = checkpoint.model.decode(ids).logits[0]
    expected = F.cross_entropy(logits[:-1], ids[0, 1:], reduction="none")
    torch.testing.assert_close(reading.losses[1:], expected, rtol=1e-5, atol=1e-5)
    assert torch.isnan(reading.losses[0])
    rows = reading.attention.sum(-1)
    torch.testing.assert_close(rows, torch.ones_like(rows), rtol=1e-5, atol=1e-5)


def test_grouped_values_sum_tokens_and_keep_rows_whole():
    attention = torch.softmax(torch.randn(5, 5), dim=-1).tril()
    attention = attention / attention.sum(-1, keepdim=True)
    groups = [[0], [1, 2], [], [3, 4]]
    grouped = pair.grouped_attention(attention, groups)
    assert torch.isnan(grouped[2]).all() and torch.isnan(grouped[:, 2]).all()
    filled = [0, 1, 3]
    torch.testing.assert_close(grouped[filled][:, filled].sum(-1), torch.ones(3))
    assert float(grouped[1, 1]) == pytest.approx(
        float((attention[1, 1] + attention[1, 2] + attention[2, 1] + attention[2, 2]) / 2)
    )
    losses = torch.tensor([float("nan"), 1.0, 2.0, 3.0, 4.0])
    assert pair.grouped_loss(losses, groups)[1:].tolist()[0] == 3.0
    assert pair.grouped_loss(losses, groups)[3] == 7.0


def test_handler_draws_both_models_lined_up(registry, hf_models):
    gpt2 = registry.menu_name(str(hf_models["gpt2"]))
    attention, losses, tops, summary = inspect.unwrap(handlers.research_side_by_side)(
        registry,
        "continue",
        gpt2,
        "the cat sat the cat",
        1,
        1,
        2,
        3,
        False,
        SessionModels(),
    )
    n = len(attention.data[0].x)
    assert np.asarray(attention.data[0].z).shape == (n, n)
    assert len(losses.data) == 2 and len(tops.data) == 2
    assert "groups" in summary
    with pytest.raises(InputError, match="layers 1 to"):
        inspect.unwrap(handlers.research_side_by_side)(
            registry, "continue", "continue", TEXTS[0], 9, 1, 1, 1, False, SessionModels()
        )
