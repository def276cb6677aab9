"""Behaviour of the model: causality, padding, the cache, the trace, and the what-if switches."""

from __future__ import annotations

import math
import weakref
from unittest import mock

import pytest
import torch

import transformer.core.attention as attention_module
import transformer.core.masks as masks_module
from transformer.core.attention import (
    MultiHeadAttention,
    attention_scores,
    scaled_dot_product_attention,
)
from transformer.core.config import ModelConfig
from transformer.core.masks import causal_mask, combine_masks, is_causal, padding_mask
from transformer.core.model import Transformer
from transformer.core.operations import merge_heads, split_heads
from transformer.core.run import TRACE, Call, Capture, Run
from transformer.lab.interventions import Intervention

CONFIG = ModelConfig(
    src_vocab_size=40, tgt_vocab_size=45, d_model=32, n_heads=4, d_ff=64, dropout=0.0
)
ARCHITECTURES = ["encoder-decoder", "encoder-only", "decoder-only"]


def model_for(architecture: str = "encoder-decoder", **changes) -> Transformer:
    return Transformer(CONFIG.replace(architecture=architecture, **changes)).eval()


def inputs(architecture: str, src: torch.Tensor, tgt: torch.Tensor) -> dict:
    return {
        "encoder-decoder": {"src": src, "tgt": tgt},
        "encoder-only": {"src": src},
        "decoder-only": {"tgt": tgt},
    }[architecture]


def ids(batch: int, length: int, vocab: int = 40) -> torch.Tensor:
    return torch.randint(1, vocab, (batch, length))


