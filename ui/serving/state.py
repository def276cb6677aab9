"""Shared state: the model registry (the bundled models; the pretrained ones, shipped in a pip
package or named with ``--model``, loaded lazily; each session's "trained here" model), the
byte-bounded cache of analyses with its lock, and the dataclasses that one browser session keeps
in ``gr.State``."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from transformer.core.trace import Trace
from transformer.generation import DecodingSession
from transformer.lab.inspection import Analysis, analyse, pass_input
from transformer.lab.interventions import NO_INTERVENTION, Intervention
from transformer.pretrained import PretrainedError, load_pretrained, shipped_models
from transformer.pretrained.checkpoint import Checkpoint
from transformer.training.bundled import load_bundled

from . import limits
from .batching import AnalysisBatcher, StepBatcher, batching_enabled
from .costly import (
    CostlyPasses,
    PassCost,
    admit,
    check_decoding,
    costly_here,
    decoding_cost,
    parameters,
    pool_workers,
)
from .errors import InputError, readable_list, user_input
from .store import MISSING, RedisViews

log = logging.getLogger("visualiser")

TRAINED_HERE = "trained here (this session)"


@dataclass
class SessionModels:
    """What one browser session owns: the model it trained (never shared with other sessions)."""

    trained: Checkpoint | None = None
    snapshots: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)

    def release(self) -> None:
        """Let go of the trained model and its snapshots (the session has ended): freed even
        where a request still running holds this object."""
        self.trained = None
        self.snapshots = {}


@dataclass
class GenerationState:
    """One browser session's generation: the decoding session and the inputs it was made from
    (a change of any input starts a new one)."""

    key: tuple = ()
    decoding: DecodingSession | None = None
    source_pieces: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Step and Run to the end may arrive at once for one session: each step holds this
        # lock. Not a field: gradio turns a State's dataclass fields into its config.
        self.lock = threading.Lock()
        # Generate's chat switch: while on, every request reads its prompt wrapped in the
        # model's chat template, whatever the prompt box holds (set by the switch's event).
        self.chat = False
        # Whether Generate sends the residual stream's figure with each step. An API caller gets
        # it; the page, where its section opens folded, says so when it opens and at each fold
        # and unfold (folded, a step leaves the figure out: most of the step's response).
        self.stream_shown = True

    def release(self) -> None:
        """Let go of the decoding (the session has ended): its steps are freed even where a
        Run still holds this state, which then stops (it sees another decoding)."""
        with self.lock:
            self.key, self.decoding, self.source_pieces = (), None, []

    def release_if_idle(self) -> bool:
        """Let go of the decoding unless a request is using it now; whether it was let go.
        The session's next request starts it again from the prompt."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self.key, self.decoding, self.source_pieces = (), None, []
            return True
        finally:
            self.lock.release()

    def __deepcopy__(self, memo: dict) -> GenerationState:
        """gr.State copies its initial value per session; a lock is not copied but made anew."""
        import copy

        state = GenerationState(
            copy.deepcopy(self.key, memo),
            copy.deepcopy(self.decoding, memo),
            list(self.source_pieces),
        )
        state.chat = self.chat  # a tab that opens with its chat switch on opens every session so
        state.stream_shown = self.stream_shown
        return state


