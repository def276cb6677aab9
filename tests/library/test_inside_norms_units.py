"""Inside a layer's norms, feed-forward units and q/k before their norm are the model's own.

For every model kind (the paper's post-LN encoder-decoder, the pre-LN GPT-2, BERT and Marian
folders, a Llama, and each later family of ``family_checks.FAMILIES``), every layer's steps that
show a norm's output (pre-norm, post-LN, OLMo 2's and Gemma's output norms, QK-norm, BERT's
embedding norm), the feed-forward's hidden units (before and after the activation; the gated
one's gate, up projection and product) and q, K and V before any norm or rotation are compared,
bit for bit on CPU float32, with two independent references: forward hooks on the real modules
(``nn.Linear`` and the norms) during an ordinary traced pass, and the formulas written here with
``torch.nn.functional`` on the modules' weights (Gemma's gain ``1 + w`` taken from the family,
not from the model). The last tests show the check fails where the reference makes a wrong
choice (Gemma's offset dropped, q shown after its QK-norm).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import family_folder, tiny_llama
from family_checks import FAMILIES
from torch import Tensor, nn

from transformer import load_pretrained
from transformer.core.layers import LayerNorm, PositionwiseFeedForward
from transformer.core.modern import GatedFeedForward, RMSNorm
from transformer.core.run import TRACE
from transformer.core.stacks import DecoderLayer, EncoderLayer, Residual
from transformer.lab.inside import LayerWalkthrough, query_positions, walkthrough
from transformer.lab.inspection import analyse
from transformer.training.bundled import load_bundled

TEXT = "w5 w17 w3 w42 w8 w61 w29 w77"
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda u: F.gelu(u, approximate="tanh"),
    "silu": F.silu,
}


class Seen:
    """What each ``nn.Linear`` and norm of a model read and wrote in one traced pass, copied
    as each forward returned (a gate is written over in place afterwards)."""

    def __init__(self, model: nn.Module) -> None:
        self.read: dict[nn.Module, Tensor] = {}
        self.wrote: dict[nn.Module, Tensor] = {}
        self.modules = [
            m for m in model.modules() if isinstance(m, nn.Linear | LayerNorm | RMSNorm)
        ]

    def hook(self, module: nn.Module, args: tuple[Tensor, ...], output: Tensor) -> None:
        assert module not in self.wrote, f"{module} ran twice in one pass"
        self.read[module] = args[0].detach().clone()
        self.wrote[module] = output.detach().clone()

    def run(self, model: nn.Module, src: Tensor | None, tgt: Tensor | None) -> None:
        handles = [m.register_forward_hook(self.hook) for m in self.modules]
        try:
            with torch.no_grad():
                model(src, tgt, call=TRACE)  # written-out attention, as the walkthrough's
        finally:
            for handle in handles:
                handle.remove()


def _norm(norm: LayerNorm | RMSNorm, x: Tensor, offset: float) -> Tensor:
    """The norm written out on its weights: ``F.layer_norm``, or ``x / rms · (offset + w)``."""
    if isinstance(norm, LayerNorm):
        return F.layer_norm(x, norm.weight.shape, norm.weight, norm.bias, norm.eps)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps)
    return normed * (offset + norm.weight) if offset else normed * norm.weight


def _heads(projected: Tensor, n_heads: int) -> Tensor:
    """``(B, T, n·d)`` → ``(B, n, T, d)``, written here."""
    batch, length, width = projected.shape
    return projected.view(batch, length, n_heads, width // n_heads).transpose(1, 2)


def _same(walk: LayerWalkthrough, key: str, expected: Tensor, where: str) -> None:
    shown = walk.step(key).values
    expected = expected.detach().float()
    assert shown.dtype == torch.float32 and shown.shape == expected.shape, f"{where} {key}"
    assert torch.equal(shown, expected), (
        f"{where} {key}: differs by {(shown - expected).abs().max().item():.3g}"
    )


class Checker:
    """Compares one walkthrough's steps with what :class:`Seen` saw and the formulas."""

    def __init__(self, seen: Seen, offset: float, q_after_norm: bool = False) -> None:
        self.seen, self.offset = seen, offset
        self.q_after_norm = q_after_norm  # a wrong reference: q shown after its QK-norm
        self.checked: set[str] = set()

    def norm(self, walk: LayerWalkthrough, key: str, norm: nn.Module, where: str) -> Tensor:
        """The step ``key`` is ``norm``'s output, as the hook saw it and as the formula gives
        it from what the norm read; returns what it read."""
        assert isinstance(norm, LayerNorm | RMSNorm)
        read = self.seen.read[norm]
        _same(walk, key, self.seen.wrote[norm][0, walk.query], where)
        _same(walk, key, _norm(norm, read, self.offset)[0, walk.query], f"{where} (formula)")
        self.checked.add(key.split(".", 1)[-1])
        return read

    def walk(self, walk: LayerWalkthrough, layer: EncoderLayer | DecoderLayer) -> None:
        where = f"{walk.stack} layer {walk.layer}"
        residuals: list[tuple[str, nn.Module, Residual]] = []
        if isinstance(layer, EncoderLayer):
            residuals.append(("self", layer.self_attention, layer.attention_residual))
        else:
            residuals.append(("self", layer.self_attention, layer.self_attention_residual))
            if layer.cross_attention is not None:
                residuals.append(("cross", layer.cross_attention, layer.cross_attention_residual))
        for prefix, attention, residual in residuals:
            self.residual(walk, prefix, residual, f"{where} {prefix}")
            self.qkv(walk, prefix, attention, f"{where} {prefix}")
            self.seen_as(walk, f"{prefix}.project", attention.w_o, f"{where} {prefix}")
        self.residual(walk, "ff", layer.feed_forward_residual, f"{where} ff")
        self.units(walk, layer.feed_forward, f"{where} ff")

    def residual(self, walk: LayerWalkthrough, prefix: str, residual: Residual, where: str) -> None:
        if residual.pre_norm:
            self.norm(walk, f"{prefix}.norm_in", residual.norm, where)
        elif not residual.output_norm:  # post-LN: the sum, then its norm
            read = self.norm(walk, f"{prefix}.norm_out", residual.norm, where)
            _same(walk, f"{prefix}.residual", read[0, walk.query], f"{where} sum")
            self.checked.add("residual")
        output_norm = residual.norm if residual.output_norm else residual.post_norm
        if output_norm is not None:
            self.norm(walk, f"{prefix}.norm_out_sublayer", output_norm, where)

    def seen_as(self, walk: LayerWalkthrough, key: str, linear: nn.Module, where: str) -> None:
        """The step ``key`` is ``linear``'s output at the query token."""
        _same(walk, key, self.seen.wrote[linear][0, walk.query], where)
        self.checked.add(key.split(".", 1)[-1])

    def qkv(self, walk: LayerWalkthrough, prefix: str, attention: nn.Module, where: str) -> None:
        """q, K and V before any norm or rotation: the projections split into heads; with a
        QK-norm, the normed q too."""
        h, i = walk.head, walk.query
        g = attention.kv_head_of[h]
        q = _heads(self.seen.wrote[attention.w_q], attention.n_heads)
        k = _heads(self.seen.wrote[attention.w_k], attention.n_kv_heads)
        v = _heads(self.seen.wrote[attention.w_v], attention.n_kv_heads)
        if attention.q_norm is not None:  # q shown before its norm, then normed; K normed
            normed_q = self.qk_normed(attention, attention.q_norm, attention.w_q, attention.n_heads)
            _same(walk, f"{prefix}.qk_norm", normed_q[0, h, i], f"{where} QK-normed q")
            k = self.qk_normed(attention, attention.k_norm, attention.w_k, attention.n_kv_heads)
            self.checked.add("qk_norm")
            if self.q_after_norm:
                q = normed_q
        _same(walk, f"{prefix}.q", q[0, h, i], f"{where} q")
        _same(walk, f"{prefix}.k", k[0, g], f"{where} K")
        _same(walk, f"{prefix}.v", v[0, g], f"{where} V")
        self.checked.update(("q", "k", "v"))

    def qk_normed(
        self, attention: nn.Module, norm: nn.Module, linear: nn.Module, n_heads: int
    ) -> Tensor:
        """``(B, n_heads, T, d_head)`` queries or keys after their QK-norm, written out from the
        projection the hook saw: each head's numbers alone, or the whole projection."""
        projected = self.seen.wrote[linear]
        assert isinstance(norm, LayerNorm | RMSNorm)
        if attention.qk_norm == "head":
            return _norm(norm, _heads(projected, n_heads), self.offset)
        return _heads(_norm(norm, projected, self.offset), n_heads)

    def units(self, walk: LayerWalkthrough, ff: nn.Module, where: str) -> None:
        """The feed-forward's units, from the hooks on its projections and the activation
        written here."""
        act = ACTIVATIONS[walk.config.activation]
        i = walk.query
        if isinstance(ff, GatedFeedForward):
            gate_in, up = self.seen.wrote[ff.w_gate], self.seen.wrote[ff.w_up]
            self.seen_as(walk, "ff.gate_in", ff.w_gate, where)
            _same(walk, "ff.activation", act(gate_in)[0, i], f"{where} activated gate")
            self.seen_as(walk, "ff.up", ff.w_up, where)
            _same(walk, "ff.product", (act(gate_in) * up)[0, i], f"{where} gate ⊙ up")
            _same(walk, "ff.product", self.seen.read[ff.w_down][0, i], f"{where} W_down's input")
            self.seen_as(walk, "ff.project", ff.w_down, where)
            self.checked.update(("activation", "product"))
            return
        assert isinstance(ff, PositionwiseFeedForward)
        hidden = self.seen.wrote[ff.linear1]
        self.seen_as(walk, "ff.hidden", ff.linear1, where)
        _same(walk, "ff.activation", act(hidden)[0, i], f"{where} activated")
        _same(walk, "ff.activation", self.seen.read[ff.linear2][0, i], f"{where} W₂'s input")
        self.seen_as(walk, "ff.project", ff.linear2, where)
        self.checked.add("activation")


