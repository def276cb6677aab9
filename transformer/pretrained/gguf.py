"""Reading GGUF files (llama.cpp's single-file format) with numpy alone: header, metadata, tensors.

A GGUF file is, in little-endian order::

    "GGUF"  version:u32  tensor_count:u64  metadata_count:u64
    metadata_count × (key:string  value_type:u32  value)
    tensor_count  × (name:string  n_dims:u32  dims:u64[n_dims]  ggml_type:u32  offset:u64)
    padding to ``general.alignment`` (32 when absent)
    tensor data: each tensor at ``data_start + offset``

A string is a u64 byte length and UTF-8 bytes; an array is an element type (u32), a count (u64)
and the elements. ``dims`` run fastest-first (ggml's ``ne[0]`` is the row length), so a matrix
stored as ``[576, 49152]`` is a torch tensor of shape ``(49152, 576)``: 49,152 rows of 576.

Quantized tensors are stored in blocks of 32 values along a row. The two block formats SmolLM2's
file uses, and the simpler ones beside them, are dequantized here to float32 (``d`` and ``m`` are
float16 scale and minimum, ``q`` the stored integers):

- ``Q8_0``: 34 bytes = ``d`` + 32 × int8; ``x = d·q``.
- ``Q4_0``: 18 bytes = ``d`` + 16 bytes of nibbles; ``x = d·(q − 8)``.
- ``Q4_1``: 20 bytes = ``d`` + ``m`` + 16 bytes of nibbles; ``x = d·q + m``.

In a 4-bit block, byte ``j`` holds value ``j`` in its low nibble and value ``j + 16`` in its high
nibble. Other types (the k-quants, Q5_*, ...) are refused with an error naming the type.

The file is memory-mapped: only the header is parsed when it is opened, and a tensor's bytes are
read when it is dequantized. The `gguf` package (llama.cpp's own reader) is *not* used here: it is
the reference the tests compare against.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ._common import PretrainedError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_STRING_BYTES = 1 << 26
"""Longest metadata string accepted (64 MiB): a larger length means a garbled file."""

# GGUF metadata value types → struct format (scalars); 8 is a string, 9 an array.
_SCALAR_FORMATS: dict[int, str] = {
    0: "<B",  # UINT8
    1: "<b",  # INT8
    2: "<H",  # UINT16
    3: "<h",  # INT16
    4: "<I",  # UINT32
    5: "<i",  # INT32
    6: "<f",  # FLOAT32
    7: "<?",  # BOOL
    10: "<Q",  # UINT64
    11: "<q",  # INT64
    12: "<d",  # FLOAT64
}
_NUMPY_DTYPES: dict[int, str] = {
    0: "<u1",
    1: "<i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "?",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}
_STRING, _ARRAY = 8, 9

GGML_TYPE_NAMES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    6: "Q5_0",
    7: "Q5_1",
    8: "Q8_0",
    9: "Q8_1",
    10: "Q2_K",
    11: "Q3_K",
    12: "Q4_K",
    13: "Q5_K",
    14: "Q6_K",
    15: "Q8_K",
    16: "IQ2_XXS",
    17: "IQ2_XS",
    18: "IQ3_XXS",
    19: "IQ1_S",
    20: "IQ4_NL",
    21: "IQ3_S",
    22: "IQ2_S",
    23: "IQ4_XS",
    24: "I8",
    25: "I16",
    26: "I32",
    27: "I64",
    28: "F64",
    29: "IQ1_M",
    30: "BF16",
}
"""ggml's tensor type ids (``ggml.h``), for naming a type in an error."""

BLOCKS: dict[str, tuple[int, int]] = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q8_0": (32, 34),
}
"""Supported types: (values per block, bytes per block)."""


@dataclass(frozen=True)
class GGUFTensorInfo:
    """Where one tensor lies in the file.

    Attributes:
        name: the GGUF tensor name (``blk.0.attn_q.weight``).
        shape: torch order, slowest first (the reverse of the file's ``dims``).
        type_name: ggml type (``"Q4_1"``, ``"F32"``, ...).
        offset: absolute byte offset of the data in the file.
        n_bytes: size of the stored data (``None`` for a type we cannot read).
    """

    name: str
    shape: tuple[int, ...]
    type_name: str
    offset: int
    n_bytes: int | None

    @property
    def n_values(self) -> int:
        """Number of values (the product of the shape)."""
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


class GGUFError(PretrainedError):
    """A GGUF file that cannot be read; the message names the file and the problem."""


