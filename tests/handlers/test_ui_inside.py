"""The Inside-a-layer tab's handlers, called directly, on every bundled model, the shipped MiniLM
(BERT) and tiny random GPT-2 and BERT models loaded through the registry.

Ranges are checked against the model's own modules, the query menu against an independent
tokenization, the drawn numbers against the library's walkthrough (itself checked against the
trace in tests/library/test_inside.py), and bad input against the message a student should read.
"""

from __future__ import annotations

import json

import gradio as gr
import numpy as np
import pytest
import torch
from conftest import tiny_llama

from transformer.lab.inside import walkthrough
from transformer.lab.inspection import analyse
from ui.serving.state import TRAINED_HERE, ModelRegistry, SessionModels
from ui.tabs import inside
from ui.tabs.inside.handlers import N_OUTPUTS

MINILM = "all-MiniLM-L6-v2"
TEXT = "the cat sat w9 w10 the cat"


@pytest.fixture(scope="module")
def registry(hf_models) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), [str(hf_models["gpt2"]), str(hf_models["bert"])])


def _models(registry: ModelRegistry, hf_models) -> list[str]:
    return [*registry.bundled.models, str(hf_models["gpt2"]), str(hf_models["bert"])]


def _stacks(model: torch.nn.Module) -> dict[str, tuple[int, int]]:
    """Layers and heads per stack, read off the model's own modules."""
    stacks = {}
    for stack in ("encoder", "decoder"):
        module = getattr(model, stack, None)
        if module is not None:
            stacks[stack] = (len(module.layers), module.layers[0].self_attention.n_heads)
    return stacks


def _tokens(checkpoint, text: str, stack: str) -> list[int]:
    """The stack's input ids, from the tokenizer (encoder) or an independent analysis."""
    config = checkpoint.config
    if stack == "encoder":
        return checkpoint.tokenizer.encoding(text).ids
    if not config.has_encoder:  # decoder-only: the prompt after the start token
        return checkpoint.tokenizer.encode_ids(text, add_bos=True)
    return analyse(checkpoint.model, checkpoint.tokenizer, [text]).trace.target.tokens[0].tolist()


def test_ranges_and_tokens_follow_the_model_and_the_sentence(registry, hf_models):
    session = SessionModels()
    for name in [*_models(registry, hf_models), MINILM]:
        checkpoint = registry.checkpoint(name, session)
        stacks = _stacks(checkpoint.model)
        text = TEXT if name in (str(hf_models["gpt2"]), str(hf_models["bert"])) else "a b c d e"
        for stack, (n_layers, n_heads) in stacks.items():
            radio, layer, head, query = inside.controls(
                registry, text, name, stack, 99, 99, 99, session
            )
            assert [c[0] if isinstance(c, tuple) else c for c in radio.choices] == list(stacks)
            assert radio.value == stack
            assert (layer.maximum, layer.value) == (max(n_layers, 2), n_layers), name
            assert (head.maximum, head.value) == (max(n_heads, 2), n_heads), name
            ids = _tokens(checkpoint, text, stack)
            assert [value for _, value in query.choices] == list(range(len(ids))), name
            assert query.value == len(ids) - 1  # 99 clamped to the last token
            pieces = [checkpoint.tokenizer.id_to_token(i) for i in ids]
            assert [label for label, _ in query.choices] == [
                f"{i}: {p}" for i, p in enumerate(pieces)
            ]
    # A stack the model lacks falls back to the one it has.
    radio, *_ = inside.controls(registry, "a b", "continue", "encoder", 1, 1, 0, session)
    assert radio.value == "decoder" and [c[0] for c in radio.choices] == ["decoder"]


def _section(outputs, index):
    return outputs[1 + 4 * index : 5 + 4 * index]