class HeldDecodings:
    """Every session's decoding, counted by what it will hold once run to the end
    (:func:`~ui.serving.costly.decoding_cost`), within ``limits.DECODINGS_BYTES`` in all.

    Gradio keeps a session's state until the session is dropped (its page closed, or an hour
    unused), and a generation's key/value cache and step records are most of it: 300 sessions
    that each took one step and went away held a decoding each. Past the bound, the decodings
    used least recently are let go (never one a request is using); their sessions start again
    from the prompt at their next step. ``released`` counts them."""

    def __init__(self) -> None:
        self._held: OrderedDict[int, tuple[weakref.ref[GenerationState], int]] = OrderedDict()
        self._lock = threading.RLock()  # a collected state's callback may run inside hold()
        self.released = 0

    @property
    def bytes(self) -> int:
        """The estimated bytes of the decodings held now (states still alive, with one)."""
        with self._lock:
            return sum(n for ref, n in self._held.values() if _holding(ref()))

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for ref, _ in self._held.values() if _holding(ref()))

    def hold(self, state: GenerationState, nbytes: int) -> int:
        """Count ``state``'s decoding as ``nbytes`` and used now; let go of the least recently
        used others while the total passes the bound. Returns how many were let go."""
        key = id(state)
        released = 0
        with self._lock:
            self._held.pop(key, None)
            self._held[key] = (weakref.ref(state, self._forget(key)), nbytes)
            total = 0
            for k, (ref, n) in list(self._held.items()):
                if _holding(ref()):
                    total += n
                else:
                    del self._held[k]
            for k, (ref, n) in list(self._held.items()):
                if total <= limits.DECODINGS_BYTES or k == key:
                    break
                other = ref()
                if other is not None and other.release_if_idle():
                    del self._held[k]
                    total -= n
                    released += 1
            self.released += released
        if released:
            log.info("let go of %d unused generation(s) to keep memory bounded", released)
        return released

    def touch(self, state: GenerationState) -> None:
        """Count ``state``'s decoding as used now (a step of a run)."""
        with self._lock:
            if id(state) in self._held:
                self._held.move_to_end(id(state))

    def _forget(self, key: int) -> Callable[[Any], None]:
        def forget(_: Any) -> None:  # the state was collected: its id may be reused
            with self._lock:
                entry = self._held.get(key)
                if entry is not None and entry[0]() is None:
                    del self._held[key]

        return forget


def _holding(state: GenerationState | None) -> bool:
    return state is not None and state.decoding is not None


