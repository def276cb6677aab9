"""Inside a layer: every shown number is the model's own.

For each bundled model and tiny random BERT, GPT-2 and Marian models loaded through
``load_pretrained``, the test recomputes each step from the *shown* pieces and the model's
parameters with plain torch (``F.linear``, ``F.layer_norm``, ``torch.softmax``, the activation
by name), and matches the captured trace of an independent forward pass: the attention scores
and weights, each sub-layer's update and output, the layer's output. It also reads every cited
code line back from its file.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_llama

from transformer import load_pretrained
from transformer.lab.inside import SECTIONS, inside_layer, walkthrough
from transformer.lab.inspection import analyse
from transformer.training.bundled import load_bundled

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-6
ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda u: F.gelu(u, approximate="tanh"),
    "silu": F.silu,
}
# What the cited line of each step must hold (by the step key's last part).
CODE = {
    "token": "embedding(",
    "position": "positions(",
    "token_type": "token_type_embedding(",
    "sum": "+",
    "input": "layer(",
    "norm_in": "norm(",
    "q": "w_q(",
    "k": "w_k(",
    "v": "w_v(",
    "dot": "@ keys.transpose",
    "scaled": "scale",
    "masked": "masked_fill",
    "exp": "softmax(",
    "weights": "softmax(",
    "head": "@ v",
    "concat": "transpose(1, 2)",
    "project": "w_o(",
    "residual": "x + ",
    "norm_out": "self.norm(x + self.dropout(update), run)",
    "hidden": "linear1(",
    "activation": "activation(",
    "output": "feed_forward_residual(",
}
CODE_BY_KEY = {"ff.project": "linear2(", "embedding.norm": "parts.norm(x, run)"}


def _close(shown: torch.Tensor, reference: torch.Tensor, what: str) -> None:
    reference = reference.detach().float().cpu()
    assert shown.shape == reference.shape, f"{what}: shape {shown.shape} ≠ {reference.shape}"
    finite = torch.isfinite(reference)
    assert torch.equal(torch.isfinite(shown), finite), f"{what}: −∞ in other places"
    if not finite.any():
        return
    difference = (shown[finite] - reference[finite]).abs().max().item()
    # float32 rounds a sum of d numbers differently in another order: 1e-6 of the values' scale.
    bound = TOLERANCE * max(1.0, reference[finite].abs().max().item())
    assert difference <= bound, f"{what}: max difference {difference:.2e} > {bound:.2e}"


def _linear(x: torch.Tensor, layer: torch.nn.Linear, rows: slice | None = None) -> torch.Tensor:
    weight, bias = layer.weight.detach().cpu(), layer.bias.detach().cpu()
    if rows is not None:
        weight, bias = weight[rows], bias[rows]
    return F.linear(x, weight, bias)


def _norm(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    return F.layer_norm(
        x, x.shape[-1:], norm.weight.detach().cpu(), norm.bias.detach().cpu(), norm.eps
    )


def _check_attention(walk, prefix, module, residual, x, keys_from, record, update, output):
    """Recompute one attention sub-layer from the shown pieces; returns the stream after it."""
    config, h, q = walk.config, walk.head, walk.query
    dh = config.d_head
    head = slice(h * dh, (h + 1) * dh)
    shown = {s.key.split(".", 1)[1]: s for s in walk.steps if s.key.startswith(prefix + ".")}
    pre = config.norm == "pre"
    assert ("norm_in" in shown) == pre and ("norm_out" in shown) == (not pre)
    query_in = _norm(x, residual.norm) if pre else x
    if pre:
        _close(shown["norm_in"].values, query_in, f"{prefix} pre-LN")
    if prefix == "self":
        keys_from = _norm(keys_from, residual.norm) if pre else keys_from
    _close(shown["q"].values, _linear(query_in, module.w_q, head), f"{prefix} q")
    _close(shown["k"].values, _linear(keys_from, module.w_k, head), f"{prefix} K")
    _close(shown["v"].values, _linear(keys_from, module.w_v, head), f"{prefix} V")
    dot = shown["k"].values @ shown["q"].values
    _close(shown["dot"].values, dot, f"{prefix} q·k")
    _close(shown["scaled"].values, dot / math.sqrt(dh), f"{prefix} ÷√d_k")
    allowed = record.mask[walk.row, 0, q].cpu()
    assert torch.equal(shown["masked"].off, ~allowed)
    assert [bool(r) for r in shown["masked"].notes] == (~allowed).tolist()
    _close(shown["masked"].values, record.scores[walk.row, h, q], f"{prefix} masked scores")
    reference = torch.softmax(shown["masked"].values.double(), -1).float()
    _close(shown["weights"].values, reference, f"{prefix} softmax of the shown scores")
    _close(shown["weights"].values, record.weights[walk.row, h, q], f"{prefix} weights")
    exp = shown["exp"].values
    _close(exp / exp.sum(), record.weights[walk.row, h, q], f"{prefix} exp / Σ exp")
    head_output = shown["weights"].values @ shown["v"].values
    _close(shown["head"].values, head_output, f"{prefix} head output")
    _close(shown["concat"].values[head], head_output, f"{prefix} this head in the concatenation")
    assert shown["concat"].highlight == (head.start, head.stop)
    projected = _linear(shown["concat"].values, module.w_o)
    _close(projected, update[walk.row, q], f"{prefix} ·W_O against the trace's update")
    _close(shown["project"].values, projected, f"{prefix} ·W_O")
    added = x + shown["project"].values
    _close(shown["residual"].values, added, f"{prefix} residual add")
    after = added if pre else _norm(added, residual.norm)
    if not pre:
        _close(shown["norm_out"].values, after, f"{prefix} post-LN")
    _close(after, output[walk.row, q], f"{prefix} sub-layer output against the trace")
    return after


def check_walkthrough(model, tokenizer, text, stack, layer, head, query) -> None:
    """Everything a walkthrough shows, against an independent pass and plain torch."""
    walk = inside_layer(model, tokenizer, text, stack, layer, head, query)
    trace = analyse(model, tokenizer, [text]).trace
    traced = (trace.encoder_layers if stack == "encoder" else trace.decoder_layers)[layer]
    stack_input = trace.source if stack == "encoder" else trace.target
    module = (model.encoder if stack == "encoder" else model.decoder).layers[layer]
    config = model.config
    inputs = traced.input[0].cpu()  # (T, d_model)
    x = inputs[query]
    _close(walk.step("input").values, x, "layer input")
    if layer == 0:
        embedding = model.tgt_embedding if stack == "decoder" else model.src_embedding
        token_id = int(stack_input.tokens[0, query])
        scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
        expected = embedding.lookup.weight[token_id].detach().cpu() * scale
        _close(walk.step("embedding.token").values, expected, "token embedding")
        _close(walk.step("embedding.position").values, stack_input.positional[query], "position")
        total = walk.step("embedding.token").values + walk.step("embedding.position").values
        if config.n_token_types:
            types = model.token_type_embedding.weight[0].detach().cpu()
            _close(walk.step("embedding.token_type").values, types, "token type (type 0)")
            total = total + types
        _close(walk.step("embedding.sum").values, total, "embedding sum")
        if config.embedding_norm:
            norm = model.tgt_embedding_norm if stack == "decoder" else model.src_embedding_norm
            total = _norm(total, norm)
            _close(walk.step("embedding.norm").values, total, "embedding LayerNorm")
        _close(total, x, "the embedding pieces add up to the layer's input")
    self_residual = (
        module.attention_residual if stack == "encoder" else module.self_attention_residual
    )
    x = _check_attention(
        walk,
        "self",
        module.self_attention,
        self_residual,
        x,
        inputs,
        traced.self_attention,
        traced.self_attention_update,
        traced.self_attention_output,
    )
    has_cross = stack == "decoder" and config.has_encoder
    assert bool(walk.section("cross-attention")) == has_cross
    if has_cross:
        x = _check_attention(
            walk,
            "cross",
            module.cross_attention,
            module.cross_attention_residual,
            x,
            trace.memory[0].cpu(),
            traced.cross_attention,
            traced.cross_attention_update,
            traced.cross_attention_output,
        )
    ff = module.feed_forward
    pre = config.norm == "pre"
    ff_in = _norm(x, module.feed_forward_residual.norm) if pre else x
    if pre:
        _close(walk.step("ff.norm_in").values, ff_in, "feed-forward pre-LN")
    hidden = _linear(ff_in, ff.linear1)
    _close(walk.step("ff.hidden").values, hidden, "·W₁ + b₁")
    activated = ACTIVATIONS[config.activation](walk.step("ff.hidden").values)
    _close(walk.step("ff.activation").values, activated, config.activation)
    assert torch.equal(walk.step("ff.activation").off, hidden <= 0)
    projected = _linear(walk.step("ff.activation").values, ff.linear2)
    _close(projected, traced.feed_forward_update[0, query], "FFN against the trace's update")
    _close(walk.step("ff.project").values, projected, "·W₂ + b₂")
    added = x + walk.step("ff.project").values
    _close(walk.step("ff.residual").values, added, "feed-forward residual add")
    output = added if pre else _norm(added, module.feed_forward_residual.norm)
    _close(output, traced.feed_forward_output[0, query], "the layer's output against the trace")
    _close(walk.step("output").values, output, "the layer's output")
    # The steps come in the model's order, section by section.
    order = [SECTIONS.index(s.section) for s in walk.steps]
    assert order == sorted(order)
    check_code_lines(walk)


def check_code_lines(walk) -> None:
    """Every cited line is that line of that file, and holds the code of its step."""
    for step in walk.steps:
        code = step.code
        assert code.path.startswith("transformer/") and code.line >= 1, (step.key, code)
        lines = (ROOT / code.path).read_text(encoding="utf-8").splitlines()
        assert lines[code.line - 1].strip() == code.text, (step.key, code)
        expected = CODE_BY_KEY.get(step.key) or CODE[step.key.rsplit(".", 1)[-1]]
        assert expected in code.text, (step.key, code.text)


@pytest.fixture(scope="module")
def bundled():
    models = load_bundled("cpu")
    assert not models.errors
    return models.models


@pytest.mark.parametrize(
    "name",
    ["reverse", pytest.param("translate", marks=pytest.mark.slow), "continue"],  # 3+3 layers: slow
)
def test_every_step_of_every_layer_of_a_bundled_model_is_the_models_own(bundled, name):
    checkpoint = bundled[name]
    config = checkpoint.config
    text = "a b c d e" if name == "reverse" else "the small cat sees a red ball"
    stacks = [s for s in ("encoder", "decoder") if getattr(config, f"has_{s}")]
    for stack in stacks:
        n_layers = config.n_encoder_layers if stack == "encoder" else config.n_decoder_layers
        for layer in range(n_layers):
            head = layer % config.n_heads
            check_walkthrough(
                checkpoint.model, checkpoint.tokenizer, text, stack, layer, head, 2 + layer
            )


@pytest.mark.parametrize("family", ["bert", "gpt2", "marian"])
def test_pretrained_families_through_load_pretrained(hf_models, family):
    checkpoint = load_pretrained(hf_models[family])
    config = checkpoint.config
    text = "the cat sat w9 w10 the cat"
    for stack in [s for s in ("encoder", "decoder") if getattr(config, f"has_{s}")]:
        for layer in range(2):
            check_walkthrough(
                checkpoint.model, checkpoint.tokenizer, text, stack, layer, 3 - layer, 1 + layer
            )


def test_causal_and_padding_masks_say_which_keys_and_why(bundled):
    checkpoint = bundled["translate"]
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    analysis = analyse(model, tokenizer, ["the small cat sees a red ball", "a dog"])
    tokens = analysis.trace.source.tokens[1]
    padding = (tokens == model.config.pad_id).tolist()
    assert any(padding)
    walk = walkthrough(model, analysis, "encoder", 0, 0, 1, row=1)
    step = walk.step("self.masked")
    assert step.off.tolist() == padding
    assert step.notes == ["padding" if pad else "" for pad in padding]
    assert f"{sum(padding)} of {len(padding)} keys" in step.explanation
    # The decoder's cross-attention masks the same source padding; its self-attention the
    # later positions (keys after the query), and the query itself may be looked at.
    walk = walkthrough(model, analysis, "decoder", 1, 2, 2, row=1)
    assert walk.step("cross.masked").off.tolist() == padding
    n_keys = walk.step("self.masked").values.numel()
    later = [j > 2 for j in range(n_keys)]
    real = analysis.trace.target.real_tokens[1].tolist()
    assert walk.step("self.masked").off.tolist() == [
        a or not r for a, r in zip(later, real, strict=True)
    ]
    assert walk.step("self.masked").notes[3].startswith("causal")
    with pytest.raises(ValueError, match="padding: choose a real token"):
        walkthrough(model, analysis, "encoder", 0, 0, len(padding) - 1, row=1)


def test_the_activation_step_names_the_units_it_switched_off(bundled):
    checkpoint = bundled["continue"]
    walk = inside_layer(checkpoint.model, checkpoint.tokenizer, "the cat", "decoder", 0, 0, 1)
    step = walk.step("ff.activation")
    n_off = int((walk.step("ff.hidden").values <= 0).sum())
    assert n_off > 0 and (step.values[step.off] == 0).all()  # ReLU: switched off means 0
    assert f"switched off {n_off} of {checkpoint.config.d_ff}" in step.explanation


@pytest.mark.parametrize(
    ("text", "stack", "layer", "head", "query", "message"),
    [
        ("", "encoder", 0, 0, 0, "enter a sentence"),
        ("  \n ", "encoder", 0, 0, 0, "enter a sentence"),
        ("one\ntwo", "encoder", 0, 0, 0, "one sentence at a time"),
        ("a b", "middle", 0, 0, 0, "stack must be"),
        ("a b", "encoder", 2, 0, 0, "layer must be between 0 and 1"),
        ("a b", "encoder", 0, 4, 0, "head must be between 0 and 3"),
        ("a b", "encoder", 0, 0, 9, "query must be between"),
        ("a b", "encoder", -1, 0, 0, "layer must be between"),
        ("a b " * 400, "encoder", 0, 0, 0, "this model reads at most"),
    ],
)
def test_bad_input_says_what_to_fix(bundled, text, stack, layer, head, query, message):
    checkpoint = bundled["reverse"]
    with pytest.raises(ValueError, match=message):
        inside_layer(checkpoint.model, checkpoint.tokenizer, text, stack, layer, head, query)


def test_a_stack_the_model_lacks_names_the_other(bundled):
    checkpoint = bundled["continue"]
    with pytest.raises(ValueError, match="decoder-only model has no encoder: choose the decoder"):
        inside_layer(checkpoint.model, checkpoint.tokenizer, "the cat", "encoder", 0, 0, 0)


def test_figures_draw_each_section_compactly_with_masked_keys_and_switched_off_units_grey(
    bundled,
):
    from transformer.figures.common import MASKED_GREY
    from transformer.figures.inside import section_figure

    checkpoint = bundled["continue"]
    query = 3
    walk = inside_layer(
        checkpoint.model, checkpoint.tokenizer, "the cat sat", "decoder", 1, 2, query
    )
    steps = walk.section("self-attention")
    figure = section_figure(steps, 5)
    n_keys = walk.step("self.dot").values.numel()
    (table,) = [t for t in figure.data if t.type == "table"]
    assert list(table.cells.values[0]) == walk.key_labels
    later = [j > query for j in range(n_keys)]  # the causal mask, written out
    assert [c == "#ececec" for c in table.cells.fill.color[0]] == later
    (bars,) = [t for t in figure.data if t.type == "bar"]
    assert [c == MASKED_GREY for c in bars.marker.color] == later
    # Every vector is one float32 strip with an index/value hover (no per-cell text).
    payload = figure.to_json()
    assert '"dtype":"f4"' in payload and '"dtype":"f8"' not in payload
    strips = [t for t in figure.data if t.type == "heatmap"]
    assert all("%{z" in t.hovertemplate and t.text is None for t in strips)
    assert figure.layout.height > 200 and len(payload) < 60_000
    # The activation: the grey layer covers exactly the units with u ≤ 0.
    ff = section_figure(walk.section("feed-forward"), 20)
    hidden = walk.step("ff.hidden").values
    grey = [t for t in ff.data if t.type == "heatmap" and "switched off" in t.hovertemplate]
    assert len(grey) == 1
    covered = ~torch.isnan(torch.as_tensor(grey[0].z[0]))
    assert torch.equal(covered, hidden <= 0)
    large = section_figure(steps, 5, large_font=True)
    assert large.layout.font.size > figure.layout.font.size
    assert large.layout.height > figure.layout.height


# -- the Llama family: RMSNorm, rotary positions, grouped-query attention, SwiGLU -------------

LLAMA_CODE = {
    "norm_in": "torch.rsqrt(mean_square + self.eps)",
    "angles": "positions.float()[..., None]",
    "q_rotated": "rotate_half(x) * sin",
    "k_rotated": "rotate_half(x) * sin",
    "gate_in": "gate = self.w_gate(x)",
    "activation": "self.activation(gate) if grad",
    "up": "up = self.w_up(x)",
    "product": "gate * up if grad",
}
LLAMA_CODE_BY_KEY = {"ff.project": "w_down("}


def _rms(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    weight = norm.weight.detach().cpu()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps) * weight


def _rotate_pairs(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Dimension i turns with i + d/2 by ``angles[i]`` (Llama's pairing), written out."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    cos, sin = angles.cos(), angles.sin()
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def check_llama_walkthrough(model, tokenizer, text, layer, head, query, hidden_states=None):
    """Rebuild every step of a Llama-family layer from the shown pieces with plain torch."""
    config = model.config
    walk = inside_layer(model, tokenizer, text, "decoder", layer, head, query)
    trace = analyse(model, tokenizer, [text]).trace
    traced = trace.decoder_layers[layer]
    module = model.decoder.layers[layer]
    attention = module.self_attention
    dh = config.d_head
    group = config.n_heads // config.kv_heads
    kv = head // group  # grouped-query attention: query head h reads kv head h // group
    rows, kv_rows = slice(head * dh, (head + 1) * dh), slice(kv * dh, (kv + 1) * dh)
    inputs = traced.input[0].cpu()
    x = inputs[query]
    _close(walk.step("input").values, x, "layer input")
    assert not walk.has("embedding.position")  # rotary: no position vector is added
    if layer == 0:
        token_id = int(trace.target.tokens[0, query])
        expected = model.tgt_embedding.lookup.weight[token_id].detach().cpu()
        _close(walk.step("embedding.token").values, expected, "token embedding")
        _close(expected, x, "the embedding is the layer's input")
    # RMSNorm, then q, K, V with the kv head of this query head.
    normed = _rms(inputs, module.self_attention_residual.norm)  # (T, d_model)
    _close(walk.step("self.norm_in").values, normed[query], "RMSNorm")
    assert "mean(x²)" in walk.step("self.norm_in").formula
    weight = lambda layer_: layer_.weight.detach().cpu()  # noqa: E731

    def project(x: torch.Tensor, layer_: torch.nn.Linear, cut: slice) -> torch.Tensor:
        bias = None if layer_.bias is None else layer_.bias.detach().cpu()[cut]
        return F.linear(x, weight(layer_)[cut], bias)

    q = project(normed[query], attention.w_q, rows)
    keys = project(normed, attention.w_k, kv_rows)  # (T, d_head)
    values = project(normed, attention.w_v, kv_rows)
    assert ("b_Q" in walk.step("self.q").formula) == (attention.w_q.bias is not None)
    _close(walk.step("self.q").values, q, "q before rotation")
    _close(walk.step("self.k").values, keys, f"K of kv head {kv}")
    _close(walk.step("self.v").values, values, f"V of kv head {kv}")
    assert f"key/value head {kv + 1}" in walk.step("self.k").name
    sharing = [str(h + 1) for h in range(config.n_heads) if h // group == kv]
    assert f"shared with query heads {', '.join(sharing)}" in walk.step("self.k").explanation
    # The rotation: angle_i = position · base^(−2i/d_head).
    theta = config.rope_base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angles = (query * theta).float()
    _close(walk.step("self.angles").values, angles, "rotation angles")
    every_angle = torch.arange(len(inputs), dtype=torch.float64)[:, None] * theta
    q_rot = _rotate_pairs(walk.step("self.q").values, angles)
    k_rot = _rotate_pairs(walk.step("self.k").values, every_angle.float())
    _close(walk.step("self.q_rotated").values, q_rot, "q after rotation")
    _close(walk.step("self.k_rotated").values, k_rot, "K after rotation")
    rotated = traced.self_attention.rotary
    _close(q_rot, rotated.queries_after[0, head, query], "q' against the trace")
    _close(k_rot, rotated.keys_after[0, kv], "K' against the trace")
    record = traced.self_attention
    assert record.kv_head_of[head] == kv
    dot = walk.step("self.k_rotated").values @ walk.step("self.q_rotated").values
    _close(walk.step("self.dot").values, dot, "q'·k'")
    _close(walk.step("self.scaled").values, dot / math.sqrt(dh), "÷√d_k")
    assert torch.equal(walk.step("self.masked").off, torch.arange(len(inputs)) > query)
    _close(walk.step("self.masked").values, record.scores[0, head, query], "masked scores")
    weights = torch.softmax(walk.step("self.masked").values.double(), -1).float()
    _close(walk.step("self.weights").values, weights, "softmax")
    _close(weights, record.weights[0, head, query], "weights against the trace")
    head_output = weights @ walk.step("self.v").values
    _close(walk.step("self.head").values, head_output, "head output")
    _close(walk.step("self.concat").values[rows], head_output, "this head in the concatenation")
    projected = walk.step("self.concat").values @ weight(attention.w_o).T
    _close(projected, traced.self_attention_update[0, query], "·W_O against the trace")
    _close(walk.step("self.project").values, projected, "·W_O")
    x = x + projected
    _close(walk.step("self.residual").values, x, "residual add")
    assert not walk.has("self.norm_out")
    # RMSNorm, gate ⊙ up (SwiGLU), W_down, residual.
    ff = module.feed_forward
    hs = _rms(x, module.feed_forward_residual.norm)
    _close(walk.step("ff.norm_in").values, hs, "feed-forward RMSNorm")
    gate_in = hs @ weight(ff.w_gate).T
    up = hs @ weight(ff.w_up).T
    _close(walk.step("ff.gate_in").values, gate_in, "·W_gate")
    _close(walk.step("ff.up").values, up, "·W_up")
    gate = gate_in * torch.sigmoid(gate_in)  # SiLU, written out
    _close(walk.step("ff.activation").values, gate, "SiLU(gate)")
    assert torch.equal(walk.step("ff.activation").off, gate_in <= 0)
    _close(walk.step("ff.product").values, gate * up, "SiLU(gate) ⊙ up")
    down = (gate * up) @ weight(ff.w_down).T
    _close(down, traced.feed_forward_update[0, query], "W_down against the trace")
    _close(walk.step("ff.project").values, down, "·W_down")
    output = x + down
    _close(walk.step("ff.residual").values, output, "feed-forward residual add")
    _close(output, traced.feed_forward_output[0, query], "the layer's output against the trace")
    _close(walk.step("output").values, output, "the layer's output")
    if hidden_states is not None:  # transformers' own hidden state after this layer
        reference = hidden_states[layer + 1][0, query]
        assert (output - reference).abs().max().item() < 1e-5
    order = [SECTIONS.index(s.section) for s in walk.steps]
    assert order == sorted(order)
    for step in walk.steps:
        code = step.code
        assert code.path.startswith("transformer/") and code.line >= 1, (step.key, code)
        lines = (ROOT / code.path).read_text(encoding="utf-8").splitlines()
        assert lines[code.line - 1].strip() == code.text, (step.key, code)
        last = step.key.rsplit(".", 1)[-1]
        expected = LLAMA_CODE_BY_KEY.get(step.key) or LLAMA_CODE.get(last) or CODE[last]
        assert expected in code.text, (step.key, code.text)
    return walk


@pytest.mark.parametrize(
    ("family", "n_heads", "n_kv_heads"), [("llama", 4, 2), ("llama", 4, 1), ("qwen2", 4, 2)]
)
def test_every_step_of_a_llama_layer_rebuilt_from_the_shown_pieces(
    tmp_path, family, n_heads, n_kv_heads
):
    reference = tiny_llama(tmp_path, n_heads, n_kv_heads, theta=500.0, family=family)
    checkpoint = load_pretrained(tmp_path)
    assert checkpoint.config.kv_heads == n_kv_heads
    text = "w5 w17 w3 w42 w8 w29"
    ids = checkpoint.tokenizer.encode_ids(text, add_bos=True)
    with torch.no_grad():
        hidden = reference(torch.tensor([ids]), output_hidden_states=True).hidden_states
    for layer, head, query in [(0, 3, 4), (1, 1, 2), (2, 0, 6)]:
        check_llama_walkthrough(
            checkpoint.model,
            checkpoint.tokenizer,
            text,
            layer,
            head,
            query,
            hidden if layer < 2 else None,  # the last hidden state is after the final norm
        )
