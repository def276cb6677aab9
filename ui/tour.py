"""The guided tour: a dozen stops in the order of the paper, each opening a tab with a preset of
its controls and one short paragraph. Next and Previous (buttons, or the ← → keys once the tour
is started) move through it; the menu starts it at any stop. Everything is in the page: it works
offline.

A stop names its tab by label and its controls by the keys that the tab's ``build(...)``
returns; a stop whose tab this app lacks is left out (logged). ``tests/handlers/test_tour.py`` checks
every stop against the built app.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from .links.views import SCROLL_JS

log = logging.getLogger("visualiser")

SENTENCE = "the small cat sees a red ball"
MODERN_MODEL = "SmolLM2-135M-Instruct"  # shipped: the modern block's stop opens on it
# Inside a layer's feed-forward section (its elem_id), 2,000 px below the tab's top.
FEED_FORWARD_SECTION = "inside-section-feed-forward"


@dataclass(frozen=True)
class Stop:
    """One stop: a title, the tab it opens (its label), the controls it sets and its text."""

    title: str
    tab: str
    text: str
    values: Mapping[str, Any] = field(default_factory=dict)
    # What the page scrolls to: a control's key, or the element id of a part of the tab (a
    # section far down the page); the top of the page when empty.
    focus: str = ""


STOPS: tuple[Stop, ...] = (
    Stop(
        "Text becomes tokens",
        "Tokenize",
        "A Transformer never sees letters. A tokenizer cuts the text into pieces from a fixed "
        "vocabulary and gives each an integer id. BPE starts from single characters and "
        "repeatedly merges the most frequent neighbouring pair; WordPiece and Unigram choose "
        "pieces by likelihood instead. Frequent words stay whole and rare ones split, so any "
        "text can be written with a few thousand tokens. The replay below shows the merges "
        "that produced these pieces.",
        {
            "text": "The transformer attends to every token.",
            "tokenizer": "BPE, trained live on the bundled corpus",
            "compare": "WordPiece (BERT style), trained live",
        },
    ),
    Stop(
        "Embeddings, scaled by √d_model",
        "Embeddings & positions",
        "Each token id selects one row of a learned embedding matrix: a vector of d_model "
        "numbers. The paper multiplies that vector by √d_model (8 for d_model = 64) before adding "
        "the positional encoding, so the small learned values are not drowned by the encoding, "
        "whose values lie between −1 and 1. The lower plots show the scaled embedding, the "
        "encoding and their sum, which is exactly what the first layer receives.",
        {"sentence": SENTENCE, "model": "translate"},
        focus="sentence",
    ),
    Stop(
        "Positional encoding",
        "Embeddings & positions",
        "Attention treats its input as a set: without help, *dog bites man* and *man bites dog* "
        "look the same. The paper adds PE[pos, 2i] = sin(pos / 10000^(2i/d_model)) and "
        "PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)). Each pair of dimensions is a sine and a "
        "cosine of its own wavelength, from 2π up to 10000·2π: the first dimensions change fast, "
        "the last ones slowly, so every position gets its own pattern, and PE[pos + k] is a fixed "
        "rotation of PE[pos]. Nearby positions look alike, as the similarity map shows.",
        {"d_model": 128, "positions": 64, "base": 10000, "dims": "0, 1, 6, 20"},
    ),
    Stop(
        "One attention head",
        "Attention",
        "Every token's vector is projected three ways: a query q, a key k and a value v, each of "
        "d_k = d_model / h numbers. A head scores every query against every key, divides by "
        "√d_k so that the softmax does not saturate, and turns each row into weights that sum "
        "to 1: Attention(Q, K, V) = softmax(QKᵀ/√d_k)·V. Rows are queries (the token that "
        "looks), columns are keys (the tokens looked at); each output is the weighted average "
        "of the values.",
        {
            "sentences": SENTENCE,
            "model": "translate",
            "kind": "encoder self-attention",
            "layer": 1,
            "head": 1,
        },
        focus="layer",
    ),
    Stop(
        "The padding mask and the causal mask",
        "Attention",
        "Sentences in a batch differ in length, so the short ones are padded, and the padding "
        "mask stops every query from attending to those [PAD] keys. The decoder also gets a "
        "causal mask: position t may attend only to positions up to t, so it cannot peek at the "
        "token it must predict. Masked scores become −∞ before the softmax (the grey cells), "
        "which gives them a weight of exactly 0. Sentence 2 is the shorter one: see its padding, "
        "and the triangle of the causal mask.",
        {
            "sentences": "the small cat sees a red ball\na big dog sleeps",
            "model": "translate",
            "kind": "decoder masked self-attention",
            "layer": 1,
            "head": 1,
            "row": 2,
        },
        focus="layer",
    ),
    Stop(
        "Multi-head attention",
        "Attention",
        "The model runs h heads side by side (4 here, 8 in the paper), each with its own "
        "projections W_Q, W_K, W_V into d_k = d_model / h dimensions, so each head can look for "
        "a different relation: the previous token, the same word, the end of the sentence. "
        "Their outputs are concatenated and mixed by W_O back into d_model numbers. The grid at "
        "the bottom shows every head of every layer on one colour scale: compare their patterns.",
        {
            "sentences": SENTENCE,
            "model": "translate",
            "kind": "encoder self-attention",
            "layer": 2,
            "head": 3,
        },
        focus="layer",
    ),
    Stop(
        "The feed-forward network",
        "Inside a layer",
        "After attention has moved information between positions, every position passes "
        "through the same two-layer network on its own: FFN(x) = max(0, x·W₁ + b₁)·W₂ + b₂, "
        "widening d_model to d_ff (512 → 2048 in the paper, 64 → 256 here) and back. Attention "
        "mixes tokens; the feed-forward network transforms each token's vector, and holds much "
        "of what the model has learned.",
        {"model": "translate", "text": SENTENCE, "layer": 1},
        focus=FEED_FORWARD_SECTION,
    ),
    Stop(
        "Residual connections and LayerNorm",
        "Inside a layer",
        "Each sub-layer is wrapped as LayerNorm(x + Sublayer(x)): its output is added to its "
        "input (the residual stream), then every position is normalised to mean 0 and variance "
        "1, with a learned gain and bias. The residual path lets information and gradients "
        "pass through many layers unchanged; the norm keeps their scale steady. The paper "
        "normalises after the sum (post-LN); GPT-2 and most later models normalise each "
        "sub-layer's input instead (pre-LN).",
        {"model": "translate", "text": SENTENCE, "layer": 2},
        focus=FEED_FORWARD_SECTION,  # ends with the residual add and the LayerNorm
    ),
    Stop(
        "Cross-attention: the decoder reads the encoder",
        "Attention",
        "In the encoder-decoder, every decoder layer has a second attention: its queries come "
        "from the decoder (the translation written so far), its keys and values from the "
        "encoder's output (the source sentence). This is how each target token looks at the "
        "source: rows are target tokens, columns source tokens. Only the source's padding is "
        "masked here; the causal mask belongs to the decoder's self-attention.",
        {
            "sentences": SENTENCE,
            "model": "translate",
            "kind": "cross-attention (decoder → encoder)",
            "layer": 1,
            "head": 1,
        },
        focus="layer",
    ),
    Stop(
        "Generation, one token at a time",
        "Generate",
        "The decoder writes its output one token at a time. At each step it reads everything "
        "written so far, turns its last position into a score for every token of the "
        "vocabulary (a linear layer, then a softmax) and chooses one: here the most probable "
        "(greedy). The token is appended and the loop runs again, until the end-of-sentence "
        "token. Press Step to add the next token and see the probabilities behind it.",
        {"source": SENTENCE, "model": "translate", "strategy": "greedy"},
        focus="layer",
    ),
    Stop(
        "Choosing the next token: sampling",
        "Generate",
        "Greedy decoding always takes the top token. Sampling draws from the distribution "
        "instead: temperature divides the scores before the softmax (below 1 sharpens, above 1 "
        "flattens), top-k keeps the k most likely tokens and top-p the smallest set whose "
        "probability reaches p. The seed makes a draw repeatable. Beam search keeps several "
        "partial outputs and extends the most probable ones.",
        {
            "source": "the teacher sees",
            "model": "continue",
            "strategy": "sample",
            "temperature": 0.8,
            "top_k": 10,
            "seed": 0,
        },
        focus="layer",
    ),
    Stop(
        "What training does",
        "Model & training",
        "Training shows the model many (source, target) pairs and nudges every weight to raise "
        "the probability of the right next token (cross-entropy loss, the Adam optimiser with "
        "the paper's warm-up schedule). The bundled models kept snapshots on the way: early on, "
        "attention is spread almost evenly; drag the Snapshot slider to the last step to see the "
        "heads sharpen into the alignment the task needs. You can also train a small model "
        "here, live, in a minute.",
        {
            "snapshots_of": "translate",
            "snapshot": 1,
            "input": SENTENCE,
        },
        focus="snapshots_of",
    ),
    Stop(
        "2017 and today: the modern block",
        "Inside a layer",
        "The same layer, written twice: the paper's block beside SmolLM2's, step by step for "
        "the same token. Four changes survive in almost every model since: RMSNorm, "
        "x / √(mean(x²) + ε)·w, before each sub-layer (no mean, no bias); positions rotate q "
        "and k instead of being added to x; the feed-forward network multiplies a SiLU gate "
        "with a second projection; and 9 query heads share 3 key/value heads, which cuts the "
        "cache a generated token needs by 3. Highlighted lines are the code that changed.",
        {"model": MODERN_MODEL, "text": SENTENCE, "compare": True},
        focus="compare",
    ),
)


def available(stops: Sequence[Stop], tab_labels: Sequence[str]) -> list[Stop]:
    """The stops whose tab this app has (each one left out is logged)."""
    kept = []
    for stop in stops:
        if stop.tab in tab_labels:
            kept.append(stop)
        else:
            log.info("tour stop '%s' left out: this app has no '%s' tab", stop.title, stop.tab)
    return kept


def label(index: int, stop: Stop) -> str:
    """The menu entry of a stop: its number and title."""
    return f"{index + 1}. {stop.title}"


def stop_text(index: int, stops: Sequence[Stop]) -> str:
    """The tour's paragraph for stop ``index`` (Markdown), with where it is and what opened."""
    stop = stops[index]
    return (
        f"**{index + 1} / {len(stops)} · {stop.title}** — _{stop.tab} tab_\n\n{stop.text}\n\n"
        "<small>← → keys or Previous / Next move through the tour.</small>"
    )


