"""The logit lens and the residual-stream norms, against the model's own distribution, a direct
re-implementation with ``torch.nn.functional``, and (GPT-2) ``transformers``' hidden states
read through its own final norm and head."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from transformer import load_pretrained
from transformer.core.run import TRACE
from transformer.generation.lens import input_is_comparable, logit_lens, residual_norms
from transformer.pretrained.checkpoint import Checkpoint
from transformer.training.bundled import load_bundled

BUNDLED = ("reverse", "translate", "continue")


@pytest.fixture(scope="module")
def bundled() -> dict[str, Checkpoint]:
    return load_bundled().models


@pytest.fixture(scope="module")
def pretrained(hf_models: dict[str, Path]) -> dict[str, Checkpoint]:
    return {family: load_pretrained(folder) for family, folder in hf_models.items()}


def _batch(checkpoint: Checkpoint, seed: int = 0) -> dict[str, torch.Tensor]:
    """Two rows of random real ids for every stack the model has."""
    config = checkpoint.config
    generator = torch.Generator().manual_seed(seed)
    inputs = {}
    if config.has_encoder:
        inputs["src"] = torch.randint(4, config.src_vocab_size, (2, 7), generator=generator)
    if config.has_decoder:
        inputs["tgt"] = torch.randint(4, config.tgt_vocab_size, (2, 6), generator=generator)
    return inputs


def _trace(checkpoint: Checkpoint, seed: int = 0):
    model = checkpoint.model.eval()
    with torch.no_grad():
        return model(**_batch(checkpoint, seed), call=TRACE)


def _models(bundled, pretrained) -> list[tuple[str, Checkpoint]]:
    return [(n, bundled[n]) for n in BUNDLED] + [(f, pretrained[f]) for f in pretrained]


def _by_hand(checkpoint: Checkpoint, hidden: torch.Tensor) -> torch.Tensor:
    """``(d_model,)`` → ``(V,)``: the stack's final LayerNorm (pre-LN) and the generator,
    written out with torch.nn.functional."""
    model = checkpoint.model
    stack = model.decoder if checkpoint.config.has_decoder else model.encoder
    norm = stack.final_norm
    if norm is not None:
        hidden = F.layer_norm(hidden, hidden.shape[-1:], norm.weight, norm.bias, norm.eps)
    proj = model.generator.proj
    return F.linear(hidden, proj.weight, proj.bias).softmax(dim=-1)


def test_the_last_layer_is_the_models_own_distribution(bundled, pretrained):
    for name, checkpoint in _models(bundled, pretrained):
        trace = _trace(checkpoint)
        vocab = checkpoint.config.output_vocab_size
        n_layers = len(trace.decoder_layers or trace.encoder_layers)
        for batch, position in ((0, 5), (1, 2), (1, -1)):
            own = trace.logits[batch, position].softmax(dim=-1)  # (V,)
            chosen = int(own.argsort(descending=True)[3])  # the fourth most probable
            lens = logit_lens(
                checkpoint.model, trace, position, batch=batch, top_k=vocab, chosen=chosen
            )
            assert lens.layers == list(range(1, n_layers + 1)), name
            last = torch.zeros(vocab).scatter(0, lens.top_ids[-1], lens.top_probs[-1])
            torch.testing.assert_close(last, own, atol=1e-6, rtol=1e-5, msg=name)
            assert int(lens.chosen_rank[-1]) == 4, name
            torch.testing.assert_close(lens.chosen_prob[-1], own[chosen], msg=name)


def test_an_intermediate_layer_is_the_final_norm_and_generator_applied_by_hand(bundled, pretrained):
    for name, original in _models(bundled, pretrained):
        # Random norm gains and biases, so that leaving the norm's weights out would show.
        checkpoint = copy.deepcopy(original)
        with torch.no_grad():
            for module in checkpoint.model.modules():
                if getattr(module, "final_norm", None) is not None:
                    module.final_norm.weight.uniform_(0.5, 2.0)
                    module.final_norm.bias.normal_(0.0, 0.5)
        trace = _trace(checkpoint, seed=1)
        layers = trace.decoder_layers or trace.encoder_layers
        lens = logit_lens(checkpoint.model, trace, 4, batch=1, top_k=7, chosen=9)
        for row, layer in enumerate(layers):
            expected = _by_hand(checkpoint, layer.output[1, 4])
            top = expected.topk(7)
            torch.testing.assert_close(lens.top_probs[row], top.values, msg=f"{name} {row}")
            assert lens.top_ids[row].tolist() == top.indices.tolist(), f"{name} {row}"
            assert int(lens.chosen_rank[row]) == int((expected > expected[9]).sum()) + 1
            torch.testing.assert_close(lens.chosen_prob[row], expected[9])
        assert lens.final_norm == (checkpoint.config.norm == "pre")


def test_the_chosen_rank_is_right_in_and_outside_each_layer_s_top_k(bundled, pretrained):
    """The rank of the chosen id, read from a row's top k where it is among them and from the
    whole row where not, is 1 + how many ids the by-hand distribution gives more (a chosen id
    taken from one layer's top 3: inside that row's top k, outside some others')."""
    seen_inside = seen_outside = 0
    for name, checkpoint in _models(bundled, pretrained):
        trace = _trace(checkpoint, seed=2)
        layers = trace.decoder_layers or trace.encoder_layers
        middle = _by_hand(checkpoint, layers[len(layers) // 2].output[0, 3])
        chosen = int(middle.argsort(descending=True)[2])
        lens = logit_lens(checkpoint.model, trace, 3, top_k=3, chosen=chosen)
        for row, layer in enumerate(layers):
            expected = _by_hand(checkpoint, layer.output[0, 3])
            rank = int((expected > expected[chosen]).sum()) + 1
            assert int(lens.chosen_rank[row]) == rank, f"{name} layer {row + 1}"
            inside = chosen in lens.top_ids[row].tolist()
            seen_inside += inside
            seen_outside += not inside
    assert seen_inside and seen_outside  # both ways of reading the rank were taken


def test_the_lens_keeps_no_view_of_the_whole_distribution(bundled):
    """A session keeps every step's lens: each of its tensors must hold only its own numbers,
    not a view that keeps the ``(L, V)`` distribution of every layer alive."""
    checkpoint = bundled["continue"]
    lens = logit_lens(checkpoint.model, _trace(checkpoint), 2, top_k=3, chosen=5)
    for name in ("top_ids", "top_probs", "chosen_rank", "chosen_prob"):
        tensor = getattr(lens, name)
        held = tensor.untyped_storage().nbytes()
        assert held == tensor.numel() * tensor.element_size(), (name, held)


def test_gpt2_lens_equals_transformers_hidden_states_through_its_own_head(hf_models, pretrained):
    transformers = pytest.importorskip("transformers")
    ours = pretrained["gpt2"]
    theirs = transformers.GPT2LMHeadModel.from_pretrained(hf_models["gpt2"]).eval()
    ids = torch.randint(0, ours.config.tgt_vocab_size, (1, 9), generator=torch.Generator())
    with torch.no_grad():
        trace = ours.model.eval()(tgt=ids, call=TRACE)
        hidden = theirs(input_ids=ids, output_hidden_states=True).hidden_states
        n = len(trace.decoder_layers)
        # hidden_states[0] is the embeddings, [1..n-1] the blocks' outputs, and transformers
        # has already applied ln_f to the last one.
        reference = [theirs.lm_head(theirs.transformer.ln_f(h[0, 6])) for h in hidden[:n]]
        reference.append(theirs.lm_head(hidden[n][0, 6]))
        reference = torch.stack(reference).softmax(dim=-1)  # (n + 1, V)
    assert input_is_comparable(ours.config)
    lens = logit_lens(ours.model, trace, 6, top_k=5, include_input=True)
    assert lens.layers == list(range(n + 1))
    top = reference.topk(5, dim=-1)
    torch.testing.assert_close(lens.top_probs, top.values, atol=1e-5, rtol=1e-4)
    assert lens.top_ids.tolist() == top.indices.tolist()


def test_include_input_reads_the_embeddings_and_is_refused_where_meaningless(bundled, pretrained):
    bert = pretrained["bert"]  # post-LN with an embedding norm: comparable
    trace = _trace(bert)
    lens = logit_lens(bert.model, trace, 3, top_k=4, include_input=True)
    expected = _by_hand(bert, trace.encoder_layers[0].input[0, 3]).topk(4)
    torch.testing.assert_close(lens.top_probs[0], expected.values)
    assert lens.layers[0] == 0 and len(lens.layers) == len(trace.encoder_layers) + 1
    for name in BUNDLED:  # post-LN, raw √d_model-scaled embeddings
        assert not input_is_comparable(bundled[name].config)
        with pytest.raises(ValueError, match="include_input"):
            logit_lens(bundled[name].model, _trace(bundled[name]), 0, include_input=True)


def test_an_excluded_id_gets_no_probability_and_the_rest_renormalise(bundled):
    checkpoint = bundled["translate"]
    trace = _trace(checkpoint)
    own = trace.logits[0, 2]
    excluded = int(own.argmax())
    vocab = checkpoint.config.output_vocab_size
    lens = logit_lens(checkpoint.model, trace, 2, top_k=vocab, chosen=excluded, exclude=excluded)
    expected = own.index_fill(0, torch.tensor([excluded]), float("-inf")).softmax(dim=-1)
    last = torch.zeros(vocab).scatter(0, lens.top_ids[-1], lens.top_probs[-1])
    torch.testing.assert_close(last, expected, atol=1e-6, rtol=1e-5)
    assert float(lens.chosen_prob[-1]) == 0.0 and int(lens.chosen_rank[-1]) > 1


def test_bad_arguments_say_what_to_fix(bundled):
    checkpoint = bundled["reverse"]
    trace = _trace(checkpoint)
    with pytest.raises(IndexError, match="position"):
        logit_lens(checkpoint.model, trace, 6)
    with pytest.raises(IndexError, match="batch"):
        logit_lens(checkpoint.model, trace, 0, batch=2)
    with pytest.raises(ValueError, match="chosen"):
        logit_lens(checkpoint.model, trace, 0, chosen=10**6)
    with pytest.raises(ValueError, match="another model"):
        logit_lens(bundled["translate"].model, trace, 0)
    with pytest.raises(ValueError, match="no encoder layers"):
        residual_norms(_trace(bundled["continue"]), "encoder")
    with pytest.raises(ValueError, match="stack"):
        residual_norms(trace, "middle")


def _check_norms(trace, stack: str, batch: int) -> None:
    norms = residual_norms(trace, stack, batch=batch)
    layers = trace.encoder_layers if stack == "encoder" else trace.decoder_layers
    streams = [layers[0].input[batch]]
    updates = []
    names = ["input"]
    for i, layer in enumerate(layers):
        # The trace's sub-layers by their attribute names; a decoder-only layer has no cross.
        for part in ("self_attention", "cross_attention", "feed_forward"):
            update = getattr(layer, f"{part}_update")
            if update is not None:
                names.append(f"L{i + 1} {part.replace('_', '-')}")
                streams.append(getattr(layer, f"{part}_output")[batch])
                updates.append(update[batch])
    assert norms.stages == names and norms.sublayers == names[1:]
    n_positions = layers[0].input.size(1)
    assert norms.stream.shape == (len(names), n_positions)
    assert norms.added.shape == (len(names) - 1, n_positions)
    for s, x in enumerate(streams):
        for t in range(n_positions):
            assert float(norms.stream[s, t]) == pytest.approx(float(x[t].pow(2).sum().sqrt()))
    for s, u in enumerate(updates):
        torch.testing.assert_close(norms.added[s], torch.linalg.vector_norm(u, dim=-1))
    if trace.config.norm == "pre":  # the stream is exactly the running sum of the updates
        for s, u in enumerate(updates):
            torch.testing.assert_close(streams[s + 1], streams[s] + u)


def test_residual_norms_are_the_norms_of_the_traces_streams_and_updates(bundled, pretrained):
    for _name, checkpoint in _models(bundled, pretrained):
        trace = _trace(checkpoint)
        for stack in ("encoder", "decoder"):
            if getattr(trace, f"{stack}_layers"):
                _check_norms(trace, stack, batch=1)
    norms = residual_norms(_trace(bundled["translate"]), "decoder")
    assert norms.stages[1:4] == ["L1 self-attention", "L1 cross-attention", "L1 feed-forward"]
    gpt2 = residual_norms(_trace(pretrained["gpt2"]), "decoder")
    assert gpt2.norm == "pre" and "cross-attention" not in " ".join(gpt2.stages)


# -- figures ------------------------------------------------------------------------------------


def test_the_lens_figure_shows_each_layers_top_tokens_and_the_chosen_ones_rank(pretrained):
    from transformer.figures.lens import logit_lens_figure

    gpt2 = pretrained["gpt2"]
    trace = _trace(gpt2)
    lens = logit_lens(gpt2.model, trace, 4, top_k=5, chosen=7, include_input=True)
    figure = logit_lens_figure(lens, lambda i: f"w<{i}>", position_label="4:x")
    heatmap, bars = figure.data
    n = len(trace.decoder_layers)
    ranks = lens.chosen_rank.tolist()
    expected_rows = [f"embeddings · chosen #{ranks[0]}"]
    expected_rows += [f"layer {i} · chosen #{ranks[i]}" for i in range(1, n + 1)]
    assert list(heatmap.y) == expected_rows  # first layer at the bottom, the last on top
    torch.testing.assert_close(torch.tensor(heatmap.z), lens.top_probs)
    assert heatmap.customdata[1][0] == f"w&lt;{int(lens.top_ids[1, 0])}&gt; #{lens.top_ids[1, 0]}"
    assert list(bars.x) == pytest.approx(lens.chosen_prob.tolist())
    outlined = {(int(s.y0 + 0.5), int(s.x0 + 0.5)) for s in figure.layout.shapes}
    assert outlined == {tuple(i) for i in (lens.top_ids == 7).nonzero().tolist()}
    assert figure.layout.height and "4:x" in figure.layout.title.text
    large = logit_lens_figure(lens, large_font=True)
    assert large.layout.font.size > figure.layout.font.size
    assert large.layout.height > figure.layout.height


def test_the_residual_figure_puts_stages_on_rows_and_stays_small(pretrained):
    from transformer.figures.lens import residual_norms_figure

    gpt2 = pretrained["gpt2"]
    with torch.no_grad():
        trace = gpt2.model(tgt=torch.randint(0, 90, (1, 60)), call=TRACE)
    norms = residual_norms(trace, "decoder")
    labels = [f"{i}:w" for i in range(60)]
    figure = residual_norms_figure(norms, labels)
    stream, added = figure.data
    assert list(stream.y) == ["embeddings", "L1 attn", "L1 FFN", "L2 attn", "L2 FFN"]
    torch.testing.assert_close(torch.tensor(stream.z), norms.stream)
    torch.testing.assert_close(torch.tensor(added.z[1:]), norms.added)
    assert all(v != v for v in added.z[0])  # no update at the input: NaN, drawn grey
    assert stream.texttemplate == ""  # 300 cells: too many to write, hover has them
    assert len(figure.to_json()) < 20_000 and figure.layout.height
    with pytest.raises(ValueError, match="labels"):
        residual_norms_figure(norms, labels[:-1])


def test_residual_norms_that_one_position_dwarfs_are_coloured_by_their_logarithm():
    """SmolLM2's first position carries a stream about 100 times the others' (22,700 against 2
    to 900): on a linear scale every other cell would be one colour. Such a panel is coloured
    by log10 of the norms, ticked in norms, and the hover and cells still give the norms."""
    from transformer.figures.lens import residual_norms_figure
    from transformer.generation.lens import ResidualNorms

    rng = np.random.default_rng(0)
    stream = rng.uniform(2.0, 900.0, size=(5, 6)).astype(np.float32)
    stream[2:, 0] = 22_700.0  # the first position, after layer 1's attention
    added = rng.uniform(5.0, 60.0, size=(4, 6)).astype(np.float32)  # one size: stays linear
    stages = [
        "input",
        "L1 self-attention",
        "L1 feed-forward",
        "L2 self-attention",
        "L2 feed-forward",
    ]
    norms = ResidualNorms(
        "decoder", stages, torch.from_numpy(stream), stages[1:], torch.from_numpy(added), "pre"
    )
    figure = residual_norms_figure(norms, [f"{i}:w" for i in range(6)], numbers=True)
    logged, linear = figure.data
    np.testing.assert_allclose(np.asarray(logged.z, float), np.log10(stream), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(logged.customdata, float), stream)
    assert "customdata" in logged.hovertemplate and "customdata" in logged.texttemplate
    axis = figure.layout.coloraxis
    assert axis.cmin == 0.0 and axis.cmax == pytest.approx(np.log10(22_700.0))
    assert "log scale" in axis.colorbar.title.text
    assert list(axis.colorbar.ticktext) == ["1", "10", "100", "1,000", "10,000"]
    assert list(axis.colorbar.tickvals) == [0.0, 1.0, 2.0, 3.0, 4.0]
    # The cells a linear scale would have painted alike now span most of the colour scale.
    others = np.log10(stream[:, 1:])
    assert (others.max() - others.min()) / (axis.cmax - axis.cmin) > 0.5
    np.testing.assert_array_equal(np.asarray(linear.z[1:], float), added)
    assert "%{z" in linear.hovertemplate and linear.customdata is None
    assert figure.layout.coloraxis2.cmin == 0.0 and figure.layout.coloraxis2.cmax is None
    assert "log" not in figure.layout.coloraxis2.colorbar.title.text
    # A norm of 0 (a sub-layer switched off) sits at the bottom of a log scale, not at -inf.
    stream[1, 3] = 0.0
    norms = ResidualNorms(
        "decoder", stages, torch.from_numpy(stream), stages[1:], torch.from_numpy(added), "pre"
    )
    zeroed = residual_norms_figure(norms, [f"{i}:w" for i in range(6)])
    z = np.asarray(zeroed.data[0].z, float)
    assert np.isfinite(z).all() and z[1, 3] == zeroed.layout.coloraxis.cmin == 0.0
