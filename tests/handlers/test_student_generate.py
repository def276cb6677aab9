"""What a student meets on the Generate tab, its handlers called directly on a tiny random
Llama (fast): the chat switch wraps every prompt the model reads while it is on, also one
typed over the wrapped prompt."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import llama_folder

from transformer.pretrained.shipped import SMOLLM2
from ui.serving.state import GenerationState, ModelRegistry, SessionModels
from ui.tabs.generate import handlers
from ui.tabs.generate.chat import chat_preview, set_chat, toggle_chat

pytest.importorskip("transformers")

NAME = "tinychat"
# A chat template in the tiny vocabulary's own words: w10 opens a user turn, w11 closes it and
# w12 opens the assistant's, as ChatML's <|im_start|>user … <|im_end|> <|im_start|>assistant.
TEMPLATE = (
    "{% for message in messages %}w10 {{ message['content'] }} w11 {% endfor %}"
    "{% if add_generation_prompt %}w12{% endif %}"
)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ModelRegistry:
    folder: Path = tmp_path_factory.mktemp("models") / NAME
    llama_folder(folder, 64, seed=4, specials=["<unk>", "<s>"], num_hidden_layers=2)
    registry = ModelRegistry("cpu", [str(folder)])
    registry.checkpoint(NAME, None).info["chat_template"] = TEMPLATE
    return registry


def _inputs(source: str, session: SessionModels, state: GenerationState) -> list:
    # source, model, strategy, temperature, top-k, top-p, beam, max tokens, seed, layer, head,
    # large font, then the session's models and the generation state
    return [source, NAME, "greedy", 1.0, 0, 1.0, 3, 8, 0, 1, 1, False, session, state]


def test_a_prompt_typed_while_chat_is_on_is_read_wrapped(registry: ModelRegistry) -> None:
    session, state = SessionModels(), GenerationState()
    # The switch's event: the flag, then the prompt box rewritten.
    state = set_chat(True, state)
    box, _ = toggle_chat(registry, True, "w3 w4", NAME, session)
    assert box.split() == ["w10", "w3", "w4", "w11", "w12"]
    # The student types a new question over the wrapped prompt: the model reads it wrapped.
    typed = "w5 w6 w7"
    handlers.first_step(registry, *_inputs(typed, session, state))
    assert state.source_pieces[-6:] == ["w10", "w5", "w6", "w7", "w11", "w12"]
    # The token line under the switch shows the new question, not the one before it.
    line = chat_preview(registry, True, typed, NAME, session)
    assert "`w5`" in line and "`w3`" not in line
    # Step, Back and Run read the same prompt: the decoding goes on, it is not restarted raw.
    handlers.step(registry, *_inputs(typed, session, state))
    assert state.decoding is not None and len(state.decoding.records) == 2
    assert state.source_pieces[-6:] == ["w10", "w5", "w6", "w7", "w11", "w12"]
    # The switch off: the prompt is read as typed again.
    set_chat(False, state)
    handlers.first_step(registry, *_inputs(typed, session, state))
    assert state.source_pieces[-3:] == ["w5", "w6", "w7"] and "w10" not in state.source_pieces


@pytest.mark.slow
@pytest.mark.skipif(not SMOLLM2.available, reason="needs the shipped SmolLM2")
def test_the_tab_opens_on_an_answer_a_student_can_read_to_the_end() -> None:
    """Continued as plain text, "The capital of France is" went on after " Paris." into
    "The answer is: 2018-01-22 12:12:53". The opening question, read with the chat switch on as
    the tab opens, is answered in one sentence that ends with the model's own end of turn."""
    from ui.tabs.generate.decoding import OPENING, OPENING_CHAT

    registry, session = ModelRegistry("cpu"), SessionModels()
    state = set_chat(OPENING_CHAT, GenerationState())
    prompt, name, strategy = OPENING
    assert name == SMOLLM2.name
    # The tab's own defaults: temperature 1, top-k off, top-p off, beam 3, 40 tokens, seed 0.
    inputs = [prompt, name, strategy, 1.0, 0, 1.0, 3, 40, 0, 1, 1, False, session, state]
    *_, last = handlers.run(registry, *inputs)
    decoding = state.decoding
    assert decoding is not None and decoding.done and decoding.stop_reason == "eos"
    tokenizer = registry.checkpoint(name, session).tokenizer
    assert tokenizer.decode(decoding.output_ids).strip() == "The capital of France is Paris."
    assert "Finished** (eos)" in last[0]


def test_a_toy_model_says_which_words_of_a_student_s_sentence_it_knows() -> None:
    """ "my little sister reads a long book" became "mon garsou vertal assiel" without a word
    said: the toy translate model knows 73 words, and four of these are not among them."""
    registry, session = ModelRegistry("cpu"), SessionModels()
    inputs = ["my little sister reads a long book", "translate", "greedy", 1.0, 0, 1.0, 3, 8, 0]
    summary = handlers.first_step(registry, *inputs, 1, 1, False, session, GenerationState())[0]
    note = next(line for line in summary.split("\n\n") if "vocabulary" in line)
    unknown, known = note.split(": it cuts")[0], note.split("it knows")[-1]
    for word in ("little", "sister", "reads", "long"):  # not toy English
        assert f"`{word}`" in unknown and f"`{word}`" not in known
    for word in ("my", "a", "book"):  # toy English: "mon", "un", "livrot"
        assert f"`{word}`" in known and f"`{word}`" not in unknown
    sentence = ["the small cat sees a red ball", "translate", "greedy", 1.0, 0, 1.0, 3, 8, 0]
    summary = handlers.first_step(registry, *sentence, 1, 1, False, session, GenerationState())[0]
    assert "vocabulary" not in summary  # every word known: nothing to say
