"""tokenizer.json files written here with `tokenizers`' own JSON layout, for the tests of
untrusted tokenizers: every field the library writes, the model and the steps around it given."""

from __future__ import annotations

import json
from typing import Any


def tokenizer_json(
    model: dict[str, Any],
    normalizer: dict[str, Any] | None = None,
    pre_tokenizer: dict[str, Any] | None = None,
    **extra: Any,
) -> bytes:
    """A tokenizer.json of ``model`` (its ``"model"`` entry), with ``normalizer`` and
    ``pre_tokenizer`` where given and any other top-level entry in ``extra``."""
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": None,
        "model": model,
        **extra,
    }
    return json.dumps(spec).encode("utf-8")
