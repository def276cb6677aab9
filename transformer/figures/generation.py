"""Generation, one step at a time: the probabilities behind each choice, where the new token
looked in the source, and the decoder's causal self-attention growing row by row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from .common import (
    BASE_COLOR,
    HIGHLIGHT_COLOR,
    MASKED_GREY,
    MUTED_COLOR,
    WEIGHTS_COLORSCALE,
    base_layout,
    category_axis,
    check_labels,
    figure,
    heatmap_height,
    plain_text,
    plot_text,
    probability_bars,
    short_piece,
    steady_left_margin,
    to_numpy,
)


def vocabulary_label(token_id: int, vocab: Sequence[str] | None) -> str:
    """``"piece #id"``: the id keeps labels unique even when two ids decode to the same text
    (a long piece cut, see :func:`short_piece`)."""
    return f"#{token_id}" if vocab is None else f"{short_piece(vocab[token_id])} #{token_id}"


def top_k_figure(
    probabilities: Any,
    vocab: Sequence[str] | None = None,
    *,
    k: int = 10,
    chosen: int | None = None,
    title: str = "Next-token probabilities",
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """The ``k`` most likely next tokens as bars, most likely on top; the chosen one highlighted.

    Args:
        probabilities: ``(V,)`` next-token probabilities (softmax of the logits, after any
            temperature).
        vocab: ``V`` token pieces indexed by id, or None to show ids only.
        k: how many bars.
        chosen: the id that was picked; if sampling picked one outside the top ``k``, it is
            added as an extra bar at the bottom with its rank.
    """
    p = to_numpy(probabilities).reshape(-1)
    if chosen is not None and not 0 <= chosen < p.size:
        raise ValueError(f"chosen id {chosen} is outside the vocabulary of {p.size}")
    k = max(1, min(k, p.size))
    order = np.argsort(-p, kind="stable")  # ties: lower id first, deterministic
    ids = [int(i) for i in order[:k]]
    labels = [vocabulary_label(i, vocab) for i in ids]
    if chosen is not None and chosen not in ids:
        rank = int(np.flatnonzero(order == chosen)[0]) + 1
        ids.append(chosen)
        labels.append(f"{vocabulary_label(chosen, vocab)} (rank {rank})")
    colors = [HIGHLIGHT_COLOR if i == chosen else BASE_COLOR for i in ids]
    labels = [plot_text(label) for label in labels]
    trace = probability_bars(p[ids], labels, "p", marker={"color": colors})
    note = "" if chosen is None else f" · chosen: {vocabulary_label(chosen, vocab)}"
    layout = base_layout(
        f"{title}{note}",
        height or int(120 + len(ids) * (38 if large_font else 28)),
        large_font,
        xaxis={
            "title": {"text": "probability"},
            "range": [0, min(1.0, float(p[ids].max()) * 1.25 + 0.02)],
            "tickformat": ".0%",
            "gridcolor": "#eee",
        },
        yaxis={**category_axis("", labels, large_font), "autorange": "reversed"},
        bargap=0.25,
    )
    return figure([trace], layout)


def _weights_heatmap(
    z: np.ndarray,
    keys: list[str],
    queries: list[str],
    zmax: float,
    colorbar: dict[str, Any],
    hovertemplate: str,
    **more: Any,
) -> dict[str, Any]:
    """A heatmap of attention weights (queries down, keys across), white at 0 up to ``zmax``;
    its NaN cells, the masked ones, are gaps that show the grey plot background, no hover."""
    return dict(
        type="heatmap",
        z=z,
        x=keys,
        y=queries,
        colorscale=WEIGHTS_COLORSCALE,
        zmin=0.0,
        zmax=zmax,
        hoverongaps=False,
        colorbar=colorbar,
        **more,
        hovertemplate=hovertemplate,
    )


def cross_attention_step_figure(
    weights: Any,
    source_labels: Sequence[str] | None = None,
    *,
    masked: Any | None = None,
    query_label: str | None = None,
    layer: int | None = None,
    large_font: bool = False,
    height: int | None = None,
    narrowest: float | None = None,
) -> go.Figure:
    """Where the new step looked in the source: one row per head and their mean.

    Args:
        weights: ``(H, Ts)`` cross-attention weights of the new query position, e.g.
            ``record.weights[b, :, -1]``.
        source_labels: ``Ts`` unique source token labels.
        masked: ``(Ts,)`` bool, ``True`` for masked (padding) source keys, drawn grey.
        query_label: the token being predicted from, for the title.
        layer: the decoder layer, for the title.
        narrowest: the least width in px a page draws the figure at (its title wraps there).
    """
    w = to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"expected (heads, source keys) weights, got shape {w.shape}")
    n_heads, n_keys = w.shape
    keys = check_labels(source_labels, n_keys, "key")
    z = np.vstack([w, w.mean(axis=0, keepdims=True)]).astype(np.float32)
    if masked is not None:
        z[:, to_numpy(masked, bool).reshape(-1)] = np.nan
    rows = [f"head {h + 1}" for h in range(n_heads)] + ["mean"]
    trace = _weights_heatmap(
        z,
        keys,
        rows,
        max(float(np.nanmax(z)), 1e-6) if np.isfinite(z).any() else 1.0,
        {"title": {"text": "weight"}},
        "%{y}<br>source key %{x}<br>weight %{z:.3f}<extra></extra>",
        ygap=1,
    )
    where = "" if layer is None else f" · layer {layer}"
    query = "" if query_label is None else f" from {query_label}"
    layout = base_layout(
        f"Cross-attention of the new step{query}{where} · grey = masked",
        height or heatmap_height(n_heads + 1, large_font, minimum=220, maximum=500),
        large_font,
        narrowest=narrowest,
        plot_bgcolor=MASKED_GREY,
        xaxis=category_axis("source key", keys, large_font),
        yaxis={**category_axis("", rows, large_font), "autorange": "reversed"},
    )
    return figure([trace], layout)


def causal_growth_figure(
    rows: Sequence[Any],
    labels: Sequence[str] | None = None,
    *,
    head: int | None = None,
    layer: int | None = None,
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """The decoder's causal self-attention, one query row per generated step, stacked.

    Args:
        rows: step ``t``'s ``(t + 1,)`` self-attention weights of its new query over the keys
            so far (with a cache: ``record.weights[b, head, 0]``); any row may be shorter than
            the final width.
        labels: unique labels of the target positions: at least ``max(len(row))`` of them;
            more draws not-yet-generated positions as empty (grey) columns.

    Cells right of each row's end are the future: the causal mask removes them, drawn grey.
    """
    arrays = [to_numpy(r).reshape(-1) for r in rows]
    width = max((a.size for a in arrays), default=0)
    if labels is not None and len(labels) < width:
        raise ValueError(f"{len(labels)} labels for rows up to {width} keys long")
    width = width if labels is None else len(labels)
    z = np.full((len(arrays), width), np.nan, np.float32)
    for i, a in enumerate(arrays):
        z[i, : a.size] = a
    keys = check_labels(labels, width, "key")
    queries = [keys[a.size - 1] if a.size else f"step {i}" for i, a in enumerate(arrays)]
    if len(set(queries)) != len(queries):
        queries = [f"step {i} · {q}" for i, q in enumerate(queries)]
    # Cells stay about as wide as they are tall: the triangle grows from a corner, not a block
    # stretched over the whole panel; the colour bar stands beside it. The first steps still
    # get a plot area that fits their labels and a readable colour bar (in Large font one
    # step was 100 × 60 px, a label dropped, the bar's numbers on top of each other), and
    # every row keeps room for its label (the height grows instead of hiding every other one).
    cell = 30 if large_font else 22
    domain_end = min(1.0, max(0.3, width * cell / 900))
    area = max(240 if large_font else 180, (cell + 4) * len(arrays))
    label_room = (8 if large_font else 6) * max((len(plain_text(k)) for k in keys), default=1)
    colorbar = {"title": {"text": "weight"}, "x": min(1.02, domain_end + 0.02), "xanchor": "left"}
    trace = _weights_heatmap(
        z, keys, queries, 1.0, colorbar, "query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"
    )
    where = "".join(
        part
        for part, value in ((f" · layer {layer}", layer), (f" · head {head}", head))
        if value is not None
    )
    layout = base_layout(
        f"Decoder self-attention, step by step{where} · grey = future (masked)",
        height or int(min(2000, 140 + label_room + area)),
        large_font,
        plot_bgcolor=MASKED_GREY,
        xaxis={
            **category_axis("key", keys, large_font),
            "domain": [0, domain_end],
        },
        yaxis={**category_axis("query", queries, large_font), "autorange": "reversed"},
    )
    steady_left_margin(layout, queries, large_font, titled=True)  # redrawn at every step
    return figure([trace], layout)


def _sampled_bars(sampled: np.ndarray, names: list[str]) -> dict[str, Any]:
    """The bars of each candidate's probability under the distribution it was sampled from."""
    return probability_bars(
        sampled,
        names,
        "sampled p",
        name="sampled from (temperature, top-k, top-p applied)",
        marker={"color": MUTED_COLOR, "pattern": {"shape": "/"}},
    )


