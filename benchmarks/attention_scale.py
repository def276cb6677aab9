"""Attention at scale through the Attention tab's ``/attention_scale`` handler.

SmolLM2-135M at about 2,000 tokens and all-MiniLM-L6-v2 at 512: server time of the first call
(the reduced pass and every figure) and of a redraw from the cached pass (another head, window
and token), the response size (the figures' JSON as gradio sends it), the peak memory the pass
adds (resident memory sampled every 5 ms, over what the loaded model already held), against
``transformers`` eager attention with ``output_attentions=True`` on the same ids (its time and
the memory its forward adds). Ratios are ours / transformers.

Usage: python -m benchmarks.attention_scale [--tokens 2000] [--threads N]
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from transformer.pretrained.shipped import SMOLLM2, shipped_models
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs.attention import scale

PAGE = 4096


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def peak_added(fn: Callable[[], object]) -> tuple[object, float, int]:
    """``fn()``, its seconds and the most resident memory it added (bytes)."""
    gc.collect()
    base = _rss()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    return result, seconds, max(peak[0], _rss()) - base


def text_of(tokenizer, n_tokens: int, add_bos: bool) -> tuple[str, int]:
    """A text of about ``n_tokens`` tokens (the README and docs, repeated) and its length."""
    root = Path(__file__).resolve().parents[1]
    source = " ".join(
        p.read_text(encoding="utf-8") for p in [root / "README.md", *sorted(root.glob("docs/*.md"))]
    )
    ids = tokenizer.encoding(source).ids
    while len(ids) < n_tokens:
        ids = ids + ids
    text = tokenizer.decode(ids[: n_tokens - 2])
    ids = tokenizer.encode_ids(text, add_bos=True) if add_bos else tokenizer.encoding(text).ids
    return text, len(ids)


def response_bytes(figures: tuple) -> int:
    """Bytes of the figures' JSON (what gradio ships for each plot) and the summary."""
    total = 0
    for figure in figures:
        if hasattr(figure, "to_json"):
            total += len(figure.to_json().encode())
        elif isinstance(figure, str):
            total += len(figure.encode())
    return total


def measure(registry: ModelRegistry, name: str, n_tokens: int, reference) -> dict:
    checkpoint = registry.checkpoint(name, None)
    decoder = checkpoint.config.architecture == "decoder-only"
    text, length = text_of(checkpoint.tokenizer, n_tokens, decoder)
    session = SessionModels()
    scale._passes.clear()
    n_heads = checkpoint.config.n_heads
    first, cold_s, added = peak_added(
        lambda: scale.attention_scale(
            registry, text, name, "first", 1, 1, 0, 64, 3, -1, False, session
        )
    )
    start = time.perf_counter()
    again = scale.attention_scale(
        registry, text, name, "entropy", 3, n_heads, length // 2, 128, 5, 10, False, session
    )
    warm_s = time.perf_counter() - start
    ids = (
        checkpoint.tokenizer.encode_ids(text, add_bos=True)
        if decoder
        else checkpoint.tokenizer.encoding(text).ids
    )
    batch = torch.tensor([ids])

    def theirs() -> object:
        with torch.inference_mode():
            return reference(batch, output_attentions=True)

    # Neither side is warmed up: both run once, after their model is loaded.
    out, ref_s, ref_added = peak_added(theirs)
    del out
    gc.collect()
    return {
        "model": name,
        "tokens": length,
        "cold_s": cold_s,
        "warm_s": warm_s,
        "bytes": max(response_bytes(first), response_bytes(again)),
        "added_mb": added / 2**20,
        "ref_s": ref_s,
        "ref_added_mb": ref_added / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    registry = ModelRegistry(torch.device("cpu"))
    minilm = next(m for m in shipped_models() if m.name == "all-MiniLM-L6-v2")
    rows = []
    bert = transformers.AutoModel.from_pretrained(minilm.verify(), attn_implementation="eager")
    rows.append(measure(registry, "all-MiniLM-L6-v2", 512, bert.eval()))
    del bert
    path = SMOLLM2.verify() / SMOLLM2.entry
    llama = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    rows.append(measure(registry, "SmolLM2-135M-Instruct", args.tokens, llama))
    print(f"threads {args.threads}")
    print(
        "| model | tokens | first call s | redraw s | response MB | pass adds MB "
        "| transformers eager s | its forward adds MB | time ratio | memory ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['tokens']:,} | {r['cold_s']:.2f} | {r['warm_s']:.2f} "
            f"| {r['bytes'] / 2**20:.2f} | {r['added_mb']:.0f} | {r['ref_s']:.2f} "
            f"| {r['ref_added_mb']:.0f} | {r['cold_s'] / r['ref_s']:.2f} "
            f"| {r['added_mb'] / max(r['ref_added_mb'], 1):.2f} |"
        )


if __name__ == "__main__":
    main()
