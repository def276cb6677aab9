"""A full residual activation-patching sweep of SmolLM2-135M-Instruct, ours against plain
forward hooks on ``transformers``' ``LlamaForCausalLM`` with the same weights, in one run.

The sweep: the clean prompt "The famous Eiffel Tower is located in the beautiful city of" and
the corrupted "The famous Colosseum is located in the beautiful city of" (12 tokens each), the
metric the logit difference " Paris" − " Rome" at the last position; for each of the 30 layers
and each of the 12 positions, the clean run's residual stream entering that layer at that
position is written into the corrupted run (360 patched runs).

- **ours**: :func:`transformer.activation_patching` (``site="residual"``), which runs the
  patched prompts in batches through the pass's own patch point;
- **ours, one run per patch** (``--unbatched``): the same with ``batch_size=1``, to show what
  batching buys;
- **hooks**: what TransformerLens's patching does, written with plain hooks: the clean
  activations recorded by a forward pre-hook on each decoder layer, then one forward per
  (layer, position) with a pre-hook that writes the clean position in
  (``attn_implementation="sdpa"``).

Both models come from the shipped GGUF file (``transformers`` loads it with
``from_pretrained(folder, gguf_file=...)``, dequantized to float32 like ours). Each figure is
the minimum of ``--repeats`` rounds (the sides alternated); the largest difference between the
two sweeps' results is printed as well, so the speed is that of the same answer.

Usage: python -m benchmarks.patching [--repeats N] [--threads N] [--unbatched]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch

from transformer import activation_patching
from transformer.pretrained.shipped import SMOLLM2

CLEAN = "The famous Eiffel Tower is located in the beautiful city of"
CORRUPTED = "The famous Colosseum is located in the beautiful city of"
ANSWERS = (" Paris", " Rome")


def hooks_sweep(
    model: torch.nn.Module, clean: torch.Tensor, corrupted: torch.Tensor, answer: int, wrong: int
) -> torch.Tensor:
    """The sweep by plain forward pre-hooks on ``transformers``' decoder layers, one forward
    per (layer, position): ``(layers, positions)``."""
    layers = model.model.layers
    cache: dict[int, torch.Tensor] = {}

    def hidden(args: tuple, kwargs: dict) -> torch.Tensor:
        return args[0] if args else kwargs["hidden_states"]

    def replaced(args: tuple, kwargs: dict, x: torch.Tensor) -> tuple[tuple, dict]:
        return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

    def metric(ids: torch.Tensor) -> float:
        logits = model(ids).logits
        return float(logits[0, -1, answer] - logits[0, -1, wrong])

    handles = [
        layer.register_forward_pre_hook(
            lambda m, a, k, i=i: cache.__setitem__(i, hidden(a, k).clone()), with_kwargs=True
        )
        for i, layer in enumerate(layers)
    ]
    clean_metric = metric(clean)
    for handle in handles:
        handle.remove()
    corrupted_metric = metric(corrupted)
    result = torch.empty(len(layers), clean.size(1))
    for i, layer in enumerate(layers):
        for p in range(clean.size(1)):

            def patch(m: object, a: tuple, k: dict, i: int = i, p: int = p) -> tuple[tuple, dict]:
                x = hidden(a, k).clone()
                x[:, p] = cache[i][:, p]
                return replaced(a, k, x)

            handle = layer.register_forward_pre_hook(patch, with_kwargs=True)
            result[i, p] = (metric(corrupted) - corrupted_metric) / (
                clean_metric - corrupted_metric
            )
            handle.remove()
    return result


def both_models(threads: int) -> tuple[torch.nn.Module, torch.nn.Module, Callable]:
    """SmolLM2 as ours and as ``transformers``' (both from the shipped GGUF, float32, on
    ``threads`` torch threads), and the text → ``(1, T)`` ids function of its tokenizer."""
    torch.set_num_threads(threads)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    loaded = SMOLLM2.load()
    path = SMOLLM2.verify() / SMOLLM2.entry
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, torch_dtype=torch.float32, attn_implementation="sdpa"
    ).eval()

    def ids(text: str) -> torch.Tensor:
        return torch.tensor([[record.id for record in loaded.tokenizer.encode(text)]])

    return loaded.model.eval(), theirs, ids


def race(
    sides: list[tuple[str, Callable[[], torch.Tensor]]],
    repeats: int,
    threads: int,
    headline: str,
    what: str,
    unit: str,
) -> None:
    """Run each side ``repeats`` times, alternated, and print the table of their fastest times
    against the side named "hooks", and the largest difference from the hooks' result."""
    results: dict[str, torch.Tensor] = {}
    times: dict[str, list[float]] = {name: [] for name, _ in sides}
    print(
        f"{headline}, {threads} threads, minimum of {repeats}; load average at start "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )
    with torch.inference_mode():
        for _ in range(repeats):
            for name, sweep in sides:
                start = time.perf_counter()
                results[name] = sweep()
                times[name].append(time.perf_counter() - start)
    hooks = min(times["hooks"])
    print(f"| {what} | seconds | ratio to hooks |")
    print("|---|---:|---:|")
    for name, _ in sides:
        print(f"| {name} | {min(times[name]):.2f} | {min(times[name]) / hooks:.2f} |")
    gap = max((results[name] - results["hooks"]).abs().max().item() for name, _ in sides)
    print(f"largest difference from the hooks' result: {gap:.1e} {unit}")
    print(f"load average at end {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads, both sides")
    parser.add_argument("--unbatched", action="store_true", help="also ours, one run per patch")
    args = parser.parse_args()
    ours, theirs, ids = both_models(args.threads)
    clean, corrupted = ids(CLEAN), ids(CORRUPTED)
    assert clean.shape == corrupted.shape == (1, 12), (clean.shape, corrupted.shape)
    answer, wrong = (int(ids(a)[0, 0]) for a in ANSWERS)
    sides: list[tuple[str, Callable[[], torch.Tensor]]] = [
        ("ours", lambda: activation_patching(ours, clean, corrupted, answer, wrong)),
        ("hooks", lambda: hooks_sweep(theirs, clean, corrupted, answer, wrong)),
    ]
    if args.unbatched:
        sides.insert(
            1,
            (
                "ours, one run per patch",
                lambda: activation_patching(ours, clean, corrupted, answer, wrong, batch_size=1),
            ),
        )
    headline = "SmolLM2-135M-Instruct, 30 layers × 12 positions = 360 patched runs"
    race(sides, args.repeats, args.threads, headline, "sweep", "(of the metric's 0–1 range)")


if __name__ == "__main__":
    main()