def test_every_model_draws_every_section_with_the_walkthroughs_numbers(registry, hf_models):
    session = SessionModels()
    for name in _models(registry, hf_models):
        checkpoint = registry.checkpoint(name, session)
        text = TEXT if name.startswith("/") else "the small cat sees a red ball"
        for stack, (n_layers, n_heads) in _stacks(checkpoint.model).items():
            outputs = inside.inside_layer(
                registry, text, name, stack, n_layers, n_heads, 1, False, session
            )
            assert len(outputs) == N_OUTPUTS
            assert f"layer **{n_layers}** of the {stack}" in outputs[0]
            analysis = analyse(checkpoint.model, checkpoint.tokenizer, [text])
            walk = walkthrough(checkpoint.model, analysis, stack, n_layers - 1, n_heads - 1, 1)
            cross = stack == "decoder" and checkpoint.config.has_encoder
            for index, key in enumerate(("input", "self-attention", "cross-attention")):
                update, steps, code, figure = _section(outputs, index)
                present = key != "cross-attention" or cross
                assert update["visible"] is present, (name, stack, key)
                if not present:
                    assert figure is None
                    continue
                for step in walk.section(key):
                    assert f"{step.name}** `{step.shape}`" in steps
                    assert f"{step.code}\n{step.code.text}" in code
                assert figure.layout.height > 0
            # The feed-forward figure: the W₁ strip holds the walkthrough's d_ff numbers.
            *_, figure = _section(outputs, 3)
            strips = [t for t in figure.data if t.type == "heatmap"]
            hidden = walk.step("ff.hidden").values.numpy()
            assert any(
                np.asarray(t.z).shape == (1, checkpoint.config.d_ff)
                and np.allclose(np.asarray(t.z)[0], hidden)
                for t in strips
            ), name


def test_the_per_key_table_lists_every_key_with_masked_ones_marked(registry):
    outputs = inside.inside_layer(
        registry, "the small cat sees a red ball", "continue", "decoder", 2, 3, 4, False, None
    )
    figure = _section(outputs, 1)[3]
    (table,) = [t for t in figure.data if t.type == "table"]
    keys, *_, why = table.cells.values
    checkpoint = registry.checkpoint("continue", None)
    n_keys = len(checkpoint.tokenizer.encode_ids("the small cat sees a red ball", add_bos=True))
    assert len(keys) == n_keys
    # Causal: keys after the query (position 4) are masked, the others not.
    assert [w != "—" for w in why] == [j > 4 for j in range(n_keys)]


def test_minilm_figures_stay_small_and_large_font_grows_them(registry):
    text = "The cat sat on the mat because it was tired."
    small = inside.inside_layer(registry, text, MINILM, "encoder", 6, 12, 3, False, None)
    large = inside.inside_layer(registry, text, MINILM, "encoder", 6, 12, 3, True, None)
    assert "d_model 384" in small[0] and "12 heads" in small[0]
    for index in (0, 1, 3):
        figure, big = _section(small, index)[3], _section(large, index)[3]
        assert len(json.dumps(figure.to_plotly_json(), default=str)) < 300_000
        assert big.layout.font.size > figure.layout.font.size
        assert big.layout.height > figure.layout.height


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "translate", "encoder", 1, 1, 0), "enter a sentence"),
        (("a b\nc d", "translate", "encoder", 1, 1, 0), "one sentence at a time"),
        (("a b", "translate", "encoder", 9, 1, 0), "layer must be between 1 and 3"),
        (("a b", "translate", "encoder", 1, 0, 0), "head must be between 1 and 4"),
        (("a b", "translate", "encoder", 1, 1, 7), "query token must be one of the"),
        (("a b", "translate", "encoder", 1, 1, "x"), "query token must be a position"),
        (("a b", "continue", "encoder", 1, 1, 0), "decoder-only: choose decoder"),
        (("a b", "nope", "encoder", 1, 1, 0), "no model called .nope."),
        (("a b", TRAINED_HERE, "encoder", 1, 1, 0), "no model has been trained"),
        (("a b " * 400, "reverse", "encoder", 1, 1, 0), "reads at most"),
    ],
)
def test_bad_input_gets_a_message(registry, args, message):
    with pytest.raises(gr.Error, match=message):
        inside.inside_layer(registry, *args, False, SessionModels())


