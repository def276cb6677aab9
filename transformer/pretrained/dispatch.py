"""A model larger than one device, spread over the GPUs and then the CPU by ``accelerate``.

Hugging Face ``accelerate``'s big-model dispatch places whole layers (never split: a layer's
attention and feed-forward read one residual stream) on the devices in order, as many as each
device's ``max_memory`` holds, and moves activations between them with hooks on the modules.
Our code does not place anything itself: the forward, the trace and the views run unchanged.
``accelerate`` is imported only here, only when a model is spread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.model import Transformer
from ._common import PretrainedError

NO_SPLIT_MODULES: tuple[str, ...] = ("EncoderLayer", "DecoderLayer")
"""Our modules that go whole onto one device: the layers of the stacks."""


def device_map_for(
    model: nn.Module, max_memory: dict[int | str, int | str] | None = None
) -> dict[str, int | str]:
    """Where each part of ``model`` would go: module name → device (a GPU index, ``"cpu"``
    or ``"disk"``), filling each device of ``max_memory`` (``{0: "10GiB", "cpu": "30GiB"}``;
    by default what each has free) in order, layers never split. Nothing is moved."""
    infer_auto_device_map = _accelerate().infer_auto_device_map
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    return dict(
        infer_auto_device_map(
            model,
            max_memory=max_memory,
            no_split_module_classes=list(NO_SPLIT_MODULES),
            dtype=dtypes.pop() if len(dtypes) == 1 else None,
        )
    )


def dispatch(
    model: nn.Module,
    max_memory: dict[int | str, int | str] | None = None,
    *,
    device_map: dict[str, int | str] | None = None,
    offload_dir: str | Path | None = None,
) -> dict[str, int | str]:
    """Spread ``model`` (its weights on the CPU) over the devices ``device_map`` names, by
    default :func:`device_map_for` ``(model, max_memory)``; parts mapped to ``"disk"`` are
    written to ``offload_dir`` and read back layer by layer. Returns the map used.

    The model is changed in place: ``accelerate``'s hooks move each layer's inputs to its
    device and the output back to the first device, so a call looks as before. Raises
    :class:`PretrainedError` if ``accelerate`` is not installed or the devices cannot hold it.
    """
    accelerate = _accelerate()
    if device_map is None:
        device_map = device_map_for(model, max_memory)
    if "disk" in device_map.values() and offload_dir is None:
        raise PretrainedError(
            "the model does not fit in the GPUs and RAM together: free memory, keep it in "
            "bfloat16 (--dtype bfloat16), or open a smaller model."
        )
    main = next(
        (d for d in device_map.values() if d not in ("cpu", "disk")),
        "cpu",
    )
    main_device = torch.device("cuda", main) if isinstance(main, int) else torch.device(main)
    accelerate.dispatch_model(
        model,
        device_map=device_map,
        main_device=main_device,
        offload_dir=None if offload_dir is None else str(offload_dir),
    )
    if isinstance(model, Transformer):  # its inputs go to the first device, not to meta
        model.input_device = main_device
    return device_map


def _accelerate() -> Any:
    """The ``accelerate`` module, or an error saying how to install it."""
    try:
        import accelerate  # type: ignore[import-untyped]
    except ImportError as error:
        raise PretrainedError(
            "spreading a model over several devices (--device auto, for a model larger than "
            "one) needs accelerate: pip install 'accelerate>=1.0,<2'"
        ) from error
    return accelerate
