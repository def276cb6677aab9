"""How each bundled model is built: its task, tokenizer, model shape and training settings.

``python -m transformer train --task NAME`` follows these recipes, and so does the app's live
training, so a bundled checkpoint can always be rebuilt from code.
"""

from __future__ import annotations

import hashlib
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..core.config import ModelConfig
from ..core.model import Transformer, count_parameters
from ..pretrained.checkpoint import save_checkpoint
from ..text.tokenization import Algorithm, Tokenizer, train_tokenizer
from .data import encode_examples
from .evaluation import evaluate_model
from .loop import Progress, TrainingConfig, TrainingResult, train
from .rng import seeded_global_rng
from .tasks import TASKS, TaskData, make_task, task_corpus

SAMPLE_SIZE = 200


@dataclass(frozen=True)
class Recipe:
    """A bundled model's recipe. ``model`` vocabulary sizes are filled from the tokenizer."""

    task: str
    tokenizer_algorithm: Algorithm
    tokenizer_vocab_size: int
    model: ModelConfig
    training: TrainingConfig
    n_train: int = 20000

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; valid tasks: {', '.join(TASKS)}")


# What every bundled model shares; _recipe sets the stacks, build_model the tokenizer's vocabulary.
_BUNDLED_SHAPE = ModelConfig(d_model=64, n_heads=4, d_ff=256, max_len=512)


def _recipe(
    task: str,
    algorithm: Algorithm,
    vocab_size: int,
    layers: tuple[int, int],
    steps: int,
    every: int,
) -> Recipe:
    """A bundled model's recipe: ``layers`` = (encoder, decoder) layers, no encoder making it
    decoder-only; trained ``steps`` steps of 64 pairs after 400 warm-up steps, evaluated
    ``every`` steps."""
    encoders, decoders = layers
    model = _BUNDLED_SHAPE.replace(
        architecture="encoder-decoder" if encoders else "decoder-only",
        n_encoder_layers=encoders,
        n_decoder_layers=decoders,
    )
    training = TrainingConfig(steps=steps, batch_size=64, warmup_steps=400, eval_every=every)
    return Recipe(task, algorithm, vocab_size, model, training)


RECIPES: dict[str, Recipe] = {
    recipe.task: recipe
    for recipe in (
        _recipe("reverse", "wordpiece", 64, layers=(2, 2), steps=6000, every=500),
        _recipe("translate", "bpe", 200, layers=(3, 3), steps=4000, every=250),
        _recipe("continue", "unigram", 200, layers=(0, 3), steps=3000, every=250),
    )
}
"""The recipe of each task in :data:`~transformer.training.tasks.TASKS`, by task name."""


def task_digest(task: TaskData) -> str:
    """SHA-256 of every example of every split: a checkpoint records it, so anyone can check
    that ``make_task`` still regenerates the data the model was trained on."""
    digest = hashlib.sha256()
    for split in (task.train, task.validation, task.test):
        for example in split:
            digest.update(f"{example.source}\t{example.target}\n".encode())
    return digest.hexdigest()


def build_tokenizer(recipe: Recipe, task: TaskData) -> Tokenizer:
    """Train the recipe's tokenizer on the task's training texts."""
    return train_tokenizer(
        task_corpus(task), recipe.tokenizer_algorithm, recipe.tokenizer_vocab_size
    )


def build_model(recipe: Recipe, tokenizer: Tokenizer) -> Transformer:
    """A fresh model whose shared vocabulary is the tokenizer's (embeddings tied)."""
    vocab = tokenizer.vocab_size
    config = recipe.model.replace(
        src_vocab_size=vocab, tgt_vocab_size=vocab, pad_id=tokenizer.pad_id, tie_embeddings=True
    )
    # Initialisation draws from the global generators: seed them for this model only.
    with seeded_global_rng(recipe.training.seed):
        return Transformer(config)


def run_recipe(
    recipe: Recipe,
    out: str | Path | None = None,
    training: TrainingConfig | None = None,
    callback: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    show_progress_bar: bool = False,
    test_limit: int | None = None,
) -> tuple[Transformer, Tokenizer, TrainingResult, dict[str, Any]]:
    """Generate the task, train its tokenizer and model, evaluate on the test split and, with
    ``out``, save the checkpoint folder. Returns the model, tokenizer, training result and metrics."""
    training = training or recipe.training
    task = make_task(recipe.task, seed=training.seed, n_train=recipe.n_train)
    tokenizer = build_tokenizer(recipe, task)
    model = build_model(recipe, tokenizer)
    architecture = model.config.architecture
    train_pairs = encode_examples(task.train, tokenizer, architecture)
    validation_pairs = encode_examples(task.validation, tokenizer, architecture)
    result = train(
        model,
        train_pairs,
        training,
        validation_pairs,
        callback=callback,
        should_stop=should_stop,
        show_progress_bar=show_progress_bar,
    )
    test = task.test[:test_limit] if test_limit else task.test
    metrics: dict[str, Any] = evaluate_model(model, tokenizer, test, architecture)
    # The first SAMPLE_SIZE test examples again, on their own: a test re-evaluates exactly these
    # to check that the shipped checkpoint still reproduces what was recorded.
    metrics["sample"] = evaluate_model(model, tokenizer, test[:SAMPLE_SIZE], architecture)
    metrics["steps"] = result.steps_done
    metrics["train_seconds"] = round(result.seconds, 1)
    metrics["parameters"] = count_parameters(model)
    if out is not None:
        info = {
            "task": recipe.task,
            "task_seed": training.seed,
            "task_n_train": recipe.n_train,
            "data_sha256": task_digest(task),
            "tokenizer": {
                "algorithm": recipe.tokenizer_algorithm,
                "vocab_size": recipe.tokenizer_vocab_size,
            },
            "training": training.to_dict(),
            "trained_on": {
                "device": str(model.device),
                "torch": torch.__version__,
                "machine": platform.machine(),
                "date": time.strftime("%Y-%m-%d"),
            },
            "history": [
                {"step": p.step, "loss": round(p.loss, 4), **(p.validation or {})}
                for p in result.history
                if p.validation is not None or p.step % 50 == 0
            ],
        }
        save_checkpoint(out, model, tokenizer, metrics, info, result.snapshots)
    return model, tokenizer, result, metrics
