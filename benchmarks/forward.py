"""Forward-pass speed: our Transformer (fast path, and with capture) against torch.nn.Transformer.

Both run the same configuration with the same weights (copied with transformer.core.torch_parity) on
the same padded batch, in eval mode under inference_mode, from token ids to vocabulary logits:
torch.nn's stacks run on our embedded inputs (``reference_forward``) and our generator, so both
include the embeddings, the mask construction and the output projection.

Usage: python -m benchmarks.forward [--quick] [--threads N] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks._timing import elapsed_ms
from transformer.core.config import ModelConfig, base_config
from transformer.core.model import Transformer
from transformer.core.run import TRACE
from transformer.core.torch_parity import copy_from_torch, reference_forward, torch_reference

SMALL = ModelConfig(src_vocab_size=1000, tgt_vocab_size=1000, d_model=64, n_heads=4, d_ff=256)
MEDIUM = SMALL.replace(src_vocab_size=8000, tgt_vocab_size=8000, d_model=256, n_heads=8, d_ff=1024)
SIZES = {  # config, batch, length
    "small (d64, 2+2 layers)": (SMALL, 32, 32),
    "medium (d256, 4+4 layers)": (MEDIUM.replace(n_encoder_layers=4, n_decoder_layers=4), 16, 128),
    "base preset (d512, 6+6 layers)": (base_config(), 8, 64),
}


def padded(batch: int, length: int, vocab: int, device: torch.device) -> torch.Tensor:
    """``(batch, length)`` ids whose rows have different real lengths (so padding is real)."""
    tokens = torch.randint(1, vocab, (batch, length), device=device)
    for row in range(batch):
        real = length - (row * length // (2 * batch))
        tokens[row, real:] = 0
    return tokens


def median_ms(fn, repeats: int, device: torch.device) -> float:
    for _ in range(2):  # warm up
        fn()
    return statistics.median(elapsed_ms(fn, device) for _ in range(repeats))


def measure(
    config: ModelConfig, batch: int, length: int, device: torch.device, repeats: int
) -> tuple[float, float, float]:
    """Median milliseconds of torch.nn, our fast path and our capture path on one batch."""
    torch.manual_seed(0)
    ref = torch_reference(config).to(device).eval()
    model = Transformer(config).to(device).eval()
    copy_from_torch(model, ref)
    src = padded(batch, length, config.src_vocab_size, device)
    tgt = padded(batch, length, config.tgt_vocab_size, device)
    with torch.inference_mode():
        t_ref = median_ms(
            lambda: model.generator(reference_forward(model, ref, src, tgt)[1]), repeats, device
        )
        t_ours = median_ms(lambda: model(src, tgt), repeats, device)
        t_cap = median_ms(lambda: model(src, tgt, call=TRACE), repeats, device)
    return t_ref, t_ours, t_cap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, skip the base preset")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    repeats = 5 if args.quick else 15
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} threads")
    print(
        f"{'size':32} {'batch×len':>10} {'torch.nn ms':>12} {'ours ms':>9} {'ratio':>6} "
        f"{'capture ms':>11} {'ratio':>6}"
    )
    for name, (config, batch, length) in SIZES.items():
        if args.quick and "base" in name:
            continue
        t_ref, t_ours, t_cap = measure(config, batch, length, device, repeats)
        print(
            f"{name:32} {f'{batch}×{length}':>10} {t_ref:12.2f} {t_ours:9.2f} "
            f"{t_ours / t_ref:6.2f} {t_cap:11.2f} {t_cap / t_ref:6.2f}"
        )
    print("targets: fast path ≤ 1.10× torch.nn.Transformer, capture ≤ 2.00×")


if __name__ == "__main__":
    main()
