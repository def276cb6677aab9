"""What each Which part? method's controls ask for, read once: :class:`PatchingRequest`,
:class:`TextRequest` (the four methods that read one text) and :class:`SideBySideRequest`.

Gradio hands an endpoint its input components' values in order (those its ``*_VALUES`` name,
else those of the request's ``of``); :func:`ui.serving.endpoints.takes_request` turns them
into the request the moment a handler starts: the model looked up once, the texts read into
the ids the method follows (each refused in words when empty, too long or cut unevenly), the
answer tokens, the choice of site or method and the layer and head checked against that model.
A method that does not apply to the model (an encoder-only one has no next token) is an
:class:`Unsupported` request instead, which the handler shows as a figure saying why. Handlers
read the fields; nothing after that reads a raw value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
import torch
from torch import Tensor

from transformer.figures.attention import placeholder_figure
from transformer.generation.loop import decoding_ends
from transformer.lab.analysis import shown_piece
from transformer.pretrained.checkpoint import Checkpoint

from ...serving.errors import InputError, user_input
from ...serving.state import ModelRegistry, SessionModels
from .text import ENCODER_ONLY, MAX_RESEARCH_TOKENS, POST_NORM, SITES

# The default gradio replaces with the event's own tracker (it looks for a gr.Progress default).
PAGE_PROGRESS = gr.Progress()

INPUT_METHODS = ("gradient x input", "integrated gradients")
ABLATIONS = ("zero", "mean")

_TITLES = {
    "patching": "Activation patching",
    "ablation": "Head ablation",
    "logit": "Direct logit attribution",
    "input": "Input attribution",
}


@dataclass(frozen=True)
class Unsupported:
    """A method that does not apply to the chosen model: what its figure and words say."""

    title: str
    why: str
    words: str
    large: bool

    @classmethod
    def encoder_only(cls, name: str, method: str, large: bool) -> Unsupported:
        """``method`` ("patching", "ablation", "logit", "input") on encoder-only ``name``."""
        words = ENCODER_ONLY[method].format(name=name)
        return cls(_TITLES[method], "Not for an encoder-only model", words, large)

    def view(self) -> tuple[Any, str]:
        """The figure that says why, and the words."""
        return placeholder_figure(self.title, self.why, large_font=self.large), self.words


@dataclass(frozen=True)
class Model:
    """The model a method runs on, looked up once: its menu name, checkpoint and the page's
    Large font."""

    name: str
    checkpoint: Checkpoint
    large: bool

    @classmethod
    def of(
        cls, registry: ModelRegistry, name: Any, session: SessionModels | None, large: Any
    ) -> Model:
        """The model called ``name``, whatever its architecture (each method says what
        applies)."""
        return cls(name, registry.checkpoint(name, session), bool(large))

    @property
    def architecture(self) -> str:
        """``"decoder-only"``, ``"encoder-decoder"`` or ``"encoder-only"``."""
        return self.checkpoint.config.architecture

    @property
    def n_layers(self) -> int:
        """The layers its methods sweep: the decoder's, else the encoder's."""
        config = self.checkpoint.config
        return config.n_decoder_layers or config.n_encoder_layers

    @property
    def n_heads(self) -> int:
        """Heads per attention layer."""
        return self.checkpoint.config.n_heads

    def head(self, layer: Any, head: Any) -> tuple[int, int]:
        """The 1-based Layer and Head controls as 0-based indices, refused in words when this
        model has no such layer or head."""
        return _in_range(layer, self.n_layers, "layer"), _in_range(head, self.n_heads, "head")


def _in_range(value: Any, high: int, what: str) -> int:
    """A 1-based control's value as a 0-based index, refused with the range when outside."""
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{what} must be a number from 1 to {high}") from None
    if not 1 <= number <= high:
        raise InputError(f"this model has {what}s 1 to {high}, not {number}")
    return number - 1


@dataclass(frozen=True)
class Tokens:
    """What a method follows: ``ids`` ``(1, T)`` and their ``pieces`` as shown; ``sources``
    ``{"source": (1, Ts) ids}`` for an encoder-decoder model (``{}`` otherwise); ``key``, the
    texts they were read from (what names a sweep that students may share)."""

    ids: Tensor
    pieces: tuple[str, ...]
    sources: dict[str, Any]
    key: tuple[str, ...]

    @property
    def length(self) -> int:
        """T, the tokens the method follows."""
        return int(self.ids.shape[1])


@dataclass(frozen=True)
class Token:
    """A token a control names: its id, its piece as shown, and a note for the summary when
    the text was cut into several tokens and only the first is used (else ``""``)."""

    id: int
    piece: str
    note: str


