"""The models students use, at their real sizes: random weights of real shapes, saved as Hugging
Face publishes them (bfloat16, in shards), opened by ours and by ``transformers``, measured in one
run.

Shapes (sizes from each model's ``config.json``; every one built as a Llama-architecture model,
since the figures here are about size, not about each family's details): SmolLM2-135M,
Llama-3.2-1B (its ``rope_scaling`` left out), Qwen3-4B (its sizes, with 20 heads of 128 instead
of 32 query heads of 128 over a 2,560-wide stream, which our config cannot say yet, and no
QK-norm) and Llama-3.1-8B. On the CPU only the shapes whose weights fit three times in the free
RAM are run (ours, transformers' and the work of a pass), unless ``--shapes`` names them.

For each shape, ours against ``transformers`` on the same folder and device, in the same dtype
(``--dtype``: ``auto`` is float32 on a CPU, bfloat16 on a GPU), under ``torch.inference_mode``:

- **load**: ``load_pretrained`` against ``AutoModelForCausalLM.from_pretrained``, seconds, and
  the memory each holds after (resident memory added on a CPU, allocated memory on a GPU);
- **prefill with capture** at ``--tokens``: ``model(tgt=ids, call=TRACE)`` with its logits
  read, against eager attention with ``output_attentions=True``;
- **fast path**: ``model(tgt=ids)`` against ``sdpa``;
- **decode**: ms per token of greedy decoding with the key/value cache (``greedy_batch``)
  against ``generate(do_sample=False)``, 32 tokens after an 8-token prompt;
- **long-input view** at ``--long`` tokens (2,000): the Attention tab's at-scale handler (the
  reduced pass and every figure) against one eager forward with ``output_attentions=True``.

Each time is the minimum of ``--repeats`` calls, ours and theirs alternated; a ratio is
ours / transformers (≤ 1.0: ours as fast or faster).

Usage: python -m benchmarks.real_sizes [--shapes SmolLM2-135M ...] [--device cpu|cuda]
       [--dtype auto|float32|bfloat16|float16] [--tokens 512] [--long 2000] [--repeats 3]
       [--folder DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from benchmarks._timing import elapsed_ms
from transformer.core.device import format_bytes, free_memory, pick_device, resolve_dtype
from transformer.core.run import TRACE
from transformer.generation.loop import greedy_batch
from transformer.pretrained import load_pretrained

_COLUMNS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "tie_word_embeddings",
    "rope_theta",
    "max_position_embeddings",
    "rms_norm_eps",
)
# One row a model, as its model card's table: the same ten numbers in the order of _COLUMNS.
_ROWS = {
    #                  hidden  ff     layers heads kv  vocab   tied   rope_theta max_pos eps
    "SmolLM2-135M":  (576,   1536,  30,    9,    3,  49152,  True,  100000.0,  8192,   1e-5),
    "Llama-3.2-1B":  (2048,  8192,  16,    32,   8,  128256, True,  500000.0,  131072, 1e-5),
    "Qwen3-4B":      (2560,  9728,  36,    20,   4,  151936, True,  1000000.0, 40960,  1e-6),
    "Llama-3.1-8B":  (4096,  14336, 32,    32,   8,  128256, False, 500000.0,  131072, 1e-5),
}  # fmt: skip
SHAPES: dict[str, dict[str, Any]] = {
    name: dict(zip(_COLUMNS, row, strict=True)) for name, row in _ROWS.items()
}
"""Each shape's ``transformers.LlamaConfig`` arguments."""

PROMPT, NEW_TOKENS = 8, 32
SHARD_BYTES = 2 * 10**9  # transformers' own default is 5 GB; smaller shards, more of them


