"""`import transformer` stays cheap: the paper's core loads no tokenizer, checkpoint or loader code."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Imported by the non-core parts only: tokenizers, checkpoints, pretrained loading, the UI.
HEAVY = (
    "tokenizers",
    "safetensors",
    "transformers",
    "gradio",
    "plotly",
    "transformer.pretrained",
    "transformer.text",
    "transformer.pretrained.checkpoint",
    "transformer.training",
    "transformer.lab.analysis",
    "transformer.lab.inspection",
)
# Every module of transformer/core/: the model a notebook builds without text or training.
CORE = tuple(
    sorted(
        path.stem
        for path in (ROOT / "transformer" / "core").glob("*.py")
        if path.stem != "__init__"
    )
)


def _loaded_after(statement: str) -> list[str]:
    """Which of HEAVY a fresh interpreter has in `sys.modules` after running `statement`."""
    code = f"{statement}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [name for name in out.stdout.strip().split(",") if name]


def test_the_core_loads_nothing_heavy_and_builds_a_model() -> None:
    statement = "\n".join(
        [
            "import transformer",
            *(f"import transformer.core.{module}" for module in CORE),
            "from transformer import ModelConfig, Transformer, causal_mask",
            "Transformer(ModelConfig())",
        ]
    )
    assert _loaded_after(statement) == []


def test_a_lazy_name_loads_its_module_on_first_use() -> None:
    statement = (
        "import sys, transformer\n"
        "assert 'tokenizers' not in sys.modules\n"
        "from transformer import Tokenizer\n"
        "transformer.load_pretrained"
    )
    loaded = _loaded_after(statement)
    assert "tokenizers" in loaded
    assert "transformer.pretrained" in loaded


def test_every_public_name_is_the_defining_modules_object() -> None:
    package = importlib.import_module("transformer")
    for name in package.__all__:
        value = getattr(package, name)
        if name in package._LAZY:
            assert value is getattr(
                importlib.import_module(package._LAZY[name], "transformer"), name
            )
    assert set(package._LAZY) <= set(package.__all__)
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="no_such_name"):
        package.no_such_name  # noqa: B018
