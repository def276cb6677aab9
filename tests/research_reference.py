"""The independent references of the research methods' tests: tiny ``transformers`` GPT-2 and
Llama models (random weights of real shapes: few layers, narrow) loaded onto our Transformer,
and plain forward hooks on ``transformers``' own modules that read or replace an activation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import build_hf_model, llama_folder

from transformer.core.model import Transformer
from transformer.pretrained import load_pretrained

transformers = pytest.importorskip("transformers")

VOCAB = 61
CLEAN = [5, 17, 3, 42, 8, 29, 12, 50]
CORRUPTED = [5, 23, 44, 42, 8, 29, 12, 50]  # positions 1 and 2 differ


@dataclass
class Pair:
    """Our model and ``transformers``' with the same weights, and where its parts are."""

    name: str
    ours: Transformer
    theirs: Any

    def blocks(self) -> Any:
        inner = self.theirs.transformer if self.name == "gpt2" else self.theirs.model
        return inner.h if self.name == "gpt2" else inner.layers

    def attention(self, layer: int) -> Any:
        block = self.blocks()[layer]
        return block.attn if self.name == "gpt2" else block.self_attn

    def out_projection(self, layer: int) -> Any:
        attention = self.attention(layer)
        return attention.c_proj if self.name == "gpt2" else attention.o_proj

    def mlp(self, layer: int) -> Any:
        return self.blocks()[layer].mlp

    def final_norm(self) -> Any:
        return self.theirs.transformer.ln_f if self.name == "gpt2" else self.theirs.model.norm

    @property
    def n_heads(self) -> int:
        return self.ours.config.n_heads

    def logits(self, ids: list[int] | torch.Tensor, **kwargs: Any) -> torch.Tensor:
        ids = torch.as_tensor(ids)
        with torch.no_grad():
            return self.theirs(ids if ids.dim() == 2 else ids[None], **kwargs).logits


def make_pair(name: str, folder: Path) -> Pair:
    """GPT-2 (2 layers, 4 heads, width 32, perturbed off its init) or a grouped-query Llama
    (4 query heads sharing 2 key/value heads, norms away from 1)."""
    if name == "gpt2":
        build_hf_model("gpt2", folder, vocab=VOCAB, perturb=3, layers=3)
        theirs = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    else:
        theirs = llama_folder(
            folder, VOCAB, seed=11, norms=0.2, num_attention_heads=4, num_key_value_heads=2
        )
    return Pair(name, load_pretrained(folder).model.eval(), theirs)


@pytest.fixture(name="pair", scope="module", params=["gpt2", "llama"])
def pair_fixture(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return make_pair(request.param, tmp_path_factory.mktemp(request.param))


def _first(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _with_first(args: tuple, kwargs: dict, x: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (x, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": x}


@contextmanager
def hooked(
    pair: Pair, where: str, layer: int, edit: Callable[[torch.Tensor], torch.Tensor]
) -> Iterator[None]:
    """``edit`` sees (and may replace) one activation of ``transformers``' pass, by a plain
    forward hook: ``"residual"`` the block's input, ``"attention"`` / ``"mlp"`` their output,
    ``"heads"`` the concatenated heads entering the output projection ``(B, T, H·d_head)``."""
    if where == "residual":

        def pre(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            return _with_first(args, kwargs, edit(_first(args, kwargs)))

        handle = pair.blocks()[layer].register_forward_pre_hook(pre, with_kwargs=True)
    elif where == "heads":

        def pre_heads(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            return _with_first(args, kwargs, edit(_first(args, kwargs)))

        handle = pair.out_projection(layer).register_forward_pre_hook(pre_heads, with_kwargs=True)
    else:
        module = pair.attention(layer) if where == "attention" else pair.mlp(layer)

        def post(module: Any, args: tuple, output: Any) -> Any:
            if isinstance(output, tuple):
                return (edit(output[0]), *output[1:])
            return edit(output)

        handle = module.register_forward_hook(post)
    try:
        yield
    finally:
        handle.remove()


def recorded(pair: Pair, ids: list[int], where: str, layer: int) -> torch.Tensor:
    """A copy of one activation of ``transformers``' pass over ``ids``."""
    kept: list[torch.Tensor] = []

    def keep(x: torch.Tensor) -> torch.Tensor:
        kept.append(x.detach().clone())
        return x

    with hooked(pair, where, layer, keep):
        pair.logits(ids)
    return kept[0]
