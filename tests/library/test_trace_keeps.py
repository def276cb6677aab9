"""What a captured rotary pass keeps: its scaled queries and expanded keys are not kept a second
time beside the rotary pair (at SmolLM2's 512 tokens, 70 MB), yet a record gives back exactly
the tensors the pass computed, bit for bit, and the scores from them; with cached keys before a
step's own, they are kept as before."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import replace

import pytest
import torch
from conftest import LLAMA_BLOCK, TINY_CONFIG, TINY_GQA

from transformer.core.model import Transformer
from transformer.core.operations import PAPER
from transformer.core.records import AttentionProbe
from transformer.core.run import TRACE, Call, Capture, Run
from transformer.lab.silent_mistakes import tiled_kv_heads

CONFIG = TINY_GQA.replace(**LLAMA_BLOCK, n_decoder_layers=2, tgt_vocab_size=80, max_len=64)


def _reachable_tensors(record) -> list[torch.Tensor]:
    """The tensors a record holds, through its dataclass fields (what a cache counts)."""
    found = []
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif dataclasses.is_dataclass(value):
            found += [v for v in vars(value).values() if isinstance(v, torch.Tensor)]
    return found


@pytest.mark.parametrize("grouping", ["standard", "tiled"])
def test_a_rotary_trace_gives_back_the_passes_own_queries_and_keys(grouping):
    torch.manual_seed(0)
    model = Transformer(CONFIG).eval()
    ops = PAPER if grouping == "standard" else replace(PAPER, expand_kv_heads=tiled_kv_heads)
    seen: list[AttentionProbe] = []
    observed = Capture(observe_attention=lambda probe, kind, layer: seen.append(probe))
    tokens = torch.randint(4, 80, (2, 9))
    with torch.no_grad():
        trace = model(tgt=tokens, call=Call(ops=ops, capture=observed))
    records = trace.attention_records("decoder_self")
    assert len(records) == len(seen) == 2
    for record, probe in zip(records, seen, strict=True):
        assert torch.equal(record.queries, probe.queries)  # the pass's own, bit for bit
        assert torch.equal(record.keys, probe.keys)  # expanded as the pass expanded them
        direct = probe.queries @ probe.keys.transpose(-2, -1)
        allowed = record.mask.expand_as(direct)
        assert torch.equal(record.scores[allowed], direct[allowed])
        held = {t.untyped_storage().data_ptr() for t in _reachable_tensors(record)}
        assert probe.queries.untyped_storage().data_ptr() not in held
        assert probe.keys.untyped_storage().data_ptr() not in held


def test_a_cached_step_keeps_its_keys():
    """A step after cached keys reads keys its rotary pair does not hold: they are kept, and
    they are every position's (the cached ones first)."""
    torch.manual_seed(0)
    model = Transformer(CONFIG).eval()
    tokens = torch.randint(4, 80, (1, 7))
    with torch.no_grad():
        cache = model.new_cache()
        model.decode(tokens[:, :6], cache=cache)
        step = model.decode(tokens[:, 6:], cache=cache, call=TRACE)
        whole = model(tgt=tokens, call=TRACE)
    for layer, full in zip(step.layers, whole.decoder_layers, strict=True):
        record = layer.self_attention
        assert record.keys is not None and record.keys.shape[2] == 7
        held = {t.untyped_storage().data_ptr() for t in _reachable_tensors(record)}
        assert record.keys.untyped_storage().data_ptr() in held
        torch.testing.assert_close(record.keys, full.self_attention.keys)


@pytest.mark.parametrize("pad_id", [0, 3, None])
def test_the_best_id_without_padding_equals_masking_a_copy(pad_id):
    """Against the plain formula (a masked copy, then argmax): rows where padding is the
    largest, ties with it and after it, NaN at and away from it."""
    from transformer.generation import best_without_padding

    torch.manual_seed(0)
    logits = torch.randn(4, 6, 8)
    column = 3 if pad_id is None else pad_id
    logits[0, :, column] = 10.0  # padding the largest everywhere in the first row
    logits[1, 0, column], logits[1, 0, 5] = 7.0, 7.0  # a tie with a later class
    logits[1, 1, 1], logits[1, 1, column] = 7.0, 7.0  # and with an earlier one
    logits[2, 0, column] = float("nan")
    logits[2, 1, 6] = float("nan")
    logits[2, 2, column], logits[2, 2, 7] = float("nan"), float("nan")
    original = logits.clone()
    expected = (
        logits.argmax(-1)
        if pad_id is None
        else logits.index_fill(-1, torch.tensor([pad_id]), float("-inf")).argmax(-1)
    )
    assert torch.equal(best_without_padding(logits, pad_id), expected)
    assert torch.equal(torch.nan_to_num(logits), torch.nan_to_num(original))  # not written to


