"""A big model's uncached pass, handed off the cheap event's queue to a pool of its own.

Gradio queues calls by event, not by cost: a click on the Attention tab is one event whether it
reads a 0.2 M-parameter bundled model (milliseconds) or SmolLM2 over 500 tokens (seconds on a
CPU). Six such SmolLM2 clicks held all of the event's workers, and a tiny model's click waited
8 s behind them. So the cost of a pass is estimated before it runs, from the model and the
request (parameters × the tokens it reads, :func:`admit`; a pass whose analysis is cached costs
nothing and never comes here), and:

- a pass under ``limits.COSTLY_PASS_COST`` runs where it was asked, as before;
- a costly one is handed to :class:`CostlyPasses`, a bounded pool of the server's own threads
  (one on a CPU, where one such pass takes every core): the handler's thread sleeps until its
  pass is done, and its page is told its place in line (``gr.Info``). At most ``capacity``
  handlers wait on the pool at once, and every cheap event is given that many workers more
  than its share (``ui/demo.py``), so sleeping handlers never hold the workers a cheap call
  needs; one more is refused with a message that says to try again in a few seconds;
- a pass over ``limits.MAX_PASS_COST`` is refused before anything runs, with the number of
  tokens this model may read here.

Events that already wait in a queue of their own (the long view, the silent mistakes,
training) run their passes in place: they hold no cheap worker.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from . import limits
from .errors import InputError

T = TypeVar("T")

# Queues (gradio concurrency ids) whose events are costly already and wait apart from the
# cheap ones: a pass asked for there runs in place.
APART_QUEUES = frozenset({"costly", "silent-mistakes", "training"})

_PARAMETERS: weakref.WeakKeyDictionary[torch.nn.Module, int] = weakref.WeakKeyDictionary()
_PARAMETERS_LOCK = threading.Lock()


def parameters(model: torch.nn.Module) -> int:
    """How many parameters ``model`` holds (tied weights counted once); kept per model."""
    with _PARAMETERS_LOCK:
        known = _PARAMETERS.get(model)
    if known is None:
        seen: set[int] = set()
        known = 0
        for parameter in model.parameters():  # .parameters() already skips a tied repeat
            if id(parameter) not in seen:
                seen.add(id(parameter))
                known += parameter.numel()
        with _PARAMETERS_LOCK:
            _PARAMETERS[model] = known
    return known


@dataclass(frozen=True)
class PassCost:
    """A pass's estimated cost: the model's parameters times the tokens it reads."""

    parameters: int
    tokens: int

    @property
    def cost(self) -> int:
        """Parameter-tokens: about half the pass's multiply-adds."""
        return self.parameters * self.tokens


def device_scale(device: torch.device) -> float:
    """How much more work a pass may be on ``device`` than on a CPU before it counts as costly
    (or too big): a GPU runs a big pass some fifty times faster than this project's CPU."""
    return limits.GPU_PASS_SPEEDUP if device.type == "cuda" else 1.0