class _Cursor:
    """Sequential little-endian reads over the memory-mapped bytes, with truncation checks.

    ``data`` is a memoryview of the map: slicing it costs nothing, where each slice of an
    ``np.memmap`` builds a memmap object (SmolLM2's 49,152 tokens and merges: seconds)."""

    def __init__(self, data: memoryview, name: str) -> None:
        self.data = data
        self.pos = 0
        self.name = name

    def need(self, n: int, what: str) -> None:
        if self.pos + n > len(self.data):
            raise GGUFError(
                f"{self.name} is truncated: reading {what} needs bytes up to {self.pos + n:,} "
                f"but the file has {len(self.data):,}."
            )

    def scalar(self, fmt: str, what: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size, what)
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self, what: str) -> str:
        length = self.scalar("<Q", what)
        if length > MAX_STRING_BYTES:
            raise GGUFError(
                f"{self.name}: {what} claims a string of {length:,} bytes; the file is garbled."
            )
        self.need(length, what)
        raw = self.data[self.pos : self.pos + length].tobytes()
        self.pos += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise GGUFError(f"{self.name}: {what} is not valid UTF-8 ({error}).") from None

    def value(self, value_type: int, what: str) -> Any:
        if value_type in _SCALAR_FORMATS:
            return self.scalar(_SCALAR_FORMATS[value_type], what)
        if value_type == _STRING:
            return self.string(what)
        if value_type == _ARRAY:
            item_type = self.scalar("<I", what)
            count = self.scalar("<Q", what)
            if item_type in _NUMPY_DTYPES:  # numbers in one read
                dtype = np.dtype(_NUMPY_DTYPES[item_type])
                self.need(count * dtype.itemsize, what)
                end = self.pos + count * dtype.itemsize
                items = np.frombuffer(self.data[self.pos : end].tobytes(), dtype=dtype).tolist()
                self.pos = end
                return items
            if count > len(self.data):
                raise GGUFError(f"{self.name}: {what} claims {count:,} items; the file is garbled.")
            return [self.value(item_type, f"{what}[{i}]") for i in range(count)]
        raise GGUFError(f"{self.name}: {what} has unknown value type {value_type}.")


class GGUFFile:
    """An opened GGUF file: its metadata and tensor table; tensors are dequantized on request.

    Attributes:
        path: the file.
        version: the GGUF version (2 or 3).
        metadata: key → value (ints, floats, bools, strings, and lists of them for arrays).
        tensors: name → :class:`GGUFTensorInfo`, in file order.
        alignment: the data alignment in bytes.
        data_start: absolute offset of the tensor data section.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        name = self.path.name
        if not self.path.is_file():
            raise GGUFError(f"GGUF file {self.path} does not exist")
        if self.path.stat().st_size < 4:
            raise GGUFError(f"{name} is truncated: it has {self.path.stat().st_size} bytes.")
        self._data = np.memmap(self.path, dtype=np.uint8, mode="r")
        cursor = _Cursor(self._data.data, name)  # the map's memoryview
        magic = self._data[:4].tobytes()
        if magic != GGUF_MAGIC:
            raise GGUFError(
                f"{name} is not a GGUF file: it starts with {magic!r}, not {GGUF_MAGIC!r}."
            )
        cursor.pos = 4
        self.version = cursor.scalar("<I", "the version")
        if self.version not in SUPPORTED_VERSIONS:
            hint = " (a big-endian file?)" if self.version > 0xFFFF else ""
            raise GGUFError(
                f"{name} is GGUF version {self.version}{hint}; versions "
                f"{', '.join(map(str, SUPPORTED_VERSIONS))} are supported."
            )
        n_tensors = cursor.scalar("<Q", "the tensor count")
        n_metadata = cursor.scalar("<Q", "the metadata count")
        if n_tensors > len(self._data) or n_metadata > len(self._data):
            raise GGUFError(
                f"{name} claims {n_tensors:,} tensors and {n_metadata:,} metadata entries; "
                "the file is garbled."
            )
        self.metadata: dict[str, Any] = {}
        for i in range(n_metadata):
            key = cursor.string(f"metadata key {i}")
            value_type = cursor.scalar("<I", f"the type of {key}")
            self.metadata[key] = cursor.value(value_type, key)
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment < 1 or self.alignment & (self.alignment - 1):
            raise GGUFError(f"{name}: general.alignment={self.alignment} is not a power of two.")
        infos = []
        for i in range(n_tensors):
            tensor_name = cursor.string(f"the name of tensor {i}")
            n_dims = cursor.scalar("<I", f"the rank of {tensor_name}")
            if n_dims > 8:
                raise GGUFError(f"{name}: tensor {tensor_name} claims {n_dims} dimensions.")
            dims = [cursor.scalar("<Q", f"the shape of {tensor_name}") for _ in range(n_dims)]
            type_id = cursor.scalar("<I", f"the type of {tensor_name}")
            offset = cursor.scalar("<Q", f"the offset of {tensor_name}")
            infos.append((tensor_name, tuple(reversed(dims)), type_id, offset))
        self.data_start = -(-cursor.pos // self.alignment) * self.alignment
        self.tensors: dict[str, GGUFTensorInfo] = {}
        for tensor_name, shape, type_id, offset in infos:
            type_name = GGML_TYPE_NAMES.get(type_id, f"unknown type {type_id}")
            info = GGUFTensorInfo(
                tensor_name, shape, type_name, self.data_start + offset, _n_bytes(shape, type_name)
            )
            if info.n_bytes is not None and info.offset + info.n_bytes > len(self._data):
                raise GGUFError(
                    f"{name} is truncated: tensor {tensor_name} needs bytes up to "
                    f"{info.offset + info.n_bytes:,} but the file has {len(self._data):,}."
                )
            self.tensors[tensor_name] = info

    @property
    def architecture(self) -> str | None:
        """``general.architecture`` (``"llama"``, ...), or ``None`` when absent."""
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes of tensor ``name`` (a read-only view into the memory map)."""
        info = self._info(name)
        if info.n_bytes is None:
            raise _unsupported(self.path.name, info)
        return self._data[info.offset : info.offset + info.n_bytes]

    def tensor(self, name: str) -> Tensor:
        """Tensor ``name`` dequantized to float32, in torch order: shape ``info.shape``."""
        info = self._info(name)
        values = dequantize(self.raw(name), info.type_name, info.shape)
        return torch.from_numpy(values)

    def _info(self, name: str) -> GGUFTensorInfo:
        if name not in self.tensors:
            raise GGUFError(f"{self.path.name} has no tensor {name!r}.")
        return self.tensors[name]