def _pieces(checkpoint: Checkpoint, ids: list[int]) -> tuple[str, ...]:
    tokenizer = checkpoint.tokenizer
    return tuple(shown_piece(tokenizer, tokenizer.id_to_token(i) or "?") for i in ids)


def _tensor(checkpoint: Checkpoint, ids: list[int]) -> Tensor:
    return torch.tensor([ids], device=checkpoint.model.device)


def source_ids(checkpoint: Checkpoint, text: Any, what: str = "the source") -> Tensor:
    """``(1, Ts)`` ids of an encoder-decoder model's source, as its encoder reads one (the
    tokenizer's own special tokens: Marian's closing ``</s>``; none for the bundled models)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"enter {what}: the text the encoder reads")
    with user_input():
        ids = checkpoint.tokenizer.encoding(text.strip()).ids
    if not ids:
        raise InputError(f"{what} has no tokens for this model")
    if len(ids) > MAX_RESEARCH_TOKENS:
        raise InputError(
            f"{what} is {len(ids)} tokens long; these methods read at most "
            f"{MAX_RESEARCH_TOKENS} here: shorten it"
        )
    return _tensor(checkpoint, ids)


def decoder_ids(
    checkpoint: Checkpoint, text: Any, least: int = 1, what: str = "the decoder's input"
) -> tuple[Tensor, tuple[str, ...]]:
    """``(1, T)`` ids an encoder-decoder's decoder reads: its start token, then ``text`` (the
    output so far, may be empty), and their pieces as shown."""
    config, tokenizer = checkpoint.config, checkpoint.tokenizer
    start, _ = decoding_ends(config, tokenizer.bos_id, tokenizer.eos_id)
    if start is None:
        raise InputError("this model names no start token for its decoder")
    words = text.strip() if isinstance(text, str) else ""
    with user_input():
        ids = [start, *(tokenizer.encode_ids(words) if words else [])]
    if len(ids) < least:
        raise InputError(
            f"{what} needs at least {least - 1} token after the start token here (the loss is "
            "measured on the tokens the decoder writes): enter the output so far"
        )
    if len(ids) > MAX_RESEARCH_TOKENS:
        raise InputError(f"{what} is {len(ids)} tokens long; shorten it")
    return _tensor(checkpoint, ids), _pieces(checkpoint, ids)


def prompt_ids(
    checkpoint: Checkpoint, text: Any, what: str = "the text"
) -> tuple[Tensor, tuple[str, ...]]:
    """``(1, T)`` ids of ``text`` as the model reads a prompt, and its pieces as shown."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"enter {what}")
    config, tokenizer = checkpoint.config, checkpoint.tokenizer
    with user_input():
        ids = tokenizer.encode_ids(text.strip(), add_bos=config.prompt_bos)
    if len(ids) < 2:
        raise InputError(f"{what} needs at least two tokens")
    if len(ids) > MAX_RESEARCH_TOKENS:
        raise InputError(
            f"{what} is {len(ids)} tokens long: these sweeps run the model once per part, so "
            f"they read at most {MAX_RESEARCH_TOKENS} tokens here; shorten it"
        )
    return _tensor(checkpoint, ids), _pieces(checkpoint, ids)


def read_inputs(checkpoint: Checkpoint, text: Any, source: Any, least: int = 2) -> Tokens:
    """The ids a method follows: a decoder-only model reads ``text`` as its prompt; an
    encoder-decoder's decoder reads ``text`` after its start token, the encoder ``source``; an
    encoder-only model reads ``text`` with its own special tokens."""
    architecture = checkpoint.config.architecture
    if architecture == "encoder-decoder":
        ids, pieces = decoder_ids(checkpoint, text, max(1, least))
        sources = {"source": source_ids(checkpoint, source)}
        return Tokens(ids, pieces, sources, (str(text), str(source)))
    if architecture == "encoder-only":
        if not isinstance(text, str) or not text.strip():
            raise InputError("enter the text")
        with user_input():
            read = checkpoint.tokenizer.encoding(text.strip()).ids
        if len(read) > MAX_RESEARCH_TOKENS:
            raise InputError(f"the text is {len(read)} tokens long; shorten it")
        return Tokens(_tensor(checkpoint, read), _pieces(checkpoint, read), {}, (text, ""))
    ids, pieces = prompt_ids(checkpoint, text)
    return Tokens(ids, pieces, {}, (str(text), ""))