@torch.no_grad()
@pytest.mark.parametrize("architecture", ["encoder-decoder", "decoder-only"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_changing_future_targets_leaves_earlier_outputs_unchanged(architecture, norm):
    model = model_for(architecture, norm=norm)
    src, tgt = ids(2, 6), ids(2, 8)
    t = 4
    changed = tgt.clone()
    changed[:, t + 1 :] = ids(2, 8 - t - 1)
    before = model(**inputs(architecture, src, tgt))
    after = model(**inputs(architecture, src, changed))
    assert torch.allclose(before[:, : t + 1], after[:, : t + 1], atol=1e-6)
    assert not torch.allclose(before[:, t + 1 :], after[:, t + 1 :], atol=1e-3)


@torch.no_grad()
def test_without_the_causal_mask_the_future_leaks():
    model = model_for("decoder-only")
    tgt = ids(1, 8)
    changed = tgt.clone()
    changed[:, -1] = (tgt[:, -1] % 39) + 1
    leak = Intervention(causal_mask=False)
    before = model(tgt=tgt, call=Call(ops=leak.operations))
    after = model(tgt=changed, call=Call(ops=leak.operations))
    assert not torch.allclose(before[:, 0], after[:, 0], atol=1e-4)


@torch.no_grad()
@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("capture", [False, True])
def test_appending_padding_leaves_real_positions_unchanged(architecture, capture):
    model = model_for(architecture)
    src, tgt = ids(2, 5), ids(2, 6)
    pad = CONFIG.pad_id
    src_padded = torch.cat([src, torch.full((2, 3), pad)], dim=1)
    tgt_padded = torch.cat([tgt, torch.full((2, 4), pad)], dim=1)
    plain = model(**inputs(architecture, src, tgt), call=Call(capture=Capture(trace=capture)))
    padded = model(
        **inputs(architecture, src_padded, tgt_padded), call=Call(capture=Capture(trace=capture))
    )
    if capture:
        plain, padded = plain.logits, padded.logits
    real = plain.shape[1]
    assert torch.allclose(plain, padded[:, :real], atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("architecture", ["encoder-decoder", "decoder-only"])
@pytest.mark.parametrize("capture", [False, True])
def test_cached_incremental_decoding_equals_the_full_pass(architecture, capture, device):
    model = model_for(architecture, norm="pre").to(device)
    src, tgt = ids(2, 7).to(device), ids(2, 9).to(device)
    src[1, 5:] = CONFIG.pad_id  # the cache must carry the source padding mask
    encoded = model.encode(src) if model.config.has_encoder else None
    full = model.decode(tgt, encoded).logits
    cache = model.new_cache()
    for step in range(tgt.size(1)):
        out = model.decode(
            tgt[:, step : step + 1], encoded, cache=cache, call=Call(capture=Capture(trace=capture))
        )
        assert torch.allclose(out.logits[:, 0], full[:, step], atol=1e-5), step
    assert cache.length == tgt.size(1)
    if model.config.has_encoder:  # cross-attention keys were computed once, from the source
        assert cache.layers[0].cross_attention.keys.shape[2] == src.size(1)


@torch.no_grad()
def test_cache_truncate_rewinds():
    model = model_for("decoder-only")
    tgt = ids(1, 6)
    cache = model.new_cache()
    model.decode(tgt[:, :4], cache=cache)
    cache.truncate(2)
    again = model.decode(tgt[:, 2:3], cache=cache).logits[:, 0]
    assert torch.allclose(again, model.decode(tgt[:, :3]).logits[:, 2], atol=1e-5)
    with pytest.raises(ValueError):
        cache.truncate(10)


@torch.no_grad()
@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_fast_path_and_capture_path_agree(architecture, norm, device):
    model = model_for(architecture, norm=norm).to(device)
    src, tgt = ids(3, 7).to(device), ids(3, 5).to(device)
    src[2, 4:] = CONFIG.pad_id
    tgt[1, 3:] = CONFIG.pad_id
    fast = model(**inputs(architecture, src, tgt))
    trace = model(**inputs(architecture, src, tgt), call=TRACE)
    assert torch.allclose(fast, trace.logits, atol=1e-5)


@torch.no_grad()
def test_fast_path_never_materialises_attention_weights():
    """Without capture, the written-out attention (which builds (B, H, T, T)) is not called."""
    model = model_for("encoder-decoder")
    src, tgt = ids(2, 6), ids(2, 4)
    with (
        mock.patch.object(
            attention_module, "scaled_dot_product_attention", side_effect=AssertionError
        ),
        mock.patch.object(
            attention_module.F,
            "scaled_dot_product_attention",
            wraps=torch.nn.functional.scaled_dot_product_attention,
        ) as fused,
    ):
        model(src, tgt)
        assert fused.call_count == 2 + 2 * 2  # encoder self; decoder self + cross per layer
        with pytest.raises(AssertionError):
            model(src, tgt, call=TRACE)


@torch.no_grad()
def test_fast_path_applies_a_plain_causal_mask_as_is_causal():
    """A decoder's self-attention over unpadded targets hands sdpa ``is_causal=True`` and no
    mask (it skips the future's blocks); padding or a cache's offset keeps the mask."""
    model = model_for("decoder-only")
    tgt = ids(2, 6)
    with mock.patch.object(
        attention_module.F,
        "scaled_dot_product_attention",
        wraps=torch.nn.functional.scaled_dot_product_attention,
    ) as fused:
        fast = model(tgt=tgt)
        assert [(c.kwargs["is_causal"], c.kwargs["attn_mask"]) for c in fused.call_args_list] == [
            (True, None)
        ] * CONFIG.n_decoder_layers
        fused.reset_mock()
        padded = tgt.clone()
        padded[1, 4:] = CONFIG.pad_id
        model(tgt=padded)
        assert not any(c.kwargs["is_causal"] for c in fused.call_args_list)
    # the same numbers as the written-out attention's masked softmax
    assert torch.allclose(fast, model(tgt=tgt, call=TRACE).logits, atol=1e-5)
    assert is_causal(causal_mask(5)) and not is_causal(causal_mask(3, 5))
    assert is_causal(causal_mask(5).expand(2, 1, 5, 5))
    padding = padding_mask(torch.tensor([[1, 2, 3], [1, 2, 0]]), 0)
    assert not is_causal(combine_masks(causal_mask(3), padding))
    assert not is_causal(causal_mask(5).float())


@pytest.mark.parametrize("capture", [False, True])
def test_a_pass_asks_its_mask_once_not_once_per_layer(capture):
    """Every layer receives the same mask; whether it is the causal triangle (the fast path),
    or allows everything, and its bias (written out) are worked out once per pass."""
    model = model_for("decoder-only")
    assert CONFIG.n_decoder_layers > 1
    tgt = ids(2, 6)
    tgt[1, 4:] = CONFIG.pad_id  # a padded batch: the written-out pass adds a bias
    for batch in (ids(2, 6), tgt):
        with (
            mock.patch.object(masks_module, "causal_mask", wraps=causal_mask) as triangles,
            mock.patch.object(
                attention_module, "mask_bias", wraps=attention_module.mask_bias
            ) as biases,
        ):
            model(tgt=batch, call=Call(capture=Capture(trace=capture)))
        assert triangles.call_count == (0 if capture else 1)
        assert biases.call_count == (1 if capture else 0)


def test_answers_about_a_mask_hold_for_one_pass_only():
    """A mask changed between passes is asked again; an answer outlives no pass."""
    mask = causal_mask(4)
    with masks_module.one_pass():
        assert is_causal(mask) and is_causal(mask)
        other = causal_mask(3, 5)
        assert not is_causal(other)  # another mask, its own answer
    mask[..., 0, 1] = True  # now query 0 reads the future: no longer the triangle
    with masks_module.one_pass():
        assert not is_causal(mask)
    q, k, v = torch.randn(3, 1, 2, 4, 8).unbind(0)
    mask = causal_mask(4).expand(1, 1, 4, 4).clone()
    for step in range(3):
        with masks_module.one_pass():
            out, probe = scaled_dot_product_attention(q, k, v, mask)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, float("-inf"))
        expected = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        assert torch.allclose(probe.weights, expected, atol=1e-6), step
        assert torch.allclose(out, expected @ v, atol=1e-6), step
        mask[..., step, :] = False  # a query with no key left: the next pass sees it
    freed = weakref.ref(mask)
    del mask, probe
    assert freed() is None  # no answer keeps its mask (or its bias) after the pass


@pytest.mark.parametrize("capture", [False, True])
def test_a_query_with_every_key_masked_gets_zeros_not_nan(capture, device):
    mha = MultiHeadAttention(ModelConfig(d_model=16, n_heads=2, dropout=0.0)).to(device).eval()
    x = torch.randn(2, 3, 16, device=device, requires_grad=True)
    mask = torch.ones(2, 1, 3, 3, dtype=torch.bool, device=device)
    mask[0, :, 1, :] = False  # query 1 of sequence 0 may attend to nothing
    run = Run(capture=Capture(trace=capture))
    out = mha(x, x, mask, run=run)
    probe = run.kept_probe(mha)
    assert not out.isnan().any()
    # With no key the attention output is zero, so the sub-layer output is w_o's bias alone.
    assert torch.allclose(out[0, 1], mha.w_o.bias, atol=1e-6)
    out.sum().backward()
    assert not x.grad.isnan().any()
    if capture:
        assert (probe.weights[0, :, 1] == 0).all()
        scores = attention_scores(probe.queries, probe.keys, probe.mask, probe.softcap)
        assert scores[0, :, 1].isneginf().all()


def test_written_out_attention_matches_the_formula():
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 5)
    out, probe = scaled_dot_product_attention(q, k, v)
    expected_scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(8)  # √d_head, not √d_model
    scores = attention_scores(probe.queries, probe.keys, probe.mask, probe.softcap)
    assert torch.allclose(scores, expected_scores, atol=1e-6)
    assert torch.allclose(probe.weights.sum(-1), torch.ones(1, 2, 3), atol=1e-6)
    assert torch.allclose(out, probe.weights @ v, atol=1e-6)


def test_masked_attention_weights_equal_softmax_over_minus_infinity_bit_for_bit():
    # The pass adds the lowest float to masked scores instead of filling them with -inf (a
    # faster softmax); the weights must not change by one bit, whatever the scores' size.
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=generator) * 30 for _ in range(3))
    mask = combine_masks(causal_mask(6), padding_mask(torch.tensor([[1, 2, 3, 4, 5, 6]] * 2), 6))
    _, probe = scaled_dot_product_attention(q, k, v, mask)
    scores = (q * (1 / math.sqrt(8))) @ k.transpose(-2, -1)  # scaled as the pass scales
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    assert torch.equal(probe.weights, expected)
    assert (probe.weights[~mask.expand_as(expected)] == 0).all()


