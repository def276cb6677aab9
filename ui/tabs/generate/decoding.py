"""Starting and restarting a decoding: which models can generate, where a model starts and
stops (the library's), what it cannot read, and the session's current decoding."""

from __future__ import annotations

import json
from pathlib import Path

from transformer.lab.analysis import decoding_ids, start_decoding, unreadable_characters
from transformer.pretrained import FAMILIES, PretrainedError, family_of, shipped_models
from transformer.pretrained.checkpoint import Checkpoint
from transformer.training.tasks import reference_target

from ...serving import inputs
from ...serving.errors import InputError, user_input
from ...serving.state import TRAINED_HERE, GenerationState, ModelRegistry, SessionModels
from .request import GenerateRequest

RESTARTED = "settings changed — restarted"

# (source, model, strategy); the teacher-forcing reference is each task's own answer.
EXAMPLES = [
    ("the small cat sees a red ball", "translate", "greedy"),
    ("k d a m t q b", "reverse", "greedy"),
    ("the teacher sees", "continue", "sample"),
    ("a big dog never eats the old cake", "translate", "beam"),
]


OPENING = ("What is the capital of France?", "SmolLM2-135M-Instruct", "greedy")
"""What the tab opens on when the shipped SmolLM2 is installed: a real language model writing
English (read in the background at start; the first step waits for it), asked a question with
the chat switch on (:data:`OPENING_CHAT`): its greedy answer, "The capital of France is
Paris.", ends with its own end-of-turn token in 8 steps. Continued as plain text, "The capital
of France is" drifts after " Paris." into made-up dates a student cannot read to the end."""

OPENING_CHAT = True
"""Whether the tab opens with the chat switch on (for :data:`OPENING`'s model only)."""


def opening(names: list[str]) -> tuple[str, str, str]:
    """``(prompt, model, strategy)`` the tab opens on: :data:`OPENING` where its model is in
    the menu ``names``, else the first example."""
    return OPENING if OPENING[1] in names else EXAMPLES[0]


QUANTIZATION_BITS = {"Q4_0": "4-bit Q4_0", "Q4_1": "4-bit Q4_1", "Q8_0": "8-bit Q8_0"}


def weights_note(info: dict) -> str:
    """How a GGUF model's weights were stored (its most frequent quantization), honestly:
    ``"4-bit Q4_1 weights, dequantized to float32"``; ``""`` for other models."""
    if info.get("model_type") != "gguf":
        return ""
    kind = str(info.get("quantization", "")).split(",")[0].strip()
    if kind in ("F32", ""):
        return "float32 weights"
    return f"{QUANTIZATION_BITS.get(kind, kind)} weights, dequantized to float32"


# A prompt has many right continuations, so the continue task knows no single answer: its
# example brings one of its own (a sentence of the task's grammar, checked by a test).
EXAMPLE_REFERENCES = {("the teacher sees", "continue"): "a small bird"}


def example_reference(source: str, task: str) -> str:
    """The reference an example is compared with: the task's correct answer, or the example's
    own continuation for a prompt ("" when there is neither)."""
    return reference_target(task, source) or EXAMPLE_REFERENCES.get((source, task), "")


def reference_for(
    registry: ModelRegistry, source: str, name: str, session: SessionModels | None = None
) -> str:
    """The reference teacher forcing compares with once the source is ``source``: the model's
    task's answer for it where the task knows one (or an example's own continuation), else
    ``""``, so that a reference is never scored against another sentence than its own."""
    try:
        task = registry.checkpoint(name, session).info.get("task") or ""
    except ValueError:  # a model that cannot be read: nothing to compare with
        return ""
    return example_reference((source or "").strip(), task)


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


