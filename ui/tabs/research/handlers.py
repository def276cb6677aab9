"""The tab's module-level handlers, one per method, ``handler(registry, request)`` made by
:func:`ui.serving.endpoints.takes_request` from the method's request (``request.py``, the
controls read and checked once): each runs the library's method (a sweep through the
costly-pass admission, so that one student's sweep of a big model never holds the workers a
small model's click needs) and returns its figures and a summary in words."""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import torch
from torch import Tensor

from transformer.core.config import ModelConfig
from transformer.core.run import TRACE
from transformer.figures import research as figures
from transformer.lab import side_by_side as pair
from transformer.lab.analysis import shown_piece
from transformer.lab.perplexity import read_text, reference_paragraph
from transformer.pretrained.checkpoint import Checkpoint

from ...serving import limits
from ...serving.costly import PassCost, check_cost, costly_here, device_scale, parameters
from ...serving.endpoints import takes_request
from ...serving.errors import InputError, friendly, gpu, user_input
from ...serving.state import ModelRegistry
from . import methods
from .request import (
    ABLATION_VALUES,
    INPUT_VALUES,
    LOGIT_VALUES,
    SCORES_VALUES,
    Model,
    PatchingRequest,
    SideBySideRequest,
    TextRequest,
    Token,
    Tokens,
    Unsupported,
)
from .text import (
    ENCODER_DECODER,
    IG_STEPS,
    SCORES_2017,
    SCORES_ENCODER,
    SCORES_ROTARY,
    SHORT_SITES,
    SITES,
    SWEEP_COST_FACTOR,
)

T = TypeVar("T")


def admitted(
    registry: ModelRegistry,
    model: Model,
    tokens: int,
    passes: int,
    key: tuple[Any, ...],
    compute: Callable[[], T],
) -> T:
    """``compute()`` through the costly-pass admission (``ui/serving/costly.py``): one pass of
    ``tokens`` too big for the server is refused; a sweep of ``passes`` such passes that costs
    more than a cheap event may spend runs in the costly pool (its page told its place in
    line), joined by the same sweep asked for meanwhile on a shared model."""
    name, checkpoint = model.name, model.checkpoint
    check_cost(name, PassCost(parameters(checkpoint.model), tokens), registry.device)
    sweep = PassCost(parameters(checkpoint.model), tokens * max(1, passes))
    limit = SWEEP_COST_FACTOR * limits.MAX_PASS_COST * device_scale(registry.device)
    if sweep.cost > limit:
        raise InputError(
            f"this sweep runs {name} {passes:,} times over {tokens} tokens, more than one "
            "request may ask of this server: shorten the text (a patching sweep grows with "
            "the square of its length) or choose a smaller model"
        )
    if not costly_here(sweep, registry.device):
        with user_input():
            return compute()
    # The pool's thread runs in this event's context, so that a progress bar reaches its page.
    context = contextvars.copy_context()
    shared = registry.is_shared(name, checkpoint)
    with user_input():
        return registry.passes.run(
            (name, *key) if shared else object(), lambda: context.run(compute), name
        )


def _position_labels(pieces: Sequence[str]) -> list[str]:
    return [f"{i}:{p}" for i, p in enumerate(pieces)]


def _head_labels(n: int) -> list[str]:
    return [f"head {h + 1}" for h in range(n)]


# -- 1. Activation patching ------------------------------------------------------------------


