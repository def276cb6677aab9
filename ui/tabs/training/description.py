"""What a model is: family, source, configuration and parameters per component, and numbers
written for people."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from transformer.core.config import base_config
from transformer.core.model import Transformer, count_parameters
from transformer.lab.analysis import kv_cache_bytes_per_token, layer_parameter_groups
from transformer.pretrained.checkpoint import Checkpoint

from ...serving.endpoints import takes_request
from ...serving.errors import code_span, friendly
from ...serving.state import TRAINED_HERE, ModelRegistry
from .request import ModelRequest

FAMILIES = {
    "bert": "BERT family (encoder-only)",
    "gpt2": "GPT-2 family (decoder-only)",
    "marian": "Marian family (encoder-decoder translation)",
}


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 step"``, ``"2 steps"``, ``"1,000 steps"``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def human(value: Any) -> str:
    """A number for people: ``1,234``, ``883.4``, ``0.0713``, ``1e-09``; anything else as is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.1f}"
    if magnitude >= 1e-3:
        return f"{value:.3g}" if magnitude < 1 else f"{value:,.3f}".rstrip("0").rstrip(".")
    return f"{value:.2g}"


def metric(key: str, value: float) -> str:
    """A recorded metric for people: accuracies and match rates as percentages, durations in
    minutes and seconds."""
    if ("accuracy" in key or "match" in key) and 0 <= value <= 1:
        return f"{value:.1%}".replace(".0%", "%")
    if "seconds" in key:
        minutes, seconds = divmod(round(value), 60)
        return f"{minutes} min {seconds} s" if minutes else f"{value:.1f} s"
    return human(value)


@lru_cache(maxsize=1)
def base_parameter_count() -> int:
    """Parameters of the paper's base preset, counted on a model built on the meta device: no
    memory is allocated for its 63M parameters (a real build cost the server hundreds of MB)."""
    with torch.device("meta"):
        return count_parameters(Transformer(base_config()))


# Components in the order of the model, by the top-level module (or parameter) that holds them.
_COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("token embeddings", ("src_embedding", "tgt_embedding")),
    ("positions (learned)", ("src_positional", "tgt_positional")),
    ("token types", ("token_type_embedding",)),
    ("embedding norms", ("src_embedding_norm", "tgt_embedding_norm")),
    ("encoder layers", ("encoder.layers",)),
    ("encoder final norm", ("encoder",)),
    ("decoder layers", ("decoder.layers",)),
    ("decoder final norm", ("decoder",)),
    ("generator", ("generator",)),
]


def parameter_counts(model: Transformer) -> dict[str, int]:
    """Parameters per component in the model's order (a tied tensor counted once, where it
    first appears: a shared embedding under "token embeddings"); empty components left out;
    ``"total"`` last, equal to :func:`~transformer.core.model.count_parameters`."""
    counts: dict[str, int] = {}
    for name, parameter in model.named_parameters():  # each shared tensor once
        parts = name.split(".")
        label = next(
            (
                label
                for label, owners in _COMPONENTS
                if ".".join(parts[:2]) in owners or parts[0] in owners
            ),
            "other",
        )
        counts[label] = counts.get(label, 0) + parameter.numel()
    order = [label for label, _ in _COMPONENTS] + ["other"]
    result = {label: counts[label] for label in order if counts.get(label)}
    config = model.config
    if config.is_modern:  # each layer's matrices, where the four modern changes show
        detail = layer_parameter_groups(model)
        shares = _matrix_notes(config)
        refined: dict[str, int] = {}
        for label, n in result.items():
            stack = label.split()[0]
            if label.endswith(" layers") and any(k.startswith(stack + " ") for k in detail):
                for key, m in detail.items():
                    if key.startswith(stack + " "):
                        refined[f"{key}{shares.get(key.split(' ', 1)[1], '')}"] = m
            else:
                refined[label] = n
        result = refined
    if config.tie_embeddings and config.has_decoder and "token embeddings" in result:
        result = {
            ("token embeddings (tied to the generator)" if k == "token embeddings" else k): n
            for k, n in result.items()
        }
    result["total"] = count_parameters(model)
    return result


def _matrix_notes(config: Any) -> dict[str, str]:
    """What a modern layer's matrices hold, for the parameter table's labels."""
    d = config.d_head
    kv = (
        f" ({plural(config.kv_heads, 'key/value head')} × {d}, shared by "
        f"{config.kv_group_size} query heads each)"
        if config.kv_heads != config.n_heads
        else f" ({plural(config.n_heads, 'head')} × {d})"
    )
    return {
        "attention W_q": f" ({plural(config.n_heads, 'query head')} × {d})",
        "attention W_k": kv,
        "attention W_v": kv,
        "norms": " (RMSNorm: a gain, no bias)" if config.norm_kind == "rms" else "",
    }


