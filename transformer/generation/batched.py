"""Several decodings' steps as one forward pass, each row with its own key/value cache.

A decoding step of a small model is a few hundred tiny kernels: on a GPU it costs about the same
for one row as for sixty-four. When a lecture hall of students press Step at once, each with
their own :class:`~transformer.generation.DecodingSession` (their own prompt, cache length and
settings), :func:`step_together` runs one forward for all of them and hands each session the
record its own :meth:`~transformer.generation.DecodingSession.step` would have made.

How rows of different lengths share one pass (:func:`decode_together`):

- **Keys**: each layer's cached keys and values are stacked *right-aligned*: row ``i``'s
  ``stored_i`` keys fill the last ``stored_i`` of ``width`` slots, the new positions follow. A
  query and a key are then as many slots apart as positions apart in every row, so the causal
  triangle and a sliding window's band, which the core computes from slots, hold per row; the
  empty slots in front are masked (``True`` = may attend).
- **Queries**: the new tokens are right-padded to the longest row (a first step feeds the whole
  prompt, a later one a single token); a padded query's output is never read.
- **Positions**: each row's new tokens sit at positions ``length_i, length_i + 1, …`` (its own
  cache length): the learned or sinusoidal table is read per row, and rotary positions turn q
  and k per row (an :class:`~transformer.core.operations.Operations` of this call, never stored
  on the model).
- **Caches**: the cache holds ``n_kv_heads`` heads (never the copy expanded to the query heads);
  after the pass each row's new keys and values are handed to its own cache's ``update``, the
  very call its own step makes, so that a later one-by-one step continues from the same state.

A row's numbers equal its own pass to float rounding (different matrix shapes sum in another
order): ``tests/library/test_batched.py`` compares with each session's own step.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import torch
from torch import Tensor, nn

from ..core.cache import KeyValueCache
from ..core.embeddings import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from ..core.masks import causal_mask, combine_masks
from ..core.model import Decoded, DecoderCache, Encoded, LayerCache, Transformer
from ..core.operations import PAPER, Operations
from ..core.operations import positions as paper_positions
from ..core.operations import rotary_positions as paper_rotary_positions
from ..core.records import Rotated
from ..core.rotary import RotaryEmbedding
from ..core.run import Call, Capture
from ..core.trace import AttentionRecord, LayerTrace, StackInput
from ..core.util import eval_mode
from .records import StepRecord
from .sampling import never_generated, without_padding
from .session import DecodingSession

__all__ = ["RowsToDecode", "decode_together", "step_together"]


@dataclass
class RowsToDecode:
    """One decoding's share of a batched pass.

    Attributes:
        tokens: ``(K, n)`` the new ids of its ``K`` rows (hypotheses), ``n ≥ 1``: the prompt on
            a first step, one token a row after.
        cache: its own key/value cache (``K`` rows), updated in place as its own
            :meth:`Transformer.decode` would.
        encoded: the encoder's output for its ``K`` rows (encoder-decoder models), else
            ``None``.
    """

    tokens: Tensor
    cache: DecoderCache
    encoded: Encoded | None = None


@dataclass
class _Layout:
    """Where each part sits in the batch: ``rows[i]`` its rows, ``fed[i]`` its new positions,
    ``lengths[i]`` its positions so far, ``stored[l][i]`` the keys layer ``l`` held for it
    before the pass, ``widths[l]`` the slots before the new positions in layer ``l`` (the most
    any row held there), ``span`` the widest of them (the columns before the new ones of the
    self-attention mask, every layer's slots right-aligned in it), ``sources[i]`` its source
    length."""

    rows: list[slice]
    fed: list[int]
    lengths: list[int]
    stored: list[list[int]]
    widths: list[int]
    span: int
    sources: list[int]


def _check_parts(model: Transformer, parts: Sequence[RowsToDecode]) -> None:
    """``ValueError`` for anything a batched pass cannot read as each part's own would."""
    config = model.config
    if not config.has_decoder:
        raise ValueError(f"a {config.architecture} model has no decoder, so it cannot generate")
    n_layers = len(model.decoder.layers)
    seen: set[int] = set()
    for i, part in enumerate(parts):
        if id(part.cache) in seen:
            raise ValueError(f"part {i} shares its cache with another part: step it alone")
        seen.add(id(part.cache))
        if part.tokens.dim() != 2 or part.tokens.size(0) == 0 or part.tokens.size(1) == 0:
            raise ValueError(
                f"part {i}'s tokens must be (rows, new positions) with both ≥ 1, got shape "
                f"{tuple(part.tokens.shape)}"
            )
        if len(part.cache.layers) != n_layers:
            raise ValueError(f"part {i}'s cache is not this model's ({n_layers} layers)")
        rows = part.tokens.size(0)
        held = [layer.self_attention.keys for layer in part.cache.layers]
        if any(k is not None and k.size(0) != rows for k in held):
            raise ValueError(f"part {i}'s cache holds another number of rows than its tokens")
        if part.encoded is not None and part.encoded.memory.size(0) != rows:
            raise ValueError(f"part {i}'s encoding holds another number of rows than its tokens")
        if config.has_encoder != (part.encoded is not None):
            raise ValueError(
                f"part {i}: an encoder-decoder model decodes against its encoding, a "
                "decoder-only model has none"
            )
        if part.cache.length + part.tokens.size(1) > config.max_len:
            raise ValueError(
                f"part {i} would reach position {part.cache.length + part.tokens.size(1) - 1}, "
                f"beyond the model's max_len={config.max_len}"
            )


def _layout(parts: Sequence[RowsToDecode]) -> _Layout:
    starts = [0, *itertools.accumulate(p.tokens.size(0) for p in parts)]
    n_layers = len(parts[0].cache.layers)
    stored = [[p.cache.layers[lay].self_attention.stored for p in parts] for lay in range(n_layers)]
    sources = [0 if p.encoded is None else p.encoded.memory.size(1) for p in parts]
    return _Layout(
        rows=[slice(a, b) for a, b in itertools.pairwise(starts)],
        fed=[p.tokens.size(1) for p in parts],
        lengths=[p.cache.length for p in parts],
        stored=stored,
        widths=[max(layer) for layer in stored],
        span=max(max(layer) for layer in stored),
        sources=sources,
    )


def _right_aligned(
    held: Sequence[Tensor | None], layout: _Layout, width: int, like: Tensor
) -> Tensor:
    """``(B, H, width, d)``: each part's ``(K, H, stored, d)`` keys or values in its rows' last
    ``stored`` slots, zeros in front (masked)."""
    batch = layout.rows[-1].stop
    out = like.new_zeros(batch, like.size(1), width, like.size(3))
    for rows, tensor in zip(layout.rows, held, strict=True):
        if tensor is not None and tensor.size(2):
            out[rows, :, width - tensor.size(2) :] = tensor
    return out


_Stacked = list[tuple[Tensor, Tensor] | None]
"""Per part, its keys and values of every layer stacked, ``(L, K, H_kv, stored, d)`` each
(``None`` where it held none), where every layer held as many positions for it."""


def _uniform(layout: _Layout) -> bool:
    """Whether every part held as many keys in every layer (no sliding window has let go of
    some in one layer and not in another): then each part's caches move as one tensor."""
    return all(len({layer[i] for layer in layout.stored}) == 1 for i in range(len(layout.fed)))


def _batch_cache(
    parts: Sequence[RowsToDecode], layout: _Layout
) -> tuple[DecoderCache, Tensor, _Stacked | None]:
    """The pass's own cache, the ``(B, span)`` bool of the mask's columns before the new
    positions that stand for a real key of the row, and (where :func:`_uniform`) each part's
    stacked keys and values, for :func:`_hand_back`.

    Every layer's keys are right-aligned in its ``widths[l]`` slots and counted as ``span``
    positions (``dropped`` makes up the difference): the model's mask then has ``span + Tq``
    columns, of which a layer reads the last ``widths[l] + Tq`` (as a sliding-window layer,
    which holds fewer keys, reads the last columns of the whole text's mask in a row's own
    pass), and its window's band, computed from slots, is each row's. No window here: each
    row's own cache keeps its window when handed its keys.

    Where every layer held as many keys for a part, its layers are stacked and copied in one
    go (on a GPU, a handful of kernels a part instead of four a layer)."""
    span, n_layers = layout.span, len(layout.widths)
    self_caches = [KeyValueCache(dropped=span - width) for width in layout.widths]
    stacked: _Stacked | None = None
    if span and _uniform(layout):
        stacked = []
        buffers: tuple[Tensor, Tensor] | None = None
        for rows, part, stored in zip(layout.rows, parts, layout.stored[0], strict=True):
            kvs = [layer.self_attention for layer in part.cache.layers]
            if not stored:
                stacked.append(None)
                continue
            keys = torch.stack([cast(Tensor, kv.keys) for kv in kvs])  # (L, K, H_kv, S, d)
            values = torch.stack([cast(Tensor, kv.values) for kv in kvs])
            stacked.append((keys, values))
            if buffers is None:
                batch = layout.rows[-1].stop
                buffers = (
                    keys.new_zeros(n_layers, batch, keys.size(2), span, keys.size(4)),
                    values.new_zeros(n_layers, batch, values.size(2), span, values.size(4)),
                )
            buffers[0][:, rows, :, span - stored :] = keys
            buffers[1][:, rows, :, span - stored :] = values
        assert buffers is not None  # span > 0: some part held keys
        for lay, self_cache in enumerate(self_caches):
            self_cache.keys, self_cache.values = buffers[0][lay], buffers[1][lay]
    else:
        for lay, width in enumerate(layout.widths):
            if not width:
                continue
            kvs = [p.cache.layers[lay].self_attention for p in parts]
            keys_like = next(kv.keys for kv in kvs if kv.keys is not None)
            values_like = next(kv.values for kv in kvs if kv.values is not None)
            self_caches[lay].keys = _right_aligned(
                [kv.keys for kv in kvs], layout, width, keys_like
            )
            self_caches[lay].values = _right_aligned(
                [kv.values for kv in kvs], layout, width, values_like
            )
    layers = []
    for lay, self_cache in enumerate(self_caches):
        crosses = [p.cache.layers[lay].cross_attention for p in parts]
        cross = KeyValueCache(static=True)
        if parts[0].encoded is not None and all(c.keys is not None for c in crosses):
            # Every row's encoder keys are cached: stacked (padded, masked), not recomputed.
            width_s = max(layout.sources)
            cross.keys = _right_padded([c.keys for c in crosses], width_s, layout)
            cross.values = _right_padded([c.values for c in crosses], width_s, layout)
        layers.append(LayerCache(self_attention=self_cache, cross_attention=cross))
    batch = layout.rows[-1].stop
    real = torch.zeros(batch, span, dtype=torch.bool, device=parts[0].tokens.device)
    for rows, part, length in zip(layout.rows, parts, layout.lengths, strict=True):
        seen = min(length, span)  # the latest positions: those some layer holds
        if not seen:
            continue
        own = part.cache.real_keys  # (K, length): every position so far
        real[rows, span - seen :] = True if own is None else own[:, length - seen :]
    return DecoderCache(layers=layers, real_keys=real if span else None), real, stacked


def _right_padded(held: Sequence[Tensor | None], width: int, layout: _Layout) -> Tensor:
    """``(B, H, width, d)``: each part's ``(K, H, Ts, d)`` encoder keys or values in its rows'
    first ``Ts`` slots, zeros after (masked)."""
    first = next(t for t in held if t is not None)
    batch = layout.rows[-1].stop
    out = first.new_zeros(batch, first.size(1), width, first.size(3))
    for rows, tensor in zip(layout.rows, held, strict=True):
        assert tensor is not None  # only called when every part's is cached
        out[rows, :, : tensor.size(2)] = tensor
    return out


def _batch_encoding(parts: Sequence[RowsToDecode], layout: _Layout) -> Encoded | None:
    """Every part's encoder memory right-padded into ``(B, Ts_max, d_model)``, with the
    ``(B, 1, 1, Ts_max)`` mask of each row's real source positions (and its own mask)."""
    if parts[0].encoded is None:
        return None
    width = max(layout.sources)
    batch = layout.rows[-1].stop
    first = parts[0].encoded.memory
    memory = first.new_zeros(batch, width, first.size(2))
    allowed = torch.zeros(batch, width, dtype=torch.bool, device=first.device)
    for rows, part, length in zip(layout.rows, parts, layout.sources, strict=True):
        assert part.encoded is not None  # checked: every part of an encoder-decoder has one
        memory[rows, :length] = part.encoded.memory
        own = part.encoded.mask
        allowed[rows, :length] = True if own is None else own[:, 0, 0, :]
    return Encoded(memory=memory, mask=allowed[:, None, None, :])


def _row_operations(ops: Operations, positions: Tensor, keys_allowed: Tensor) -> Operations:
    """``ops`` with each row's positions (``(B, Tq)``: its cache length onwards) and with the
    self-attention mask narrowed to the ``(B, Tk)`` keys each row holds."""
    if ops.positions is not paper_positions or ops.rotary_positions is not paper_rotary_positions:
        raise ValueError("a batched step runs the paper's positions: step a what-if's one by one")

    def row_positions(positional: nn.Module, length: int, offset: int) -> Tensor:
        if isinstance(positional, SinusoidalPositionalEncoding):
            return positional.table[positions]  # (B, Tq, d_model)
        if isinstance(positional, LearnedPositionalEmbedding):
            return positional.lookup(positions)  # (B, Tq, d_model)
        raise TypeError(f"no per-row positions for {type(positional).__name__}")

    tables: dict[int, tuple[Tensor, Tensor]] = {}

    def row_rotary(
        rotary: RotaryEmbedding, q: Tensor, k: Tensor, offset: int
    ) -> tuple[Tensor, Tensor]:
        # Each table's rows read once a pass, not once a layer: every layer of a stack shares
        # it. The positions lie within the table (checked before the pass, on the host), so
        # RotaryEmbedding's own check (a device sync each call) is not needed here.
        if id(rotary) not in tables:
            tables[id(rotary)] = (rotary.cos[positions], rotary.sin[positions])
        cos, sin = tables[id(rotary)]  # (B, Tq, rotary_dims)
        return rotary.turn(q, cos, sin), rotary.turn(k, cos, sin)

    base_mask = ops.attention_mask

    def row_mask(
        mask: Tensor | None, shape: tuple[int, ...], device: torch.device
    ) -> Tensor | None:
        mask = base_mask(mask, shape, device)
        if shape[-1] != keys_allowed.size(1):  # not the decoder's self-attention
            return mask
        return combine_masks(mask, keys_allowed[:, None, None, :])

    return replace(
        ops, positions=row_positions, rotary_positions=row_rotary, attention_mask=row_mask
    )


def decode_together(
    model: Transformer,
    parts: Sequence[RowsToDecode],
    *,
    capture: bool = False,
    ops: Operations = PAPER,
    check_ids: bool = True,
) -> list[Decoded]:
    """Decode every part's new tokens in one forward pass; each gets what its own
    ``model.decode(part.tokens, part.encoded, cache=part.cache, call=Call(ops=ops,
    capture=Capture(trace=capture)), last_only=True)`` returns, and its cache is updated as that call would.

    Args:
        model: an encoder-decoder or decoder-only :class:`Transformer` (the caller runs it in
            eval mode, without gradients).
        parts: the decodings, each its own rows, cache (any length) and encoding.
        capture: keep each part's layer traces (its attention trimmed to its own queries and
            keys).
        ops: the operations (positions are the paper's: each row's are set here).
        check_ids: ``ValueError`` for a new id outside the vocabulary (one device sync; a
            decoding that feeds back its own choices, checked where they entered, needs none).

    Returns:
        Per part, a :class:`Decoded`: ``hidden`` ``(K, n, d_model)``, ``logits`` ``(K, 1, V)``
        of its last new position, and when captured its layer traces, input record and
        ``(n, Tk)`` causal mask.
    """
    if not parts:
        return []
    _check_parts(model, parts)
    config, device = model.config, parts[0].tokens.device
    layout = _layout(parts)
    batch, n_new = layout.rows[-1].stop, max(layout.fed)
    tokens = torch.full((batch, n_new), config.pad_id, dtype=torch.long, device=device)
    # Built on the host and sent once: a padded query reads the last position (a valid table
    # row), its output never read.
    positions = torch.full((batch, n_new), config.max_len - 1, dtype=torch.long)
    for rows, part, fed, length in zip(layout.rows, parts, layout.fed, layout.lengths, strict=True):
        tokens[rows, :fed] = part.tokens
        positions[rows, :fed] = torch.arange(length, length + fed)
    positions = positions.to(device)
    vocab = config.tgt_vocab_size
    if check_ids and bool(((tokens < 0) | (tokens >= vocab)).any()):
        raise ValueError(
            f"a new token id is outside the vocabulary: ids must lie in 0..{vocab - 1}"
        )
    cache, held, stacked = _batch_cache(parts, layout)
    # The new slots are every row's own: a real query never reads a padded one (causal mask).
    keys_allowed = torch.cat([held, held.new_ones(batch, n_new)], dim=1)  # (B, span + Tq)
    decoded = model.decode(
        tokens,
        _batch_encoding(parts, layout),
        cache=cache,
        call=Call(_row_operations(ops, positions, keys_allowed), Capture(trace=capture)),
        check_ids=False,  # checked above, for every row
        last_only=True,
    )
    if all(fed == n_new for fed in layout.fed):
        logits = decoded.logits  # (B, 1, V): every row's last position is the last slot
    else:
        last = decoded.hidden[torch.arange(batch, device=device), _each_row(layout, device) - 1]
        logits = model.generator(last[:, None])  # (B, 1, V) of each row's last real position
    _hand_back(parts, layout, cache, stacked)
    return [
        _part_decoded(decoded, logits, layout, i, capture and bool(decoded.layers))
        for i in range(len(parts))
    ]


def _each_row(layout: _Layout, device: torch.device) -> Tensor:
    """``(B,)`` long: the new positions of every row's part."""
    counts = [
        fed
        for rows, fed in zip(layout.rows, layout.fed, strict=True)
        for _ in range(rows.stop - rows.start)
    ]
    return torch.tensor(counts, dtype=torch.long, device=device)


def _hand_back(
    parts: Sequence[RowsToDecode],
    layout: _Layout,
    cache: DecoderCache,
    stacked: _Stacked | None,
) -> None:
    """Give every part's own cache its new keys and values (and real-token flags, and its encoder
    keys where it had none yet) by its own ``update`` (which keeps a sliding window's latest
    keys); every tensor handed is the part's own, never a view of the batch's."""
    span = layout.span
    new: tuple[Tensor, Tensor] | None = None
    if stacked is not None:  # every layer's new keys at once: (L, B, H_kv, Tq, d)
        kvs = [layer.self_attention for layer in cache.layers]
        new = (
            torch.stack([cast(Tensor, kv.keys)[:, :, span:] for kv in kvs]),
            torch.stack([cast(Tensor, kv.values)[:, :, span:] for kv in kvs]),
        )
    for i, part in enumerate(parts):
        rows, fed = layout.rows[i], layout.fed[i]
        if new is not None and stacked is not None:
            held = stacked[i]
            mine = (new[0][:, rows, :, :fed], new[1][:, rows, :, :fed])
            if held is None:  # its first keys: a copy of its rows
                keys, values = mine[0].clone(), mine[1].clone()
            else:  # what it held, then the new: one tensor of its own for every layer
                keys = torch.cat([held[0], mine[0]], dim=3)
                values = torch.cat([held[1], mine[1]], dim=3)
            for lay, layer in enumerate(part.cache.layers):
                kv = layer.self_attention
                kv.keys = kv.values = None  # update() then keeps these (and its window)
                kv.update(keys[lay], values[lay])
        else:
            for lay, width in enumerate(layout.widths):
                batch_kv = cache.layers[lay].self_attention
                assert batch_kv.keys is not None and batch_kv.values is not None
                # Copies: a view would keep the whole batch's keys alive in each part's cache.
                part.cache.layers[lay].self_attention.update(
                    batch_kv.keys[rows, :, width : width + fed].clone(),
                    batch_kv.values[rows, :, width : width + fed].clone(),
                )
        for lay, layer in enumerate(part.cache.layers):
            own_cross, batch_cross = layer.cross_attention, cache.layers[lay].cross_attention
            if own_cross.keys is None and batch_cross.keys is not None:
                assert batch_cross.values is not None
                source = layout.sources[i]
                own_cross.keys = batch_cross.keys[rows, :, :source].clone()
                own_cross.values = batch_cross.values[rows, :, :source].clone()
        assert cache.real_keys is not None  # the pass added the new positions' flags
        part.cache.add_real_keys(cache.real_keys[rows, span : span + fed].clone())


def _part_decoded(
    decoded: Decoded, logits: Tensor, layout: _Layout, i: int, traced: bool
) -> Decoded:
    """Part ``i``'s share of the batch's output, trimmed to its own positions."""
    rows, fed, length = layout.rows[i], layout.fed[i], layout.lengths[i]
    hidden = decoded.hidden[rows, :fed]
    if not traced:
        return Decoded(hidden=hidden, logits=logits[rows])
    layers = []
    for lay, trace in enumerate(decoded.layers):
        width, stored = layout.widths[lay], layout.stored[lay][i]
        keys = slice(width - stored, width + fed)  # this row's keys: held, then new
        layers.append(_layer(trace, rows, fed, keys, layout.sources[i], length))
    record = decoded.input
    part_input = None
    if record is not None:
        positional = record.positional
        positional = positional[rows.start, :fed] if positional.dim() == 3 else positional[:fed]
        part_input = StackInput(
            tokens=record.tokens[rows, :fed],
            token_embedding=record.token_embedding[rows, :fed],
            positional=positional,
            real_tokens=record.real_tokens[rows, :fed],
            position_offset=length,
            token_type_embedding=None,
        )
    causal = causal_mask(fed, length + fed, device=hidden.device)[0, 0]
    return Decoded(
        hidden=hidden, logits=logits[rows], input=part_input, layers=layers, causal=causal
    )


def _layer(
    trace: LayerTrace, rows: slice, fed: int, keys: slice, source: int, offset: int
) -> LayerTrace:
    """One layer's record of the rows ``rows``: its ``fed`` queries, its own keys."""

    def cut(tensor: Tensor | None) -> Tensor | None:
        return None if tensor is None else tensor[rows, :fed]

    cross = trace.cross_attention
    return LayerTrace(
        stack=trace.stack,
        layer=trace.layer,
        input=trace.input[rows, :fed],
        self_attention=_attention(trace.self_attention, rows, fed, keys, offset),
        kept_self_attention_output=cut(trace.kept_self_attention_output),
        feed_forward_output=trace.feed_forward_output[rows, :fed],
        self_attention_update=cut(trace.self_attention_update),
        feed_forward_update=cut(trace.feed_forward_update),
        cross_attention=None
        if cross is None
        else _attention(cross, rows, fed, slice(0, source), offset),
        cross_attention_output=cut(trace.cross_attention_output),
        cross_attention_update=cut(trace.cross_attention_update),
    )


def _attention(
    record: AttentionRecord, rows: slice, fed: int, keys: slice, offset: int
) -> AttentionRecord:
    """An attention record of the rows ``rows``, its ``fed`` queries and the keys ``keys``
    (weights, scaled queries and expanded keys as they were computed in the batch)."""
    queries, all_keys = record.queries, record.keys
    assert queries is not None and all_keys is not None  # a traced pass keeps or rebuilds them
    rotary = record.rotary
    if rotary is not None:
        rotary = Rotated(
            rotary.queries_before[rows, :, :fed],
            rotary.queries_after[rows, :, :fed],
            rotary.keys_before[rows, :, :fed],
            rotary.keys_after[rows, :, :fed],
            offset,
        )
    return AttentionRecord(
        kind=record.kind,
        layer=record.layer,
        kept_scores=None,
        kept_weights=record.weights[rows, :, :fed, keys],
        mask=record.mask[rows, :, :fed, keys],
        query_offset=offset,
        kept_queries=queries[rows, :, :fed],
        kept_keys=all_keys[rows, :, keys],
        kv_head_of=record.kv_head_of,
        rotary=rotary,
        softcap=record.softcap,
    )


def step_together(sessions: Sequence[DecodingSession]) -> list[StepRecord]:
    """Step every session once, their forward passes run as one (:func:`decode_together`);
    each gets the record its own :meth:`DecodingSession.step` would return, and is left as
    that step would leave it (its cache, its tokens, its sampler's random state, its records).

    Sessions may differ in everything but the model: prompt, cache length, strategy, beam
    width, settings. ``ValueError`` for sessions of different models or one given twice, and
    ``RuntimeError`` for one that has stopped, before any session moves.
    """
    if not sessions:
        return []
    model = sessions[0].model
    if any(s.model is not model for s in sessions):
        raise ValueError("sessions of different models cannot share a forward pass")
    if len({id(s) for s in sessions}) != len(sessions):
        raise ValueError("a session given twice would step twice: step it alone")
    ops = sessions[0].loop.ops
    if any(s.loop.ops != ops for s in sessions):
        raise ValueError("sessions running different operations cannot share a forward pass")
    for session in sessions:
        if session.done:
            raise RuntimeError(
                f"a session has stopped ({session.stop_reason}): rewind or start a new one"
            )
    states = [s._start_step() for s in sessions]
    parts = []
    for session in sessions:
        loop = session.loop
        # Without its own cache a session reads every position at each step: here, into an
        # empty cache thrown away after (the same pass: positions from 0, nothing cached).
        cache = loop.cache if loop.cache is not None else model.new_cache()
        parts.append(RowsToDecode(loop.state.tokens[:, cache.length :], cache, loop.encoded))
    capture = any(s.captures for s in sessions)
    exclude = never_generated(model.config)
    with torch.inference_mode(), eval_mode(model):
        # Their ids were checked where they entered; since, each feeds back its own choices.
        decodeds = decode_together(model, parts, capture=capture, ops=ops, check_ids=False)
        records = []
        for session, state, decoded in zip(sessions, states, decodeds, strict=True):
            logits = without_padding(decoded.logits[:, -1], exclude)  # (K, V), as the loop's
            records.append(session._finish_step(state, decoded, logits))
    return records
