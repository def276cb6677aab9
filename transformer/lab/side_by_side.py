"""Two models read the same text: one head's attention, the next-token distribution and the
loss per token, lined up where their tokenizers cut the text differently.

Two tokenizers rarely agree ("Colosseum" is one piece for one and three for another), so a
token of one model has no twin in the other. What they share is the text: each token covers a
span of characters, and wherever both tokenizations end a token at the same character the two
models have read exactly the same prefix. Those common ends cut the text into *groups*
(:func:`align`); a group holds one or more tokens of each model. Per group:

- the loss is the sum of its tokens' losses: ``−log p(the group's characters | the text
  before)``, a number both models give for the same characters, so the two can be compared
  (per token they cannot: a model that cuts finer pays in more, smaller steps);
- attention is summed over the keys of a key group and averaged over the queries of a query
  group, so each row still sums to 1.

Tokens the tokenizer inserts itself (a ``[BOS]``, zero characters wide) form a group of their
own at the start, empty on the side of a model that has none.

    >>> pair = side_by_side(gpt2, gpt2_tok, smol, smol_tok, "The Eiffel Tower is in", (1, 1), (1, 1))
    >>> pair.labels, pair.loss_a, pair.loss_b
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.model import Transformer
from ..core.run import TRACE
from ..core.util import eval_mode
from ..text.tokenization import Tokenizer
from .analysis import shown_piece

Span = tuple[int, int]
Group = tuple[list[int], list[int]]


@dataclass(frozen=True)
class Reading:
    """One model's reading of a text.

    Attributes:
        ids: ``(T,)`` the ids the model read (its ``[BOS]`` first where its prompts begin so).
        pieces: the ``T`` pieces as the app writes them (``"␣Paris"``).
        spans: the ``T`` character spans ``(start, end)`` of the text each token covers, made
            contiguous (a token starts where the one before ended; an inserted token is
            ``(0, 0)``).
        attention: ``(T, T)`` the chosen head's weights (query rows, key columns).
        losses: ``(T,)`` ``−log p(token t | tokens < t)`` in nats; ``nan`` at ``t = 0``.
        next_probs: ``(V,)`` the next-token distribution after the whole text.
        layer, head: the head read, from 0.
    """

    ids: Tensor
    pieces: list[str]
    spans: list[Span]
    attention: Tensor
    losses: Tensor
    next_probs: Tensor
    layer: int
    head: int


def token_spans(tokenizer: Tokenizer, text: str, ids: Sequence[int]) -> list[Span]:
    """The character span of ``text`` each of ``ids`` covers, contiguous: the tokenizer's own
    offsets, each start moved to where the token before ended (byte-level tokenizers trim the
    leading space off a token's offsets; a character split over several byte tokens gives
    them one span, which this gives to the first and leaves the rest empty at its end).
    Tokens before the text's first (an inserted ``[BOS]``) are ``(0, 0)``.

    ``ids`` must be the tokenizer's encoding of ``text`` without its post-processor, with
    inserted tokens only at the start."""
    encoding = tokenizer.encoding(text, add_special_tokens=False)
    offsets = list(encoding.offsets)
    extra = len(ids) - len(offsets)
    if extra < 0 or list(ids[extra:]) != list(encoding.ids):
        raise ValueError("the ids are not this tokenizer's encoding of the text")
    spans: list[Span] = [(0, 0)] * extra
    end = 0
    for _, stop in offsets:
        stop = max(stop, end)
        spans.append((end, stop))
        end = stop
    return spans


def align(spans_a: Sequence[Span], spans_b: Sequence[Span]) -> list[Group]:
    """The tokens of two tokenizations of one text, grouped where both end a token at the same
    character: a list of ``(tokens of a, tokens of b)``, in order, every token in exactly one
    group. Zero-width tokens at the start (an inserted ``[BOS]``) form a first group of their
    own (empty on a side that has none); a zero-width token elsewhere joins the group of the
    token before it."""
    groups: list[Group] = []

    def leading(spans: Sequence[Span]) -> int:
        n = 0
        while n < len(spans) and spans[n][1] <= 0:
            n += 1
        return n

    lead_a, lead_b = leading(spans_a), leading(spans_b)
    if lead_a or lead_b:
        groups.append((list(range(lead_a)), list(range(lead_b))))
    ends_a = {end for _, end in spans_a[lead_a:]}
    ends_b = {end for _, end in spans_b[lead_b:]}
    cuts = sorted(ends_a & ends_b)
    i, j = lead_a, lead_b
    for cut in cuts:
        group_a, group_b = [], []
        while i < len(spans_a) and spans_a[i][1] <= cut:
            group_a.append(i)
            i += 1
        while j < len(spans_b) and spans_b[j][1] <= cut:
            group_b.append(j)
            j += 1
        if group_a or group_b:
            groups.append((group_a, group_b))
    if i < len(spans_a) or j < len(spans_b):  # texts whose last ends differ (never, if one text)
        groups.append((list(range(i, len(spans_a))), list(range(j, len(spans_b)))))
    return groups


def group_labels(
    text: str, groups: Sequence[Group], spans_a: Sequence[Span], spans_b: Sequence[Span]
) -> list[str]:
    """A label per group: its characters (spaces as ``␣``), its number first so that labels are
    unique (``"3:␣Tower"``); the inserted tokens' group is ``"0:(start)"``."""
    labels = []
    for number, (tokens_a, tokens_b) in enumerate(groups):
        tokens, spans = (tokens_a, spans_a) if tokens_a else (tokens_b, spans_b)
        start, end = spans[tokens[0]][0], spans[tokens[-1]][1]
        piece = text[start:end].replace(" ", "␣").replace("\n", "↵") or "(start)"
        labels.append(f"{number}:{piece}")
    return labels


