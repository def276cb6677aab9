"""Starting and restarting a decoding: the UI's controls as decoding settings, where a
model starts and stops, what it cannot read, and the session's current decoding."""

from __future__ import annotations

from typing import Any

from transformer.analysis import prompt_ids, unreadable_characters
from transformer.checkpoint import Checkpoint
from transformer.generation import (
    MAX_NEW_TOKENS,
    DecodingSession,
    DecodingSettings,
)
from transformer.training.tasks import reference_target

from ...errors import InputError, user_input
from ...inputs import as_float, as_int
from ...state import GenerationState, ModelRegistry, SessionModels

TOP_K_SHOWN = 10  # bars in the next-token chart
RESTARTED = "settings changed — restarted"

# (source, model, strategy); the teacher-forcing reference is each task's own answer.
EXAMPLES = [
    ("the small cat sees a red ball", "translate", "greedy"),
    ("k d a m t q b", "reverse", "greedy"),
    ("the teacher sees", "continue", "sample"),
    ("a big dog never eats the old cake", "translate", "beam"),
]


# A prompt has many right continuations, so the continue task knows no single answer: its
# example brings one of its own (a sentence of the task's grammar, checked by a test).
EXAMPLE_REFERENCES = {("the teacher sees", "continue"): "a small bird"}


def example_reference(source: str, task: str) -> str:
    """The reference an example is compared with: the task's correct answer, or the example's
    own continuation for a prompt ("" when there is neither)."""
    return reference_target(task, source) or EXAMPLE_REFERENCES.get((source, task), "")


def decoding_settings(
    strategy: str, temperature: Any, top_k: Any, top_p: Any, beam: Any, max_tokens: Any, seed: Any
) -> DecodingSettings:
    """The UI's decoding controls as validated ``DecodingSettings`` (top-k 0 and top-p 1 = off)."""
    top_p_value = as_float(top_p if top_p is not None else 1.0, "top-p", 0.0, 1.0)
    return DecodingSettings(
        strategy=strategy,
        temperature=as_float(temperature, "temperature", 0.0, 100.0),
        top_k=as_int(top_k, "top-k", 0, 1000) or None,
        top_p=None if top_p_value >= 1.0 else top_p_value,
        beam_width=as_int(beam, "beam width", 1, 16),
        max_new_tokens=as_int(max_tokens, "max tokens", 1, MAX_NEW_TOKENS),
        seed=as_int(seed, "seed", 0, 2**31 - 1),
        capture_attention=True,
        top_k_shown=TOP_K_SHOWN,
    )


def cannot_generate(name: str, checkpoint: Checkpoint) -> str | None:
    """Why ``checkpoint`` cannot generate (an encoder-only model), or None if it can."""
    config = checkpoint.config
    if config.has_decoder:
        return None
    family = checkpoint.info.get("family")
    kind = "a BERT-family" if family == "bert" else f"an {config.architecture}"
    return (
        f"**{name}** is {kind} model: it reads a whole text at once and has no decoder, so it "
        "cannot write text token by token. Pick a model with a decoder (translate, reverse, "
        "continue, or a GPT-2 or Marian model given with `--model`) to generate."
    )


def start_ids(checkpoint: Checkpoint, text: str) -> tuple[list[int], int | None, int | None]:
    """(source or prompt ids, the decoder's first id, the end id) for a decoding from ``text``.

    The model's own configuration decides where decoding starts and ends when it says
    (Marian: ``decoder_start_id``, ``eos_id``), else the tokenizer's [BOS]/[EOS]. A Marian
    source ends with its end token, as Marian's tokenizer writes it; a decoder-only prompt
    starts with [BOS] when the tokenizer has one (GPT-2: ``<|endoftext|>``).
    """
    model, tokenizer, config = checkpoint.model, checkpoint.tokenizer, checkpoint.config
    if config.architecture == "decoder-only" and tokenizer.bos_id is None:
        if not (text or "").strip():
            raise InputError("enter a prompt first")
        ids = tokenizer.encode_ids(text)
    else:
        with user_input():  # the library checks the text it is given
            ids = prompt_ids(model, tokenizer, text)
    bos = config.decoder_start_id if config.decoder_start_id is not None else tokenizer.bos_id
    eos = config.eos_id if config.eos_id is not None else tokenizer.eos_id
    if checkpoint.info.get("family") == "marian" and eos is not None and ids[-1:] != [eos]:
        ids.append(eos)
    if not ids:
        raise InputError("the text gives no tokens: enter a source sentence (or a prompt)")
    return ids, bos, eos


def unreadable(checkpoint: Checkpoint, text: str) -> list[str]:
    """The characters of ``text`` that the model's tokenizer maps to its unknown token (the
    library's one `unreadable_characters`)."""
    return unreadable_characters(checkpoint.tokenizer, text or "")


def unreadable_note(checkpoint: Checkpoint, text: str) -> str:
    """A sentence naming the characters the model cannot read, or ``""``."""
    chars = unreadable(checkpoint, text)
    if not chars:
        return ""
    listed = ", ".join(f"“{c}”" for c in chars)
    one = len(chars) == 1
    return (
        f"⚠️ The model cannot read {listed}: {'it is' if one else 'they are'} not in its "
        f"vocabulary, so {'it becomes' if one else 'they become'} "
        f"`{checkpoint.tokenizer.id_to_token(checkpoint.tokenizer.unk_id)}`."
    )


def _restart(
    registry: ModelRegistry, state: GenerationState, session: SessionModels, key: tuple
) -> None:
    """Start ``state`` afresh from ``key`` = (source, model name, *decoding controls), in place
    (the session keeps one state object, and with it its lock)."""
    source, name, *settings = key
    checkpoint = registry.checkpoint(name, session)
    reason = cannot_generate(name, checkpoint)
    if reason is not None:
        raise InputError(reason.replace("**", "'").replace("`", ""))
    ids, bos, eos = start_ids(checkpoint, source)
    tokenizer = checkpoint.tokenizer
    with user_input():  # the library checks the settings and the prompt's length
        state.decoding = DecodingSession(
            checkpoint.model,
            ids,
            decoding_settings(*settings),
            bos_id=bos if bos is not None else 0,
            eos_id=eos,
            decode_token=lambda i: tokenizer.id_to_token(i) or "?",
        )
    state.key = key
    state.source_pieces = [tokenizer.id_to_token(i) or "?" for i in ids]


def start(registry: ModelRegistry, session: SessionModels, key: tuple) -> GenerationState:
    """A new decoding from ``key`` = (source, model name, *decoding controls)."""
    state = GenerationState()
    _restart(registry, state, session, key)
    return state


def current(
    registry: ModelRegistry, state: GenerationState | None, session: SessionModels, key: tuple
) -> tuple[GenerationState, str]:
    """The session's decoding, restarted if there is none, any input changed, or the model
    behind its name is another one now (a retrained "trained here"); with a note saying why
    when a decoding in progress was restarted (``""`` otherwise). Call with the state's lock."""
    state = state if state is not None else GenerationState()
    checkpoint = registry.checkpoint(key[1], session)
    decoding = state.decoding
    if decoding is not None and state.key == key and decoding.model is checkpoint.model:
        return state, ""
    note = ""
    if decoding is not None and decoding.records:
        if state.key != key and state.key[:2] == key[:2]:
            note = RESTARTED
        elif state.key != key:
            note = "input changed — restarted"
        else:
            note = "the model was retrained — restarted"
    _restart(registry, state, session, key)
    return state, note
