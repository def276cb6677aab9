"""Concurrent requests for one model's pass, run as one batched call.

A small model's decoding step on a GPU is launch-bound: a few hundred tiny kernels, about the
same time for one row as for sixty-four. A lecture hall whose students press Step at once
would each wait for the others' steps in turn, about ten steps a second whatever the GPU. The
:class:`Batcher` here collects the requests for the same model that arrive within a few
milliseconds (at most ``max_batch``), runs them as one call (for Generate's steps,
:func:`~transformer.generation.step_together`: one forward, each session its own cache), and
hands every waiting thread its own result, or its own error.

The Attention tab's analyses (each student's own sentences) batch the same way, through
:func:`~transformer.lab.batched.analyse_together`, where that gives each its own analysis: a
decoder-only or encoder-only model, without a what-if.

On by default on CUDA; off on the CPU, where a 2-core machine's rows cost about as much
together as apart and the window would only add its wait. ``VISUALISER_BATCH=1`` turns it on
anywhere, ``VISUALISER_BATCH=0`` off.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

import torch

from transformer.core.model import Transformer
from transformer.generation import DecodingSession, StepRecord, step_together
from transformer.lab.batched import analyse_together
from transformer.lab.inspection import Analysis, PassInput, analyse
from transformer.lab.interventions import NO_INTERVENTION, Intervention
from transformer.text.tokenization import Tokenizer

log = logging.getLogger("visualiser")

BATCH_ENV = "VISUALISER_BATCH"
WINDOW_S = 0.004
"""How long the first request of a batch waits for others: a few milliseconds, against a GPU
step of SmolLM2 of some tens (launch-bound)."""
MAX_BATCH = 64
"""The most steps one call runs: a lecture hall's worth, and a bound on the padded pass."""
MAX_ANALYSES = 16
"""The most analyses one captured pass runs (each up to 3 sentences): their traces are held
at once until cut apart."""

Item = TypeVar("Item")
Result = TypeVar("Result")


