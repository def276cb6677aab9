"""Benchmark: encoding throughput and the cost of a replay, per algorithm, on the bundled corpus.

Run from the repository root as ``python -m benchmarks.tokenizers_bench``. Trains each tokenizer
on the bundled corpus, then encodes the corpus (repeated to about a megabyte) through
`Tokenizer.encode_ids` (one call per line, as a data pipeline would) and through `Tokenizer.encode`
(records with offsets), and
replays every line, reporting microseconds per replayed word.

Then the replay of one long word (a tokenizer without a pre-tokeniser, as Llama-2's first
conversion, sees a whole text as one word) at 5,000, 10,000 and 20,000 characters, beside the
library's own encoding of the same text: the replay must stay near-linear (it was quadratic:
8,000 characters took 3.5 s). Last, the real tokenizers (load time, tokens per second against
`tiktoken` where it is installed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import tracemalloc

import tokenizers
from tokenizers import models, normalizers

from transformer.text.bpe_learning import learn_bpe
from transformer.text.corpus import bundled_corpus
from transformer.text.real_tokenizers import ASSETS, REAL_TOKENIZERS, load_real_tokenizer
from transformer.text.replay import replay
from transformer.text.tokenization import ALGORITHMS, Tokenizer, train_tokenizer

VOCAB_SIZES = {"bpe": 1000, "byte_bpe": 1000, "wordpiece": 1000, "unigram": 1000}
REPEAT = 80  # about 1 MB of text


def best_of(runs: int, fn) -> float:
    """Fastest wall time of ``runs`` calls, in seconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    corpus = bundled_corpus()
    big = corpus * REPEAT
    chars = sum(map(len, big))
    print(f"bundled corpus: {len(corpus)} lines, {sum(map(len, corpus)):,} characters")
    print(f"encoding text: {len(big):,} lines, {chars:,} characters (corpus x {REPEAT})\n")
    header = f"{'algorithm':<10} {'vocab':>6} {'train s':>8} {'tokens':>9} "
    header += f"{'ids tok/s':>11} {'records tok/s':>14} {'replay us/word':>15}"
    print(header)
    for algorithm in ALGORITHMS:
        start = time.perf_counter()
        tok = train_tokenizer(corpus, algorithm, VOCAB_SIZES[algorithm])
        train_s = time.perf_counter() - start
        n_tokens = sum(len(tok.encode_ids(line)) for line in big)
        ids_s = best_of(3, lambda tok=tok: [tok.encode_ids(line) for line in big])
        rec_s = best_of(3, lambda tok=tok: [tok.encode(line) for line in big])
        n_words = sum(len(replay(tok, line)) for line in corpus)
        replay_s = best_of(3, lambda tok=tok: [replay(tok, line) for line in corpus])
        print(
            f"{algorithm:<10} {tok.vocab_size:>6} {train_s:>8.2f} {n_tokens:>9,} "
            f"{n_tokens / ids_s:>11,.0f} {n_tokens / rec_s:>14,.0f} "
            f"{replay_s / n_words * 1e6:>15.1f}"
        )
    start = time.perf_counter()
    trace = learn_bpe(corpus, 500)
    learn_s = time.perf_counter() - start
    print(f"\nlearning replay (from-scratch BPE): {len(trace.merges)} merges in {learn_s:.2f} s")
    long_word(corpus)
    real(corpus)


def llama2_like(corpus: list[str]) -> Tokenizer:
    """No pre-tokeniser: ▁ prepended and for spaces, BPE with byte fallback (Llama-2 legacy)."""
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=1000, special_tokens=["<unk>"], show_progress=False
    )
    tok.train_from_iterator(corpus, trainer)
    return Tokenizer(tok)


def long_word(corpus: list[str]) -> None:
    tok = llama2_like(corpus)
    text = " ".join(corpus * 3)  # the corpus is about 12,000 characters
    print("\none long word (no pre-tokeniser), replay against the library's own encoding:")
    print(
        f"{'chars':>7} {'merges':>7} {'replay s':>9} {'library s':>10} {'ratio':>7} {'peak MB':>8}"
    )
    for n in (5_000, 10_000, 20_000):
        chunk = text[:n]
        merges = len(replay(tok, chunk)[0].steps.merges)
        replay_s = best_of(3, lambda chunk=chunk: replay(tok, chunk))
        lib_s = best_of(3, lambda chunk=chunk: tok.backend.encode(chunk))
        tracemalloc.start()
        replay(tok, chunk)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        print(
            f"{n:>7,} {merges:>7,} {replay_s:>9.3f} {lib_s:>10.4f} {replay_s / lib_s:>6.0f}x "
            f"{peak:>8.1f}"
        )


def real(corpus: list[str]) -> None:
    try:
        import tiktoken  # only a reference: the library never imports it
    except ImportError:
        tiktoken = None
    else:
        # tiktoken reads its files from its cache, named by the sha1 of the URL it would download
        # from; seed a private cache with our pinned copies (the same bytes: tiktoken checks
        # their sha256) so that nothing is downloaded.
        cache = tempfile.mkdtemp(prefix="tiktoken-cache-")
        base = "https://openaipublic.blob.core.windows.net/"
        for url, relative in [
            (base + "encodings/cl100k_base.tiktoken", "cl100k_base/cl100k_base.tiktoken"),
            (base + "gpt-2/encodings/main/vocab.bpe", "gpt2/vocab.bpe"),
            (base + "gpt-2/encodings/main/encoder.json", "gpt2/encoder.json"),
        ]:
            key = hashlib.sha1(url.encode()).hexdigest()
            shutil.copy(ASSETS / relative, os.path.join(cache, key))
        os.environ["TIKTOKEN_CACHE_DIR"] = cache
    lines = corpus * 10
    n_chars = sum(map(len, lines))
    print(f"\nreal tokenizers ({n_chars:,} characters, one call per line):")
    print(
        f"{'name':<18} {'load s':>7} {'ours tok/s':>11} {'tiktoken tok/s':>15} {'replay us/word':>15}"
    )
    for name in REAL_TOKENIZERS:
        start = time.perf_counter()
        tok = load_real_tokenizer(name)
        load_s = time.perf_counter() - start
        n_tokens = sum(len(tok.encode_ids(line)) for line in lines)
        ours = n_tokens / best_of(3, lambda tok=tok: [tok.encode_ids(line) for line in lines])
        theirs = "-"
        if tiktoken is not None and name in ("gpt2", "cl100k_base"):
            enc = tiktoken.get_encoding(name)
            secs = best_of(3, lambda enc=enc: [enc.encode(line) for line in lines])
            theirs = f"{n_tokens / secs:,.0f}"
        n_words = sum(len(replay(tok, line)) for line in corpus)
        replay_s = best_of(3, lambda tok=tok: [replay(tok, line) for line in corpus])
        print(
            f"{name:<18} {load_s:>7.2f} {ours:>11,.0f} {theirs:>15} "
            f"{replay_s / n_words * 1e6:>15.1f}"
        )


if __name__ == "__main__":
    main()
