"""Token pieces are drawn as they are written: plotly reads a subset of HTML in every text it
draws (titles, tick labels, hovers, table cells), so a piece ``"</s>"`` (Marian's end of
sentence) or ``"<s>"`` (Llama's start) drew as nothing, ``"<b>bold</b>"`` as a bold "bold" and
``"a&amp;b"`` as "a&b". And a long piece (SmolLM2 has runs of 64 dashes, 80 "#", 80 spaces) is
cut where it labels a figure: in a sentence of code, one whole label widened the axis margin
until the heatmaps beside it were slivers.

Tiny random Marian and GPT-2 folders whose vocabularies hold such pieces go through every tab's
handlers. The fast test reads the figures as sent; the browser test draws them with plotly.js
itself (the reference for what plotly shows) in Chromium and reads the text it drew.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import plotly.graph_objects as go
import pytest
import torch
from conftest import shown

from ui.serving.state import GenerationState, ModelRegistry, SessionModels
from ui.tabs import attention, generate, inside, positions
from ui.tabs.attention import scale

pytest.importorskip("transformers")

# Pieces plotly would read as markup or entities; every one is a word of the tiny vocabularies.
HOSTILE = ("<s>", "<b>bold</b>", "a&amp;b", "<i>it</i>", "x<br>y", "<u>u</u>", "m<sub>2</sub>")
LONG = "=" * 64  # one piece of GPT-2's vocabulary
SENTENCE = " ".join(["the", *HOSTILE, LONG, "cat"])
KINDS = (
    "encoder self-attention",
    "decoder masked self-attention",
    "cross-attention (decoder → encoder)",
)


def _favour_bold(model: torch.nn.Module) -> None:
    """GPT-2 predicts ``"<b>bold</b>"`` (id 2, after ``<unk>`` and ``<s>``) at every position:
    the final norm's output is that token's embedding, made the longest, so the tied output
    layer scores it highest. Its bars, lens and titles then name it."""
    with torch.no_grad():
        embedding = model.transformer.wte.weight
        embedding[2] *= 8
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(embedding[2])


@pytest.fixture(scope="module")
def folders(tiny_hf_model) -> dict[str, str]:
    marian = tiny_hf_model("marian", words=("the", "cat", *HOSTILE, LONG), perturb=5)
    gpt2 = tiny_hf_model("gpt2", words=(*HOSTILE, "the", "cat", LONG), prepare=_favour_bold)
    return {"marian": str(marian), "gpt2": str(gpt2)}


def _figures(values: Any) -> Iterator[go.Figure]:
    for value in values if isinstance(values, tuple | list) else (values,):
        if isinstance(value, go.Figure):
            yield value


@pytest.fixture(scope="module")
def drawn(folders: dict[str, str]) -> dict[str, go.Figure]:
    """Every figure the tabs draw for ``SENTENCE``, named by where it came from."""
    registry = ModelRegistry(torch.device("cpu"), list(folders.values()))
    session = SessionModels()
    out: dict[str, go.Figure] = {}

    def keep(where: str, values: Any) -> None:
        for i, figure in enumerate(_figures(values)):
            out[f"{where} #{i}"] = figure

    marian, gpt2 = folders["marian"], folders["gpt2"]
    for kind in KINDS:
        keep(
            f"attention {kind}",
            attention.everything(registry, SENTENCE, marian, kind, 1, 1, 1, [], False, session),
        )
    keep(
        "attention scale",
        scale.attention_scale(
            registry, SENTENCE, gpt2, "previous", 1, 1, 0, 5, 2, 3, False, session
        ),
    )
    for stack in ("encoder", "decoder"):
        keep(
            f"inside {stack}",
            inside.inside_layer(registry, SENTENCE, marian, stack, 1, 1, 3, False, session),
        )
    keep(
        "inside gpt2",
        inside.inside_layer(registry, SENTENCE, gpt2, "decoder", 1, 1, 3, False, session),
    )
    keep("positions", positions.embeddings_view(registry, SENTENCE, marian, False, session))
    for name in (marian, gpt2):
        state = GenerationState()
        settings = [1.0, 0, 1.0, 3, 10, 0]  # temperature, top-k, top-p, beam, tokens, seed
        for step in range(2):
            *values, state = generate.step(
                registry, SENTENCE, name, "greedy", *settings, 1, 1, False, session, state
            )
            keep(f"generate {name.rsplit('/', 1)[-1]} step {step + 1}", values)
    return out


def _strings(value: Any) -> Iterator[str]:
    """Every string in a figure's JSON (labels, titles, hovers, cell texts)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_every_figure_sends_pieces_as_text_and_names_them(drawn: dict[str, go.Figure]) -> None:
    texts = {where: list(_strings(json.loads(fig.to_json()))) for where, fig in drawn.items()}
    # No piece reaches plotly as markup: its "<" and "&" arrive as entities.
    for where, strings in texts.items():
        raw = [s for s in strings for piece in HOSTILE if piece in s]
        assert not raw, f"{where} sends a piece as markup: {raw[:3]}"
    # ...and, decoded as plotly decodes entities, every piece is named where the sentence is.
    everything = [text for strings in texts.values() for text in shown(strings)]
    twice = [text for text in everything if "&lt;" in text or "&gt;" in text]
    assert not twice, f"escaped twice, shown as entities: {twice[:3]}"
    for piece in HOSTILE:
        assert any(piece in text for text in everything), piece
    chosen = [w for w, s in texts.items() if "gpt2 step 2" in w and "<b>bold</b>" in str(shown(s))]
    assert len(chosen) >= 3, "the chosen token names the bars, the lens and a title"


