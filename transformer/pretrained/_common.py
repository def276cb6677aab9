"""What every family's loader shares: reading ``config.json``, the safetensors, the tokenizer."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import tokenizers
import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from ..core.config import ConfigError, ModelConfig
from ..text.tokenization import Tokenizer, TokenizerError
from .checkpoint import CheckpointError, unique_state_dict

MAX_PRETRAINED_BYTES = 4 * 1024**3
"""Largest ``model.safetensors`` read: 4 GiB (GPT-2 small is 0.55 GB, MiniLM 0.09 GB)."""

MAX_PARAMETERS = 1_600_000_000
"""Most parameters a ``config.json`` may describe (6.4 GB as float32; GPT-2 XL has 1.56·10⁹)."""

# A stack's layer index in a tensor name: "encoder.layer.3.", "h.3.", "decoder.layers.3.".
_LAYER_INDEX = re.compile(r"^(.*?(?:^|\.)(?:layer|layers|h|block|blocks))\.(\d+)\.")

HF_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
}
"""Hugging Face ``hidden_act`` / ``activation_function`` names → our ``ModelConfig.activation``."""


class PretrainedError(CheckpointError):
    """A pretrained model folder that cannot be loaded; the message says what to fix."""


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; :class:`PretrainedError` names the file if it is not one."""
    if not path.is_file():
        raise PretrainedError(f"{path.name} is missing from {path.parent}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PretrainedError(f"{path.name} is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise PretrainedError(f"{path.name} must hold a JSON object")
    return data


def activation(hf_name: Any, key: str) -> str:
    """Our activation name for a Hugging Face one, or an error naming the config key."""
    if hf_name not in HF_ACTIVATIONS:
        raise PretrainedError(
            f"config.json: {key}={hf_name!r} is not supported; supported: "
            f"{', '.join(sorted(HF_ACTIVATIONS))}."
        )
    return HF_ACTIVATIONS[hf_name]


def build_config(**fields: Any) -> ModelConfig:
    """A :class:`ModelConfig`, with configuration errors reported against config.json."""
    try:
        return ModelConfig(**fields)
    except (ConfigError, TypeError) as error:
        raise PretrainedError(f"config.json describes a model we cannot build: {error}") from error


def require(hf: dict[str, Any], key: str, family: str) -> Any:
    """``hf[key]``, or an error naming the missing key."""
    if key not in hf:
        raise PretrainedError(f"config.json of a {family} model has no {key!r}")
    return hf[key]


class TensorReader:
    """Reads named tensors from ``model.safetensors`` on demand and records which were missing.

    ``prefixes`` are tried in order before each name (``"bert."`` for ``BertForMaskedLM``,
    ``"transformer."`` for ``GPT2LMHeadModel``, ...); the first under which the file holds a
    probe name is used for every name.
    """

    def __init__(self, path: Path, prefixes: tuple[str, ...], probe: str) -> None:
        if not path.is_file():
            bin_file = path.with_name("pytorch_model.bin")
            hint = (
                " It has pytorch_model.bin, a pickle, which we never load: convert it to "
                "safetensors (for example with transformers: "
                "model.save_pretrained(folder, safe_serialization=True))."
                if bin_file.is_file()
                else ""
            )
            raise PretrainedError(
                f"model.safetensors is missing from {path.parent}; only safetensors weights are "
                f"read.{hint}"
            )
        if path.stat().st_size > MAX_PRETRAINED_BYTES:
            raise PretrainedError(
                f"model.safetensors is larger than {MAX_PRETRAINED_BYTES >> 30} GB"
            )
        try:
            self._file = safe_open(str(path), framework="pt")
            self.names = set(self._file.keys())
        except (SafetensorError, OSError, ValueError) as error:
            raise PretrainedError(
                f"model.safetensors is not a readable safetensors file: {error}"
            ) from error
        prefix = next((p for p in prefixes if p + probe in self.names), None)
        if prefix is None:
            raise PretrainedError(
                f"model.safetensors has no tensor {probe!r} (tried prefixes {list(prefixes)}): "
                "it does not hold the model config.json describes."
            )
        self.prefix: str = prefix
        self.missing: list[str] = []

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's shape, from the file's header (no tensor is read)."""
        try:
            return {name: tuple(self._file.get_slice(name).get_shape()) for name in self.names}
        except (SafetensorError, OSError, ValueError) as error:
            raise PretrainedError(f"model.safetensors has an unreadable header: {error}") from error

    def check_sizes(self, config: ModelConfig) -> None:
        """Check the sizes ``config.json`` gives against the file's header before anything is
        allocated: its layers, its vocabulary and its parameter count must be ones the file can
        hold, and the model at most :data:`MAX_PARAMETERS`. Raises :class:`PretrainedError`
        naming the mismatch (a config of 5·10⁶ tokens or 3·10⁶ layers would otherwise allocate
        gigabytes, or loop for minutes, only to report missing tensors)."""
        check_config_against_header(config, self.shapes())

    def has(self, name: str) -> bool:
        """Whether the file holds ``name`` (under the detected prefix)."""
        return self.prefix + name in self.names

    def get(self, name: str, *alternatives: str, absolute: bool = False) -> Tensor | None:
        """The float32 tensor ``name`` (or the first present alternative); ``None`` and recorded
        as missing if absent. ``absolute`` names ignore the prefix (``final_logits_bias``)."""
        for candidate in (name, *alternatives):
            full = candidate if absolute else self.prefix + candidate
            if full in self.names:
                tensor = self._file.get_tensor(full)
                return tensor.float() if tensor.is_floating_point() else tensor
        self.missing.append(name if absolute else self.prefix + name)
        return None

    def weight_and_bias(
        self, ours: str, theirs: str, old: tuple[str, str] | None = None
    ) -> dict[str, Tensor | None]:
        """``{ours}.weight`` and ``{ours}.bias`` → the file's ``{theirs}.weight`` and
        ``{theirs}.bias`` (a linear layer or a LayerNorm), or where those are absent their
        ``old`` names (BERT's ``("gamma", "beta")``); ``None`` where missing."""
        kinds = ("weight", "bias")
        return {
            f"{ours}.{kind}": self.get(f"{theirs}.{kind}", *([f"{theirs}.{alias}"] if old else []))
            for kind, alias in zip(kinds, old or kinds, strict=True)
        }

    def check_complete(self) -> None:
        """Raise naming every needed tensor the file lacks."""
        if self.missing:
            shown = ", ".join(self.missing[:8]) + (" …" if len(self.missing) > 8 else "")
            raise PretrainedError(
                f"model.safetensors lacks {len(self.missing)} tensor(s) the model needs: {shown}"
            )


def parameter_floor(config: ModelConfig) -> int:
    """A lower bound on the parameters of the model ``config`` describes: the larger
    vocabulary's embedding, and per layer the query and output projections and the
    feed-forward's two matrices (grouped keys and values, biases, norms and positions left
    out, so that every family's real count is at least this)."""
    d, d_ff = config.d_model, config.d_ff
    vocab = max(config.src_vocab_size if config.has_encoder else 0, config.output_vocab_size)
    encoder = config.n_encoder_layers if config.has_encoder else 0
    decoder = config.n_decoder_layers if config.has_decoder else 0
    cross = decoder if config.has_encoder and config.has_decoder else 0
    return vocab * d + (encoder + decoder) * (2 * d * d + 2 * d * d_ff) + cross * 2 * d * d


def check_config_against_header(config: ModelConfig, shapes: dict[str, tuple[int, ...]]) -> None:
    """Raise :class:`PretrainedError` where ``config`` (from ``config.json``) asks for more than
    the tensors ``shapes`` (name → shape, from a safetensors header) hold: more layers, a larger
    vocabulary, more parameters than the file has values, or more than :data:`MAX_PARAMETERS`.
    Only integer arithmetic on the two descriptions: nothing is allocated."""
    stacks: dict[str, set[int]] = {}
    for name in shapes:
        match = _LAYER_INDEX.match(name)
        if match:
            stacks.setdefault(match.group(1), set()).add(int(match.group(2)))
    layers = (config.n_encoder_layers if config.has_encoder else 0) + (
        config.n_decoder_layers if config.has_decoder else 0
    )
    held = sum(len(indices) for indices in stacks.values())
    if stacks and layers > held:
        raise PretrainedError(
            f"config.json describes {layers:,} layers but model.safetensors holds weights for "
            f"{held:,}: they do not belong together."
        )
    rows = max((shape[0] for shape in shapes.values() if len(shape) == 2), default=0)
    vocab = max(config.src_vocab_size, config.output_vocab_size)
    if vocab > rows:
        raise PretrainedError(
            f"config.json's vocab_size is {vocab:,} but the largest matrix in model.safetensors "
            f"has {rows:,} rows: they do not belong together."
        )
    floor = parameter_floor(config)
    if floor > MAX_PARAMETERS:
        raise PretrainedError(
            f"config.json describes a model of at least {floor:,} parameters; at most "
            f"{MAX_PARAMETERS:,} are loaded."
        )
    values = 0
    for shape in shapes.values():
        count = 1
        for size in shape:
            count *= size
        values += count
    if floor > values:
        raise PretrainedError(
            f"config.json describes a model of at least {floor:,} parameters but "
            f"model.safetensors holds {values:,} values (check d_model / hidden_size, "
            "intermediate_size and the layer counts)."
        )


def load_weights(model: torch.nn.Module, weights: dict[str, Tensor | None]) -> None:
    """Copy mapped ``weights`` (our names) into ``model``; shapes are checked by name, and
    every parameter must be covered (a tied one once)."""
    state = model.state_dict()
    unmapped = sorted(set(unique_state_dict(model)) - set(weights))
    if unmapped:
        raise PretrainedError(f"internal mapping error: nothing maps onto {unmapped[:5]}")
    with torch.no_grad():
        for name, tensor in weights.items():
            if tensor is None:
                continue  # reported by TensorReader.check_complete
            if name not in state:
                raise PretrainedError(f"internal mapping error: our model has no {name}")
            if tuple(tensor.shape) != tuple(state[name].shape):
                raise PretrainedError(
                    f"model.safetensors: the tensor for {name} has shape {tuple(tensor.shape)} "
                    f"but config.json implies {tuple(state[name].shape)}."
                )
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                raise PretrainedError(f"model.safetensors: the tensor for {name} has NaN or inf")
            state[name].copy_(tensor)


def load_tokenizer_json(folder: Path) -> Tokenizer | None:
    """``tokenizer.json`` of ``folder`` through our wrapper, or ``None`` if there is none."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        return Tokenizer.load(path)
    except TokenizerError as error:
        raise PretrainedError(f"tokenizer.json: {error}") from error


def wrap(backend: tokenizers.Tokenizer, what: str) -> Tokenizer:
    """Our wrapper over a tokenizer built from vocabulary files (round-tripped through JSON)."""
    try:
        return Tokenizer.from_json_str(backend.to_str())
    except TokenizerError as error:
        raise PretrainedError(f"{what}: {error}") from error