# -- the logits: computed when read, not kept ----------------------------------------------------

ENCODER_DECODER = TINY_CONFIG.replace(d_ff=48, src_vocab_size=40, tgt_vocab_size=56, max_len=32)


def _all_tensors(obj, seen=None) -> list[torch.Tensor]:
    """Every tensor reachable from ``obj`` through dataclasses, lists and tuples."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _all_tensors(item, seen)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for value in vars(obj).values() for t in _all_tensors(value, seen)]
    return []


@pytest.mark.parametrize("config", [CONFIG, ENCODER_DECODER], ids=["decoder-only", "seq2seq"])
def test_a_trace_computes_its_logits_when_read_and_keeps_none(config):
    """No (B, T, V) tensor is held by a captured pass; its logits, read whole or a few
    positions at a time, are the generator's over the final outputs, as the plain pass (sdpa
    instead of the written-out attention) gives them to float rounding."""
    torch.manual_seed(0)
    model = Transformer(config).eval()
    tgt = torch.randint(4, config.output_vocab_size, (2, 11))
    src = torch.randint(4, 40, (2, 7)) if config.has_encoder else None
    with torch.no_grad():
        trace = model(src, tgt, call=TRACE)
        plain = model(src, tgt)
    vocab = config.output_vocab_size
    assert not [t for t in _all_tensors(trace) if t.dim() == 3 and t.size(-1) == vocab]
    assert trace.logits.shape == plain.shape
    torch.testing.assert_close(trace.logits, plain, rtol=1e-5, atol=1e-5)
    assert trace.logits.requires_grad is False
    # A reference written here: the output projection over the final outputs, by hand.
    weight, bias = model.generator.proj.weight, model.generator.proj.bias
    assert trace.decoder_output is not None
    torch.testing.assert_close(trace.logits, trace.decoder_output @ weight.T + bias)
    # In pieces (one position each at this size): the same rows.
    pieces = trace.chunks(most_bytes=1)
    assert pieces == [(i, i + 1) for i in range(11)]
    torch.testing.assert_close(
        torch.cat([trace.logits_at(a, b) for a, b in pieces], dim=1), trace.logits
    )


def test_a_trace_refuses_its_logits_once_the_model_changed():
    """Logits computed after a training step would be another model's: an error instead."""
    torch.manual_seed(0)
    model = Transformer(CONFIG).eval()
    with torch.no_grad():
        trace = model(tgt=torch.randint(4, 80, (1, 6)), call=TRACE)
        trace.logits  # noqa: B018 (readable while nothing changed)
        model.generator.proj.weight.add_(1.0)
    with pytest.raises(RuntimeError, match="changed after this pass was captured"):
        trace.logits  # noqa: B018


def test_predictions_read_in_pieces_are_the_whole_logits_argmax(monkeypatch):
    """The Attention view's predicted tokens, the logits read one position at a time, are the
    argmax of the whole logits without [PAD] (computed here from the plain pass)."""
    from transformer.core import trace as trace_module
    from transformer.lab import inspection
    from transformer.text.tokenization import train_tokenizer

    monkeypatch.setattr(trace_module, "LOGIT_CHUNK_BYTES", 1)
    tokenizer = train_tokenizer(["the cat sat on the mat", "a dog ran"] * 3, "bpe", 40)
    pad = tokenizer.pad_id
    assert pad is not None
    torch.manual_seed(0)
    model = Transformer(replace(CONFIG, tgt_vocab_size=tokenizer.vocab_size, pad_id=pad)).eval()
    tgt = torch.randint(7, tokenizer.vocab_size, (2, 9))
    tgt[1, 6:] = pad
    with torch.no_grad():
        trace = model(tgt=tgt, call=TRACE)
        logits = model(tgt=tgt)
    assert len(trace.chunks()) == 9  # one position at a time
    predicted = inspection.predicted_tokens(tokenizer, trace, tgt)
    expected_ids = logits.index_fill(-1, torch.tensor([pad]), float("-inf")).argmax(-1)
    expected = [tokenizer.decode(expected_ids[b][tgt[b] != pad].tolist()) for b in range(2)]
    assert predicted == expected


