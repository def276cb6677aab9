"""Evaluate a checkpoint on its task's test split (regenerated from the recorded seed).

    python -m transformer.evaluate assets/models/reverse

The last line printed is JSON with the metrics (``exact_match`` is a fraction in 0..1).
"""

from __future__ import annotations

import argparse
import json
import sys

from .checkpoint import CheckpointError, load_checkpoint
from .device import DEVICE_CHOICES, pick_device
from .evaluation import evaluate_model
from .tasks import make_task


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: evaluate a checkpoint and print its metrics."""
    parser = argparse.ArgumentParser(description="Evaluate a checkpoint on its task's test split.")
    parser.add_argument("checkpoint", help="checkpoint folder")
    parser.add_argument("--split", choices=("test", "validation"), default="test")
    parser.add_argument("--limit", type=int, help="evaluate only the first N examples")
    parser.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    args = parser.parse_args(argv)
    try:
        checkpoint = load_checkpoint(args.checkpoint, pick_device(args.device))
    except CheckpointError as error:
        sys.exit(f"error: {error}")
    info = checkpoint.info
    task = make_task(info["task"], seed=info.get("task_seed", 0), n_train=info.get("task_n_train"))
    examples = getattr(task, args.split)
    if args.limit:
        examples = examples[: args.limit]
    metrics = evaluate_model(
        checkpoint.model, checkpoint.tokenizer, examples, checkpoint.config.architecture
    )
    print(f"{args.checkpoint}: task {info['task']}, {args.split} split, {len(examples)} examples")
    for name, value in metrics.items():
        print(f"  {name:20} {value:.4f}" if isinstance(value, float) else f"  {name:20} {value}")
    print(json.dumps(metrics))


if __name__ == "__main__":
    main()
