"""SmolLM2-135M-Instruct against ``transformers`` on the same weights, measured in one run.

Both models come from the same shipped GGUF file (``transformers`` loads it with
``from_pretrained(folder, gguf_file=...)``, dequantized to float32 like ours) and run on the CPU
with the same number of threads, under ``torch.inference_mode``:

1. **decode**: ms per generated token, greedy, 64 new tokens after an 8-token prompt, with the
   key/value cache: ours ``greedy_batch`` (the loop a greedy ``DecodingSession`` steps) against
   ``model.generate(do_sample=False)``;
2. **prefill with capture** at 128 and 512 tokens: ours ``model(tgt=ids, call=TRACE)`` (the
   trace the Attention and Inside views draw) with its logits read (a trace computes them when
   read, so that both sides give the same: every layer's attention weights and the logits)
   against ``attn_implementation="eager"`` with ``output_attentions=True``; and the **fast
   path** ``model(tgt=ids)`` against ``"sdpa"``;
3. **load**: :meth:`SMOLLM2.load <transformer.pretrained.shipped.ShippedModel.load>` (sha256,
   header, dequantize, un-permute, tokenizer, model) against ``AutoTokenizer`` +
   ``AutoModelForCausalLM`` from the same file.

The machine is shared, so each figure is the *minimum* of ``--repeats`` runs, ours and theirs
alternated; ratios are ours / transformers (≤ 1.0 means ours is as fast or faster), and the
verdict is the minima's. Beside it, the median of the ratios of each round's two calls shows
how far a single round strays (page faults, which depend on which call freed memory just
before, move a capture by 10–30 % on this machine). Targets: decode, prefill with
capture and the fast path ≤ 1.0×; load ≤ 10 s on 2 cores.

``--memory`` sets the allocator's state each call starts from, the same for both sides (glibc):

- ``glibc`` (default): glibc's defaults, which the app runs while it works; a call reuses what
  the call before it freed, or gets fresh pages, depending on the sizes and the order;
- ``kept``: freed memory is never given back (no mmap, a 1 GB trim threshold), so every call
  after the first reuses warm pages: the arithmetic alone;
- ``trimmed``: ``malloc_trim(0)`` before each call, as the app's idle trim leaves the server
  when a student clicks after a quiet second: every call faults in what it writes.

Usage: python -m benchmarks.smollm2 [--repeats N] [--threads N] [--quick] [--memory MODE]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from collections.abc import Callable

import torch

from transformer.core.run import TRACE
from transformer.core.trace import Trace
from transformer.generation.loop import greedy_batch
from transformer.pretrained.shipped import SMOLLM2

PROMPT, NEW_TOKENS = 8, 64
LENGTHS = (128, 512)
LOAD_TARGET_S = 10.0


M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


def keep_freed_memory(libc: ctypes.CDLL) -> None:
    """glibc never gives freed memory back to the system in this process (``--memory kept``)."""
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)


def timed(
    pairs: list[tuple[str, Callable[[], object]]],
    repeats: int,
    before: Callable[[], object] = lambda: None,
) -> dict[str, list[float]]:
    """Wall times of each named function, the functions alternated ``repeats`` times (after one
    warm-up call each), ``before`` run untimed before each call: ``{name: [seconds of round 1,
    round 2, …]}``."""
    for _name, fn in pairs:
        fn()
    times: dict[str, list[float]] = {name: [] for name, _ in pairs}
    for _ in range(repeats):
        for name, fn in pairs:
            before()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def _with_logits(trace: Trace) -> tuple[Trace, torch.Tensor]:
    """A captured pass and its logits, which a trace computes when read."""
    return trace, trace.logits


def verdict(ratio: float, target: float = 1.0) -> str:
    return "met" if ratio <= target else "MISSED"


class Rows:
    """The result table, each row printed as soon as it is measured (a slow machine's run can
    be read while it goes on)."""

    def append(self, what: str, mine: list[float], theirs: list[float], scale: float) -> None:
        """One row from both sides' times in seconds (``scale`` converts them to the unit)."""
        ratio = min(mine) / min(theirs)
        spread = statistics.median(m / t for m, t in zip(mine, theirs, strict=True))
        if what.startswith("load"):
            target = f"≤ {LOAD_TARGET_S:.0f} s: {verdict(min(mine), LOAD_TARGET_S)}"
        else:
            target = f"≤ 1.0×: {verdict(ratio)}"
        print(
            f"| {what} | {scale * min(mine):.1f} | {scale * min(theirs):.1f} | {ratio:.3f} "
            f"| {spread:.2f} | {target} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="torch threads, both sides")
    parser.add_argument("--quick", action="store_true", help="2 repeats, 16 new tokens")
    parser.add_argument(
        "--memory",
        choices=("glibc", "kept", "trimmed"),
        default="glibc",
        help="the allocator's state each call starts from (see the module's docstring)",
    )
    args = parser.parse_args()
    libc = None
    if args.memory != "glibc":
        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            parser.error(f"--memory {args.memory} needs glibc (Linux)")
        if args.memory == "kept":
            keep_freed_memory(libc)

    def before() -> None:
        if libc is not None and args.memory == "trimmed":
            libc.malloc_trim(0)

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

    print(
        f"SmolLM2-135M-Instruct (Q4_1 → float32), {args.threads} threads, minimum of {repeats}, "
        f"memory: {args.memory}"
    )
    print("| measure | ours | transformers | ratio | median of rounds' ratios | target |")
    print("|---|---:|---:|---:|---:|---|", flush=True)
    rows = Rows()
    load = timed([("ours", SMOLLM2.load), ("theirs", theirs_load)], max(1, repeats // 2))
    rows.append("load the GGUF (s)", load["ours"], load["theirs"], 1)

    ours = SMOLLM2.load().model.eval()
    eager, sdpa = theirs_model("eager"), theirs_model("sdpa")
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        prompt = torch.randint(100, 40000, (1, PROMPT), generator=generator)
        decode = timed(
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
            before,
        )
        rows.append(
            "decode, ms/token (greedy, cached)", decode["ours"], decode["theirs"], 1000 / new_tokens
        )
        for length in LENGTHS:
            ids = torch.randint(100, 40000, (1, length), generator=generator)
            times = timed(
                [
                    ("capture", lambda ids=ids: _with_logits(ours(tgt=ids, call=TRACE))),
                    ("eager", lambda ids=ids: eager(ids, output_attentions=True)),
                    ("fast", lambda ids=ids: ours(tgt=ids)),
                    ("sdpa", lambda ids=ids: sdpa(ids)),
                ],
                repeats,
                before,
            )
            rows.append(
                f"prefill {length}, capture vs eager+attentions (ms)",
                times["capture"],
                times["eager"],
                1000,
            )
            rows.append(
                f"prefill {length}, fast path vs sdpa (ms)", times["fast"], times["sdpa"], 1000
            )


if __name__ == "__main__":
    main()