# Arrow keys move the tour once it is started (not while typing, nor on a slider).
KEYS_JS = """
document.addEventListener('keydown', (event) => {
  if (!document.body.classList.contains('tour-on')) return;
  if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
  const target = event.target;
  if (target && (target.isContentEditable ||
      ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName))) return;
  const id = {ArrowRight: 'tour-next', ArrowLeft: 'tour-prev'}[event.key];
  const button = id && document.getElementById(id);
  if (!button) return;
  event.preventDefault();
  (button.tagName === 'BUTTON' ? button : button.querySelector('button') || button).click();
});
"""

# Every figure follows the width its place on the page has. Plotly lays a figure out again on a
# window resize only; the tour's sidebar opening, or a row of two figures that was stacked
# while the page filled and then stood side by side, changes a figure's room without one: at
# 1280×800 Generate's next-token chart kept a width of 858 px in a column of 421 and was cut at
# 40 % (the chosen 93 % bar ran off), and titles overlapped. Each figure's box is watched, and a
# change of its width lays that figure out again once it settles.
FIT_FIGURES_JS = """
(() => {
  if (!window.ResizeObserver || !window.MutationObserver) return;
  const widths = new WeakMap();
  const timers = new WeakMap();
  const resized = new ResizeObserver((entries) => {
    for (const entry of entries) {
      const plot = entry.target;
      const width = Math.round(entry.contentRect.width);
      const before = widths.get(plot);
      widths.set(plot, width);
      if (before === undefined || Math.abs(width - before) < 2 || width === 0) continue;
      clearTimeout(timers.get(plot));
      timers.set(plot, setTimeout(() => {
        if (window.Plotly && plot._fullLayout) window.Plotly.Plots.resize(plot);
      }, 120));
    }
  });
  const watch = (root) => {
    for (const plot of root.querySelectorAll('[data-testid="plotly"]')) {
      if (!widths.has(plot)) { widths.set(plot, undefined); resized.observe(plot); }
    }
  };
  new MutationObserver(() => watch(document)).observe(document.body, {childList: true, subtree: true});
  watch(document);
})();
"""
KEYS_JS += FIT_FIGURES_JS
START_JS = "(...args) => { document.body.classList.add('tour-on'); return args; }"