def _tensor_bytes(value: Any, seen: set[int]) -> int:
    """Bytes of every tensor reachable from ``value`` (dataclasses, lists, tuples, dicts),
    each storage counted once."""
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(_tensor_bytes(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if isinstance(value, list | tuple):
        return sum(_tensor_bytes(item, seen) for item in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(item, seen) for item in value.values())
    return 0


def _trace_bytes(trace: Trace) -> int:
    """Bytes a cached trace holds: every tensor (an analysis computes its attention weights
    again when a view reads them: SmolLM2's at 511 tokens holds 135 MB, the residual stream,
    queries and keys, not the 283 MB of weights its views draw)."""
    return _tensor_bytes(trace, set())


PRELOAD_FIRST = "SmolLM2-135M-Instruct"
"""The pretrained model the background thread reads first: the Generate tab's opening model."""


_EXITING = threading.Event()
_PRELOADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


@atexit.register
def _finish_preloads() -> None:
    """At exit, let a model being read finish (and start no other): a daemon thread still inside
    torch while the interpreter shuts down aborts the process ("terminate called without an
    active exception"), which turned a passing test run's exit status into 134."""
    _EXITING.set()
    for thread in list(_PRELOADS):
        thread.join(timeout=60)


class ModelRegistry:
    """The models the app offers, by name, and a cache of their analyses, so that changing
    layer, head or view does not recompute the trace.

    Bundled models are loaded at start (they are small); pretrained models (the shipped
    all-MiniLM-L6-v2 and any ``--model`` folder or hub id) are listed at once but read on first
    use or by :meth:`preload` in the background, so the app starts as fast without them. All of
    them are shared by every session, read-only; ``TRAINED_HERE`` names the model a session
    trained (found in its ``SessionModels``). ``--model`` folders keep their weights in
    ``dtype`` (see ``load_pretrained``), and with ``spread`` go to ``device`` only if they fit
    it, else over the GPUs and the CPU.
    """

    def __init__(
        self,
        device: torch.device | str,
        extra_models: Sequence[str] = (),
        allow_download: bool = False,
        *,
        dtype: str = "auto",
        spread: bool = False,
    ) -> None:
        device = torch.device(device)  # "cpu" or "cuda" as the app's --device gives it
        self.device = device
        self.bundled = load_bundled(device)
        for name, reason in self.bundled.errors.items():
            log.warning("bundled model %s could not be loaded: %s", name, reason)
        # name -> loader; the loaded checkpoints and load errors fill in as they are read.
        self._loaders: dict[str, Callable[[], Checkpoint]] = {}
        for shipped in shipped_models():
            if shipped.available:
                self._loaders[shipped.name] = functools.partial(shipped.load, device)
        # What each --model name stands for (a folder path or a hub id), for messages.
        self.sources: dict[str, str] = {}
        for spec in extra_models:
            name = self._name_for(spec)
            self.sources[name] = spec
            self._loaders[name] = functools.partial(
                load_pretrained,
                spec,
                # "auto": the device picked if the model fits it, else spread over the GPUs
                # and the CPU (see load_pretrained).
                device="auto" if spread else device,
                dtype=dtype,
                allow_download=allow_download,
            )
        self.pretrained: dict[str, Checkpoint] = {}
        self.pretrained_errors: dict[str, str] = {}
        self._load_lock = threading.Lock()
        self._preloading: threading.Thread | None = None
        self._released = threading.Event()
        self._analyses: OrderedDict[tuple, tuple[Analysis, int]] = OrderedDict()
        self._analyses_used: dict[tuple, float] = {}  # when each was last read or kept
        self._cache_lock = threading.Lock()
        # The views every session shares (set by the app once its events are built).
        self.shared_views: SharedViews | None = None
        # Big models' uncached passes asked for by cheap events run here (ui/serving/costly.py).
        self.passes = CostlyPasses(pool_workers(device), limits.COSTLY_PASS_CAPACITY)
        # Concurrent cheap steps, and analyses, of one model run as one forward (on a GPU;
        # ui/serving/batching.py).
        batching = batching_enabled(device)
        self.steps: StepBatcher | None = StepBatcher() if batching else None
        self.analysis_batches: AnalysisBatcher | None = AnalysisBatcher() if batching else None
        # Every session's decoding, within a bound in all (HeldDecodings).
        self.decodings = HeldDecodings()

    def _name_for(self, spec: str) -> str:
        """The menu name of a ``--model`` argument: a hub id as given, a folder by its own name
        (a menu never shows where this machine keeps files), made unique with " (2)", " (3)"."""
        path = Path(spec).expanduser()
        path_like = (
            path.exists()
            or path.is_absolute()
            or spec.startswith((".", "~"))
            or spec.replace("\\", "/").strip("/").count("/") > 1  # a hub id has one at most
        )
        base = (path.resolve().name or spec) if path_like else spec
        taken = {*self.bundled.models, *self.bundled.errors, *self._loaders, TRAINED_HERE}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base} ({n})"
        return name

    @property
    def preloading(self) -> bool:
        """Whether the background thread is still reading pretrained models."""
        return self._preloading is not None and self._preloading.is_alive()

    @property
    def model_names(self) -> list[str]:
        """Every model a menu offers: bundled, pretrained, then the session's own."""
        return [*self.bundled.models, *self._loaders, TRAINED_HERE]

    def menu(self, session: SessionModels | None) -> list[str]:
        """The models a session's menus offer: ``TRAINED_HERE`` only once it has trained one
        (before that it is an option that does not apply)."""
        if session is not None and session.trained is not None:
            return self.model_names
        return [name for name in self.model_names if name != TRAINED_HERE]

    @property
    def errors(self) -> dict[str, str]:
        """Models that could not be loaded, with the reason (bundled and pretrained)."""
        return {**self.bundled.errors, **self.pretrained_errors}

    def _pretrained(self, name: str) -> Checkpoint:
        """A pretrained model, read on first use (one thread reads it; others wait for it)."""
        with self._load_lock:
            if name in self.pretrained:
                return self.pretrained[name]
            if name in self.pretrained_errors:
                raise InputError(
                    f"the model '{name}' could not be loaded: {self.pretrained_errors[name]}"
                )
            try:
                checkpoint = self._loaders[name]()
            except Exception as error:  # any failure leaves the other models serving
                reason = (
                    str(error)
                    if isinstance(error, PretrainedError | OSError | ValueError)
                    else (f"{type(error).__name__}: {error}")
                )
                # The library names its own argument; a user of the app meets the flag.
                reason = reason.replace(
                    "allow_download=True", "start the app with --allow-download"
                )
                self.pretrained_errors[name] = reason
                log.warning("pretrained model %s could not be loaded: %s", name, reason)
                raise InputError(f"the model '{name}' could not be loaded: {reason}") from None
            self.pretrained[name] = checkpoint
            return checkpoint

    def preload(self) -> threading.Thread:
        """Read every pretrained model in a background thread (errors are kept by name)."""

        def work() -> None:
            # The Generate tab opens on SmolLM2: read it first, so its first step waits least.
            for name in sorted(self._loaders, key=lambda n: n != PRELOAD_FIRST):
                if _EXITING.is_set() or self._released.is_set():  # start no other model
                    return
                # A failure is recorded in pretrained_errors; choosing the model reports it.
                with contextlib.suppress(ValueError):
                    self._pretrained(name)

        thread = threading.Thread(target=work, daemon=True, name="preload-models")
        self._preloading = thread
        _PRELOADS.add(thread)
        thread.start()
        return thread

    def release(self) -> None:
        """Drop the pretrained models read so far and every cached analysis, once the app that
        served them is closed. Gradio and FastAPI keep a closed app reachable (FastAPI caches
        its routes' dependencies), and with it this registry: a process that launches one app
        after another, as the tests do, held every one's models (about 0.7 GB each). A model
        asked for again is read again."""
        self._released.set()
        if self._preloading is not None:
            self._preloading.join()  # the model being read, if any, then no other
        with self._load_lock:
            self.pretrained.clear()
        with self._cache_lock:
            self._analyses.clear()
            self._analyses_used.clear()
        if self.shared_views is not None:
            self.shared_views.clear()

    def forget_unused(self, idle_s: float, now: float | None = None) -> int:
        """Drop the analyses and shared views nobody has read for ``idle_s`` seconds (of
        ``time.monotonic``; ``now`` for tests); returns how many were dropped.

        The caches are bounded, but a class that typed its own sentences leaves them full of
        texts nobody will ask for again: without this, a server that served a lesson holds
        hundreds of MB more than before it, until the next class pushes them out."""
        now = time.monotonic() if now is None else now
        with self._cache_lock:
            dropped = drop_unused(self._analyses, self._analyses_used, now - idle_s)
        if self.shared_views is not None:
            dropped += self.shared_views.forget_unused(idle_s, now)
        return dropped

    def admit_decoding(self, name: str, state: GenerationState) -> None:
        """Weigh ``state``'s decoding before its first step (:func:`decoding_cost`: the
        key/value cache and the step records it will hold at its end): refused with what to
        change when it alone is over ``limits.MAX_DECODING_BYTES``, else counted among every
        session's (:class:`HeldDecodings`), which lets go of the least recently used others
        past their bound. Call with the state's lock held."""
        decoding = state.decoding
        if decoding is None:
            return
        model = decoding.model
        config = model.config
        first = next(iter(model.parameters()), None)
        element = first.element_size() if first is not None else 4
        cost = decoding_cost(
            config,
            decoding.width,
            len(decoding.prefix),
            decoding.max_steps,
            source=len(decoding.source) if config.has_encoder else 0,
            element_bytes=element,
        )
        try:
            check_decoding(name, cost, self.device)
        except InputError:  # nothing of it is kept: a next request starts again, and is refused
            state.key, state.decoding, state.source_pieces = (), None, []
            raise
        self.decodings.hold(state, cost.bytes)

    def menu_name(self, name: str) -> str:
        """The menu name of a model: ``name`` itself, or the name given to the ``--model``
        folder or hub id ``name`` (so a notebook or API caller may name it as it was given)."""
        if name in self._loaders or name in self.bundled.models:
            return name
        return next((menu for menu, spec in self.sources.items() if spec == name), name)

    def checkpoint(self, name: str, session: SessionModels | None) -> Checkpoint:
        """The model called ``name`` (``session`` holds the one trained here)."""
        if not isinstance(name, str):
            raise InputError(f"model must be a model's name, such as {self.model_names[0]!r}")
        name = self.menu_name(name)
        if name == TRAINED_HERE:
            if session is None or session.trained is None:
                raise InputError(
                    "no model has been trained in this session yet: use the Model & training tab"
                )
            return session.trained
        if name in self.bundled.errors:
            raise InputError(
                f"the bundled model '{name}' could not be loaded: {self.bundled.errors[name]}"
            )
        if name in self._loaders:
            return self._pretrained(name)
        if name not in self.bundled.models:
            shown = name if len(name) <= 60 else name[:59] + "…"
            raise InputError(
                f"there is no model called '{shown}': choose {readable_list(self.model_names)}"
            )
        return self.bundled.models[name]

    def is_shared(self, name: str, checkpoint: Checkpoint) -> bool:
        """Whether ``checkpoint`` is the registry's own (bundled or pretrained), whose analyses
        may be cached for everyone; a model trained in a session is that session's alone."""
        name = self.menu_name(name)
        return (
            self.bundled.models.get(name) is checkpoint or self.pretrained.get(name) is checkpoint
        )

    def analysis(
        self,
        name: str,
        checkpoint: Checkpoint,
        sentences: list[str],
        intervention: Intervention = NO_INTERVENTION,
        targets: torch.Tensor | None = None,
    ) -> Analysis:
        """``analyse`` through an LRU cache bounded by bytes (``limits.CACHE_BYTES``). Only
        shared models are cached: a model trained in a session is that session's alone.

        An uncached pass is weighed before it runs: refused when too big for the server, run
        in the costly pool when a cheap event asks for a costly one (``ui/serving/costly.py``)
        and joined there by the same analysis asked for again meanwhile."""
        model, tokenizer = checkpoint.model, checkpoint.tokenizer
        key: tuple | None = None
        if self.is_shared(name, checkpoint):
            key = (
                name,
                tuple(sentences),
                intervention,
                None if targets is None else str(targets.tolist()),
            )
            with self._cache_lock:
                if key in self._analyses:
                    self._analyses.move_to_end(key)
                    self._analyses_used[key] = time.monotonic()
                    return self._analyses[key][0]
        # The library refuses what it cannot read (too many sentences, one too long, a capture
        # too large) with a ValueError: the user's input, said as such.
        with user_input():
            # The text is checked and tokenized once: the estimates and the pass read these ids.
            planned = pass_input(model, tokenizer, sentences, targets)
            # A pass too big for the server is refused before any other analysis is dropped.
            pooled = admit(name, model, planned.tokens, self.device)
            if key is not None:
                self._make_room(planned.least_bytes)
            compute = functools.partial(analyse, model, tokenizer, planned, intervention, targets)
            batches = self.analysis_batches
            if not pooled and batches is not None and batches.takes(model, intervention, targets):
                result = batches.analysis(model, tokenizer, planned)  # with others meanwhile
            elif not pooled:
                result = compute()
            else:  # the same analysis asked for meanwhile joins it (a session's own: never)
                result = self.passes.run(key if key is not None else object(), compute, name)
        if key is None:
            return result
        size = _trace_bytes(result.trace)
        with self._cache_lock:
            self._analyses[key] = (result, size)
            self._analyses_used[key] = time.monotonic()
            while (
                sum(n for _, n in self._analyses.values()) > limits.CACHE_BYTES
                and len(self._analyses) > 1
            ):
                old, _ = self._analyses.popitem(last=False)
                self._analyses_used.pop(old, None)
        return result

    def _make_room(self, least: int) -> None:
        """Drop before a pass what would be dropped once its analysis is kept, so that both are
        never held at once: an analysis over the bound alone, and every other one when this
        one's attention weights alone (``least`` bytes) pass the bound (its pass computes them
        layer by layer, and the grid reads them all: the app's largest moment)."""
        with self._cache_lock:
            # Keys only: a loop variable bound to a dropped analysis would hold it all along.
            bound = limits.CACHE_BYTES
            for old in [k for k, (_, n) in self._analyses.items() if n > bound or least > bound]:
                del self._analyses[old]
                self._analyses_used.pop(old, None)

    def decode_step(self, name: str, decoding: DecodingSession) -> Any:
        """``decoding.step()``: a generation's step, handed to the costly pool like an
        analysis's pass when a cheap event asks for a costly one (a big model's first step
        reads the whole prompt; with the key/value cache a later one reads one token a beam);
        a cheap one runs in one forward with the other sessions' steps of its model that arrive
        meanwhile, where batching is on (:attr:`steps`)."""
        fed = len(decoding.prefix) + len(decoding.records)
        if decoding.settings.use_cache and decoding.records:
            fed = 1
        estimate = PassCost(parameters(decoding.model), fed * decoding.width)
        if not costly_here(estimate, self.device):
            return decoding.step() if self.steps is None else self.steps.step(decoding)
        return self.passes.run(object(), decoding.step, name)


def once(compute: Callable[[], Any]) -> Callable[[], Any]:
    """``compute()``, run at the first call and kept (one run even when pages load at once).

    A tab's first view goes through this into a page-load event: drawn when the first page
    loads rather than while the app starts (start-up is what a user waits for), then the
    same figures for every page."""
    lock = threading.Lock()
    kept: list[Any] = []

    def first() -> Any:
        with lock:
            if not kept:
                kept.append(compute())
            return kept[0]

    first.__name__ = getattr(compute, "__name__", "first_view")
    return first


def bind(handler: Callable, *shared: Any) -> Callable:
    """``handler`` with its leading shared arguments (the registry) filled in, for an event.

    A ``functools.partial`` keeps the signature gradio needs (the remaining inputs); its name
    and docstring are the handler's, so the API page describes the endpoint, not ``partial``.
    """
    bound = functools.partial(handler, *shared)
    bound.__name__ = handler.__name__  # type: ignore[attr-defined]
    bound.__doc__ = handler.__doc__
    return bound


# -- Views shared by every session -----------------------------------------------------------
# In a lecture most students open the same presets: a view that depends only on its controls
# (model, text, layer, head, ...) is computed once and served to all. The cache below holds
# such views, bounded by bytes and by count; ui/serving/shared_views.py decides which events use it.


def view_bytes(value: Any) -> int:
    """About how many bytes a view's outputs hold: the arrays and strings of its figures, the
    characters of its strings, a little for everything else (tuples, lists and dicts are
    walked)."""
    if isinstance(value, str | bytes):
        return len(value)
    nbytes = getattr(value, "nbytes", None)  # a numpy array (a figure's data)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, dict):
        return 64 + sum(view_bytes(k) + view_bytes(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 64 + sum(view_bytes(item) for item in value)
    as_dict = getattr(value, "to_plotly_json", None)  # a plotly figure: its data, unencoded
    if callable(as_dict):
        with contextlib.suppress(Exception):
            return view_bytes(as_dict())
    frame_bytes = getattr(value, "memory_usage", None)  # a pandas DataFrame
    if callable(frame_bytes):
        with contextlib.suppress(Exception):
            return int(frame_bytes(deep=True).sum())
    return 64


def drop_unused(entries: OrderedDict, used: dict, before: float) -> int:
    """Drop from ``entries`` (least recently used first) every key last used (``used``, its
    time) before ``before``; returns how many. The caller holds the cache's lock."""
    stale = [key for key in entries if used.get(key, before) < before]
    for key in stale:
        del entries[key]
        used.pop(key, None)
    return len(stale)


_ALL_SHARED_VIEWS: weakref.WeakSet[SharedViews] = weakref.WeakSet()


def forget_unused_views(idle_s: float, now: float | None = None) -> int:
    """Drop from every :class:`SharedViews` of this process, the tabs' own among them (the long
    view keeps its last passes: up to 400 MB each), the views nobody has been served for
    ``idle_s`` seconds; returns how many. The app's sweep calls it with the registry's
    :meth:`ModelRegistry.forget_unused`: a cache it did not know held its last texts for ever."""
    return sum(views.forget_unused(idle_s, now) for views in list(_ALL_SHARED_VIEWS))


class SharedViews:
    """A least-recently-used cache of deterministic views, shared by every session, bounded by
    ``max_bytes`` (as :func:`view_bytes` counts them) and ``max_entries``.

    :meth:`get` computes a view once even when many sessions ask for it at once: the first
    computes, the others wait for its result (if it fails or keeps nothing, each then computes
    for itself, so that a failure is reported to each as its own). ``hits`` and ``computed``
    count what happened, for the tests and the benchmark.

    With ``second`` (the app processes serving one class share a Redis), a view this process
    does not hold is looked for there before it is computed, and a view computed here is
    stored there too, for the other processes (``remote_hits`` counts the views found there).
    """

    def __init__(self, max_bytes: int, max_entries: int, second: RedisViews | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.second = second
        self.remote_hits = 0
        self._views: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._used: dict[Any, float] = {}  # when each view was last served or kept
        self._pending: dict[Any, threading.Event] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.computed = 0
        _ALL_SHARED_VIEWS.add(self)  # forgotten when unused, with the registry's (forget_unused)

    def __len__(self) -> int:
        with self._lock:
            return len(self._views)

    @property
    def bytes(self) -> int:
        """Bytes of the views held now."""
        with self._lock:
            return sum(n for _, n in self._views.values())

    def clear(self) -> None:
        """Drop every view (the app that served them is closed)."""
        with self._lock:
            self._views.clear()
            self._used.clear()

    def forget_unused(self, idle_s: float, now: float | None = None) -> int:
        """Drop the views nobody has been served for ``idle_s`` seconds; returns how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return drop_unused(self._views, self._used, now - idle_s)

    def holds(self, key: Any) -> bool:
        """Whether a view is kept under ``key`` now (it is not marked as used)."""
        with self._lock:
            return key in self._views

    def computing(self, key: Any) -> bool:
        """Whether a view under ``key`` is being computed now."""
        with self._lock:
            return key in self._pending

    def get(
        self, key: Any, compute: Callable[[], tuple[Any, bool]], shared_key: str | None = None
    ) -> Any:
        """The view kept under ``key``, else ``compute()``'s, kept when it says so.

        ``compute`` returns ``(view, keep)``: a view that must not be shared (it warned its own
        session about something) is returned without being kept. ``shared_key`` names the view
        for every process (see :func:`ui.serving.store.stable_key`): with it, the second level
        is asked before computing, and given what is kept; without it, the view is this
        process's alone."""
        second = self.second
        with self._lock:
            if key in self._views:
                return self._hit(key)
            waiting = self._pending.get(key)
            if waiting is None:
                done = self._pending[key] = threading.Event()
        if waiting is not None:
            waiting.wait()
            with self._lock:
                if key in self._views:
                    return self._hit(key)
                self.computed += 1
            # The first one failed or kept nothing: this one's own, kept when it says so.
            view, keep = compute()
            if keep:
                self._keep(key, view)
            return view
        try:
            if second is not None and shared_key is not None:
                view = second.get(shared_key)
                if view is not MISSING:
                    with self._lock:
                        self.remote_hits += 1
                    self._keep(key, view)
                    return view
            view, keep = compute()
            with self._lock:
                self.computed += 1
            if keep:
                self._keep(key, view)
                if second is not None and shared_key is not None:
                    second.put_later(shared_key, view)
            return view
        finally:
            with self._lock:
                self._pending.pop(key, None)
            done.set()

    def _hit(self, key: Any) -> Any:
        """The view under ``key``, now the most recently used (the lock is held)."""
        self._views.move_to_end(key)
        self._used[key] = time.monotonic()
        self.hits += 1
        return self._views[key][0]

    def _keep(self, key: Any, view: Any) -> None:
        size = view_bytes(view)
        if size > self.max_bytes:
            return
        with self._lock:
            self._views[key] = (view, size)
            self._used[key] = time.monotonic()
            total = sum(n for _, n in self._views.values())
            while len(self._views) > self.max_entries or total > self.max_bytes:
                old, (_, dropped) = self._views.popitem(last=False)
                self._used.pop(old, None)
                total -= dropped
