"""What the Attention tab's controls ask for, read once: :class:`AttentionRequest`.

Gradio hands an endpoint its input components' values in order (those of
:meth:`AttentionRequest.read`'s parameters); :func:`ui.serving.endpoints.takes_request` turns
them into one request
the moment a handler starts: the model looked up once, the text checked once, the kind, layer,
head and sentence checked (or fitted) against that model, the what-ifs and the seeds' mistake
as catalogue records. Handlers and panels read its fields; nothing after that reads a raw
value, looks the model up or checks the text again.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformer.core.config import ModelConfig
from transformer.core.trace import AttentionKind, CaptureTooLarge
from transformer.lab import switches
from transformer.lab.inspection import MAX_SENTENCES, Analysis, check_sentences
from transformer.lab.interventions import NO_INTERVENTION, Intervention, combined
from transformer.lab.switches import Switch
from transformer.pretrained.checkpoint import Checkpoint
from transformer.text.tokenization import Tokenizer

from ...serving import limits
from ...serving.errors import InputError, readable_list, user_input
from ...serving.inputs import as_int, as_text, clamped
from ...serving.state import ModelRegistry, SessionModels

ATTENTION_KINDS: dict[str, AttentionKind] = {
    "encoder self-attention": "encoder_self",
    "decoder masked self-attention": "decoder_self",
    "cross-attention (decoder → encoder)": "cross",
}

NO_MISTAKE = "none (the correct pass)"  # the seeds' mistakes menu's first choice
SEED_MISTAKES = switches.family(switches.SEED_MISTAKE)  # the catalogue's records, in seed order


def describe_kind(kind: AttentionKind) -> str:
    """A figure's title for ``kind``: ``"Cross-attention (decoder → encoder)"``."""
    return {k: label for label, k in ATTENTION_KINDS.items()}[kind].capitalize()


def kinds_for(config: Any) -> list[str]:
    """The attention kinds (their menu labels) a model of this architecture has."""
    have = {
        "encoder-only": {"encoder_self"},
        "decoder-only": {"decoder_self"},
    }.get(config.architecture, {"encoder_self", "decoder_self", "cross"})
    return [label for label, kind in ATTENTION_KINDS.items() if kind in have]


def layers_of(config: Any, kind: AttentionKind) -> int:
    """How many layers hold attention of ``kind``."""
    return config.n_encoder_layers if kind == "encoder_self" else config.n_decoder_layers


def sentence_count(sentences_text: str | None) -> int:
    """The non-empty lines given (what the Sentence slider ranges over), at least 1."""
    return max(1, len([line for line in (sentences_text or "").splitlines() if line.strip()]))


def seed_mistake(value: Any) -> Switch | None:
    """The seeds' mistake a menu value names (its catalogue record), ``None`` for "none" and
    empty values; :class:`InputError` naming the choices for anything else."""
    if not value or value == NO_MISTAKE:
        return None
    labels = {s.label: s for s in SEED_MISTAKES}
    if not isinstance(value, str) or value not in labels:
        raise InputError(f"unknown mistake: choose {readable_list([NO_MISTAKE, *labels], most=3)}")
    return labels[value]


def analysis_of(
    registry: ModelRegistry,
    name: str,
    checkpoint: Checkpoint,
    lines: list[str],
    targets: Any = None,
) -> Analysis:
    """The registry's analysis, a capture too large for the tab pointing to the long inputs."""
    try:
        return registry.analysis(name, checkpoint, lines, targets=targets)
    except InputError as error:  # user_input() leaves the library's error as its context
        if not isinstance(error.__context__, CaptureTooLarge):
            raise
        raise InputError(
            f"{error}, or paste it under “Long inputs” below, which reads up to "
            f"{limits.MAX_SCALE_TOKENS:,} tokens"
        ) from None


def changed_pass(
    registry: ModelRegistry,
    name: str,
    checkpoint: Checkpoint,
    lines: list[str],
    correct: Analysis,
    intervention: Intervention,
    mistake: Switch | None = None,
) -> tuple[Analysis | None, str | None]:
    """The registry's analysis of ``lines`` with ``intervention`` and the seeds' ``mistake``
    (where one is chosen) on, on the decoder input of the ``correct`` pass (an
    encoder-decoder's), so that the two compare position by position: the pass, or where the
    mistake's shapes cannot work on this input (cross-attention from the memory on unequal
    lengths), ``None`` and why."""
    if mistake is not None:
        intervention = dataclasses.replace(intervention, mistakes=frozenset({mistake}))
    targets = None
    if checkpoint.config.has_encoder and checkpoint.config.has_decoder:
        assert correct.trace.target is not None  # an encoder-decoder pass reads a decoder input
        targets = correct.trace.target.tokens
    try:
        return registry.analysis(name, checkpoint, lines, intervention, targets), None
    except ValueError as error:
        if mistake is None or not mistake.may_refuse:
            raise
        # The shapes cannot work: that is what this mistake does here, not a bad input.
        return None, str(error)


