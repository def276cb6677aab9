"""Generate's "Silent mistakes (modern models)": one of the modern block's silent mistakes
switched on, the prompt's greedy continuation correct and broken side by side, and the meter
that gives the mistake away (mean negative log-likelihood and perplexity on a reference
paragraph, :mod:`transformer.lab.perplexity`).

Offered for models with the modern block (rotary positions, RMSNorm or grouped-query
attention: SmolLM2); for the others the panel says why it does not apply. The meter's figures
depend on the model and the mistake only, so they are kept per model (the correct one is read
once); continuations are kept per prompt too.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import gradio as gr
import torch

from transformer.core.config import ModelConfig
from transformer.core.model import Transformer
from transformer.generation import decoding_ends, greedy_batch
from transformer.lab import switches
from transformer.lab.analysis import prompt_ids
from transformer.lab.perplexity import METER_CHUNK, Reading, read_text, reference_paragraph
from transformer.lab.switches import SILENT_MISTAKE, SILENT_MISTAKES, Switch

from ...serving.errors import InputError, friendly, gpu, markdown_text, user_input
from ...serving.state import GenerationState, ModelRegistry, SessionModels, bind
from .chat import chat_template, render_chat, unwrap_chat
from .shown import PRIVATE, if_shown, open_flag

CHOICES = [switch.label for switch in SILENT_MISTAKES]
CONTINUATION_TOKENS = 12
MAX_PROMPT_TOKENS = 256  # the comparison decodes the prompt twice: a long one is refused
MAX_KEPT = 256  # continuations kept per model

_lock = threading.Lock()
_kept: weakref.WeakKeyDictionary[Transformer, dict[tuple, Any]] = weakref.WeakKeyDictionary()


def _remember(model: Transformer, key: tuple, compute: Any) -> Any:
    """``compute()`` once per model and ``key`` (computed outside the lock)."""
    with _lock:
        kept = _kept.setdefault(model, {})
        if key in kept:
            return kept[key]
    value = compute()
    with _lock:
        kept = _kept.setdefault(model, {})
        if len(kept) > MAX_KEPT:
            for old in [k for k in kept if k[0] == "text"][: MAX_KEPT // 2]:
                del kept[old]
        kept[key] = value
    return value


def silent_mistakes_apply(config: ModelConfig) -> bool:
    """Whether a model has the modern block the silent mistakes are about, and reads text alone
    (decoder-only), as the meter needs."""
    return config.is_modern and config.architecture == "decoder-only"


def not_modern_note(name: str, config: ModelConfig) -> str:
    """Why the panel does not apply to model ``name``."""
    return (
        f"**{markdown_text(name)}** is built like the 2017 paper ({config.architecture}, "
        f"{config.positional} positions, LayerNorm, {config.n_heads} key/value heads): the silent "
        "mistakes belong to the modern block (rotary positions, RMSNorm, grouped-query "
        "attention). Choose **SmolLM2-135M-Instruct** (or a Llama / Qwen2 model given with "
        "`--model`) to see them."
    )


def meter_reading(model: Transformer, ids: list[int], mistake: Switch | None) -> Reading:
    """The meter of ``model`` on the reference paragraph's ``ids``, correct (``None``) or with
    ``mistake`` (its record); kept per model."""
    ops = switches.operations([mistake] if mistake is not None else [])
    return _remember(model, ("meter", mistake), lambda: read_text(model, ids, ops))


def continuation(
    model: Transformer, ids: list[int], eos: int | None, mistake: Switch | None
) -> list[int]:
    """The greedy continuation (at most ``CONTINUATION_TOKENS`` ids) of prompt ``ids``,
    correct (``None``) or with ``mistake`` (its record)."""
    ops = switches.operations([mistake] if mistake is not None else [])

    def compute() -> list[int]:
        prompts = torch.tensor([ids], device=model.device)
        return greedy_batch(
            model, prompts=prompts, eos_id=eos, max_new_tokens=CONTINUATION_TOKENS, ops=ops
        )[0]

    return _remember(model, ("text", tuple(ids), mistake), compute)


def _shown(text: str) -> str:
    return markdown_text(text.replace("\n", "⏎")) or "(nothing)"


def _verdict(same_text: bool, correct: Reading, broken: Reading) -> str:
    if broken.nll < correct.nll - 1e-4:
        return (
            "The meter *improves*: too good to be true. The model reads tokens it should not "
            "see yet, so predicting them is easy; a lower loss is a warning here, not a success."
        )
    if abs(broken.nll - correct.nll) < 1e-3:
        return "Only a parity test against `transformers` catches a difference this small."
    if same_text:
        return "**Same words, worse reading**: the continuation hides it, only the meter shows it."
    if broken.perplexity > 100 * correct.perplexity:
        return "Not silent on this model: the text falls apart too, and the meter says how far."
    return "The words change but may still read well: the meter says how much worse it reads."


@friendly
@gpu
def silent_mistake(
    registry: ModelRegistry,
    source: str,
    model: str,
    mistake: str,
    session: SessionModels | None = None,
    state: GenerationState | None = None,
) -> tuple[str, str]:
    """The ``/silent_mistake`` endpoint: (the continuation of the prompt correct vs with
    ``mistake``, as Markdown; the meter, NLL and perplexity on the reference paragraph). The
    prompt is read as Generate reads it: wrapped in the chat template while the session's chat
    switch is on (``state``), so both continue the same text."""
    # The menu's label becomes its record here, once; nothing below reads a label.
    try:
        chosen = switches.by_label(mistake, SILENT_MISTAKE)
    except ValueError:
        raise InputError(f"choose a silent mistake: {', '.join(CHOICES)}") from None
    checkpoint = registry.checkpoint(model, session)
    config = checkpoint.config
    if not silent_mistakes_apply(config):
        return not_modern_note(model, config), ""
    head = f"**{markdown_text(chosen.label)}.** {markdown_text(chosen.explanation)}"
    if not chosen.applies(config):
        return f"{head}\n\nIt changes nothing in **{model}**: it needs {chosen.requires}.", ""
    tokenizer, net = checkpoint.tokenizer, checkpoint.model
    template = chat_template(registry, model, session) if state is not None and state.chat else None
    if template is not None and source.strip():
        source = render_chat(template, unwrap_chat(template, source))
    with user_input():
        ids = prompt_ids(net, tokenizer, source)
    if len(ids) > MAX_PROMPT_TOKENS:
        raise InputError(
            f"the prompt has {len(ids)} tokens; the comparison reads at most {MAX_PROMPT_TOKENS}"
        )
    _bos, eos = decoding_ends(config, tokenizer.bos_id, tokenizer.eos_id)
    correct_ids = continuation(net, ids, eos, None)
    broken_ids = continuation(net, ids, eos, chosen)
    correct_text, broken_text = tokenizer.decode(correct_ids), tokenizer.decode(broken_ids)
    paragraph = prompt_ids(net, tokenizer, reference_paragraph())[: config.max_len]
    right, wrong = meter_reading(net, paragraph, None), meter_reading(net, paragraph, chosen)
    text = (
        f"{head}\n\n| | greedy continuation of the prompt ({CONTINUATION_TOKENS} tokens at most) |\n"
        f"|---|---|\n| correct | {_shown(correct_text)} |\n| broken | "
        f"{_shown(broken_text)} |"
    )
    ratio = wrong.perplexity / right.perplexity if right.perplexity else float("inf")
    meter = (
        f"**The meter**: how well the model reads a plain reference paragraph ({right.tokens} "
        f"predicted tokens, read {METER_CHUNK} at a time through the key/value cache), correct "
        f"and broken by *{markdown_text(chosen.label)}*.\n\n"
        "| | mean NLL (nats/token) | perplexity |\n|---|---|---|\n"
        f"| correct | {right.nll:.4f} | {right.perplexity:.2f} |\n"
        f"| broken | {wrong.nll:.4f} | {wrong.perplexity:.2f} |\n"
        f"| change | {wrong.nll - right.nll:+.4f} | × {ratio:.2f} |\n\n"
        f"{_verdict(correct_ids == broken_ids, right, wrong)}"
    )
    return text, meter


def build_silent(
    registry: ModelRegistry,
    source: gr.Textbox,
    model_name: gr.Dropdown,
    session: gr.State,
    generation: gr.State,
) -> dict[str, gr.Component]:
    """The accordion, wired live (when it opens, and while open when the prompt or the model
    changes; always when the mistake changes) and as ``/silent_mistake``; returns its shareable
    control. Closed, it computes nothing (:mod:`.shown`)."""
    with gr.Accordion(
        "Silent mistakes (modern models)", open=False, elem_id="silent-mistakes"
    ) as accordion:
        gr.Markdown(
            "The seeds' mistakes broke their models visibly. A modern model's mistakes fail "
            "silently: it still writes fluent text. Switch one on and compare the continuation "
            "of the prompt above, then the **meter**: the model's loss on a reference text."
        )
        mistake = gr.Dropdown(CHOICES, value=CHOICES[0], label="Silent mistake")
        with gr.Row(equal_height=False):
            text = gr.Markdown(elem_id="silent-continuation")
            meter = gr.Markdown(elem_id="silent-meter")
    inputs = [source, model_name, mistake, session, generation]
    handler = bind(silent_mistake, registry)
    # Every draw of the panel runs in one queue, one at a time, in the order asked: each reads
    # the mistake the page showed when it was asked, so a draw asked on opening the panel and
    # still running when a mistake is chosen would otherwise land last and show the old one.
    one_at_a_time: dict[str, Any] = {"concurrency_id": "silent-mistakes", "concurrency_limit": 1}
    mistake.change(
        handler,
        inputs,
        [text, meter],
        trigger_mode="always_last",
        api_name="silent_mistake",
        **one_at_a_time,
    )
    shown, opened = open_flag(accordion)
    opened.then(handler, inputs, [text, meter], **one_at_a_time, **PRIVATE)
    follower = if_shown(handler, 2)
    for control in (model_name, source):
        control.change(
            follower,
            [*inputs, shown],
            [text, meter],
            trigger_mode="always_last",
            **one_at_a_time,
            **PRIVATE,
        )
    return {"silent_mistake": mistake}
