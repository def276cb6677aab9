"""Shared test settings: deterministic torch, a device list that includes CUDA only when present,
and tokenizers trained once per test session on the bundled corpus."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from transformer.config import ModelConfig
from transformer.model import Transformer
from transformer.text.corpus import bundled_corpus
from transformer.text.tokenization import ALGORITHMS, Tokenizer, train_tokenizer

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
VOCAB_SIZES = {"bpe": 400, "byte_bpe": 500, "wordpiece": 400, "unigram": 400}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is present")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return bundled_corpus()


@pytest.fixture(scope="session")
def trained(corpus: list[str]) -> dict[str, Tokenizer]:
    """One tokenizer per algorithm, trained on the bundled corpus."""
    return {alg: train_tokenizer(corpus, alg, VOCAB_SIZES[alg]) for alg in ALGORITHMS}


# -- tiny Hugging Face model folders (transformers is a test-only dependency) ---------------

HF_VOCAB = 99


def _bert_vocab_txt(folder: Path) -> None:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    words += [f"w{i}" for i in range(HF_VOCAB - len(words))]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")


def _word_level_tokenizer(folder: Path, pad: str, specials: list[str]) -> None:
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(specials)}
    for word in ("the", "cat", "sat"):
        vocab[word] = len(vocab)
    for i in range(len(vocab), HF_VOCAB - 1):
        vocab[f"w{i}"] = i
    vocab[pad] = HF_VOCAB - 1
    backend = Backend(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens([*specials, pad])
    backend.save(str(folder / "tokenizer.json"))


def build_hf_model(family: str, folder: Path, seed: int = 0) -> Path:
    """A tiny randomly initialised Hugging Face model of ``family`` ("bert", "gpt2" or
    "marian") saved in ``folder`` as ``transformers`` saves one (config.json, model.safetensors)
    with its tokenizer files: what ``python app.py --model FOLDER`` is given."""
    transformers = pytest.importorskip("transformers")
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    if family == "bert":
        config = transformers.BertConfig(
            vocab_size=HF_VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            max_position_embeddings=64,
        )
        model = transformers.BertModel(config)
    elif family == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=HF_VOCAB,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=64,
            bos_token_id=HF_VOCAB - 1,
            eos_token_id=HF_VOCAB - 1,
        )
        model = transformers.GPT2LMHeadModel(config)
    elif family == "marian":
        config = transformers.MarianConfig(
            vocab_size=HF_VOCAB,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=37,
            decoder_ffn_dim=37,
            max_position_embeddings=64,
            pad_token_id=HF_VOCAB - 1,
            decoder_start_token_id=HF_VOCAB - 1,
            eos_token_id=0,
            forced_eos_token_id=None,
        )
        model = transformers.MarianMTModel(config)
    else:
        raise ValueError(f"unknown family {family!r}")
    model.save_pretrained(folder, safe_serialization=True)
    if family == "bert":
        _bert_vocab_txt(folder)
    elif family == "gpt2":
        _word_level_tokenizer(folder, "<|endoftext|>", ["<unk>"])
    else:
        _word_level_tokenizer(folder, "<pad>", ["</s>", "<unk>"])
    return folder


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny model folder per supported family, built once per test session."""
    root = tmp_path_factory.mktemp("hf-models")
    return {family: build_hf_model(family, root / family) for family in ("bert", "gpt2", "marian")}


# -- one tiny seeded encoder-decoder, for the what-if and mistake tests ---------------------------

TINY_CONFIG = ModelConfig(
    src_vocab_size=30,
    tgt_vocab_size=30,
    d_model=32,
    n_heads=4,
    d_ff=64,
    n_encoder_layers=2,
    n_decoder_layers=2,
    dropout=0.0,
    pad_id=0,
)


def tiny_transformer(config: ModelConfig = TINY_CONFIG, **changes: Any) -> Transformer:
    """``Transformer(config.replace(**changes))``, seeded 0, in eval mode."""
    torch.manual_seed(0)
    return Transformer(config.replace(**changes)).eval()