@friendly
@gpu
@takes_request(PatchingRequest.of, optional=True)
def research_patching(
    registry: ModelRegistry, request: PatchingRequest | Unsupported
) -> tuple[Any, str]:
    """The ``/research_patching`` endpoint: patch ``site`` ("residual", "attention", "mlp" or
    "head") of the clean run into the corrupted one, everywhere in turn; the figure (layers ×
    positions, or layers × heads) and what it says. On an encoder-decoder model ``clean`` and
    ``corrupted`` are two sources and ``target`` the decoder's input in both runs."""
    if isinstance(request, Unsupported):
        return request.view()
    model, site, clean, progress = request.model, request.site, request.clean, request.progress
    answer, wrong = request.answer, request.wrong

    def report(done: Any, total: Any = None) -> None:
        if total:
            progress((int(done), int(total)), desc=f"Patching {SITES[site]}", unit="runs")
        else:
            progress(float(done), desc=f"Patching {SITES[site]}")

    def compute() -> Tensor:
        return methods.activation_patching(
            model.checkpoint.model,
            clean.ids,
            request.corrupted,
            answer.id,
            wrong.id,
            cast(Any, site),
            progress=report,
            **clean.sources,
        )

    key = ("patching", *clean.key, answer.id, wrong.id, site)
    result = admitted(
        registry, model, clean.length, model.n_layers * request.columns + 2, key, compute
    )
    values = result.detach().float().cpu()
    labels = _head_labels(model.n_heads) if site == "head" else _position_labels(clean.pieces)
    fig = figures.layer_map_figure(
        values,
        labels,
        f"Restored by patching: {SHORT_SITES[site]}",
        "restored",
        model.large,
        column_title="head" if site == "head" else "position",
        fixed_range=(-1.0, 1.0),
    )
    layer, column = divmod(int(values.abs().argmax()), values.shape[1])
    where = f"head {column + 1}" if site == "head" else f"position {labels[column]!r}"
    summary = (
        (ENCODER_DECODER.format(name=model.name) + " " if clean.sources else "")
        + f"{answer.note}{wrong.note}Metric: logit({answer.piece!r}) − logit({wrong.piece!r}), "
        f"normalised so 0 is the corrupted run and 1 the clean run. The strongest cell is "
        f"layer {layer + 1}, {where}: patching it there restores "
        f"{float(values[layer, column]):.2f} of the difference."
    )
    return fig, summary


# -- 2. Head ablation ------------------------------------------------------------------------


def reference_ids(checkpoint: Checkpoint) -> Tensor:
    """``(1, T)`` the perplexity meter's reference paragraph as the model reads it (cut to
    what it reads at once): the text whose mean head outputs a mean ablation puts in."""
    config, tokenizer = checkpoint.config, checkpoint.tokenizer
    ids = tokenizer.encode_ids(reference_paragraph(), add_bos=config.prompt_bos)
    return torch.tensor([ids[: config.max_len]], device=checkpoint.model.device)


@friendly
@gpu
@takes_request(TextRequest.of, ABLATION_VALUES, optional=True)
def research_ablation(
    registry: ModelRegistry, request: TextRequest | Unsupported
) -> tuple[Any, str]:
    """The ``/research_ablation`` endpoint: each head zeroed (``how="zero"``) or replaced by
    its mean output over the meter's reference paragraph (``"mean"``) in turn; the change of
    the text's next-token loss, layers × heads, the head that matters most named, and the
    perplexity meter's reading."""
    if isinstance(request, Unsupported):
        return request.view()
    model, how, tokens, progress = request.model, request.choice, request.tokens, request.progress
    checkpoint, ids, sources, n_heads = model.checkpoint, tokens.ids, tokens.sources, model.n_heads
    reference = reference_ids(checkpoint) if how == "mean" else None

    def report(done: int, total: int) -> None:
        progress((int(done), int(total)), desc=f"Ablating heads ({how})", unit="runs")

    def compute() -> tuple[Tensor, float]:
        options: dict[str, Any] = {"progress": report}
        if reference is not None:
            options["reference_ids"] = reference
        change = methods.head_ablation(checkpoint.model, ids, cast(Any, how), **options, **sources)
        return change, _loss(checkpoint, ids, sources)

    # A mean ablation first reads the reference paragraph: as many passes as it is long.
    passes = model.n_layers * n_heads + 2
    passes += 0 if reference is None else reference.shape[1] // tokens.length
    key = ("ablation", *tokens.key, how)
    change, nll = admitted(registry, model, tokens.length, passes, key, compute)
    values = change.detach().float().cpu()
    fig = figures.layer_map_figure(
        values,
        _head_labels(n_heads),
        f"{how.capitalize()} ablation: Δ loss",
        "Δ loss (nats)",
        model.large,
        column_title="head",
    )
    layer, head = divmod(int(values.argmax()), n_heads)
    worst = float(values[layer, head])
    after = nll + worst
    done = "zeroing" if how == "zero" else "replacing with its mean over a reference paragraph"
    summary = (
        ("The decoder's heads, its source held fixed. " if sources else "")
        + f"**Layer {layer + 1}, head {head + 1} matters most here**: {done} raises the "
        f"next-token loss by {worst:.3f} nats. Perplexity meter: {math.exp(nll):.2f} with every "
        f"head → {math.exp(min(after, 700)):.2f} without this one "
        f"(loss {nll:.3f} → {after:.3f} nats a token)."
    )
    return fig, summary


