"""Direct logit attribution: the chosen token's logit as the sum of what each part of the model
wrote into the residual stream.

In a pre-norm model the stream the final norm reads at the last position is a sum: the
embedding, plus every attention layer's output, plus every feed-forward's output; an attention
output is itself a sum over heads (each head's values times its slice of W_O) plus W_O's bias.
The final norm is not linear, but with its divisor frozen at the value of the real pass it is,
so each part's share of the logit can be read on its own, and the shares add up to the logit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..core.layers import LayerNorm
from ..core.model import Transformer
from ..core.modern import RMSNorm
from ..core.stacks import Decoder, DecoderLayer
from ._common import as_ids, check_token, recorded, source_for, stack_of


def direct_logit_attribution(
    model: Transformer,
    ids: Tensor | Sequence[int],
    token: int,
    *,
    source: Tensor | Sequence[int] | None = None,
) -> dict[str, float]:
    """What each part of the model contributes to ``token``'s logit at the last position.

    The computation (``x`` the residual stream the final norm reads at the last position, a sum
    of parts ``x = Σ c``; ``u`` the token's row of the output matrix)::

        scale(c) = γ · (c − mean(c)) / σ(x)        # LayerNorm, σ(x) frozen at the real pass
                 = w · c / rms(x)                  # RMSNorm, rms(x) frozen likewise
        part(c)  = scale(c) · u
        logit    = Σ part(c) + β · u + b[token]    # the norm's and the output's biases

    The parts, in the order the stream receives them: ``"embedding"`` (token + position, what
    the first layer reads), for each layer ``l`` each self-attention head ``"L{l}H{h}"`` (its
    weighted values times its slice of W_O), on an encoder-decoder model each cross-attention
    head ``"L{l} cross H{h}"``, and the feed-forward ``"L{l} MLP"``; then ``"attention
    biases"`` (every W_O bias), ``"final norm bias"`` (β · u) and ``"output bias"`` (the
    output projection's bias): each only where the model has it.

    The divisor (σ or rms) is the real pass's: freezing it is what makes the norm linear, so
    that the parts sum to the logit; each part is not normalised on its own.

    Args:
        model: a pre-norm model with a decoder (GPT-2, the Llama family; an encoder-decoder
            with ``source``). A post-norm model (the 2017 paper's) normalises the stream after
            every sub-layer, so it is no sum of parts: ``ValueError``.
        ids: the prompt, ``(T,)`` or ``(1, T)``.
        token: the token whose logit at the last position is explained.
        source: the encoder's input of an encoder-decoder model.

    Returns:
        ``{part: share of the logit}``, in the order above; the values sum to the logit (before
        a final soft cap, on the one family that caps its logits).
    """
    config = model.config
    if config.norm != "pre" or config.post_sublayer_norm:
        raise ValueError(
            "direct logit attribution reads a residual stream that is a sum of its parts: "
            "only pre-norm models without norms on the sub-layers' outputs have one"
        )
    text, token = as_ids(ids), check_token(model, token)
    stack, src = stack_of(model), source_for(model, source)
    decoder = model.decoder
    assert isinstance(decoder, Decoder) and decoder.final_norm is not None  # pre-norm
    with torch.inference_mode():
        _, kept = recorded(model, text, ["residual", "heads", "cross heads", "mlp"], src)
        final = kept[(stack, len(decoder.layers), "residual")][0, -1]  # (d_model,)
        u = model.generator.proj.weight[token]  # (d_model,)
        read = frozen_norm(decoder.final_norm, final)
        parts = {"embedding": kept[(stack, 0, "residual")][0, -1]}
        biases = torch.zeros_like(final)
        for i, module in enumerate(decoder.layers):
            layer = module
            assert isinstance(layer, DecoderLayer)
            attentions = [(f"L{i}H", layer.self_attention, "heads")]
            if layer.cross_attention is not None:
                attentions.append((f"L{i} cross H", layer.cross_attention, "cross heads"))
            for label, attention, what in attentions:
                z = kept[(stack, i, what)][0, :, -1]  # (H, d_head): each head at the last position
                w_o = attention.w_o.weight.view(-1, attention.n_heads, attention.d_head)
                for h in range(attention.n_heads):
                    parts[f"{label}{h}"] = w_o[:, h] @ z[h]  # (d_model,)
                if attention.w_o.bias is not None:
                    biases = biases + attention.w_o.bias
            parts[f"L{i} MLP"] = kept[(stack, i, "mlp")][0, -1]
        shares = {name: float(read(c) @ u) for name, c in parts.items()}
        if bool(biases.any()):
            shares["attention biases"] = float(read(biases) @ u)
        if isinstance(decoder.final_norm, LayerNorm):
            shares["final norm bias"] = float(decoder.final_norm.bias @ u)
        if model.generator.proj.bias is not None:
            shares["output bias"] = float(model.generator.proj.bias[token])
    return shares


def frozen_norm(norm: LayerNorm | RMSNorm, x: Tensor) -> Callable[[Tensor], Tensor]:
    """The final norm as a linear map of a part ``c`` of ``x`` (``(d_model,)``), its divisor
    taken from ``x`` itself: LayerNorm ``γ · (c − mean(c)) / σ(x)`` (its β left out: a part of
    its own), RMSNorm ``w · c / rms(x)``."""
    x = x.float()
    if isinstance(norm, LayerNorm):
        sigma = torch.sqrt(x.var(unbiased=False) + norm.eps)
        return lambda c: norm.weight * (c - c.mean()) / sigma
    rms = torch.sqrt(x.pow(2).mean() + norm.eps)
    gain = norm.offset + norm.weight
    return lambda c: gain * c / rms
