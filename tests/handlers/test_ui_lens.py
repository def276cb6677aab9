"""The Generate tab's logit lens and residual-stream views, through its handlers: the lens is read
at the position that chose the newest token, its top row is the step's own distribution, and it
follows Step, Back, Reset and beam search; checked against a direct re-implementation (and, for
GPT-2, ``transformers``' hidden states through its own final norm and head)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import shown

from transformer.core.run import TRACE
from ui.serving.state import GenerationState, ModelRegistry, SessionModels
from ui.tabs import generate

# source, model, strategy, temperature, top-k, top-p, beam, max tokens, seed
GREEDY = ["the small cat sees a red ball", "translate", "greedy", 1.0, 0, 1.0, 3, 40, 0]
CASES = [
    ("the small cat sees a red ball", "translate", "greedy"),
    ("k d a m t q b", "reverse", "greedy"),
    ("the teacher sees", "continue", "sample"),
    ("a big dog never eats the old cake", "translate", "beam"),
]


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


@pytest.fixture(scope="module")
def pretrained(hf_models: dict[str, Path]) -> ModelRegistry:
    folders = [str(hf_models["gpt2"]), str(hf_models["marian"])]
    return ModelRegistry(torch.device("cpu"), extra_models=folders)


def _args(source: str, name: str, strategy: str = "greedy") -> list:
    # temperature 1.3 spreads the sampled distribution, so chosen tokens leave the top 5
    return [source, name, strategy, 1.3, 0, 1.0, 3, 40, 0]


def _steps(registry, args: list, n: int, session=None, state=None):
    session = session or SessionModels()
    for _ in range(n):
        drawn = generate.step(registry, *args, 1, 1, False, session, state)
        state = drawn[-1]
    return drawn, session, state


def _cells(lens_figure) -> tuple[list[list[int]], list[list[float]]]:
    """(ids, probabilities) of the lens heatmap's rows, bottom (first layer) to top."""
    heatmap = lens_figure.data[0]
    ids = [[int(cell.rsplit("#", 1)[1]) for cell in row] for row in heatmap.customdata]
    return ids, [list(row) for row in heatmap.z]


def _by_hand(checkpoint, decoding, tokens: list[int]) -> torch.Tensor:
    """``(n_layers, V)``: every decoder layer's output at the last of ``tokens``, through the
    final norm (pre-LN) and the generator, written out with torch.nn.functional; the padding id
    excluded as generation excludes it."""
    model, config = checkpoint.model, checkpoint.config
    with torch.no_grad():
        src = torch.tensor([decoding.source]) if config.has_encoder else None
        trace = model(src, torch.tensor([tokens]), call=TRACE)
    hidden = torch.stack([layer.output[0, -1] for layer in trace.decoder_layers])
    norm = model.decoder.final_norm
    if norm is not None:
        hidden = F.layer_norm(hidden, hidden.shape[-1:], norm.weight, norm.bias, norm.eps)
    logits = F.linear(hidden, model.generator.proj.weight, model.generator.proj.bias)
    if not (config.eos_id is not None and config.pad_id == config.eos_id):
        logits[:, config.pad_id] = float("-inf")
    return logits.softmax(dim=-1)


def _check_step(registry, name: str, drawn) -> None:
    *_rest, lens, norms, state = drawn
    decoding = state.decoding
    record = decoding.records[-1]
    checkpoint = registry.checkpoint(name, None)
    tokenizer = checkpoint.tokenizer
    ids, probs = _cells(lens)
    # The top row is the step's own distribution (its top 5, with [PAD] excluded).
    assert ids[-1] == record.top_ids[:5], name
    assert probs[-1] == pytest.approx(record.top_probs[:5], abs=1e-5), name
    bars = lens.data[1]
    assert bars.x[-1] == pytest.approx(record.chosen_prob, abs=1e-5)
    assert bars.y[-1].endswith(f"· chosen #{record.chosen_rank}")
    # Every layer's row is read at the position that chose the token: the last one read.
    expected = _by_hand(checkpoint, decoding, record.tokens)
    layer_rows = ids[-len(expected) :], probs[-len(expected) :]
    for row, (row_ids, row_probs) in enumerate(zip(*layer_rows, strict=True)):
        top = expected[row].topk(5)
        assert row_ids == top.indices.tolist(), f"{name} layer {row + 1}"
        assert row_probs == pytest.approx(top.values.tolist(), abs=1e-5)
        rank = int((expected[row] > expected[row, record.chosen_id]).sum()) + 1
        assert lens.data[0].y[len(ids) - len(expected) + row].endswith(f"chosen #{rank}")
    last = f"{len(record.tokens) - 1}:{tokenizer.id_to_token(record.tokens[-1])}"
    assert f"layer at {last} would predict" in shown([lens.layout.title.text])[0]
    # The residual stream has one column per position read, labelled as the attention rows.
    assert shown(norms.data[0].x) == [
        f"{i}:{tokenizer.id_to_token(t)}" for i, t in enumerate(record.tokens)
    ]


def test_each_steps_lens_is_read_where_the_token_was_chosen_and_ends_in_its_distribution(
    registry,
):
    for source, name, strategy in CASES:
        session, state = SessionModels(), None
        for _ in range(4):
            drawn, session, state = _steps(
                registry, _args(source, name, strategy), 1, session, state
            )
            _check_step(registry, name, drawn)