@pytest.mark.parametrize("masked", [False, True])
def test_weights_computed_in_place_equal_a_separate_softmax_bit_for_bit(masked):
    # Without gradients the softmax overwrites its scores; at SmolLM2's 9 heads and 512 tokens
    # (the kernel's vectorised rows) the weights must be those of a softmax into a new tensor.
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 9, 512, 64, generator=generator) for _ in range(3))
    mask = causal_mask(512) if masked else None
    with torch.inference_mode():
        _, probe = scaled_dot_product_attention(q, k, v, mask)
    scores = (q * (1 / math.sqrt(64))) @ k.transpose(-2, -1)
    if masked:
        scores = scores.masked_fill(~mask, float("-inf"))
    assert torch.equal(probe.weights, torch.softmax(scores, dim=-1))


def test_weights_keep_their_gradient_where_the_scores_need_one():
    # With gradients the softmax must not overwrite the scores (autograd refuses out=): the
    # gradient of the weights reaches the queries and keys as through a softmax in the test.
    generator = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=generator, requires_grad=True) for _ in range(3))
    mask = causal_mask(5)
    out, probe = scaled_dot_product_attention(q, k, v, mask)
    (out.sum() + probe.weights.square().sum()).backward()
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    scores = torch.einsum("bhqd,bhkd->bhqk", q2, k2) / math.sqrt(8)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    ((weights @ v2).sum() + weights.square().sum()).backward()
    for mine, reference in ((q, q2), (k, k2), (v, v2)):
        assert mine.grad is not None and reference.grad is not None
        assert torch.allclose(mine.grad, reference.grad, atol=1e-5)