@dataclass(frozen=True)
class AttentionRequest:
    """One Attention request, read and checked once.

    Attributes:
        text: the text box as given; ``lines``: its sentences, checked (1 to 3 non-empty).
        model: the model's name; ``checkpoint`` and ``config``: the model, looked up once.
        kind: which attention (``"encoder_self"``, ``"decoder_self"``, ``"cross"``);
            ``kind_label``: its menu label; ``kinds``: the menu labels of the kinds this model
            has.
        layer, head, row: 0-based, within ``n_layers``, ``n_heads`` and ``n_rows``.
        what_if: the ticked what-ifs, as catalogue records, in the order ticked.
        mistake: the seeds' mistake chosen (its record), or ``None``; ``mistakes``: the
            seeds' mistakes that apply to this model (what its menu offers).
        large: projector mode; ``session``: the session's models (one trained here).
        analysis: the registry's analysis of ``lines`` (``None`` where the text is not read);
            ``changed``: with the what-ifs and the mistake (where it applies) on, the pass on
            the same decoder input (``None`` where none is on, or where the mistake's broken
            pass cannot run: ``refused`` says why).
    """

    text: str
    model: str
    checkpoint: Checkpoint
    config: ModelConfig
    lines: tuple[str, ...]
    kind: AttentionKind
    kind_label: str
    kinds: tuple[str, ...]
    layer: int
    head: int
    row: int
    n_layers: int
    n_heads: int
    n_rows: int
    what_if: tuple[Switch, ...] = ()
    mistake: Switch | None = None
    mistakes: tuple[Switch, ...] = ()
    large: bool = False
    session: SessionModels | None = None
    analysis: Analysis | None = None
    changed: Analysis | None = None
    refused: str | None = None

    @property
    def head_key(self) -> tuple[AttentionKind, int, int]:
        """``(kind, layer, head)``, 0-based: the head a per-head what-if acts on."""
        return (self.kind, self.layer, self.head)

    @property
    def at(self) -> tuple[Analysis, Tokenizer, AttentionKind, int, int, int]:
        """What a view of the analysis is taken at: the analysis, its tokenizer, and the kind,
        layer, head and sentence (0-based); ``ValueError`` where the text was not read."""
        if self.analysis is None:
            raise ValueError("the request's text was not read: read it with check_text")
        tokenizer = self.checkpoint.tokenizer
        return self.analysis, tokenizer, self.kind, self.layer, self.head, self.row

    @property
    def intervention(self) -> Intervention:
        """The ticked what-ifs as one intervention, a per-head one acting on this request's
        head (:data:`NO_INTERVENTION` when none is ticked)."""
        return combined(self.what_if, self.head_key) if self.what_if else NO_INTERVENTION

    @classmethod
    def read(
        cls,
        registry: ModelRegistry,
        sentences: Any,
        name: Any,
        kind: Any,
        layer: Any = 1,
        head: Any = 1,
        row: Any = 1,
        what_if: Any = None,
        large: Any = False,
        session: SessionModels | None = None,
        mistake: Any = None,
        *,
        fit: bool = False,
        check_text: bool = True,
    ) -> AttentionRequest:
        """The request the controls' values ask for. Strict (``/attention``): a value the model
        does not have is an :class:`InputError` naming what to choose. With ``fit`` (a live
        redraw, which may arrive with a value from before the controls were fitted): the kind
        falls back to the model's last, numbers are clamped into range and the what-ifs this
        model has nothing for are unticked. Without ``check_text`` (fitting the controls
        alone) the text is not checked nor analysed: ``lines`` is empty and the Sentence range
        counts its non-empty lines. Else the registry's passes are asked for here, once: the
        analysis, and the changed pass where a what-if or an applicable mistake is on."""
        text = as_text(sentences, "sentences")
        checkpoint = registry.checkpoint(name, session)
        config = checkpoint.config
        lines: tuple[str, ...] = ()
        if check_text:
            with user_input():
                lines = tuple(check_sentences(text.splitlines()))
        if what_if is not None and not isinstance(what_if, list | tuple):
            raise InputError("what if: choose from the switches' names")
        with user_input():
            chosen = switches.what_ifs(what_if or ())
        kinds = kinds_for(config)
        label = kind if isinstance(kind, str) else ""
        if fit:
            # Cross-attention is the one an encoder-decoder model is best known for.
            label = label if label in kinds else kinds[-1]
            # A switch the model has nothing for (the causal mask of an encoder-only MiniLM)
            # is unticked, not listed as on in the summary.
            chosen = tuple(s for s in chosen if s.applies(config))
        elif label not in ATTENTION_KINDS:
            raise InputError(f"which attention: choose {readable_list(kinds)}")
        elif label not in kinds:
            raise InputError(
                f"the {name} model is {config.architecture}: it has no {label}; choose "
                f"{readable_list(kinds)}"
            )
        attention_kind = ATTENTION_KINDS[label]
        n_layers, n_heads = layers_of(config, attention_kind), config.n_heads
        # check_sentences kept the non-empty lines, at most MAX_SENTENCES
        n_rows = len(lines) if check_text else min(sentence_count(text), MAX_SENTENCES)

        def number(value: Any, what: str, high: int) -> int:
            return (clamped(value, high) if fit else as_int(value, what, 1, high)) - 1

        request = cls(
            text=text,
            model=name,
            checkpoint=checkpoint,
            config=config,
            lines=lines,
            kind=attention_kind,
            kind_label=label,
            kinds=tuple(kinds),
            row=number(row, "sentence", n_rows),
            layer=number(layer, "layer", n_layers),
            head=number(head, "head", n_heads),
            n_layers=n_layers,
            n_heads=n_heads,
            n_rows=n_rows,
            what_if=chosen,
            mistake=seed_mistake(mistake),
            mistakes=switches.applicable(config, switches.SEED_MISTAKE),
            large=bool(large),
            session=session,
        )
        return request.analysed(registry) if check_text else request

    def analysed(self, registry: ModelRegistry) -> AttentionRequest:
        """This request with the registry's passes: its analysis and, where a what-if or an
        applicable mistake is on, the changed pass on the same decoder input."""
        lines = list(self.lines)
        analysis = analysis_of(registry, self.model, self.checkpoint, lines)
        mistake = self.mistake if self.mistake in self.mistakes else None
        changed, refused = None, None
        if mistake is not None or self.what_if:
            changed, refused = changed_pass(
                registry, self.model, self.checkpoint, lines, analysis, self.intervention, mistake
            )
        return dataclasses.replace(self, analysis=analysis, changed=changed, refused=refused)