class Tour:
    """The tour's sidebar (laid out where ``layout`` is called) and its wiring (``wire``), for
    an app with the tabs ``tab_labels``."""

    def __init__(self, tab_labels: Sequence[str]) -> None:
        self.stops = available(STOPS, tab_labels)
        self.names = [label(i, stop) for i, stop in enumerate(self.stops)]

    def layout(self) -> None:
        """The sidebar with the stop menu, Previous / Next and the stop's paragraph."""
        with gr.Sidebar(label="Guided tour", open=False, width=360, elem_id="tour-box") as self.box:
            gr.Markdown("### Guided tour")
            self.menu = gr.Dropdown(
                self.names,
                value=self.names[0] if self.names else None,
                label="Stop",
                show_label=False,
                elem_id="tour-menu",
            )
            with gr.Row():
                self.previous = gr.Button("◀ Previous", size="sm", elem_id="tour-prev")
                self.next = gr.Button("Next ▶", size="sm", variant="primary", elem_id="tour-next")
            self.text = gr.Markdown(elem_id="tour-text")
        self.index = gr.State(-1)

    def wire(self, start: gr.Button, views: Any) -> None:
        """Connect the start button, the menu, Previous / Next to ``views`` (a ``views.Views``)."""
        self.views = views
        if not self.stops:
            return
        # Previous and Next last: greyed out at the tour's ends, where they would only reload
        # the stop on screen (seconds of redrawing for nothing).
        outputs = [self.index, self.menu, self.text, self.box, views.view, self.previous, self.next]
        private: dict[str, Any] = {
            "api_visibility": "private",
            "queue": False,
            "show_progress": "hidden",
        }
        for event, handler, source in [
            (start.click, self.start_at, self.menu),
            (self.menu.input, self.start_at, self.menu),
            (self.next.click, self.next_stop, self.index),
            (self.previous.click, self.previous_stop, self.index),
        ]:
            applied = views.follow(event(handler, source, outputs, js=START_JS, **private))
            # Once more after the redraws: a section far down moves while the panels above fill.
            applied.then(None, views.focus, None, js=SCROLL_JS, **private)

    def go(self, index: int) -> tuple:
        """Updates that show stop ``index`` (clamped to the tour): the index, the menu, the
        paragraph, the open sidebar, the view to apply (the stop's tab, its controls), and
        Previous and Next, each disabled where there is no stop that way."""
        index = min(max(int(index), 0), len(self.stops) - 1)
        stop = self.stops[index]
        tab = self.views.labels[stop.tab]
        view = self.views.view_of(tab.slug, dict(stop.values), focus=stop.focus)
        if stop.focus and stop.focus not in tab.controls:  # a part of the tab, by its elem_id
            view["focus"] = stop.focus
        return (
            index,
            gr.update(value=self.names[index]),
            stop_text(index, self.stops),
            gr.Sidebar(open=True),
            view,
            gr.Button(interactive=index > 0),
            gr.Button(interactive=index < len(self.stops) - 1),
        )

    def start_at(self, name: str) -> tuple:
        """The stop the menu names (the first one for an unknown name)."""
        return self.go(self.names.index(name) if name in self.names else 0)

    def next_stop(self, index: int) -> tuple:
        """The stop after ``index`` (the first one before the tour started; the last stays)."""
        return self.go(index + 1 if index >= 0 else 0)

    def previous_stop(self, index: int) -> tuple:
        """The stop before ``index`` (the first one stays)."""
        return self.go(index - 1 if index >= 0 else 0)
