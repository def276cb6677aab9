"""The Attention tab on every kind of model: bundled, the shipped MiniLM (BERT), and tiny random
GPT-2 and Marian models built with ``transformers`` and loaded through the registry.

Each check compares the tab's figures with an independent computation: a direct forward pass of
the model (with the what-if's Intervention built by hand), the tokenizer's own padding, the
model's configuration, ``json`` sizes of the figures.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transformer.core.run import TRACE, Call, Capture
from transformer.core.special import PAD_ID
from transformer.lab.interventions import Intervention
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs import attention

transformers = pytest.importorskip("transformers")

CROSS = "cross-attention (decoder → encoder)"
ENCODER_SELF = "encoder self-attention"
DECODER_SELF = "decoder masked self-attention"
MINILM = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def folders(tiny_hf_model) -> dict[str, str]:
    """Tiny random GPT-2 (3 layers, 2 heads) and Marian (2 layers, 4 heads) folders."""
    gpt2 = tiny_hf_model("gpt2", layers=3, heads=2)
    return {"gpt2": str(gpt2), "marian": str(tiny_hf_model("marian"))}


@pytest.fixture(scope="module")
def registry(folders: dict[str, str]) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), [folders["gpt2"], folders["marian"]])


def _z(trace) -> np.ndarray:
    return np.asarray(trace.z, dtype=np.float64)


# -- ranges and kinds follow the model --------------------------------------------------------


def _expected(model: torch.nn.Module) -> tuple[set[str], int, dict[str, int]]:
    """Kinds, heads and layers per kind, read off the model's own modules."""
    layers: dict[str, int] = {}
    heads = set()
    if getattr(model, "encoder", None) is not None:
        layers[ENCODER_SELF] = len(model.encoder.layers)
        heads |= {layer.self_attention.n_heads for layer in model.encoder.layers}
    if getattr(model, "decoder", None) is not None:
        layers[DECODER_SELF] = len(model.decoder.layers)
        heads |= {layer.self_attention.n_heads for layer in model.decoder.layers}
        cross = [layer for layer in model.decoder.layers if layer.cross_attention is not None]
        if cross:
            layers[CROSS] = len(cross)
    (n_heads,) = heads
    return set(layers), n_heads, layers


def _cases(registry, folders):
    cases = {
        name: _expected(registry.checkpoint(name, None).model)
        for name in [*registry.bundled.models, folders["gpt2"], folders["marian"], MINILM]
    }
    # The transformers configurations above, and MiniLM's published shape (6 layers x 12 heads).
    assert cases[folders["gpt2"]] == ({DECODER_SELF}, 2, {DECODER_SELF: 3})
    assert cases[folders["marian"]] == (
        {ENCODER_SELF, DECODER_SELF, CROSS},
        4,
        dict.fromkeys([ENCODER_SELF, DECODER_SELF, CROSS], 2),
    )
    assert cases[MINILM] == ({ENCODER_SELF}, 12, {ENCODER_SELF: 6})
    return cases


def _choices(radio) -> set[str]:
    return {c[0] if isinstance(c, (tuple, list)) else c for c in radio.choices}


def test_kinds_and_slider_ranges_follow_each_model(registry, folders):
    for name, (kinds, n_heads, layers) in _cases(registry, folders).items():
        for kind in kinds:
            kind_radio, layer, head, row = attention.controls(
                registry, "w3 w4\nw5\nw6 w7 w8", name, kind, 99, 99, 99, SessionModels()
            )
            assert _choices(kind_radio) == kinds, name
            assert kind_radio.value == kind
            assert (layer.maximum, head.maximum) == (layers[kind], n_heads), (name, kind)
            assert (layer.value, head.value) == (layers[kind], n_heads)  # clamped
            assert row.maximum == 3 and row.value == 3


def test_a_kind_the_model_lacks_is_replaced_and_sentences_set_the_slider(registry, folders):
    kind, _, _, row = attention.controls(
        registry, "the cat\n\n", MINILM, CROSS, 2, 1, 3, SessionModels()
    )
    assert kind.value == ENCODER_SELF
    assert row.value == 1 and row.visible is False
    kind, *_ = attention.controls(registry, "w3", folders["gpt2"], ENCODER_SELF, 1, 1, 1, None)
    assert kind.value == DECODER_SELF


