"""Exercises: questions about what a model is about to do, answered before the figure is shown.

Each exercise of :data:`BANK` is bound to a model and a text and written in plain words; its
right answer is never written down: :func:`ask` computes it from the model it is given, at the
time it is asked, with the figure that shows it. A model whose weights changed gives another
answer to the same exercise, and a reader can check the answer on the figure itself.

    >>> asked = ask(exercise("attention-translate-cat"), model, tokenizer)
    >>> asked.question, asked.choices, asked.answer

The kinds (``Exercise.kind``):

- ``attention``: which token a head attends to most from a chosen query;
- ``next_token``: which token the model writes next (multiple choice among its likeliest);
- ``probability``: in which band the probability of its next token falls;
- ``lens``: the first layer at which the logit lens already ranks the final answer first;
- ``subwords``: where a word is split into subword pieces;
- ``positions``: which pair of positions the positional encoding makes most alike;
- ``mistake``: which of the seeds' mistakes broke the attention figure shown;
- ``what_if``: what a what-if switch changes (the next token, or where a head looks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from ..core.model import Transformer
from ..core.trace import Trace
from ..core.util import eval_mode
from ..generation.lens import logit_lens
from ..generation.sampling import never_generated
from ..text.tokenization import Tokenizer
from . import mistakes as seed_mistakes
from .inspection import Analysis, analyse, input_ids
from .interventions import NO_INTERVENTION, Intervention
from .switch import Switch

Kind = Literal[
    "attention", "next_token", "probability", "lens", "subwords", "positions", "mistake", "what_if"
]
KINDS: tuple[str, ...] = (
    "attention",
    "next_token",
    "probability",
    "lens",
    "subwords",
    "positions",
    "mistake",
    "what_if",
)
# The bands a probability question offers, as (lowest, label): the band is the last whose
# lowest value the probability reaches.
BANDS: tuple[tuple[float, str], ...] = (
    (0.0, "under 25 %"),
    (0.25, "25 % to 50 %"),
    (0.5, "50 % to 75 %"),
    (0.75, "75 % or more"),
)
MOST_CHOICES = 16  # a question offers at most this many answers (a phone shows them all)


@dataclass(frozen=True)
class Exercise:
    """One question of the bank, bound to a model and a text.

    Attributes:
        id: a short stable name (links, exports and the rooms' answers use it).
        kind: what is asked (see the module's docstring).
        model: the model's name (a bundled model; for ``subwords``, a tokenizer: a bundled
            model's or a real one, ``bert-base-uncased``).
        text: the input the question is about (for ``subwords``, the word).
        tab: the tab where the figure lives (``attention``, ``generate``, ...).
        params: what the kind needs: ``stack`` (``encoder_self``/``decoder_self``), ``layer``
            and ``head`` (from 0), ``query`` (a position), ``pairs`` (of positions),
            ``shown`` (the mistake the figure was drawn with, its switch record),
            ``candidates`` (the mistakes offered, records; a question reads their labels), ``switch`` (a what-if: ``no_positions``, ``no_causal_mask``), ``ask``
            (``next``/``attention`` for a what-if).
        explanation: why the answer is what it is, in plain words; ``{answer}`` and the
            other names :func:`ask` fills are replaced.
    """

    id: str
    kind: Kind
    model: str
    text: str
    tab: str
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    explanation: str = ""


@dataclass
class Asked:
    """An exercise as asked of one model: the question, the answers offered, the model's own
    answer (one of ``choices``), the explanation, and the figure that shows it.

    ``bars`` is the figure's data: one label and one value per bar (``values[i]`` for
    ``labels[i]``), with ``value_name`` naming what the bars measure. Where the answer is the
    largest bar (attention, next token, positions), the figure's argmax is the answer."""

    exercise_id: str
    kind: str
    question: str
    choices: list[str]
    answer: str
    explanation: str
    title: str
    labels: list[str]
    values: list[float]
    value_name: str
    heatmap: list[list[float]] | None = None  # a (queries, keys) map, for the mistake's figure
    heatmap_labels: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The asked exercise as plain JSON-able values (a room stores it)."""
        return dict(self.__dict__)

    @classmethod
    def of(
        cls,
        item: Exercise,
        question: str,
        choices: list[str],
        answer: str,
        explanation: str,
        title: str,
        labels: list[str],
        values: list[float],
        value_name: str,
        **heatmap: Any,
    ) -> Asked:
        """``item`` as asked: the fields after its id and kind, and the ``heatmap`` ones where
        it has one."""
        return cls(
            item.id,
            item.kind,
            question,
            choices,
            answer,
            explanation,
            title,
            labels,
            values,
            value_name,
            **heatmap,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Asked:
        """The :meth:`to_dict` of an asked exercise, read back."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


class ExerciseError(ValueError):
    """An exercise that cannot be asked of this model (a clear message for the page)."""


# -- the bank -----------------------------------------------------------------------------


def _attention(
    id: str, model: str, text: str, stack: str, layer: int, head: int, query: int, why: str
) -> Exercise:
    params = {"stack": stack, "layer": layer, "head": head, "query": query}
    return Exercise(id, "attention", model, text, "attention", params, why)


_LOOKS = (
    "Read the row of the query {query_token}: the head gives each key a weight, and the "
    "weights add up to 1. The largest, {answer} ({value}), is where it looks most. "
)

BANK: tuple[Exercise, ...] = (
    _attention(
        "attention-translate-cat",
        "translate",
        "the cat sees a dog",
        "encoder_self",
        0,
        0,
        1,
        _LOOKS + "In the first layer a head has only the words and their positions to go by.",
    ),
    _attention(
        "attention-translate-dog",
        "translate",
        "the cat sees a dog",
        "encoder_self",
        1,
        2,
        6,
        _LOOKS + "A second-layer head reads words that have already mixed with their neighbours.",
    ),
    _attention(
        "attention-translate-big",
        "translate",
        "the big dog runs",
        "encoder_self",
        2,
        1,
        2,
        _LOOKS + "The translator puts adjectives after nouns in French, so a head that "
        "links a noun with its adjective is useful to it.",
    ),
    _attention(
        "attention-translate-girl",
        "translate",
        "a girl reads a book",
        "encoder_self",
        0,
        3,
        4,
        _LOOKS + "Heads differ: the same query may look elsewhere in another head.",
    ),
    _attention(
        "attention-reverse-first",
        "reverse",
        "a b c d e",
        "encoder_self",
        1,
        0,
        0,
        _LOOKS + "To reverse a sequence, the model must know where each letter stands.",
    ),
    _attention(
        "attention-reverse-last",
        "reverse",
        "m o d e l",
        "encoder_self",
        0,
        1,
        4,
        _LOOKS + "Reversing needs positions more than letters: watch how far the head looks.",
    ),
    _attention(
        "attention-continue-dog",
        "continue",
        "the dog sees a",
        "decoder_self",
        0,
        0,
        4,
        _LOOKS + "This is a decoder: a query sees only itself and the tokens before it.",
    ),
    _attention(
        "attention-continue-bird",
        "continue",
        "a bird eats",
        "decoder_self",
        1,
        2,
        3,
        _LOOKS + "Many heads of a decoder rest on the first token, [BOS], when nothing else "
        "is useful: it is always there to look at.",
    ),
    _attention(
        "attention-continue-boy",
        "continue",
        "the boy runs",
        "decoder_self",
        2,
        3,
        4,
        _LOOKS + "In the last layer the heads gather what the next word needs.",
    ),
    *(
        Exercise(
            f"next-{slug}",
            "next_token",
            "continue",
            text,
            "generate",
            {},
            "The model gives every token of its vocabulary a probability; it writes the "
            "likeliest, {answer} ({value}). " + why,
        )
        for slug, text, why in (
            ("the-ca", "the ca", "Few words of this task begin with 'ca'."),
            (
                "the-cat-s",
                "the cat s",
                "A verb begins with 's': the model weighs the verbs it knows.",
            ),
            ("a-bo", "the teacher reads a bo", "A piece can be a single letter of a word."),
            ("the-gr", "a horse eats the gr", "The model learnt which pieces follow which."),
            ("sings", "a bird sings", "A sentence may end: [EOS] is a token the model writes too."),
        )
    ),
    *(
        Exercise(
            f"band-{slug}",
            "probability",
            "continue",
            text,
            "generate",
            {},
            "The model's likeliest next token, {token}, gets {value}: {answer}. A sure model "
            "gives its answer most of the probability; an unsure one spreads it.",
        )
        for slug, text in (
            ("the-ca", "the ca"),
            ("the-cat-s", "the cat s"),
            ("the-fish", "the fish"),
        )
    ),
    *(
        Exercise(
            f"lens-{slug}",
            "lens",
            "continue",
            text,
            "generate",
            {},
            "The logit lens reads each layer's output as if it were the last one. The final "
            "answer, {token}, is ranked first from {answer} on: before it, the layers were still "
            "building it.",
        )
        for slug, text in (
            ("sees-a-dog", "the cat sees a dog"),
            ("the-do", "the do"),
            ("the-teacher", "the teacher"),
        )
    ),
    Exercise(
        "subwords-translate-walking",
        "subwords",
        "translate",
        "walking",
        "tokenize",
        {},
        "A BPE tokenizer merges the pairs it saw most often while it learnt; a word it rarely "
        "saw stays in smaller pieces: {answer}.",
    ),
    Exercise(
        "subwords-translate-birds",
        "subwords",
        "translate",
        "birds",
        "tokenize",
        {},
        "Frequent words become one piece; an ending like a plural 's' is often a piece of its "
        "own: {answer}.",
    ),
    Exercise(
        "subwords-continue-quickly",
        "subwords",
        "continue",
        "quickly",
        "tokenize",
        {},
        "A Unigram tokenizer keeps the split its pieces make likeliest: {answer}.",
    ),
    Exercise(
        "subwords-bert-embeddings",
        "subwords",
        "bert-base-uncased",
        "embeddings",
        "tokenize",
        {},
        "BERT's WordPiece takes the longest piece of its vocabulary from the start of the "
        "word, then again from where it stopped: {answer}.",
    ),
    Exercise(
        "subwords-bert-tokenization",
        "subwords",
        "bert-base-uncased",
        "tokenization",
        "tokenize",
        {},
        "Even a common word of computing can be missing from a vocabulary of 30,522: {answer}.",
    ),
    Exercise(
        "positions-translate",
        "positions",
        "translate",
        "",
        "embeddings",
        {"pairs": [[2, 3], [2, 9], [5, 30], [0, 50]]},
        "The sinusoidal encoding of a pair is alike by how far apart the two positions are "
        "(cos of the distance times each frequency, summed): {answer} ({value}).",
    ),
    Exercise(
        "positions-continue",
        "positions",
        "continue",
        "",
        "embeddings",
        {"pairs": [[10, 12], [1, 7], [4, 20], [3, 100]]},
        "Close positions share the slow sinusoids and differ in the fast ones; the most alike "
        "pair is {answer} ({value}).",
    ),
    Exercise(
        "mistake-continue-scale",
        "mistake",
        "continue",
        "the dog sees a cat",
        "attention",
        {
            "stack": "decoder_self",
            "layer": 0,
            "head": 1,
            "shown": seed_mistakes.SCORES_TIMES_D_HEAD,
            "candidates": [
                seed_mistakes.SCORES_TIMES_D_HEAD,
                seed_mistakes.SCORES_OVER_D_MODEL,
                seed_mistakes.SINUSOID_SWAPPED,
            ],
        },
        "Only {answer} draws this figure: its pass gives the same weights. Multiplying the "
        "scores instead of dividing them makes the softmax peak on one key per row.",
    ),
    Exercise(
        "mistake-continue-flat",
        "mistake",
        "continue",
        "a boy sees the bird",
        "attention",
        {
            "stack": "decoder_self",
            "layer": 0,
            "head": 2,
            "shown": seed_mistakes.SCORES_OVER_D_MODEL,
            "candidates": [
                seed_mistakes.SCORES_TIMES_D_HEAD,
                seed_mistakes.SCORES_OVER_D_MODEL,
                seed_mistakes.SINUSOID_SWAPPED,
            ],
        },
        "Only {answer} draws this figure: its pass gives the same weights. Dividing by "
        "√d_model, larger than √d_head, flattens every row towards equal weights.",
    ),
    Exercise(
        "mistake-translate-positions",
        "mistake",
        "translate",
        "the cat sees a dog",
        "attention",
        {
            "stack": "encoder_self",
            "layer": 0,
            "head": 0,
            "shown": seed_mistakes.SINUSOID_SWAPPED,
            "candidates": [
                seed_mistakes.SCORES_TIMES_D_HEAD,
                seed_mistakes.SCORES_OVER_D_MODEL,
                seed_mistakes.SINUSOID_SWAPPED,
            ],
        },
        "Only {answer} draws this figure: its pass gives the same weights. Wrong positional "
        "vectors move where a head looks without making its rows sharper or flatter.",
    ),
    Exercise(
        "whatif-continue-positions",
        "what_if",
        "continue",
        "the cat sees",
        "generate",
        {"switch": "no_positions", "ask": "next"},
        "Without positions the model reads a bag of tokens: it now writes {answer} "
        "(it wrote {before} with them).",
    ),
    Exercise(
        "whatif-continue-causal",
        "what_if",
        "continue",
        "the dog eats a fish",
        "attention",
        {
            "switch": "no_causal_mask",
            "ask": "attention",
            "stack": "decoder_self",
            "layer": 0,
            "head": 0,
            "query": 2,
        },
        "Without the causal mask a query may read the tokens after it too; this head now "
        "looks most at {answer} (it looked at {before}).",
    ),
    Exercise(
        "whatif-translate-positions",
        "what_if",
        "translate",
        "the dog sees a cat",
        "attention",
        {
            "switch": "no_positions",
            "ask": "attention",
            "stack": "encoder_self",
            "layer": 0,
            "head": 1,
            "query": 1,
        },
        "Without positions, two equal tokens get equal rows, and a head can only look by "
        "content: it now looks most at {answer} (it looked at {before}).",
    ),
)

BY_ID: dict[str, Exercise] = {e.id: e for e in BANK}


def exercise(exercise_id: str) -> Exercise:
    """The bank's exercise called ``exercise_id``; :class:`ExerciseError` naming a few when
    there is none."""
    found = BY_ID.get(exercise_id) if isinstance(exercise_id, str) else None
    if found is None:
        raise ExerciseError(
            f"there is no exercise {str(exercise_id)[:60]!r}: choose one of {len(BANK)} such "
            f"as {BANK[0].id!r}"
        )
    return found


# -- answers, computed -------------------------------------------------------------------

# What :func:`ask` needs to read a model: name → (model, tokenizer); for a tokenizer alone the
# model may be None.
Models = Callable[[str], tuple[Transformer | None, Tokenizer]]


def ask(item: Exercise, model: Transformer | None, tokenizer: Tokenizer) -> Asked:
    """Ask ``item`` of ``model`` (and its ``tokenizer``): the question, the answers offered,
    the model's own answer computed now, the explanation and the figure's data."""
    kind = item.kind
    if kind == "subwords":
        return _ask_subwords(item, tokenizer)
    if model is None:
        raise ExerciseError(f"the exercise {item.id!r} needs a model, not a tokenizer alone")
    if kind == "attention":
        return _ask_attention(item, model, tokenizer)
    if kind in ("next_token", "probability"):
        return _ask_next(item, model, tokenizer)
    if kind == "lens":
        return _ask_lens(item, model, tokenizer)
    if kind == "positions":
        return _ask_positions(item, model)
    if kind == "mistake":
        return _ask_mistake(item, model, tokenizer)
    if kind == "what_if":
        return _ask_what_if(item, model, tokenizer)
    raise ExerciseError(f"unknown kind of exercise {kind!r}")


def ask_of(item: Exercise, models: Models) -> Asked:
    """:func:`ask` with the model named by the exercise, read from ``models``."""
    model, tokenizer = models(item.model)
    return ask(item, model, tokenizer)


def labelled(pieces: Sequence[str]) -> list[str]:
    """Unique labels for a sequence's pieces: ``"3:cat"`` (plotly merges repeated labels)."""
    return [f"{i}:{shown(piece)}" for i, piece in enumerate(pieces)]


def shown(piece: str) -> str:
    """A piece as a reader sees it: the word-start marks of SentencePiece (▁) and byte-level
    BPE (Ġ) as a plain space mark, WordPiece's continuation mark (##) dropped."""
    if piece.startswith("##"):
        return piece[2:]
    return piece.replace("▁", "_").replace("Ġ", "_")


def _fill(item: Exercise, **values: Any) -> str:
    return item.explanation.format(**values)


def _pct(p: float) -> str:
    return f"{100 * p:.1f} %"


def _stack_pieces(analysis: Analysis, stack: str) -> list[str]:
    """The pieces of the queries of attention ``stack``."""
    return analysis.source_pieces[0] if stack == "encoder_self" else analysis.target_pieces[0]


def _key_pieces(analysis: Analysis, stack: str) -> list[str]:
    """The pieces of the keys of attention ``stack`` (cross-attention reads the source)."""
    return analysis.target_pieces[0] if stack == "decoder_self" else analysis.source_pieces[0]


def _query_index(pieces: Sequence[str], query: int) -> int:
    """``query`` as a position; from the end (``-1``: the last) among the real tokens."""
    if query >= 0:
        return query
    return [i for i, piece in enumerate(pieces) if piece != "[PAD]"][query]


def _analysis(
    item: Exercise,
    model: Transformer,
    tokenizer: Tokenizer,
    intervention: Intervention = NO_INTERVENTION,
    targets: torch.Tensor | None = None,
) -> Analysis:
    try:
        return analyse(model, tokenizer, [item.text], intervention=intervention, targets=targets)
    except ValueError as error:
        message = f"the exercise {item.id!r} cannot be asked of this model: {error}"
        raise ExerciseError(message) from None


def attention_row(
    analysis: Analysis, stack: str, layer: int, head: int, query: int
) -> tuple[list[str], list[float]]:
    """The keys a query may attend to (labels) and the weights head ``head`` of layer
    ``layer`` gives them: the row ``query`` (``-1``: the last token) of its ``(Tq, Tk)`` map,
    masked keys left out."""
    record = analysis.trace.attention(stack, layer)  # type: ignore[arg-type]
    weights = record.weights[0, head]  # (Tq, Tk)
    allowed = record.mask[0, 0].expand_as(weights)  # (Tq, Tk), True = may attend
    if not -weights.size(0) <= query < weights.size(0):
        raise ExerciseError(f"query {query} is past the text's {weights.size(0)} tokens")
    query = _query_index(_stack_pieces(analysis, stack), query)
    labels = labelled(_key_pieces(analysis, stack))
    keys = [k for k in range(weights.size(1)) if bool(allowed[query, k])]
    return [labels[k] for k in keys], [float(weights[query, k]) for k in keys]


def _check_head(item: Exercise, model: Transformer, stack: str, layer: int, head: int) -> None:
    config = model.config
    layers = config.n_encoder_layers if stack == "encoder_self" else config.n_decoder_layers
    if not (0 <= layer < layers and 0 <= head < config.n_heads):
        raise ExerciseError(
            f"the exercise {item.id!r} asks about layer {layer + 1}, head {head + 1}: "
            f"this model has {layers} layers of {config.n_heads} heads"
        )


def _ask_attention(item: Exercise, model: Transformer, tokenizer: Tokenizer) -> Asked:
    p = item.params
    stack, layer, head, query = p["stack"], p["layer"], p["head"], p["query"]
    _check_head(item, model, stack, layer, head)
    analysis = _analysis(item, model, tokenizer)
    keys, weights = attention_row(analysis, stack, layer, head, query)
    best = max(range(len(weights)), key=weights.__getitem__)
    pieces = _stack_pieces(analysis, stack)
    query_token = labelled(pieces)[_query_index(pieces, query)]
    where = {"encoder_self": "the encoder's", "decoder_self": "the decoder's"}.get(
        stack, "the cross-attention (decoder → encoder) of"
    )
    question = (
        f"Text: “{item.text}”. In {where} layer {layer + 1}, head {head + 1}: which token "
        f"does the query **{query_token}** attend to most?"
    )
    return Asked.of(
        item,
        question,
        _limit(keys, keys[best]),
        keys[best],
        _fill(item, answer=keys[best], value=_pct(weights[best]), query_token=query_token),
        f"Layer {layer + 1}, head {head + 1}: attention from {query_token}",
        keys,
        weights,
        "attention weight",
    )


def _limit(choices: list[str], answer: str) -> list[str]:
    """At most ``MOST_CHOICES`` of ``choices`` (in their order), the last ones, ``answer``
    always among them."""
    if len(choices) <= MOST_CHOICES:
        return list(choices)
    # the keys nearest the end: a decoder's query itself and the tokens just before it
    kept = [*[c for c in choices if c != answer][-(MOST_CHOICES - 1) :], answer]
    return [c for c in choices if c in kept]


def next_distribution(model: Transformer, trace: Trace) -> torch.Tensor:
    """``(V,)`` the model's probabilities for the token after the last position of ``trace``,
    [PAD] given none (as generation does)."""
    logits = trace.logits_at(trace.length - 1, None)[0, -1].float()  # (V,)
    excluded = never_generated(model.config)
    if excluded is not None:
        logits[excluded] = float("-inf")
    return logits.softmax(-1)


def _decoder_only(item: Exercise, model: Transformer) -> None:
    if model.config.architecture != "decoder-only":
        raise ExerciseError(f"the exercise {item.id!r} needs a model that continues a text")


def _token(tokenizer: Tokenizer, token_id: int) -> str:
    return shown(tokenizer.id_to_token(token_id) or f"#{token_id}")


def _step_distribution(
    item: Exercise, model: Transformer, tokenizer: Tokenizer, step: int
) -> torch.Tensor:
    """``(V,)`` the model's probabilities for the token it writes at ``step`` (from 0) after
    ``item.text``, every earlier token its likeliest (a decoder-only model continues the text;
    an encoder-decoder model translates it)."""
    if model.config.architecture == "encoder-only":
        raise ExerciseError(f"the exercise {item.id!r} needs a model that writes text")
    analysis = _analysis(item, model, tokenizer)
    if model.config.architecture == "encoder-decoder":
        written = analysis.trace.length  # [BOS] and the greedy answer, fed back
        if step >= written:
            raise ExerciseError(f"the model's answer ends before step {step + 1}")
        logits = analysis.trace.logits_at(step, step + 1)[0, 0].float()  # (V,)
        excluded = never_generated(model.config)
        if excluded is not None:
            logits[excluded] = float("-inf")
        return logits.softmax(-1)
    ids = input_ids(model, tokenizer, [item.text])  # (1, T)
    excluded = never_generated(model.config)
    with torch.no_grad(), eval_mode(model):
        for _ in range(step + 1):
            logits = model(None, ids.to(model.device))[0, -1].float()  # (V,)
            if excluded is not None:
                logits[excluded] = float("-inf")
            ids = torch.cat([ids, logits.argmax().view(1, 1).cpu()], dim=1)
    return logits.softmax(-1)


def _ask_next(item: Exercise, model: Transformer, tokenizer: Tokenizer) -> Asked:
    step = int(item.params.get("step", 0))
    if step == 0:
        _decoder_only(item, model)
        probs = next_distribution(model, _analysis(item, model, tokenizer).trace)
    else:
        probs = _step_distribution(item, model, tokenizer, step - 1)
    top = probs.topk(min(8, probs.numel()))
    labels = [_token(tokenizer, int(i)) for i in top.indices]
    values = [float(v) for v in top.values]
    best, p = labels[0], values[0]
    if item.kind == "next_token":
        choices = sorted(labels[:4])  # the likeliest four, in an order that tells nothing
        question = f"Text: “{item.text}”. Which token will the model write next?"
        if step:
            question = (
                f"Text: “{item.text}”, after {step} token(s) written: which token is the "
                "model's likeliest next?"
            )
        answer, explanation = best, _fill(item, answer=best, value=_pct(p))
    else:
        answer = [label for lowest, label in BANDS if p >= lowest][-1]
        choices = [label for _, label in BANDS]
        question = (
            f"Text: “{item.text}”. The model's likeliest next token is **{best}**. "
            "How much probability does it give it?"
        )
        explanation = _fill(item, answer=answer, token=best, value=_pct(p))
    return Asked.of(
        item,
        question,
        choices,
        answer,
        explanation,
        f"Next token after “{item.text}”",
        labels,
        values,
        "probability",
    )


def _ask_lens(item: Exercise, model: Transformer, tokenizer: Tokenizer) -> Asked:
    _decoder_only(item, model)
    trace = _analysis(item, model, tokenizer).trace
    final = int(next_distribution(model, trace).argmax())
    lens = logit_lens(model, trace, -1, chosen=final, exclude=never_generated(model.config))
    assert lens.chosen_rank is not None and lens.chosen_prob is not None  # chosen was given
    ranks = [int(r) for r in lens.chosen_rank]
    layers = [f"layer {n}" for n in lens.layers]
    first = next(i for i, r in enumerate(ranks) if all(q == 1 for q in ranks[i:]))
    token = _token(tokenizer, final)
    question = (
        f"Text: “{item.text}”. The model will write **{token}**. From which layer on does the "
        "logit lens already rank it first?"
    )
    return Asked.of(
        item,
        question,
        layers,
        layers[first],
        _fill(item, answer=layers[first], token=token),
        f"Logit lens: probability of {token} after each layer",
        layers,
        [float(v) for v in lens.chosen_prob],
        f"probability of {token}",
    )


def subword_split(tokenizer: Tokenizer, word: str) -> list[str]:
    """The pieces ``tokenizer`` splits ``word`` into, as a reader sees them (marks of a
    word's start or continuation left out; a piece that is only such a mark dropped)."""
    pieces = [shown(r.piece).lstrip("_") for r in tokenizer.encode(word, add_special_tokens=False)]
    return [p for p in pieces if p]


def _ask_subwords(item: Exercise, tokenizer: Tokenizer) -> Asked:
    word = item.text
    pieces = subword_split(tokenizer, word)
    answer = " | ".join(pieces)
    half = max(1, len(word) // 2)
    candidates = {
        answer,
        word,
        " | ".join(word),
        f"{word[:half]} | {word[half:]}",
        f"{word[:-1]} | {word[-1:]}",
        f"{word[:2]} | {word[2:]}",
    }
    others = sorted(c for c in candidates if c != answer)[:3]
    lengths = [float(len(p)) for p in pieces]
    return Asked.of(
        item,
        f"How does the **{item.model}** tokenizer split the word “{word}” into pieces?",
        sorted([answer, *others]),
        answer,
        _fill(item, answer=answer),
        f"“{word}” in pieces",
        labelled(pieces),
        lengths,
        "characters in the piece",
    )


def positional_table(model: Transformer, length: int) -> torch.Tensor:
    """``(length, d_model)`` the positional vectors the model adds to its token embeddings
    (its input stack's; :class:`ExerciseError` for a model that adds none)."""
    positional = model.src_positional if model.config.architecture != "decoder-only" else None
    positional = positional or getattr(model, "tgt_positional", None)
    if positional is None:
        raise ExerciseError("this model adds no positional vectors to its embeddings")
    with torch.no_grad():
        return positional(length, 0).float()


def _ask_positions(item: Exercise, model: Transformer) -> Asked:
    pairs = [tuple(pair) for pair in item.params["pairs"]]
    longest = max(max(pair) for pair in pairs) + 1
    if longest > model.config.max_len:
        raise ExerciseError(f"this model encodes at most {model.config.max_len} positions")
    table = positional_table(model, longest)
    table = table / table.norm(dim=-1, keepdim=True)
    labels = [f"{a} and {b}" for a, b in pairs]
    values = [float(table[a] @ table[b]) for a, b in pairs]
    best = max(range(len(values)), key=values.__getitem__)
    return Asked.of(
        item,
        "Which pair of positions does the positional encoding make most alike "
        "(the largest cosine similarity of their vectors)?",
        list(labels),
        labels[best],
        _fill(item, answer=labels[best], value=f"{values[best]:.3f}"),
        "Cosine similarity of the positional vectors",
        labels,
        values,
        "cosine similarity",
    )


def _ask_mistake(item: Exercise, model: Transformer, tokenizer: Tokenizer) -> Asked:
    p = item.params
    stack, layer, head = p["stack"], p["layer"], p["head"]
    _check_head(item, model, stack, layer, head)
    clean = _analysis(item, model, tokenizer)
    targets = _targets(model, tokenizer, clean)

    def weights(mistake: Switch) -> torch.Tensor:
        broken = _analysis(
            item, model, tokenizer, Intervention(mistakes=frozenset({mistake})), targets
        )
        return broken.trace.attention(stack, layer).weights[0, head]  # (Tq, Tk)

    shown_map = weights(p["shown"])
    matching = [c for c in p["candidates"] if torch.allclose(weights(c), shown_map, atol=1e-6)]
    if len(matching) != 1:
        raise ExerciseError(
            f"the exercise {item.id!r} has {len(matching)} mistakes that draw its figure on "
            "this model: it has no single answer here"
        )
    labels = labelled(_stack_pieces(clean, stack))
    where = "encoder" if stack == "encoder_self" else "decoder"
    return Asked.of(
        item,
        f"Text: “{item.text}”. This is the {where}'s layer {layer + 1}, head {head + 1}, drawn "
        "by a pass with one of the seeds' mistakes. Which one?",
        sorted(c.label for c in p["candidates"]),
        matching[0].label,
        _fill(item, answer=matching[0].label),
        f"Layer {layer + 1}, head {head + 1}, with a mistake",
        [],
        [],
        "attention weight",
        heatmap=[[float(v) for v in row] for row in shown_map],
        heatmap_labels=labels,
    )


def _targets(model: Transformer, tokenizer: Tokenizer, clean: Analysis) -> torch.Tensor | None:
    """The decoder's input of ``clean``'s pass (an encoder-decoder's greedy answer), so that a
    changed pass reads the same target."""
    if model.config.architecture != "encoder-decoder":
        return None
    ids = [tokenizer.token_to_id(piece) for piece in clean.target_pieces[0]]
    return torch.tensor([[model.config.pad_id if i is None else i for i in ids]])


SWITCHES: dict[str, tuple[Intervention, str]] = {
    "no_positions": (Intervention(positional_encoding=False), "the positional encoding off"),
    "no_causal_mask": (Intervention(causal_mask=False), "the causal mask off"),
}


def _ask_what_if(item: Exercise, model: Transformer, tokenizer: Tokenizer) -> Asked:
    p = item.params
    intervention, said = SWITCHES[p["switch"]]
    clean = _analysis(item, model, tokenizer)
    changed = _analysis(item, model, tokenizer, intervention, _targets(model, tokenizer, clean))
    if p["ask"] == "next":
        _decoder_only(item, model)
        before_probs = next_distribution(model, clean.trace)
        probs = next_distribution(model, changed.trace)
        top = probs.topk(min(8, probs.numel()))
        labels = [_token(tokenizer, int(i)) for i in top.indices]
        values = [float(v) for v in top.values]
        before = _token(tokenizer, int(before_probs.argmax()))
        choices = sorted(dict.fromkeys([*labels[:3], before]))
        question = (
            f"Text: “{item.text}”. The model writes **{before}** next. With {said}, "
            "which token will it write?"
        )
        title = f"Next token with {said}"
        value_name = "probability"
        answer = labels[0]
    else:
        stack, layer, head, query = p["stack"], p["layer"], p["head"], p["query"]
        _check_head(item, model, stack, layer, head)
        old_keys, old = attention_row(clean, stack, layer, head, query)
        labels, values = attention_row(changed, stack, layer, head, query)
        before = old_keys[max(range(len(old)), key=old.__getitem__)]
        answer = labels[max(range(len(values)), key=values.__getitem__)]
        query_token = labelled(_stack_pieces(clean, stack))[query]
        choices = _limit(labels, answer)
        question = (
            f"Text: “{item.text}”. Layer {layer + 1}, head {head + 1} looks most at {before} "
            f"from **{query_token}**. With {said}, where will it look most?"
        )
        title = f"Attention from {query_token} with {said}"
        value_name = "attention weight"
    return Asked.of(
        item,
        question,
        choices,
        answer,
        _fill(item, answer=answer, before=before),
        title,
        labels,
        values,
        value_name,
    )


# -- ask about this view -------------------------------------------------------------------

VIEW_EXPLANATIONS = {
    "attention": _LOOKS + "This is the view on screen: the figure is its row.",
    "next_token": "The model gives every token of its vocabulary a probability; its likeliest "
    "is {answer} ({value}).",
}


def view_exercise(tab: str, values: dict[str, str]) -> Exercise:
    """An exercise about the view a page shows (a link's query parameters: ``tab`` and its
    controls' values): on Attention, which token the head shown attends to most from the last
    token of the sentence shown; on Generate, which token the model writes at the step shown.
    :class:`ExerciseError` for a tab or view it cannot ask about."""
    model = values.get("model", "")
    if tab == "attention":
        lines = [line.strip() for line in values.get("sentences", "").splitlines() if line.strip()]
        row = _whole(values.get("row", "1"), "sentence") - 1
        if not 0 <= row < len(lines):
            raise ExerciseError("the view shows no sentence to ask about")
        stack = {
            "encoder self-attention": "encoder_self",
            "decoder masked self-attention": "decoder_self",
            "cross-attention (decoder → encoder)": "cross",
        }.get(values.get("kind", ""))
        if stack is None:
            raise ExerciseError("the view shows no attention this question knows")
        params = {
            "stack": stack,
            "layer": _whole(values.get("layer", "1"), "layer") - 1,
            "head": _whole(values.get("head", "1"), "head") - 1,
            "query": -1,  # the last token
        }
        return Exercise(
            f"view-attention-{model}",
            "attention",
            model,
            lines[row],
            "attention",
            params,
            VIEW_EXPLANATIONS["attention"],
        )
    if tab == "generate":
        text = values.get("source", "").strip()
        if not text:
            raise ExerciseError("the view shows no prompt to ask about")
        step = _whole(values.get("step", "0") or "0", "step")
        return Exercise(
            f"view-next-{model}",
            "next_token",
            model,
            text,
            "generate",
            {"step": step},
            VIEW_EXPLANATIONS["next_token"],
        )
    raise ExerciseError(
        "ask about this view works on the Attention and Generate tabs: open one of them"
    )


def _whole(value: str, what: str) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        raise ExerciseError(f"the view's {what} is not a number: {str(value)[:20]!r}") from None
