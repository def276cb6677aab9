"""Autoregressive generation, one visible step at a time (paper section 3, "auto-regressive").

A :class:`DecodingSession` turns a source (encoder-decoder) or a prompt (decoder-only) into
output ids and yields one :class:`StepRecord` per generated token: what the model saw, its
next-token distribution, which token was chosen and how, and (on request) the new query row of
every attention head and the logit lens of the step's own pass. A session can be stepped,
resumed, and rewound ("back") so that stepping again reproduces the same records.

Every strategy chooses among the real tokens only: the [PAD] logit is set to ``-inf``
(:func:`without_padding`) before any distribution is formed, so padding is never generated.

Everything here works on token ids; the caller tokenizes and detokenizes (``decode_token`` only
labels ids in the records). Where a model starts and stops decoding is :func:`decoding_ends`.

Strategies (:class:`DecodingSettings`):

- ``"greedy"``: the most probable token.
- ``"sample"``: draw from ``softmax(logits / temperature)`` after top-k, then top-p filtering,
  with a seeded generator. ``temperature ≤ 0`` means greedy.
- ``"beam"``: beam search over ``beam_width`` hypotheses ranked by their summed log-probability
  divided by ``length ** length_penalty`` (``length_penalty = 0``: plain sum).

:func:`greedy_batch` runs the same loop (:class:`~transformer.generation.loop.DecodingLoop`)
and greedy choice over a whole batch without records; evaluation, inspection and the command
line use it, so this package holds the project's only decoding loop.

Positions: an encoder-decoder target starts with ``[BOS]``; a decoder-only model continues the
prompt as given. Either way the decoder reads at most ``max_len`` positions, so a session makes
at most ``max_len - len(prefix) + 1`` tokens and stops early with ``stop_reason == "max_len"``
when ``max_new_tokens`` asks for more.

Modules, by concern: ``settings`` (how a token is chosen), ``sampling`` (the distribution it is
drawn from), ``records`` (what a step leaves), ``loop`` (the loop, where decoding starts and
ends, ``greedy_batch``), ``session`` (step, run, back), ``forcing`` (teacher forcing),
``batched`` (several sessions' steps as one forward pass, each with its own cache).
"""

from __future__ import annotations

from ..core.special import BOS_ID, EOS_ID, PAD_ID
from .batched import RowsToDecode, decode_together, step_together
from .forcing import ForcedPosition, TeacherForcing, teacher_force
from .loop import DecodingLoop, decoding_ends, greedy_batch, greedy_choice, source_ends_with_eos
from .records import Beam, StepRecord
from .sampling import (
    best_without_padding,
    filter_logits,
    never_generated,
    sampling_distribution,
    without_padding,
)
from .session import DecodingSession, generate
from .settings import (
    MAX_BEAM_WIDTH,
    MAX_NEW_TOKENS,
    MAX_TOP_K_SHOWN,
    MIN_TEMPERATURE,
    STRATEGIES,
    DecodingSettings,
    StopReason,
    Strategy,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MAX_BEAM_WIDTH",
    "MAX_NEW_TOKENS",
    "MAX_TOP_K_SHOWN",
    "MIN_TEMPERATURE",
    "PAD_ID",
    "STRATEGIES",
    "Beam",
    "DecodingLoop",
    "DecodingSession",
    "DecodingSettings",
    "ForcedPosition",
    "RowsToDecode",
    "StepRecord",
    "StopReason",
    "Strategy",
    "TeacherForcing",
    "best_without_padding",
    "decode_together",
    "decoding_ends",
    "filter_logits",
    "generate",
    "greedy_batch",
    "greedy_choice",
    "never_generated",
    "sampling_distribution",
    "source_ends_with_eos",
    "step_together",
    "teacher_force",
    "without_padding",
]
