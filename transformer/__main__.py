"""The library's command line: train a bundled model from its recipe, or evaluate a checkpoint.

    python -m transformer train --task reverse --out assets/models/reverse
    python -m transformer evaluate assets/models/reverse

``evaluate`` prints the metrics last, as one line of JSON (``exact_match`` is a fraction in 0..1).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from .core.device import DEVICE_CHOICES, pick_device
from .pretrained.checkpoint import CheckpointError, load_checkpoint
from .training.evaluation import evaluate_model
from .training.recipes import RECIPES, run_recipe
from .training.tasks import make_task


def train_command(args: argparse.Namespace) -> None:
    """Train the recipe ``args.task`` and save the checkpoint to ``args.out``."""
    recipe = RECIPES[args.task]
    changes: dict[str, Any] = {"device": args.device}
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.seed is not None:
        changes["seed"] = args.seed
    training = replace(recipe.training, **changes)
    _, _, _, metrics = run_recipe(recipe, args.out, training, show_progress_bar=True)
    print(f"saved {args.out}")
    print(json.dumps(metrics))


def evaluate_command(args: argparse.Namespace) -> None:
    """Evaluate the checkpoint ``args.checkpoint`` on its task's split, regenerated from its seed."""
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


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the process's arguments) and run the chosen command."""
    parser = argparse.ArgumentParser(
        prog="python -m transformer", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a bundled model from its recipe")
    train.add_argument("--task", required=True, choices=sorted(RECIPES))
    train.add_argument("--out", required=True, help="checkpoint folder to write")
    train.add_argument("--steps", type=int, help="override the recipe's number of steps")
    train.add_argument("--seed", type=int, help="override the recipe's seed")
    train.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    train.set_defaults(run=train_command)
    evaluate = commands.add_parser("evaluate", help="evaluate a checkpoint on its task")
    evaluate.add_argument("checkpoint", help="checkpoint folder")
    evaluate.add_argument("--split", choices=("test", "validation"), default="test")
    evaluate.add_argument("--limit", type=int, help="evaluate only the first N examples")
    evaluate.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    evaluate.set_defaults(run=evaluate_command)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