def next_token_figure(
    labels: Sequence[str],
    model_probs: Sequence[float],
    sampled_probs: Sequence[float] | None = None,
    *,
    chosen: int | None = None,
    title: str = "Next-token probabilities",
    large_font: bool = False,
    height: int | None = None,
    narrowest: float | None = None,
) -> go.Figure:
    """Candidate next tokens as horizontal bars: the model's own probability and, when a token
    was sampled, the probability under the distribution it was drawn from (after temperature,
    top-k and top-p) beside it.

    Args:
        labels: one unique label per bar, most probable first (e.g. ``"cat #12"``; a chosen
            token from further down carries its rank, ``"dog #40 (rank 57)"``).
        model_probs: each label's probability under the model (``softmax(logits)``).
        sampled_probs: each label's probability under the sampled distribution, or None
            (greedy and beam search choose from the model's own).
        chosen: the index (into ``labels``) of the chosen token, highlighted.
        narrowest: the least width in px a page draws the figure at (its title wraps there).
    """
    n = len(labels)
    if len(model_probs) != n or (sampled_probs is not None and len(sampled_probs) != n):
        raise ValueError("labels, model_probs and sampled_probs must have one value per bar")
    if chosen is not None and not 0 <= chosen < n:
        raise ValueError(f"chosen index {chosen} is outside the {n} bars")
    names = [plot_text(label) for label in labels]
    model = np.asarray(model_probs, np.float32)
    edge = ["#222" if i == chosen else "rgba(0,0,0,0)" for i in range(n)]
    traces = [
        probability_bars(
            model,
            names,
            "model p",
            name="model (softmax of the logits)",
            marker={
                "color": [HIGHLIGHT_COLOR if i == chosen else BASE_COLOR for i in range(n)],
                "line": {"color": edge, "width": 2},
            },
        )
    ]
    top = float(model.max()) if n else 1.0
    if sampled_probs is not None:
        sampled = np.asarray(sampled_probs, np.float32)
        top = max(top, float(sampled.max()) if n else 0.0)
        traces.append(_sampled_bars(sampled, names))
    rows = n * (2 if sampled_probs is not None else 1)
    layout = base_layout(
        title,
        height or int(150 + rows * (30 if large_font else 22)),
        large_font,
        narrowest=narrowest,
        xaxis={
            "title": {"text": "probability"},
            "range": [0, min(1.0, top * 1.3 + 0.03)],
            "tickformat": ".0%",
            "gridcolor": "#eee",
        },
        yaxis={**category_axis("", names, large_font), "autorange": "reversed"},
        barmode="group",
        bargap=0.2,
        showlegend=sampled_probs is not None,
        legend={"orientation": "h", "y": -0.18 if not large_font else -0.25, "x": 0},
    )
    if sampled_probs is not None:
        layout["margin"] = {**layout["margin"], "b": 100 if large_font else 80}
    steady_left_margin(layout, names, large_font, titled=False)  # redrawn at every step
    return figure(traces, layout)