def parameter_shapes(hf: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Hugging Face Llama checkpoint of config ``hf``, by name."""
    d, ff, vocab = hf["hidden_size"], hf["intermediate_size"], hf["vocab_size"]
    d_head = d // hf["num_attention_heads"]
    kv = hf["num_key_value_heads"] * d_head
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, d)}
    for i in range(hf["num_hidden_layers"]):
        layer = f"model.layers.{i}"
        shapes |= {
            f"{layer}.input_layernorm.weight": (d,),
            f"{layer}.self_attn.q_proj.weight": (d, d),
            f"{layer}.self_attn.k_proj.weight": (kv, d),
            f"{layer}.self_attn.v_proj.weight": (kv, d),
            f"{layer}.self_attn.o_proj.weight": (d, d),
            f"{layer}.post_attention_layernorm.weight": (d,),
            f"{layer}.mlp.gate_proj.weight": (ff, d),
            f"{layer}.mlp.up_proj.weight": (ff, d),
            f"{layer}.mlp.down_proj.weight": (d, ff),
        }
    shapes["model.norm.weight"] = (d,)
    if not hf["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (vocab, d)
    return shapes


def weights_bytes(hf: dict[str, Any], dtype: torch.dtype) -> int:
    """Bytes of the checkpoint's weights as ``dtype``."""
    count = 0
    for shape in parameter_shapes(hf).values():
        n = 1
        for size in shape:
            n *= size
        count += n
    return count * dtype.itemsize


def write_folder(folder: Path, name: str) -> Path:
    """A random model of shape ``name`` saved in ``folder/name`` as Hugging Face saves a large
    one: ``config.json``, bfloat16 shards and their index, and a word-level ``tokenizer.json``
    (``<s>`` as id 1, the others ``w{id}``). Written once: an existing folder is reused."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    hf = SHAPES[name]
    path = folder / name
    if (path / "model.safetensors.index.json").is_file():
        return path
    path.mkdir(parents=True, exist_ok=True)
    config = transformers.LlamaConfig(
        **hf, bos_token_id=1, eos_token_id=None, pad_token_id=None, torch_dtype="bfloat16"
    )
    config.save_pretrained(path)
    generator = torch.Generator().manual_seed(0)
    shard: dict[str, torch.Tensor] = {}
    weight_map: dict[str, str] = {}
    files: list[str] = []

    def flush() -> None:
        if shard:
            files.append(f"shard-{len(files):05d}.safetensors")
            save_file(shard, str(path / files[-1]), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, files[-1]))
            shard.clear()

    size = 0
    for tensor_name, shape in parameter_shapes(hf).items():
        if len(shape) == 1:  # a norm's gain: near 1
            tensor = 1 + 0.1 * torch.randn(shape, generator=generator)
        else:
            tensor = 0.02 * torch.randn(shape, generator=generator)
        shard[tensor_name] = tensor.to(torch.bfloat16)
        size += shard[tensor_name].nbytes
        if size >= SHARD_BYTES:
            flush()
            size = 0
    flush()
    index = {
        "metadata": {"total_size": weights_bytes(hf, torch.bfloat16)},
        "weight_map": weight_map,
    }
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    vocab = {f"w{i}": i for i in range(hf["vocab_size"])} | {"<s>": 1}
    del vocab["w1"]
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(path / "tokenizer.json"))
    return path


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def held(device: torch.device) -> int:
    """Memory in use now: allocated on a GPU, resident on a CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated(device)
    gc.collect()
    return _resident()


def best_of(repeats: int, ours: Callable[[], object], theirs: Callable[[], object], device):  # type: ignore[no-untyped-def]
    """(ours, theirs): the fewest ms of ``repeats`` calls each, alternated."""
    mine, other = [], []
    for _ in range(repeats):
        mine.append(elapsed_ms(ours, device))
        other.append(elapsed_ms(theirs, device))
    return min(mine), min(other)


def measure(name: str, folder: Path, device: torch.device, dtype: str, args: Any) -> dict:
    """Every figure of one shape (see the module's docstring)."""
    import transformers

    from ui.serving.state import ModelRegistry, SessionModels
    from ui.tabs.attention import scale

    hf = SHAPES[name]
    row: dict[str, Any] = {"shape": name}
    before = held(device)
    start = time.perf_counter()
    checkpoint = load_pretrained(folder, device=device, dtype=dtype)
    row["load_s"] = time.perf_counter() - start
    row["memory"] = held(device) - before
    model = checkpoint.model
    kept = next(model.parameters()).dtype
    row["dtype"] = str(kept).removeprefix("torch.")
    before = held(device)
    start = time.perf_counter()
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=kept, attn_implementation="eager", device_map=str(device)
    ).eval()
    row["ref_load_s"] = time.perf_counter() - start
    row["ref_memory"] = held(device) - before

    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, hf["vocab_size"], (1, args.tokens), generator=generator).to(device)
    prompt = ids[:, :PROMPT]

    def capture() -> object:
        trace = model(tgt=ids, call=TRACE)
        return trace.logits

    def eager() -> object:
        reference.config._attn_implementation = "eager"
        return reference(ids, output_attentions=True).logits

    def fast() -> object:
        return model(tgt=ids)

    def sdpa() -> object:
        reference.config._attn_implementation = "sdpa"
        return reference(ids).logits

    def decode() -> object:
        return greedy_batch(model, prompts=prompt, eos_id=None, max_new_tokens=NEW_TOKENS)

    def generate() -> object:
        reference.config._attn_implementation = "sdpa"
        return reference.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )

    with torch.inference_mode():
        row["capture_ms"], row["eager_ms"] = best_of(args.repeats, capture, eager, device)
        gc.collect()
        row["fast_ms"], row["sdpa_ms"] = best_of(args.repeats, fast, sdpa, device)
        ours_ms, theirs_ms = best_of(args.repeats, decode, generate, device)
        row["decode_ms"], row["generate_ms"] = ours_ms / NEW_TOKENS, theirs_ms / NEW_TOKENS

    # The long-input view through the app's own handler, on the model already loaded.
    registry = ModelRegistry(device, [str(folder)], dtype=dtype)
    registry.pretrained[name] = checkpoint
    long_ids = torch.randint(2, hf["vocab_size"], (args.long - 1,), generator=generator)
    text = " ".join(f"w{i}" for i in long_ids.tolist())
    scale._passes.clear()
    start = time.perf_counter()
    scale.attention_scale(registry, text, name, "first", 1, 1, 0, 64, 3, -1, False, SessionModels())
    row["long_s"] = time.perf_counter() - start
    reference.config._attn_implementation = "eager"
    batch = torch.cat([torch.tensor([1]), long_ids])[None].to(device)  # <s> first, as ours
    with torch.inference_mode():
        row["ref_long_s"] = (
            elapsed_ms(lambda: reference(batch, output_attentions=True), device) / 1000
        )
    row["long_tokens"] = args.long
    return row


