"""What every family's loader shares: reading ``config.json``, the safetensors, the tokenizer."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from ..core.config import ConfigError, ModelConfig
from ..core.device import format_bytes, free_memory
from ..text.tokenization import Tokenizer, TokenizerError
from .checkpoint import CheckpointError, unique_state_dict

MAX_PARAMETERS = 1_000_000_000_000
"""Most parameters a ``config.json`` may describe: 10¹², beyond any open model. The real bound
is the memory of the device the model goes to, checked before anything is allocated
(:func:`check_fits`); this one stops a config whose sizes are a mistake before any arithmetic
over them."""

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


SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
"""The safetensors header's dtype names we read, as torch dtypes."""

_MAX_HEADER_BYTES = 100 * 1024**2  # safetensors' own limit on a header


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as a safetensors header describes it: its ``shard`` (file), ``dtype`` and
    ``shape``; nothing of its values."""

    shard: Path
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        """How many values the tensor holds."""
        count = 1
        for size in self.shape:
            count *= size
        return count


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Every tensor of the safetensors file ``path`` from its header alone (8 bytes of length,
    then JSON): read with ``open``, not mapped, so that a sharded folder's size is known before
    any shard's tensors are. Raises :class:`PretrainedError` naming the file if the header is
    not one, or describes more bytes than the file has."""
    try:
        with path.open("rb") as file:
            length = int.from_bytes(file.read(8), "little")
            if not 0 < length <= _MAX_HEADER_BYTES:
                raise ValueError(f"a header of {length} bytes")
            header = json.loads(file.read(length))
        size = path.stat().st_size - 8 - length
        entries: dict[str, TensorEntry] = {}
        end = 0
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            if meta["dtype"] not in SAFETENSORS_DTYPES:
                raise ValueError(f"{name} has dtype {meta['dtype']}, which is not read here")
            entries[name] = TensorEntry(
                path, SAFETENSORS_DTYPES[meta["dtype"]], tuple(int(n) for n in meta["shape"])
            )
            end = max(end, int(meta["data_offsets"][1]))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
        raise PretrainedError(f"{path.name} is not a readable safetensors file: {error}") from error
    if end > size:
        raise PretrainedError(
            f"{path.name} is truncated: its header describes {end:,} bytes of tensors, the file "
            f"holds {size:,}"
        )
    return entries