def can_generate(registry: ModelRegistry, name: str, session: SessionModels | None = None) -> bool:
    """Whether the model called ``name`` has a decoder, so that Generate's menu offers it.

    Told without loading a pretrained model that is not read yet: its ``config.json`` is
    mapped onto our configuration (no weights read). A model whose files cannot be read stays
    offered, so that choosing it says why it cannot be used.
    """
    if name == TRAINED_HERE:
        trained = session.trained if session is not None else None
        return trained is None or trained.config.has_decoder
    if name in registry.bundled.models:
        return registry.bundled.models[name].config.has_decoder
    if name in registry.pretrained:
        return registry.pretrained[name].config.has_decoder
    folder = _model_folder(registry, name)
    if folder is None:
        return True
    try:
        hf = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        return FAMILIES[family_of(hf)].config_from_hf(hf).has_decoder
    except (OSError, ValueError, KeyError, TypeError, PretrainedError):
        return True


def _model_folder(registry: ModelRegistry, name: str) -> Path | None:
    """The local folder of a pretrained model's menu name (a shipped model or a ``--model``
    folder), or ``None`` (a hub id, or a model not installed)."""
    spec = registry.sources.get(name)
    if spec is not None:
        path = Path(spec).expanduser()
        return path if path.is_dir() else None
    shipped = next((m for m in shipped_models() if m.name == name), None)
    return shipped.folder if shipped is not None else None


def generating_models(registry: ModelRegistry, session: SessionModels | None = None) -> list[str]:
    """The models Generate's menu offers: those of the session's menu that can generate."""
    return [name for name in registry.menu(session) if can_generate(registry, name, session)]


def start_ids(checkpoint: Checkpoint, text: str) -> tuple[list[int], int | None, int | None]:
    """(source or prompt ids, the decoder's first id, the end id) for a decoding from ``text``:
    the library's :func:`transformer.lab.analysis.decoding_ids`, its refusals the user's input."""
    with user_input():  # the library checks the text it is given
        return decoding_ids(checkpoint.model, checkpoint.tokenizer, text)


def unreadable(checkpoint: Checkpoint, text: str) -> list[str]:
    """The characters of ``text`` that the model's tokenizer maps to its unknown token (the
    library's :func:`transformer.lab.analysis.unreadable_characters`)."""
    return unreadable_characters(checkpoint.tokenizer, text or "")


def unreadable_note(checkpoint: Checkpoint, text: str) -> str:
    """The sentence the other tabs write about what the model cannot read in ``text``
    (:func:`ui.serving.inputs.unreadable_note`), or ``""``."""
    return inputs.unreadable_note(checkpoint.tokenizer, text or "")


def restart(
    registry: ModelRegistry,
    state: GenerationState,
    session: SessionModels,
    request: GenerateRequest,
) -> None:
    """Start ``state`` afresh from ``request``, in place (the session keeps one state object,
    and with it its lock): the library's :func:`transformer.lab.analysis.start_decoding`."""
    checkpoint = registry.checkpoint(request.model, session)
    reason = cannot_generate(request.model, checkpoint)
    if reason is not None:
        raise InputError(reason.replace("**", "'").replace("`", ""))
    with user_input():  # the library checks the prompt, its length and the settings
        decoding, pieces = start_decoding(
            checkpoint.model, checkpoint.tokenizer, request.source, request.settings
        )
    state.decoding, state.source_pieces, state.key = decoding, pieces, request.key


def start(
    registry: ModelRegistry, session: SessionModels, request: GenerateRequest
) -> GenerationState:
    """A new decoding from ``request``."""
    state = GenerationState()
    restart(registry, state, session, request)
    return state


def current(
    registry: ModelRegistry,
    state: GenerationState | None,
    session: SessionModels,
    request: GenerateRequest,
) -> tuple[GenerationState, str]:
    """The session's decoding, restarted if there is none, any input changed, or the model
    behind its name is another one now (a retrained "trained here"); with a note saying why
    when a decoding in progress was restarted (``""`` otherwise). Call with the state's lock."""
    state = state if state is not None else GenerationState()
    key = request.key
    checkpoint = registry.checkpoint(request.model, session)
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
    restart(registry, state, session, request)
    return state, note