def kv_cache_line(config: Any) -> str:
    """The key/value cache per generated token, with the config's key/value heads and with one
    per query head, float32."""
    if not config.has_decoder:
        return ""
    grouped = kv_cache_bytes_per_token(config, grouped=True)
    full = kv_cache_bytes_per_token(config, grouped=False)
    formula = (
        f"2 (k and v) × {config.n_decoder_layers} layers × {{heads}} × d_head {config.d_head} "
        "× 4 bytes (float32)"
    )
    if config.kv_heads == config.n_heads:
        return (
            f"Key/value cache: **{full:,} bytes per token** = "
            f"{formula.format(heads=plural(config.n_heads, 'head'))}; every query head has its "
            "own key/value head (no grouped-query attention)."
        )
    return (
        f"Key/value cache: **{grouped:,} bytes per token** with grouped-query attention = "
        f"{formula.format(heads=plural(config.kv_heads, 'key/value head'))}; with one key/value "
        f"head per query head ({config.n_heads}) it would be **{full:,} bytes** — "
        f"{full // grouped}× more. A 2,048-token context holds "
        f"{grouped * 2048 / 2**20:,.1f} MiB instead of {full * 2048 / 2**20:,.1f} MiB."
    )


def parameter_table(model: Transformer) -> list[list[Any]]:
    """Rows (component, parameters) for the table."""
    return [[label, f"{n:,}"] for label, n in parameter_counts(model).items()]


def _source(source: str) -> str:
    """Where a model was read from, as a page may show it: a hub id or package as given, a
    folder by its own name only (a page never shows where this machine keeps files)."""
    path = Path(source).expanduser()
    if path.is_absolute() or path.exists() or source.startswith((".", "~")):
        return f"the folder {code_span(path.resolve().name or source)}"
    return code_span(source)


def describe(name: str, checkpoint: Checkpoint, device: Any) -> str:
    """Family, source and shape of a model, in a few sentences."""
    info, config = checkpoint.info, checkpoint.config
    family = info.get("family")
    lines = []
    if family:
        shown = info.get("name") or name
        lines.append(
            f"**{shown}**: pretrained, {FAMILIES.get(family, family)}, read from "
            f"{_source(str(info.get('source', '?')))} into this project's Transformer."
        )
    elif checkpoint.task:
        where = "trained in this session" if name == TRAINED_HERE else "bundled with the app"
        lines.append(f"**{name}**: {where}, trained on the toy task *{checkpoint.task}*.")
    layers = []
    if config.n_encoder_layers:
        layers.append(plural(config.n_encoder_layers, "encoder layer"))
    if config.n_decoder_layers:
        layers.append(plural(config.n_decoder_layers, "decoder layer"))
    lines.append(
        f"{config.architecture}: {' and '.join(layers)}, {plural(config.n_heads, 'head')} each, "
        f"d_model {config.d_model:,}, d_ff {config.d_ff:,}, a vocabulary of "
        f"{checkpoint.tokenizer.vocab_size:,} tokens; "
        f"**{count_parameters(checkpoint.model):,}** parameters. Running on **{device}**."
    )
    if config.is_modern:
        changes = [
            "RMSNorm" if config.norm_kind == "rms" else "LayerNorm",
            f"rotary positions (RoPE, base {config.rope_base:,.0f})"
            if config.positional == "rotary"
            else f"{config.positional} positions",
            "a gated feed-forward (SwiGLU: SiLU(x·W_gate) ⊙ x·W_up, then ·W_down)"
            if config.feed_forward_kind == "gated"
            else "a two-matrix feed-forward",
            f"grouped-query attention: {config.n_heads} query heads share "
            f"{plural(config.kv_heads, 'key/value head')} ({config.kv_group_size} each)"
            if config.kv_heads != config.n_heads
            else "one key/value head per query head",
        ]
        lines.append("A modern block: " + ", ".join(changes) + ".")
    cache = kv_cache_line(config)
    if cache:
        lines.append(cache)
    metrics = [
        f"{key.replace('_', ' ').replace(' seconds', ' time')} {metric(key, value)}"
        for key, value in checkpoint.metrics.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and key != "parameters"
    ]  # the nested test-sample record is for the tests
    if metrics:
        lines.append("Recorded metrics: " + ", ".join(metrics) + ".")
    lines.append(
        "The paper's base model (N=6, d_model=512, d_ff=2048, h=8, shared 37,000-token "
        f"vocabulary, tied embeddings) built with this code has **{base_parameter_count():,}** "
        "parameters; the paper reports 65M."
    )
    return "\n\n".join(lines)


@friendly
@takes_request(ModelRequest.of)
def model_info(
    registry: ModelRegistry, request: ModelRequest
) -> tuple[str, list[list[Any]], list[list[Any]]]:
    """The ``/model_info`` endpoint: (summary, parameters per component, configuration)."""
    name, checkpoint = request.name, request.checkpoint
    config_rows = [[key, human(value)] for key, value in checkpoint.config.to_dict().items()]
    return (
        describe(name, checkpoint, registry.device),
        parameter_table(checkpoint.model),
        config_rows,
    )
