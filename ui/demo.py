"""The whole app: the header, the five tabs, the queue, and the matching launch options."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr

from transformer.device import pick_device

from . import limits
from .state import ModelRegistry, SessionModels
from .tabs import attention, generate, positions, tokenize, training

CSS = """
.large-font { font-size: 130% !important; }
.large-font .prose, .large-font label, .large-font button { font-size: 1.25em !important; }
"""
LARGE_FONT_JS = "(on) => { document.body.classList.toggle('large-font', on); }"


def build_demo(
    device: str | None = "auto",
    models: Sequence[str] = (),
    allow_download: bool = False,
    preload: bool = True,
) -> gr.Blocks:
    """The app (not launched). ``launch_options()`` gives the matching ``launch()`` arguments.

    ``models`` adds pretrained model folders or hub ids (resolved from the local Hugging Face
    cache; downloaded only with ``allow_download``). Pretrained weights are read in the
    background when ``preload`` is set, else on first use.
    """
    registry = ModelRegistry(pick_device(device), models, allow_download)
    if preload:
        registry.preload()
    with gr.Blocks(title="Transformer, step by step") as demo:
        session = gr.State(SessionModels())
        with gr.Row():
            gr.Markdown(
                "# Transformer, step by step\nA from-scratch PyTorch Transformer, opened up."
            )
            large = gr.Checkbox(label="Large font (for projecting)", value=False)
        if registry.bundled.errors:
            gr.Markdown(
                "⚠️ "
                + "; ".join(
                    f"bundled model **{n}** unavailable: {r}"
                    for n, r in registry.bundled.errors.items()
                )
            )
        large.change(None, large, None, js=LARGE_FONT_JS)
        with gr.Tab("Tokenize"):
            tokenize.build(registry)
        with gr.Tab("Embeddings & positions"):
            positional, pe_inputs, pe_outputs = positions.build(registry, large, session)
        with gr.Tab("Attention"):
            attention.build(registry, large, session)
        with gr.Tab("Generate"):
            generate.build(registry, large, session)
        with gr.Tab("Model & training"):
            training.build(registry, large, session)
        demo.load(positional, pe_inputs, pe_outputs, api_visibility="private")
    demo.queue(default_concurrency_limit=4, max_size=limits.QUEUE_SIZE)
    return demo


def launch_options() -> dict[str, Any]:
    """Arguments for ``demo.launch()``, shared by ``python app.py`` and the tests."""
    return {
        "css": CSS,
        "theme": gr.themes.Soft(),
        "footer_links": ["api"],
        "show_error": True,
        "max_file_size": f"{limits.MAX_UPLOAD_BYTES >> 20}mb",
    }
