"""SmolLM2-135M-Instruct against ``transformers`` on the same weights, measured in one run.

Both models come from the same shipped GGUF file (``transformers`` loads it with
``from_pretrained(folder, gguf_file=...)``, dequantized to float32 like ours) and run on the CPU
with the same number of threads, under ``torch.inference_mode``:

1. **decode**: ms per generated token, greedy, 64 new tokens after an 8-token prompt, with the
   key/value cache: ours ``greedy_batch`` (the loop a greedy ``DecodingSession`` steps) against
   ``model.generate(do_sample=False)``;
2. **prefill with capture** at 128 and 512 tokens: ours ``model(tgt=ids, capture=True)`` (the
   trace the Attention and Inside views draw) with its logits read (a trace computes them when
   read, so that both sides give the same: every layer's attention weights and the logits)
   against ``attn_implementation="eager"`` with ``output_attentions=True``; and the **fast
   path** ``model(tgt=ids)`` against ``"sdpa"``;
3. **load**: :meth:`SMOLLM2.load <transformer.pretrained.shipped.ShippedModel.load>` (sha256,
   header, dequantize, un-permute, tokenizer, model) against ``AutoTokenizer`` +
   ``AutoModelForCausalLM`` from the same file.

The machine is shared, so each figure is the *minimum* of ``--repeats`` runs, ours and theirs
alternated; ratios are ours / transformers (≤ 1.0 means ours is as fast or faster). Targets
(issue 20): decode, prefill with capture and the fast path ≤ 1.0×; load ≤ 10 s on 2 cores.

Usage: python -m benchmarks.smollm2 [--repeats N] [--threads N] [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from transformer.generation.loop import greedy_batch
from transformer.pretrained.shipped import SMOLLM2
from transformer.trace import Trace

PROMPT, NEW_TOKENS = 8, 64
LENGTHS = (128, 512)
LOAD_TARGET_S = 10.0


def best_seconds(pairs: list[tuple[str, Callable[[], object]]], repeats: int) -> dict[str, float]:
    """Minimum wall time of each named function, the functions alternated ``repeats`` times
    (after one warm-up call each)."""
    for _name, fn in pairs:
        fn()
    best = {name: float("inf") for name, _ in pairs}
    for _ in range(repeats):
        for name, fn in pairs:
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def _with_logits(trace: Trace) -> tuple[Trace, torch.Tensor]:
    """A captured pass and its logits, which a trace computes when read."""
    return trace, trace.logits


def verdict(ratio: float, target: float = 1.0) -> str:
    return "met" if ratio <= target else "MISSED"


class Rows:
    """The result table, each row printed as soon as it is measured (a slow machine's run can
    be read while it goes on)."""

    def append(self, row: tuple[str, float, float, str]) -> None:
        what, mine, theirs, _unit = row
        ratio = mine / theirs
        if what.startswith("load"):
            target = f"≤ {LOAD_TARGET_S:.0f} s: {verdict(mine, LOAD_TARGET_S)}"
        else:
            target = f"≤ 1.0×: {verdict(ratio)}"
        print(f"| {what} | {mine:.1f} | {theirs:.1f} | {ratio:.2f} | {target} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="torch threads, both sides")
    parser.add_argument("--quick", action="store_true", help="2 repeats, 16 new tokens")
    args = parser.parse_args()
    repeats = 2 if args.quick else args.repeats
    new_tokens = 16 if args.quick else NEW_TOKENS
    torch.set_num_threads(args.threads)
    path = SMOLLM2.verify() / SMOLLM2.entry

    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    def theirs_model(attention: str) -> torch.nn.Module:
        return transformers.AutoModelForCausalLM.from_pretrained(
            path.parent,
            gguf_file=path.name,
            torch_dtype=torch.float32,
            attn_implementation=attention,
        ).eval()

    def theirs_load() -> None:
        transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        theirs_model("sdpa")

    print(f"SmolLM2-135M-Instruct (Q4_1 → float32), {args.threads} threads, minimum of {repeats}")
    print("| measure | ours | transformers | ratio | target |")
    print("|---|---:|---:|---:|---|", flush=True)
    rows = Rows()
    load = best_seconds([("ours", SMOLLM2.load), ("theirs", theirs_load)], max(1, repeats // 2))
    rows.append(("load the GGUF (s)", load["ours"], load["theirs"], "s"))

    ours = SMOLLM2.load().model.eval()
    eager, sdpa = theirs_model("eager"), theirs_model("sdpa")
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        prompt = torch.randint(100, 40000, (1, PROMPT), generator=generator)
        decode = best_seconds(
            [
                (
                    "ours",
                    lambda: greedy_batch(
                        ours, prompts=prompt, eos_id=None, max_new_tokens=new_tokens
                    ),
                ),
                (
                    "theirs",
                    lambda: sdpa.generate(
                        prompt,
                        max_new_tokens=new_tokens,
                        min_new_tokens=new_tokens,
                        do_sample=False,
                    ),
                ),
            ],
            repeats,
        )
        per_token = {name: 1000 * seconds / new_tokens for name, seconds in decode.items()}
        rows.append(
            ("decode, ms/token (greedy, cached)", per_token["ours"], per_token["theirs"], "ms")
        )
        for length in LENGTHS:
            ids = torch.randint(100, 40000, (1, length), generator=generator)
            times = best_seconds(
                [
                    ("capture", lambda ids=ids: _with_logits(ours(tgt=ids, capture=True))),
                    ("eager", lambda ids=ids: eager(ids, output_attentions=True)),
                    ("fast", lambda ids=ids: ours(tgt=ids)),
                    ("sdpa", lambda ids=ids: sdpa(ids)),
                ],
                repeats,
            )
            rows.append(
                (
                    f"prefill {length}, capture vs eager+attentions (ms)",
                    1000 * times["capture"],
                    1000 * times["eager"],
                    "ms",
                )
            )
            rows.append(
                (
                    f"prefill {length}, fast path vs sdpa (ms)",
                    1000 * times["fast"],
                    1000 * times["sdpa"],
                    "ms",
                )
            )


if __name__ == "__main__":
    main()