def test_an_analysis_predicts_only_when_read_and_then_the_passes_argmax():
    """A new sentence's views do not show the predicted tokens: the analysis projects its
    positions onto the vocabulary when they are first read (outside the pass's no_grad), and
    gives the argmax of the plain pass's logits without [PAD]."""
    from transformer.lab.inspection import analyse
    from transformer.text.tokenization import train_tokenizer

    tokenizer = train_tokenizer(["the cat sat on the mat", "a dog ran"] * 3, "bpe", 40)
    pad = tokenizer.pad_id
    assert pad is not None
    torch.manual_seed(0)
    config = replace(CONFIG, tgt_vocab_size=tokenizer.vocab_size, pad_id=pad)
    model = Transformer(config).eval()
    analysis = analyse(model, tokenizer, ["the cat sat", "a dog"])
    assert "predicted" not in vars(analysis)  # nothing projected yet
    tgt = analysis.trace.target.tokens
    with torch.no_grad():
        logits = model(tgt=tgt)
    expected_ids = logits.index_fill(-1, torch.tensor([pad]), float("-inf")).argmax(-1)
    expected = [tokenizer.decode(expected_ids[b][tgt[b] != pad].tolist()) for b in range(2)]
    assert analysis.predicted == expected


def test_the_largest_logit_change_is_the_whole_difference():
    from transformer.core.trace import largest_logit_change
    from transformer.lab.interventions import Intervention

    torch.manual_seed(0)
    model = Transformer(CONFIG).eval()
    tgt = torch.randint(4, 80, (2, 9))
    with torch.no_grad():
        before = model(tgt=tgt, call=TRACE)
        after = model(
            tgt=tgt, call=Call(ops=Intervention(causal_mask=False).operations, capture=Capture())
        )
    whole = (after.logits - before.logits).abs().max().item()
    assert whole > 0
    assert largest_logit_change(before, after) == pytest.approx(whole, rel=1e-6)


# -- what a pre-LN rotary layer computes twice is kept once --------------------------------------


def _storages(obj) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in _all_tensors(obj)}


@pytest.mark.parametrize("rotation", ["standard", "neighbours"])
def test_a_rotary_pair_rotates_again_exactly_what_the_pass_rotated(rotation):
    """The rotated queries and keys a trace gives back are the pass's own, bit for bit, with
    the pass's own rotation (the seeds' neighbour-pairs mistake included), and not kept."""
    from transformer.lab.silent_mistakes import neighbour_pairs

    base = PAPER if rotation == "standard" else replace(PAPER, rotary_positions=neighbour_pairs)
    own: list[tuple[torch.Tensor, torch.Tensor]] = []

    def spy(rotary, q, k, offset):
        own.append(base.rotary_positions(rotary, q, k, offset))
        return own[-1]

    torch.manual_seed(0)
    model = Transformer(CONFIG).eval()
    with torch.no_grad():
        trace = model(
            tgt=torch.randint(4, 80, (2, 9)),
            call=Call(ops=replace(base, rotary_positions=spy), capture=Capture()),
        )
    computed = list(own)  # reading the pair below rotates again
    records = trace.attention_records("decoder_self")
    assert len(computed) == len(records) == 2
    for record, (q, k) in zip(records, computed, strict=True):
        held = _storages(record)
        assert q.untyped_storage().data_ptr() not in held
        assert k.untyped_storage().data_ptr() not in held
        assert record.rotary is not None
        assert torch.equal(record.rotary.queries_after, q)
        assert torch.equal(record.rotary.keys_after, k)


@pytest.mark.parametrize("config", [CONFIG, ENCODER_DECODER], ids=["pre-LN", "post-LN"])
def test_the_stream_after_self_attention_is_the_layers_own(config):
    """Each layer's stream after its self-attention, read from the trace, is the residual
    sub-layer's own output bit for bit; pre-LN, where it is the plain sum input + update, does
    not keep it a second time (post-LN, where a norm follows, does)."""
    torch.manual_seed(0)
    model = Transformer(config).eval()
    own: list[torch.Tensor] = []
    layers = list(model.decoder.layers)
    for layer in layers:
        layer.self_attention_residual.register_forward_hook(lambda m, a, out: own.append(out))
    tgt = torch.randint(4, config.output_vocab_size, (2, 9))
    src = torch.randint(4, 40, (2, 7)) if config.has_encoder else None
    with torch.no_grad():
        trace = model(src, tgt, call=TRACE)
    assert len(own) == len(trace.decoder_layers) == len(layers)
    for layer_trace, output in zip(trace.decoder_layers, own, strict=True):
        kept = output.untyped_storage().data_ptr() in _storages(layer_trace)
        assert kept == (config.norm == "post")
        assert torch.equal(layer_trace.self_attention_output, output)


# -- the attention weights: an analysis computes them again when read ----------------------------


