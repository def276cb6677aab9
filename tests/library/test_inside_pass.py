"""Inside a layer shows the model's own pass: its layer input and output, its attention
weights, its rotated queries and keys, its scores and each sub-layer's update are, bit for bit
on CPU float32, what an ordinary captured pass of the model (``model(..., call=TRACE)``)
computes, for every layer of every model kind (the paper's post-LN encoder-decoder, the pre-LN
GPT-2 and BERT and Marian folders, a Llama, and each later family). And the capture that feeds
it keeps one layer, nothing more."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import family_folder, tiny_llama
from family_checks import FAMILIES

from transformer import Capture, load_pretrained
from transformer.core.modern import RMSNorm
from transformer.core.run import PLAIN, TRACE, Call, LookInside, Run
from transformer.lab.inside import query_positions, walkthrough
from transformer.lab.inspection import analyse
from transformer.training.bundled import load_bundled

TEXT = "w5 w17 w3 w42 w8 w61 w29 w77"


def _same(shown: torch.Tensor, reference: torch.Tensor, what: str) -> None:
    reference = reference.detach().float().cpu()
    assert shown.dtype == torch.float32 and shown.shape == reference.shape, what
    assert torch.equal(shown, reference), (
        f"{what}: differs by {(shown - reference).abs().nan_to_num().max().item():.3g}"
    )


def _check_all(model, tokenizer, text: str) -> int:
    """Walk every layer of every stack at the last real token; returns the layers walked."""
    model.eval()
    analysis = analyse(model, tokenizer, [text])
    source, target = analysis.trace.source, analysis.trace.target
    with torch.no_grad():  # the model's own pass, its weights kept: the reference
        trace = model(
            source.tokens if source is not None else None,
            target.tokens if target is not None else None,
            call=TRACE,
        )
    config, walked = model.config, 0
    for stack, layers, record in (
        ("encoder", trace.encoder_layers, source),
        ("decoder", trace.decoder_layers, target),
    ):
        if record is None or not layers:
            continue
        query = query_positions(record.tokens[0], record.real_tokens[0], config.pad_id)[-1]
        for layer, traced in enumerate(layers):
            head = layer % config.n_heads
            walk = walkthrough(model, analysis, stack, layer, head, query)
            where = f"{stack} layer {layer}"
            _same(walk.step("output").values, traced.output[0, query], f"{where} output")
            attentions = [("self", traced.self_attention)]
            if traced.cross_attention is not None:
                attentions.append(("cross", traced.cross_attention))
            for prefix, attention in attentions:
                weights = attention.weights[0, head, query]
                _same(walk.step(f"{prefix}.weights").values, weights, f"{where} {prefix} weights")
                scores = attention.scores[0, head, query]
                shown = walk.step(f"{prefix}.masked").values
                _same(shown, scores, f"{where} {prefix} masked scores")
                if attention.rotary is not None:
                    g = attention.kv_head_of[head]
                    rotary = attention.rotary
                    q = rotary.queries_after[0, head, query]
                    _same(walk.step(f"{prefix}.q_rotated").values, q, f"{where} rotated q")
                    k = rotary.keys_after[0, g]
                    _same(walk.step(f"{prefix}.k_rotated").values, k, f"{where} rotated K")
            _same(walk.step("input").values, traced.input[0, query], f"{where} input")
            if not config.post_sublayer_norm and config.norm != "output":
                # The projections shown are the updates the pass added to the stream.
                for prefix, update in (
                    ("self", traced.self_attention_update),
                    ("cross", traced.cross_attention_update),
                    ("ff", traced.feed_forward_update),
                ):
                    if update is not None:
                        shown = walk.step(f"{prefix}.project").values
                        _same(shown, update[0, query], f"{where} {prefix} update")
            walked += 1
    return walked


def test_a_post_ln_encoder_decoder() -> None:
    checkpoint = load_bundled("cpu").models["reverse"]
    assert checkpoint.config.norm == "post" and checkpoint.config.has_encoder
    assert _check_all(checkpoint.model, checkpoint.tokenizer, "a b c d e") >= 2


@pytest.mark.parametrize("family", ["bert", "gpt2", "marian"])
def test_pretrained_kinds(hf_models, family: str) -> None:
    checkpoint = load_pretrained(hf_models[family])
    assert _check_all(checkpoint.model, checkpoint.tokenizer, "the cat sat on the mat") >= 1


def test_a_llama(tmp_path: Path) -> None:
    tiny_llama(tmp_path, 4, 2, theta=500.0, family="llama")
    checkpoint = load_pretrained(tmp_path)
    assert _check_all(checkpoint.model, checkpoint.tokenizer, TEXT) >= 1


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family(name: str, tmp_path: Path) -> None:
    family, config, matrices, _ = FAMILIES[name]
    family_folder(tmp_path, family, seed=len(name), matrices=matrices, **config)
    checkpoint = load_pretrained(tmp_path)
    assert _check_all(checkpoint.model, checkpoint.tokenizer, TEXT) >= 1


def test_looking_inside_keeps_one_layer_and_changes_no_output(tmp_path: Path) -> None:
    tiny_llama(tmp_path, 4, 2, theta=500.0, family="llama")
    model = load_pretrained(tmp_path).model.eval()
    ids = torch.tensor([[1, 5, 17, 3, 42, 8]])
    look = LookInside("decoder", 1)
    with torch.no_grad():
        plain = model(None, ids, call=TRACE)
        looked = model(None, ids, call=Call(capture=Capture(inside=look)))
        fast = model(None, ids)
        fast_looked = model(
            None, ids, call=Call(capture=Capture(trace=False, inside=LookInside("decoder", 0)))
        )
    assert torch.equal(looked.final, plain.final)
    assert torch.equal(fast_looked, fast)  # the fast path computes the same with a look inside
    layer = model.decoder.layers[1]
    attention, ff = layer.self_attention, layer.feed_forward
    attention_norm = layer.self_attention_residual.norm
    ff_norm = layer.feed_forward_residual.norm
    # Layer 1's modules, each its own names, and nothing of layer 0's or the final norm's.
    assert set(look.kept) == (
        {(attention, n) for n in ("queries", "keys", "values", "heads", "output")}
        | {(norm, n) for norm in (attention_norm, ff_norm) for n in ("input", "output")}
        | {(ff, n) for n in ("gate_in", "gate", "up", "units")}
    )
    config = model.config
    d_head = config.d_model // config.n_heads
    assert look.get(attention, "keys").shape == (1, config.kv_heads, 6, d_head)
    assert look.get(attention, "heads").shape == (1, config.n_heads, 6, d_head)
    # Without an output norm the attention's output is the update the layer added.
    assert torch.equal(look.get(attention, "output"), plain.decoder_layers[1].self_attention_update)
    # Layer 1's values, written out independently from its input: W_V of the normed stream.
    normed = layer.self_attention_residual.norm(plain.decoder_layers[1].input)
    values = torch.nn.functional.linear(normed, layer.self_attention.w_v.weight)
    expected = values.view(1, 6, config.kv_heads, d_head).transpose(1, 2)
    torch.testing.assert_close(look.get(attention, "values"), expected)


def test_only_the_run_a_looked_at_layer_hands_on_keeps_anything() -> None:
    look = LookInside("decoder", 1)
    run = Run(capture=Capture(inside=look))
    norm = RMSNorm(4)
    x = torch.randn(1, 3, 4)
    run.keep_for_inside(norm, input=x)  # the pass outside any layer (embedding, final norm)
    assert run.within("decoder", 0) is run and run.within("encoder", 1) is run
    run.within("decoder", 0).keep_for_inside(norm, input=x)
    assert look.kept == {}
    assert PLAIN.within("decoder", 1) is PLAIN  # a pass that looks nowhere: the same run
    inside = run.within("decoder", 1)
    assert inside.looking and inside.kept is run.kept and inside.ops is run.ops
    norm(x, inside)
    kept = look.get(norm, "output")
    assert torch.equal(kept, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps))
    assert torch.equal(look.get(norm, "input"), x) and look.get(norm, "input") is not x  # a copy
    with pytest.raises(KeyError, match=r"kept no 'units'.*'input', 'output'"):
        look.get(norm, "units")
