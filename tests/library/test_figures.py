"""The figure builders: right numbers in the right cells, masks visible, labels unique,
payloads small. Traces come from a small random model with padding in the batch."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from conftest import TINY_CONFIG, shown

from transformer.core.embeddings import sinusoidal_table
from transformer.core.model import Transformer
from transformer.core.run import TRACE, Call, Capture
from transformer.core.trace import AttentionRecord
from transformer.figures import (
    attention_difference_figure,
    attention_grid,
    attention_heatmap,
    causal_growth_figure,
    cross_attention_step_figure,
    downsample_attention,
    embedding_norms_figure,
    embedding_sum_figure,
    grid_figure,
    head_figure,
    masks_figure,
    positional_curves_figure,
    positional_encoding_figure,
    positional_similarity,
    positional_similarity_figure,
    scores_and_weights_figure,
    token_labels,
    top_k_figure,
    training_curves_figure,
)
from transformer.lab.interventions import Intervention

CONFIG = TINY_CONFIG.replace(d_model=16, d_ff=32)
SRC_LEN, TGT_LEN = 7, 5


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(CONFIG).eval()


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, 30, (2, SRC_LEN), generator=g)
    tgt = torch.randint(1, 30, (2, TGT_LEN), generator=g)
    src[1, 5:] = CONFIG.pad_id  # sequence 1: two padded source keys
    tgt[1, 4:] = CONFIG.pad_id  # and one padded target key
    return src, tgt


@pytest.fixture(scope="module")
def trace(model, batch):
    with torch.no_grad():
        return model(*batch, call=TRACE)


SRC_LABELS = token_labels(["the", "cat", "the", "mat", "sat", "<pad>", "<pad>"])
TGT_LABELS = token_labels(["<s>", "le", "chat", "le", "<pad>"])


def heatmap(fig: go.Figure) -> go.Heatmap:
    (trace,) = [t for t in fig.data if isinstance(t, go.Heatmap)]
    return trace


def z_of(trace: go.Heatmap) -> np.ndarray:
    return np.asarray(trace.z, dtype=np.float64)


def test_token_labels_are_unique_and_in_order():
    labels = token_labels(["the", "cat", "the", "the"])
    assert labels == ["0:the", "1:cat", "2:the", "3:the"]
    assert len(set(labels)) == len(labels)


@pytest.mark.parametrize(
    ("kind", "layer", "queries", "keys"),
    [
        ("encoder_self", 1, SRC_LABELS, SRC_LABELS),
        ("decoder_self", 0, TGT_LABELS, TGT_LABELS),
        ("cross", 1, TGT_LABELS, SRC_LABELS),
    ],
)
def test_head_figure_shows_that_heads_weights_with_masked_cells_blank(
    trace, kind, layer, queries, keys
):
    record = trace.attention(kind, layer)
    fig = head_figure(record, 1, 2, queries, keys)
    hm = heatmap(fig)
    z = z_of(hm)
    masked = record.masked[1, 0].numpy()
    assert np.array_equal(np.isnan(z), masked)  # NaN exactly where the mask acted
    expected = record.weights[1, 2].numpy()
    assert np.allclose(z[~masked], expected[~masked], atol=1e-7)
    assert hm.z.dtype == np.float32
    assert hm.hoverongaps is False and hm.text is None and "query" in hm.hovertemplate
    assert shown(hm.y) == queries and shown(hm.x) == keys
    assert fig.layout.yaxis.title.text == "query" and fig.layout.xaxis.title.text == "key"
    assert fig.layout.plot_bgcolor == "#b0b0b0"  # the grey that masked (NaN) cells show
    # Each query row gets 18 px for its label, plus 120 px of margins, within 320..900 px.
    assert fig.layout.height == min(900, max(320, 120 + 18 * len(queries)))
    # A different head or batch row is a different picture: the builder did not mix them up.
    assert not np.allclose(
        z_of(heatmap(head_figure(record, 1, 1, queries, keys)))[~masked], z[~masked]
    )


def test_masked_cells_of_this_batch_include_padding_and_causal(trace):
    dec = trace.attention("decoder_self", 0)
    z = z_of(heatmap(head_figure(dec, 1, 0, TGT_LABELS, TGT_LABELS)))
    assert np.isnan(z[np.triu_indices(TGT_LEN, 1)]).all()  # the future
    assert np.isnan(z[:, 4]).all()  # the padded key
    assert not np.isnan(z[np.tril_indices(4)]).any()  # everything else is drawn
    enc_row0 = z_of(
        heatmap(head_figure(trace.attention("encoder_self", 0), 0, 0, SRC_LABELS, SRC_LABELS))
    )
    assert not np.isnan(enc_row0).any()  # sequence 0 has no padding


def test_scores_figure_and_scores_beside_weights(trace):
    record = trace.attention("encoder_self", 0)
    masked = record.masked[1, 0].numpy()
    scores = z_of(heatmap(head_figure(record, 1, 3, SRC_LABELS, SRC_LABELS, values="scores")))
    assert np.array_equal(np.isnan(scores), masked)
    assert np.allclose(scores[~masked], record.scores[1, 3].numpy()[~masked], atol=1e-6)

    fig = scores_and_weights_figure(record, 1, 3, SRC_LABELS, SRC_LABELS)
    left, right = fig.data
    assert left.coloraxis == "coloraxis" and right.coloraxis == "coloraxis2"
    assert np.allclose(np.asarray(left.z)[~masked], record.scores[1, 3].numpy()[~masked], atol=1e-6)
    assert np.allclose(np.asarray(right.z)[~masked], record.weights[1, 3].numpy()[~masked])
    assert np.isnan(np.asarray(right.z)[masked]).all()
    assert fig.layout.coloraxis.cmid == 0 and fig.layout.coloraxis2.cmax == 1


def test_labels_must_be_unique_and_match_the_length(trace):
    record = trace.attention("encoder_self", 0)
    with pytest.raises(ValueError, match="unique"):
        head_figure(record, 0, 0, ["a"] * SRC_LEN, SRC_LABELS)
    with pytest.raises(ValueError, match="labels"):
        head_figure(record, 0, 0, SRC_LABELS[:3], SRC_LABELS)


def test_grid_tiles_every_head_of_every_layer_on_one_colour_scale(trace):
    records = trace.attention_records("cross")
    fig = grid_figure(records, 1, TGT_LABELS, SRC_LABELS)
    (hm,) = fig.data  # one heatmap, not a subplot per head
    assert hm.coloraxis == "coloraxis" and fig.layout.coloraxis.colorscale
    z = z_of(hm)
    n_layers, n_heads = len(records), CONFIG.n_heads
    gutter = 1
    assert z.shape == (
        n_layers * (TGT_LEN + gutter) - gutter,
        n_heads * (SRC_LEN + gutter) - gutter,
    )
    for layer, record in enumerate(records):
        for head in range(n_heads):
            r0, c0 = layer * (TGT_LEN + gutter), head * (SRC_LEN + gutter)
            tile = z[r0 : r0 + TGT_LEN, c0 : c0 + SRC_LEN] / 1000  # shipped as ‰
            assert np.allclose(tile, record.weights[1, head].numpy(), atol=5e-4)
    texts = [a.text for a in fig.layout.annotations]
    assert sorted(texts) == sorted(
        [f"head {h + 1}" for h in range(n_heads)] + [f"layer {lay + 1}" for lay in range(n_layers)]
    )
    assert len(set(hm.x)) == len(hm.x) and len(set(hm.y)) == len(hm.y)
    assert "downsampled" not in fig.layout.title.text
    # Masked cells (padded source keys 5, 6) are covered by one grey path per layer.
    masked_paths = [s for s in fig.layout.shapes if s.type == "path"]
    assert len(masked_paths) == n_layers
    assert all(s.fillcolor == masked_paths[0].fillcolor for s in masked_paths)


def test_grid_masked_shapes_cover_exactly_the_masked_cells():
    rng = np.random.default_rng(0)
    weights = rng.random((1, 2, 6, 6)).astype(np.float32)
    masked = rng.random((6, 6)) < 0.4
    fig = attention_grid(weights, masked)
    covered = np.zeros((6, 6 * 2 + 1), bool)
    for shape in fig.layout.shapes:
        if shape.type != "path":
            continue
        for piece in shape.path.split("Z")[:-1]:  # "Mx0,y0Hx1Vy1Hx0"
            x0, rest = piece[1:].split(",")
            y0, rest = rest.split("H", 1)
            x1, rest = rest.split("V")
            y1 = rest.split("H")[0]
            rows = slice(round(float(y0) + 0.5), round(float(y1) + 0.5))
            cols = slice(round(float(x0) + 0.5), round(float(x1) + 0.5))
            assert not covered[rows, cols].any()  # no overlap
            covered[rows, cols] = True
    assert np.array_equal(covered[:, :6], masked) and np.array_equal(covered[:, 7:], masked)
    assert not covered[:, 6].any()  # the gutter


def test_long_sequences_are_downsampled_and_say_so():
    rng = np.random.default_rng(0)
    weights = rng.random((2, 3, 200, 200)).astype(np.float32)
    weights /= weights.sum(-1, keepdims=True)
    masked = np.zeros((200, 200), bool)
    masked[:, 190:] = True
    fig = attention_grid(weights, masked, max_tile=64)
    assert "downsampled 200→50" in fig.layout.title.text
    z = z_of(fig.data[0])
    assert z.shape[0] <= 2 * 64 + 1 and z.shape[1] <= 3 * 64 + 2
    short = attention_grid(weights[:, :, :100, :100], masked[:100, :100])
    assert "downsampled" not in short.layout.title.text


def test_downsampling_keeps_attention_mass_and_marks_only_fully_masked_blocks():
    weights = np.full((1, 10, 10), 0.1, np.float32)  # uniform rows summing to 1
    masked = np.zeros((10, 10), bool)
    masked[:, 9] = True
    pooled, pooled_masked, fq, fk = downsample_attention(weights, masked, 4)
    assert (fq, fk) == (3, 3) and pooled.shape == (1, 4, 4)
    assert np.allclose(pooled.sum(-1), 1.0)  # rows still sum to one
    assert np.allclose(pooled[0, :, 3], 0.1)  # last key block has 1 key
    assert pooled_masked[:, 3].all() and not pooled_masked[:, :3].any()


def test_masks_figure_draws_padding_causal_and_combined(trace):
    real = trace.target.real_tokens[1]  # (T,) True for real tokens
    fig = masks_figure(real, TGT_LABELS, TGT_LABELS, causal=trace.causal)
    pad, causal, combined = (np.asarray(t.z) for t in fig.data)
    assert np.array_equal(pad, np.broadcast_to(real.numpy(), (TGT_LEN, TGT_LEN)))
    assert np.array_equal(causal, trace.causal.numpy())
    assert np.array_equal(
        combined.astype(bool), trace.attention("decoder_self", 0).mask[1, 0].numpy()
    )
    assert {t.coloraxis for t in fig.data} == {"coloraxis"}
    assert not real.all()  # the row drawn above is padded: its combination differs from both
    # An unpadded row: padding masks nothing, so the combination is the causal mask, drawn once.
    unpadded = torch.ones(TGT_LEN, dtype=torch.bool)
    fig = masks_figure(unpadded, TGT_LABELS, TGT_LABELS, causal=trace.causal)
    pad, causal = (np.asarray(t.z) for t in fig.data)
    assert pad.all() and np.array_equal(causal, trace.causal.numpy())
    assert [a.text for a in fig.layout.annotations] == [
        "padding (keys only)",
        "causal = combined (nothing is padded)",
    ]
    only_padding = masks_figure(trace.source.real_tokens[1], SRC_LABELS, SRC_LABELS)
    assert len(only_padding.data) == 1


def test_difference_map_of_a_what_if(model, batch):
    with torch.no_grad():
        leak = model(
            *batch, call=Call(ops=Intervention(causal_mask=False).operations, capture=Capture())
        )
        base = model(*batch, call=TRACE)
    before = base.attention("decoder_self", 0)
    after = leak.attention("decoder_self", 0)
    both = (before.masked & after.masked)[0, 0]
    fig = attention_difference_figure(
        before.weights[0, 1], after.weights[0, 1], TGT_LABELS, TGT_LABELS, masked=both
    )
    hm = heatmap(fig)
    z = z_of(hm)
    expected = (after.weights[0, 1] - before.weights[0, 1]).numpy()
    assert np.allclose(z, expected, atol=1e-6)  # nothing masked in both: no NaN
    assert np.abs(z[np.triu_indices(TGT_LEN, 1)]).max() > 0  # the leak shows above the diagonal
    assert hm.zmin == -hm.zmax  # diverging, centred on zero


def test_positional_encoding_heatmap_is_the_table():
    table = sinusoidal_table(50, 16)
    fig = positional_encoding_figure(table)
    z = z_of(heatmap(fig))
    assert np.array_equal(z, table.numpy())
    assert heatmap(fig).z.dtype == np.float32


def test_positional_curves_and_similarity():
    table = sinusoidal_table(40, 16)
    curves = positional_curves_figure(table, dims=(0, 3))
    assert [t.name.split(" ")[1] for t in curves.data] == ["0", "3"]
    assert np.allclose(np.asarray(curves.data[1].y), table[:, 3].numpy())
    with pytest.raises(ValueError):
        positional_curves_figure(table, dims=(16,))
    dot = positional_similarity(table, "dot")
    assert np.allclose(dot, (table @ table.T).numpy(), atol=1e-4)
    assert np.allclose(np.diag(dot), 8.0, atol=1e-4)  # sin² + cos² per pair, d_model/2 pairs
    cosine = z_of(heatmap(positional_similarity_figure(table)))
    assert np.allclose(np.diag(cosine), 1.0, atol=1e-6)
    assert np.allclose(cosine, cosine.T, atol=1e-6)


def test_embedding_sum_and_norms(trace):
    emb = trace.source.token_embedding[0]
    pe = trace.source.positional
    fig = embedding_sum_figure(emb, pe, SRC_LABELS)
    e, p, s = (np.asarray(t.z) for t in fig.data)
    assert np.allclose(e, emb.numpy()) and np.allclose(p, pe.numpy())
    assert np.allclose(s, (emb + pe).numpy(), atol=1e-6)
    assert {t.coloraxis for t in fig.data} == {"coloraxis"}
    norms = embedding_norms_figure(emb, pe, SRC_LABELS)
    by_name = {t.name: np.asarray(t.y) for t in norms.data}
    scaled = by_name["embedding × √d_model"]
    assert np.allclose(
        by_name["embedding (unscaled)"] * math.sqrt(CONFIG.d_model), scaled, rtol=1e-5
    )
    assert np.allclose(by_name["positional encoding"], math.sqrt(CONFIG.d_model / 2), atol=1e-4)
    assert shown(norms.data[0].x) == SRC_LABELS


def test_top_k_bars_are_sorted_and_the_chosen_one_highlighted():
    probs = torch.softmax(torch.tensor([0.1, 2.0, 1.0, 3.0, 0.5, 1.5]), 0)
    vocab = ["a", "b", "c", "d", "e", "b"]  # two ids with the same text
    fig = top_k_figure(probs, vocab, k=4, chosen=2)
    (bars,) = fig.data
    x = np.asarray(bars.x)
    assert np.all(np.diff(x) <= 0)  # most likely first (drawn on top)
    assert list(bars.y) == ["d #3", "b #1", "b #5", "c #2"]
    colors = list(bars.marker.color)
    assert colors[3] != colors[0] and colors.count(colors[3]) == 1
    # A sampled token outside the top k is still shown, with its rank.
    outside = top_k_figure(probs, vocab, k=2, chosen=0)
    assert len(outside.data[0].y) == 3 and "rank 6" in outside.data[0].y[-1]
    assert list(outside.data[0].marker.color).count(outside.data[0].marker.color[-1]) == 1


def test_cross_attention_step_has_a_row_per_head_and_the_mean(trace):
    record = trace.attention("cross", 1)
    weights = record.weights[1, :, -1]  # (H, Ts): the newest query
    masked = record.masked[1, 0, -1]
    fig = cross_attention_step_figure(weights, SRC_LABELS, masked=masked, layer=1)
    z = z_of(heatmap(fig))
    assert list(heatmap(fig).y) == [f"head {h + 1}" for h in range(CONFIG.n_heads)] + ["mean"]
    assert np.isnan(z[:, 5:]).all() and not np.isnan(z[:, :5]).any()
    assert np.allclose(z[:-1, :5], weights[:, :5].numpy())
    assert np.allclose(z[-1, :5], weights[:, :5].numpy().mean(0), atol=1e-7)


def test_causal_growth_stacks_cached_steps_into_a_lower_triangle(model):
    tgt = torch.tensor([[3, 7, 9, 4]])
    rows = []
    with torch.no_grad():
        encoded = model.encode(torch.tensor([[5, 6, 7]]))
        cache = model.new_cache()
        for step in range(tgt.size(1)):
            decoded = model.decode(tgt[:, step : step + 1], encoded, cache=cache, call=TRACE)
            rows.append(decoded.layers[0].self_attention.weights[0, 2, 0])
        full = model.decode(tgt, encoded, call=TRACE).layers[0].self_attention.weights[0, 2]
    labels = token_labels(["<s>", "le", "chat", "noir"])
    fig = causal_growth_figure(rows, labels, head=2, layer=0)
    z = z_of(heatmap(fig))
    assert np.isnan(z[np.triu_indices(4, 1)]).all()
    assert np.allclose(z[np.tril_indices(4)], full.numpy()[np.tril_indices(4)], atol=1e-5)
    assert shown(heatmap(fig).y) == labels
    partial = z_of(heatmap(causal_growth_figure(rows[:2], labels)))  # mid-generation
    assert partial.shape == (2, 4) and np.isnan(partial[:, 2:]).all()
    with pytest.raises(ValueError):
        causal_growth_figure(rows, labels[:2])


def test_training_curves_from_records_with_sparse_validation():
    history = [
        {"step": 10 * i, "train_loss": 3.0 - 0.1 * i, "train_accuracy": 0.05 * i}
        | ({"val_loss": 3.1 - 0.1 * i, "val_accuracy": 0.04 * i} if i % 3 == 0 else {})
        for i in range(10)
    ]
    fig = training_curves_figure(history)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"train_loss", "val_loss", "train_accuracy", "val_accuracy"}
    assert list(by_name["val_loss"].x) == [0, 30, 60, 90]
    assert by_name["val_loss"].line.dash == "dash" and by_name["train_loss"].line.dash == "solid"
    assert by_name["train_accuracy"].yaxis == "y2" and by_name["train_loss"].yaxis == "y"
    empty = training_curves_figure([])
    assert not empty.data and "no training records" in empty.layout.annotations[0].text


def test_large_font_makes_text_bigger(trace):
    record = trace.attention("encoder_self", 0)
    small = head_figure(record, 0, 0, SRC_LABELS, SRC_LABELS)
    large = head_figure(record, 0, 0, SRC_LABELS, SRC_LABELS, large_font=True)
    assert large.layout.font.size > small.layout.font.size
    table = sinusoidal_table(10, 16)
    assert (
        positional_encoding_figure(table, large_font=True).layout.font.size
        == large.layout.font.size
    )
    assert (
        top_k_figure(torch.ones(5) / 5, large_font=True).layout.font.size == large.layout.font.size
    )


def test_builders_are_deterministic(trace):
    record = trace.attention("decoder_self", 1)
    one = grid_figure(trace.attention_records("decoder_self"), 1, TGT_LABELS, TGT_LABELS).to_json()
    two = grid_figure(trace.attention_records("decoder_self"), 1, TGT_LABELS, TGT_LABELS).to_json()
    assert one == two
    assert head_figure(record, 1, 0).to_json() == head_figure(record, 1, 0).to_json()


# -- payload sizes, on synthetic weights of realistic shape ---------------------------------


def softmax_weights(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    logits = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_single_head_payload_is_small():
    labels = token_labels([f"tok{i % 9}" for i in range(64)])
    weights = softmax_weights((64, 64))
    causal = np.triu(np.ones((64, 64), bool), 1)
    size = len(attention_heatmap(weights, labels, labels, masked=causal).to_json())
    assert size < 40_000


@pytest.mark.parametrize(("length", "limit"), [(64, 700_000), (512, 3_000_000)])
def test_grid_payload_is_bounded(length, limit):
    labels = token_labels([f"tok{i % 9}" for i in range(length)])
    weights = softmax_weights((6, 8, length, length))
    causal = np.triu(np.ones((length, length), bool), 1)
    fig = attention_grid(weights, causal, labels, labels)
    assert len(fig.to_json()) < limit
    assert ("downsampled" in fig.layout.title.text) == (length > 128)


def _long_record(length: int) -> AttentionRecord:
    """A (1, 1, T, T) causal record with real softmax weights."""

    generator = torch.Generator().manual_seed(1)
    mask = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
    scores = torch.randn(1, 1, length, length, generator=generator).masked_fill(
        ~mask, float("-inf")
    )
    return AttentionRecord("decoder_self", 0, scores, torch.softmax(scores, -1), mask)


def test_long_single_head_keeps_weights_exact_and_pools_scores():
    record = _long_record(300)
    fig = scores_and_weights_figure(record, 0, 0)
    scores, weights = fig.data
    assert np.array_equal(
        z_of(weights), np.where(record.mask[0, 0], record.weights[0, 0], np.nan), equal_nan=True
    )
    assert z_of(scores).shape == (100, 100)  # 300 → blocks of 3
    block = record.scores[0, 0, :3, :3].numpy()
    assert z_of(scores)[0, 0] == pytest.approx(block[np.isfinite(block)].mean(), rel=1e-5)
    assert np.isnan(z_of(scores)[0, 5])  # a block wholly in the future stays masked
    assert "scores downsampled 300×300→100×100, weights exact" in fig.layout.title.text
    assert "downsampled" not in scores_and_weights_figure(_long_record(64), 0, 0).layout.title.text
    assert len(fig.to_json()) < 2_000_000


def test_long_difference_map_is_pooled_and_says_so():
    before = torch.softmax(torch.randn(200, 200), -1)
    after = torch.softmax(torch.randn(200, 200), -1)
    fig = attention_difference_figure(before, after)
    z = z_of(heatmap(fig))
    assert z.shape == (100, 100) and "downsampled 200×200→100×100" in fig.layout.title.text
    # Pooling is linear: the pooled change is the change of the pooled mass.
    expected = (after - before)[:2, :2].sum(-1).mean()
    assert z[0, 0] == pytest.approx(float(expected), abs=1e-5)


def test_long_wide_embedding_maps_average_dimensions_in_blocks_and_stay_small():
    """MiniLM at 512 tokens: five 512 × 384 maps would ship megabytes; the figure averages
    dimensions in blocks (recomputed here) and says so, and short inputs stay exact."""
    from transformer.figures.positional import embedding_sum_figure

    rng = np.random.default_rng(0)
    emb, pe = rng.normal(size=(512, 384)), rng.normal(size=(512, 384))
    labels = [f"{i}:w" for i in range(512)]
    figure = embedding_sum_figure(emb, pe, labels, scaled=False)
    block = 384 * 512 // 65_536 + 1  # the smallest power of two that fits the budget: 4
    assert block == 4
    expected = emb.reshape(512, -1, block).mean(-1)
    assert np.allclose(np.asarray(figure.data[0].z, dtype=float), expected, atol=1e-6)
    assert "mean of 4" in figure.layout.xaxis.title.text
    assert len(figure.to_json()) < 3_000_000
    short = embedding_sum_figure(emb[:8], pe[:8], labels[:8], scaled=False)
    assert np.allclose(np.asarray(short.data[0].z, dtype=float), emb[:8], atol=1e-6)
    assert short.layout.xaxis.title.text == "dimension"


def test_grid_tick_labels_show_the_pieces_where_they_fit_and_only_there():
    weights = np.full((3, 4, 8, 6), 1 / 6, np.float32)
    queries = [f"{i}:question" for i in range(8)]
    keys = [f"{i}:k" for i in range(6)]
    small = attention_grid(weights, query_labels=queries, key_labels=keys)
    # every head's keys under the bottom tiles, every layer's queries (cut to 9 characters)
    assert list(small.layout.xaxis.ticktext) == keys * 4
    assert list(small.layout.yaxis.ticktext) == [q[:8] + "…" for q in queries] * 3
    # each tick names the column or row it sits on (the hover's category label)
    assert [v.split(" · key ")[1] for v in small.layout.xaxis.tickvals] == keys * 4
    big = np.full((6, 12, 40, 40), 1 / 40, np.float32)
    crowded = attention_grid(big, key_labels=[f"{i}:k" for i in range(40)])
    assert not crowded.layout.xaxis.showticklabels and not crowded.layout.yaxis.showticklabels


def test_the_step_by_step_triangle_keeps_its_cells_square_ish_from_the_first_step():
    from transformer.figures import causal_growth_figure

    first = causal_growth_figure([np.ones(1, np.float32)], ["0:[BOS]"])
    grown = causal_growth_figure(
        [np.full(i + 1, 1 / (i + 1), np.float32) for i in range(60)],
        [f"{i}:t" for i in range(60)],
    )
    one_cell_px = first.layout.xaxis.domain[1] * 900  # width of the one cell on a 900 px plot
    row_px = first.layout.height - 140  # the one row's height, margins aside
    assert one_cell_px < 2 * row_px  # a small corner, not a block across the panel
    assert grown.layout.xaxis.domain[1] == 1.0  # sixty keys take the whole width
    assert first.data[0].colorbar.x <= first.layout.xaxis.domain[1] + 0.05  # beside the cells


@pytest.mark.parametrize("large_font", [False, True])
def test_the_step_by_step_triangle_stays_readable_in_large_font(large_font):
    """In Large font the first steps drew a 100 × 60 px plot (a label
    dropped, the colour bar's numbers on top of each other) and long runs squeezed the rows
    below their labels' height, so plotly hid every other one."""
    font = 20 if large_font else 13
    labels = [f"{i}:▁minou" for i in range(40)]
    for n in (1, 3, 40):
        rows = [np.full(i + 1, 1 / (i + 1), np.float32) for i in range(n)]
        fig = causal_growth_figure(rows, labels[:n], large_font=large_font)
        # Room the figure leaves for its title and the rotated key labels below: 80 px for
        # the title, font × 0.6 px per character of the longest label, 60 px for the axis title.
        reserved = 80 + 60 + 0.6 * font * max(len(label) for label in labels[:n])
        plot_height = fig.layout.height - reserved
        assert plot_height >= 10 * font, (n, fig.layout.height)  # the colour bar's 5 numbers
        assert plot_height / n >= 1.4 * font, (n, fig.layout.height)  # a label per row
        # On a 1280 px page the panel's plot area is about 1,000 px wide.
        assert fig.layout.xaxis.domain[1] * 1000 >= 250, n


@pytest.mark.parametrize("large", [False, True])
def test_a_placeholders_message_is_broken_into_lines_that_fit_a_narrow_column(large: bool) -> None:
    """Plotly never wraps an annotation: the What-if panel's sentence, wider than the column
    beside the tour's sidebar, was cut at both ends."""
    from transformer.figures.attention import PLACEHOLDER_LINE, placeholder_figure

    text = "Tick a what-if switch or choose one of the seeds' mistakes to see what it changes"
    shown = placeholder_figure("What-if", text, large_font=large).layout.annotations[0].text
    lines = shown.split("<br>")
    assert len(lines) > 1 and max(map(len, lines)) <= PLACEHOLDER_LINE
    assert " ".join(lines) == text  # every word, in order
