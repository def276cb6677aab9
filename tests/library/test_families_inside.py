"""Inside a layer for the later families: every new component (QK-norm, the soft cap, the
score scale, output norms, parallel feed-forward, partial and scaled rotary, the sliding
window) is a step of the walkthrough, and the walkthrough's numbers are the model's own: its
attention row against the captured weights, its output against the captured layer output,
and the captured pass against ``transformers``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import family_folder
from family_checks import FAMILIES, assert_close, check_forward

from transformer.core.run import Call
from transformer.lab.inside import inside_layer
from transformer.lab.inspection import analyse
from transformer.pretrained import load_pretrained

pytest.importorskip("transformers")

TEXT = "w5 w17 w3 w42 w8 w61 w29 w77"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_layer_walkthrough_is_the_models_own(name: str, tmp_path: Path) -> None:
    family, config, matrices, expected_steps = FAMILIES[name]
    reference = family_folder(tmp_path, family, seed=len(name), matrices=matrices, **config)
    checkpoint = load_pretrained(tmp_path)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    check_forward(model, reference)  # the captured pass is transformers'
    trace = analyse(model, tokenizer, [TEXT]).trace
    n = trace.target.tokens.size(1)
    query = n - 1
    for layer in range(model.config.n_decoder_layers):
        head = layer % model.config.n_heads
        walk = inside_layer(model, tokenizer, TEXT, "decoder", layer, head, query)
        traced = trace.decoder_layers[layer]
        keys = {step.key for step in walk.steps}
        assert "self.weights" in keys and "output" in keys
        weights = traced.self_attention.weights[0, head, query]
        assert_close(walk.step("self.weights").values.float(), weights, f"layer {layer} weights")
        output = traced.output[0, query]
        assert_close(walk.step("output").values.float(), output, f"layer {layer} output")
        for step in walk.steps:
            assert step.code.path.startswith("transformer/"), (step.key, step.code)
        if layer == 0:
            assert expected_steps <= keys, expected_steps - keys


def test_the_window_is_named_as_the_reason_a_key_is_masked(tmp_path: Path) -> None:
    family_folder(tmp_path, "mistral", seed=3, sliding_window=3)
    checkpoint = load_pretrained(tmp_path)
    walk = inside_layer(checkpoint.model, checkpoint.tokenizer, TEXT, "decoder", 0, 0, 6)
    notes = walk.step("self.masked").notes
    assert notes[:4] == ["outside the sliding window of 3"] * 4 and notes[4:7] == ["", "", ""]
    assert torch.equal(
        walk.step("self.masked").off,
        torch.tensor([True] * 4 + [False] * 3 + [True] * (len(notes) - 7)),
    )


def test_the_block_diff_shows_each_new_component_with_why(tmp_path: Path) -> None:
    """GPT-2 (the paper's block, nearly) beside Gemma 2 and OLMo 2: a row for each of their
    new steps, with the model's own step on the modern side, a note on the paper's side, and
    a sentence on why it exists."""
    from conftest import build_hf_model

    from transformer.lab.block_diff import compare_layers

    gpt2 = load_pretrained(build_hf_model("gpt2", tmp_path / "gpt2", perturb=1))
    expected = {
        "gemma2": {"softcap", "output.norm", "ffn.output.norm"},
        "olmo2": {"qk_norm", "output.norm", "ffn.output.norm"},
    }
    for name, rows in expected.items():
        family, config, matrices, _ = FAMILIES[name]
        family_folder(tmp_path / name, family, seed=1, matrices=matrices, **config)
        modern = load_pretrained(tmp_path / name)
        diff = compare_layers(
            gpt2.model, gpt2.tokenizer, modern.model, modern.tokenizer, TEXT, 0, 0, 3
        )
        shown = {row.key: row for row in diff.rows}
        assert rows <= set(shown), rows - set(shown)
        for key in rows:
            row = shown[key]
            assert row.modern is not None and row.original is None, key
            assert row.original_note and len(row.why) > 40, key


@pytest.mark.parametrize("name", ["pythia", "gemma3"])
def test_each_silent_mistake_runs_on_the_later_families_and_changes_the_logits(
    name: str, tmp_path: Path
) -> None:
    """The modern block's silent mistakes on partial rotary (Pythia) and (1 + w) norms with
    QK-norm (Gemma 3): each runs and changes the logits, and the mistake is its own (the norm
    mistakes keep Gemma's 1 + w: written out here, they differ from the right norm by the
    mistake alone)."""
    from transformer.lab.silent_mistakes import ROTARY_NO_OFFSET, rms_eps_outside
    from transformer.lab.switches import SILENT_MISTAKE, applicable, operations

    family, config, matrices, _ = FAMILIES[name]
    family_folder(tmp_path, family, seed=2, matrices=matrices, **config)
    model = load_pretrained(tmp_path).model
    ids = torch.tensor([[5, 17, 3, 42, 8, 61, 29, 77, 12]])
    with torch.no_grad():
        right = model(tgt=ids)
        for mistake in applicable(model.config, SILENT_MISTAKE):
            if mistake is ROTARY_NO_OFFSET:  # changes cached steps only: uncached, the same
                continue
            wrong = model(tgt=ids, call=Call(ops=operations([mistake])))
            # (eps outside the root moves the logits by 1e-6 only: silent by design)
            assert bool(wrong.isfinite().all()) and (wrong - right).abs().max() > 0, mistake.label
    norms = [m for m in model.modules() if m.__class__.__name__ == "RMSNorm"]
    for norm in norms:
        x = torch.randn(3, norm.weight.numel())
        by_hand = (norm.weight + 1.0) * (x / (x.pow(2).mean(-1, keepdim=True).sqrt() + norm.eps))
        torch.testing.assert_close(rms_eps_outside(norm, x), by_hand)