def _weights_of_the_pass(model, src, tgt, ops):
    """The trace of a pass that does not keep its attention weights, and each attention call's
    weights as the pass computed them (seen by an observer, in the order of the calls)."""
    seen: list[tuple[str, torch.Tensor]] = []
    capture = Capture(
        keep_attention_weights=False,
        observe_attention=lambda probe, kind, layer: seen.append((kind, probe.weights)),
    )
    with torch.no_grad():
        trace = model(src, tgt, call=Call(ops=ops, capture=capture))
    return trace, seen


@pytest.mark.parametrize("mask", ["paper", "inverted"])
@pytest.mark.parametrize("config", [CONFIG, ENCODER_DECODER], ids=["rotary-gqa", "seq2seq"])
def test_attention_weights_not_kept_are_the_passes_own(config, mask):
    """Every record's weights, read from a trace that did not keep them, are the ones the
    pass computed, bit for bit (padded rows, the causal triangle, grouped heads, rotary
    positions and the seeds' inverted mask, whose rows have no key, included); the pass's own
    tensors are not held; and they equal softmax(q·kᵀ/√d) over the allowed keys, computed
    here."""
    from transformer.lab.mistakes import inverted

    torch.manual_seed(0)
    model = Transformer(config).eval()
    pad = config.pad_id
    tgt = torch.randint(4, config.output_vocab_size, (2, 9))
    tgt[1, 6:] = pad
    src = None
    if config.has_encoder:
        src = torch.randint(4, 40, (2, 7))
        src[0, 5:] = pad
    ops = PAPER if mask == "paper" else replace(PAPER, attention_mask=inverted)
    trace, seen = _weights_of_the_pass(model, src, tgt, ops)
    kinds = ["encoder_self", "decoder_self", "cross"] if config.has_encoder else ["decoder_self"]
    records = [r for kind in kinds for r in trace.attention_records(kind)]
    assert sorted(r.kind for r in records) == sorted(kind for kind, _ in seen)
    held = _storages(trace)
    by_kind = {kind: [w for k, w in seen if k == kind] for kind in kinds}
    for record in records:
        own = by_kind[record.kind][record.layer]
        assert own.untyped_storage().data_ptr() not in held
        assert record.shape == tuple(own.shape)
        assert torch.equal(record.weights, own)
        # Independent: the softmax of the scaled scores over the allowed keys, by hand.
        queries, keys = record.queries, record.keys
        scores = (queries @ keys.transpose(-2, -1)).masked_fill(~record.mask, float("-inf"))
        expected = torch.nan_to_num(torch.softmax(scores, dim=-1))  # no allowed key: 0
        torch.testing.assert_close(record.weights, expected, rtol=1e-6, atol=1e-7)
    if mask == "inverted":
        assert any(not bool(r.mask[0, 0].any(-1).all()) for r in records)  # rows with no key


def test_a_pass_that_keeps_its_weights_holds_them():
    """The default (what ``output_attentions`` returns): the weights are the pass's tensors."""
    torch.manual_seed(0)
    model = Transformer(CONFIG).eval()
    seen: list[torch.Tensor] = []
    observed = Capture(observe_attention=lambda probe, kind, layer: seen.append(probe.weights))
    with torch.no_grad():
        trace = model(tgt=torch.randint(4, 80, (2, 9)), call=Call(capture=observed))
    held = _storages(trace)
    assert len(seen) == 2
    assert all(w.untyped_storage().data_ptr() in held for w in seen)


def test_an_analysis_holds_no_attention_weights_and_draws_the_same_grid():
    """The app's analyses keep no (B, H, T, T) tensor, not even once their weights and scores
    were read; the grid drawn from them is the one drawn from a pass that kept its weights."""
    from transformer import figures
    from transformer.lab.inspection import analyse
    from transformer.training.bundled import load_bundled

    checkpoint = load_bundled("cpu").models["translate"]
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    sentences = ["the small cat sees a red ball", "a big dog sleeps"]
    analysis = analyse(model, tokenizer, sentences)
    trace = analysis.trace
    for kind in ("encoder_self", "decoder_self", "cross"):
        for record in trace.attention_records(kind):  # read, as views read them
            assert record.weights.shape == record.scores.shape == record.shape
    for kind in ("encoder_self", "decoder_self", "cross"):
        for record in trace.attention_records(kind):
            _, heads, n_queries, n_keys = record.shape
            square = [
                t
                for t in _all_tensors(trace)
                if t.dim() == 4 and t.shape[1] == heads and t.shape[-2:] == (n_queries, n_keys)
            ]
            assert not square, f"{kind} layer {record.layer} keeps {square[0].shape}"
    assert trace.source is not None and trace.target is not None
    with torch.no_grad():
        kept = model(trace.source.tokens, trace.target.tokens, call=TRACE)
    for kind in ("encoder_self", "decoder_self", "cross"):
        lazy_records, kept_records = trace.attention_records(kind), kept.attention_records(kind)
        for lazy, whole in zip(lazy_records, kept_records, strict=True):
            assert lazy.kept_weights is None and whole.kept_weights is not None
            torch.testing.assert_close(lazy.weights, whole.weights, rtol=0, atol=0)
        drawn = figures.grid_figure(lazy_records, 1).data[0].z
        expected = figures.grid_figure(kept_records, 1).data[0].z
        assert (drawn == expected).all()


