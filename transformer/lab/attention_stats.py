"""Attention at scale: every head summarised by numbers, attention rollout, and a forward pass
that keeps per layer only what these need instead of every ``(T, T)`` weight matrix.

At 2,000 tokens SmolLM2's 30 layers × 9 heads of float32 weights take 4.3 GB. A
:class:`LongPass` observes each layer's weights as the pass computes them (through
:attr:`Capture.observe_attention`), keeps per head five statistics, per layer the
head-mean for rollout (float16) and the scaled queries and key/value-head keys, from which any
one head's weights are recomputed exactly when it is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..core.attention import attention_scores
from ..core.model import Transformer
from ..core.records import AttentionProbe
from ..core.run import Call, Capture
from ..core.trace import AttentionKind

STATISTICS: dict[str, str] = {
    "entropy": "entropy of a query's weights (nats), mean over queries",
    "distance": "mean attention distance |query − key| (tokens), mean over queries",
    "first": "mass on the first token (attention sink), mean over queries",
    "previous": "mass on the previous token, mean over queries",
    "same": "mass on the query's own token, mean over queries",
}
# A head is named by the first rule that holds (the rules as the UI states them).
SINK_SHARE = 0.5
PREVIOUS_SHARE = 0.5
SAME_SHARE = 0.5
LOCAL_DISTANCE = 4.0
BROAD_ENTROPY = 0.6
PATTERN_RULES: tuple[tuple[str, str], ...] = (
    ("first-token", f"mass on the first token ≥ {SINK_SHARE}"),
    ("previous-token", f"mass on the previous token ≥ {PREVIOUS_SHARE}"),
    ("same-token", f"mass on its own token ≥ {SAME_SHARE}"),
    ("local", f"mean distance ≤ {LOCAL_DISTANCE:g} tokens"),
    ("broad", f"entropy ≥ {BROAD_ENTROPY} × that of uniform weights over the allowed keys"),
    ("mixed", "none of the above"),
)


def head_statistics(weights: Tensor, allowed: Tensor | None = None) -> dict[str, Tensor]:
    """Five numbers per head from ``(H, Tq, Tk)`` weights (query ``i`` at position ``i``).

    ``allowed``: ``(Tq, Tk)`` bool, ``True`` = may attend (``None``: every key). Every
    statistic is a mean over queries; the previous-token mass over queries 1.. (query 0 has
    none). Also ``"uniform_entropy"``: the mean over queries of ``log(allowed keys)``, the
    entropy of uniform weights (what :func:`pattern_name` compares ``"entropy"`` with).
    Returns ``{name: (H,) float32}``.

    Computed head by head (the temporaries are one ``(Tq, Tk)``, not ``H`` of them), and the
    mean distance without a ``(Tq, Tk)`` table of distances: ``Σ_k w·|q − k| = Σ_k w·(q − k)
    + 2·Σ_{k>q} w·(k − q)``, each sum a product of the weights with the ``(Tk, 2)`` columns
    ``(1, k)``; the second is 0 where no query may read a later key (a causal mask)."""
    weights = weights.float()
    n_heads, n_queries, n_keys = weights.shape
    device = weights.device
    n_allowed = (
        allowed.sum(-1).float()
        if allowed is not None
        else torch.full((n_queries,), float(n_keys), device=device)
    )
    reads_later = allowed is None or bool(allowed.triu(1).any())
    keys = torch.arange(n_keys, dtype=torch.float32, device=device)
    columns = torch.stack([torch.ones_like(keys), keys], dim=1)  # (Tk, 2): 1 and k
    query_at = torch.arange(n_queries, dtype=torch.float32, device=device)
    diagonal = torch.arange(min(n_queries, n_keys), device=device)
    per_head: dict[str, list[Tensor]] = {name: [] for name in STATISTICS}
    for head in weights:  # (Tq, Tk)
        mass, weighted = (head @ columns).unbind(-1)  # Σ_k w and Σ_k w·k, (Tq,) each
        distance = query_at * mass - weighted
        if reads_later:
            later_mass, later_weighted = (head.triu(1) @ columns).unbind(-1)
            distance = distance + 2 * (later_weighted - query_at * later_mass)
        previous = head[diagonal[1:], diagonal[1:] - 1]
        per_head["entropy"].append(torch.special.entr(head).sum(-1).mean())  # −Σ w log w
        per_head["distance"].append(distance.mean())
        per_head["first"].append(head[:, 0].mean())
        per_head["previous"].append(previous.mean() if previous.numel() else head.new_zeros(()))
        per_head["same"].append(head[diagonal, diagonal].mean())
    stats = {name: torch.stack(values) for name, values in per_head.items()}
    stats["uniform_entropy"] = n_allowed.clamp(min=1).log().mean().expand(n_heads)
    return stats


def pattern_name(stats: dict[str, float]) -> str:
    """The pattern of one head from its statistics (one float each): the first rule of
    :data:`PATTERN_RULES` that holds."""
    if stats["first"] >= SINK_SHARE:
        return "first-token"
    if stats["previous"] >= PREVIOUS_SHARE:
        return "previous-token"
    if stats["same"] >= SAME_SHARE:
        return "same-token"
    if stats["distance"] <= LOCAL_DISTANCE:
        return "local"
    if stats["entropy"] >= BROAD_ENTROPY * stats["uniform_entropy"]:
        return "broad"
    return "mixed"


def rollout_layer(head_mean: Tensor) -> Tensor:
    """One layer's ``A' = 0.5 · A + 0.5 · I``, rows renormalised (Abnar & Zuidema, 2020): the
    residual connection counted as half of what a token passes on. ``(..., T, T)`` → same."""
    eye = torch.eye(head_mean.shape[-1], dtype=torch.float32, device=head_mean.device)
    mixed = 0.5 * head_mean.float() + 0.5 * eye
    return mixed / mixed.sum(-1, keepdim=True)


def rollout(head_means: Tensor) -> Tensor:
    """Attention rollout ``Ã_L ··· Ã_1`` from ``(L, T, T)`` per-layer head-mean weights
    (query × key): row ``i`` of the ``(T, T)`` result says how much token ``i``'s final
    representation draws on each input token. Rows sum to 1; causal stays lower-triangular."""
    result = rollout_layer(head_means[0])
    for layer in head_means[1:]:
        result = rollout_layer(layer) @ result
    return result


def rollout_row(head_means: list[Tensor] | Tensor, token: int) -> Tensor:
    """Row ``token`` of :func:`rollout` without the ``(T, T)`` products: ``e_tokenᵀ Ã_L ··· Ã_1``
    as vector × matrix, from the last layer down. ``(T,)``."""
    row = torch.zeros(head_means[0].shape[-1], dtype=torch.float32)
    row[token] = 1.0
    for layer in reversed(list(head_means)):
        weights = layer.float()
        # row @ ((0.5·A + 0.5·I) / s) with s the row sums, without building the (T, T) matrix.
        scaled = row / (0.5 * weights.sum(-1) + 0.5)
        row = 0.5 * (scaled @ weights) + 0.5 * scaled
    return row


def block_average(matrix: Tensor, max_side: int) -> tuple[Tensor, int]:
    """``(Tq, Tk)`` averaged over ``b × b`` blocks (``b = ceil(max(Tq, Tk) / max_side)``; the
    last block of a side may be smaller, averaged over what it holds): ``(ceil(Tq/b),
    ceil(Tk/b))`` and ``b``."""
    block = max(1, math.ceil(max(matrix.shape) / max_side))
    if block == 1:
        return matrix.float(), 1
    pooled = torch.nn.functional.avg_pool2d(
        matrix.float()[None, None], block, ceil_mode=True, count_include_pad=False
    )
    return pooled[0, 0], block


@dataclass
class LayerSummary:
    """What a :class:`LongPass` keeps of one attention layer (batch of one).

    ``stats``: ``{name: (H,)}`` (:func:`head_statistics`); ``head_mean``: ``(T, T)`` float16
    mean of the heads' weights (rollout's input); ``queries``: ``(H, T, d_head)`` scaled
    queries; ``keys``: ``(H_kv, T, d_head)``; ``kv_head_of``: the key head of each query head."""

    stats: dict[str, Tensor]
    head_mean: Tensor
    queries: Tensor
    keys: Tensor
    kv_head_of: tuple[int, ...]


class _AllObserved(Exception):
    """Raised by :meth:`LongPass.observe` once it kept its last layer: nothing the pass would
    compute after that attention (the last feed-forward, the final norm, the ``(T, V)``
    logits: 390 MB for SmolLM2 at 2,000 tokens) is drawn, so it is not computed."""


@dataclass
class LongPass:
    """One forward pass over one long input, reduced layer by layer as it runs.

    ``kind``: the attention it observed (the model's main self-attention); ``tokens``: the
    ``(T,)`` ids; ``layers``: one :class:`LayerSummary` per layer; ``causal``: whether query
    ``i`` may read only keys ``≤ i``."""

    kind: AttentionKind
    tokens: Tensor
    causal: bool
    layers: list[LayerSummary] = field(default_factory=list)
    stop_after: int = 0  # layers to keep before the pass may stop (0: run it to the end)

    def observe(self, probe: AttentionProbe, kind: AttentionKind | None, layer: int) -> None:
        """Keep what this pass needs of one attention call (an ``observe_attention``)."""
        if kind != self.kind:
            return
        weights = probe.weights[0]  # (H, T, T)
        allowed = probe.mask[0, 0] if probe.mask is not None else None
        if allowed is not None and allowed.shape != weights.shape[-2:]:
            allowed = allowed.expand(weights.shape[-2:])
        first_of = sorted(set(probe.kv_head_of), key=probe.kv_head_of.index)
        heads = [probe.kv_head_of.index(kv) for kv in first_of]  # one query head per kv head
        stats = {k: v.cpu() for k, v in head_statistics(weights, allowed).items()}
        self.layers.append(
            LayerSummary(
                stats=stats,
                head_mean=weights.mean(0).half().cpu(),
                queries=probe.queries[0].cpu().clone(),
                keys=probe.keys[0, heads].cpu().clone(),
                kv_head_of=probe.kv_head_of,
            )
        )
        if len(self.layers) == self.stop_after:
            raise _AllObserved

    @property
    def length(self) -> int:
        """Number of tokens ``T``."""
        return int(self.tokens.numel())

    def statistic(self, name: str) -> Tensor:
        """``(L, H)`` one statistic of every head."""
        return torch.stack([layer.stats[name] for layer in self.layers])

    def patterns(self) -> list[list[str]]:
        """``L × H`` pattern names (:func:`pattern_name`)."""
        names = []
        for layer in self.layers:
            n_heads = layer.queries.shape[0]
            names.append(
                [
                    pattern_name({k: float(v[h]) for k, v in layer.stats.items()})
                    for h in range(n_heads)
                ]
            )
        return names

    def head_weights(
        self, layer: int, head: int, first: int = 0, count: int | None = None
    ) -> Tensor:
        """``(count, T)`` weights of queries ``first .. first+count−1`` of one head, recomputed
        from the kept queries and keys (the same product as the pass)."""
        summary = self.layers[layer]
        count = self.length - first if count is None else count
        queries = summary.queries[head, first : first + count]  # (n, d)
        keys = summary.keys[summary.kv_head_of[head]]  # (T, d)
        mask = None
        if self.causal:
            rows = torch.arange(first, first + queries.shape[0])[:, None]
            mask = rows >= torch.arange(self.length)[None, :]
        scores = attention_scores(queries, keys, mask)
        return torch.softmax(scores, dim=-1)

    def rollout_row(self, token: int) -> Tensor:
        """``(T,)`` what token ``token``'s final representation draws on (:func:`rollout_row`)."""
        return rollout_row([layer.head_mean for layer in self.layers], token)

    def nbytes(self) -> int:
        """Bytes this pass keeps."""
        total = self.tokens.numel() * self.tokens.element_size()
        for layer in self.layers:
            for t in (layer.head_mean, layer.queries, layer.keys, *layer.stats.values()):
                total += t.numel() * t.element_size()
        return total


def main_kind(model: Transformer) -> AttentionKind:
    """The self-attention a long pass observes: the decoder's in a decoder-only model, else the
    encoder's."""
    return "decoder_self" if model.config.architecture == "decoder-only" else "encoder_self"


@torch.no_grad()
def long_pass(
    model: Transformer, ids: Tensor, on_layer: Callable[[int, int], None] | None = None
) -> LongPass:
    """Run ``model`` over ``(T,)`` ids (one input, no padding; in eval mode) keeping per layer
    only a :class:`LayerSummary`. An encoder-decoder model's encoder is observed. The pass
    stops once the last observed layer is kept (what follows it is never drawn).
    ``on_layer(done, total)`` is called as each observed layer is kept (a progress bar)."""
    kind = main_kind(model)
    config = model.config
    causal = kind == "decoder_self"
    n_layers = config.n_decoder_layers if causal else config.n_encoder_layers
    result = LongPass(kind=kind, tokens=ids.cpu(), causal=causal, stop_after=n_layers)
    observe = result.observe
    if on_layer is not None:
        report = on_layer

        def observe(probe: AttentionProbe, kind: AttentionKind | None, layer: int) -> None:
            kept = len(result.layers)
            try:
                result.observe(probe, kind, layer)
            finally:
                if len(result.layers) > kept:
                    report(len(result.layers), n_layers)

    call = Call(capture=Capture(trace=False, observe_attention=observe))
    batch = ids[None].to(model.device)
    was_training = model.training
    model.eval()
    try:
        if config.architecture == "decoder-only":
            model(tgt=batch, call=call)
        elif config.architecture == "encoder-only":
            model(src=batch, call=call)
        else:
            start = torch.full((1, 1), config.pad_id, dtype=torch.long, device=model.device)
            model(batch, start, call=call)
    except _AllObserved:
        pass  # every layer kept: the rest of the pass is not needed
    finally:
        model.train(was_training)
    return result
