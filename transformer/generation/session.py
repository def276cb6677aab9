"""A step-by-step decoding of one source that can go back: :class:`DecodingSession`."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from ..core.model import Decoded, DecoderCache, Encoded, Transformer
from ..core.special import BOS_ID, EOS_ID
from ..core.trace import Trace, check_capture_size
from ..core.util import eval_mode, is_int
from .lens import ResidualNorms, input_is_comparable, logit_lens, residual_norms
from .loop import (
    DecodingLoop,
    LoopState,
    check_model_and_source,
    decoder_prefix,
    greedy_choice,
    labels,
    last_query_rows,
    room,
)
from .records import Beam, StepRecord, own_storage
from .sampling import never_generated, sampling_distribution, without_padding
from .settings import DecodingSettings, StopReason, Strategy


class DecodingSession:
    """Generate from one source, one step at a time, with the ability to go back.

    The source is encoded once; with ``use_cache`` each step feeds only the newest token to the
    decoder (cross-attention keys and values are computed on the first step and reused). Every
    step runs the one :class:`~transformer.generation.loop.DecodingLoop` that
    :func:`~transformer.generation.greedy_batch` runs too.

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
        bos_id: the first target id of an encoder-decoder model (ignored for decoder-only; see
            :func:`~transformer.generation.decoding_ends` for a model's own).
        eos_id: generation stops when it is chosen; ``None`` never stops early (benchmarks).
        decode_token: optional ``id -> text`` to label the records.
    """

    def __init__(
        self,
        model: Transformer,
        source_ids: Sequence[int],
        settings: DecodingSettings | None = None,
        *,
        bos_id: int | None = BOS_ID,
        eos_id: int | None = EOS_ID,
        decode_token: Callable[[int], str] | None = None,
    ) -> None:
        self.model = model
        self.settings = settings = settings if settings is not None else DecodingSettings()
        self.source = check_model_and_source(model, source_ids)
        config = model.config
        vocab = config.output_vocab_size
        first_read = decoder_prefix(config, self.source, bos_id)
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

        self.prefix: list[int] = first_read
        limit = room(config.max_len, len(self.prefix))
        self.max_steps = min(settings.max_new_tokens, limit)
        self._limit_reason: StopReason = (
            "max_new_tokens" if settings.max_new_tokens <= limit else "max_len"
        )
        if settings.capture_attention or settings.capture_lens:
            # The first step's captured pass reads the whole prefix (every step's, uncached);
            # a translation's source is counted as if its encoder were captured too (an upper
            # bound: it adds little at the lengths Marian reads).
            read = len(self.prefix) + (0 if settings.use_cache else self.max_steps)
            check_capture_size(config, self.width, len(self.source), read, row="beam")
        self.seed: int = settings.seed if settings.seed is not None else secrets.randbits(63)

        device = model.device
        self._rng: torch.Generator | None = None
        if self.strategy == "sample":
            self._rng = torch.Generator(device=device)
            self._rng.manual_seed(self.seed)

        encoded: Encoded | None = None
        if config.has_encoder:
            with torch.inference_mode(), eval_mode(model):
                encoded = model.encode(torch.tensor([self.source], device=device))
            if self.width > 1:  # every beam attends to the same memory
                mask = encoded.mask
                encoded = Encoded(
                    memory=encoded.memory.expand(self.width, -1, -1),
                    mask=None if mask is None else mask.expand(self.width, -1, -1, -1),
                )
        prefix = torch.tensor([self.prefix] * self.width, device=device)
        self._loop = DecodingLoop(
            model, prefix, encoded, eos_id=eos_id, use_cache=settings.use_cache
        )
        # identical beams at the start: only the first may extend
        self._loop.state.scores[1:] = float("-inf")
        self._history: list[LoopState] = []  # the state each recorded step started from
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
        row = self._loop.state.tokens[0].tolist()
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

    @property
    def loop(self) -> DecodingLoop:
        """The loop behind the session (its tokens, encoding and key/value cache), for views
        that read them; step the session, not the loop, or the records miss the step."""
        return self._loop

    @property
    def _cache(self) -> DecoderCache | None:
        """The loop's key/value cache (``None`` without ``use_cache``)."""
        return self._loop.cache

    def residual_stream(self, step: int = -1) -> ResidualNorms:
        """The residual stream's norms at every position step ``step`` read (``(S, T)``, the
        positions of ``records[step].tokens``), joined from the captured passes of that step and
        the steps before it along the hypothesis it followed; no model runs.

        Needs ``capture_lens`` in the settings.
        """
        if not self.records:
            raise ValueError("no step has been taken yet")
        index = step % len(self.records) if is_int(step) else step
        if not is_int(index) or not 0 <= index < len(self.records):
            raise IndexError(f"step must be an integer in 0..{len(self.records) - 1}")
        if self.records[index].residual is None:
            raise ValueError("the steps were taken without capture_lens: nothing was recorded")
        row = self.records[index].row
        parts: list[ResidualNorms] = []
        for n in range(index, -1, -1):
            record = self.records[n]
            parts.append(record.residual[row])  # type: ignore[index]
            if self._loop.cache is None:  # every step's pass read every position
                break
            if n > 0 and self.records[n - 1].beams is not None:
                row = self.records[n - 1].beams[row].parent  # type: ignore[index]
        parts.reverse()
        first = parts[0]
        return ResidualNorms(
            stack=first.stack,
            stages=first.stages,
            stream=torch.cat([p.stream for p in parts], dim=1),
            sublayers=first.sublayers,
            added=torch.cat([p.added for p in parts], dim=1),
            norm=first.norm,
        )

    # -- stepping -----------------------------------------------------------------------------

    def step(self) -> StepRecord:
        """Generate one token and return its record; ``RuntimeError`` once :attr:`done`."""
        state = self._start_step()
        with torch.inference_mode(), eval_mode(self.model):
            decoded, logits = self._loop.forward(capture=self.captures)
            return self._finish_step(state, decoded, logits)

    @property
    def captures(self) -> bool:
        """Whether a step's pass is captured (for its attention rows or its lens)."""
        return self.settings.capture_attention or self.settings.capture_lens

    def _start_step(self) -> LoopState:
        """The state a step starts from (the sampler's random state kept in it, for rewinding);
        ``RuntimeError`` once :attr:`done`. A step is this, the loop's forward, then
        :meth:`_finish_step`: :func:`~transformer.generation.batched.step_together` runs the
        forward of several sessions' steps as one."""
        if self.done:
            raise RuntimeError(
                f"generation has stopped ({self.stop_reason}): rewind or start a new session"
            )
        state = self._loop.state
        if self._rng is not None:
            state.rng_state = self._rng.get_state()
        return state

    def _finish_step(self, state: LoopState, decoded: Decoded, logits: Tensor) -> StepRecord:
        """Choose from the step's forward (``decoded`` and its ``(K, V)`` next-token ``logits``,
        as :meth:`DecodingLoop.forward` returns them), keep the record and move on."""
        if self.strategy == "beam":
            record, new_state = self._beam_step(state, decoded, logits)
        else:
            record, new_state = self._single_step(state, decoded, logits)
        self._history.append(state)
        self._loop.state = new_state
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
        loop = self._loop
        loop.state = self._history[step]
        if self._rng is not None and loop.state.rng_state is not None:
            self._rng.set_state(loop.state.rng_state)
        del self._history[step:], self.records[step:]
        self.stop_reason = None
        if loop.cache is None:
            return
        # Step n was computed with the prefix and n - 1 choices cached (step 0 with nothing).
        fed = len(self.prefix) + step - 1 if step > 0 else 0
        if self.width == 1:
            loop.cache.truncate(fed)
        else:  # beams were reordered since: rebuild the cache of the current hypotheses
            loop.cache.truncate(0)
            if fed:
                with torch.inference_mode(), eval_mode(self.model):
                    tokens = loop.state.tokens[:, :fed]  # only the cache is wanted here
                    self.model.decode(tokens, loop.encoded, cache=loop.cache, last_only=True)

    # -- internals ----------------------------------------------------------------------------

    def _record(
        self,
        decoded: Decoded,
        row: int,
        context: Tensor,
        chosen: int,
        beams: list[Beam] | None = None,
    ) -> StepRecord:
        settings, config = self.settings, self.model.config
        logits = decoded.logits[row, -1]  # (V,)
        # the model's own distribution: temperature 1, [PAD] excluded
        probs = without_padding(logits.float(), never_generated(config)).softmax(dim=-1)
        top = probs.topk(min(settings.top_k_shown, probs.numel()))
        top_ids = top.indices.tolist()
        self_rows = cross_rows = None
        if settings.capture_attention:
            self_rows, cross_rows = last_query_rows(decoded, row)
        lens = residual = None
        if settings.capture_lens:
            # The lens and the stream come from this step's own captured pass: its last
            # position is the one that chose the token (the only one the step projected).
            trace = Trace(
                config=config,
                decoder_layers=decoded.layers,
                decoder_output=decoded.hidden,
                project=self.model.generator,
            )
            lens = logit_lens(
                self.model,
                trace,
                -1,
                batch=row,
                top_k=settings.lens_top_k,
                chosen=chosen,
                include_input=input_is_comparable(config),
                exclude=never_generated(config),
            )
            residual = [
                residual_norms(trace, "decoder", batch=k) for k in range(decoded.hidden.size(0))
            ]
        # Kept for the session's life: each tensor holds only its own elements (see own_storage).
        return own_storage(
            StepRecord(
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
                top_labels=labels(self.decode_token, top_ids),
                chosen_label=None if self.decode_token is None else self.decode_token(chosen),
                beams=beams,
                row=row,
                lens=lens,
                residual=residual,
            )
        )

    def _single_step(
        self, state: LoopState, decoded: Decoded, logits: Tensor
    ) -> tuple[StepRecord, LoopState]:
        """Greedy or sampling: one hypothesis, ``logits`` ``(1, V)``."""
        sampling_probs = None
        if self.strategy == "greedy":
            chosen = greedy_choice(logits)  # (1,)
        else:
            s = self.settings
            sampling_probs = sampling_distribution(logits[0], s.temperature, s.top_k, s.top_p)
            chosen = torch.multinomial(sampling_probs, 1, generator=self._rng)  # (1,)
        chosen_id = int(chosen[0])
        record = self._record(decoded, 0, state.tokens[0], chosen_id)
        if sampling_probs is not None:
            record.sampling_probs = sampling_probs[record.top_ids].tolist()
            record.chosen_sampling_prob = float(sampling_probs[chosen_id])
        return record, self._loop.extend(chosen)

    def _beam_step(
        self, state: LoopState, decoded: Decoded, logits: Tensor
    ) -> tuple[StepRecord, LoopState]:
        """Beam search: ``logits`` ``(K, V)``, one row per hypothesis."""
        width, pad = self.width, self.model.config.pad_id
        log_probs = logits.float().log_softmax(dim=-1)  # (K, V)
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
        new_state = LoopState(
            tokens=torch.cat([state.tokens[parent], token[:, None]], dim=1),
            scores=candidates.view(-1)[flat],
            lengths=lengths[parent],
            finished=finished,
        )
        self._loop.reorder(parent)

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


def generate(
    model: Transformer,
    source_ids: Sequence[int],
    settings: DecodingSettings | None = None,
    *,
    bos_id: int | None = BOS_ID,
    eos_id: int | None = EOS_ID,
) -> list[int]:
    """Generated ids for one source (without prefix and [EOS]): a whole session, run to the end."""
    session = DecodingSession(model, source_ids, settings, bos_id=bos_id, eos_id=eos_id)
    for _ in session.run():
        pass
    return session.output_ids
