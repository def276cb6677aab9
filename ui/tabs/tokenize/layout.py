"""The tab's layout and event wiring."""

from __future__ import annotations

import gradio as gr
from gradio.context import Context

from transformer.text.real_tokenizers import REAL_TOKENIZERS

from ...serving.state import ModelRegistry, bind
from .choices import DEFAULT_VOCAB, VOCAB_INFO, VOCAB_RANGE, tokenizer_choices
from .handlers import learn, run_example, tokenize, tokenize_step, tokenize_view

COLORS = {"A": "#bfdbfe", "B": "#fde68a", "special": "#d1d5db", "unknown": "#fca5a5"}


def build(registry: ModelRegistry) -> dict[str, gr.Component]:
    """Lay out the tab and wire its events (``/tokenize``, ``/learn_bpe``); the view is drawn
    when the page opens and redrawn by every control."""
    gr.Markdown(
        "Text becomes **tokens** before a Transformer sees it. Pick a tokenizer — ours, or the real "
        "BERT, GPT-2 and GPT-4 ones — type anything, and watch the pieces; then replay how the "
        "tokenizer chose them, merge by merge."
    )
    choices = tokenizer_choices(registry)
    first_choice = "BPE, trained live on the bundled corpus"
    first_compare = "WordPiece (BERT style), trained live"
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(
                label="Text", value="The transformer attends to every token.", lines=3
            )
            # A refused input is said here; the controls and figures stay as they were.
            status = gr.Markdown(elem_classes=["input-status"])
        with gr.Column(scale=2):
            choice = gr.Dropdown(list(choices), value=first_choice, label="Tokenizer")
            low, high = VOCAB_RANGE["bpe"]
            vocab = gr.Slider(
                low,
                high,
                value=DEFAULT_VOCAB,
                step=1,
                label=f"Vocabulary size (bpe trained live: {low:,} to {high:,})",
                info=VOCAB_INFO["bpe"].format(hi=high),
            )
            upload = gr.File(
                label="tokenizer.json (for 'uploaded')",
                file_types=[".json"],
                type="filepath",
                visible=False,  # shown when "uploaded tokenizer.json" is chosen
            )
    compare = gr.Dropdown(
        ["(none)", *choices], value=first_compare, label="Compare side by side with"
    )
    run = gr.Button("Tokenize", variant="primary")
    with gr.Row():
        with gr.Column():
            stats = gr.Markdown()
            pieces = gr.HighlightedText(
                label="Tokens", color_map=COLORS, show_inline_category=False
            )
        with gr.Column():
            stats_b = gr.Markdown()
            pieces_b = gr.HighlightedText(
                label="Tokens (comparison)", color_map=COLORS, show_inline_category=False
            )
    table = gr.Dataframe(
        headers=[
            "#",
            "piece",
            "id",
            "start",
            "end",
            "special",
            "word",
            "reads as",
            "bytes explained",
        ],
        label="Tokens, ids and character offsets",
        max_height=300,
    )
    gr.Markdown("### Replay: how the tokenizer reached its pieces")
    step = gr.Slider(
        0,
        30,
        value=30,
        step=1,
        label="Step (merges for BPE, greedy choices for WordPiece, pieces for Unigram)",
    )
    replay_md = gr.Markdown()

    handler = bind(tokenize, registry)
    inputs = [text, choice, vocab, upload, compare, step]
    outputs = [stats, pieces, stats_b, pieces_b, table, replay_md]
    run.click(handler, inputs, outputs, api_name="tokenize")
    live_inputs = [text, choice, vocab, upload, compare]
    live_outputs = [*outputs, vocab, step, upload, status]
    root = Context.root_block
    gr.on(
        [
            *([root.load] if root is not None else []),
            text.input,
            text.submit,
            choice.input,
            compare.input,
            vocab.release,
            upload.change,
        ],
        bind(tokenize_view, registry),
        live_inputs,
        live_outputs,
        api_visibility="private",
        trigger_mode="always_last",
    )
    step.release(
        bind(tokenize_step, registry),
        inputs,
        [*outputs, status],
        api_visibility="private",
        trigger_mode="always_last",
    )
    gr.Examples(
        [
            ["The transformer attends to every token.", first_choice, first_compare],
            [
                "unbelievably tokenization-friendly",
                "WordPiece (BERT style), trained live",
                REAL_TOKENIZERS["bert-base-uncased"].label,
            ],
            [
                "Ünïcödé, emoji 🤖 and 中文 all work",
                REAL_TOKENIZERS["gpt2"].label,
                REAL_TOKENIZERS["cl100k_base"].label,
            ],
            [
                "def add(a, b):\n    return a + b  # 12345 tokens",
                REAL_TOKENIZERS["cl100k_base"].label,
                REAL_TOKENIZERS["gpt2"].label,
            ],
            [
                "a big dog sleeps under the old zebra",
                "translate model's tokenizer (BPE)",
                "(none)",
            ],
        ],
        [text, choice, compare],
        live_outputs,
        fn=bind(run_example, registry),
        run_on_click=True,
        cache_examples=False,  # they depend on the slider's state and the registry
        label="Examples for a lecture (click one to run it)",
    )

    gr.Markdown("### Learning replay: a BPE tokenizer learns its vocabulary, merge by merge")
    with gr.Row():
        corpus_box = gr.Textbox(
            label="Corpus (one line per sentence; empty = the first 40 lines of the bundled corpus)",
            lines=4,
        )
        with gr.Column():
            merges = gr.Slider(0, 400, value=20, step=1, label="Merges learned so far")
            word = gr.Textbox(label="Segment this word with those merges", value="transformer")
    learn_button = gr.Button("Learn")
    learn_md = gr.Markdown()
    learn_table = gr.Dataframe(
        headers=["rank", "pair", "new token", "count", "vocabulary size"],
        max_height=300,
        label="Merges in the order they were learned",
    )
    learn_inputs = [corpus_box, merges, word]
    learn_button.click(learn, learn_inputs, [learn_md, learn_table], api_name="learn_bpe")
    gr.on(
        [
            *([root.load] if root is not None else []),
            merges.release,
            word.submit,
            word.blur,
            corpus_box.blur,
        ],
        learn,
        learn_inputs,
        [learn_md, learn_table],
        api_visibility="private",
        trigger_mode="always_last",
    )
    return {"text": text, "tokenizer": choice, "vocab": vocab, "compare": compare}
