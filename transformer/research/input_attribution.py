"""Input attribution: how much each input token's embedding moves the next token's logit.

Gradient × input multiplies each embedding by the logit's gradient with respect to it (a
first-order estimate of what removing it would do). Integrated gradients (Sundararajan et al.
2017) averages the gradient along the straight path from a baseline to the real embeddings, so
that the attributions add up to the logit's difference from the baseline's ("completeness").
Both come from `captum`, the field's library, run on the model's token embeddings.

The baseline is the prompt with every token after the first replaced by the padding token,
the positions kept. Two other choices fail on real models, and the rule's points cannot tell:

- All-zero embeddings: a model that normalises the bare embeddings first (the Llama family's
  RMSNorm) divides by almost nothing near zero, so the logit jumps between the baseline and
  the first step of the path, which the rule's points cannot follow: the attributions miss
  the logit's change by far (SmolLM2, "The capital of France is" → " Paris": they sum to
  1,321 against a change of 17.4).
- Padding at the first position too: models make their first position an attention sink
  (SmolLM2's state there grows tens of times larger than the others'), and blending its token
  switches that on and off, so the logit swings by 12 between two of 400 points of the path.
  Kept, the first token gets no attribution: it is the same in both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..core.model import Transformer
from ..core.operations import Site
from ._common import as_ids, check_token, logits, source_for, stack_of

Method = Literal["gradient_x_input", "integrated_gradients"]
Baseline = Literal["padding", "zero"]


@dataclass(frozen=True)
class InputAttribution:
    """One attribution of a logit to the input tokens.

    Attributes:
        scores: ``(T,)`` each position's attribution (summed over the embedding's width).
        logit: the explained logit of the real input.
        baseline_logit: the logit of the baseline (integrated gradients only).
        delta: integrated gradients' completeness gap, ``scores.sum() − (logit −
            baseline_logit)`` as captum computes it (0 for an exact integral); ``None`` for
            gradient × input, which promises no sum.
    """

    scores: Tensor
    logit: float
    baseline_logit: float | None = None
    delta: float | None = None


def input_attribution(
    model: Transformer,
    ids: Tensor | Sequence[int],
    token: int,
    method: Method = "integrated_gradients",
    *,
    steps: int = 50,
    source: Tensor | Sequence[int] | None = None,
    baseline: Baseline = "padding",
) -> InputAttribution:
    """Attribute ``token``'s logit at the last position to each input token.

    The computation (``e`` the ``(T, d_model)`` token embeddings, ``f(e)`` the logit, positions
    added as the model adds them)::

        gradient × input:      score[t] = Σ_d  e[t, d] · ∂f/∂e[t, d]
        integrated gradients:  score[t] = Σ_d  e[t, d] · ∫₀¹ ∂f/∂e[t, d] (α · e) dα
                               Σ_t score[t] ≈ f(e) − f(0)     (completeness; delta the gap)

    the integral by captum's ``steps``-point Gauss–Legendre rule, from the baseline ``b`` (the
    module's note says why this one)::

        baseline "padding":  b = embedding of [ids[0], pad, pad, ..., pad]
        baseline "zero":     b = 0            (for comparison: wrong on RMSNorm-first models)

    Args:
        model: a model with a decoder (an encoder-decoder's source, given as ``source``, is
            held fixed: the attributions are the decoder's input tokens').
        ids: the prompt, ``(T,)`` or ``(1, T)``.
        token: the token whose logit at the last position is explained.
        method: ``"gradient_x_input"`` or ``"integrated_gradients"``.
        steps: the integral's points (integrated gradients).
        source: the encoder's input of an encoder-decoder model.
        baseline: ``"padding"`` (the first token kept) or ``"zero"``.

    Returns:
        An :class:`InputAttribution`: ``.scores`` ``(T,)`` and, for integrated gradients,
        ``.delta``, the completeness gap.
    """
    from captum.attr import InputXGradient, IntegratedGradients  # imported on first use

    if method not in ("gradient_x_input", "integrated_gradients"):
        raise ValueError(
            f'method must be "gradient_x_input" or "integrated_gradients", got {method!r}'
        )
    if baseline not in ("padding", "zero"):
        raise ValueError(f'baseline must be "padding" or "zero", got {baseline!r}')
    text, token = as_ids(ids), check_token(model, token)
    stack, src = stack_of(model), source_for(model, source)
    if model.tgt_embedding_norm is not None:
        raise ValueError("this model normalises its embeddings: input attribution reads them bare")
    assert model.tgt_embedding is not None  # the model has a decoder
    with torch.no_grad():
        embedded = model.tgt_embedding(text)  # (1, T, d_model), scaled where the model scales

    def logit_of(embeddings: Tensor) -> Tensor:  # (N, T, d_model) → (N,) logits of token
        swap = _with_embeddings(stack, embeddings, embedded)
        return logits(model, text.expand(embeddings.size(0), -1), src, swap)[:, -1, token]

    inputs = embedded.clone().requires_grad_(True)
    logit = float(logit_of(embedded).detach()[0])
    if method == "gradient_x_input":
        attributions = InputXGradient(logit_of).attribute(inputs)
        return InputAttribution(attributions.detach().sum(-1)[0], logit)
    if baseline == "zero":
        start = torch.zeros_like(embedded)
    else:
        if text.size(1) < 2:
            raise ValueError(
                "integrated gradients needs at least two tokens: the first is kept in the "
                "baseline, so one token alone has nothing to attribute"
            )
        padded = torch.full_like(text, model.config.pad_id)
        padded[:, 0] = text[:, 0]
        with torch.no_grad():
            start = model.tgt_embedding(padded)
    attributions, delta = IntegratedGradients(logit_of).attribute(
        inputs, baselines=start, n_steps=steps, return_convergence_delta=True
    )
    return InputAttribution(
        attributions.detach().sum(-1)[0],
        logit,
        float(logit_of(start).detach()[0]),
        float(delta[0]),
    )


def _with_embeddings(
    stack: str, embeddings: Tensor, real: Tensor
) -> Callable[[Site, Tensor], Tensor]:
    """The patch that gives the first layer ``embeddings`` ``(N, T, d_model)`` for the token
    vectors: its input minus the ``(1, T, d_model)`` real token vectors (leaving the positions
    the model added), plus the given ones."""

    def patch(site: Site, x: Tensor) -> Tensor:
        if site != (stack, 0, "residual"):
            return x
        return x - real + embeddings

    return patch