def batching_enabled(device: torch.device | str) -> bool:
    """Whether the app batches concurrent passes: ``VISUALISER_BATCH`` (``1``/``0``) where set,
    else on a CUDA device only."""
    value = os.environ.get(BATCH_ENV, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return value == "" and torch.device(device).type == "cuda"
    log.warning("%s=%r is neither 1 nor 0: batching follows the device", BATCH_ENV, value)
    return torch.device(device).type == "cuda"


class _Waiting(Generic[Item, Result]):
    """One submitted item, and what its caller waits for: its outcome, or its turn to lead."""

    def __init__(self, item: Item) -> None:
        self.item = item
        self.ready = threading.Event()
        self.outcome: Result | BaseException | None = None
        self.leads = False  # woken to lead the next batch, not with an outcome

    def settle(self, outcome: Result | BaseException) -> None:
        self.outcome = outcome
        self.ready.set()

    def hand_lead(self) -> None:
        self.leads = True
        self.ready.set()


class Batcher(Generic[Item, Result]):
    """Runs items submitted under the same key within ``window`` seconds as one call.

    The first caller of a key leads: it waits up to ``window`` (less once ``max_batch`` items
    wait), takes them, and calls ``together(items)``, which returns one result (or exception)
    per item, in order; a lone item runs ``alone(item)``. Every caller blocks until its own
    outcome is set. Items that arrive while a batch runs wait for it to end (a GPU runs one
    pass at a time anyway), then the first of them leads the next batch with all of them: a
    leader runs one batch, its own item in it, so no caller serves others for ever. Other keys
    (other models) run on their own.

    ``sizes`` keeps the sizes of the latest batches (for tests and the benchmark).
    """

    def __init__(
        self,
        together: Callable[[list[Item]], Sequence[Result | BaseException]],
        alone: Callable[[Item], Result],
        *,
        window: float = WINDOW_S,
        max_batch: int = MAX_BATCH,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be ≥ 1, got {max_batch}")
        self.together, self.alone = together, alone
        self.window, self.max_batch = window, max_batch
        self._changed = threading.Condition()
        self._waiting: dict[Hashable, list[_Waiting[Item, Result]]] = {}
        self._leading: set[Hashable] = set()
        self.sizes: deque[int] = deque(maxlen=1000)

    def submit(self, key: Hashable, item: Item) -> Result:
        """``item``'s result, computed with the other items of ``key`` that arrive meanwhile;
        raises what its own computation raised."""
        waiting: _Waiting[Item, Result] = _Waiting(item)
        with self._changed:
            queue = self._waiting.setdefault(key, [])
            queue.append(waiting)
            lead = key not in self._leading
            if lead:
                self._leading.add(key)
            elif len(queue) >= self.max_batch:
                self._changed.notify_all()  # the leader need not wait out its window
        if lead:
            self._lead(key, wait=True)
        while True:
            waiting.ready.wait()
            if not waiting.leads:
                break
            waiting.leads = False
            waiting.ready.clear()
            self._lead(key, wait=False)  # they have waited for the batch before: no window
        if isinstance(waiting.outcome, BaseException):
            raise waiting.outcome
        return waiting.outcome  # type: ignore[return-value]

    def _lead(self, key: Hashable, wait: bool) -> None:
        """Wait out the window (or until a batch is full), run one batch, then hand the lead to
        the first of those who arrived meanwhile (or let the next arrival lead)."""
        deadline = time.monotonic() + (self.window if wait else 0.0)
        with self._changed:
            while len(self._waiting[key]) < self.max_batch:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            queue = self._waiting[key]
            batch = queue[: self.max_batch]
            self._waiting[key] = queue[self.max_batch :]
        try:
            self._run(batch)
        finally:
            with self._changed:
                queue = self._waiting[key]
                if queue:
                    queue[0].hand_lead()
                else:
                    del self._waiting[key]
                    self._leading.discard(key)

    def _run(self, batch: list[_Waiting[Item, Result]]) -> None:
        """Run one batch; every item gets its result or its exception, whatever happens."""
        self.sizes.append(len(batch))
        try:
            if len(batch) == 1:
                outcomes: Sequence[Result | BaseException] = [self._alone(batch[0].item)]
            else:
                outcomes = self.together([w.item for w in batch])
            for waiting, outcome in zip(batch, outcomes, strict=True):
                waiting.settle(outcome)
        except BaseException as error:  # handed to every caller still waiting
            for waiting in batch:
                if not waiting.ready.is_set():
                    waiting.settle(error)

    def _alone(self, item: Item) -> Result | BaseException:
        return outcome(lambda: self.alone(item))


def outcome(work: Callable[[], Result]) -> Result | BaseException:
    """What ``work()`` returns, or the error it raised: an item run alone gets its own error,
    which leaves the others' results as they are."""
    try:
        return work()
    except Exception as error:
        return error


def steps_together(sessions: list[DecodingSession]) -> list[StepRecord | BaseException]:
    """Each session's step, their forward passes run as one; where the batch cannot run (a
    what-if's operations, a session that stopped meanwhile, memory), each steps alone and gets
    its own result or error. A session the batch already moved is not stepped again."""
    before = [len(s.records) for s in sessions]
    try:
        return list(step_together(sessions))
    except Exception as error:
        log.info("a batch of %d steps ran one by one: %s", len(sessions), error)
    return [
        session.records[-1] if len(session.records) > taken else outcome(session.step)
        for session, taken in zip(sessions, before, strict=True)
    ]


class StepBatcher:
    """Generate's steps, batched per model (:class:`Batcher` over :func:`steps_together`)."""

    def __init__(self, *, window: float = WINDOW_S, max_batch: int = MAX_BATCH) -> None:
        self.batcher: Batcher[DecodingSession, StepRecord] = Batcher(
            steps_together, DecodingSession.step, window=window, max_batch=max_batch
        )

    def step(self, decoding: DecodingSession) -> StepRecord:
        """``decoding.step()``, run in one forward with the other sessions of its model that
        step meanwhile."""
        return self.batcher.submit(("step", id(decoding.model)), decoding)

    @property
    def sizes(self) -> deque[int]:
        """The sizes of the latest batches run."""
        return self.batcher.sizes


class _AnalysisRequest:
    """One analysis asked for: its model, tokenizer and checked, tokenized sentences."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, planned: PassInput) -> None:
        self.model, self.tokenizer, self.planned = model, tokenizer, planned

    def alone(self) -> Analysis:
        return analyse(self.model, self.tokenizer, self.planned)


def analyses_together(requests: list[_AnalysisRequest]) -> list[Analysis | BaseException]:
    """Each request's analysis from one captured pass; where that cannot run (the batch's
    attention too large to capture at once, memory), each alone, with its own result or error."""
    first = requests[0]
    try:
        return list(analyse_together(first.model, first.tokenizer, [r.planned for r in requests]))
    except Exception as error:
        log.info("a batch of %d analyses ran one by one: %s", len(requests), error)
    return [outcome(request.alone) for request in requests]


class AnalysisBatcher:
    """The Attention tab's analyses, batched per model (:class:`Batcher` over
    :func:`analyses_together`)."""

    def __init__(self, *, window: float = WINDOW_S, max_batch: int = MAX_ANALYSES) -> None:
        self.batcher: Batcher[_AnalysisRequest, Analysis] = Batcher(
            analyses_together, _AnalysisRequest.alone, window=window, max_batch=max_batch
        )

    @staticmethod
    def takes(model: Transformer, intervention: Intervention, targets: object) -> bool:
        """Whether an analysis may share a pass: a decoder-only or encoder-only model (an
        encoder-decoder decodes each answer first), no what-if (one may switch off the masks
        that hide the padding), no targets given."""
        plain = intervention == NO_INTERVENTION and targets is None
        return plain and model.config.architecture != "encoder-decoder"

    def analysis(self, model: Transformer, tokenizer: Tokenizer, planned: PassInput) -> Analysis:
        """``analyse(model, tokenizer, planned)``, run in one captured pass with the other
        analyses of ``model`` asked for meanwhile."""
        return self.batcher.submit(
            ("analysis", id(model)), _AnalysisRequest(model, tokenizer, planned)
        )

    @property
    def sizes(self) -> deque[int]:
        """The sizes of the latest batches run."""
        return self.batcher.sizes