# -- the single head is the model's own weights -----------------------------------------------


def _pieces(checkpoint, sentences, add_bos):
    rows = [
        checkpoint.tokenizer.encode_ids(s, add_bos=True)
        if add_bos
        else checkpoint.tokenizer.encoding(s).ids
        for s in sentences
    ]
    return rows


def _padded(rows, pad_id):
    width = max(map(len, rows))
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])


@pytest.mark.parametrize(
    ("model", "kind", "sentences"),
    [
        (MINILM, ENCODER_SELF, ["The cat sat on the mat.", "A dog."]),
        ("gpt2", DECODER_SELF, ["w3 w4 w5 w6", "w7 w8"]),
        ("marian", ENCODER_SELF, ["w3 w4 w5 w6 w7", "w8 w9"]),
    ],
)
def test_single_head_and_grid_are_the_models_weights_with_padding(
    registry, folders, model, kind, sentences
):
    name = folders.get(model, model)
    checkpoint = registry.checkpoint(name, None)
    layer, head, row = 2, 2, 2  # the shorter, padded sentence
    single, _, _, summary, grid = attention.everything(
        registry, "\n".join(sentences), name, kind, layer, head, row, [], False, None
    )
    decoder_only = checkpoint.config.architecture == "decoder-only"
    rows = _pieces(checkpoint, sentences, add_bos=decoder_only)
    # GPT-2 pads with <|endoftext|> (its tokenizer names no pad token); the others with their own.
    pad_id = checkpoint.tokenizer.token_to_id("<|endoftext|>") if model == "gpt2" else None
    if pad_id is None:
        pad_id = checkpoint.tokenizer.pad_id if checkpoint.tokenizer.pad_id is not None else PAD_ID
    ids = _padded(rows, pad_id)
    with torch.no_grad():
        if decoder_only:
            trace = checkpoint.model(tgt=ids, call=TRACE)
            record = trace.decoder_layers[layer - 1].self_attention
        else:
            trace = (
                checkpoint.model(src=ids, call=TRACE)
                if checkpoint.config.architecture == "encoder-only"
                else None
            )
            if trace is None:
                memory_trace = checkpoint.model.encode(ids, call=TRACE)
                record = memory_trace.layers[layer - 1].self_attention
            else:
                record = trace.encoder_layers[layer - 1].self_attention
    expected = record.weights[row - 1, head - 1].numpy()
    n = len(rows[row - 1])
    weights = _z(single.data[1])
    np.testing.assert_allclose(np.nan_to_num(weights), expected, atol=1e-5)
    # Padded keys are masked (grey) where the model masks its pad token; GPT-2 does not.
    masks_padding = model != "gpt2"
    assert np.isnan(weights[:, n:]).all() == masks_padding
    # The [PAD] query rows are marked, exactly where the tokenizer padded.
    ticktext = list(single.layout.yaxis.ticktext)
    marked = [attention.PAD_ROW_MARK in t for t in ticktext]
    assert marked == [i >= n for i in range(ids.size(1))]
    assert ("Padding is real here" in summary) == masks_padding
    if checkpoint.config.architecture == "encoder-only":
        assert "Next-token" not in summary and "→ `" not in summary  # no predictions for BERT
    # The grid's tile for (layer, head) holds the same weights in thousandths, on the same scale.
    z = _z(grid.data[0])
    tq = ids.size(1)
    gutter = max(1, round(tq / 32))
    tile = z[(layer - 1) * (tq + gutter) : (layer - 1) * (tq + gutter) + tq]
    tile = tile[:, (head - 1) * (tq + gutter) : (head - 1) * (tq + gutter) + tq]
    np.testing.assert_allclose(tile / 1000, expected, atol=6e-4)
    assert grid.layout.coloraxis.cmax == 1000 and single.layout.coloraxis2.cmax == 1.0


