"""What a seed's mistake does to a model's output: the broken pass beside the correct one.

    >>> from transformer.lab.effects import mistake_effect
    >>> from transformer.lab.mistakes import SCORES_TIMES_D_HEAD
    >>> effect = mistake_effect(model, tokenizer, ["the cat sees a dog"], SCORES_TIMES_D_HEAD)
    >>> effect.largest_change, effect.predicted_before, effect.predicted_after

The mistakes themselves are in :mod:`transformer.lab.mistakes`; this module runs two passes
(:func:`~transformer.lab.inspection.analyse`) and compares them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..core.model import Transformer
from ..generation import best_without_padding, never_generated
from ..text.display import code_span, labels_of_pieces
from ..text.tokenization import Tokenizer
from .inspection import Analysis, analyse
from .interventions import Intervention
from .switch import Switch
from .switches import check_applies


@dataclass
class MistakeEffect:
    """What one mistake did to a model's output on the same input (teacher-forced: the broken
    pass reads the correct pass's decoder input, so positions line up).

    Attributes:
        mistake: the mistake's :class:`~transformer.lab.switch.Switch` record.
        correct, broken: the two analyses (traces and token pieces) for figures.
        largest_change: the largest ``|Δ logit|`` over every real position and class.
        sentence, position: where it is (0-based; the decoder input's position, or the
            source's for an encoder-only model).
        largest_hidden_change: the largest ``|Δ|`` of the final hidden states (the decoder's
            output, or the encoder's memory for an encoder-only model).
        tokens_before, tokens_after: per sentence, the argmax token piece at each real position.
        predicted_before, predicted_after: the same ids decoded to text, per sentence.
        changed: per sentence, whether any argmax changed.
    """

    mistake: Switch
    correct: Analysis
    broken: Analysis
    largest_change: float
    sentence: int
    position: int
    largest_hidden_change: float
    tokens_before: list[list[str]]
    tokens_after: list[list[str]]
    predicted_before: list[str]
    predicted_after: list[str]
    changed: list[bool]

    @property
    def any_changed(self) -> bool:
        """Whether the mistake changed any prediction of any sentence."""
        return any(self.changed)


def real_positions(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """``(B, T)`` bool: every position but the run of ``pad_id`` that right-pads each row
    (position 0 always counts: Marian and GPT-2 start their decoder input with the pad id)."""
    is_pad = tokens == pad_id
    trailing = is_pad.flip(1).cumprod(1).flip(1).bool()
    trailing[:, 0] = False
    return ~trailing


def _hidden(analysis: Analysis) -> torch.Tensor:
    trace = analysis.trace
    hidden = trace.decoder_output if trace.decoder_output is not None else trace.memory
    assert hidden is not None  # every pass ends in a decoder or an encoder output
    return hidden


def compare_passes(
    correct: Analysis, broken: Analysis, tokenizer: Tokenizer, mistake: Switch
) -> MistakeEffect:
    """The :class:`MistakeEffect` of two analyses of the same input and decoder input (the
    correct one and the one with ``mistake`` switched on)."""
    config = correct.trace.config
    stack = correct.trace.target if correct.trace.target is not None else correct.trace.source
    other = broken.trace.target if broken.trace.target is not None else broken.trace.source
    assert stack is not None and other is not None  # every pass reads a source or a target
    if not torch.equal(stack.tokens, other.tokens):
        raise ValueError("the two passes read different inputs: pass the same decoder input")
    logits_before, logits_after = correct.trace.logits, broken.trace.logits  # each read once
    real = real_positions(stack.tokens, config.pad_id).to(logits_before.device)  # (B, T)
    delta = (logits_after - logits_before).abs().amax(-1)  # (B, T)
    delta = torch.nan_to_num(delta, nan=float("inf"))  # a NaN is the largest change there is
    delta = delta.masked_fill(~real, -1.0)
    flat = int(delta.argmax())
    sentence, position = divmod(flat, delta.size(1))
    hidden = (_hidden(broken) - _hidden(correct)).abs().amax(-1)
    hidden = torch.nan_to_num(hidden, nan=float("inf")).masked_fill(~real, 0.0)
    pad = never_generated(config)
    best_before = best_without_padding(logits_before, pad).cpu()
    best_after = best_without_padding(logits_after, pad).cpu()
    real = real.cpu()
    before = [best_before[b][real[b]].tolist() for b in range(real.size(0))]
    after = [best_after[b][real[b]].tolist() for b in range(real.size(0))]

    def pieces(rows: list[list[int]]) -> list[list[str]]:
        return [[tokenizer.id_to_token(i) or "?" for i in row] for row in rows]

    return MistakeEffect(
        mistake=mistake,
        correct=correct,
        broken=broken,
        largest_change=float(delta.max()),
        sentence=sentence,
        position=position,
        largest_hidden_change=float(hidden.max()),
        tokens_before=pieces(before),
        tokens_after=pieces(after),
        predicted_before=[tokenizer.decode(row) for row in before],
        predicted_after=[tokenizer.decode(row) for row in after],
        changed=[b != a for b, a in zip(before, after, strict=True)],
    )


def mistake_effect(
    model: Transformer, tokenizer: Tokenizer, sentences: Sequence[str], mistake: Switch
) -> MistakeEffect:
    """Run ``sentences`` through ``model`` correctly and with ``mistake`` (its switch record)
    on, on the same decoder input (the correct pass's greedy output, teacher-forced), and
    compare.

    Raises ``ValueError`` for a mistake that does not apply to this model, or (cross-attention
    from the memory) source and target lengths that cannot work.
    """

    check_applies(mistake, model.config)
    correct = analyse(model, tokenizer, sentences)
    # The broken pass reads the correct pass's decoder input (an encoder-decoder model's).
    target = correct.trace.target
    has_both = model.config.has_encoder and model.config.has_decoder
    targets = target.tokens if has_both and target is not None else None
    broken = analyse(
        model, tokenizer, sentences, Intervention(mistakes=frozenset({mistake})), targets
    )
    return compare_passes(correct, broken, tokenizer, mistake)


def _seeds(seed: str) -> str:
    """``"004"`` → "seed 004"; ``"003, 004"`` → "seeds 003 and 004"."""
    numbers = [n.strip() for n in seed.split(",")]
    if len(numbers) == 1:
        return f"seed {numbers[0]}"
    return f"seeds {', '.join(numbers[:-1])} and {numbers[-1]}"


def _changed_count(effect: MistakeEffect) -> str:
    n, total = sum(effect.changed), len(effect.changed)
    if total == 1:
        return "the prediction changed" if n else "no prediction changed"
    return f"predictions changed in {n} of {total} sentences"


def mistake_account(
    mistake: Switch,
    effect: MistakeEffect | None,
    row: int,
    *,
    error: str | None = None,
    also: str = "",
    tokenizer: Tokenizer | None = None,
) -> str:
    """Markdown: where ``mistake`` came from, why it is wrong, and what it did here (``effect``:
    the largest logit change, where, and sentence ``row``'s predictions before → after), or,
    where its broken pass could not run, the ``error`` that says why. ``also`` names other
    what-ifs that were on in the same pass; with ``tokenizer`` the pieces are written as every
    view writes them (␣cat, 美[1/3])."""
    lines = [
        f"**Mistake of {_seeds(mistake.seed)}: {mistake.label}.** {mistake.origin}",
        f"*Why it is wrong:* {mistake.explanation}",
    ]
    if effect is None:
        lines.append(f"**What it does here:** {error}")
        return "\n\n".join(lines)
    with_also = f" (with {also})" if also else ""
    # The sentence whose output changed most, as its figures write it: an encoder-only model's
    # source, else the decoder's input.
    encoder_only = effect.correct.trace.config.architecture == "encoder-only"
    read = effect.correct.source_pieces if encoder_only else effect.correct.target_pieces
    pieces = read[effect.sentence]
    if tokenizer is not None:
        pieces = labels_of_pieces(tokenizer, pieces)
    if encoder_only:
        lines.append(
            f"**What it did here{with_also}:** largest change of any encoder output "
            f"{effect.largest_hidden_change:.3f}; of the tied read-out's logits "
            f"{effect.largest_change:.3f} (sentence {effect.sentence + 1}, token "
            f"{effect.position}: {code_span(pieces[effect.position])})."
        )
        before, after = effect.tokens_before[row], effect.tokens_after[row]
        n = sum(b != a for b, a in zip(before, after, strict=True))
        lines.append(
            f"Read out through the tied embedding, {n} of {len(before)} output vectors of "
            f"sentence {row + 1} now read as another token."
        )
    else:
        lines.append(
            f"**What it did here{with_also}:** largest change of any output logit "
            f"{effect.largest_change:.3f} (sentence {effect.sentence + 1}, decoder position "
            f"{effect.position}, input {code_span(pieces[effect.position])}); "
            f"{_changed_count(effect)}."
        )
        said, says = effect.predicted_before[row], effect.predicted_after[row]
        arrow = "→" if effect.changed[row] else "→ (unchanged)"
        lines.append(
            f"Next-token predictions of sentence {row + 1}: {code_span(said)} {arrow} "
            f"{code_span(says)}"
        )
    if effect.broken.trace.logits.isnan().any():
        lines.append("⚠️ The broken pass produced NaN somewhere.")
    return "\n\n".join(lines)


__all__ = ["MistakeEffect", "compare_passes", "mistake_account", "mistake_effect", "real_positions"]
