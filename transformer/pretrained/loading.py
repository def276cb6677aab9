"""``load_pretrained``: a Hugging Face model folder (or a hub id in the local cache) → Checkpoint."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..core.config import ModelConfig
from ..core.device import pick_device, resolve_dtype
from ..core.model import Transformer
from ..core.rotary import RotaryEmbedding, rotary_cos_sin
from . import bert, gemma, gpt2, gpt_neox, llama, marian, mistral, olmo2, phi3, qwen3
from ._common import (
    PretrainedError,
    TensorReader,
    all_finite,
    assign_weights,
    check_fits,
    fits,
    parameters_on_meta,
    read_json,
)
from .checkpoint import Checkpoint

FAMILIES: dict[str, ModuleType] = {
    "bert": bert,
    "gpt2": gpt2,
    "marian": marian,
    "llama": llama,
    "qwen3": qwen3,
    "mistral": mistral,
    "olmo2": olmo2,
    "gpt_neox": gpt_neox,
    "phi3": phi3,
    "gemma": gemma,
}
"""Supported families by name; each module maps one ``model_type``'s config, weights, tokenizer."""


def family_summary(family: str | None) -> str | None:
    """What a family's module says of it in one line (``"Qwen3 (QK-norm): continues the
    prompt"``), or None for a model of no family (the bundled ones, a model trained here)."""
    module = FAMILIES.get(family or "")
    return None if module is None else str(module.SUMMARY)


SUPPORTED = (
    "BERT (model_type 'bert', MiniLM included), GPT-2 ('gpt2'), Marian ('marian'), the Llama "
    "family ('llama', 'qwen2'; or a Llama .gguf file), Qwen3 ('qwen3'), Mistral ('mistral'), "
    "OLMo 2 ('olmo2'), GPT-NeoX and Pythia ('gpt_neox'), Phi-3 and Phi-4-mini ('phi3') and "
    "Gemma ('gemma', 'gemma2', 'gemma3_text')"
)