def grouped_attention(attention: Tensor, groups: Sequence[list[int]]) -> Tensor:
    """``(G, G)`` attention between groups from ``(T, T)`` token attention: summed over a key
    group's tokens, averaged over a query group's; ``nan`` where a group is empty."""
    n = len(groups)
    out = torch.full((n, n), float("nan"))
    weights = attention.float().cpu()
    for q, queries in enumerate(groups):
        if not queries:
            continue
        for k, keys in enumerate(groups):
            if keys:
                out[q, k] = weights[queries][:, keys].sum(dim=1).mean()
    return out


def grouped_loss(losses: Tensor, groups: Sequence[list[int]]) -> Tensor:
    """``(G,)`` the loss of each group, the sum of its tokens' (``nan`` for an empty group, or
    one holding the first token, which nothing predicts)."""
    values = losses.float().cpu()
    return torch.tensor(
        [float(values[tokens].sum()) if tokens else float("nan") for tokens in groups]
    )


def read(model: Transformer, tokenizer: Tokenizer, text: str, layer: int, head: int) -> Reading:
    """One decoder-only model's :class:`Reading` of ``text`` (``layer`` and ``head`` from 0).
    ``ValueError`` with a plain message for what it cannot read."""
    config = model.config
    if config.architecture != "decoder-only":
        raise ValueError(
            f"a {config.architecture} model does not read a text token by token to predict the "
            "next one: choose a model that continues text"
        )
    if not text.strip():
        raise ValueError("enter a text")
    if not 0 <= layer < config.n_decoder_layers or not 0 <= head < config.n_heads:
        raise ValueError(
            f"this model has layers 1..{config.n_decoder_layers} and heads 1..{config.n_heads}"
        )
    ids = tokenizer.encode_ids(text, add_bos=config.prompt_bos)
    if len(ids) < 2:
        raise ValueError("the text needs at least two tokens")
    if len(ids) > config.max_len:
        raise ValueError(f"the text is {len(ids)} tokens long; this model reads {config.max_len}")
    tokens = torch.tensor([ids], device=model.device)
    with torch.inference_mode(), eval_mode(model):
        decoded = model.decode(tokens, call=TRACE)
        attention = decoded.layers[layer].self_attention.weights[0, head].float().cpu()
        logits = decoded.logits[0].float().cpu()  # (T, V)
    losses = torch.full((len(ids),), float("nan"))
    losses[1:] = F.cross_entropy(logits[:-1], tokens[0, 1:].cpu(), reduction="none")
    pieces = [shown_piece(tokenizer, tokenizer.id_to_token(i) or "?") for i in ids]
    return Reading(
        ids=tokens[0].cpu(),
        pieces=pieces,
        spans=token_spans(tokenizer, text, ids),
        attention=attention,
        losses=losses,
        next_probs=torch.softmax(logits[-1], dim=-1),
        layer=layer,
        head=head,
    )


@dataclass(frozen=True)
class SideBySide:
    """Two :class:`Reading` of one text, lined up (:func:`align`).

    Attributes:
        text: the text both read.
        a, b: each model's reading.
        groups: ``(tokens of a, tokens of b)`` per group.
        labels: a unique label per group (:func:`group_labels`).
        attention_a, attention_b: ``(G, G)`` :func:`grouped_attention` of each.
        loss_a, loss_b: ``(G,)`` :func:`grouped_loss` of each.
    """

    text: str
    a: Reading
    b: Reading
    groups: list[Group]
    labels: list[str]
    attention_a: Tensor
    attention_b: Tensor
    loss_a: Tensor
    loss_b: Tensor

    @property
    def split(self) -> list[int]:
        """The groups (by index) that hold more than one token on either side: where the two
        tokenizers cut the text differently."""
        return [n for n, (ga, gb) in enumerate(self.groups) if len(ga) > 1 or len(gb) > 1]


def side_by_side(
    model_a: Transformer,
    tokenizer_a: Tokenizer,
    model_b: Transformer,
    tokenizer_b: Tokenizer,
    text: str,
    head_a: tuple[int, int],
    head_b: tuple[int, int],
) -> SideBySide:
    """``text`` read by two decoder-only models (``head_a``, ``head_b``: the ``(layer, head)``
    of each whose attention to read, from 0), lined up group by group (module docstring)."""
    a = read(model_a, tokenizer_a, text, *head_a)
    b = read(model_b, tokenizer_b, text, *head_b)
    groups = align(a.spans, b.spans)
    side_a = [ga for ga, _ in groups]
    side_b = [gb for _, gb in groups]
    labels = group_labels(text, groups, a.spans, b.spans)
    return SideBySide(
        text=text,
        a=a,
        b=b,
        groups=groups,
        labels=labels,
        attention_a=grouped_attention(a.attention, side_a),
        attention_b=grouped_attention(b.attention, side_b),
        loss_a=grouped_loss(a.losses, side_a),
        loss_b=grouped_loss(b.losses, side_b),
    )


__all__ = [
    "Reading",
    "SideBySide",
    "align",
    "group_labels",
    "grouped_attention",
    "grouped_loss",
    "read",
    "side_by_side",
    "token_spans",
]
