"""Benchmark: encoding throughput and the cost of a replay, per algorithm, on the bundled corpus.

Run from the repository root as ``python -m benchmarks.tokenizers_bench``. Trains each tokenizer on the bundled corpus, then
encodes the corpus (repeated to about a megabyte) through `Tokenizer.encode_ids` (one call per
line, as a data pipeline would) and through `Tokenizer.encode` (records with offsets), and
replays every line, reporting microseconds per replayed word.
"""

from __future__ import annotations

import time

from transformer.text.bpe_learning import learn_bpe
from transformer.text.corpus import bundled_corpus
from transformer.text.replay import replay
from transformer.text.tokenization import ALGORITHMS, train_tokenizer

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


if __name__ == "__main__":
    main()
