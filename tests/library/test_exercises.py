"""The exercise bank: every exercise's answer, computed by the model when asked, equals the
answer of an independent computation written out here (a direct re-implementation of the
bundled post-LN stacks from their weights, the sinusoidal table from its formula, the
``tokenizers`` library's own pieces); a model whose weights changed answers otherwise."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import tokenizers
import torch

from transformer.lab import exercises as ex
from transformer.lab.exercises import BANK, Exercise, ask
from transformer.lab.mistakes import SCORES_OVER_D_MODEL, SCORES_TIMES_D_HEAD, SINUSOID_SWAPPED
from transformer.text.real_tokenizers import load_real_tokenizer
from transformer.training.bundled import BUNDLED_DIR, load_bundled

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundled():
    return load_bundled()


def models_of(bundled):
    def models(name):
        if name in bundled.models:
            return bundled.models[name].model, bundled.models[name].tokenizer
        return None, load_real_tokenizer(name)

    return models


# -- the reference, written out ------------------------------------------------------------


def table(length: int, d: int, base: float = 10000.0, swapped: bool = False) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(...); sin and cos exchanged
    when ``swapped`` (seed 004's mistake)."""
    pe = torch.zeros(length, d, dtype=torch.float64)
    for pos in range(length):
        for i in range(0, d, 2):
            angle = pos / base ** (i / d)
            first, second = math.sin(angle), math.cos(angle)
            pe[pos, i], pe[pos, i + 1] = (second, first) if swapped else (first, second)
    return pe.float()


def layer_norm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def reference(
    model,
    ids: list[int],
    stack: str,
    *,
    causal: bool,
    positions: str = "paper",  # "paper", "none", "swapped"
    scale: str = "paper",  # "paper", "over_d_model", "times_d_head"
):
    """``(hidden after each layer (T, d), attention weights per layer (H, T, T), logits of
    the last hidden (T, V) or None)`` of a post-LN stack, from the state dict alone."""
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    cfg = model.config
    d, heads = cfg.d_model, cfg.n_heads
    dh = d // heads
    embed = sd[
        "src_embedding.lookup.weight" if stack == "encoder" else "tgt_embedding.lookup.weight"
    ]
    x = embed[torch.tensor(ids)] * math.sqrt(d)
    if positions == "paper":
        x = x + table(len(ids), d)
    elif positions == "swapped":
        x = x + table(len(ids), d, base=1000.0, swapped=True)
    factor = {
        "paper": 1 / math.sqrt(dh),
        "over_d_model": 1 / math.sqrt(d),
        "times_d_head": math.sqrt(dh),
    }[scale]
    n_layers = cfg.n_encoder_layers if stack == "encoder" else cfg.n_decoder_layers
    attention_norm = "attention_residual" if stack == "encoder" else "self_attention_residual"
    t = len(ids)
    allowed = torch.tril(torch.ones(t, t, dtype=torch.bool)) if causal else torch.ones(t, t).bool()
    hiddens, maps = [], []
    for n in range(n_layers):
        p = f"{stack}.layers.{n}."

        def lin(name, v, p=p):
            return v @ sd[p + name + ".weight"].T + sd[p + name + ".bias"]

        q = lin("self_attention.w_q", x).view(t, heads, dh).transpose(0, 1)
        k = lin("self_attention.w_k", x).view(t, heads, dh).transpose(0, 1)
        v = lin("self_attention.w_v", x).view(t, heads, dh).transpose(0, 1)
        scores = (q @ k.transpose(1, 2)) * factor
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)  # (H, T, T)
        maps.append(weights)
        merged = (weights @ v).transpose(0, 1).reshape(t, d)
        x = layer_norm(
            x + lin("self_attention.w_o", merged),
            sd[p + attention_norm + ".norm.weight"],
            sd[p + attention_norm + ".norm.bias"],
        )
        ff = lin("feed_forward.linear2", torch.relu(lin("feed_forward.linear1", x)))
        x = layer_norm(
            x + ff,
            sd[p + "feed_forward_residual.norm.weight"],
            sd[p + "feed_forward_residual.norm.bias"],
        )
        hiddens.append(x)
    return hiddens, maps


def logits_of(model, hidden: torch.Tensor) -> torch.Tensor:
    """The generator's logits for ``hidden`` (..., d), [PAD] given none."""
    sd = model.state_dict()
    logits = hidden @ sd["generator.proj.weight"].float().T + sd["generator.proj.bias"].float()
    logits[..., model.config.pad_id] = float("-inf")
    return logits


