"""The tab's module-level handlers, one per method, taking the registry first: each reads its
controls, runs the library's method (a sweep through the costly-pass admission, so that one
student's sweep of a big model never holds the workers a small model's click needs) and
returns its figures and a summary in words."""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import gradio as gr
import torch
from torch import Tensor

from transformer.core.run import TRACE
from transformer.figures import research as figures
from transformer.figures.attention import placeholder_figure
from transformer.generation.loop import decoding_ends
from transformer.lab import side_by_side as pair
from transformer.lab.analysis import shown_piece
from transformer.lab.perplexity import read_text, reference_paragraph
from transformer.pretrained.checkpoint import Checkpoint

from ...serving import limits
from ...serving.costly import PassCost, check_cost, costly_here, device_scale, parameters
from ...serving.errors import InputError, friendly, gpu, user_input
from ...serving.state import ModelRegistry, SessionModels
from . import methods
from .text import (
    ENCODER_DECODER,
    ENCODER_ONLY,
    IG_STEPS,
    MAX_RESEARCH_TOKENS,
    POST_NORM,
    SCORES_2017,
    SCORES_ENCODER,
    SCORES_ROTARY,
    SHORT_SITES,
    SITES,
    SWEEP_COST_FACTOR,
)

T = TypeVar("T")

# The default gradio replaces with the event's own tracker (it looks for a gr.Progress default).
_PAGE_PROGRESS = gr.Progress()


def _checkpoint(registry: ModelRegistry, name: str, session: SessionModels | None) -> Checkpoint:
    """The model called ``name``, whatever its architecture (each method says what applies)."""
    return registry.checkpoint(name, session)


def encoder_only(checkpoint: Checkpoint, name: str, method: str, large: bool) -> tuple[Any, str]:
    """The figure and words a method shows for an encoder-only model: why it does not apply."""
    titles = {
        "patching": "Activation patching",
        "ablation": "Head ablation",
        "logit": "Direct logit attribution",
        "input": "Input attribution",
    }
    return placeholder_figure(
        titles[method], "Not for an encoder-only model", large_font=large
    ), ENCODER_ONLY[method].format(name=name)


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
    return torch.tensor([ids], device=checkpoint.model.device)


def decoder_ids(
    checkpoint: Checkpoint, text: Any, least: int = 1, what: str = "the decoder's input"
) -> tuple[Tensor, list[str]]:
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
    pieces = [shown_piece(tokenizer, tokenizer.id_to_token(i) or "?") for i in ids]
    return torch.tensor([ids], device=checkpoint.model.device), pieces


def read_inputs(
    checkpoint: Checkpoint, text: Any, source: Any, least: int = 2
) -> tuple[Tensor, list[str], dict[str, Any]]:
    """The ids the method follows and their pieces, and ``{"source": ids}`` for an
    encoder-decoder model (``{}`` otherwise): a decoder-only model reads ``text`` as its
    prompt; an encoder-decoder's decoder reads ``text`` after its start token, the encoder
    ``source``; an encoder-only model reads ``text`` with its own special tokens."""
    architecture = checkpoint.config.architecture
    if architecture == "encoder-decoder":
        ids, pieces = decoder_ids(checkpoint, text, max(1, least))
        return ids, pieces, {"source": source_ids(checkpoint, source)}
    if architecture == "encoder-only":
        if not isinstance(text, str) or not text.strip():
            raise InputError("enter the text")
        tokenizer = checkpoint.tokenizer
        with user_input():
            read = tokenizer.encoding(text.strip()).ids
        if len(read) > MAX_RESEARCH_TOKENS:
            raise InputError(f"the text is {len(read)} tokens long; shorten it")
        pieces = [shown_piece(tokenizer, tokenizer.id_to_token(i) or "?") for i in read]
        return torch.tensor([read], device=checkpoint.model.device), pieces, {}
    ids, pieces = prompt_ids(checkpoint, text)
    return ids, pieces, {}


def prompt_ids(
    checkpoint: Checkpoint, text: Any, what: str = "the text"
) -> tuple[Tensor, list[str]]:
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
    pieces = [shown_piece(tokenizer, tokenizer.id_to_token(i) or "?") for i in ids]
    return torch.tensor([ids], device=checkpoint.model.device), pieces