def test_unknown_characters_are_named_and_the_query_may_be_given_as_its_label(registry):
    outputs = inside.inside_layer(
        registry, "the cat 日本", "translate", "encoder", 1, 1, "1: x", False, None
    )
    assert "cannot read" in outputs[0] and "日" in outputs[0]
    assert "query token `1:" in outputs[0]


def test_a_change_of_model_fits_the_controls_and_draws_with_them_in_one_event(registry):
    # From translate's encoder, token 9, layer 3 to the decoder-only continue model, 2 tokens.
    outputs = inside.refresh(registry, "a b", "continue", "encoder", 3, 4, 9, False, None)
    stack, layer, head, query, summary, *_ = outputs
    n_tokens = len(registry.checkpoint("continue", None).tokenizer.encode_ids("a b", add_bos=True))
    assert (stack.value, layer.value, head.value) == ("decoder", 3, 4)
    assert query.value == n_tokens - 1
    assert f"query token `{n_tokens - 1}:" in summary and "of the decoder" in summary
    assert len(outputs) == 4 + N_OUTPUTS


def test_one_request_is_read_strictly_for_the_api_and_fitted_for_the_controls(registry):
    """The controls' values are read once into a request of 0-based positions: fitted, a stale
    value moves into range; strict, it is refused; and the fitted values read strictly again
    are the same request."""
    from ui.serving.errors import InputError
    from ui.tabs.inside.view import InsideRequest

    checkpoint = registry.checkpoint("continue", None)
    n_layers = checkpoint.config.n_decoder_layers
    n_tokens = len(checkpoint.tokenizer.encode_ids("a b", add_bos=True))
    fitted = InsideRequest.read(registry, "a b", "continue", "encoder", 99, 0, "99: x", fit=True)
    assert (fitted.stack, fitted.layer, fitted.head) == ("decoder", n_layers - 1, 0)
    assert fitted.query == n_tokens - 1
    assert [i for _, i in fitted.choices] == list(range(n_tokens))
    with pytest.raises(InputError, match="choose decoder"):
        InsideRequest.read(registry, "a b", "continue", "encoder", 1, 1, 0, fit=False)
    with pytest.raises(InputError, match=f"layer must be between 1 and {n_layers}"):
        InsideRequest.read(registry, "a b", "continue", "decoder", 99, 1, 0, fit=False)
    with pytest.raises(InputError, match="query token must be one of"):
        InsideRequest.read(registry, "a b", "continue", "decoder", 1, 1, 99, fit=False)
    strict = InsideRequest.read(
        registry, "a b", "continue", "decoder", n_layers, 1, n_tokens - 1, fit=False
    )
    assert (strict.layer, strict.head, strict.query) == (fitted.layer, fitted.head, fitted.query)


# -- the Llama family: a tiny random Llama through the registry, and the shipped SmolLM2 ------