def fitting(names: list[str], device: torch.device, dtype: str) -> list[str]:
    """The shapes whose weights fit three times in ``device``'s free memory."""
    free = free_memory(device)
    chosen = []
    for name in names:
        kept = resolve_dtype(dtype, device, torch.bfloat16)
        need = 3 * weights_bytes(SHAPES[name], kept)
        if free is None or need <= free:
            chosen.append(name)
        else:
            print(f"skipped {name}: needs {format_bytes(need)}, {format_bytes(free)} free")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--long", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="keep the models here")
    args = parser.parse_args()
    device = pick_device(args.device)
    names = args.shapes or fitting(list(SHAPES), device, args.dtype)
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    print(f"device {device} ({card or 'CPU'}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {args.tokens} tokens, {args.repeats} repeats")  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = args.folder or Path(scratch)
        for name in names:
            folder = write_folder(root, name)
            rows.append(measure(name, folder, device, args.dtype, args))
            gc.collect()  # the shape's models go before the next is read
            if device.type == "cuda":
                torch.cuda.empty_cache()
    print(
        "\n| shape | dtype | load s (ratio) | memory (ratio) | prefill with capture ms (ratio) "
        "| fast path ms (ratio) | decode ms/token (ratio) | long view s at N tokens (ratio) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['dtype']} "
            f"| {r['load_s']:.2f} ({r['load_s'] / r['ref_load_s']:.2f}) "
            f"| {format_bytes(r['memory'])} ({r['memory'] / max(r['ref_memory'], 1):.2f}) "
            f"| {r['capture_ms']:.0f} ({r['capture_ms'] / r['eager_ms']:.2f}) "
            f"| {r['fast_ms']:.0f} ({r['fast_ms'] / r['sdpa_ms']:.2f}) "
            f"| {r['decode_ms']:.1f} ({r['decode_ms'] / r['generate_ms']:.2f}) "
            f"| {r['long_s']:.2f} at {r['long_tokens']:,} "
            f"({r['long_s'] / r['ref_long_s']:.2f}) |"
        )


if __name__ == "__main__":
    main()