def library_tokenizer(name: str) -> tokenizers.Tokenizer:
    if name == "bert-base-uncased":
        path = ROOT / "assets/tokenizers/bert-base-uncased/tokenizer.json"
    else:
        path = BUNDLED_DIR / name / "tokenizer.json"
    found = tokenizers.Tokenizer.from_file(str(path))
    found.no_padding()  # BERT's file pads every text to its longest
    found.no_truncation()
    return found


def ids_of(name: str, text: str, stack: str) -> tuple[list[int], list[str]]:
    """The ids a stack reads for ``text`` and their pieces, by the tokenizers library: a
    decoder-only model's prompt begins with [BOS]."""
    lib = library_tokenizer(name)
    encoding = lib.encode(text, add_special_tokens=False)
    ids, pieces = list(encoding.ids), list(encoding.tokens)
    if stack == "decoder":
        ids, pieces = [lib.token_to_id("[BOS]"), *ids], ["[BOS]", *pieces]
    return ids, pieces


def label(pieces: list[str], i: int) -> str:
    piece = pieces[i]
    return f"{i}:{piece[2:] if piece.startswith('##') else piece.replace('▁', '_')}"


def expected(item: Exercise, bundled) -> str:
    """The answer to ``item``, computed here without the code under test."""
    p = item.params
    if item.kind == "subwords":
        pieces = library_tokenizer(item.model).encode(item.text, add_special_tokens=False).tokens
        shown = [(s[2:] if s.startswith("##") else s.replace("▁", "")) for s in pieces]
        return " | ".join(s for s in shown if s)
    model = bundled.models[item.model].model
    if item.kind == "positions":
        pairs = p["pairs"]
        pe = table(max(max(pair) for pair in pairs) + 1, model.config.d_model)
        sims = [torch.cosine_similarity(pe[a], pe[b], dim=0) for a, b in pairs]
        a, b = pairs[int(torch.stack(sims).argmax())]
        return f"{a} and {b}"
    decoder_only = model.config.architecture == "decoder-only"
    stack = "decoder" if decoder_only else "encoder"
    ids, pieces = ids_of(item.model, item.text, stack)
    tokens = library_tokenizer(item.model)

    def next_token(hiddens) -> tuple[str, float]:
        probs = logits_of(model, hiddens[-1][-1]).softmax(-1)
        best = int(probs.argmax())
        return tokens.id_to_token(best).replace("▁", "_"), float(probs[best])

    if item.kind == "attention":
        _, maps = reference(model, ids, stack, causal=decoder_only)
        row = maps[p["layer"]][p["head"], p["query"]]
        return label(pieces, int(row.argmax()))
    if item.kind == "next_token":
        return next_token(reference(model, ids, stack, causal=True)[0])[0]
    if item.kind == "probability":
        prob = next_token(reference(model, ids, stack, causal=True)[0])[1]
        return [name for low, name in ex.BANDS if prob >= low][-1]
    if item.kind == "lens":
        hiddens, _ = reference(model, ids, stack, causal=True)
        final = int(logits_of(model, hiddens[-1][-1]).argmax())
        firsts = [int(logits_of(model, h[-1]).argmax()) == final for h in hiddens]
        first = min(i for i in range(len(firsts)) if all(firsts[i:]))
        return f"layer {first + 1}"
    if item.kind == "mistake":
        # The figure shown must be the weights of the pass with the answer's mistake, and no
        # other candidate's: the answer is that one.
        how = {
            SCORES_TIMES_D_HEAD: {"scale": "times_d_head"},
            SCORES_OVER_D_MODEL: {"scale": "over_d_model"},
            SINUSOID_SWAPPED: {"positions": "swapped"},
        }
        shown = reference(model, ids, stack, causal=decoder_only, **how[p["shown"]])[1]
        target = shown[p["layer"]][p["head"]]
        same = []
        for name in p["candidates"]:
            maps = reference(model, ids, stack, causal=decoder_only, **how[name])[1]
            if torch.allclose(maps[p["layer"]][p["head"]], target, atol=1e-5):
                same.append(name)
        assert len(same) == 1
        return same[0].label
    if item.kind == "what_if":
        changes = {"no_positions": {"positions": "none"}, "no_causal_mask": {}}[p["switch"]]
        causal = decoder_only and p["switch"] != "no_causal_mask"
        hiddens, maps = reference(model, ids, stack, causal=causal, **changes)
        if p["ask"] == "next":
            return next_token(hiddens)[0]
        return label(pieces, int(maps[p["layer"]][p["head"], p["query"]].argmax()))
    raise AssertionError(item.kind)


# -- the tests ---------------------------------------------------------------------------