def one_token(checkpoint: Checkpoint, text: Any, what: str) -> tuple[int, str, str]:
    """The id of the token ``text`` names (its first token where it has several), the piece as
    shown, and a note for the summary when it was cut (else ``""``)."""
    if not isinstance(text, str) or not text:
        raise InputError(f"enter {what}, for example ' Paris' (with its leading space)")
    tokenizer = checkpoint.tokenizer
    with user_input():
        ids = tokenizer.encode_ids(text)
    if not ids:
        raise InputError(f"{what} {text!r} has no tokens for this model")
    pieces = [shown_piece(tokenizer, tokenizer.id_to_token(i) or "?") for i in ids]
    note = ""
    if len(ids) > 1:
        note = (
            f"{what} {text!r} is {len(ids)} tokens for this model "
            f"({', '.join(repr(p) for p in pieces)}): its first, {pieces[0]!r}, is scored. "
        )
    return ids[0], pieces[0], note


def admitted(
    registry: ModelRegistry,
    name: str,
    checkpoint: Checkpoint,
    tokens: int,
    passes: int,
    key: tuple[Any, ...],
    compute: Callable[[], T],
) -> T:
    """``compute()`` through the costly-pass admission (``ui/serving/costly.py``): one pass of
    ``tokens`` too big for the server is refused; a sweep of ``passes`` such passes that costs
    more than a cheap event may spend runs in the costly pool (its page told its place in
    line), joined by the same sweep asked for meanwhile on a shared model."""
    model = checkpoint.model
    check_cost(name, PassCost(parameters(model), tokens), registry.device)
    sweep = PassCost(parameters(model), tokens * max(1, passes))
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


def _layer_count(checkpoint: Checkpoint) -> int:
    config = checkpoint.config
    return config.n_decoder_layers or config.n_encoder_layers


def _position_labels(pieces: list[str]) -> list[str]:
    return [f"{i}:{p}" for i, p in enumerate(pieces)]


def _head_labels(n: int) -> list[str]:
    return [f"head {h + 1}" for h in range(n)]


# -- 1. Activation patching ------------------------------------------------------------------


