"""Several texts' captured passes as one forward, each handed the trace of its own pass.

Students who each ask for the attention of their own sentence send texts of different lengths.
:func:`capture_together` right-pads them into one batch and runs one captured pass: padding
sits after every real position, so a decoder's causal mask already hides it from every real
query, and the encoder's padding mask hides it as a key (``True`` = may attend). Each text's
trace is then cut out of the batch's (its row, its own positions, its own keys), and equals the
trace of ``model(src, tgt, call=TRACE)`` over that text alone, to float rounding
(``tests/library/test_batched.py``).

:func:`analyse_together` does the same for several :func:`~transformer.lab.inspection.analyse`
requests at once (each its own 1 to 3 sentences, padded to its own longest): each gets the
:class:`~transformer.lab.inspection.Analysis` its own call gives.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import cast

import torch
from torch import Tensor

from ..core.attention import MultiHeadAttention
from ..core.model import DecoderLayer, EncoderLayer, Transformer
from ..core.operations import PAPER, Operations
from ..core.records import Rotated
from ..core.run import Call, Capture
from ..core.trace import AttentionRecord, LayerTrace, StackInput, Trace, check_capture_size
from ..core.util import eval_mode, pad
from ..text.tokenization import Tokenizer
from .inspection import Analysis, PassInput, predicted_tokens, token_pieces, traced_pass
from .interventions import NO_INTERVENTION

__all__ = ["analyse_together", "capture_together"]


def capture_together(
    model: Transformer,
    sources: Sequence[Sequence[int]] | None = None,
    targets: Sequence[Sequence[int]] | None = None,
    *,
    capture: bool | Capture = True,
    ops: Operations = PAPER,
) -> list[Trace]:
    """One captured forward pass over several texts; the trace each text's own pass gives.

    Args:
        model: any architecture (run in eval mode, its training flag restored after).
        sources: per text, its source ids (encoder-decoder and encoder-only models).
        targets: per text, its decoder input ids (encoder-decoder and decoder-only models).
        capture: ``True`` or what the pass keeps (a :class:`Capture` that traces).
        ops: the operations of the pass (the padding mask must stay on: it hides the padding).

    Returns:
        Per text, a :class:`Trace` with batch size 1 and its own lengths: its attention weights
        per layer and head trimmed to its own queries and keys.
    """
    config = model.config
    texts = sources if sources is not None else targets
    if texts is None or not len(texts):
        raise ValueError("give at least one text")
    for name, given, needed in (
        ("sources", sources, config.has_encoder),
        ("targets", targets, config.has_decoder),
    ):
        if needed and given is None:
            raise ValueError(f"a {config.architecture} model needs {name}")
        if not needed and given is not None:
            raise ValueError(f"a {config.architecture} model takes no {name}")
        if given is not None and (len(given) != len(texts) or any(not len(t) for t in given)):
            raise ValueError(f"{name} must give every text at least one id")
    if not ops.padding_mask:
        raise ValueError("texts padded together need the padding mask: capture them one by one")
    if not isinstance(capture, Capture):
        capture = Capture(trace=capture)
    if not capture.trace:
        raise ValueError("capture_together returns traces: give a Capture that traces")
    device = model.device
    src = pad(sources, config.pad_id).to(device) if sources is not None else None
    tgt = pad(targets, config.pad_id).to(device) if targets is not None else None
    with torch.inference_mode(), eval_mode(model):
        trace = model(src, tgt, call=Call(ops=ops, capture=capture))
    assert isinstance(trace, Trace)  # a capture that traces returns the trace
    source_lengths = [len(s) for s in sources] if sources is not None else [0] * len(texts)
    target_lengths = [len(t) for t in targets] if targets is not None else [0] * len(texts)
    return _split(model, trace, source_lengths, target_lengths, ops)


def _split(
    model: Transformer,
    trace: Trace,
    sources: list[int],
    targets: list[int],
    ops: Operations,
    rows: list[slice] | None = None,
) -> list[Trace]:
    """Each group's trace: the batch's cut to its rows ``rows[i]`` (one row each by default),
    ``sources[i]`` source and ``targets[i]`` target positions. Every tensor is copied: a view
    would keep the whole batch's alive in each text's trace (and count it there, where a cache
    weighs traces by their tensors)."""
    groups = rows if rows is not None else [slice(i, i + 1) for i in range(len(sources))]
    encoder = [
        _layers(model, layer, groups, sources, sources, ops) for layer in trace.encoder_layers
    ]
    decoder = [
        _layers(model, layer, groups, targets, sources, ops) for layer in trace.decoder_layers
    ]
    traces = []
    for i, group in enumerate(groups):
        s, t = sources[i], targets[i]
        traces.append(
            Trace(
                config=trace.config,
                kept_logits=_cut(trace.kept_logits, group, t or s),
                source=_input(trace.source, group, s),
                target=_input(trace.target, group, t),
                encoder_layers=[layers[i] for layers in encoder],
                decoder_layers=[layers[i] for layers in decoder],
                memory=_cut(trace.memory, group, s),
                decoder_output=_cut(trace.decoder_output, group, t),
                causal=None if trace.causal is None else trace.causal[:t, :t].clone(),
                project=trace.project,
            )
        )
    return traces


def _cut(tensor: Tensor | None, rows: slice, length: int) -> Tensor | None:
    """The rows ``rows``, first ``length`` positions, of a ``(B, T, ...)`` tensor, copied."""
    return None if tensor is None else tensor[rows, :length].clone()


def _input(record: StackInput | None, rows: slice, length: int) -> StackInput | None:
    if record is None:
        return None
    cut = lambda t: t[rows, :length].clone()  # noqa: E731
    return StackInput(
        tokens=cut(record.tokens),
        token_embedding=cut(record.token_embedding),
        positional=record.positional[:length].clone(),
        real_tokens=cut(record.real_tokens),
        position_offset=record.position_offset,
        token_type_embedding=None
        if record.token_type_embedding is None
        else cut(record.token_type_embedding),
    )


def _layers(
    model: Transformer,
    layer: LayerTrace,
    groups: list[slice],
    lengths: list[int],
    sources: list[int],
    ops: Operations,
) -> list[LayerTrace]:
    """One layer's record cut into every group's (its rows ``groups[i]``, ``lengths[i]``
    positions, which are also its self-attention keys; ``sources[i]`` cross-attention keys)."""
    stack = model.encoder if layer.stack == "encoder" else model.decoder
    module = cast(EncoderLayer | DecoderLayer, stack.layers[layer.layer])
    selfs = _records(layer.self_attention, groups, lengths, lengths, module.self_attention, ops)
    crosses: list[AttentionRecord | None] = [None] * len(lengths)
    if layer.cross_attention is not None:
        cross_module = cast(DecoderLayer, module).cross_attention
        assert cross_module is not None  # a layer whose record has cross-attention has it
        crosses = list(_records(layer.cross_attention, groups, lengths, sources, cross_module, ops))
    out = []
    for i, (group, length) in enumerate(zip(groups, lengths, strict=True)):

        def cut(tensor: Tensor | None, rows: slice = group, length: int = length) -> Tensor | None:
            return _cut(tensor, rows, length)

        out.append(
            LayerTrace(
                stack=layer.stack,
                layer=layer.layer,
                input=layer.input[group, :length].clone(),
                self_attention=selfs[i],
                kept_self_attention_output=cut(layer.kept_self_attention_output),
                feed_forward_output=layer.feed_forward_output[group, :length].clone(),
                self_attention_update=cut(layer.self_attention_update),
                feed_forward_update=cut(layer.feed_forward_update),
                cross_attention=crosses[i],
                cross_attention_output=cut(layer.cross_attention_output),
                cross_attention_update=cut(layer.cross_attention_update),
            )
        )
    return out


def _records(
    record: AttentionRecord,
    groups: list[slice],
    queries: list[int],
    keys: list[int],
    module: MultiHeadAttention,
    ops: Operations,
) -> list[AttentionRecord]:
    """Every group's record of one attention sub-layer: its rows ``groups[i]``, its
    ``queries[i]`` queries and ``keys[i]`` keys. Kept as the row's own pass keeps it: where the pass rebuilds its queries
    and keys from the rotary pair, so does each row's, from its own part of the pair."""
    rotary = record.rotary
    rebuilt = record.rebuild is not None and rotary is not None
    all_queries, all_keys = (None, None) if rebuilt else (record.queries, record.keys)
    weights = record.kept_weights
    out = []
    for row, n_q, n_k in zip(groups, queries, keys, strict=True):
        part_rotary, rebuild, kept_q, kept_k = None, None, None, None
        if rotary is not None:
            part_rotary = _rotated(rotary, row, n_q, module, ops)
        if rebuilt:
            assert part_rotary is not None
            rebuild = _rebuild(part_rotary, module, ops)
        else:
            assert all_queries is not None and all_keys is not None  # a traced pass keeps them
            kept_q = all_queries[row, :, :n_q].clone()
            kept_k = all_keys[row, :, :n_k].clone()
        out.append(
            AttentionRecord(
                kind=record.kind,
                layer=record.layer,
                kept_scores=None
                if record.kept_scores is None
                else record.kept_scores[row, :, :n_q, :n_k].clone(),
                kept_weights=None if weights is None else weights[row, :, :n_q, :n_k].clone(),
                mask=record.mask[row, :, :n_q, :n_k].clone(),
                query_offset=record.query_offset,
                kept_queries=kept_q,
                kept_keys=kept_k,
                kv_head_of=record.kv_head_of,
                rotary=part_rotary,
                rebuild=rebuild,
                softcap=record.softcap,
            )
        )
    return out


