"""Zero ablation of every head of SmolLM2-135M-Instruct, ours against plain forward hooks on
``transformers``' ``LlamaForCausalLM`` with the same weights, in one run.

The text: "The famous Eiffel Tower is located in the beautiful city of Paris" (13 tokens); for
each of the 30 layers × 9 heads, that head's output (its slice of the output projection's
input) set to zero, and the text's mean next-token loss read (270 ablated runs).

- **ours**: :func:`transformer.head_ablation` (``how="zero"``): the ablated runs in batches of
  about 512 tokens, each batch run as one row up to its lowest ablated layer and widened there
  (the layers below are the plain run's in every row);
- **hooks**: what TransformerLens's ablation does, with plain hooks: one forward per head, a
  forward pre-hook on that layer's ``o_proj`` zeroing the head's columns.

Each figure is the minimum of ``--repeats`` rounds (the sides alternated); the largest difference
between the results is printed, so the speed is that of the same answer.

Usage: python -m benchmarks.ablation [--repeats N] [--threads N]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.patching import both_models, race
from transformer import head_ablation

TEXT = "The famous Eiffel Tower is located in the beautiful city of Paris"


def hooks_ablation(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Each head zeroed by a forward pre-hook on its layer's ``o_proj``, one forward per head:
    ``(layers, heads)`` of the mean next-token loss's change."""

    def loss() -> float:
        logits = model(ids).logits
        return F.cross_entropy(logits[0, :-1], ids[0, 1:]).item()

    plain = loss()
    config = model.config
    heads, d_head = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    result = torch.empty(len(model.model.layers), heads)
    for i, layer in enumerate(model.model.layers):
        for h in range(heads):

            def zero(m: object, args: tuple, h: int = h) -> tuple:
                x = args[0].clone()
                x[..., h * d_head : (h + 1) * d_head] = 0.0
                return (x, *args[1:])

            handle = layer.self_attn.o_proj.register_forward_pre_hook(zero)
            result[i, h] = loss() - plain
            handle.remove()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads, both sides")
    args = parser.parse_args()
    ours, theirs, tokens = both_models(args.threads)
    ids = tokens(TEXT)
    sides: list[tuple[str, Callable[[], torch.Tensor]]] = [
        ("ours", lambda: head_ablation(ours, ids)),
        ("hooks", lambda: hooks_ablation(theirs, ids)),
    ]
    headline = (
        f"SmolLM2-135M-Instruct, 30 layers × 9 heads = 270 ablated runs of {ids.size(1)} tokens"
    )
    race(sides, args.repeats, args.threads, headline, "ablation", "nats")


if __name__ == "__main__":
    main()