def _check_all(
    model: nn.Module, tokenizer: object, text: str, offset: float = 0.0, **wrong: bool
) -> set[str]:
    """Walk every layer of every stack at the last real token and check it; returns the
    kinds of step checked."""
    model.eval()
    analysis = analyse(model, tokenizer, [text])
    source, target = analysis.trace.source, analysis.trace.target
    seen = Seen(model)
    seen.run(model, source.tokens if source else None, target.tokens if target else None)
    checker = Checker(seen, offset, **wrong)
    config = model.config
    for stack, record in (("encoder", source), ("decoder", target)):
        if record is None:
            continue
        layers = (model.encoder if stack == "encoder" else model.decoder).layers
        query = query_positions(record.tokens[0], record.real_tokens[0], config.pad_id)[-1]
        embedding_norm = (
            model.src_embedding_norm if stack == "encoder" else model.tgt_embedding_norm
        )
        for index, layer in enumerate(layers):
            walk = walkthrough(model, analysis, stack, index, index % config.n_heads, query)
            if index == 0 and embedding_norm is not None:
                checker.norm(walk, "embedding.norm", embedding_norm, f"{stack} embedding")
            checker.walk(walk, layer)
    return checker.checked


UNITS = {"q", "k", "v", "activation", "project"}


def test_a_post_ln_encoder_decoder() -> None:
    checkpoint = load_bundled("cpu").models["reverse"]
    checked = _check_all(checkpoint.model, checkpoint.tokenizer, "a b c d e")
    assert checked >= UNITS | {"norm_out", "residual", "hidden"}, checked