def _loss(checkpoint: Checkpoint, ids: Tensor, sources: dict[str, Any]) -> float:
    """The mean next-token loss (nats) of ``ids``: the perplexity meter's for a decoder-only
    model; for an encoder-decoder, the decoder's on its own input with the source given."""
    if not sources:
        return read_text(checkpoint.model, ids[0]).nll
    with torch.inference_mode():
        logits = checkpoint.model(sources["source"], ids)[0, :-1].float()
    return float(torch.nn.functional.cross_entropy(logits, ids[0, 1:]))


# -- 3. Direct logit attribution ---------------------------------------------------------------


def _next_token(model: Model, tokens: Tokens, named: Token | None) -> Token:
    """The token to explain: the one named, else the model's own prediction."""
    if named is not None:
        return named
    checkpoint = model.checkpoint
    best = int(_last_logits(checkpoint, tokens.ids, tokens.sources).argmax())
    piece = shown_piece(checkpoint.tokenizer, checkpoint.tokenizer.id_to_token(best) or "?")
    return Token(best, piece, f"The model's own next token, {piece!r}, is explained. ")


def _last_logits(checkpoint: Checkpoint, ids: Tensor, sources: dict[str, Any]) -> Tensor:
    """``(V,)`` the logits after the last of ``ids`` (the decoder's, its source given)."""
    with torch.inference_mode():
        if sources:
            return checkpoint.model(sources["source"], ids)[0, -1]
        return checkpoint.model.decode(ids, last_only=True).logits[0, -1]


@friendly
@gpu
@takes_request(TextRequest.of, LOGIT_VALUES, optional=True)
def research_logit(registry: ModelRegistry, request: TextRequest | Unsupported) -> tuple[Any, str]:
    """The ``/research_logit`` endpoint: the next token's logit (``token``, or the model's own
    prediction when empty) as the sum of what the embedding, each head and each MLP wrote into
    the residual stream, read through the final norm frozen at the real pass."""
    if isinstance(request, Unsupported):
        return request.view()
    model, tokens = request.model, request.tokens
    checkpoint, ids, sources = model.checkpoint, tokens.ids, tokens.sources
    token = _next_token(model, tokens, request.token)

    def compute() -> tuple[Any, float]:
        result = methods.direct_logit_attribution(checkpoint.model, ids, token.id, **sources)
        return result, float(_last_logits(checkpoint, ids, sources)[token.id])

    key = ("logit", *tokens.key, token.id)
    result, computed = admitted(registry, model, tokens.length, 2, key, compute)
    parts = methods.as_parts(result)
    parts = methods.Parts([methods.shown_part(n) for n in parts.names], parts.values)
    values = [methods.as_scalar(v) for v in parts.values]
    real = methods.real_logit(result)
    real = computed if real is None else real
    fig = figures.parts_bar_figure(
        parts.names,
        values,
        f"Parts of the logit of {token.piece!r}",
        "logit",
        model.large,
        total=real,
    )
    ranked = sorted(range(len(values)), key=lambda i: -values[i])
    summary = (
        f"{token.note}Each part is read through the final norm with its scale frozen at the "
        f"real pass. The parts sum to {sum(values):.4f}; the real logit of {token.piece!r} is "
        f"{real:.4f}. Most for it: {', '.join(parts.names[i] for i in ranked[:3])}; most "
        f"against: {', '.join(parts.names[i] for i in ranked[-2:][::-1])}."
    )
    return fig, summary


# -- 4. Input attribution ----------------------------------------------------------------------


