"""B students' decoding steps one by one against one batched step, on SmolLM2's shape.

SmolLM2-135M's shape (30 layers, d_model 576, 9 query and 3 key/value heads, 49,152 tokens)
with random weights: the time of a step depends on the shape, not on the numbers. B sessions,
each with its own prompt (8 to 63 tokens, so their caches differ in length), take their first
step alone; then, alternately, every session steps once by itself (``session.step()``, B
forwards) and every session steps once together (:func:`~transformer.generation.step_together`,
one forward). Two kinds of step:

- ``forward``: the model's pass only, as a session without capture runs it;
- ``as Generate``: the step the app takes (attention captured, the logit lens and the residual
  stream recorded per session: the lens projects every layer onto the vocabulary, per session,
  after the shared pass, so it is not batched).

Each figure is the median of ``--repeats`` rounds; ``speed-up`` is one-by-one / batched (above
1: batching wins). A launch-bound GPU should gain most; a 2-core CPU gains little (each row's
arithmetic costs the same together). Run it on the device the app serves from.

Usage: python -m benchmarks.batching [--device cpu|cuda] [--batches 1,4,16,64] [--repeats 3]
       [--dtype float32|bfloat16] [--modes forward,generate]
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from benchmarks._timing import elapsed_ms
from benchmarks.real_sizes import SHAPES
from transformer.core.model import Transformer
from transformer.generation import DecodingSession, DecodingSettings, step_together
from transformer.pretrained.llama import config_from_hf

SMOLLM2_SHAPE = config_from_hf({"model_type": "llama", **SHAPES["SmolLM2-135M"]})
"""SmolLM2-135M's shape, read by the Llama loader from the config.json sizes that
:mod:`benchmarks.real_sizes` lists (the model the app ships); weights drawn at random."""


def sessions_for(
    model: Transformer, batch: int, captured: bool, steps: int
) -> list[DecodingSession]:
    """``batch`` greedy sessions, prompts of 8..63 tokens, each past its first (prefill) step."""
    settings = DecodingSettings(
        max_new_tokens=steps + 1, capture_attention=captured, capture_lens=captured
    )
    generator = torch.Generator().manual_seed(batch)
    out = []
    for i in range(batch):
        length = 8 + (i * 13) % 56
        prompt = torch.randint(3, model.config.tgt_vocab_size, (length,), generator=generator)
        session = DecodingSession(model, prompt.tolist(), settings, eos_id=None)
        session.step()
        out.append(session)
    return out


def measure(
    model: Transformer, batch: int, captured: bool, repeats: int, device: torch.device
) -> tuple[float, float]:
    """Median ms of B one-by-one steps and of one batched step (alternated)."""
    sessions = sessions_for(model, batch, captured, 2 * repeats + 2)
    step_together(sessions)  # warm-up of the batched shapes
    alone, together = [], []
    for _ in range(repeats):

        def one_by_one() -> None:
            for session in sessions:
                session.step()

        alone.append(elapsed_ms(one_by_one, device))
        together.append(elapsed_ms(lambda: step_together(sessions), device))
    return statistics.median(alone), statistics.median(together)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batches", default="1,4,16,64", help="comma-separated B")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--modes", default="forward,generate", help="forward, generate or both")
    parser.add_argument("--layers", type=int, default=30, help="fewer for a quick look")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch sees no CUDA device")
    torch.manual_seed(0)
    config = SMOLLM2_SHAPE.replace(n_decoder_layers=args.layers)
    model = Transformer(config).eval().to(device, getattr(torch, args.dtype))
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"SmolLM2 shape ({args.layers} layers), random weights, {args.dtype} on {device}"
        f"{'' if device.type == 'cuda' else f', {torch.get_num_threads()} threads'}; "
        f"load average {load:.2f}; median of {args.repeats}"
    )
    print(f"{'mode':<12} {'B':>4} {'B one-by-one ms':>16} {'1 batched ms':>13} {'speed-up':>9}")
    rows = []
    for mode in modes:
        if mode not in ("forward", "generate"):
            raise SystemExit(f"--modes takes forward and generate, not {mode!r}")
        for batch in batches:
            alone, together = measure(model, batch, mode == "generate", args.repeats, device)
            ratio = alone / together
            name = "forward" if mode == "forward" else "as Generate"
            print(f"{name:<12} {batch:>4} {alone:>16.1f} {together:>13.1f} {ratio:>8.2f}×")
            rows.append(dict(mode=mode, batch=batch, alone_ms=alone, together_ms=together))
    return rows


if __name__ == "__main__":
    main()