@pytest.mark.slow
@pytest.mark.browser
def test_plotly_draws_every_piece_as_it_is_written(
    drawn: dict[str, go.Figure], browser: Any
) -> None:
    """plotly.js itself (the copy the ``plotly`` package ships) draws every figure in Chromium:
    each piece reads as written in the text it drew, and no piece became a link."""
    from plotly.offline import get_plotlyjs

    # The session's Chromium (tests/conftest.py): a second playwright in the same process
    # would find the first one's event loop running.
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.set_content(f"<html><body><script>{get_plotlyjs()}</script></body></html>")
        texts: dict[str, str] = {}
        for where, figure in drawn.items():
            texts[where] = page.evaluate(
                """async (figure) => {
                    const div = document.createElement('div');
                    document.body.appendChild(div);
                    await Plotly.newPlot(div, figure.data, figure.layout);
                    const text = [...div.querySelectorAll('svg text')]
                        .map((node) => node.textContent).join('\\n');
                    const links = div.querySelectorAll('svg a').length;
                    Plotly.purge(div);
                    div.remove();
                    return links ? `LINKS ${links}\\n${text}` : text;
                }""",
                json.loads(figure.to_json()),
            )
    finally:
        page.close()
    linked = [where for where, text in texts.items() if text.startswith("LINKS")]
    assert not linked, f"plotly drew links in {linked}"
    everything = "\n".join(texts.values())
    for piece in HOSTILE:
        assert piece in everything, f"{piece!r} is drawn nowhere as written"
    assert "&lt;" not in everything and "&gt;" not in everything  # escaped once, not twice
    chosen = [
        where for where, text in texts.items() if "gpt2 step 2" in where and "<b>bold</b>" in text
    ]
    assert len(chosen) >= 3, "the chosen token names the bars, the lens and a title"


def test_a_long_piece_is_cut_where_it_labels_a_figure(drawn: dict[str, go.Figure]) -> None:
    cut = LONG[:19] + "…"  # 20 characters shown, the cut marked
    texts = {where: shown(_strings(json.loads(fig.to_json()))) for where, fig in drawn.items()}
    whole = [where for where, strings in texts.items() if any(LONG[:20] in s for s in strings)]
    assert not whole, f"a label holds more than 20 characters of the piece: {whole}"
    named = [where for where, strings in texts.items() if any(cut in s for s in strings)]
    # The head views, the masks, Inside's keys, the positions, the rollout and Generate's rows.
    assert len(named) >= 10, named
