"""Shared fixtures: tokenizers trained once per test session on the bundled corpus."""

from __future__ import annotations

import pytest

from transformer.corpus import bundled_corpus
from transformer.tokenization import ALGORITHMS, Tokenizer, train_tokenizer

VOCAB_SIZES = {"bpe": 400, "byte_bpe": 500, "wordpiece": 400, "unigram": 400}


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return bundled_corpus()


@pytest.fixture(scope="session")
def trained(corpus: list[str]) -> dict[str, Tokenizer]:
    """One tokenizer per algorithm, trained on the bundled corpus."""
    return {alg: train_tokenizer(corpus, alg, VOCAB_SIZES[alg]) for alg in ALGORITHMS}