def _rotated(
    rotary: Rotated, row: slice, length: int, module: MultiHeadAttention, ops: Operations
) -> Rotated:
    """A row's part of the rotary pair, rotated again when read as its own pass's is."""
    turn = module.rotary
    assert turn is not None  # a record with a rotary pair comes from a rotary module
    offset = rotary.offset
    return Rotated(
        rotary.queries_before[row, :, :length].clone(),
        None,
        rotary.keys_before[row, :, :length].clone(),
        None,
        offset,
        rotate=lambda q, k: ops.rotary_positions(turn, q, k, offset),
    )


def _rebuild(
    rotary: Rotated, module: MultiHeadAttention, ops: Operations
) -> Callable[[], tuple[Tensor, Tensor]]:
    """The scaled queries and expanded keys from a row's rotary pair, as its own pass's record
    rebuilds them (see ``MultiHeadAttention._keep_rotary``)."""
    scale = module.score_scale(ops)
    n_heads, expand = module.n_heads, ops.expand_kv_heads
    return lambda: (rotary.queries_after * scale, expand(rotary.keys_after, n_heads))


def analyse_together(
    model: Transformer, tokenizer: Tokenizer, inputs: Sequence[PassInput]
) -> list[Analysis]:
    """Several :func:`~transformer.lab.inspection.analyse` calls as one captured pass; each
    gets what ``analyse(model, tokenizer, inputs[i])`` returns (its own sentences, padded to
    its own longest, the same trace to float rounding).

    Their ``(B_i, T_i)`` ids are stacked, right-padded with the model's pad id to the longest
    (masked as keys in an encoder; after every real query in a decoder, so never read).
    Decoder-only and encoder-only models, without a what-if (an encoder-decoder's analysis
    decodes its answer first; a what-if may switch the masks off): ``ValueError`` otherwise,
    and for a batch whose attention would be too large to capture at once."""
    config = model.config
    if config.architecture == "encoder-decoder":
        raise ValueError("an encoder-decoder's analyses decode their answers first: one by one")
    if not inputs:
        return []
    widths = [p.ids.size(1) for p in inputs]
    starts = [0, *itertools.accumulate(p.ids.size(0) for p in inputs)]
    ids = torch.full((starts[-1], max(widths)), config.pad_id, dtype=torch.long)
    groups = [slice(a, b) for a, b in itertools.pairwise(starts)]
    for group, planned in zip(groups, inputs, strict=True):
        ids[group, : planned.ids.size(1)] = planned.ids
    decoder = config.architecture == "decoder-only"
    check_capture_size(
        config, ids.size(0), 0 if decoder else ids.size(1), ids.size(1) if decoder else 0
    )
    batch = ids.to(model.device)
    with torch.no_grad(), eval_mode(model):  # as analyse runs its pass
        trace = traced_pass(
            model, None if decoder else batch, batch if decoder else None, NO_INTERVENTION
        )
        none = [0] * len(inputs)
        traces = _split(
            model,
            trace,
            none if decoder else widths,
            widths if decoder else none,
            PAPER,
            groups,
        )
        out = []
        for planned, own in zip(inputs, traces, strict=True):
            own_ids = planned.ids
            pieces = token_pieces(tokenizer, own_ids)
            if decoder:
                # Read when first asked for, as each text's own analysis reads it.
                predict = functools.partial(
                    predicted_tokens, tokenizer, own, own_ids.to(model.device)
                )
                out.append(Analysis(own, [], pieces, list(planned.sentences), predict))
            else:
                out.append(Analysis(own, pieces, [], list(planned.sentences)))
    return out
