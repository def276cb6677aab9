"""From task examples to padded batches of token ids.

Encoder-decoder: the source is its tokens; the target is ``[BOS] tokens [EOS]``, fed to the
decoder shifted right (``tgt_in`` = all but the last, ``tgt_out`` = all but the first).
Decoder-only: one sequence ``[BOS] source target [EOS]`` is both input and (shifted) output.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.util import pad
from ..text.tokenization import Tokenizer
from .tasks import Example, decoder_only_text


@dataclass(frozen=True)
class EncodedPair:
    """One example as ids: ``source`` (empty for decoder-only) and ``target`` with BOS/EOS."""

    source: tuple[int, ...]
    target: tuple[int, ...]


@dataclass
class Batch:
    """A padded batch.

    ``src`` ``(B, Ts)`` or ``None`` (decoder-only); ``tgt_in`` and ``tgt_out`` ``(B, Tt)``: the
    decoder reads ``tgt_in`` and is trained to predict ``tgt_out`` (padding is ignored).
    """

    src: Tensor | None
    tgt_in: Tensor
    tgt_out: Tensor
    pairs: list[EncodedPair]

    @property
    def n_tokens(self) -> int:
        """Number of predicted (non-padding) target tokens."""
        return sum(len(p.target) - 1 for p in self.pairs)

    def to(self, device: torch.device) -> Batch:
        """The same batch with its tensors on ``device``."""
        src = self.src.to(device, non_blocking=True) if self.src is not None else None
        return Batch(src, self.tgt_in.to(device), self.tgt_out.to(device), self.pairs)


def encode_examples(
    examples: Sequence[Example], tokenizer: Tokenizer, architecture: str
) -> list[EncodedPair]:
    """Tokenize examples for an ``"encoder-decoder"`` or ``"decoder-only"`` model."""
    pairs = []
    for example in examples:
        if architecture == "decoder-only":
            target = tokenizer.encode_ids(decoder_only_text(example), add_bos=True, add_eos=True)
            pairs.append(EncodedPair((), tuple(target)))
        else:
            source = tokenizer.encode_ids(example.source)
            target = tokenizer.encode_ids(example.target, add_bos=True, add_eos=True)
            pairs.append(EncodedPair(tuple(source), tuple(target)))
    return pairs


def collate(pairs: Sequence[EncodedPair], pad_id: int, has_source: bool | None = None) -> Batch:
    """Pad a list of pairs into one :class:`Batch`.

    ``has_source``: whether the model has an encoder (``src`` is built even where some, or all,
    sources are empty); ``None`` infers it from the pairs (any non-empty source). Callers that
    know the architecture should say it.
    """
    pairs = list(pairs)
    if has_source is None:
        has_source = any(p.source for p in pairs)
    target = pad([p.target for p in pairs], pad_id)
    src = pad([p.source for p in pairs], pad_id) if has_source else None
    return Batch(src=src, tgt_in=target[:, :-1], tgt_out=target[:, 1:], pairs=pairs)


def batches(
    pairs: Sequence[EncodedPair],
    batch_size: int,
    pad_id: int,
    shuffle: bool = False,
    rng: random.Random | None = None,
    has_source: bool | None = None,
) -> list[Batch]:
    """Group pairs of similar length into batches (less padding), in random order if ``shuffle``.

    With ``shuffle`` the pairs are shuffled, sorted by length within pools of 50 batches, cut
    into batches and the batches shuffled: each epoch differs, yet little padding is wasted.
    ``has_source`` is passed to :func:`collate` (``None``: any non-empty source means an encoder).
    """
    if has_source is None:
        has_source = any(p.source for p in pairs)
    order = list(range(len(pairs)))
    rng = rng or random.Random(0)  # used only to shuffle
    if shuffle:
        rng.shuffle(order)
    pool = batch_size * 50
    chunks: list[list[int]] = []
    for start in range(0, len(order), pool):
        part = sorted(
            order[start : start + pool], key=lambda i: (len(pairs[i].target), len(pairs[i].source))
        )
        chunks.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
    if shuffle:
        rng.shuffle(chunks)
    return [collate([pairs[i] for i in chunk], pad_id, has_source) for chunk in chunks]