@friendly
@gpu
@takes_request(TextRequest.of, INPUT_VALUES, optional=True)
def research_input(registry: ModelRegistry, request: TextRequest | Unsupported) -> tuple[Any, str]:
    """The ``/research_input`` endpoint: how much each input token's embedding counts for the
    next token's logit, by gradient × input or integrated gradients (with its completeness)."""
    if isinstance(request, Unsupported):
        return request.view()
    model, tokens, method = request.model, request.tokens, request.choice
    ids, pieces, sources = tokens.ids, tokens.pieces, tokens.sources
    token = _next_token(model, tokens, request.token)
    passes = 2 if method == "gradient x input" else 2 * IG_STEPS

    def compute() -> Any:
        return methods.input_attribution(
            model.checkpoint.model, ids, token.id, cast(Any, method.replace(" ", "_")), **sources
        )

    key = ("input", *tokens.key, token.id, method)
    result = admitted(registry, model, tokens.length, passes, key, compute)
    scores, delta = methods.as_scores(result)
    fig = figures.token_bars_figure(
        list(pieces),
        scores,
        f"{method.capitalize()} → {token.piece!r}",
        "attribution",
        model.large,
    )
    best = int(scores.abs().argmax())
    summary = ("Over the decoder's input, its source held fixed. " if sources else "") + (
        f"{token.note}The token that counts most is {best}:{pieces[best]!r} "
        f"({float(scores[best]):+.3f})."
    )
    if method == "integrated gradients":
        logit = getattr(result, "logit", None)
        baseline = getattr(result, "baseline_logit", None)
        difference = (
            f"{logit - baseline:.4f} (logit {logit:.4f} − baseline's {baseline:.4f})"
            if logit is not None and baseline is not None
            else "the logit's difference from the baseline's"
        )
        summary += (
            f" **Completeness**: the attributions sum to {float(scores.sum()):.4f}; the logit's "
            f"change from the baseline (the first token, then padding) is {difference}"
            + (f"; the gap is {delta:.1e}." if delta is not None else ".")
        )
        # The gap against the bars it would move: a gap of 0.1 is nothing beside bars of 5.
        shown = max(float(scores.abs().max()), 1e-6)
        if delta is not None and abs(delta) > 0.05 * shown:
            summary += (
                f" The gap is large beside the bars ({abs(delta) / shown:.0%} of the tallest): "
                "between the baseline and the text the logit rises and falls many times, and "
                f"the integral's {IG_STEPS} points miss some of it, so read the bars as a rough "
                "guide. More points (the library's `steps`) shrink the gap."
            )
    return fig, summary


# -- 5. Why a head attends ---------------------------------------------------------------------


def _real_scores(
    checkpoint: Checkpoint, ids: Tensor, layer: int, head: int, sources: dict[str, Any]
) -> Tensor:
    """``(T, T)`` the head's scores as the model captures them in its own pass."""
    model = checkpoint.model
    with torch.inference_mode():
        if checkpoint.config.architecture == "encoder-only":
            record = model(ids, call=TRACE).attention("encoder_self", layer)
        elif sources:
            record = model(sources["source"], ids, call=TRACE).attention("decoder_self", layer)
        else:
            record = model.decode(ids, call=TRACE).layers[layer].self_attention
        return record.scores[0, head].float().cpu()


@friendly
@gpu
@takes_request(TextRequest.of, SCORES_VALUES, optional=True)
def research_scores(registry: ModelRegistry, request: TextRequest) -> tuple[Any, str, str]:
    """The ``/research_scores`` endpoint: one head's scores q·k split into parts (token and
    position for the 2017 models; the rotary frequency bands for rotary ones), each drawn, and
    their sum checked against the real scores; then the explanation that fits the model."""
    model, tokens, layer_i, head_i = request.model, request.tokens, request.layer, request.head
    checkpoint, ids, pieces, sources = model.checkpoint, tokens.ids, tokens.pieces, tokens.sources
    large = model.large

    def compute() -> tuple[Any, Tensor]:
        parts = methods.attention_score_parts(checkpoint.model, ids, layer_i, head_i, **sources)
        return parts, _real_scores(checkpoint, ids, layer_i, head_i, sources)

    key = ("scores", *tokens.key, layer_i, head_i)
    result, real = admitted(registry, model, tokens.length, 3, key, compute)
    parts = methods.as_parts(result)
    matrices = methods.in_bands(
        {
            n: torch.as_tensor(v).detach().float().cpu()
            for n, v in zip(parts.names, parts.values, strict=True)
        }
    )
    labels = _position_labels(pieces)
    fig = figures.score_parts_figure(
        matrices,
        labels,
        labels,
        f"Layer {layer_i + 1}, head {head_i + 1}: score parts",
        large,
    )
    total = torch.stack(list(matrices.values())).sum(dim=0)
    allowed = torch.isfinite(real)
    gap = float((total[allowed] - real[allowed]).abs().max()) if allowed.any() else 0.0
    summary = (
        f"The {len(matrices)} parts add up to the real scores (before the softmax, masked keys "
        f"left out): the largest difference is {gap:.1e}. Tokens and layers from 1, positions "
        "from 0."
    )
    if sources:
        summary = "The decoder's self-attention, its source held fixed. " + summary
    return fig, summary, scores_explanation(checkpoint.config)