def one_token(checkpoint: Checkpoint, text: Any, what: str) -> Token:
    """The token ``text`` names (its first token where it has several)."""
    if not isinstance(text, str) or not text:
        raise InputError(f"enter {what}, for example ' Paris' (with its leading space)")
    with user_input():
        ids = checkpoint.tokenizer.encode_ids(text)
    if not ids:
        raise InputError(f"{what} {text!r} has no tokens for this model")
    pieces = _pieces(checkpoint, ids)
    note = ""
    if len(ids) > 1:
        note = (
            f"{what} {text!r} is {len(ids)} tokens for this model "
            f"({', '.join(repr(p) for p in pieces)}): its first, {pieces[0]!r}, is scored. "
        )
    return Token(ids[0], pieces[0], note)


def _named_token(checkpoint: Checkpoint, token: Any) -> Token | None:
    """The next token a control names, or ``None`` (empty: the model's own prediction)."""
    return one_token(checkpoint, token, "the token") if isinstance(token, str) and token else None


# -- one request a method ------------------------------------------------------------------


@dataclass(frozen=True)
class PatchingRequest:
    """``/research_patching``: the clean and corrupted ids (as many tokens), the site, the
    answer and the wrong answer; for an encoder-decoder model the two sources (in ``sources``:
    ``source``, ``corrupted_source``) and the decoder's input both runs read (``clean``)."""

    model: Model
    site: str
    clean: Tokens
    corrupted: Tensor
    answer: Token
    wrong: Token
    progress: Any = PAGE_PROGRESS

    @property
    def columns(self) -> int:
        """The figure's columns, a run each layer: the heads (site "head"), else the positions."""
        return self.model.n_heads if self.site == "head" else self.clean.length

    @classmethod
    def of(
        cls,
        registry: ModelRegistry,
        name: Any,
        clean: Any,
        corrupted: Any,
        answer: Any,
        wrong: Any,
        site: Any,
        large: Any,
        session: SessionModels | None,
        target: Any = "",
        progress: Any = PAGE_PROGRESS,
    ) -> PatchingRequest | Unsupported:
        """The request, or an :class:`InputError` naming the value to fix."""
        model = Model.of(registry, name, session, large)
        checkpoint, architecture = model.checkpoint, model.architecture
        if architecture == "encoder-only":
            return Unsupported.encoder_only(name, "patching", model.large)
        if site not in SITES:
            raise InputError(f"site must be one of {', '.join(SITES)}")
        if site == "cross" and architecture != "encoder-decoder":
            raise InputError(
                f"{name} reads no source, so it has no cross-attention to patch: choose another "
                "site"
            )
        if architecture == "encoder-decoder":
            clean_source = source_ids(checkpoint, clean, "the clean source")
            corrupted_source = source_ids(checkpoint, corrupted, "the corrupted source")
            if clean_source.shape != corrupted_source.shape:
                raise InputError(
                    f"the clean source has {clean_source.shape[1]} tokens and the corrupted one "
                    f"{corrupted_source.shape[1]}: change one word for one cut into as many "
                    "tokens, so that the two runs differ in that word only"
                )
            sources = {"source": clean_source, "corrupted_source": corrupted_source}
            clean_ids, clean_pieces = decoder_ids(checkpoint, target)
            corrupted_ids = clean_ids
            key: tuple[str, ...] = (clean, corrupted, str(target))
        else:
            sources = {}
            clean_ids, clean_pieces = prompt_ids(checkpoint, clean, "the clean prompt")
            corrupted_ids, _ = prompt_ids(checkpoint, corrupted, "the corrupted prompt")
            key = (clean, corrupted, "")
        if clean_ids.shape[1] != corrupted_ids.shape[1]:
            raise InputError(
                f"the clean prompt has {clean_ids.shape[1]} tokens and the corrupted one "
                f"{corrupted_ids.shape[1]}: patching copies position by position, so both must "
                "have the same number of tokens. Change a word so that they match"
            )
        right = one_token(checkpoint, answer, "the answer")
        wrong_token = one_token(checkpoint, wrong, "the wrong answer")
        if right.id == wrong_token.id:
            raise InputError("the answer and the wrong answer are the same token: choose two")
        tokens = Tokens(clean_ids, clean_pieces, sources, key)
        return cls(model, site, tokens, corrupted_ids, right, wrong_token, progress)


_UNSET: Any = object()  # a value TextRequest.of was not given: no client can send it


