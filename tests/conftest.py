"""Shared test settings: deterministic torch, a device list that includes CUDA only when present,
and tokenizers trained once per test session on the bundled corpus."""

from __future__ import annotations

import os

import pytest
import torch

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