def scores_explanation(config: ModelConfig) -> str:
    """What *Why a head attends* says for a model of ``config``: how its scores split (a
    rotary model's over frequency bands, the 2017 models' into token and position parts), and
    for an encoder-only model what its embedding adds."""
    words = SCORES_ROTARY if config.positional == "rotary" else SCORES_2017
    return words + SCORES_ENCODER if config.architecture == "encoder-only" else words


# -- 6. Two models side by side ----------------------------------------------------------------


def _top(probs: Tensor, checkpoint: Checkpoint, k: int = 8) -> list[tuple[str, float]]:
    values, ids = probs.topk(k)
    tokenizer = checkpoint.tokenizer
    return [
        (shown_piece(tokenizer, tokenizer.id_to_token(int(i)) or "?"), float(v))
        for v, i in zip(values, ids, strict=True)
    ]


@friendly
@gpu
@takes_request(SideBySideRequest.of)
def research_side_by_side(
    registry: ModelRegistry, request: SideBySideRequest
) -> tuple[Any, Any, Any, str]:
    """The ``/research_side_by_side`` endpoint: ``text`` through two models, lined up by the
    characters their tokens cover: one head's attention each, the loss of each group of
    characters, and each model's most likely next tokens."""
    first, second, text, heads = request.first, request.second, request.text, request.heads
    large = first.large

    def compute() -> pair.SideBySide:
        a, b = first.checkpoint, second.checkpoint
        return pair.side_by_side(a.model, a.tokenizer, b.model, b.tokenizer, text, *heads)

    tokens = len(text)  # an upper bound on either model's tokens, for the estimate
    larger = max((first, second), key=lambda m: parameters(m.checkpoint.model))
    key = ("side", first.name, second.name, text, heads)
    result = admitted(registry, larger, tokens, 2, key, compute)
    name_a, name_b = first.name, second.name
    names = (name_a, name_b if name_b != name_a else f"{name_b} (again)")
    heads_named = tuple(
        f"{n}: layer {layer + 1}, head {head + 1}"
        for n, (layer, head) in zip(names, heads, strict=True)
    )
    attention = figures.paired_heatmaps_figure(
        result.attention_a,
        result.attention_b,
        result.labels,
        (heads_named[0], heads_named[1]),
        "Attention, groups lined up",
        large,
    )
    losses = figures.paired_bars_figure(
        result.labels,
        result.loss_a,
        result.loss_b,
        names,
        "Loss per group of characters",
        "nats",
        large,
    )
    tops = figures.next_tokens_figure(
        _top(result.a.next_probs, first.checkpoint),
        _top(result.b.next_probs, second.checkpoint),
        names,
        "Next token after the text",
        large,
    )
    split = [result.labels[n] for n in result.split]
    both = torch.isfinite(result.loss_a) & torch.isfinite(result.loss_b)
    total_a, total_b = float(result.loss_a[both].sum()), float(result.loss_b[both].sum())
    summary = (
        f"{names[0]} reads {len(result.a.ids)} tokens, {names[1]} {len(result.b.ids)}; lined "
        f"up by the characters they cover they make {len(result.groups)} groups"
        + (f", of which {len(split)} are cut differently ({', '.join(split[:6])})" if split else "")
        + f". Over the groups both predict, the loss is {total_a:.2f} against {total_b:.2f} nats."
    )
    return attention, losses, tops, summary
