"""Train a bundled model from its recipe.

python -m transformer.train --task reverse --out assets/models/reverse
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from .device import DEVICE_CHOICES
from .recipes import RECIPES, run_recipe


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: train a bundled model from its recipe."""
    parser = argparse.ArgumentParser(description="Train a bundled model from its recipe.")
    parser.add_argument("--task", required=True, choices=sorted(RECIPES))
    parser.add_argument("--out", required=True, help="checkpoint folder to write")
    parser.add_argument("--steps", type=int, help="override the recipe's number of steps")
    parser.add_argument("--seed", type=int, help="override the recipe's seed")
    parser.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    args = parser.parse_args(argv)
    recipe = RECIPES[args.task]
    changes = {"device": args.device}
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.seed is not None:
        changes["seed"] = args.seed
    training = replace(recipe.training, **changes)
    _, _, _, metrics = run_recipe(recipe, args.out, training, show_progress_bar=True)
    print(f"saved {args.out}")
    print(json.dumps(metrics))


if __name__ == "__main__":
    main()