def check_cost(name: str, estimate: PassCost, device: torch.device) -> None:
    """Refuse a pass over ``limits.MAX_PASS_COST`` with what to do instead."""
    limit = limits.MAX_PASS_COST * device_scale(device)
    if estimate.cost <= limit:
        return
    most = max(1, int(limit // max(1, estimate.parameters)))
    raise InputError(
        f"this text is too long for {name} on this server: {estimate.tokens:,} tokens through "
        f"{estimate.parameters / 1e6:,.0f} M parameters is more than one request may ask. "
        f"Shorten the text to at most {most:,} tokens (fewer sentences, or shorter ones), "
        "or choose a smaller model"
    )


def current_queue() -> str | None:
    """The gradio queue (concurrency id) of the event this thread answers; None outside an
    event (a test, a notebook: no worker of the server's to keep free)."""
    from gradio.context import LocalContext

    blocks = LocalContext.blocks.get(None)
    event_id = LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or event_id is None:
        return None
    event = queue.event_ids_to_events.get(event_id)
    return None if event is None else str(event.concurrency_id)


def pool_workers(device: torch.device) -> int:
    """Costly passes at once: one on a CPU (one takes every core), two on a GPU."""
    return 2 if device.type == "cuda" else 1


class PoolFull(InputError):
    """Every place of the costly pool is taken: the message says to try again."""


class CostlyPasses:
    """A bounded pool of ``workers`` threads for costly passes, which at most ``capacity``
    callers wait on at once (those running included); a pass asked for again while it runs is
    joined, not run twice. ``handed``, ``refused`` and ``joined`` count what happened."""

    def __init__(self, workers: int, capacity: int) -> None:
        self.workers = workers
        self.capacity = max(workers, capacity)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="costly-pass")
        # Reentrant: a pass done before its callback is added runs the callback at once, in
        # the thread that holds the lock.
        self._lock = threading.RLock()
        self._waiting = 0  # callers sleeping on a pass (running or queued)
        self._running: dict[Any, Future[Any]] = {}
        self.handed = self.refused = self.joined = 0

    @property
    def waiting(self) -> int:
        """Callers waiting on the pool now (their passes running or queued)."""
        with self._lock:
            return self._waiting

    def run(self, key: Any, compute: Callable[[], T], label: str) -> T:
        """``compute()``'s result, computed on one of the pool's threads while this one
        sleeps; refused (``PoolFull``) when ``capacity`` callers wait already. The page of
        a caller that must wait is told how many passes are ahead of it (``label`` names the
        model)."""
        with self._lock:
            if self._waiting >= self.capacity:
                self.refused += 1
                raise PoolFull(
                    f"the server is busy with {self._waiting} passes of large models (the most "
                    f"it takes at once): try again in a few seconds, or choose a smaller model"
                )
            ahead = self._waiting
            self._waiting += 1
            future = self._running.get(key)
            if future is None:
                future = self._pool.submit(compute)
                self._running[key] = future
                future.add_done_callback(lambda done: self._forget(key, done))
                self.handed += 1
            else:
                self.joined += 1
        try:
            if ahead >= self.workers:
                _tell(
                    f"{label}: a large model's first pass, in line behind {ahead} other "
                    f"{'pass' if ahead == 1 else 'passes'} (place {ahead + 1}). Smaller models "
                    "answer meanwhile."
                )
            return future.result()
        finally:
            with self._lock:
                self._waiting -= 1

    def _forget(self, key: Any, done: Future[Any]) -> None:
        with self._lock:
            if self._running.get(key) is done:
                del self._running[key]

    def shutdown(self) -> None:
        """Stop the pool's threads once the passes they run are done."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _tell(message: str) -> None:
    """A toast on the page of the event this thread answers (nothing outside one)."""
    import gradio as gr
    from gradio.context import LocalContext

    if LocalContext.event_id.get(None) is not None:
        gr.Info(message, duration=8)


def costly_here(estimate: PassCost, device: torch.device) -> bool:
    """Whether a pass of this cost, asked for by this thread's event, goes to the pool: it is
    costly, and the event waits in a cheap queue (not one of ``APART_QUEUES``, not outside
    any event)."""
    if estimate.cost < limits.COSTLY_PASS_COST * device_scale(device):
        return False
    queue = current_queue()
    return queue is not None and queue not in APART_QUEUES


def admit(name: str, model: torch.nn.Module, tokens: int, device: torch.device) -> bool:
    """Weigh a pass of ``tokens`` tokens through ``model`` (the menu's ``name``) before it runs
    (:class:`PassCost`): refused over the limit with what to do instead (:func:`check_cost`);
    ``True`` when it must leave this thread for the pool (:func:`costly_here`), ``False`` when
    it runs where it was asked."""
    estimate = PassCost(parameters(model), tokens)
    check_cost(name, estimate, device)
    return costly_here(estimate, device)


@dataclass(frozen=True)
class DecodingCost:
    """What a generation will hold once it has run to the end, estimated before its first
    step from the model's configuration: the key/value cache (two tensors a layer of
    ``kv_heads × d_head`` values per beam and position, in the model's dtype) and the records
    of its steps (each step keeps its query's attention row over every head of every layer,
    and over the source's positions for a translation, as float32)."""

    beams: int
    positions: int  # the prefix and every new token
    steps: int
    cache_bytes: int
    record_bytes: int

    @property
    def bytes(self) -> int:
        """The whole estimate."""
        return self.cache_bytes + self.record_bytes


def decoding_cost(
    config: Any, beams: int, prefix: int, steps: int, source: int = 0, element_bytes: int = 4
) -> DecodingCost:
    """:class:`DecodingCost` of ``steps`` new tokens after ``prefix`` read ones, ``beams`` wide,
    through a model of ``config`` (a ``ModelConfig``) whose weights take ``element_bytes``
    each; ``source`` counts a translation's source positions."""
    positions = prefix + steps
    layers = config.n_decoder_layers
    per_position = 2 * layers * config.kv_heads * config.d_head * element_bytes  # K and V
    cache = beams * positions * per_position
    # Step s reads prefix + s positions: Σ over the steps of the positions its row spans.
    read = steps * prefix + steps * (steps - 1) // 2
    rows = layers * config.n_heads * (read + steps * source) * 4
    return DecodingCost(beams, positions, steps, cache, rows)


def check_decoding(name: str, cost: DecodingCost, device: torch.device) -> None:
    """Refuse a generation whose :class:`DecodingCost` passes ``limits.MAX_DECODING_BYTES``
    (on a GPU too: it is memory, not time), saying how to make it fit."""
    limit = limits.MAX_DECODING_BYTES
    if cost.bytes <= limit:
        return
    fits = max(0, int(cost.steps * limit / cost.bytes))
    width = f"{cost.beams} beams, " if cost.beams > 1 else ""
    raise InputError(
        f"this generation is too big for {name} on this server: {width}{cost.positions:,} "
        f"tokens would hold about {cost.bytes / 2**20:,.0f} MB (the most one generation may "
        f"hold is {limit / 2**20:,.0f} MB). Ask for fewer new tokens (about {fits:,}), a "
        "narrower beam, or a shorter prompt"
    )