def test_marian_offers_all_three_kinds_with_source_padding_in_cross(registry, folders):
    name = folders["marian"]
    sentences = "w3 w4 w5 w6 w7\nw8"
    single, _, _, _, grid = attention.everything(
        registry, sentences, name, CROSS, 1, 1, 2, [], False, None
    )
    tokenizer = registry.checkpoint(name, None).tokenizer
    lengths = [len(tokenizer.encoding(s).ids) for s in sentences.splitlines()]
    weights = _z(single.data[1])
    assert weights.shape[1] == max(lengths)  # keys are the source
    assert np.isnan(weights[:, lengths[1] :]).all() and np.isfinite(weights[:, : lengths[1]]).all()
    np.testing.assert_allclose(np.nansum(weights, axis=1)[: weights.shape[0]], 1.0, atol=1e-5)
    assert grid.layout.title.text.startswith("Cross-attention")


# -- what-if beside the original --------------------------------------------------------------


def test_what_if_shows_the_interventions_own_weights_beside_the_original(registry):
    sentence = "the teacher sees a bird"
    single, masks, diff, _ = attention.attention(
        registry, sentence, "continue", DECODER_SELF, 2, 3, 1, ["causal mask off"], False, None
    )
    checkpoint = registry.checkpoint("continue", None)
    tgt = torch.tensor([checkpoint.tokenizer.encode_ids(sentence, add_bos=True)])
    with torch.no_grad():
        plain = checkpoint.model(tgt=tgt, call=TRACE).decoder_layers[1].self_attention
        off = (
            checkpoint.model(
                tgt=tgt,
                call=Call(ops=Intervention(causal_mask=False).operations, capture=Capture()),
            )
            .decoder_layers[1]
            .self_attention
        )
    before, after = _z(single.data[0]), _z(single.data[1])
    np.testing.assert_allclose(np.nan_to_num(before), plain.weights[0, 2].numpy(), atol=1e-5)
    np.testing.assert_allclose(after, off.weights[0, 2].numpy(), atol=1e-5)
    np.testing.assert_allclose(
        np.nan_to_num(_z(diff.data[0])), (off.weights - plain.weights)[0, 2].numpy(), atol=1e-5
    )
    # The masks show the mask the what-if applied (nothing causal) beside the original.
    assert masks.layout.annotations[-1].text == "with the what-if"
    assert _z(masks.data[-1]).all() and not _z(masks.data[-2]).all()


def test_zeroing_a_head_shows_it_passes_on_nothing(registry):
    sentence = "the small cat sees a red ball"
    single, _, diff, summary = attention.attention(
        registry, sentence, "translate", ENCODER_SELF, 1, 2, 1, ["zero this head"], False, None
    )
    checkpoint = registry.checkpoint("translate", None)
    src = torch.tensor([checkpoint.tokenizer.encode_ids(sentence)])
    with torch.no_grad():
        record = checkpoint.model.encode(src, call=TRACE).layers[0].self_attention
    before, after = _z(single.data[0]), _z(single.data[1])
    np.testing.assert_allclose(before, record.weights[0, 1].numpy(), atol=1e-5)
    assert (after == 0).all()
    np.testing.assert_allclose(_z(diff.data[0]), -record.weights[0, 1].numpy(), atol=1e-5)
    assert "Zeroing layer 1, head 2" in summary


# -- [UNK] and payloads -----------------------------------------------------------------------


def test_unreadable_characters_are_named(registry):
    *_, summary = attention.attention(
        registry, "k d a m z q b", "reverse", ENCODER_SELF, 1, 1, 1, [], False, None
    )
    tokenizer = registry.checkpoint("reverse", None).tokenizer
    assert tokenizer.token_to_id("z") is None  # the premise: the reversal vocabulary has no z
    assert "cannot read `z`" in summary and "`k`" not in summary
    *_, summary = attention.attention(
        registry, "k d a m q b", "reverse", ENCODER_SELF, 1, 1, 1, [], False, None
    )
    assert "cannot read" not in summary


