"""Loading SmolLM2-135M-Instruct's GGUF file: our reader against transformers' own GGUF loading.

Ours: :func:`transformer.pretrained.llama.read_llama_gguf` (parse the header, dequantize every
tensor to float32, un-permute W_q / W_k, build the tokenizer). Theirs: ``AutoTokenizer`` and
``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)`` (they need ``gguf`` and
``accelerate``). Building our model from the weights is not included yet: that waits for the
modern block in the core. Runs alternate (ours, theirs, ...) and the best of each is reported;
the ratio is ours / transformers. The target: ours ≤ 10 s on a 2-core machine.

Usage: python -m benchmarks.gguf_load [--repeats N] [--threads N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from transformer.pretrained.llama import read_llama_gguf
from transformer.pretrained.shipped import SMOLLM2


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = SMOLLM2.verify() / SMOLLM2.entry

    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    def theirs() -> None:
        transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)

    ours_times, theirs_times = [], []
    for _ in range(args.repeats):
        ours_times.append(seconds(lambda: read_llama_gguf(path)))
        theirs_times.append(seconds(theirs))
    best_ours, best_theirs = min(ours_times), min(theirs_times)
    print(f"SmolLM2 GGUF load, {args.threads} threads, best of {args.repeats}")
    print(f"  ours (config, weights, tokenizer): {best_ours:6.2f} s")
    print(f"  transformers (tokenizer + model):  {best_theirs:6.2f} s")
    print(f"  ratio ours / transformers:         {best_ours / best_theirs:6.2f}")


if __name__ == "__main__":
    main()