def test_a_sampled_token_outside_the_lens_top_five_keeps_its_rank(registry):
    args = _args("the teacher sees", "continue", "sample")
    session, state = SessionModels(), None
    for _ in range(30):
        drawn, session, state = _steps(registry, args, 1, session, state)
        record = state.decoding.records[-1]
        if record.chosen_rank > 5 or state.decoding.done:
            break
    assert record.chosen_rank > 5, "no sampled token left the top 5 in 30 steps"
    lens = drawn[4]
    ids, _probs = _cells(lens)
    assert record.chosen_id not in ids[-1]
    assert lens.data[0].y[-1] == f"layer 3 · chosen #{record.chosen_rank}"
    assert not lens.layout.shapes or all(s.y0 < len(ids) - 1.5 for s in lens.layout.shapes)


def test_back_and_reset_redraw_the_lens_and_the_stream(registry):
    second, session, state = _steps(registry, GREEDY, 2)
    _third, session, state = _steps(registry, GREEDY, 1, session, state)
    back = generate.back(registry, *GREEDY, 1, 1, False, session, state)
    assert back[4].to_json() == second[4].to_json()
    assert back[5].to_json() == second[5].to_json()
    reset = generate.reset(registry, *GREEDY, 1, 1, False, session, back[-1])
    for figure in reset[4:6]:
        assert not figure.data and "press Step" in figure.layout.annotations[0].text


def test_a_redraw_reuses_the_steps_lens_without_running_the_model(registry, monkeypatch):
    drawn, session, state = _steps(registry, GREEDY, 2)
    model = registry.checkpoint("translate", None).model

    def boom(*args, **kwargs):
        raise AssertionError("the redraw ran the model")

    monkeypatch.setattr(model, "forward", boom)
    large = generate.redraw(registry, *GREEDY, 1, 1, True, session, state)
    assert _cells(large[4]) == _cells(drawn[4])
    assert large[4].layout.font.size > drawn[4].layout.font.size


def test_the_residual_norms_are_the_lengths_of_the_traces_vectors(registry):
    drawn, _session, state = _steps(registry, GREEDY, 3)
    decoding = state.decoding
    tokens = decoding.records[-1].tokens
    model = registry.checkpoint("translate", None).model
    with torch.no_grad():
        trace = model(torch.tensor([decoding.source]), torch.tensor([tokens]), call=TRACE)
    stream, added = drawn[5].data
    rows = [trace.decoder_layers[0].input[0]]
    updates = []
    for layer in trace.decoder_layers:
        rows += [layer.self_attention_output[0], layer.cross_attention_output[0]]
        rows.append(layer.feed_forward_output[0])
        updates += [layer.self_attention_update[0], layer.cross_attention_update[0]]
        updates.append(layer.feed_forward_update[0])
    expected = torch.stack([x.pow(2).sum(-1).sqrt() for x in rows])
    torch.testing.assert_close(torch.tensor(stream.z), expected, atol=1e-4, rtol=1e-5)
    expected_added = torch.stack([u.pow(2).sum(-1).sqrt() for u in updates])
    torch.testing.assert_close(torch.tensor(added.z[1:]), expected_added, atol=1e-4, rtol=1e-5)
    assert list(stream.y[:4]) == ["embeddings", "L1 attn", "L1 cross", "L1 FFN"]


def test_gpt2_lens_equals_transformers_hidden_states_through_ln_f_and_lm_head(
    pretrained, hf_models
):
    transformers = pytest.importorskip("transformers")
    name = str(hf_models["gpt2"])
    drawn, _session, state = _steps(pretrained, _args("w5 w17 w42", name), 3)
    _check_step(pretrained, name, drawn)
    tokens = state.decoding.records[-1].tokens
    theirs = transformers.GPT2LMHeadModel.from_pretrained(hf_models["gpt2"]).eval()
    with torch.no_grad():
        hidden = theirs(torch.tensor([tokens]), output_hidden_states=True).hidden_states
        n = len(hidden) - 1
        # [0] the embeddings, [1..n-1] the blocks' outputs, [n] already through ln_f.
        rows = [theirs.lm_head(theirs.transformer.ln_f(h[0, -1])) for h in hidden[:n]]
        rows.append(theirs.lm_head(hidden[n][0, -1]))
        expected = torch.stack(rows).softmax(-1)
    ids, probs = _cells(drawn[4])
    assert drawn[4].data[0].y[0].startswith("embeddings")  # pre-LN: the input row is shown
    assert len(ids) == n + 1
    top = expected.topk(5, dim=-1)
    assert ids == top.indices.tolist()
    for row, values in zip(probs, top.values.tolist(), strict=True):
        assert row == pytest.approx(values, abs=1e-5)


def test_marian_lens_excludes_padding_as_its_steps_do(pretrained, hf_models):
    name = str(hf_models["marian"])
    drawn, _session, _state = _steps(pretrained, _args("w7 w23 w61 w4", name), 3)
    _check_step(pretrained, name, drawn)
    pad = pretrained.checkpoint(name, None).config.pad_id
    ids, _probs = _cells(drawn[4])
    assert all(pad not in row for row in ids)
    assert not drawn[4].data[0].y[0].startswith("embeddings")  # post-LN: no input row
    assert drawn[2].data  # cross-attention drawn beside it


def test_a_model_that_cannot_generate_shows_lens_placeholders(hf_models):
    registry = ModelRegistry(torch.device("cpu"), extra_models=[str(hf_models["bert"])])
    drawn = generate.first_step(
        registry, *_args("w5 w6", str(hf_models["bert"])), 1, 1, False, SessionModels(),
        GenerationState(),
    )  # fmt: skip
    assert not drawn[4].data and not drawn[5].data