@dataclass(frozen=True)
class TextRequest:
    """The methods that read one text (and an encoder-decoder's source): ``/research_ablation``,
    ``/research_logit``, ``/research_input`` and ``/research_scores``. The text's ids, the
    ``method`` ("ablation", "logit", "input", "scores") with its ``choice`` (how each head is
    ablated, "zero" or "mean"; the input attribution's method, one of :data:`INPUT_METHODS`;
    ``""`` for the others), the next token to explain (``None``: the model's own prediction;
    always for an ablation and the scores) and the head whose scores are split (0-based)."""

    model: Model
    method: str
    choice: str
    tokens: Tokens
    token: Token | None = None
    layer: int = 0
    head: int = 0
    progress: Any = PAGE_PROGRESS

    @classmethod
    def of(
        cls,
        registry: ModelRegistry,
        name: Any,
        text: Any,
        large: Any,
        session: SessionModels | None,
        source: Any = "",
        token: Any = "",
        method: Any = _UNSET,
        how: Any = _UNSET,
        layer: Any = _UNSET,
        head: Any = _UNSET,
        progress: Any = PAGE_PROGRESS,
    ) -> TextRequest | Unsupported:
        """The request, or an :class:`InputError` naming the value to fix. Each endpoint
        sends its own values (:data:`ABLATION_VALUES`, :data:`LOGIT_VALUES`,
        :data:`INPUT_VALUES`, :data:`SCORES_VALUES`): ``how`` makes it an ablation, ``method``
        an input attribution, ``layer`` and ``head`` the scores, none the direct logit
        attribution."""
        given = {"ablation": how, "input": method, "scores": layer}
        kind = next((k for k, value in given.items() if value is not _UNSET), "logit")
        model = Model.of(registry, name, session, large)
        if kind == "scores":  # every architecture has attention scores
            tokens = read_inputs(model.checkpoint, text, source, least=1)
            return cls(model, kind, "", tokens, None, *model.head(layer, head))
        if model.architecture == "encoder-only":
            return Unsupported.encoder_only(name, kind, model.large)
        if kind == "ablation" and how not in ABLATIONS:
            raise InputError("ablation is 'zero' or 'mean'")
        if kind == "input" and method not in INPUT_METHODS:
            raise InputError("method is 'gradient x input' or 'integrated gradients'")
        tokens = read_inputs(model.checkpoint, text, source, least=2 if kind == "ablation" else 1)
        if kind == "ablation":
            if tokens.sources and how == "mean":
                raise InputError(
                    "mean ablation averages each head over a reference paragraph, which an "
                    "encoder-decoder model's decoder never reads on its own: choose zero ablation"
                )
            return cls(model, kind, how, tokens, progress=progress)
        config = model.checkpoint.config
        if kind == "logit" and (config.norm != "pre" or config.post_sublayer_norm):
            # Not an error: the method does not apply, and the page says why.
            words = POST_NORM.format(name=name)
            return Unsupported(_TITLES["logit"], "Not for a post-norm model", words, model.large)
        choice = method if kind == "input" else ""
        return cls(model, kind, choice, tokens, _named_token(model.checkpoint, token))


ABLATION_VALUES = ("name", "text", "how", "large", "session", "source", "progress")
"""``/research_ablation``'s values, in the order it sends them."""
LOGIT_VALUES = ("name", "text", "token", "large", "session", "source")
"""``/research_logit``'s values, in the order it sends them."""
INPUT_VALUES = ("name", "text", "token", "method", "large", "session", "source")
"""``/research_input``'s values, in the order it sends them: the method after the token."""
SCORES_VALUES = ("name", "text", "layer", "head", "large", "session", "source")
"""``/research_scores``'s values, in the order it sends them."""


@dataclass(frozen=True)
class SideBySideRequest:
    """``/research_side_by_side``: two models that continue text (``first``, ``second``; the
    same one twice is allowed), the text (stripped) and one head of each, 0-based."""

    first: Model
    second: Model
    text: str
    heads: tuple[tuple[int, int], tuple[int, int]]

    @classmethod
    def of(
        cls,
        registry: ModelRegistry,
        name_a: Any,
        name_b: Any,
        text: Any,
        layer_a: Any,
        head_a: Any,
        layer_b: Any,
        head_b: Any,
        large: Any,
        session: SessionModels | None,
    ) -> SideBySideRequest:
        """The request, or an :class:`InputError` naming the value to fix."""
        first = Model.of(registry, name_a, session, large)
        second = Model.of(registry, name_b, session, large)
        for model in (first, second):
            if model.architecture != "decoder-only":
                kind = f"an {model.architecture} model"
                raise InputError(ENCODER_ONLY["side"].format(name=model.name, architecture=kind))
        if not isinstance(text, str) or not text.strip():
            raise InputError("enter a text")
        text = text.strip()
        heads = (first.head(layer_a, head_a), second.head(layer_b, head_b))
        for model in (first, second):
            prompt_ids(model.checkpoint, text)  # refused before any pass when too long
        return cls(first, second, text, heads)