@friendly
@gpu
def research_patching(
    registry: ModelRegistry,
    name: str,
    clean: str,
    corrupted: str,
    answer: str,
    wrong: str,
    site: str,
    large: bool,
    session: SessionModels | None,
    target: str = "",
    progress: gr.Progress = _PAGE_PROGRESS,
) -> tuple[Any, str]:
    """The ``/research_patching`` endpoint: patch ``site`` ("residual", "attention", "mlp" or
    "head") of the clean run into the corrupted one, everywhere in turn; the figure (layers ×
    positions, or layers × heads) and what it says. On an encoder-decoder model ``clean`` and
    ``corrupted`` are two sources and ``target`` the decoder's input in both runs."""
    checkpoint = _checkpoint(registry, name, session)
    architecture = checkpoint.config.architecture
    if architecture == "encoder-only":
        return encoder_only(checkpoint, name, "patching", large)
    if site not in SITES:
        raise InputError(f"site must be one of {', '.join(SITES)}")
    if site == "cross" and architecture != "encoder-decoder":
        raise InputError(
            f"{name} reads no source, so it has no cross-attention to patch: choose another site"
        )
    sources: dict[str, Any] = {}
    if architecture == "encoder-decoder":
        clean_source = source_ids(checkpoint, clean, "the clean source")
        corrupted_source = source_ids(checkpoint, corrupted, "the corrupted source")
        if clean_source.shape != corrupted_source.shape:
            raise InputError(
                f"the clean source has {clean_source.shape[1]} tokens and the corrupted one "
                f"{corrupted_source.shape[1]}: change one word for one cut into as many tokens, "
                "so that the two runs differ in that word only"
            )
        sources = {"source": clean_source, "corrupted_source": corrupted_source}
        clean_ids, clean_pieces = decoder_ids(checkpoint, target)
        corrupted_ids = clean_ids
    else:
        clean_ids, clean_pieces = prompt_ids(checkpoint, clean, "the clean prompt")
        corrupted_ids, _ = prompt_ids(checkpoint, corrupted, "the corrupted prompt")
    if clean_ids.shape[1] != corrupted_ids.shape[1]:
        raise InputError(
            f"the clean prompt has {clean_ids.shape[1]} tokens and the corrupted one "
            f"{corrupted_ids.shape[1]}: patching copies position by position, so both must have "
            "the same number of tokens. Change a word so that they match"
        )
    answer_id, answer_piece, note_a = one_token(checkpoint, answer, "the answer")
    wrong_id, wrong_piece, note_w = one_token(checkpoint, wrong, "the wrong answer")
    if answer_id == wrong_id:
        raise InputError("the answer and the wrong answer are the same token: choose two")
    n_layers, n_heads = _layer_count(checkpoint), checkpoint.config.n_heads
    columns = n_heads if site == "head" else clean_ids.shape[1]

    def report(done: Any, total: Any = None) -> None:
        if total:
            progress((int(done), int(total)), desc=f"Patching {SITES[site]}", unit="runs")
        else:
            progress(float(done), desc=f"Patching {SITES[site]}")

    def compute() -> Tensor:
        return methods.activation_patching(
            checkpoint.model,
            clean_ids,
            corrupted_ids,
            answer_id,
            wrong_id,
            cast(Any, site),
            progress=report,
            **sources,
        )

    result = admitted(
        registry,
        name,
        checkpoint,
        clean_ids.shape[1],
        n_layers * columns + 2,
        ("patching", clean, corrupted, target if sources else "", answer_id, wrong_id, site),
        compute,
    )
    values = result.detach().float().cpu()
    labels = _head_labels(n_heads) if site == "head" else _position_labels(clean_pieces)
    fig = figures.layer_map_figure(
        values,
        labels,
        f"Restored by patching: {SHORT_SITES[site]}",
        "restored",
        large,
        column_title="head" if site == "head" else "position",
        fixed_range=(-1.0, 1.0),
    )
    layer, column = divmod(int(values.abs().argmax()), values.shape[1])
    where = f"head {column + 1}" if site == "head" else f"position {labels[column]!r}"
    summary = (
        (ENCODER_DECODER.format(name=name) + " " if sources else "")
        + f"{note_a}{note_w}Metric: logit({answer_piece!r}) − logit({wrong_piece!r}), "
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
def research_ablation(
    registry: ModelRegistry,
    name: str,
    text: str,
    how: str,
    large: bool,
    session: SessionModels | None,
    source: str = "",
    progress: gr.Progress = _PAGE_PROGRESS,
) -> tuple[Any, str]:
    """The ``/research_ablation`` endpoint: each head zeroed (``how="zero"``) or replaced by
    its mean output over the meter's reference paragraph (``"mean"``) in turn; the change of
    the text's next-token loss, layers × heads, the head that matters most named, and the
    perplexity meter's reading."""
    checkpoint = _checkpoint(registry, name, session)
    if checkpoint.config.architecture == "encoder-only":
        return encoder_only(checkpoint, name, "ablation", large)
    if how not in ("zero", "mean"):
        raise InputError("ablation is 'zero' or 'mean'")
    ids, _, sources = read_inputs(checkpoint, text, source, least=2)
    n_layers, n_heads = _layer_count(checkpoint), checkpoint.config.n_heads
    if sources and how == "mean":
        raise InputError(
            "mean ablation averages each head over a reference paragraph, which an "
            "encoder-decoder model's decoder never reads on its own: choose zero ablation"
        )
    reference = reference_ids(checkpoint) if how == "mean" else None

    def report(done: int, total: int) -> None:
        progress((int(done), int(total)), desc=f"Ablating heads ({how})", unit="runs")

    def compute() -> tuple[Tensor, float]:
        options: dict[str, Any] = {"progress": report}
        if reference is not None:
            options["reference_ids"] = reference
        change = methods.head_ablation(checkpoint.model, ids, cast(Any, how), **options, **sources)
        return change, _loss(checkpoint, ids, sources)

    change, nll = admitted(
        registry,
        name,
        checkpoint,
        ids.shape[1],
        n_layers * n_heads + 2 + (0 if reference is None else reference.shape[1] // ids.shape[1]),
        ("ablation", text, source if sources else "", how),
        compute,
    )
    values = change.detach().float().cpu()
    fig = figures.layer_map_figure(
        values,
        _head_labels(n_heads),
        f"{how.capitalize()} ablation: Δ loss",
        "Δ loss (nats)",
        large,
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


def _next_token(
    checkpoint: Checkpoint, ids: Tensor, token: Any, sources: dict[str, Any] | None = None
) -> tuple[int, str, str]:
    """The token to explain: the one named, else the model's own prediction."""
    if isinstance(token, str) and token:
        return one_token(checkpoint, token, "the token")
    best = int(_last_logits(checkpoint, ids, sources or {}).argmax())
    piece = shown_piece(checkpoint.tokenizer, checkpoint.tokenizer.id_to_token(best) or "?")
    return best, piece, f"The model's own next token, {piece!r}, is explained. "


def _last_logits(checkpoint: Checkpoint, ids: Tensor, sources: dict[str, Any]) -> Tensor:
    """``(V,)`` the logits after the last of ``ids`` (the decoder's, its source given)."""
    with torch.inference_mode():
        if sources:
            return checkpoint.model(sources["source"], ids)[0, -1]
        return checkpoint.model.decode(ids, last_only=True).logits[0, -1]


def _logit(
    checkpoint: Checkpoint, ids: Tensor, token: int, sources: dict[str, Any] | None = None
) -> float:
    return float(_last_logits(checkpoint, ids, sources or {})[token])


@friendly
@gpu
def research_logit(
    registry: ModelRegistry,
    name: str,
    text: str,
    token: str,
    large: bool,
    session: SessionModels | None,
    source: str = "",
) -> tuple[Any, str]:
    """The ``/research_logit`` endpoint: the next token's logit (``token``, or the model's own
    prediction when empty) as the sum of what the embedding, each head and each MLP wrote into
    the residual stream, read through the final norm frozen at the real pass."""
    checkpoint = _checkpoint(registry, name, session)
    if checkpoint.config.architecture == "encoder-only":
        return encoder_only(checkpoint, name, "logit", large)
    ids, _, sources = read_inputs(checkpoint, text, source, least=1)
    config = checkpoint.config
    if config.norm != "pre" or config.post_sublayer_norm:
        # Not an error after the fact: the method does not apply, and the page says why.
        return placeholder_figure(
            "Direct logit attribution", "Not for a post-norm model", large_font=large
        ), POST_NORM.format(name=name)
    token_id, piece, note = _next_token(checkpoint, ids, token, sources)

    def compute() -> tuple[Any, float]:
        result = methods.direct_logit_attribution(checkpoint.model, ids, token_id, **sources)
        return result, _logit(checkpoint, ids, token_id, sources)

    result, computed = admitted(
        registry,
        name,
        checkpoint,
        ids.shape[1],
        2,
        ("logit", text, source if sources else "", token_id),
        compute,
    )
    parts = methods.as_parts(result)
    parts = methods.Parts([methods.shown_part(n) for n in parts.names], parts.values)
    values = [methods.as_scalar(v) for v in parts.values]
    real = methods.real_logit(result)
    real = computed if real is None else real
    fig = figures.parts_bar_figure(
        parts.names,
        values,
        f"Parts of the logit of {piece!r}",
        "logit",
        large,
        total=real,
    )
    ranked = sorted(range(len(values)), key=lambda i: -values[i])
    summary = (
        f"{note}Each part is read through the final norm with its scale frozen at the real "
        f"pass. The parts sum to {sum(values):.4f}; the real logit of {piece!r} is "
        f"{real:.4f}. Most for it: {', '.join(parts.names[i] for i in ranked[:3])}; most "
        f"against: {', '.join(parts.names[i] for i in ranked[-2:][::-1])}."
    )
    return fig, summary


# -- 4. Input attribution ----------------------------------------------------------------------


@friendly
@gpu
def research_input(
    registry: ModelRegistry,
    name: str,
    text: str,
    token: str,
    method: str,
    large: bool,
    session: SessionModels | None,
    source: str = "",
) -> tuple[Any, str]:
    """The ``/research_input`` endpoint: how much each input token's embedding counts for the
    next token's logit, by gradient × input or integrated gradients (with its completeness)."""
    checkpoint = _checkpoint(registry, name, session)
    if checkpoint.config.architecture == "encoder-only":
        return encoder_only(checkpoint, name, "input", large)
    if method not in ("gradient x input", "integrated gradients"):
        raise InputError("method is 'gradient x input' or 'integrated gradients'")
    ids, pieces, sources = read_inputs(checkpoint, text, source, least=1)
    token_id, piece, note = _next_token(checkpoint, ids, token, sources)
    passes = 2 if method == "gradient x input" else 2 * IG_STEPS

    def compute() -> Any:
        return methods.input_attribution(
            checkpoint.model, ids, token_id, cast(Any, method.replace(" ", "_")), **sources
        )

    result = admitted(
        registry,
        name,
        checkpoint,
        ids.shape[1],
        passes,
        ("input", text, source if sources else "", token_id, method),
        compute,
    )
    scores, delta = methods.as_scores(result)
    fig = figures.token_bars_figure(
        pieces,
        scores,
        f"{method.capitalize()} → {piece!r}",
        "attribution",
        large,
    )
    best = int(scores.abs().argmax())
    summary = (
        "Over the decoder's input, its source held fixed. " if sources else ""
    ) + f"{note}The token that counts most is {best}:{pieces[best]!r} ({float(scores[best]):+.3f})."
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
            f"change from the all-zero baseline is {difference}"
            + (f"; the gap is {delta:.1e}." if delta is not None else ".")
        )
        span = abs(logit - baseline) if logit is not None and baseline is not None else 1.0
        if delta is not None and abs(delta) > 0.05 * max(1.0, span):
            summary += (
                " The gap is large: the path starts at all-zero embeddings, where a model "
                "that normalises its stream first (RMSNorm, LayerNorm) divides by almost "
                "nothing, so the gradient jumps near the baseline and the integral's points "
                "miss that jump."
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
def research_scores(
    registry: ModelRegistry,
    name: str,
    text: str,
    layer: Any,
    head: Any,
    large: bool,
    session: SessionModels | None,
    source: str = "",
) -> tuple[Any, str, str]:
    """The ``/research_scores`` endpoint: one head's scores q·k split into parts (token and
    position for the 2017 models; the rotary frequency bands for rotary ones), each drawn, and
    their sum checked against the real scores; then the explanation that fits the model."""
    checkpoint = _checkpoint(registry, name, session)
    ids, pieces, sources = read_inputs(checkpoint, text, source, least=1)
    n_layers, n_heads = _layer_count(checkpoint), checkpoint.config.n_heads
    layer_i, head_i = _in_range(layer, n_layers, "layer"), _in_range(head, n_heads, "head")

    def compute() -> tuple[Any, Tensor]:
        parts = methods.attention_score_parts(checkpoint.model, ids, layer_i, head_i, **sources)
        return parts, _real_scores(checkpoint, ids, layer_i, head_i, sources)

    result, real = admitted(
        registry,
        name,
        checkpoint,
        ids.shape[1],
        3,
        ("scores", text, source if sources else "", layer_i, head_i),
        compute,
    )
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
    rotary = checkpoint.config.positional == "rotary"
    words = SCORES_ROTARY if rotary else SCORES_2017
    if checkpoint.config.architecture == "encoder-only":
        words += SCORES_ENCODER
    elif sources:
        summary = "The decoder's self-attention, its source held fixed. " + summary
    return fig, summary, words


def _in_range(value: Any, high: int, what: str) -> int:
    """A 1-based control's value as a 0-based index, refused with the range when outside."""
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{what} must be a number from 1 to {high}") from None
    if not 1 <= number <= high:
        raise InputError(f"this model has {what}s 1 to {high}, not {number}")
    return number - 1


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
def research_side_by_side(
    registry: ModelRegistry,
    name_a: str,
    name_b: str,
    text: str,
    layer_a: Any,
    head_a: Any,
    layer_b: Any,
    head_b: Any,
    large: bool,
    session: SessionModels | None,
) -> tuple[Any, Any, Any, str]:
    """The ``/research_side_by_side`` endpoint: ``text`` through two models, lined up by the
    characters their tokens cover: one head's attention each, the loss of each group of
    characters, and each model's most likely next tokens."""
    first = _checkpoint(registry, name_a, session)
    second = _checkpoint(registry, name_b, session)
    for name, checkpoint in ((name_a, first), (name_b, second)):
        architecture = checkpoint.config.architecture
        if architecture != "decoder-only":
            raise InputError(
                ENCODER_ONLY["side"].format(name=name, architecture=f"an {architecture} model")
            )
    if not isinstance(text, str) or not text.strip():
        raise InputError("enter a text")
    text = text.strip()
    heads = (
        (
            _in_range(layer_a, _layer_count(first), "layer"),
            _in_range(head_a, first.config.n_heads, "head"),
        ),
        (
            _in_range(layer_b, _layer_count(second), "layer"),
            _in_range(head_b, second.config.n_heads, "head"),
        ),
    )
    for checkpoint in (first, second):
        prompt_ids(checkpoint, text)  # refused before any pass when too long

    def compute() -> pair.SideBySide:
        return pair.side_by_side(
            first.model, first.tokenizer, second.model, second.tokenizer, text, *heads
        )

    tokens = len(text)  # an upper bound on either model's tokens, for the estimate
    result = admitted(
        registry,
        name_a if parameters(first.model) >= parameters(second.model) else name_b,
        first if parameters(first.model) >= parameters(second.model) else second,
        tokens,
        2,
        ("side", name_a, name_b, text, heads),
        compute,
    )
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
        _top(result.a.next_probs, first),
        _top(result.b.next_probs, second),
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
