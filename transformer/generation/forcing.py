"""Teacher forcing: feed a reference target and read what the model predicts at every position
(one forward pass, no decoding loop)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..core.model import Transformer
from ..core.special import BOS_ID
from ..core.util import eval_mode, is_int
from .loop import check_ids, check_model_and_source, decoder_prefix, labels
from .sampling import never_generated, without_padding
from .settings import MAX_TOP_K_SHOWN


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
    bos_id: int | None = BOS_ID,
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
        bos_id: first decoder input of an encoder-decoder model (a decoder-only model does
            not read it: ``None`` is fine there).
        top_k_shown: how many of the most probable tokens each position lists.

    Returns:
        A :class:`TeacherForcing` with one :class:`ForcedPosition` per target token.
    """
    source = check_model_and_source(model, source_ids)
    target = check_ids(target_ids, "target")
    if not target:
        raise ValueError("the target is empty: give the reference ids to compare against")
    if not is_int(top_k_shown) or not 1 <= top_k_shown <= MAX_TOP_K_SHOWN:
        raise ValueError(f"top_k_shown must be an integer in 1..{MAX_TOP_K_SHOWN}")
    config = model.config
    prefix = decoder_prefix(config, source, bos_id)
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
                top_labels=labels(decode_token, ids),
            )
        )
    return result
