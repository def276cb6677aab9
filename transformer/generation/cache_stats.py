"""The key/value cache made visible: what each step computed, what the cache holds, what it
costs in bytes (grouped-query vs full multi-head attention), and a measured check against an
uncached pass.

Without a cache, step n runs the decoder over every position so far. With one, the first step
(the *prefill*) runs over the whole prefix and keeps every layer's keys and values; each later
step (a *decode* step) feeds one new token, whose query attends to the kept keys. The cache
holds, per token, ``2 (K and V) × layers × kv_heads × d_head`` numbers: with grouped-query
attention ``kv_heads`` is smaller than the number of query heads (SmolLM2: 3 for 9), and so is
the cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..core.config import ModelConfig
from ..core.model import DecoderCache, Encoded, LayerCache, Transformer
from ..core.operations import PAPER, Operations
from ..core.run import Call
from ..core.util import eval_mode
from .session import DecodingSession


def cache_bytes_per_token(
    config: ModelConfig, bytes_per_value: int = 4, *, full_heads: bool = False
) -> int:
    """Bytes the self-attention cache keeps per token and per sequence: ``2 × layers ×
    kv_heads × d_head × bytes_per_value`` (``n_heads`` instead of ``kv_heads`` with
    ``full_heads``, what full multi-head attention would keep)."""
    heads = config.n_heads if full_heads else config.kv_heads
    return 2 * config.n_decoder_layers * heads * config.d_head * bytes_per_value


@dataclass(frozen=True)
class StepCost:
    """One decoding step: ``computed`` positions the decoder ran over (per hypothesis), and the
    cache ``length`` (positions kept per hypothesis) once the step is done; ``prefill`` marks a
    step that ran over the whole prefix."""

    step: int
    computed: int
    length: int
    prefill: bool


def step_costs(prefix_length: int, steps: int, use_cache: bool = True) -> list[StepCost]:
    """What each of ``steps`` steps after a ``prefix_length`` prefix computes: with the cache,
    the prefix once, then one position a step (the cache keeping every position fed so far);
    without, every position every step."""
    costs = []
    for n in range(steps):
        fed = prefix_length + n  # positions the decoder reads at step n
        if use_cache:
            costs.append(StepCost(n, fed if n == 0 else 1, fed, n == 0))
        else:
            costs.append(StepCost(n, fed, 0, True))
    return costs


@dataclass(frozen=True)
class LayerCacheSize:
    """What one layer's self-attention cache holds now: ``shape`` of its keys (and of its
    values), ``(rows, kv_heads, positions, d_head)``, and the ``bytes`` of both."""

    layer: int
    shape: tuple[int, ...]
    bytes: int


def layer_sizes(cache: DecoderCache | None) -> list[LayerCacheSize]:
    """Per decoder layer, the shape and bytes of the cached self-attention keys and values
    (read from the tensors themselves; an empty cache gives shape ``()`` and 0 bytes)."""
    if cache is None:
        return []
    sizes = []
    for i, layer in enumerate(cache.layers):
        kv = layer.self_attention
        if kv.keys is None or kv.values is None:
            sizes.append(LayerCacheSize(i, (), 0))
            continue
        nbytes = kv.keys.nelement() * kv.keys.element_size()
        nbytes += kv.values.nelement() * kv.values.element_size()
        sizes.append(LayerCacheSize(i, tuple(kv.keys.shape), nbytes))
    return sizes


@dataclass(frozen=True)
class CacheCheck:
    """The next step computed with the cache and without: seconds each took, how many
    positions each computed (per hypothesis), and the largest difference of their next-token
    logits (float rounding only, when the cache is right)."""

    cached_s: float
    uncached_s: float
    cached_positions: int
    uncached_positions: int
    max_abs_difference: float
    tolerance: float = 1e-3

    @property
    def agrees(self) -> bool:
        """Whether the two passes differ by no more than the rounding of the model's dtype."""
        return self.max_abs_difference <= self.tolerance