def test_the_grid_pools_each_layer_before_it_reads_the_next():
    """A long grid holds one full layer at a time: when it reads a layer, none it read
    before is still alive (each pooled as soon as read), and the figure is the one drawn
    from all layers given at once."""
    import gc
    import weakref

    from transformer.figures.attention import attention_grid

    torch.manual_seed(0)
    stack = [torch.softmax(torch.randn(2, 200, 200), dim=-1) for _ in range(4)]
    read: list[weakref.ref] = []

    class OneAtATime:
        def __len__(self):
            return len(stack)

        def __getitem__(self, index):
            if not 0 <= index < len(stack):
                raise IndexError(index)
            gc.collect()
            assert all(ref() is None for ref in read), "an earlier layer is still held"
            layer = stack[index].clone()
            read.append(weakref.ref(layer))
            return layer

    cells = 4 * 2 * 40 * 40
    drawn = attention_grid(OneAtATime(), max_cells=cells).data[0].z
    assert len(read) == len(stack)
    expected = attention_grid(stack, max_cells=cells).data[0].z
    assert drawn.shape == expected.shape and (drawn == expected).all()
    assert drawn.shape[0] < 4 * 200  # pooled


# -- the run: what a traced pass's modules leave in it, each layer takes back out ----------------


@pytest.mark.parametrize("config", [CONFIG, ENCODER_DECODER], ids=["pre-LN", "post-LN"])
def test_a_run_hands_on_everything_its_modules_left_and_keeps_nothing(config):
    """While a traced run goes, each attention and residual connection leaves its probe or
    update in the run, and each layer takes them back out into its record: after the pass the
    run holds nothing (the trace alone holds the tensors). A run without a trace is never
    written to, and its layers compute what the traced ones did (sdpa against the written-out
    attention)."""
    torch.manual_seed(0)
    model = Transformer(config).eval()
    tgt = torch.randint(4, config.output_vocab_size, (2, 9))
    src = torch.randint(4, 40, (2, 7)) if config.has_encoder else None
    outputs = []
    for run in (Run(capture=Capture()), Run()):
        with torch.no_grad():
            encoded = model._encode(src, run, None) if src is not None else None
            hidden, _, layers, _ = model._run_decoder(tgt, encoded, None, run, True)
        assert run.kept == {}
        assert len(layers) == (config.n_decoder_layers if run.traced else 0)
        outputs.append(hidden)
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)


def test_the_records_are_plain_dataclasses_whose_computed_fields_say_so():
    """A trace, a layer's record and an attention record are plain dataclasses: the generated
    ``__init__`` takes every field back (``dataclasses.replace``); what is computed when read
    is a property over a ``kept_*`` field left ``None``: the stream after pre-LN self-attention
    is ``input + update``, and the weights are the softmax of the kept queries and keys."""
    torch.manual_seed(0)
    model = Transformer(ENCODER_DECODER.replace(norm="pre")).eval()
    tgt = torch.randint(4, ENCODER_DECODER.output_vocab_size, (2, 9))
    src = torch.randint(4, 40, (2, 7))
    with torch.no_grad():
        trace = model(src, tgt, call=Call(capture=Capture(keep_attention_weights=False)))
    layer = trace.decoder_layers[0]
    record = layer.cross_attention
    for kept in (trace, layer, record):
        assert dataclasses.is_dataclass(kept)
        names = [f.name for f in dataclasses.fields(kept)]
        assert list(inspect.signature(type(kept)).parameters) == names  # no hand-written init
        copy = dataclasses.replace(kept)
        assert type(copy) is type(kept) and copy is not kept
    assert layer.kept_self_attention_output is None
    assert torch.equal(layer.self_attention_output, layer.input + layer.self_attention_update)
    assert record.kept_weights is None and record.kept_scores is None
    scores = record.kept_queries @ record.kept_keys.transpose(-2, -1)
    expected = torch.softmax(scores.masked_fill(~record.mask, float("-inf")), dim=-1)
    torch.testing.assert_close(record.weights, expected, rtol=1e-6, atol=1e-7)
