"""Layer normalisation and the position-wise feed-forward network (paper section 3.3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension.

    ``y = γ · (x − mean) / sqrt(var + eps) + β`` with the *biased* variance (divide by n, not
    n − 1) and ``eps`` inside the square root, exactly as ``torch.nn.LayerNorm``.
    :meth:`explicit` computes it step by step; :meth:`forward` runs the same formula as one
    fused kernel (``F.layer_norm``), because six element-wise passes per norm cost real models
    (13 norms in MiniLM, 25 in GPT-2 small) a fifth of their time on a CPU.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # γ
        self.bias = nn.Parameter(torch.zeros(d_model))  # β

    def forward(self, x: Tensor, run: Pass | None = None) -> Tensor:
        """``(..., d_model)`` → ``(..., d_model)``: :meth:`normalise`, or the norm of ``run``'s
        operations where a pass swaps it (``run.ops.layer_norm``); ``run`` keeps ``x`` and the
        output where Inside a layer looks at this norm's layer."""
        return self.normalise(x) if run is None else run.normalise(self, x)

    def normalise(self, x: Tensor) -> Tensor:
        """``(..., d_model)`` → ``(..., d_model)``, fused (equal to :meth:`explicit`)."""
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)

    def explicit(self, x: Tensor) -> Tensor:
        """``(..., d_model)`` → ``(..., d_model)``, the formula written out step by step."""
        mean = x.mean(dim=-1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # biased variance
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class Pass(Protocol):
    """What a module's forward asks of the forward call it runs in (a
    :class:`~transformer.core.run.Run`, which these modules need not know)."""

    def normalise(self, norm: Any, x: Tensor) -> Tensor:
        """``norm`` of the ``(..., d)`` ``x`` as this call computes it (the paper's, or a
        what-if's), kept for Inside a layer where the call looks at the norm's layer."""
        ...

    def keep_for_inside(self, module: Any, **tensors: Tensor) -> None:
        """Keep copies of ``tensors`` by ``module`` where the call looks inside its layer."""
        ...


def keep_nothing(module: nn.Module, **tensors: Tensor) -> None:
    """What a module keeps for Inside a layer where it was called without a run: nothing."""


class Dropout(nn.Dropout):
    """``nn.Dropout`` (section 5.4: on each sub-layer's output and on the embedding sums) that
    returns its input ``(...)`` itself, without a module call, where it drops nothing
    (evaluation, or ``p = 0``), as ``nn.Dropout`` does there. A decoding step of SmolLM2
    passes 91 of them: a third of a millisecond a step on this project's 2-core CPU."""

    def __call__(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        return super().__call__(x)


def _gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


ACTIVATION_FUNCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": F.silu,
}
"""The feed-forward non-linearity by config name: ReLU (paper), GELU exact (erf; BERT), GELU
with the tanh approximation (GPT-2), SiLU/swish (Marian)."""


def _silu_(x: Tensor) -> Tensor:
    return F.silu(x, inplace=True)


_IN_PLACE: dict[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]] = {
    F.relu: F.relu_,
    F.silu: _silu_,
}


def activate_in_place(activation: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """``activation(x)``, written over ``x`` where torch has an in-place form of it (ReLU, SiLU;
    the same kernel, the same numbers), else into a new tensor. Only for a tensor no gradient
    and no other reader needs: ``x`` itself is lost."""
    return _IN_PLACE.get(activation, activation)(x)


class PositionwiseFeedForward(nn.Module):
    """``FFN(x) = max(0, x W1 + b1) W2 + b2``, applied to each position alone (equation 2).

    ``activation`` replaces the ``max(0, ·)`` (see :data:`ACTIVATION_FUNCTIONS`).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        if activation not in ACTIVATION_FUNCTIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATION_FUNCTIONS)}")
        self.activation = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: Tensor, run: Pass | None = None) -> Tensor:
        """``(B, T, d_model)`` → ``(B, T, d_model)``."""
        return self.linear2(self.dropout(self.units(x, run)))

    def units(self, x: Tensor, run: Pass | None = None) -> Tensor:
        """The hidden units after the activation, ``act(x W1 + b1)``: ``(B, T, d_model)`` →
        ``(B, T, d_ff)``. ``run`` keeps them before (``"hidden"``) and after (``"activated"``)
        the activation where Inside a layer looks at this layer."""
        keep_for_inside = keep_nothing if run is None else run.keep_for_inside
        hidden = self.linear1(x)  # (B, T, d_ff)
        activated = self.activation(hidden)
        keep_for_inside(self, hidden=hidden, activated=activated)
        return activated