def rounding_tolerance(logits: Tensor) -> float:
    """How far two correct computations of the same ``(..., V)`` logits may differ by rounding
    alone: 1e-3 in float32 (or wider); in bfloat16 or float16, 4 units in the last place at
    the logits' largest magnitude (bfloat16 keeps 8 bits: a logit near 20 is rounded by up to
    0.08 at each layer's add, and a cache computes its sums in another order)."""
    if logits.dtype in (torch.float32, torch.float64):
        return 1e-3
    scale = max(1.0, float(logits.detach().float().abs().max()))
    return 4 * torch.finfo(logits.dtype).eps * scale


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _copy(cache: DecoderCache) -> DecoderCache:
    """A cache that shares ``cache``'s tensors: feeding it leaves ``cache`` as it was (an
    update concatenates into new tensors, it never writes into the old ones)."""
    layers = [  # every field copied: a sliding window's bound and what it let go too
        LayerCache(replace(layer.self_attention), replace(layer.cross_attention))
        for layer in cache.layers
    ]
    return DecoderCache(layers=layers, real_keys=cache.real_keys)


def check_next_step(
    model: Transformer,
    tokens: Tensor,
    encoded: Encoded | None = None,
    cache: DecoderCache | None = None,
    ops: Operations = PAPER,
    repeats: int = 3,
) -> CacheCheck:
    """Time the next step of a decoding both ways and compare its logits.

    Args:
        model: the decoder's model.
        tokens: ``(K, T)`` every token read so far (prefix and choices), one row per hypothesis.
        encoded: the encoder's output for the K rows (encoder-decoder models), else ``None``.
        cache: the decoding's cache of the first positions (left unchanged: a copy is fed); a
            fresh one is filled first (untimed) when ``None``.
        ops: the operations of both passes.
        repeats: each pass is timed this many times, alternately, and its fastest time kept
            (one timing on a busy machine says little).

    Returns:
        A :class:`CacheCheck` of the step that predicts token T + 1: the cached pass feeds the
        positions the cache lacks, the uncached one all T (each projects only its last
        position onto the vocabulary, as a decoding step does).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if tokens.dim() != 2 or tokens.size(1) == 0:
        raise ValueError(f"tokens must be (rows, length) ids, got shape {tuple(tokens.shape)}")
    device = tokens.device
    with torch.inference_mode(), eval_mode(model):
        if cache is None:
            cache = model.new_cache()
            if tokens.size(1) > 1:
                model.decode(
                    tokens[:, :-1], encoded, cache=cache, call=Call(ops=ops), last_only=True
                )
        pending = tokens[:, cache.length :]
        cached_s = uncached_s = float("inf")
        for _ in range(repeats):
            fed = _copy(cache)
            _sync(device)
            start = time.perf_counter()
            cached = model.decode(pending, encoded, cache=fed, call=Call(ops=ops), last_only=True)
            _sync(device)
            middle = time.perf_counter()
            uncached = model.decode(tokens, encoded, call=Call(ops=ops), last_only=True)
            _sync(device)
            end = time.perf_counter()
            cached_s, uncached_s = min(cached_s, middle - start), min(uncached_s, end - middle)
        difference = float((cached.logits.float() - uncached.logits.float()).abs().max())
        tolerance = rounding_tolerance(uncached.logits)
    return CacheCheck(
        cached_s=cached_s,
        uncached_s=uncached_s,
        cached_positions=pending.size(1),
        uncached_positions=tokens.size(1),
        max_abs_difference=difference,
        tolerance=tolerance,
    )


def check_session(session: DecodingSession) -> CacheCheck:
    """:func:`check_next_step` of a session where it stands (its cache left as it is)."""
    loop = session.loop
    return check_next_step(session.model, loop.state.tokens, loop.encoded, loop.cache, loop.ops)


__all__ = [
    "CacheCheck",
    "LayerCacheSize",
    "StepCost",
    "cache_bytes_per_token",
    "check_next_step",
    "check_session",
    "layer_sizes",
    "step_costs",
]
