"""Milliseconds per generated token, with and without the key/value cache.

    python -m benchmarks.generate [--quick] [--model CHECKPOINT_DIR] [--threads N] [--repeats R]

For each output length L the script generates exactly L tokens greedily ([EOS] is ignored, so
every run has the same length) from a fixed random source and reports

- ``mean``: the session's total stepping time divided by L (encoding the source, done once when
  the session is made, is not counted);
- ``last16``: the median time of the last 16 steps, i.e. the cost of one token *at* length L.

Each figure is the median over ``--repeats`` runs, and lengths are interleaved across repeats,
because other processes may share the CPU. Two models: the paper's base configuration (random
weights, 63M parameters) and, with ``--model``, a bundled checkpoint.

Targets: with the cache, the time per token at 512 is at most 1.5× that at 16; the cache is at
least 5× faster than recomputing the prefix at 256 tokens.

Threads default to 1: one decoding step is a chain of small matrix-vector products, and on a
small shared machine two OpenMP threads spend more time waiting for each other (a descheduled
thread stalls every parallel op) than they save. Pass ``--threads 0`` for torch's default.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from transformer.core.config import base_config
from transformer.core.model import Transformer
from transformer.generation import DecodingSession, DecodingSettings

LENGTHS = (16, 32, 64, 128, 256, 512)
QUICK_LENGTHS = (16, 64, 512)
FLATNESS_TARGET = 1.5  # cached ms/token at 512 ÷ at 16, at most
SPEEDUP_TARGET = 5.0  # no-cache ÷ cache ms/token at 256, at least


def time_one_run(
    model: Transformer, source: list[int], length: int, use_cache: bool
) -> tuple[float, float]:
    """Generate ``length`` tokens; return (mean ms per token, median ms of the last 16 steps)."""
    settings = DecodingSettings(max_new_tokens=length, use_cache=use_cache)
    session = DecodingSession(model, source, settings, eos_id=None)
    step_times = []
    for _ in range(length):
        start = time.perf_counter()
        session.step()
        step_times.append(time.perf_counter() - start)
    return 1000 * sum(step_times) / length, 1000 * statistics.median(step_times[-16:])


def benchmark(
    name: str,
    model: Transformer,
    source: list[int],
    lengths: list[int],
    recompute_lengths: list[int],
    repeats: int,
) -> dict[tuple[str, int], tuple[float, float]]:
    """Print and return ``{(mode, L): (mean, last16)}`` medians for one model."""
    print(f"\n## {name}: source of {len(source)} tokens, {repeats} repeat(s)\n", flush=True)
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    plan = [("cache", n) for n in lengths] + [("no cache", n) for n in recompute_lengths]
    time_one_run(model, source, 4, True)  # warm-up: allocations, lazy inits
    for _ in range(repeats):
        for mode, length in plan:
            result = time_one_run(model, source, length, mode == "cache")
            runs.setdefault((mode, length), []).append(result)
    medians = {
        key: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
        for key, rs in runs.items()
    }
    print("| tokens | cache mean | cache last16 | no-cache mean | no-cache last16 | speedup |")
    print("|-------:|-----------:|-------------:|--------------:|----------------:|--------:|")
    for length in lengths:
        cached = medians[("cache", length)]
        slow = medians.get(("no cache", length))
        slow_cells = f"{slow[0]:13.2f} | {slow[1]:15.2f}" if slow else f"{'—':>13} | {'—':>15}"
        speedup = f"{slow[0] / cached[0]:6.1f}×" if slow else f"{'—':>7}"
        print(f"| {length:6d} | {cached[0]:10.2f} | {cached[1]:12.2f} | {slow_cells} | {speedup} |")
    print("(milliseconds per generated token)")
    check_targets(medians, lengths)
    return medians


def check_targets(medians: dict[tuple[str, int], tuple[float, float]], lengths: list[int]) -> None:
    """Print whether the flatness and speedup targets are met (when measured)."""
    short, long = min(lengths), max(lengths)
    if short != long:
        for label, index in (("mean", 0), ("last16", 1)):
            ratio = medians[("cache", long)][index] / medians[("cache", short)][index]
            verdict = "meets" if ratio <= FLATNESS_TARGET else "MISSES"
            print(
                f"cache, {label}: {long} tokens / {short} tokens = {ratio:.2f}× "
                f"({verdict} the ≤ {FLATNESS_TARGET}× target, stated for 512 / 16)"
            )
    if ("no cache", 256) in medians and ("cache", 256) in medians:
        speedup = medians[("no cache", 256)][0] / medians[("cache", 256)][0]
        verdict = "meets" if speedup >= SPEEDUP_TARGET else "MISSES"
        print(f"cache speedup at 256 tokens: {speedup:.1f}× ({verdict} the ≥ {SPEEDUP_TARGET}×)")
    else:
        print("cache speedup at 256 tokens: not measured (no no-cache run at 256 tokens)")


def random_source(model: Transformer, length: int, generator: torch.Generator) -> list[int]:
    """Random ids above the special ones (PAD 0, UNK 1, BOS 2, EOS 3)."""
    config = model.config
    vocab = config.src_vocab_size if config.has_encoder else config.tgt_vocab_size
    return torch.randint(4, vocab, (length,), generator=generator).tolist()


def fitting(lengths: tuple[int, ...], model: Transformer, prefix_length: int) -> list[int]:
    """The lengths this model can generate: at most ``max_len - prefix + 1`` tokens."""
    room = model.config.max_len - prefix_length + 1
    kept = [n for n in lengths if n <= room]
    if len(kept) < len(lengths):
        print(f"(lengths above {room} skipped: the model's max_len is {model.config.max_len})")
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer lengths, one repeat")
    parser.add_argument(
        "--model",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "assets" / "models" / "translate",
        help="a checkpoint folder to time too (default: the bundled translation model)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    parser.add_argument("--repeats", type=int, help="runs per figure (default 3; 1 with --quick)")
    parser.add_argument(
        "--max-recompute",
        type=int,
        help="longest no-cache run (default 256; 64 with --quick): recomputing is quadratic",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = args.repeats or (1 if args.quick else 3)
    max_recompute = args.max_recompute or (64 if args.quick else 256)
    lengths = QUICK_LENGTHS if args.quick else LENGTHS
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"# Generation speed (greedy, batch 1, CPU): torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), {os.cpu_count()} CPUs, load average {load}"
    )
    generator = torch.Generator().manual_seed(0)

    if args.model is None:
        print("\n## bundled model: skipped (pass --model CHECKPOINT_DIR)")
    elif not args.model.is_dir():
        print(f"\n## bundled model: skipped ({args.model} does not exist yet)")
    else:
        from transformer.pretrained.checkpoint import load_checkpoint

        model = load_checkpoint(args.model).model.eval()
        source = random_source(model, min(12, model.config.max_len), generator)
        prefix = 1 if model.config.has_encoder else len(source)
        kept = fitting(lengths, model, prefix)
        benchmark(
            f"bundled model {args.model}",
            model,
            source,
            kept,
            [n for n in kept if n <= max_recompute],
            repeats,
        )

    torch.manual_seed(0)
    model = Transformer(base_config()).eval()
    source = random_source(model, 32, generator)
    benchmark(
        "paper base configuration, random weights",
        model,
        source,
        list(lengths),
        [n for n in lengths if n <= max_recompute],
        repeats,
    )


if __name__ == "__main__":
    main()