HUB_FILES = [
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "source.spm",
    "target.spm",
]
"""The files fetched for a hub id: never ``*.bin`` (pickles) or other frameworks' weights."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def family_of(hf_config: dict) -> str:
    """The family name for a ``config.json`` dict, or an error naming the supported ones."""
    model_type = hf_config.get("model_type")
    for name, module in FAMILIES.items():
        if model_type in module.MODEL_TYPES:
            return name
    raise PretrainedError(
        f"config.json has model_type={model_type!r}; supported families: {SUPPORTED}."
    )


def resolve(path_or_id: str | Path, allow_download: bool = False) -> Path:
    """The local folder for a path or a Hugging Face hub id.

    A hub id (``"gpt2"``, ``"Helsinki-NLP/opus-mt-en-de"``) is looked up in the local Hugging
    Face cache only, unless ``allow_download`` (then the files in :data:`HUB_FILES` are fetched).
    """
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    text = str(path_or_id)
    if path.exists():
        raise PretrainedError(f"{text} is a file; give the model's folder")
    if not _HUB_ID.match(text) or text.startswith((".", "/")):
        raise PretrainedError(f"model folder {text} does not exist")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as error:  # pragma: no cover - installed with gradio
        raise PretrainedError(
            f"{text} is not a folder, and huggingface_hub (needed to find hub ids) is not "
            "installed: pip install huggingface_hub, or give a folder path."
        ) from error
    try:
        folder = snapshot_download(
            text, allow_patterns=HUB_FILES, local_files_only=not allow_download
        )
    except LocalEntryNotFoundError as error:
        raise PretrainedError(
            f"{text} is neither a folder nor in the local Hugging Face cache. Download it "
            f"once (allow_download=True, or `hf download {text}`), or give a folder path."
        ) from error
    except Exception as error:  # unknown repository, no network, ...
        raise PretrainedError(
            f"{text} could not be found on the Hugging Face hub: {error}"
        ) from error
    return Path(folder)


def load_pretrained(
    path_or_id: str | Path,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = "auto",
    allow_download: bool = False,
    max_memory: dict[int | str, int | str] | None = None,
) -> Checkpoint:
    """Load a Hugging Face model folder onto our :class:`Transformer`.

    Args:
        path_or_id: a folder holding ``config.json``, the weights (``model.safetensors``, or
            ``model.safetensors.index.json`` and the shards it lists) and tokenizer files
            (``tokenizer.json``; or ``vocab.txt`` for BERT, ``vocab.json`` + ``merges.txt`` for
            GPT-2, ``source.spm`` + ``vocab.json`` for Marian; ``tokenizer.json`` for Llama and
            Qwen2), a hub id found in the local Hugging Face cache, or the path of a Llama
            ``.gguf`` file (weights dequantized to float32, tokenizer built from the file).
        device: where the model goes (default CPU). ``"auto"``: the first GPU if the model fits
            it, else spread over the GPUs and then the CPU by ``accelerate``
            (:mod:`.dispatch`); without CUDA, Apple's MPS or the CPU.
        dtype: ``"auto"`` (float32 on a CPU, the checkpoint's own dtype elsewhere),
            ``"float32"``, ``"bfloat16"``, ``"float16"`` or a ``torch.dtype``: what the weights
            are kept in (the trace's records are float32 whatever it is).
        allow_download: fetch a hub id that is not cached (off by default: nothing is
            downloaded unless asked).
        max_memory: with ``device="auto"``, the most each device may hold (``{0: "20GiB",
            "cpu": "60GiB"}``, as ``accelerate`` takes it); by default what each has free.

    Returns:
        A :class:`Checkpoint` in eval mode; ``info`` holds ``family``, ``model_type``,
        ``source`` (what was asked for), ``architectures``, ``dtype`` (its name) and, when
        spread, ``device_map``. Raises :class:`PretrainedError` (a ``CheckpointError``) naming
        the file and the problem, and before anything is allocated when the model is larger
        than the free memory of the device it goes to.
    """
    if llama.is_gguf_path(path_or_id):
        checkpoint = load_gguf(path_or_id, device=None if device == "auto" else device)
        try:  # dequantized to float32; narrowed only when asked (its blocks hold no bfloat16)
            kept = resolve_dtype(dtype, "cpu", torch.float32)
        except ValueError as error:
            raise PretrainedError(str(error)) from error
        checkpoint.model.to(kept)
        checkpoint.info["dtype"] = str(kept).removeprefix("torch.")
        return checkpoint
    folder = resolve(path_or_id, allow_download)
    hf = read_json(folder / "config.json")
    family = family_of(hf)
    module = FAMILIES[family]
    config = module.config_from_hf(hf)
    # The weights' headers (names and shapes, no tensor) are checked against config.json, and
    # the model's size against the device's free memory, before anything is allocated or
    # looped over by the config's sizes.
    reader = TensorReader(folder / "model.safetensors", module.PREFIXES, module.PROBE)
    reader.check_sizes(config)
    placement = place(reader, device, dtype, max_memory)
    tokenizer = module.load_tokenizer(folder)
    if tokenizer.vocab_size > config.output_vocab_size:
        raise PretrainedError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but config.json's vocab_size is "
            f"{config.output_vocab_size}: they do not belong together."
        )
    # Each tensor is read straight onto its device in its dtype, and becomes the parameter
    # (assigned, not copied into a model initialised at random): one copy of the model.
    reader.device, reader.dtype = placement.read_device, placement.dtype
    try:
        weights = module.map_weights(reader, config)
    finally:
        reader.close()
    reader.check_complete()
    with parameters_on_meta(), _NoRandomInit():
        model = Transformer(config)
    assign_weights(model, weights, placement.dtype, placement.read_device)
    del weights
    info: dict[str, Any] = {
        "family": family,
        "model_type": hf.get("model_type"),
        "source": str(path_or_id),
        "architectures": hf.get("architectures"),
        "dtype": str(placement.dtype).removeprefix("torch."),
    }
    if placement.spread:
        from .dispatch import dispatch

        info["device_map"] = dispatch(model, placement.max_memory)
    return Checkpoint(path=folder, model=model.eval(), tokenizer=tokenizer, info=info)


@dataclass(frozen=True)
class Placement:
    """Where a checkpoint's tensors go: read onto ``read_device`` as ``dtype``; when
    ``spread``, then dispatched over the devices ``max_memory`` allows."""

    read_device: torch.device
    dtype: torch.dtype
    spread: bool = False
    max_memory: dict[int | str, int | str] | None = None


def place(
    reader: TensorReader,
    device: str | torch.device | None,
    dtype: str | torch.dtype | None,
    max_memory: dict[int | str, int | str] | None = None,
) -> Placement:
    """Choose the device and dtype of a checkpoint from its headers (nothing is read), checking
    that it fits: see :func:`load_pretrained`. Raises :class:`PretrainedError` saying how much
    the model needs and what is free where it would go."""
    stored = reader.stored_dtype()
    try:
        if device != "auto":
            target = torch.device(device or "cpu")
            kept = resolve_dtype(dtype, target, stored)
            check_fits(reader.nbytes(kept), target, _what(reader, kept))
            return Placement(target, kept)
        first = pick_device("auto")  # CUDA, else MPS, else the CPU
        if max_memory is None:
            kept = resolve_dtype(dtype, first, stored)
            if fits(reader.nbytes(kept), first):
                return Placement(first, kept)
            if first.type != "cuda":  # no GPUs to spread over: the CPU alone, if it holds it
                check_fits(reader.nbytes(kept), first, _what(reader, kept))
        # Larger than the GPU, or each device's share given: spread over the GPUs, then the
        # CPU, read first to RAM (which must hold it) and dispatched from there.
        kept = resolve_dtype(dtype, first, stored)
        check_fits(reader.nbytes(kept), "cpu", _what(reader, kept) + " (read to RAM first)")
        return Placement(torch.device("cpu"), kept, spread=True, max_memory=max_memory)
    except ValueError as error:  # an unknown dtype or device name
        raise PretrainedError(str(error)) from error


def _what(reader: TensorReader, dtype: torch.dtype) -> str:
    """``"The model (1,235,814,400 parameters as bfloat16)"``, for a size message."""
    count = sum(e.numel for e in reader.entries.values())
    return f"The model ({count:,} parameters as {str(dtype).removeprefix('torch.')})"


def load_gguf(path: str | Path, *, device: str | torch.device | None = None) -> Checkpoint:
    """Load a Llama-family ``.gguf`` file onto our :class:`Transformer` (see
    :func:`~transformer.pretrained.llama.read_llama_gguf`): ``info`` holds ``family``,
    ``model_type`` (``"gguf"``), ``source``, ``path``, ``name``, ``quantization`` and
    ``chat_template``. Errors (:class:`~transformer.pretrained.gguf.GGUFError`) name the
    problem: truncated file, unknown architecture, unsupported quantization."""
    read = llama.read_llama_gguf(path)
    model = _model_from(read.config, read.weights)
    del read.weights
    info = dict(read.info)
    info.update(model_type="gguf", source=str(path), chat_template=read.chat_template)
    return Checkpoint(
        path=Path(path).parent,
        model=model.to(device or "cpu").eval(),
        tokenizer=read.tokenizer,
        info=info,
    )


_NORMAL_INITS = (torch.nn.init.normal_, torch.Tensor.normal_)


class _NoRandomInit(TorchFunctionMode):
    """Build a model on the meta device without the two meta kernels that import
    ``torch._dynamo`` on first use (4 s of a 2-core machine's GGUF load): ``normal_``
    (nn.Embedding's initialiser, no values to fill) is skipped and ``arange`` (the rotary
    tables, recomputed after) runs on the CPU. A mode is local to the thread that builds."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in _NORMAL_INITS:
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        if func is torch.arange and kwargs.get("device") is None:
            kwargs["device"] = "cpu"  # the rotary tables' positions: small, replaced after
        return func(*args, **kwargs)


def _model_from(config: ModelConfig, weights: dict[str, torch.Tensor]) -> Transformer:
    """A :class:`Transformer` whose parameters *are* ``weights`` (our names; a tied matrix
    once): built without storage, so nothing is initialised at random and nothing is copied
    (the dequantized float32 tensors are the model's, not a second copy of it)."""
    with torch.device("meta"), _NoRandomInit():
        model = Transformer(config)
    expected = {name: tuple(param.shape) for name, param in model.named_parameters()}
    if set(expected) != set(weights):
        wrong = sorted(set(expected) ^ set(weights))[:5]
        raise PretrainedError(
            f"internal mapping error: the GGUF weights and the model differ: {wrong}"
        )
    for name, tensor in weights.items():
        if tuple(tensor.shape) != expected[name]:
            raise PretrainedError(
                f"the GGUF tensor for {name} has shape {tuple(tensor.shape)}, the model needs "
                f"{expected[name]}"
            )
        if not all_finite(tensor):
            raise PretrainedError(f"the GGUF tensor for {name} has NaN or inf")
    model.load_state_dict(weights, strict=False, assign=True)
    if config.tie_embeddings:  # assign replaced the embedding: tie the read-out to it again
        assert model.tgt_embedding is not None  # a GGUF model is decoder-only
        model.generator.proj.weight = model.tgt_embedding.lookup.weight
    for module in model.modules():
        if isinstance(module, RotaryEmbedding):  # computed tables, not in the file
            positions = torch.arange(config.max_len)
            module.cos, module.sin = rotary_cos_sin(positions, config.d_head, config.rope_base)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise PretrainedError(f"internal mapping error: nothing was loaded into {left[:5]}")
    return model