def read_index(index: Path) -> dict[str, TensorEntry]:
    """Every tensor of a sharded checkpoint, from ``model.safetensors.index.json`` (its
    ``weight_map``: tensor name → shard file) and the shards' headers. Raises
    :class:`PretrainedError` naming a missing shard, or a tensor the index places in a shard
    that lacks it."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise PretrainedError(f"{index.name} has no weight_map of tensor names to shard files")
    entries: dict[str, TensorEntry] = {}
    for shard_name in sorted(set(weight_map.values())):
        shard = index.parent / str(shard_name)
        if Path(str(shard_name)).name != shard_name or not shard.is_file():
            raise PretrainedError(
                f"{index.name} names the shard {shard_name!r}, which is not in {index.parent}"
            )
        entries.update(read_header(shard))
    absent = [
        name
        for name, shard_name in weight_map.items()
        if name not in entries or entries[name].shard.name != shard_name
    ]
    if absent:
        raise PretrainedError(
            f"{index.name} places {len(absent)} tensor(s) in shards that lack them: "
            f"{', '.join(absent[:5])}"
        )
    return entries


class TensorReader:
    """Reads named tensors from ``model.safetensors`` (or the shards that
    ``model.safetensors.index.json`` beside it lists) on demand, and records which were missing.

    ``prefixes`` are tried in order before each name (``"bert."`` for ``BertForMaskedLM``,
    ``"transformer."`` for ``GPT2LMHeadModel``, ...); the first under which the file holds a
    probe name is used for every name.

    Tensors are read one at a time, cast to ``dtype`` (``None``: kept as stored) and put on
    ``device``: a shard is mapped only while its tensors are read and closed when the next one
    is opened, so that reading never holds more than the tensors already handed out and one
    shard's mapping (:meth:`close` lets the last one go).
    """

    def __init__(
        self,
        path: Path,
        prefixes: tuple[str, ...],
        probe: str,
        *,
        dtype: torch.dtype | None = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        index = path.with_name(f"{path.name}.index.json")
        if path.is_file():
            self.entries = read_header(path)
        elif index.is_file():
            self.entries = read_index(index)
        else:
            bin_file = path.with_name("pytorch_model.bin")
            hint = (
                " It has pytorch_model.bin, a pickle, which we never load: convert it to "
                "safetensors (for example with transformers: "
                "model.save_pretrained(folder, safe_serialization=True))."
                if bin_file.is_file() or bin_file.with_name(f"{bin_file.name}.index.json").is_file()
                else ""
            )
            raise PretrainedError(
                f"{path.name} (or {index.name} with its shards) is missing from {path.parent}; "
                f"only safetensors weights are read.{hint}"
            )
        self.names = set(self.entries)
        self.dtype = dtype
        self.device = torch.device(device)
        self._open: tuple[Path, Any] | None = None
        prefix = next((p for p in prefixes if p + probe in self.names), None)
        if prefix is None:
            raise PretrainedError(
                f"{path.name} has no tensor {probe!r} (tried prefixes {list(prefixes)}): "
                "it does not hold the model config.json describes."
            )
        self.prefix: str = prefix
        self.missing: list[str] = []

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's shape, from the headers (no tensor is read)."""
        return {name: entry.shape for name, entry in self.entries.items()}

    def stored_dtype(self) -> torch.dtype:
        """The floating dtype most of the checkpoint's bytes are stored in (float32 if it holds
        no floating tensor)."""
        counts: dict[torch.dtype, int] = {}
        for entry in self.entries.values():
            if entry.dtype.is_floating_point:
                size = entry.numel * entry.dtype.itemsize
                counts[entry.dtype] = counts.get(entry.dtype, 0) + size
        return max(counts, key=lambda dtype: counts[dtype]) if counts else torch.float32

    def nbytes(self, dtype: torch.dtype | None = None) -> int:
        """Bytes the checkpoint's tensors take once read with floating ones as ``dtype``
        (``None``: as stored); integer tensors keep their own size."""
        total = 0
        for entry in self.entries.values():
            kept = dtype if dtype is not None and entry.dtype.is_floating_point else entry.dtype
            total += entry.numel * kept.itemsize
        return total

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

    def _handle(self, shard: Path) -> Any:
        """The open shard ``shard``, closing the one open before (one mapping at a time)."""
        if self._open is not None and self._open[0] == shard:
            return self._open[1]
        self.close()
        device = self.device
        if device.type == "cuda" and device.index is None:  # safetensors wants the GPU's index
            device = torch.device("cuda", torch.cuda.current_device())
        try:
            handle = safe_open(str(shard), framework="pt", device=str(device))
            handle.__enter__()
        except (SafetensorError, OSError, ValueError) as error:
            raise PretrainedError(
                f"{shard.name} is not a readable safetensors file: {error}"
            ) from error
        self._open = (shard, handle)
        return handle

    def close(self) -> None:
        """Let the open shard go (its mapping and file handle)."""
        if self._open is not None:
            self._open[1].__exit__(None, None, None)
            self._open = None

    def read(self, full_name: str) -> Tensor:
        """The tensor ``full_name`` (as the file names it), floating ones cast to
        :attr:`dtype`, on :attr:`device`."""
        entry = self.entries[full_name]
        try:
            tensor = self._handle(entry.shard).get_tensor(full_name)
        except (SafetensorError, OSError, ValueError) as error:
            raise PretrainedError(
                f"{entry.shard.name}: {full_name} is unreadable: {error}"
            ) from error
        if self.dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(self.dtype)
        return tensor

    def get(self, name: str, *alternatives: str, absolute: bool = False) -> Tensor | None:
        """The tensor ``name`` (or the first present alternative), floating ones as
        :attr:`dtype` (float32 unless set); ``None`` and recorded as missing if absent.
        ``absolute`` names ignore the prefix (``final_logits_bias``)."""
        for candidate in (name, *alternatives):
            full = candidate if absolute else self.prefix + candidate
            if full in self.names:
                return self.read(full)
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


def fits(needed: int, device: torch.device | str) -> bool:
    """Whether ``needed`` bytes fit in the free memory of ``device`` (``True`` where that
    cannot be told)."""
    free = free_memory(device)
    return free is None or needed <= free


