"""Training throughput against torch.nn.Transformer, and the time to reach the reversal target.

1. The same loop (Adam, label smoothing 0.1, gradient clipping, the same batches) runs our
   Transformer and a torch.nn.Transformer with the same configuration (embeddings, sinusoidal
   encodings and generator built the same way around it), alternating step by step so both see
   the same machine load. Prints target tokens per second and the ratio.
2. Trains the bundled reversal recipe, checking greedy exact match on validation examples every
   250 steps, and prints the wall time until it reaches 99%.

Usage: python -m benchmarks.train [--quick] [--steps N] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import Tensor, nn

from transformer.core.config import ModelConfig
from transformer.core.embeddings import sinusoidal_table
from transformer.core.masks import causal_mask, to_torch_nn_mask
from transformer.core.torch_parity import torch_reference
from transformer.training.data import Batch, batches, encode_examples
from transformer.training.evaluation import exact_match, sequence_loss
from transformer.training.loop import Progress, train
from transformer.training.recipes import RECIPES, build_model, build_tokenizer
from transformer.training.tasks import make_task


class TorchNNSeq2Seq(nn.Module):
    """torch.nn.Transformer wrapped with the same embedding, positions and generator as ours."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.src_vocab_size, config.d_model, config.pad_id)
        self.register_buffer(
            "pe", sinusoidal_table(config.max_len, config.d_model), persistent=False
        )
        self.dropout = nn.Dropout(config.dropout)
        self.core = torch_reference(config)
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size)
        self.generator.weight = self.embedding.weight  # tied, as ours

    def embed(self, tokens: Tensor) -> Tensor:
        x = self.embedding(tokens) * math.sqrt(self.config.d_model)
        return self.dropout(x + self.pe[: tokens.size(1)])

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        pad = self.config.pad_id
        future = to_torch_nn_mask(causal_mask(tgt.size(1), device=tgt.device)[0, 0])
        out = self.core(
            self.embed(src),
            self.embed(tgt),
            tgt_mask=future,
            src_key_padding_mask=src == pad,
            tgt_key_padding_mask=tgt == pad,
            memory_key_padding_mask=src == pad,
        )
        return self.generator(out)


def step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, pad_id: int) -> None:
    logits = model(batch.src, batch.tgt_in)
    loss = sequence_loss(logits, batch.tgt_out, pad_id, 0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def throughput(steps: int, device: torch.device) -> None:
    recipe = RECIPES["translate"]
    task = make_task("translate", n_train=4000, n_validation=10, n_test=10)
    tokenizer = build_tokenizer(recipe, task)
    ours = build_model(recipe, tokenizer).to(device).train()
    reference = TorchNNSeq2Seq(ours.config).to(device).train()
    pad_id = ours.config.pad_id
    data = batches(encode_examples(task.train, tokenizer, "encoder-decoder"), 64, pad_id)
    optimizers = {
        name: torch.optim.Adam(m.parameters(), lr=1e-4)
        for name, m in (("ours", ours), ("torch.nn", reference))
    }
    models = {"ours": ours, "torch.nn": reference}
    seconds = dict.fromkeys(models, 0.0)
    tokens = 0
    for i in range(steps + 3):
        batch = data[i % len(data)].to(device)
        for name, model in models.items():  # alternate, so both see the same load
            start = time.perf_counter()
            step(model, optimizers[name], batch, pad_id)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= 3:  # warm-up steps are not counted
                seconds[name] += time.perf_counter() - start
        if i >= 3:
            tokens += batch.n_tokens
    rate = {name: tokens / s for name, s in seconds.items()}
    print(
        f"training throughput, translate recipe (d_model {ours.config.d_model}, "
        f"{ours.config.n_encoder_layers}+{ours.config.n_decoder_layers} layers, batch 64), {steps} steps:"
    )
    for name, value in rate.items():
        print(f"  {name:9} {value:10,.0f} target tokens/s")
    print(f"  ratio ours/torch.nn: {rate['ours'] / rate['torch.nn']:.2f} (higher is faster)")


def time_to_target(device: torch.device, target: float = 0.99) -> None:
    recipe = RECIPES["reverse"]
    task = make_task("reverse", n_train=recipe.n_train)
    tokenizer = build_tokenizer(recipe, task)
    model = build_model(recipe, tokenizer)
    pairs = encode_examples(task.train, tokenizer, "encoder-decoder")
    check = encode_examples(task.validation[:300], tokenizer, "encoder-decoder")
    reached: dict[str, float] = {}

    def callback(report: Progress) -> None:
        if report.step % 250 == 0 and not reached:
            score = exact_match(model, check, tokenizer.bos_id, tokenizer.eos_id)
            model.train()
            print(f"  step {report.step:5}: exact match {score:.3f} after {report.elapsed:6.1f} s")
            if score >= target:
                reached.update(step=report.step, seconds=report.elapsed)

    config = recipe.training.__class__(**{**recipe.training.to_dict(), "device": str(device)})
    train(model, pairs, config, callback=callback, should_stop=lambda: bool(reached))
    if reached:
        print(
            f"reversal reached {target:.0%} exact match at step {reached['step']} "
            f"in {reached['seconds']:.0f} s of training on {device} ({torch.get_num_threads()} threads)"
        )
    else:
        print(f"reversal did not reach {target:.0%} within {config.steps} steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="throughput only, fewer steps")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} threads")
    throughput(20 if args.quick else args.steps, device)
    if not args.quick:
        time_to_target(device)


if __name__ == "__main__":
    main()