def test_minilm_grid_stays_small_at_512_and_64_tokens(registry):
    checkpoint = registry.checkpoint(MINILM, None)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]
    for n_tokens, limit in ((512, 3_000_000), (128, 2_000_000), (64, 1_100_000)):
        text = " ".join(words[i % len(words)] for i in range(n_tokens - 2))
        assert len(checkpoint.tokenizer.encoding(text).ids) == n_tokens
        grid = attention.grid(registry, text, MINILM, ENCODER_SELF, 1, False, None)
        assert len(grid.to_json()) < limit, n_tokens
        # One click's whole response: head view, masks, what-if panel and grid together.
        panels = attention.everything(
            registry, text, MINILM, ENCODER_SELF, 6, 12, 1, [], True, None
        )
        assert sum(len(f.to_json()) for f in panels if hasattr(f, "to_json")) < 3_000_000
        if n_tokens == 64:  # exact at 64 tokens: every weight of every head
            assert "downsampled" not in grid.layout.title.text


def test_a_new_model_fits_the_controls_and_draws_with_the_fitted_values_in_one_event(registry):
    """translate's cross-attention does not exist in continue: the one event that answers a
    model change picks continue's own kind and draws its decoder self-attention, never the
    stale kind (a chained event was sent the old value and gradio refused it)."""
    from ui.tabs.attention.handlers import refit_everything

    sentences = "the teacher sees\na bird"
    kind, layer, head, row, mistake, single, *_ = refit_everything(
        registry, sentences, "continue", CROSS, 3, 4, 2, [], False, None, None
    )
    kept = refit_everything(
        registry, sentences, "continue", CROSS, 3, 4, 2, [], False, None, "mask polarity inverted"
    )[4]
    config = registry.checkpoint("continue", None).config
    assert kind.choices == [("decoder masked self-attention",) * 2]
    assert kind.value == "decoder masked self-attention"
    assert layer.maximum == max(config.n_decoder_layers, 2) and head.maximum == config.n_heads
    assert row.maximum == 2 and row.value == 2  # two sentences: the second stays chosen
    assert kept.value == "mask polarity inverted"  # it applies to continue: kept
    assert mistake.value == "none (the correct pass)"
    checkpoint = registry.checkpoint("continue", None)
    plain = registry.analysis("continue", checkpoint, sentences.splitlines())
    expected = plain.trace.attention("decoder_self", 2).weights[1, 3].numpy()
    shown = np.nan_to_num(np.asarray(single.data[1].z, dtype=float))
    n = int(plain.trace.target.real_tokens[1].sum())
    np.testing.assert_allclose(shown[:n, :n], expected[:n, :n], atol=1e-5)


def test_a_live_redraw_with_a_stale_value_draws_the_fitted_view(registry):
    """A tour stop that goes from two sentences to one can reach the live redraw with the old
    Sentence value 2: it draws sentence 1 (what the fitted slider shows), where /attention
    refuses the out-of-range value."""
    from ui.tabs.attention.handlers import everything

    single, *_ = everything(
        registry, "the small cat sees a red ball", "translate", CROSS, 2, 1, 2, [], False, None
    )
    checkpoint = registry.checkpoint("translate", None)
    plain = registry.analysis("translate", checkpoint, ["the small cat sees a red ball"])
    expected = plain.trace.attention("cross", 1).weights[0, 0].numpy()
    np.testing.assert_allclose(
        np.nan_to_num(np.asarray(single.data[1].z, dtype=float)), expected, atol=1e-5
    )
    with pytest.raises(Exception, match="between 1 and 1"):
        attention.attention(
            registry, "the small cat sees a red ball", "translate", CROSS, 2, 1, 2, [], False, None
        )


def test_a_text_too_long_to_keep_every_head_points_to_the_long_inputs_view(registry, monkeypatch):
    """The library's bound on a captured pass reaches the tab as a message that names the
    length that fits and the long-input view; the figures are not replaced by an error."""
    import gradio as gr

    from transformer.core import trace as trace_module

    monkeypatch.setattr(trace_module, "MAX_CAPTURED_WEIGHTS_BYTES", 1_000)
    with pytest.raises(gr.Error, match="too many to show every layer and head") as refused:
        attention.attention(
            registry, "a b c d e f g h i j", "reverse", ENCODER_SELF, 1, 1, 1, [], False, None
        )
    assert "at most about" in str(refused.value) and "“Long inputs” below" in str(refused.value)
