"""The one decoding loop: a batch of hypotheses fed back through the decoder one token at a time.

:class:`DecodingLoop` holds what every decoding shares: the source's encoding, the key/value
cache, the tokens read so far and which rows have finished. A step is :meth:`~DecodingLoop.
forward` (the next-token logits, [PAD] excluded), a choice, then :meth:`~DecodingLoop.extend`
(append the choice; a row that chose the end id is finished and is fed padding after).
:class:`~transformer.generation.session.DecodingSession` chooses greedily, by sampling or by
beam search and keeps a record per step; :func:`greedy_batch` chooses greedily for many rows at
once (evaluation, inspection, the command line). Both run this loop.

Where decoding starts and ends is the model's to say (:func:`decoding_ends`): Marian decodes from
its own start id and stops at its ``</s>``, our own models and GPT-2 use the tokenizer's
[BOS]/[EOS] (GPT-2's is ``<|endoftext|>``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.config import ModelConfig
from ..core.model import Decoded, DecoderCache, Encoded, Transformer
from ..core.operations import PAPER, Operations
from ..core.run import Call, Capture
from ..core.special import BOS_ID, EOS_ID
from ..core.trace import AttentionRecord
from ..core.util import eval_mode, is_int
from .sampling import never_generated, without_padding

# -- where decoding starts and ends ---------------------------------------------------------------


def decoding_ends(
    config: ModelConfig, bos_id: int | None, eos_id: int | None
) -> tuple[int | None, int | None]:
    """``(first decoder id, end id)`` of a decoding: the model's own where its configuration
    names them (Marian: ``decoder_start_id``, ``eos_id``), else the tokenizer's ``bos_id`` /
    ``eos_id`` given here (our own models' [BOS]/[EOS]; GPT-2's ``<|endoftext|>``).

    The first id is only read by encoder-decoder models (a decoder-only model continues its
    prompt); ``None`` where neither names one.
    """
    start = config.decoder_start_id if config.decoder_start_id is not None else bos_id
    end = config.eos_id if config.eos_id is not None else eos_id
    return start, end


def source_ends_with_eos(config: ModelConfig) -> bool:
    """Whether a source should end with the model's end id: an encoder-decoder model whose
    configuration names its own end token (Marian's tokenizer writes ``</s>`` after every
    source, and the model was trained on sources that end so); our own models read the bare
    source."""
    return config.architecture == "encoder-decoder" and config.eos_id is not None


def decoder_prefix(config: ModelConfig, source: list[int], bos_id: int | None) -> list[int]:
    """What the decoder reads before the first token it predicts: ``[bos_id]`` for an
    encoder-decoder model (which cannot start without one), the prompt ``source`` itself for a
    decoder-only model (which never reads ``bos_id``)."""
    if not config.has_encoder:
        return list(source)
    if bos_id is None:
        raise ValueError(
            "an encoder-decoder model needs bos_id, the first id its decoder reads: give the "
            "tokenizer's [BOS] or the model's decoder_start_id (see decoding_ends)"
        )
    return [bos_id]


# -- validation shared by sessions, batches and teacher forcing -----------------------------------


def check_ids(ids: Sequence[int], what: str) -> list[int]:
    """``ids`` as a list of ints; ``ValueError`` naming ``what`` if they are not one sequence."""
    if isinstance(ids, Tensor):
        if ids.dim() != 1:
            raise ValueError(f"{what} must be one sequence of ids, got shape {tuple(ids.shape)}")
        ids = ids.tolist()
    ids = list(ids)
    if not all(is_int(i) for i in ids):
        raise ValueError(f"{what} must be a sequence of integer token ids")
    return ids


def check_model_and_source(model: Transformer, source_ids: Sequence[int]) -> list[int]:
    """The source (or prompt) ids, checked against the model: it must have a decoder, and the
    ids must be non-empty, within ``max_len`` and inside the vocabulary."""
    config = model.config
    if not config.has_decoder:
        raise ValueError(f"a {config.architecture} model has no decoder, so it cannot generate")
    what = "source" if config.has_encoder else "prompt"
    source = check_ids(source_ids, what)
    if not source:
        raise ValueError(f"the {what} is empty: give at least one token id")
    if len(source) > config.max_len:
        raise ValueError(
            f"the {what} has {len(source)} tokens, longer than the model's max_len="
            f"{config.max_len}: shorten it to at most {config.max_len} tokens"
        )
    vocab = config.src_vocab_size if config.has_encoder else config.tgt_vocab_size
    bad = [i for i in source if not 0 <= i < vocab]
    if bad:
        raise ValueError(f"{what} ids must lie in 0..{vocab - 1}; got {bad[0]}")
    return source


def labels(decode_token: Callable[[int], str] | None, ids: list[int]) -> list[str] | None:
    """``decode_token`` of every id, or ``None`` without one."""
    return None if decode_token is None else [decode_token(i) for i in ids]


def last_query_rows(decoded: Decoded, row: int) -> tuple[np.ndarray, np.ndarray | None]:
    """``(L, H, Tk)`` self- and ``(L, H, Ts)`` cross-attention weights of the last query.

    A sliding-window layer's cache holds only its window's keys: its row is padded in front
    with the zero weight the positions it let go receive, so that every layer's row has one
    column per position."""

    def every_position(record: AttentionRecord) -> Tensor:
        weights = record.weights[row, :, -1]  # (H, keys this layer held)
        missing = record.query_offset + record.weights.shape[2] - weights.shape[-1]
        return F.pad(weights, (missing, 0)) if missing > 0 else weights

    self_rows = torch.stack([every_position(layer.self_attention) for layer in decoded.layers])
    cross = [layer.cross_attention for layer in decoded.layers]
    cross_rows = None
    if cross and all(record is not None for record in cross):
        stacked = torch.stack([record.weights[row, :, -1] for record in cross if record])
        cross_rows = stacked.float().cpu().numpy()
    return self_rows.float().cpu().numpy(), cross_rows


def room(max_len: int, prefix_length: int) -> int:
    """Tokens a decoder of ``max_len`` positions can produce after a prefix: the last chosen token
    is never fed back, so it may take position ``max_len``."""
    return max_len - prefix_length + 1


# -- the loop -------------------------------------------------------------------------------------


@dataclass
class LoopState:
    """What a step starts from (kept by a session so that it can rewind to it)."""

    tokens: Tensor  # (K, T) long: K hypotheses, prefix included
    scores: Tensor  # (K,) summed log-probabilities (beam search)
    lengths: Tensor  # (K,) generated tokens, [EOS] included, padding after it not
    finished: Tensor  # (K,) bool
    rng_state: Tensor | None = None


class DecodingLoop:
    """``K`` rows decoded together against one encoding, with or without the key/value cache.

    Args:
        model: an encoder-decoder or decoder-only :class:`Transformer`; the caller runs it in
            eval mode under ``torch.inference_mode()``.
        prefix: ``(K, T)`` the first decoder inputs of every row ([BOS], or the prompt).
        encoded: the encoder's output for the ``K`` rows (encoder-decoder), else ``None``.
        eos_id: a row finishes when it chooses this id; ``None`` never finishes.
        use_cache: feed only the new positions, reusing earlier keys and values.
        ops: the operations every step runs (the paper's by default).
    """

    def __init__(
        self,
        model: Transformer,
        prefix: Tensor,
        encoded: Encoded | None,
        *,
        eos_id: int | None,
        use_cache: bool = True,
        ops: Operations = PAPER,
    ) -> None:
        self.model, self.encoded, self.eos_id, self.ops = model, encoded, eos_id, ops
        self.cache: DecoderCache | None = model.new_cache() if use_cache else None
        self.prefix_length = prefix.size(1)
        rows, device = prefix.size(0), prefix.device
        self.state = LoopState(
            tokens=prefix,
            scores=torch.zeros(rows, device=device),
            lengths=torch.zeros(rows, dtype=torch.long, device=device),
            finished=torch.zeros(rows, dtype=torch.bool, device=device),
        )

    def forward(self, *, capture: bool = False, check_ids: bool = False) -> tuple[Decoded, Tensor]:
        """Run the decoder so that its last position predicts the token after each row.

        With a cache only the positions it has not seen are fed (the whole prefix on the first
        step, then one token); without one every row is recomputed. Ids are validated where they
        enter (``check_ids`` on the first step), not per step.

        Returns:
            The decoder's output (its layer traces when ``capture``; its logits the last
            position's only, ``(K, 1, V)``) and the ``(K, V)`` next-token logits with [PAD]
            excluded (:func:`never_generated`).
        """
        tokens = self.state.tokens
        call = Call(ops=self.ops, capture=Capture(trace=capture))
        if self.cache is None:
            decoded = self.model.decode(
                tokens,
                self.encoded,
                call=call,
                check_ids=check_ids,
                last_only=True,
            )
        else:
            pending = tokens[:, self.cache.length :]  # (K, T_new): the prefix, then one token
            decoded = self.model.decode(
                pending,
                self.encoded,
                cache=self.cache,
                call=call,
                check_ids=check_ids,
                last_only=True,
            )
        logits = without_padding(decoded.logits[:, -1], never_generated(self.model.config))
        return decoded, logits  # (K, V)

    def extend(self, chosen: Tensor, scores: Tensor | None = None) -> LoopState:
        """The state after appending ``chosen`` ``(K,)`` to every row: a row that had finished
        gets [PAD] instead (and keeps its length); a row that chose the end id finishes."""
        state, pad = self.state, self.model.config.pad_id
        chosen = chosen.masked_fill(state.finished, pad)
        finished = state.finished
        if self.eos_id is not None:
            finished = finished | (chosen == self.eos_id)
        return LoopState(
            tokens=torch.cat([state.tokens, chosen[:, None]], dim=1),
            scores=state.scores if scores is None else scores,
            lengths=state.lengths + (~state.finished).long(),
            finished=finished,
        )

    def reorder(self, order: Tensor) -> None:
        """Make cache row ``i`` the old row ``order[i]`` (beam search keeps its best hypotheses)."""
        cache = self.cache
        if cache is None or torch.equal(order, torch.arange(order.numel(), device=order.device)):
            return
        for layer in cache.layers:
            kv = layer.self_attention
            if kv.keys is not None and kv.values is not None:
                kv.keys = kv.keys.index_select(0, order)
                kv.values = kv.values.index_select(0, order)
        if cache.real_keys is not None:
            cache.real_keys = cache.real_keys.index_select(0, order)


def greedy_choice(logits: Tensor) -> Tensor:
    """``(K, V)`` next-token logits → ``(K,)`` the most probable id of every row: the greedy
    choice, written once for every decoding."""
    return logits.argmax(dim=-1)


def greedy_batch(
    model: Transformer,
    src: Tensor | None = None,
    prompts: Tensor | None = None,
    *,
    bos_id: int | None = BOS_ID,
    eos_id: int | None = EOS_ID,
    max_new_tokens: int = 64,
    ops: Operations = PAPER,
) -> list[list[int]]:
    """Greedy outputs of a whole batch, decoded together with the key/value cache.

    The same loop and greedy choice as a greedy :class:`DecodingSession`, for many rows at once
    and without per-step records: what evaluation, inspection and the command line use.

    Args:
        model: an encoder-decoder or decoder-only :class:`Transformer` (run in eval mode, its
            training flag restored after).
        src: encoder-decoder: ``(B, Ts)`` right-padded source ids; each target starts with
            ``bos_id``.
        prompts: decoder-only: ``(B, Tp)`` prompt ids, all of the same length (a padded prompt
            would shift the positions of the tokens after it).
        eos_id: a row stops when it chooses this id (the rows that have stopped are fed
            ``pad_id`` until all have); ``None`` never stops early.
        max_new_tokens: tokens to generate at most per row (``[EOS]`` included); the model's
            ``max_len`` bounds it as in a session.
        ops: the operations of every step (the paper's by default; a what-if's otherwise).

    Returns:
        Per row, the generated ids without the prefix and without ``[EOS]`` (nor anything after).
    """
    config = model.config
    if not config.has_decoder:
        raise ValueError(f"a {config.architecture} model has no decoder, so it cannot generate")
    if config.has_encoder:
        if src is None or prompts is not None:
            raise ValueError("an encoder-decoder model decodes from src (B, Ts), not prompts")
        if src.dim() != 2 or src.size(1) == 0:
            raise ValueError(f"src must be (batch, length) ids, got shape {tuple(src.shape)}")
        if bos_id is None or not is_int(bos_id):
            raise ValueError(f"bos_id must be a token id, got {bos_id!r}")
        prefix = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    else:
        if prompts is None or src is not None:
            raise ValueError("a decoder-only model continues prompts (B, Tp), it has no src")
        if prompts.dim() != 2 or prompts.size(1) == 0:
            raise ValueError(f"prompts must be (batch, length) ids, got {tuple(prompts.shape)}")
        prefix = prompts
    if not is_int(max_new_tokens) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer ≥ 0, got {max_new_tokens!r}")
    steps = min(max_new_tokens, room(config.max_len, prefix.size(1)))
    with torch.inference_mode(), eval_mode(model):
        encoded = model.encode(src, call=Call(ops=ops)) if src is not None else None
        loop = DecodingLoop(model, prefix, encoded, eos_id=eos_id, ops=ops)
        for step in range(steps):
            _decoded, logits = loop.forward(check_ids=step == 0)
            loop.state = loop.extend(greedy_choice(logits))
            if bool(loop.state.finished.all()):
                break
    generated = loop.state.tokens[:, prefix.size(1) :].tolist()
    return [row[: row.index(eos_id)] if eos_id in row else row for row in generated]
