"""What the Generate tab's controls ask for, read once: :class:`GenerateRequest`.

Gradio hands an endpoint its input components' values in order;
:meth:`ui.tabs.generate.chat.GenerateCall.of` turns them into one request (the decoding
settings validated by :func:`decoding_settings`, the layer and head as numbers) the moment a
handler starts, and nothing after that reads a positional value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from transformer.generation import MAX_NEW_TOKENS, DecodingSettings
from transformer.generation.settings import Strategy

from ...serving.errors import user_input
from ...serving.inputs import as_float, as_int

TOP_K_SHOWN = 10  # bars in the next-token chart
LENS_TOP_K = 5  # columns of the logit lens

# The order of the endpoints' inputs (the layout lists its components in this order), before
# the session's models and its generation state.
INPUT_NAMES = (
    "source",
    "model",
    "strategy",
    "temperature",
    "top_k",
    "top_p",
    "beam",
    "max_tokens",
    "seed",
    "layer",
    "head",
    "large",
)


def decoding_settings(
    strategy: str, temperature: Any, top_k: Any, top_p: Any, beam: Any, max_tokens: Any, seed: Any
) -> DecodingSettings:
    """The UI's decoding controls as validated ``DecodingSettings`` (top-k 0 and top-p 1 = off),
    recording what the tab draws: attention rows and the logit lens of every step."""
    top_p_value = as_float(top_p if top_p is not None else 1.0, "top-p", 0.0, 1.0)
    with user_input():  # the library checks the settings it is given
        return DecodingSettings(
            strategy=cast(Strategy, strategy),
            temperature=as_float(temperature, "temperature", 0.0, 100.0),
            top_k=as_int(top_k, "top-k", 0, 1000) or None,
            top_p=None if top_p_value >= 1.0 else top_p_value,
            beam_width=as_int(beam, "beam width", 1, 16),
            max_new_tokens=as_int(max_tokens, "max tokens", 1, MAX_NEW_TOKENS),
            seed=as_int(seed, "seed", 0, 2**31 - 1),
            capture_attention=True,
            top_k_shown=TOP_K_SHOWN,
            capture_lens=True,
            lens_top_k=LENS_TOP_K,
        )


@dataclass(frozen=True)
class GenerateRequest:
    """One Generate request: the text, the model's name, how to decode, and what to show.

    ``key`` says which decoding the request is for: a change of the text, the model or any
    decoding setting starts a new one; ``layer``, ``head`` and ``large`` only change the view
    (1-based, as on the sliders; the drawing clamps them to the model).
    """

    source: str
    model: str
    settings: DecodingSettings
    layer: int = 1
    head: int = 1
    large: bool = False

    @property
    def key(self) -> tuple[str, str, DecodingSettings]:
        """(source, model name, settings): what a decoding is started from."""
        return (self.source, self.model, self.settings)
