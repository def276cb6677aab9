"""What a student meets on the Attention tab, its handlers called directly on tiny random
models (fast): a what-if the newly chosen model has nothing for is unticked, and the note on a
pad token the model does not mask names that model's own pad token."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import llama_folder

from ui.serving.state import ModelRegistry
from ui.tabs.attention.handlers import refit_everything

pytest.importorskip("transformers")

LLAMA = "tinypad"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, hf_models) -> ModelRegistry:
    folder: Path = tmp_path_factory.mktemp("models") / LLAMA
    llama_folder(
        folder, 64, seed=6, specials=["<unk>", "<s>", "</s>"], num_hidden_layers=2, pad_token_id=2
    )
    return ModelRegistry("cpu", [str(folder), str(hf_models["bert"])])


def test_causal_mask_off_is_unticked_for_an_encoder_only_model(registry: ModelRegistry) -> None:
    bert = next(name for name in registry.model_names if "bert" in name.lower())
    config = registry.checkpoint(bert, None).config
    assert not config.has_decoder  # an encoder-only model: no causal mask to take off
    outputs = refit_everything(
        registry,
        "the cat sat",
        bert,
        "decoder masked self-attention",
        1,
        1,
        1,
        ["causal mask off", "no √d scaling"],
        False,
        None,
        None,
    )
    summary, switches = outputs[8], outputs[-1]
    assert switches["value"] == ["no √d scaling"]
    assert "causal mask off" not in summary and "no √d scaling" in summary


def test_the_unmasked_pad_note_names_the_model_s_own_pad_token(registry: ModelRegistry) -> None:
    checkpoint = registry.checkpoint(LLAMA, None)
    pad = checkpoint.tokenizer.id_to_token(checkpoint.config.pad_id)
    assert pad == "</s>"  # the folder's config names id 2
    outputs = refit_everything(
        registry,
        "w5 w6 w7 w8\nw9",
        LLAMA,
        "decoder masked self-attention",
        1,
        1,
        2,
        [],
        False,
        None,
        None,
    )
    summary = outputs[8]
    assert "pads with `</s>`" in summary and "endoftext" not in summary


# -- Long inputs --------------------------------------------------------------------------------


def test_long_inputs_sliders_follow_the_model_and_keep_what_it_has(registry) -> None:
    from ui.tabs.attention.scale import scale_controls

    config = registry.checkpoint(LLAMA, None).config
    _, layer, head = scale_controls(registry, LLAMA, None, 25, 9)
    assert (layer.maximum, head.maximum) == (config.n_decoder_layers, config.n_heads)
    assert (layer.value, head.value) == (config.n_decoder_layers, config.n_heads)
    _, layer, head = scale_controls(registry, LLAMA, None, 1, 2)
    assert (layer.value, head.value) == (1, 2)  # kept where the model has them


def test_long_inputs_say_at_once_that_a_new_text_is_not_drawn_yet(registry) -> None:
    from ui.tabs.attention.scale import stale_note

    words = " ".join(f"w{5 + i % 50}" for i in range(40))
    note = stale_note(registry, words, LLAMA, None)
    checkpoint = registry.checkpoint(LLAMA, None)
    n = len(checkpoint.tokenizer.encode_ids(words, add_bos=checkpoint.config.prompt_bos))
    assert f"**{n:,} tokens**" in note and "before" in note
    too_long = " ".join(["w5"] * (checkpoint.config.max_len + 10))
    assert "shorten it" in stale_note(registry, too_long, LLAMA, None)


def test_a_long_pass_reports_the_layer_it_has_reached(registry) -> None:
    """The first Long inputs view of 1,801 SmolLM2 tokens took 36 s with nothing said: the
    page's events now show a progress bar naming the layer the pass has reached."""
    import inspect

    import gradio as gr

    from ui.tabs.attention.scale import attention_scale_live

    reported: list[tuple[tuple[int, int], str]] = []

    def progress(value, desc="", **_):
        reported.append((value, desc))

    config = registry.checkpoint(LLAMA, None).config
    text = " ".join(f"w{3 + i % 60}" for i in range(30)) + " w7"  # a text no pass has read
    args = [text, LLAMA, "first", 1, 1, 0, 8, 2, -1, False, None]
    figures = attention_scale_live(registry, *args, progress=progress)
    checkpoint = registry.checkpoint(LLAMA, None)
    ids = checkpoint.tokenizer.encode_ids(text, add_bos=config.prompt_bos)
    assert f"**{len(ids):,} tokens**" in figures[-1]
    n = config.n_decoder_layers
    assert [value for value, _ in reported] == [(i, n) for i in range(1, n + 1)]
    assert reported[-1][1].endswith(f"layer {n} of {n}")
    # A default gradio replaces with the event's own tracker
    default = inspect.signature(attention_scale_live).parameters["progress"].default
    assert isinstance(default, gr.Progress)