def _n_bytes(shape: tuple[int, ...], type_name: str) -> int | None:
    if type_name not in BLOCKS:
        return None
    per_block, block_bytes = BLOCKS[type_name]
    n_values = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if n_values % per_block:
        return None
    return n_values // per_block * block_bytes


def _unsupported(file_name: str, info: GGUFTensorInfo) -> GGUFError:
    if info.type_name in BLOCKS:  # a row length that is not a whole number of blocks
        return GGUFError(
            f"{file_name}: tensor {info.name} of shape {info.shape} is not a whole number of "
            f"{info.type_name} blocks."
        )
    return GGUFError(
        f"{file_name}: tensor {info.name} is quantized as {info.type_name}, which this reader "
        f"does not dequantize; supported: {', '.join(BLOCKS)}."
    )


def read_gguf(path: str | Path) -> GGUFFile:
    """Open a GGUF file: parse its header (cheap); tensors are read by :meth:`GGUFFile.tensor`."""
    return GGUFFile(path)


def dequantize(raw: np.ndarray, type_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values of shape ``shape`` from the stored bytes ``raw`` (uint8) of one tensor.

    The values are written into memory that torch allocated (64-byte aligned, where numpy's
    large arrays start 16 bytes into a page): matrix products over misaligned weights ran 3 to
    8 % slower on the CPU."""
    if type_name not in BLOCKS:
        raise GGUFError(
            f"tensors quantized as {type_name} are not supported; supported: {', '.join(BLOCKS)}."
        )
    raw = np.asarray(raw, dtype=np.uint8)
    per_block, block_bytes = BLOCKS[type_name]
    if raw.size % block_bytes:
        raise GGUFError(f"{raw.size} bytes are not a whole number of {type_name} blocks.")
    n_blocks = raw.size // block_bytes
    values = torch.empty(n_blocks * per_block, dtype=torch.float32).numpy()
    if type_name == "F32":
        values[:] = raw.view("<f4")
    elif type_name == "F16":
        values[:] = raw.view("<f2")
    elif type_name == "BF16":  # the upper half of a float32
        np.left_shift(raw.view("<u2"), 16, out=values.view(np.uint32), dtype=np.uint32)
    else:
        blocks = raw.reshape(-1, block_bytes)
        scale = blocks[:, :2].copy().view("<f2").astype(np.float32)  # (n_blocks, 1)
        values = values.reshape(n_blocks, 32)
        if type_name == "Q8_0":
            values[:] = blocks[:, 2:].view(np.int8)
            values *= scale
        else:
            packed = blocks[:, -16:]
            values[:, :16] = packed & 0x0F  # value j in the low nibble of byte j
            values[:, 16:] = packed >> 4  # value j + 16 in its high nibble
            if type_name == "Q4_0":
                values -= 8.0
                values *= scale
            else:  # Q4_1
                values *= scale
                values += blocks[:, 2:4].copy().view("<f2").astype(np.float32)
    expected = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if values.size != expected:
        raise GGUFError(f"{values.size} {type_name} values do not fill the shape {shape}.")
    return np.ascontiguousarray(values.reshape(shape), dtype=np.float32)