def _check_modern_view(registry, name, text, layer, head, query) -> None:
    """The handler draws every step of a Llama-family layer with the walkthrough's numbers, and
    the mistakes panel offers (and runs) only what applies to RMSNorm and rotary positions."""
    from transformer.lab.mistakes import LAYER_NORM_STD_EPS
    from ui.tabs.attention import mistakes

    session = SessionModels()
    checkpoint = registry.checkpoint(name, session)
    config = checkpoint.config
    model = checkpoint.model
    n_layers = len(model.decoder.layers)
    attention = model.decoder.layers[0].self_attention
    n_heads, n_kv = attention.n_heads, attention.n_kv_heads
    assert n_kv < n_heads
    radio, layers, heads, _ = inside.controls(registry, text, name, "encoder", 99, 99, 0, session)
    assert radio.value == "decoder"
    assert (layers.maximum, heads.maximum) == (n_layers, n_heads)
    outputs = inside.inside_layer(
        registry, text, name, "decoder", layer, head, query, False, session
    )
    assert len(outputs) == N_OUTPUTS
    assert f"{n_heads} query heads sharing {n_kv} key/value heads" in outputs[0]
    assert "RMSNorm" in outputs[0] and "rotary" in outputs[0]
    analysis = analyse(model, checkpoint.tokenizer, [text])
    walk = walkthrough(model, analysis, "decoder", layer - 1, head - 1, query)
    for key in ("self.norm_in", "self.angles", "self.q_rotated", "self.k_rotated", "ff.product"):
        assert walk.has(key), key
    kv = (head - 1) // (n_heads // n_kv)  # grouped-query: query head h reads h // group
    assert f"key/value head {kv + 1}" in walk.step("self.k").name
    for index, key in enumerate(("input", "self-attention", "cross-attention", "feed-forward")):
        update, steps, code, figure = _section(outputs, index)
        assert update["visible"] is (key != "cross-attention"), key
        for step in walk.section(key):
            assert f"{step.name}** `{step.shape}`" in steps
            assert f"{step.code}\n{step.code.text}" in code
    # The feed-forward figure holds the unit activity SiLU(gate) ⊙ up, number for number.
    *_, figure = _section(outputs, 3)
    product = walk.step("ff.product").values.numpy()
    assert any(
        np.asarray(t.z).shape == (1, config.d_ff) and np.allclose(np.asarray(t.z)[0], product)
        for t in figure.data
        if t.type == "heatmap"
    )
    menu = mistakes.choices(registry, name, None, session)
    offered = {c[0] if isinstance(c, tuple | list) else c for c in menu.choices}
    assert "LayerNorm: unbiased std + eps" not in offered  # RMSNorm has no mean and no bias
    assert "sin and cos swapped, base 1000" not in offered  # rotary: no sinusoid table
    assert "mask polarity inverted" in offered and "heads split with a bare view" in offered
    for mistake in ("heads split with a bare view", "mask polarity inverted"):
        single, diff, said = mistakes.panel(
            registry, name, text, "decoder", layer, head, mistake, False, session
        )
        assert mistake in said and single is not None and diff is not None
    with pytest.raises(gr.Error, match="does not apply"):
        mistakes.panel(
            registry, name, text, "decoder", 1, 1, "LayerNorm: unbiased std + eps", False, session
        )
    assert not LAYER_NORM_STD_EPS.applies(config)


def test_a_tiny_llama_draws_every_modern_step(tmp_path):

    tiny_llama(tmp_path, n_heads=4, n_kv_heads=2)
    registry = ModelRegistry(torch.device("cpu"), [str(tmp_path)])
    _check_modern_view(registry, str(tmp_path), "w5 w17 w3 w42 w8", 2, 4, 3)


@pytest.mark.slow
def test_the_shipped_smollm2_draws_its_last_layer_and_runs_its_mistakes():
    pytest.importorskip("gguf")
    registry = ModelRegistry(torch.device("cpu"), [])
    name = "SmolLM2-135M-Instruct"
    if name not in registry.model_names:
        pytest.skip("SmolLM2 is not installed (requirements-models.txt)")
    _check_modern_view(registry, name, "The capital of France is", 30, 9, 4)


@pytest.mark.parametrize(
    "model, stack, numbers",
    [("translate", "encoder", ["1", "2", "3"]), ("translate", "decoder", ["1", "2", "3", "4"])],
)
def test_the_sections_a_layer_has_are_numbered_one_after_another(registry, model, stack, numbers):
    """An encoder's layer has no cross-attention: its sections read 1, 2, 3 (they read 1, 2, 4,
    the hidden cross-attention keeping its number)."""
    outputs = inside.inside_layer(registry, "the small cat", model, stack, 1, 1, 0, False, None)
    shown = [update["label"] for update in outputs[1::4] if update["visible"]]
    assert [label.split(" · ")[0] for label in shown] == numbers
    assert shown[-1].endswith("Feed-forward network and the layer's output")