def check_fits(needed: int, device: torch.device | str, what: str) -> None:
    """Raise :class:`PretrainedError` if ``needed`` bytes (``what``: the model and its dtype,
    for the message) do not fit in the free memory of ``device`` (see
    :func:`~transformer.core.device.free_memory`), saying how much is needed and what is free. Run
    on the headers' sizes, before anything is allocated; a device whose free memory cannot be
    told is not checked."""
    free = free_memory(device)
    if free is None or needed <= free:
        return
    place = "RAM" if torch.device(device).type == "cpu" else str(device)
    raise PretrainedError(
        f"{what} needs {format_bytes(needed)}, but {place} has {format_bytes(free)} free. "
        "Keep it in less memory (--dtype bfloat16 halves float32), spread it over the GPUs and "
        "the CPU (--device auto, with accelerate installed), or open a smaller model."
    )


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Build modules whose parameters have no storage (the meta device), to be assigned the
    checkpoint's tensors: nothing is initialised at random, nothing copied, so that a model
    never exists twice in memory. Buffers (sinusoidal and rotary tables, computed, not read)
    are built as usual. Local to the building thread's modules only by convention: build
    nothing else inside it."""
    register = torch.nn.Module.register_parameter

    def on_meta(self: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        if param is not None and not param.is_meta:
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(self, name, param)

    torch.nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def check_shapes(
    weights: Mapping[str, Tensor | None],
    shapes: Mapping[str, tuple[int, ...]],
    error: type[PretrainedError],
    unknown: str,
    wrong: str,
) -> None:
    """Raise ``error`` at the first of ``weights`` (our names; ``None``: missing, not checked)
    that ``shapes`` does not name, saying ``unknown``, or whose shape is not the one there,
    saying ``wrong``: both formatted with the ``name``, and ``wrong`` with the tensor's
    ``shape`` and the ``expected`` one."""
    for name, tensor in weights.items():
        if tensor is None:
            continue
        if name not in shapes:
            raise error(unknown.format(name=name))
        if tuple(tensor.shape) != shapes[name]:
            raise error(wrong.format(name=name, shape=tuple(tensor.shape), expected=shapes[name]))


def assign_weights(
    model: torch.nn.Module,
    weights: dict[str, Tensor | None],
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
) -> None:
    """Make mapped ``weights`` (our names; a tied matrix once) ``model``'s parameters, floating
    ones as ``dtype``, without copying them (``load_state_dict(assign=True)`` over a model
    built by :func:`parameters_on_meta`); parameters that share one matrix (tied embeddings)
    share the assigned one again; buffers (computed tables) move to ``device``, floating ones
    cast to ``dtype``. Shapes are checked
    by name, every parameter must be covered and every value finite."""
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters(remove_duplicate=False)}
    unmapped = sorted(set(unique_state_dict(model)) - set(weights))
    if unmapped:
        raise PretrainedError(f"internal mapping error: nothing maps onto {unmapped[:5]}")
    # Who shares a parameter with whom (tied embeddings), by the object they share now.
    owners: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(param), []).append(name)
    check_shapes(
        weights,
        shapes,
        PretrainedError,
        "internal mapping error: our model has no {name}",
        "model.safetensors: the tensor for {name} has shape {shape} but config.json implies "
        "{expected}.",
    )
    assigned: dict[str, Tensor] = {}
    for name, tensor in weights.items():
        if tensor is None:
            continue  # reported by TensorReader.check_complete
        # Read onto the device already, in its dtype; a tensor a family computes (Marian's
        # zero logits bias where the file has none) joins it here.
        tensor = tensor.to(device, dtype if tensor.is_floating_point() else tensor.dtype)
        if tensor.is_floating_point() and not all_finite(tensor):
            raise PretrainedError(f"model.safetensors: the tensor for {name} has NaN or inf")
        assigned[name] = tensor
    model.load_state_dict(assigned, strict=False, assign=True)
    for names in owners.values():
        source = next((n for n in names if n in assigned), None)
        for name in names:
            if source is not None and name != source:
                module_name, _, attribute = name.rpartition(".")
                shared = model.get_parameter(source)
                setattr(model.get_submodule(module_name), attribute, shared)
    for module in model.modules():
        for name, buffer in list(module.named_buffers(recurse=False)):
            if buffer is None:
                continue
            kept = dtype if buffer.is_floating_point() else buffer.dtype
            persistent = name not in module._non_persistent_buffers_set
            module.register_buffer(name, buffer.to(device, kept), persistent=persistent)
    left = [name for name, param in model.named_parameters() if param.is_meta]
    if left:
        raise PretrainedError(f"internal mapping error: nothing was loaded into {left[:5]}")


def all_finite(tensor: Tensor) -> bool:
    """Whether every value of a float tensor is finite: its float64 sum is finite exactly then
    (NaN and ±inf propagate; float32 values cannot overflow it), read once by numpy on the CPU
    (a tenth of ``torch.isfinite(t).all()``'s time on 2 cores: no bool copy, no thread pool)."""
    if tensor.device.type == "cpu" and tensor.dtype in (torch.float32, torch.float64):
        return bool(np.isfinite(tensor.detach().numpy().sum(dtype=np.float64)))
    return bool(torch.isfinite(tensor).all())


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
