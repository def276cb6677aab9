"""The Generate tab's *chat* switch: wrap the prompt in the model's own chat template (SmolLM2's
ChatML, read from its GGUF) and show the wrapped prompt as tokens, so the special tokens that
mark the turns are visible. No endpoint: the switch rewrites the prompt box, whose own change
event generates, and marks the session's generation state, so that every request after it
reads its prompt wrapped, also a prompt typed over the wrapped one while the switch is on."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import gradio as gr

from transformer.lab.analysis import piece_legend, shown_pieces

from ...serving import endpoints
from ...serving.errors import code_span
from ...serving.inputs import as_int
from ...serving.state import GenerationState, ModelRegistry, SessionModels
from .request import GenerateRequest, decoding_settings

CHATML_USER = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
"""The minimal ChatML form, used when a template cannot be rendered with jinja2."""
_MARK = "\x00PROMPT\x00"


def chat_template(registry: ModelRegistry, name: str, session: SessionModels | None) -> str | None:
    """The model's own chat template (``info["chat_template"]``), or ``None`` if it has none."""
    try:
        checkpoint = registry.checkpoint(name, session)
    except Exception:  # an unavailable model offers no switch; its own view says why
        return None
    template = checkpoint.info.get("chat_template")
    return template if isinstance(template, str) and template.strip() else None


def render_chat(template: str, text: str) -> str:
    """``text`` as one user turn of ``template`` (jinja2, sandboxed, as transformers renders
    it), ending with the assistant's turn opened; the minimal ChatML form if it cannot render."""
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return environment.from_string(template).render(
            messages=[{"role": "user", "content": text}],
            add_generation_prompt=True,
            bos_token="",
            eos_token="",
        )
    except Exception:  # no jinja2, or a template using what a sandbox refuses
        return CHATML_USER.format(text)


def unwrap_chat(template: str, text: str) -> str:
    """The user's words back out of a prompt that :func:`render_chat` wrapped (else ``text``)."""
    prefix, _, suffix = render_chat(template, _MARK).partition(_MARK)
    if text.startswith(prefix) and text.endswith(suffix) and len(text) >= len(prefix + suffix):
        return text[len(prefix) : len(text) - len(suffix)]
    return text


def chat_tokens(registry: ModelRegistry, name: str, text: str, session: SessionModels) -> str:
    """The wrapped prompt as the model reads it, token by token, special tokens in bold."""
    checkpoint = registry.checkpoint(name, session)
    tokenizer = checkpoint.tokenizer
    ids = tokenizer.encoding(text, add_special_tokens=False).ids
    special = set(tokenizer.special_ids)
    raw = [tokenizer.id_to_token(i) or "?" for i in ids]
    # Written as every view writes a piece (␣You, ↵), the marks explained below the line.
    shown = shown_pieces(tokenizer, raw)  # one sequence: a split character named in each piece
    pieces = [
        f"**{code_span(piece)}**" if i in special else code_span(label)
        for i, piece, label in zip(ids, raw, shown, strict=True)
    ]
    legend = piece_legend(tokenizer, raw)
    return (
        f"The chat template makes the prompt **{len(ids)} tokens**; the special tokens that mark "
        "each turn (bold) are single tokens the model learned in fine-tuning:\n\n"
        + " ".join(pieces)
        + (f"\n\nPieces are written as the text they stand for: {legend}." if legend else "")
    )


def toggle_chat(
    registry: ModelRegistry, chat: bool, text: str, name: str, session: SessionModels
) -> tuple[Any, str]:
    """The prompt box and the token line when the switch changes: wrapped in the template (on),
    or the user's words back (off)."""
    template = chat_template(registry, name, session)
    text = text or ""
    if template is None:
        return gr.update(), ""
    if chat:
        bare = unwrap_chat(template, text)
        wrapped = render_chat(template, bare)
        return wrapped, chat_tokens(registry, name, wrapped, session)
    return unwrap_chat(template, text), ""


def chat_control(registry: ModelRegistry, name: str, session: SessionModels) -> Any:
    """The switch for a newly chosen model: shown (and off) only where it has a chat template."""
    return gr.update(visible=chat_template(registry, name, session) is not None, value=False)


def set_chat(chat: bool, state: GenerationState | None) -> GenerationState:
    """The session's generation state with the switch's value recorded (in place)."""
    state = state if state is not None else GenerationState()
    state.chat = bool(chat)
    return state


def chat_request(
    registry: ModelRegistry,
    request: GenerateRequest,
    session: SessionModels | None,
    state: GenerationState | None,
) -> GenerateRequest:
    """``request`` as the model reads it: while the switch is on (``state.chat``) and the model
    has a chat template, its prompt wrapped in the template (the user's words taken out of a
    prompt already wrapped, so wrapping twice changes nothing); else ``request`` itself."""
    if state is None or not state.chat:
        return request
    template = chat_template(registry, request.model, session)
    if template is None or not request.source.strip():
        return request
    wrapped = render_chat(template, unwrap_chat(template, request.source))
    return dataclasses.replace(request, source=wrapped)


@dataclass(frozen=True)
class GenerateCall:
    """One Generate event's inputs, read once: the request (its prompt as the model reads it,
    :func:`chat_request`), the session's models and its generation state."""

    request: GenerateRequest
    session: SessionModels
    state: GenerationState

    @classmethod
    def of(
        cls,
        registry: ModelRegistry,
        source: Any,
        model: Any,
        strategy: Any,
        temperature: Any,
        top_k: Any,
        top_p: Any,
        beam: Any,
        max_tokens: Any,
        seed: Any,
        layer: Any,
        head: Any,
        large: Any,
        session: SessionModels,
        state: GenerationState | None,
    ) -> GenerateCall:
        """The event's values in the order of ``request.INPUT_NAMES``, then the session's
        models and its generation state (a missing one is a fresh one); an
        :class:`InputError` naming a bad value."""
        request = GenerateRequest(
            source=source or "",
            model=model,
            settings=decoding_settings(strategy, temperature, top_k, top_p, beam, max_tokens, seed),
            layer=as_int(layer, "layer", 1, 1000),
            head=as_int(head, "head", 1, 1000),
            large=bool(large),
        )
        state = state or GenerationState()
        return cls(chat_request(registry, request, session, state), session, state)


takes_call = endpoints.takes_request(GenerateCall.of)
"""``handler(registry, call)`` as an event handler taking the Generate endpoints' values in
the order their API has them (``request.INPUT_NAMES``, then the session and the state)."""


def chat_preview(
    registry: ModelRegistry, chat: bool, text: str, name: str, session: SessionModels
) -> Any:
    """The token line under the switch for the prompt box's text: the wrapped prompt's tokens
    while the switch is on (a prompt typed anew is shown as the model will read it), ``""``
    when it is off or the model has no template."""
    template = chat_template(registry, name, session) if chat else None
    if template is None or not (text or "").strip():
        return ""
    return chat_tokens(registry, name, render_chat(template, unwrap_chat(template, text)), session)


def chat_shown(registry: ModelRegistry, name: str, session: SessionModels) -> Any:
    """The switch as the page opens: shown only where the model has a chat template, its value
    (the tab's opening one) kept."""
    return gr.update(visible=chat_template(registry, name, session) is not None)
