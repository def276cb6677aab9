"""Shared state: the model registry (the bundled models, read-only, and each session's
"trained here" model), the byte-bounded cache of analyses with its lock, and the dataclasses
that one browser session keeps in ``gr.State``."""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_args

import torch

from transformer.bundled import load_bundled
from transformer.checkpoint import Checkpoint
from transformer.generation import DecodingSession
from transformer.inspection import Analysis, analyse
from transformer.model import NO_INTERVENTION, Intervention
from transformer.trace import AttentionKind, Trace

from . import limits

log = logging.getLogger("visualiser")

TRAINED_HERE = "trained here (this session)"


@dataclass
class SessionModels:
    """What one browser session owns: the model it trained (never shared with other sessions)."""

    trained: Checkpoint | None = None
    snapshots: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)


@dataclass
class GenerationState:
    """One browser session's generation: the decoding session and the inputs it was made from
    (a change of any input starts a new one)."""

    key: tuple = ()
    decoding: DecodingSession | None = None
    source_pieces: list[str] = field(default_factory=list)


def _attention_bytes(trace: Trace) -> int:
    """Bytes of every captured attention record (scores and weights) of a trace."""
    total = 0
    for kind in get_args(AttentionKind):
        try:
            records = trace.attention_records(kind)
        except ValueError:  # the architecture has no attention of this kind
            continue
        total += sum(r.weights.nbytes + r.scores.nbytes for r in records)
    return total


class ModelRegistry:
    """The models the app offers, by name, and a cache of their analyses, so that changing
    layer, head or view does not recompute the trace.

    Bundled models are shared by every session, read-only; ``TRAINED_HERE`` names the model a
    session trained (found in its ``SessionModels``).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.bundled = load_bundled(device)
        for name, reason in self.bundled.errors.items():
            log.warning("bundled model %s could not be loaded: %s", name, reason)
        self._analyses: OrderedDict[tuple, tuple[Analysis, int]] = OrderedDict()
        self._cache_lock = threading.Lock()

    @property
    def model_names(self) -> list[str]:
        return [*self.bundled.models, TRAINED_HERE]

    def checkpoint(self, name: str, session: SessionModels | None) -> Checkpoint:
        """The model called ``name`` (``session`` holds the one trained here)."""
        if name == TRAINED_HERE:
            if session is None or session.trained is None:
                raise ValueError(
                    "no model has been trained in this session yet: use the Model & training tab"
                )
            return session.trained
        if name in self.bundled.errors:
            raise ValueError(
                f"the bundled model '{name}' could not be loaded: {self.bundled.errors[name]}"
            )
        if name not in self.bundled.models:
            raise ValueError(f"unknown model {name!r}; choose one of {self.model_names}")
        return self.bundled.models[name]

    def analysis(
        self,
        name: str,
        checkpoint: Checkpoint,
        sentences: list[str],
        intervention: Intervention = NO_INTERVENTION,
        targets: torch.Tensor | None = None,
    ) -> Analysis:
        """``analyse`` through an LRU cache bounded by bytes (``limits.CACHE_BYTES``). Only
        bundled models are cached: a model trained in a session is that session's alone."""
        if self.bundled.models.get(name) is not checkpoint:
            return analyse(checkpoint.model, checkpoint.tokenizer, sentences, intervention, targets)
        key = (
            name,
            tuple(sentences),
            intervention,
            None if targets is None else str(targets.tolist()),
        )
        with self._cache_lock:
            if key in self._analyses:
                self._analyses.move_to_end(key)
                return self._analyses[key][0]
        result = analyse(checkpoint.model, checkpoint.tokenizer, sentences, intervention, targets)
        size = _attention_bytes(result.trace)
        with self._cache_lock:
            self._analyses[key] = (result, size)
            while (
                sum(n for _, n in self._analyses.values()) > limits.CACHE_BYTES
                and len(self._analyses) > 1
            ):
                self._analyses.popitem(last=False)
        return result


def bind(handler: Callable, *shared: Any) -> Callable:
    """``handler`` with its leading shared arguments (the registry) filled in, for an event.

    A ``functools.partial`` keeps the signature gradio needs (the remaining inputs); its name
    and docstring are the handler's, so the API page describes the endpoint, not ``partial``.
    """
    bound = functools.partial(handler, *shared)
    bound.__name__ = handler.__name__  # type: ignore[attr-defined]
    bound.__doc__ = handler.__doc__
    return bound