def test_split_and_merge_heads_keep_each_token_in_its_own_row():
    x = torch.arange(2 * 3 * 8, dtype=torch.float).view(2, 3, 8)
    heads = split_heads(x, 2)  # (B, H, T, d_head)
    assert heads.shape == (2, 2, 3, 4)
    assert torch.equal(heads[1, 1, 2], x[1, 2, 4:])  # head 1 of token 2 = its second half
    assert torch.equal(merge_heads(heads), x)


def test_masks_broadcast_and_combine():
    pad = padding_mask(torch.tensor([[4, 5, 0]]), 0)
    assert pad.shape == (1, 1, 1, 3)
    causal = causal_mask(3)
    assert causal[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(1, 4)[0, 0].tolist() == [[True, True, True, True]]  # last query sees all
    both = combine_masks(causal, pad, None)
    assert both[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert combine_masks(None) is None
    with pytest.raises(ValueError):
        causal_mask(4, 2)


@torch.no_grad()
def test_trace_tells_attention_kinds_apart_and_marks_masked_cells():
    model = model_for("encoder-decoder")
    src, tgt = ids(2, 6), ids(2, 4)
    src[1, 4:] = CONFIG.pad_id
    trace = model(src, tgt, call=TRACE)
    enc = trace.attention("encoder_self", 1)
    dec = trace.attention("decoder_self", 0)
    cross = trace.attention("cross", 1)
    assert (enc.kind, dec.kind, cross.kind) == ("encoder_self", "decoder_self", "cross")
    assert enc.weights.shape == (2, 4, 6, 6)
    assert dec.weights.shape == (2, 4, 4, 4)
    assert cross.weights.shape == (2, 4, 4, 6)
    # Source padding: keys 4 and 5 of sequence 1 are masked in encoder and cross attention.
    assert enc.masked[1, 0, :, 4:].all() and not enc.masked[0].any()
    assert cross.scores[1, :, :, 4:].isneginf().all()
    assert (cross.weights[1, :, :, 4:] == 0).all()
    # Decoder self-attention is causal: strictly upper triangle masked.
    upper = torch.ones(4, 4, dtype=torch.bool).triu(1)
    assert torch.equal(dec.masked[0, 0], upper)
    assert torch.equal(trace.causal, ~upper)
    assert trace.attention_weights("cross").shape == (2, 2, 4, 4, 6)
    assert trace.source.token_embedding.shape == (2, 6, 32)
    assert trace.source.positional.shape == (6, 32)
    assert trace.encoder_layers[0].self_attention_output.shape == (2, 6, 32)
    assert trace.decoder_layers[0].cross_attention_output.shape == (2, 4, 32)
    with pytest.raises(IndexError):
        trace.attention("cross", 2)


@torch.no_grad()
def test_decoder_only_model_has_no_cross_attention():
    model = model_for("decoder-only")
    assert all(layer.cross_attention is None for layer in model.decoder.layers)
    trace = model(tgt=ids(1, 5), call=TRACE)
    with pytest.raises(ValueError, match="no cross attention"):
        trace.attention("cross", 0)


@torch.no_grad()
def test_interventions_change_what_they_say():
    model = model_for("encoder-decoder")
    src, tgt = ids(1, 6), ids(1, 5)
    base = model(src, tgt, call=TRACE)
    unscaled = model(
        src, tgt, call=Call(ops=Intervention(scale_scores=False).operations, capture=Capture())
    )
    ratio = unscaled.attention("encoder_self", 0).scores / base.attention("encoder_self", 0).scores
    assert torch.allclose(ratio, torch.full_like(ratio, math.sqrt(CONFIG.d_head)), atol=1e-4)
    no_pe = model(
        src,
        tgt,
        call=Call(ops=Intervention(positional_encoding=False).operations, capture=Capture()),
    )
    assert (no_pe.source.positional == 0).all()
    # Without positions the encoder is permutation-equivariant: swapping two tokens swaps rows.
    swapped = src[:, [1, 0, 2, 3, 4, 5]]
    no_pe_swapped = model(
        swapped,
        tgt,
        call=Call(ops=Intervention(positional_encoding=False).operations, capture=Capture()),
    )
    assert torch.allclose(no_pe.memory[:, [1, 0]], no_pe_swapped.memory[:, :2], atol=1e-5)
    zeroed = model(
        src, tgt, call=Call(ops=Intervention(zero_heads=frozenset({("cross", 0, 2)})).operations)
    )
    assert not torch.allclose(zeroed, base.logits, atol=1e-4)


def test_wrong_inputs_raise_clear_errors():
    model = model_for("encoder-decoder")
    with pytest.raises(ValueError, match="needs tgt"):
        model(ids(1, 3))
    with pytest.raises(ValueError, match=r"token id 99 .*outside the vocabulary"):
        model(ids(1, 3), torch.tensor([[1, 99]]))
    with pytest.raises(ValueError, match="max_len"):
        model(ids(1, CONFIG.max_len + 1), ids(1, 2))
    with pytest.raises(ValueError, match="decoder-only model takes its tokens as tgt"):
        model_for("decoder-only")(ids(1, 3))


def test_padding_embedding_is_zero_and_tied_weights_are_shared():
    tied = Transformer(CONFIG.replace(tgt_vocab_size=40, tie_embeddings=True))
    assert tied.src_embedding.weight is tied.tgt_embedding.weight
    assert tied.generator.proj.weight is tied.src_embedding.weight
    assert (tied.src_embedding.weight[CONFIG.pad_id] == 0).all()
    untied = Transformer(CONFIG)
    assert untied.generator.proj.weight is not untied.tgt_embedding.weight


@torch.no_grad()
def test_embeddings_are_scaled_by_sqrt_d_model():
    model = model_for("encoder-only")
    tokens = ids(1, 3)
    trace = model(src=tokens, call=TRACE)
    expected = model.src_embedding.lookup(tokens) * math.sqrt(CONFIG.d_model)
    assert torch.allclose(trace.source.token_embedding, expected)


CORE = (
    "config",
    "masks",
    "embeddings",
    "layers",
    "modern",
    "rotary",
    "attention",
    "records",
    "cache",
    "operations",
    "run",
    "stacks",
    "model",
    "trace",
    "special",
    "util",
)


def test_the_paper_components_import_only_each_other():
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "transformer" / "core"
    for name in CORE:
        tree = ast.parse((package / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                assert node.level == 1 and node.module in CORE, (name, node.module)
            if isinstance(node, ast.ImportFrom | ast.Import):
                modules = [node.module] if isinstance(node, ast.ImportFrom) else []
                modules += [alias.name for alias in getattr(node, "names", [])]
                assert not any(str(m).startswith("transformer") for m in modules), name


def test_the_core_imports_in_no_circle():
    """Every relative import in ``transformer/core`` (those under ``TYPE_CHECKING`` too) as a
    graph, walked depth first: no module reaches itself."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "transformer" / "core"
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        graph[path.stem] = {
            node.module.split(".")[0] if node.module else alias.name
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.level == 1
            for alias in node.names
        }
    assert "attention" in graph and "records" in graph["attention"]  # the walk reads imports

    def reaches(start: str, seen: tuple[str, ...]) -> None:
        for imported in graph.get(start, set()):
            assert imported not in seen, " -> ".join((*seen, imported))
            reaches(imported, (*seen, imported))

    for name in graph:
        reaches(name, (name,))


def test_importing_the_package_does_not_load_the_toy_grammar():
    import subprocess
    import sys

    code = "import sys, transformer; print([m for m in sys.modules if 'training' in m])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_recorded_updates_are_what_each_sub_layer_adds_to_the_stream(norm):
    model = model_for("encoder-decoder", norm=norm).eval()
    src, tgt = ids(2, 5), ids(2, 4)
    trace = model(src, tgt, call=TRACE)
    for layer, module in zip(trace.decoder_layers, model.decoder.layers, strict=True):
        steps = [
            (
                layer.input,
                layer.self_attention_update,
                layer.self_attention_output,
                module.self_attention_residual.norm,
            ),
            (
                layer.self_attention_output,
                layer.cross_attention_update,
                layer.cross_attention_output,
                module.cross_attention_residual.norm,
            ),
            (
                layer.cross_attention_output,
                layer.feed_forward_update,
                layer.feed_forward_output,
                module.feed_forward_residual.norm,
            ),
        ]
        for before, update, after, ln in steps:
            summed = before + update
            if norm == "post":  # post-LN: the norm of (stream + update), by torch.nn's formula
                summed = torch.nn.functional.layer_norm(
                    summed, ln.weight.shape, ln.weight, ln.bias, ln.eps
                )
            torch.testing.assert_close(summed, after, atol=1e-5, rtol=1e-5)
    for layer in trace.encoder_layers:
        assert layer.cross_attention_update is None
        assert layer.self_attention_update.shape == layer.input.shape


def test_the_paper_components_name_no_teaching_mistake():
    """The broken versions live in transformer/lab/mistakes.py; the core only runs the operations
    it is handed."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "transformer" / "core"
    for name in CORE:
        text = (package / f"{name}.py").read_text(encoding="utf-8")
        assert not re.search("seed|mistake", text, re.IGNORECASE), name


def test_every_core_forward_reads_like_the_paper():
    """The paper's inputs, the cache, capture and ops: at most 6 parameters, at most 40 lines
    (signature and docstring included); model.py holds the Transformer alone."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "transformer" / "core"
    assert len((package / "model.py").read_text().splitlines()) <= 500
    for name in CORE:
        for node in ast.walk(ast.parse((package / f"{name}.py").read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "forward":
                args = node.args
                count = len(args.args) + len(args.kwonlyargs) - 1  # not self
                where = f"{name}.py:{node.lineno}"
                assert count <= 6, where
                assert node.end_lineno - node.lineno + 1 <= 40, where
