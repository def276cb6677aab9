"""Autoregressive generation, one visible step at a time (paper section 3, "auto-regressive").

A :class:`DecodingSession` turns a source (encoder-decoder) or a prompt (decoder-only) into
output ids and yields one :class:`StepRecord` per generated token: what the model saw, its
next-token distribution, which token was chosen and how, and (on request) the new query row of
every attention head. A session can be stepped, resumed, and rewound ("back") so that stepping
again reproduces the same records.

Every strategy chooses among the real tokens only: the [PAD] logit is set to ``-inf``
(:func:`without_padding`) before any distribution is formed, so padding is never generated.

Everything here works on token ids; the caller tokenizes and detokenizes (``decode_token`` only
labels ids in the records).

Strategies (:class:`DecodingSettings`):

- ``"greedy"``: the most probable token.
- ``"sample"``: draw from ``softmax(logits / temperature)`` after top-k, then top-p filtering,
  with a seeded generator. ``temperature ≤ 0`` means greedy.
- ``"beam"``: beam search over ``beam_width`` hypotheses ranked by their summed log-probability
  divided by ``length ** length_penalty`` (``length_penalty = 0``: plain sum).

:func:`greedy_batch` runs the same greedy step over a whole batch without records; evaluation
and inspection use it, so this module holds the project's only decoding loop.

Positions: an encoder-decoder target starts with ``[BOS]``; a decoder-only model continues the
prompt as given. Either way the decoder reads at most ``max_len`` positions, so a session makes
at most ``max_len - len(prefix) + 1`` tokens and stops early with ``stop_reason == "max_len"``
when ``max_new_tokens`` asks for more.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from .config import ModelConfig
from .model import Decoded, DecoderCache, Encoded, Transformer
from .special import BOS_ID, EOS_ID, PAD_ID
from .util import eval_mode, is_int, is_number

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MAX_BEAM_WIDTH",
    "MAX_NEW_TOKENS",
    "MAX_TOP_K_SHOWN",
    "MIN_TEMPERATURE",
    "PAD_ID",
    "Beam",
    "DecodingSession",
    "DecodingSettings",
    "ForcedPosition",
    "StepRecord",
    "TeacherForcing",
    "filter_logits",
    "generate",
    "greedy_batch",
    "sampling_distribution",
    "teacher_force",
    "without_padding",
]

MAX_NEW_TOKENS = 512
"""``max_new_tokens`` must lie in ``1..MAX_NEW_TOKENS`` (and the model's max_len bounds it too)."""
MAX_BEAM_WIDTH = 16
MAX_TOP_K_SHOWN = 100
MIN_TEMPERATURE = 1e-4
"""Positive temperatures below this are raised to it, so ``logits / T`` cannot overflow."""

Strategy = Literal["greedy", "sample", "beam"]
STRATEGIES: tuple[str, ...] = ("greedy", "sample", "beam")
StopReason = Literal["eos", "max_new_tokens", "max_len"]


@dataclass(frozen=True)
class DecodingSettings:
    """How to choose each next token.

    Attributes:
        strategy: ``"greedy"``, ``"sample"`` or ``"beam"``.
        temperature: divides the logits before sampling; ``≤ 0`` means greedy. Positive values
            below :data:`MIN_TEMPERATURE` are treated as :data:`MIN_TEMPERATURE`.
        top_k: sample only among the ``top_k`` most probable tokens (``None`` or 0: no limit).
        top_p: sample only from the smallest set of tokens whose probability mass is
            ``≥ top_p`` (nucleus sampling; ``None`` or 1: no limit). Applied after top-k.
        beam_width: hypotheses kept by beam search, ``1..MAX_BEAM_WIDTH`` (1 equals greedy).
        length_penalty: beam ranking divides the summed log-probability by
            ``length ** length_penalty`` (0: unnormalised; 1: mean log-probability).
        max_new_tokens: tokens to generate at most, ``1..MAX_NEW_TOKENS`` ([EOS] included).
        seed: seed of the sampling generator; ``None`` draws one (see
            :attr:`DecodingSession.seed`).
        use_cache: reuse keys/values of earlier positions (the fast way); ``False`` recomputes
            the whole prefix every step (the slow way, for comparison).
        capture_attention: record each step's new attention query rows (costs time; for the UI).
        keep_logits: keep each step's full ``(V,)`` logits in the record (memory; for tests).
        top_k_shown: how many of the most probable tokens a record lists,
            ``1..MAX_TOP_K_SHOWN``.
    """

    strategy: Strategy = "greedy"
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    beam_width: int = 4
    length_penalty: float = 0.0
    max_new_tokens: int = 64
    seed: int | None = 0
    use_cache: bool = True
    capture_attention: bool = False
    keep_logits: bool = False
    top_k_shown: int = 10

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the setting to change and its valid range."""
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy={self.strategy!r} is not one of {', '.join(STRATEGIES)}.")
        if not is_int(self.max_new_tokens) or not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(
                f"max_new_tokens must be an integer in 1..{MAX_NEW_TOKENS}, "
                f"got {self.max_new_tokens!r}."
            )
        if not is_number(self.temperature):
            raise ValueError(f"temperature must be a number, got {self.temperature!r}.")
        if not math.isfinite(self.temperature):
            raise ValueError(
                f"temperature must be finite, got {self.temperature}; use a value ≤ 0 for greedy."
            )
        if self.top_k is not None and (not is_int(self.top_k) or self.top_k < 0):
            raise ValueError(
                f"top_k must be None or an integer ≥ 0 (0 = no limit), got {self.top_k!r}."
            )
        if self.top_p is not None and (not is_number(self.top_p) or not 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be None or in (0, 1], got {self.top_p!r}.")
        if not is_int(self.beam_width) or not 1 <= self.beam_width <= MAX_BEAM_WIDTH:
            raise ValueError(
                f"beam_width must be an integer in 1..{MAX_BEAM_WIDTH}, got {self.beam_width!r}."
            )
        if not (is_number(self.length_penalty) and 0.0 <= self.length_penalty <= 5.0):
            raise ValueError(f"length_penalty must be in [0, 5], got {self.length_penalty!r}.")
        if self.seed is not None and not is_int(self.seed):
            raise ValueError(f"seed must be None or an integer, got {self.seed!r}.")
        if not is_int(self.top_k_shown) or not 1 <= self.top_k_shown <= MAX_TOP_K_SHOWN:
            raise ValueError(
                f"top_k_shown must be an integer in 1..{MAX_TOP_K_SHOWN}, got {self.top_k_shown!r}."
            )

    @property
    def effective_strategy(self) -> Strategy:
        """The strategy actually run: sampling at ``temperature ≤ 0`` is greedy."""
        if self.strategy == "sample" and self.temperature <= 0:
            return "greedy"
        return self.strategy

    def describe(self) -> str:
        """How a token is chosen, in words, e.g. ``"sample (T=0.8, top-k=5)"``."""
        strategy = self.effective_strategy
        if strategy == "greedy":
            return "greedy (temperature ≤ 0)" if self.strategy == "sample" else "greedy"
        if strategy == "beam":
            penalty = f", length penalty {self.length_penalty:g}" if self.length_penalty else ""
            return f"beam search (width {self.beam_width}{penalty})"
        parts = [f"T={max(self.temperature, MIN_TEMPERATURE):g}"]
        if self.top_k:
            parts.append(f"top-k={self.top_k}")
        if self.top_p is not None and self.top_p < 1.0:
            parts.append(f"top-p={self.top_p:g}")
        return f"sample ({', '.join(parts)})"


# -- the distribution a token is drawn from -------------------------------------------------------


def never_generated(config: ModelConfig) -> int | None:
    """The class a model never writes: its [PAD], unless the pad id is also its end-of-text id
    (GPT-2 has no pad token and pads with ``<|endoftext|>``, which it must be able to write)."""
    if config.eos_id is not None and config.pad_id == config.eos_id:
        return None
    return config.pad_id


def without_padding(logits: Tensor, pad_id: int | None) -> Tensor:
    """``logits`` with the ``pad_id`` class set to ``-inf``: the distribution the model predicts
    from. Padding only fills batches; the model never generates it and training gives it no
    probability (:func:`transformer.training.evaluation.sequence_loss` masks it the same way).

    Args:
        logits: ``(..., V)`` raw logits.
        pad_id: the padding id, in ``0..V-1``; ``None`` (see :func:`never_generated`) leaves
            the logits as they are.

    Returns:
        ``(..., V)`` logits, a new tensor (the gradient does not reach the padding logit).
    """
    if pad_id is None:
        return logits
    index = torch.tensor([pad_id], device=logits.device)
    return logits.index_fill(-1, index, float("-inf"))


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to ``-inf`` every logit outside the top-k, then outside the top-p nucleus.

    Args:
        logits: ``(..., V)`` (already divided by the temperature).
        top_k: keep the ``top_k`` largest (``None`` or 0: keep all).
        top_p: keep the smallest set of most probable tokens whose probability is ``≥ top_p``;
            the most probable token is always kept (``None`` or 1: keep all).

    Returns:
        ``(..., V)`` logits, a new tensor.
    """
    logits = logits.clone()
    vocab = logits.size(-1)
    if top_k and top_k < vocab:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits[logits < kth] = float("-inf")
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # mass of strictly more probable tokens
        drop_sorted = mass_before >= top_p  # the first token has mass_before 0 < top_p: kept
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits[drop] = float("-inf")
    return logits


def sampling_distribution(
    logits: Tensor, temperature: float, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """The distribution sampling draws from: ``softmax(filter(logits / T))``.

    Args:
        logits: ``(..., V)`` raw logits.
        temperature: ``> 0`` (values below :data:`MIN_TEMPERATURE` are raised to it).

    Returns:
        ``(..., V)`` float32 probabilities summing to 1, zero outside the kept tokens.
    """
    if temperature <= 0:
        raise ValueError("temperature ≤ 0 means greedy: there is no distribution to sample")
    scaled = logits.float() / max(temperature, MIN_TEMPERATURE)
    return filter_logits(scaled, top_k, top_p).softmax(dim=-1)


# -- records --------------------------------------------------------------------------------------


@dataclass
class Beam:
    """One beam-search hypothesis after a step.

    ``tokens`` is the whole sequence (prefix included), ending at [EOS] when ``finished``;
    ``score`` the summed log-probability of its generated tokens (nats); ``rank_score`` what
    beams are ranked by (``score / length ** length_penalty``); ``parent`` the index of the beam
    it extends among the previous step's beams.
    """

    tokens: list[int]
    score: float
    rank_score: float
    finished: bool
    parent: int


@dataclass
class StepRecord:
    """What happened at one generation step.

    Attributes:
        step: index of the step, from 0.
        tokens: the ids the model read: the prefix ([BOS], or the prompt) plus earlier choices
            (for beam search, those of the best hypothesis extended at this step).
        top_ids: the ``top_k_shown`` most probable next ids, most probable first.
        top_probs: their probabilities under the model (``softmax(logits)``, temperature 1, with
            [PAD] excluded: see :func:`without_padding`).
        entropy: entropy of the model's next-token distribution, in nats.
        chosen_id: the id chosen at this step (appended to ``tokens``).
        chosen_prob: its probability under the model.
        method: how it was chosen, e.g. ``"greedy"`` or ``"sample (T=0.8, top-p=0.9)"``.
        sampling_probs: for sampling, the probability of each of ``top_ids`` under the
            distribution actually sampled from (temperature and filtering applied), else ``None``.
        chosen_sampling_prob: for sampling, the chosen id's probability under that distribution.
        chosen_rank: the chosen id's rank under the model (1 = most probable), so that a chosen
            token outside ``top_ids`` can be shown where it stands.
        self_attention: ``(L, H, Tk)`` float32, the new query row of the decoder's masked
            self-attention (keys: ``tokens``), when attention is captured.
        cross_attention: ``(L, H, Ts)`` float32, the new query row of cross-attention (keys: the
            source), when captured and the model has an encoder.
        beams: for beam search, every hypothesis after this step, best first.
        logits: ``(V,)`` float32 raw logits (the [PAD] logit as the model computed it), when
            ``keep_logits`` is set.
        top_labels / chosen_label: ``decode_token`` of ``top_ids`` / ``chosen_id`` when given.
    """

    step: int
    tokens: list[int]
    top_ids: list[int]
    top_probs: list[float]
    entropy: float
    chosen_id: int
    chosen_prob: float
    method: str
    sampling_probs: list[float] | None = None
    chosen_sampling_prob: float | None = None
    chosen_rank: int | None = None
    self_attention: np.ndarray | None = None
    cross_attention: np.ndarray | None = None
    beams: list[Beam] | None = None
    logits: np.ndarray | None = None
    top_labels: list[str] | None = None
    chosen_label: str | None = None


@dataclass
class _State:
    """What a step starts from, kept so that :meth:`DecodingSession.rewind` can return to it."""

    tokens: Tensor  # (K, T) long: K hypotheses (1 unless beam search), prefix included
    scores: Tensor  # (K,) summed log-probabilities
    lengths: Tensor  # (K,) generated tokens, [EOS] included, padding after it not
    finished: Tensor  # (K,) bool
    rng_state: Tensor | None


# -- validation shared by sessions and teacher forcing --------------------------------------------


def _check_ids(ids: Sequence[int], what: str) -> list[int]:
    if isinstance(ids, Tensor):
        if ids.dim() != 1:
            raise ValueError(f"{what} must be one sequence of ids, got shape {tuple(ids.shape)}")
        ids = ids.tolist()
    ids = list(ids)
    if not all(is_int(i) for i in ids):
        raise ValueError(f"{what} must be a sequence of integer token ids")
    return ids


def _check_model_and_source(model: Transformer, source_ids: Sequence[int]) -> list[int]:
    config = model.config
    if not config.has_decoder:
        raise ValueError(f"a {config.architecture} model has no decoder, so it cannot generate")
    what = "source" if config.has_encoder else "prompt"
    source = _check_ids(source_ids, what)
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


def _labels(decode_token: Callable[[int], str] | None, ids: list[int]) -> list[str] | None:
    return None if decode_token is None else [decode_token(i) for i in ids]


def _last_query_rows(decoded: Decoded, row: int) -> tuple[np.ndarray, np.ndarray | None]:
    """``(L, H, Tk)`` self- and ``(L, H, Ts)`` cross-attention weights of the last query."""
    self_rows = torch.stack([layer.self_attention.weights[row, :, -1] for layer in decoded.layers])
    cross = [layer.cross_attention for layer in decoded.layers]
    cross_rows = None
    if all(record is not None for record in cross) and cross:
        cross_rows = torch.stack([record.weights[row, :, -1] for record in cross])
        cross_rows = cross_rows.float().cpu().numpy()
    return self_rows.float().cpu().numpy(), cross_rows


# -- the step every decoding loop shares ----------------------------------------------------------


def _room(max_len: int, prefix_length: int) -> int:
    """Tokens a decoder of ``max_len`` positions can produce after a prefix: the last chosen token
    is never fed back, so it may take position ``max_len``."""
    return max_len - prefix_length + 1


def _decode_next(
    model: Transformer,
    tokens: Tensor,
    encoded: Encoded | None,
    cache: DecoderCache | None,
    capture: bool = False,
    check_ids: bool = False,
) -> Decoded:
    """Run the decoder so that ``logits[:, -1]`` predicts the token after ``tokens`` ``(K, T)``.

    With a cache only the positions it has not seen are fed (the whole prefix on the first step,
    then one token); without one the whole sequence is recomputed. Ids are validated where they
    enter (the session's start, ``greedy_batch``'s first step), so ``check_ids`` is off per step.
    """
    if cache is None:
        return model.decode(tokens, encoded, capture=capture, check_ids=check_ids)
    pending = tokens[:, cache.length :]  # (K, T_new): the prefix, then one token
    return model.decode(pending, encoded, cache=cache, capture=capture, check_ids=check_ids)


# -- the session ----------------------------------------------------------------------------------


class DecodingSession:
    """Generate from one source, one step at a time, with the ability to go back.

    The source is encoded once; with ``use_cache`` each step feeds only the newest token to the
    decoder (cross-attention keys and values are computed on the first step and reused).

    Example::

        session = DecodingSession(model, source_ids, DecodingSettings(strategy="sample"))
        for record in session.run():
            print(record.chosen_id, record.top_probs[0])
        session.back()            # undo the last step
        record = session.step()   # same record as before (same seed state)

    Args:
        model: an encoder-decoder or decoder-only :class:`Transformer`. Each step runs it in
            eval mode under ``torch.inference_mode()``, restoring its training flag after.
        source_ids: the source ids (encoder-decoder) or the prompt (decoder-only), not empty and
            at most ``max_len`` long.
        settings: how to choose tokens (default: greedy, cache on).
        bos_id: the first target id of an encoder-decoder model (ignored for decoder-only).
        eos_id: generation stops when it is chosen; ``None`` never stops early (benchmarks).
        decode_token: optional ``id -> text`` to label the records.
    """

    def __init__(
        self,
        model: Transformer,
        source_ids: Sequence[int],
        settings: DecodingSettings | None = None,
        *,
        bos_id: int = BOS_ID,
        eos_id: int | None = EOS_ID,
        decode_token: Callable[[int], str] | None = None,
    ) -> None:
        self.model = model
        self.settings = settings = settings if settings is not None else DecodingSettings()
        self.source = _check_model_and_source(model, source_ids)
        config = model.config
        vocab = config.output_vocab_size
        for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
            if value is not None and not (is_int(value) and 0 <= value < vocab):
                raise ValueError(
                    f"{name}={value!r} is outside the target vocabulary 0..{vocab - 1}"
                )
        self.bos_id, self.eos_id, self.decode_token = bos_id, eos_id, decode_token
        self.strategy: Strategy = settings.effective_strategy
        self.width = settings.beam_width if self.strategy == "beam" else 1
        if self.width > vocab:
            raise ValueError(f"beam_width={self.width} exceeds the vocabulary size {vocab}")

        self.prefix: list[int] = [bos_id] if config.has_encoder else list(self.source)
        room = _room(config.max_len, len(self.prefix))
        self.max_steps = min(settings.max_new_tokens, room)
        self._limit_reason: StopReason = (
            "max_new_tokens" if settings.max_new_tokens <= room else "max_len"
        )
        self.seed: int = settings.seed if settings.seed is not None else secrets.randbits(63)

        device = model.device
        self._rng: torch.Generator | None = None
        if self.strategy == "sample":
            self._rng = torch.Generator(device=device)
            self._rng.manual_seed(self.seed)

        self._encoded: Encoded | None = None
        if config.has_encoder:
            with torch.inference_mode(), eval_mode(model):
                src = torch.tensor([self.source], device=device)
                encoded = model.encode(src)
            if self.width > 1:  # every beam attends to the same memory
                mask = encoded.mask
                encoded = Encoded(
                    memory=encoded.memory.expand(self.width, -1, -1),
                    mask=None if mask is None else mask.expand(self.width, -1, -1, -1),
                )
            self._encoded = encoded
        self._cache = model.new_cache() if settings.use_cache else None

        scores = torch.zeros(self.width, device=device)
        scores[1:] = float("-inf")  # identical beams at the start: only the first may extend
        self._state = _State(
            tokens=torch.tensor([self.prefix] * self.width, device=device),
            scores=scores,
            lengths=torch.zeros(self.width, dtype=torch.long, device=device),
            finished=torch.zeros(self.width, dtype=torch.bool, device=device),
            rng_state=None,
        )
        self._history: list[_State] = []  # the state each recorded step started from
        self.records: list[StepRecord] = []
        self.stop_reason: StopReason | None = None

    # -- public state -------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Whether generation has stopped ([EOS], ``max_new_tokens`` or the model's max_len)."""
        return self.stop_reason is not None

    @property
    def tokens(self) -> list[int]:
        """The best sequence so far, prefix included (ending at [EOS] if it was chosen)."""
        row = self._state.tokens[0].tolist()
        if self.eos_id is not None and self.eos_id in row[len(self.prefix) :]:
            row = row[: row.index(self.eos_id, len(self.prefix)) + 1]
        return row

    @property
    def output_ids(self) -> list[int]:
        """The generated ids of the best sequence, without the prefix and without [EOS]."""
        out = self.tokens[len(self.prefix) :]
        if out and out[-1] == self.eos_id:
            out = out[:-1]
        return out

    # -- stepping -----------------------------------------------------------------------------

    def step(self) -> StepRecord:
        """Generate one token and return its record; ``RuntimeError`` once :attr:`done`."""
        if self.done:
            raise RuntimeError(
                f"generation has stopped ({self.stop_reason}): rewind or start a new session"
            )
        state = self._state
        if self._rng is not None:
            state.rng_state = self._rng.get_state()
        with torch.inference_mode(), eval_mode(self.model):
            decoded = self._forward(state.tokens)
            if self.strategy == "beam":
                record, new_state = self._beam_step(state, decoded)
            else:
                record, new_state = self._single_step(state, decoded)
        self._history.append(state)
        self._state = new_state
        self.records.append(record)
        if bool(new_state.finished[0]):
            self.stop_reason = "eos"
        elif len(self.records) >= self.max_steps:
            self.stop_reason = self._limit_reason
        return record

    def run(self, max_steps: int | None = None) -> Iterator[StepRecord]:
        """Step until :attr:`done` (or ``max_steps`` more steps), yielding each record.

        Stopping the iteration early leaves the session where it is; calling ``run`` again
        resumes from there.
        """
        taken = 0
        while not self.done and (max_steps is None or taken < max_steps):
            taken += 1
            yield self.step()

    def rewind(self, n_steps: int = 1) -> None:
        """Undo the last ``n_steps`` steps (at most all of them)."""
        if not is_int(n_steps) or n_steps < 0:
            raise ValueError(f"n_steps must be an integer ≥ 0, got {n_steps!r}")
        self.rewind_to(max(len(self.records) - n_steps, 0))

    def back(self) -> None:
        """Undo the last step (the UI's "back"); nothing happens before the first step."""
        self.rewind(1)

    def rewind_to(self, step: int) -> None:
        """Return to the state before step ``step``, keeping ``records[:step]``.

        The key/value cache is truncated and the sampler's random state restored, so stepping
        again reproduces the same records (bit for bit for greedy and sampling; beam search
        rebuilds its reordered cache in one pass, equal to within float rounding).
        """
        if not is_int(step) or not 0 <= step <= len(self.records):
            raise ValueError(f"step must be an integer in 0..{len(self.records)}, got {step!r}")
        if step == len(self.records):
            return
        self._state = self._history[step]
        if self._rng is not None and self._state.rng_state is not None:
            self._rng.set_state(self._state.rng_state)
        del self._history[step:], self.records[step:]
        self.stop_reason = None
        if self._cache is None:
            return
        # Step n was computed with the prefix and n - 1 choices cached (step 0 with nothing).
        fed = len(self.prefix) + step - 1 if step > 0 else 0
        if self.width == 1:
            self._cache.truncate(fed)
        else:  # beams were reordered since: rebuild the cache of the current hypotheses
            self._cache.truncate(0)
            if fed:
                with torch.inference_mode(), eval_mode(self.model):
                    self.model.decode(self._state.tokens[:, :fed], self._encoded, cache=self._cache)

    # -- internals ----------------------------------------------------------------------------

    def _forward(self, tokens: Tensor) -> Decoded:
        """Logits (and attention, if captured) for the position after ``tokens`` ``(K, T)``."""
        return _decode_next(
            self.model, tokens, self._encoded, self._cache, self.settings.capture_attention
        )

    def _record(
        self,
        decoded: Decoded,
        row: int,
        context: Tensor,
        chosen: int,
        beams: list[Beam] | None = None,
    ) -> StepRecord:
        settings = self.settings
        logits = decoded.logits[row, -1]  # (V,)
        probs = without_padding(logits.float(), never_generated(self.model.config)).softmax(dim=-1)
        top = probs.topk(min(settings.top_k_shown, probs.numel()))
        top_ids = top.indices.tolist()
        self_rows = cross_rows = None
        if settings.capture_attention:
            self_rows, cross_rows = _last_query_rows(decoded, row)
        return StepRecord(
            step=len(self.records),
            tokens=context.tolist(),
            top_ids=top_ids,
            top_probs=top.values.tolist(),
            entropy=float(torch.special.entr(probs).sum()),
            chosen_id=chosen,
            chosen_prob=float(probs[chosen]),
            chosen_rank=int((probs > probs[chosen]).sum()) + 1,
            method=settings.describe(),
            self_attention=self_rows,
            cross_attention=cross_rows,
            logits=logits.float().cpu().numpy() if settings.keep_logits else None,
            top_labels=_labels(self.decode_token, top_ids),
            chosen_label=None if self.decode_token is None else self.decode_token(chosen),
            beams=beams,
        )

    def _single_step(self, state: _State, decoded: Decoded) -> tuple[StepRecord, _State]:
        logits = without_padding(decoded.logits[0, -1], never_generated(self.model.config))  # (V,)
        sampling_probs = None
        if self.strategy == "greedy":
            chosen = int(logits.argmax())
        else:
            s = self.settings
            dist = sampling_distribution(logits, s.temperature, s.top_k, s.top_p)
            chosen = int(torch.multinomial(dist, 1, generator=self._rng))
            sampling_probs = dist
        record = self._record(decoded, 0, state.tokens[0], chosen)
        if sampling_probs is not None:
            record.sampling_probs = sampling_probs[record.top_ids].tolist()
            record.chosen_sampling_prob = float(sampling_probs[chosen])
        new_token = torch.tensor([[chosen]], device=state.tokens.device)
        new_state = _State(
            tokens=torch.cat([state.tokens, new_token], dim=1),
            scores=state.scores,
            lengths=state.lengths + 1,
            finished=torch.tensor([chosen == self.eos_id], device=state.tokens.device),
            rng_state=None,
        )
        return record, new_state

    def _beam_step(self, state: _State, decoded: Decoded) -> tuple[StepRecord, _State]:
        width, pad = self.width, self.model.config.pad_id
        log_probs = without_padding(
            decoded.logits[:, -1].float(), never_generated(self.model.config)
        ).log_softmax(dim=-1)  # (K, V)
        vocab = log_probs.size(1)
        candidates = state.scores[:, None] + log_probs  # (K, V)
        # A finished beam stays as it is: its only continuation is padding at no cost.
        done = state.finished
        if bool(done.any()):
            candidates[done] = float("-inf")
            candidates[done, pad] = state.scores[done]
        lengths = torch.where(done, state.lengths, state.lengths + 1)  # (K,)
        rank = candidates
        if self.settings.length_penalty:
            rank = candidates / lengths[:, None].float() ** self.settings.length_penalty
        rank_scores, flat = rank.view(-1).topk(width)  # (K,), best first
        parent, token = flat // vocab, flat % vocab
        finished = done[parent] | (token == self.eos_id if self.eos_id is not None else False)
        new_state = _State(
            tokens=torch.cat([state.tokens[parent], token[:, None]], dim=1),
            scores=candidates.view(-1)[flat],
            lengths=lengths[parent],
            finished=finished,
            rng_state=None,
        )
        if self._cache is not None and not torch.equal(
            parent, torch.arange(width, device=parent.device)
        ):
            _reorder(self._cache, parent)

        beams = []
        for i, (row, p, s, r, f) in enumerate(
            zip(
                new_state.tokens.tolist(),
                parent.tolist(),
                new_state.scores.tolist(),
                rank_scores.tolist(),
                finished.tolist(),
                strict=True,
            )
        ):
            length = len(self.prefix) + int(new_state.lengths[i])
            beams.append(Beam(tokens=row[:length], score=s, rank_score=r, finished=f, parent=p))
        # The record follows the best hypothesis extended at this step (not a frozen finished one).
        best = next(i for i in range(width) if not bool(done[parent[i]]))
        row = int(parent[best])
        record = self._record(decoded, row, state.tokens[row], int(token[best]), beams=beams)
        return record, new_state


def _reorder(cache: DecoderCache, order: Tensor) -> None:
    """Make row ``i`` of every self-attention cache the old row ``order[i]`` (beam reordering)."""
    for layer in cache.layers:
        kv = layer.self_attention
        if kv.keys is not None:
            kv.keys, kv.values = kv.keys.index_select(0, order), kv.values.index_select(0, order)
    if cache.real_keys is not None:
        cache.real_keys = cache.real_keys.index_select(0, order)


def generate(
    model: Transformer,
    source_ids: Sequence[int],
    settings: DecodingSettings | None = None,
    *,
    bos_id: int = BOS_ID,
    eos_id: int | None = EOS_ID,
) -> list[int]:
    """Generated ids for one source (without prefix and [EOS]): a whole session, run to the end."""
    session = DecodingSession(model, source_ids, settings, bos_id=bos_id, eos_id=eos_id)
    for _ in session.run():
        pass
    return session.output_ids


def greedy_batch(
    model: Transformer,
    src: Tensor | None = None,
    prompts: Tensor | None = None,
    *,
    bos_id: int = BOS_ID,
    eos_id: int | None = EOS_ID,
    max_new_tokens: int = 64,
) -> list[list[int]]:
    """Greedy outputs of a whole batch, decoded together with the key/value cache.

    The same step as a greedy :class:`DecodingSession` (the most probable token, fed back
    through the cache), for many rows at once and without per-step records: what evaluation
    and inspection use.

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
        device = src.device
        prefix = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=device)
    else:
        if prompts is None or src is not None:
            raise ValueError("a decoder-only model continues prompts (B, Tp), it has no src")
        if prompts.dim() != 2 or prompts.size(1) == 0:
            raise ValueError(f"prompts must be (batch, length) ids, got {tuple(prompts.shape)}")
        device = prompts.device
        prefix = prompts
    if not is_int(max_new_tokens) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer ≥ 0, got {max_new_tokens!r}")
    steps = min(max_new_tokens, _room(config.max_len, prefix.size(1)))
    tokens = prefix
    with torch.inference_mode(), eval_mode(model):
        encoded = model.encode(src) if src is not None else None
        cache = model.new_cache()
        finished = torch.zeros(prefix.size(0), dtype=torch.bool, device=device)
        for step in range(steps):
            decoded = _decode_next(model, tokens, encoded, cache, check_ids=step == 0)
            logits = decoded.logits[:, -1]  # (B, V)
            logits = without_padding(logits, never_generated(config))
            chosen = logits.argmax(dim=-1).masked_fill(finished, config.pad_id)  # (B,)
            tokens = torch.cat([tokens, chosen[:, None]], dim=1)
            if eos_id is not None:
                finished |= chosen == eos_id
                if bool(finished.all()):
                    break
    generated = tokens[:, prefix.size(1) :].tolist()
    return [row[: row.index(eos_id)] if eos_id in row else row for row in generated]


# -- teacher forcing ------------------------------------------------------------------------------


@dataclass
class ForcedPosition:
    """The model's prediction at one target position, given the reference before it.

    ``reference_id`` is the token the reference has there; ``reference_prob`` the probability
    the model gives it; ``predicted_id`` the model's argmax and ``matches`` whether they agree.
    ``top_ids`` / ``top_probs`` / ``entropy`` describe the whole predicted distribution.
    """

    position: int
    reference_id: int
    reference_prob: float
    predicted_id: int
    matches: bool
    top_ids: list[int]
    top_probs: list[float]
    entropy: float
    top_labels: list[str] | None = None


@dataclass
class TeacherForcing:
    """The model's predictions along a reference target (one forward pass)."""

    positions: list[ForcedPosition] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        """Fraction of positions where the argmax is the reference token."""
        return sum(p.matches for p in self.positions) / len(self.positions)

    @property
    def mean_log_prob(self) -> float:
        """Mean log-probability of the reference tokens (minus the cross-entropy), in nats."""
        return sum(math.log(max(p.reference_prob, 1e-45)) for p in self.positions) / len(
            self.positions
        )


def teacher_force(
    model: Transformer,
    source_ids: Sequence[int],
    target_ids: Sequence[int],
    *,
    bos_id: int = BOS_ID,
    top_k_shown: int = 10,
    decode_token: Callable[[int], str] | None = None,
) -> TeacherForcing:
    """Feed the reference target and read, per position, what the model predicts next.

    Args:
        model: an encoder-decoder or decoder-only :class:`Transformer`.
        source_ids: the source (encoder-decoder) or the prompt (decoder-only).
        target_ids: the reference continuation, *without* [BOS] (end it with [EOS] to check
            that the model stops). Position ``i`` predicts ``target_ids[i]`` from
            ``[BOS] + target_ids[:i]`` (decoder-only: ``prompt + target_ids[:i]``).
        bos_id: first decoder input of an encoder-decoder model.
        top_k_shown: how many of the most probable tokens each position lists.

    Returns:
        A :class:`TeacherForcing` with one :class:`ForcedPosition` per target token.
    """
    source = _check_model_and_source(model, source_ids)
    target = _check_ids(target_ids, "target")
    if not target:
        raise ValueError("the target is empty: give the reference ids to compare against")
    if not is_int(top_k_shown) or not 1 <= top_k_shown <= MAX_TOP_K_SHOWN:
        raise ValueError(f"top_k_shown must be an integer in 1..{MAX_TOP_K_SHOWN}")
    config = model.config
    prefix = [bos_id] if config.has_encoder else source
    inputs = prefix + target[:-1]
    if len(inputs) > config.max_len:
        raise ValueError(
            f"prefix and target need {len(inputs)} positions, more than the model's max_len="
            f"{config.max_len}: shorten the target"
        )
    vocab = config.output_vocab_size
    if any(not 0 <= i < vocab for i in target):
        raise ValueError(f"target ids must lie in 0..{vocab - 1}")
    device = model.device
    with torch.inference_mode(), eval_mode(model):
        encoded = None
        if config.has_encoder:
            encoded = model.encode(torch.tensor([source], device=device))
        logits = model.decode(torch.tensor([inputs], device=device), encoded).logits[0]
    first = len(prefix) - 1  # the position whose output predicts target[0]
    probs = without_padding(logits[first:].float(), never_generated(config)).softmax(
        dim=-1
    )  # (T_target, V)
    top = probs.topk(min(top_k_shown, vocab), dim=-1)
    entropy = torch.special.entr(probs).sum(dim=-1)
    reference = torch.tensor(target, device=device)
    reference_probs = probs.gather(1, reference[:, None])[:, 0]
    predicted = probs.argmax(dim=-1)
    result = TeacherForcing()
    for i, (ref, p_ref, pred, ids, ps, h) in enumerate(
        zip(
            target,
            reference_probs.tolist(),
            predicted.tolist(),
            top.indices.tolist(),
            top.values.tolist(),
            entropy.tolist(),
            strict=True,
        )
    ):
        result.positions.append(
            ForcedPosition(
                position=i,
                reference_id=ref,
                reference_prob=p_ref,
                predicted_id=pred,
                matches=pred == ref,
                top_ids=ids,
                top_probs=ps,
                entropy=h,
                top_labels=_labels(decode_token, ids),
            )
        )
    return result
