"""Every line Inside a layer cites lies inside the function it names and shows the operation
its anchor names; an anchor that no longer fits its function fails loudly, never cites some
other line. Every model kind's every step is walked: the paper's post-LN encoder-decoder, the
pre-LN GPT-2 and BERT and Marian folders, a Llama, and each later family."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
from conftest import REPOSITORY, family_folder, tiny_llama
from family_checks import FAMILIES

from transformer import load_pretrained
from transformer.core.attention import MultiHeadAttention, attention_weights
from transformer.lab import inside_citations
from transformer.lab.inside import LayerWalkthrough, inside_layer
from transformer.lab.inside_citations import CITATIONS, CitationError, cite, resolve
from transformer.training.bundled import load_bundled

TEXT = "w5 w17 w3 w42 w8 w61 w29 w77"


def _function(qualified: str):
    """The function a dotted ``module.Class.method`` names, found by import (not by the
    citation's own record)."""
    parts = qualified.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            obj = getattr(obj, name)
        return obj
    raise AssertionError(f"{qualified} names no importable function")


def _check(walk: LayerWalkthrough) -> None:
    for step in walk.steps:
        code = step.code
        function = _function(code.function)
        lines, first = inspect.getsourcelines(function)
        assert Path(inspect.getsourcefile(function) or "") == REPOSITORY / code.path, step.key
        assert first <= code.line < first + len(lines), (step.key, code)
        text = (REPOSITORY / code.path).read_text(encoding="utf-8").splitlines()[code.line - 1]
        assert text.strip() == code.text, (step.key, code)
        # The operation the anchor names, written as the anchor writes it around its "...".
        for piece in code.anchor.split("..."):
            assert piece.strip(", ") in text, (step.key, piece, text)


def _walk_all(model, tokenizer, text: str) -> int:
    walked = 0
    config = model.config
    for stack in ("encoder", "decoder"):
        if not getattr(config, f"has_{stack}"):
            continue
        n_layers = config.n_encoder_layers if stack == "encoder" else config.n_decoder_layers
        for layer in range(n_layers):
            walk = inside_layer(model, tokenizer, text, stack, layer, layer % config.n_heads, 1)
            _check(walk)
            walked += len(walk.steps)
    return walked


def test_a_post_ln_encoder_decoder_cites_its_own_functions() -> None:
    models = load_bundled("cpu").models
    checkpoint = models["reverse"]
    assert checkpoint.config.norm == "post" and checkpoint.config.has_encoder
    assert _walk_all(checkpoint.model, checkpoint.tokenizer, "a b c d e") > 0


@pytest.mark.parametrize("family", ["bert", "gpt2", "marian"])
def test_pretrained_kinds_cite_their_own_functions(hf_models, family: str) -> None:
    checkpoint = load_pretrained(hf_models[family])
    assert _walk_all(checkpoint.model, checkpoint.tokenizer, "the cat sat on the mat") > 0


def test_a_llama_cites_its_own_functions(tmp_path: Path) -> None:
    tiny_llama(tmp_path, 4, 2, theta=500.0, family="llama")
    checkpoint = load_pretrained(tmp_path)
    assert _walk_all(checkpoint.model, checkpoint.tokenizer, TEXT) > 0


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_cites_its_own_functions(name: str, tmp_path: Path) -> None:
    family, config, matrices, _ = FAMILIES[name]
    family_folder(tmp_path, family, seed=len(name), matrices=matrices, **config)
    checkpoint = load_pretrained(tmp_path)
    assert _walk_all(checkpoint.model, checkpoint.tokenizer, TEXT) > 0


def _renamed(function, old: str, new: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``inspect`` read ``function``'s source with ``old`` replaced by ``new``."""
    real = inspect.getsourcelines

    def edited(obj):
        lines, start = real(obj)
        if obj is function:
            lines = [line.replace(old, new) for line in lines]
        return lines, start

    monkeypatch.setattr(inside_citations.inspect, "getsourcelines", edited)


def test_a_renamed_projection_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "self.w_q(" in cite(MultiHeadAttention.forward, "self.w_q(...)").text
    _renamed(MultiHeadAttention.forward, "self.w_q", "self.w_query", monkeypatch)
    with pytest.raises(CitationError, match=r"MultiHeadAttention\.forward.*self\.w_q"):
        cite(MultiHeadAttention.forward, "self.w_q(...)")
    with pytest.raises(CitationError, match=r"MultiHeadAttention\.forward"):
        resolve(CITATIONS)  # what importing Inside does: the whole table is checked


def test_a_removed_line_fails_loudly_even_where_the_docstring_still_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The softmax line goes; "softmax(" still stands in the docstring, which a search for
    # literal text would have cited instead.
    _renamed(attention_weights, "torch.softmax(", "torch.log_softmax(", monkeypatch)
    assert "softmax(" in inspect.getdoc(attention_weights)
    with pytest.raises(CitationError, match="attention_weights"):
        cite(attention_weights, "torch.softmax(...)")


def test_an_anchor_matches_shape_not_text() -> None:
    def sample(x, y):
        """x + y, in words."""
        z = x * 2  # x + y in a comment
        return z + y

    code = cite(sample, "... + y")
    assert code.text == "return z + y"
    assert cite(sample, "z = x * ...").text.startswith("z = x * 2")
    for missing in ("x + y", "x - ...", "y(...)"):
        with pytest.raises(CitationError):
            cite(sample, missing)