@pytest.mark.parametrize(
    ("family", "norms"),
    [("bert", {"norm_out", "norm"}), ("gpt2", {"norm_in"}), ("marian", {"norm_out"})],
)
def test_pretrained_kinds(hf_models, family: str, norms: set[str]) -> None:
    checkpoint = load_pretrained(hf_models[family])
    checked = _check_all(checkpoint.model, checkpoint.tokenizer, "the cat sat on the mat")
    assert checked >= UNITS | norms | {"hidden"}, checked


def test_a_llama(tmp_path: Path) -> None:
    tiny_llama(tmp_path, 4, 2, theta=500.0, family="llama")
    checkpoint = load_pretrained(tmp_path)
    checked = _check_all(checkpoint.model, checkpoint.tokenizer, TEXT)
    assert checked >= UNITS | {"norm_in", "gate_in", "up", "product"}, checked


def _family(name: str, tmp_path: Path) -> tuple[nn.Module, object, float]:
    """The family's model, tokenizer and the gain offset its norms use (Gemma: 1 + w)."""
    family, config, matrices, _ = FAMILIES[name]
    family_folder(tmp_path, family, seed=len(name), matrices=matrices, **config)
    checkpoint = load_pretrained(tmp_path)
    return checkpoint.model, checkpoint.tokenizer, 1.0 if family.startswith("gemma") else 0.0


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family(name: str, tmp_path: Path) -> None:
    model, tokenizer, offset = _family(name, tmp_path)
    checked = _check_all(model, tokenizer, TEXT, offset)
    assert checked >= UNITS, checked
    if model.config.qk_norm != "none":
        assert "qk_norm" in checked
    if model.config.norm == "output" or model.config.post_sublayer_norm:
        assert "norm_out_sublayer" in checked


def test_gemma_with_its_norm_offset_dropped_fails(tmp_path: Path) -> None:
    model, tokenizer, offset = _family("gemma3", tmp_path)
    assert offset == 1.0
    with pytest.raises(AssertionError, match=r"\(formula\) self\.norm_in: differs"):
        _check_all(model, tokenizer, TEXT, offset=0.0)


def test_q_shown_after_its_qk_norm_fails(tmp_path: Path) -> None:
    model, tokenizer, offset = _family("qwen3", tmp_path)
    with pytest.raises(AssertionError, match=r"self q self\.q: differs"):
        _check_all(model, tokenizer, TEXT, offset, q_after_norm=True)