def reading(fit: bool, *, check_text: bool = True) -> Callable[..., AttentionRequest]:
    """:meth:`AttentionRequest.read` with its flags set, as the builder
    :func:`ui.serving.endpoints.takes_request` makes the tab's handlers from: fitted to the
    model when ``fit``, the text checked when ``check_text``."""
    return functools.partial(AttentionRequest.read, fit=fit, check_text=check_text)


@dataclass(frozen=True)
class MistakeRequest:
    """What the seeds' mistakes panel (``mistakes.panel``, which other tabs hold) asks for,
    read once: the model looked up, the chosen mistake as its catalogue record (``None`` for
    "none"), the attention kind as its menu label; the text, layer and head as given (the view
    checks them against the model).

    The tab may name the kind by its menu label, by the trace's name (``"encoder_self"``), or by
    the stack whose self-attention it shows (``"encoder"``, ``"decoder"``: Inside a layer)."""

    model: str
    checkpoint: Checkpoint
    sentences: str
    kind_label: str
    layer: Any
    head: Any
    mistake: Switch | None
    large: bool
    session: SessionModels | None

    @classmethod
    def read(
        cls,
        registry: ModelRegistry,
        name: str,
        sentences: str,
        kind: str,
        layer: Any,
        head: Any,
        mistake: str | None,
        large: bool,
        session: SessionModels,
    ) -> MistakeRequest:
        """The panel's request from its components' values, in the order its events send them;
        :class:`InputError` naming the choices for a mistake that is none of the seeds'."""
        kind = {"encoder": "encoder_self", "decoder": "decoder_self"}.get(kind, kind)
        label_of: dict[str, str] = {k: label for label, k in ATTENTION_KINDS.items()}
        return cls(
            model=name,
            checkpoint=registry.checkpoint(name, session),
            sentences=sentences,
            kind_label=label_of.get(kind, kind),
            layer=layer,
            head=head,
            # The menu's label becomes its record here, once; nothing after reads a label.
            mistake=seed_mistake(mistake),
            large=bool(large),
            session=session,
        )
