"""What researchers do to a model, one method a module, each opening with its computation:
activation patching, head ablation, direct logit attribution, input attribution and the parts
of an attention score. Every method runs the model through its own operations
(:attr:`~transformer.core.operations.Operations.patch`): no hooks of a second kind."""

from __future__ import annotations

from .ablation import head_ablation
from .input_attribution import InputAttribution, input_attribution
from .logit_attribution import direct_logit_attribution
from .patching import activation_patching
from .score_parts import attention_score_parts

__all__ = [
    "InputAttribution",
    "activation_patching",
    "attention_score_parts",
    "direct_logit_attribution",
    "head_ablation",
    "input_attribution",
]
