"""`import transformer` stays cheap: the paper's core loads no tokenizer, checkpoint or loader code."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Imported by the non-core parts only: tokenizers, checkpoints, pretrained loading, the UI.
HEAVY = (
    "tokenizers",
    "safetensors",
    "transformers",
    "gradio",
    "plotly",
    "transformer.pretrained",
    "transformer.text",
    "transformer.checkpoint",
    "transformer.training",
    "transformer.analysis",
    "transformer.inspection",
)
CORE = ("config", "masks", "embeddings", "layers", "attention", "model", "trace")


def _loaded_after(statement: str) -> list[str]:
    """Which of HEAVY a fresh interpreter has in `sys.modules` after running `statement`."""
    code = f"{statement}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [name for name in out.stdout.strip().split(",") if name]


@pytest.mark.parametrize(
    "statement",
    ["import transformer", *(f"import transformer.{module}" for module in CORE)],
)
def test_core_imports_load_nothing_heavy(statement: str) -> None:
    assert _loaded_after(statement) == []


def test_core_names_are_usable_without_the_heavy_modules() -> None:
    statement = (
        "from transformer import ModelConfig, Transformer, causal_mask\nTransformer(ModelConfig())"
    )
    assert _loaded_after(statement) == []


def test_a_lazy_name_loads_its_module_on_first_use() -> None:
    assert "tokenizers" in _loaded_after("from transformer import Tokenizer")
    assert "transformer.pretrained" in _loaded_after(
        "import transformer; transformer.load_pretrained"
    )


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