def test_the_bank_has_every_kind_and_enough_exercises():
    assert len(BANK) >= 25
    assert {e.kind for e in BANK} == set(ex.KINDS)
    assert len({e.id for e in BANK}) == len(BANK)


@pytest.mark.parametrize("item", BANK, ids=[e.id for e in BANK])
def test_every_exercise_answers_as_the_reference(item, bundled):
    asked = ask(item, *models_of(bundled)(item.model))
    assert asked.answer in asked.choices
    assert len(set(asked.choices)) == len(asked.choices) >= 2
    assert asked.answer == expected(item, bundled)
    assert asked.explanation and "{" not in asked.explanation
    if item.kind in ("attention", "next_token", "positions"):
        # the figure shows the answer: its own largest bar
        assert asked.labels[max(range(len(asked.values)), key=asked.values.__getitem__)] == (
            asked.answer
        )
    if item.kind == "mistake":
        assert asked.heatmap is not None


def swap_heads(model, stack: str, layer: int, a: int, b: int):
    """A copy of ``model`` whose heads ``a`` and ``b`` of one layer trade their query, key and
    value projections."""
    changed = copy.deepcopy(model)
    attention = getattr(changed, stack).layers[layer].self_attention
    dh = changed.config.d_model // changed.config.n_heads
    rows_a, rows_b = slice(a * dh, (a + 1) * dh), slice(b * dh, (b + 1) * dh)
    with torch.no_grad():
        for projection in (attention.w_q, attention.w_k, attention.w_v):
            for tensor in (projection.weight, projection.bias):
                first = tensor[rows_a].clone()
                tensor[rows_a] = tensor[rows_b]
                tensor[rows_b] = first
    return changed


def test_a_head_swapped_changes_the_attention_answer(bundled):
    item = ex.exercise("attention-translate-cat")
    model, tokenizer = models_of(bundled)(item.model)
    head = item.params["head"]
    other = Exercise(
        "other", "attention", item.model, item.text, "attention", {**item.params, "head": 2}
    )
    before, elsewhere = ask(item, model, tokenizer).answer, ask(other, model, tokenizer).answer
    assert before != elsewhere  # head 3 looks elsewhere: the swap must show
    changed = swap_heads(model, "encoder", item.params["layer"], head, 2)
    assert ask(item, changed, tokenizer).answer == elsewhere
    assert ask(item, model, tokenizer).answer == before  # the shared model is untouched


def test_a_changed_bias_changes_the_next_token(bundled):
    item = ex.exercise("next-the-ca")
    model, tokenizer = models_of(bundled)(item.model)
    asked = ask(item, model, tokenizer)
    runner_up = asked.labels[1]
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.generator.proj.bias[tokenizer.token_to_id(runner_up.replace("_", "▁"))] += 20.0
    again = ask(item, changed, tokenizer)
    assert again.answer == runner_up != asked.answer
    assert again.answer == expected_with(item, changed)


def expected_with(item: Exercise, model) -> str:
    """:func:`expected` of ``item`` on ``model`` instead of the bundled one."""
    one = type("One", (), {"models": {item.model: type("C", (), {"model": model})}})
    return expected(item, one)


def test_an_unknown_exercise_is_a_clear_error():
    with pytest.raises(ex.ExerciseError, match="there is no exercise"):
        ex.exercise("nope")


def test_asked_round_trips_through_plain_values(bundled):
    asked = ask(ex.exercise("positions-translate"), *models_of(bundled)("translate"))
    assert ex.Asked.from_dict(asked.to_dict()) == asked


def test_the_figures_show_the_answer_and_the_class(bundled):
    from transformer.figures.exercises import class_figure, exercise_figure

    asked = ask(ex.exercise("next-the-ca"), *models_of(bundled)("continue"))
    bars = exercise_figure(asked).data[0]
    values = list(bars.y)
    assert bars.x[values.index(max(values))] == asked.answer
    assert len(exercise_figure(asked).to_json()) < 20_000  # small enough for a phone
    counts = {asked.choices[0]: 3, asked.answer: 1}
    chart = class_figure(asked.choices, counts, asked.answer, mine=asked.choices[0]).data[0]
    by_label = dict(zip(chart.y, chart.x, strict=True))
    assert by_label[f"{asked.answer} ✓ the model"] == 1
    assert sum(chart.x) == 4 and any(label.endswith("← you") for label in chart.y)
    mistake = ask(ex.exercise("mistake-continue-flat"), *models_of(bundled)("continue"))
    heat = exercise_figure(mistake).data[0]
    assert heat.type == "heatmap" and len(heat.z) == len(mistake.heatmap_labels)
