"""Attention figures: one head, scores beside weights, every head as a grid, masks, what-ifs.

Every map puts queries on the rows (labelled "query", first query at the top) and keys on the
columns (labelled "key"). Cells the mask removed are grey in every map, not just zero, so a
student sees where the mask acted. Attention arrays are ``(..., Tq, Tk)``: query axis, then key.

Each builder reads its inputs once (tensors or arrays, and their labels, checked), computes
plain maps from them (pooled where long, NaN where masked), and hands them to the one drawing
every map of this module goes through. :func:`head_figures` and :func:`view_grid_figure` draw an
Attention page from the data :func:`~transformer.lab.head_view.attention_data` builds.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import plotly.graph_objects as go

from ..core.trace import AttentionRecord
from ..text.display import PAD_ROW_MARK
from .common import (
    BASE_COLOR,
    MASKED_GREY,
    SIGNED_COLORSCALE,
    WEIGHTS_COLORSCALE,
    base_layout,
    category_axis,
    check_labels,
    figure,
    font_size,
    heatmap_height,
    panel_domains,
    panel_title,
    plain_text,
    plot_text,
    robust_limit,
    to_numpy,
    weight_limit,
    weight_ticks,
)

if TYPE_CHECKING:
    from ..lab.head_view import AttentionData, AttentionView

Values = Literal["weights", "scores"]
# The most heatmap cells a grid ships (2 bytes each, ~1.6 MB of JSON): past it tiles are pooled.
GRID_MAX_CELLS = 600_000


# -- maps side by side: plain values in, one drawing -----------------------------------------


@dataclass(frozen=True)
class _Map:
    """One heat map of a figure, plain: its trace (``z`` ``(rows, cols)``, NaN where masked;
    ``x`` the keys' labels, ``y`` the queries'; hover and colour) and its panel's title."""

    trace: dict[str, Any]
    title: str = ""


def _plain(
    query_labels: Sequence[str] | None,
    key_labels: Sequence[str] | None,
    values: Sequence[Any],
    flags: Sequence[Any | None],
    shape: tuple[int, int] | None = None,
    ndim: int = 2,
) -> tuple[list[str], list[str], list[np.ndarray], list[np.ndarray | None]]:
    """What a figure reads, plain: the labels checked against ``shape`` ``(Tq, Tk)`` (the
    values' own last two axes by default), ``values`` as float32 arrays of one shape with
    ``ndim`` axes (``(Tq, Tk)``; a grid's layer ``(H, Tq, Tk)``), and ``flags`` as bool arrays
    (``None`` stays ``None``)."""
    arrays = [to_numpy(v) for v in values]
    bools = [None if f is None else to_numpy(f, bool) for f in flags]
    if arrays and (arrays[0].ndim != ndim or any(a.shape != arrays[0].shape for a in arrays)):
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise ValueError(f"expected {ndim}-axis matrices of one shape, got {shapes}")
    n_queries, n_keys = shape or arrays[0].shape[-2:]
    queries = check_labels(query_labels, n_queries, "query")
    return queries, check_labels(key_labels, n_keys, "key"), arrays, bools


def _masked_matrix(z: np.ndarray, masked: np.ndarray | None) -> np.ndarray:
    """A copy of ``z`` with NaN where ``masked`` is True (and where it is ±inf)."""
    z = z.copy()
    z[~np.isfinite(z)] = np.nan  # masked scores arrive as -inf
    if masked is not None:
        z[np.broadcast_to(masked, z.shape)] = np.nan
    return z


def _heatmap(
    z: np.ndarray,
    query_labels: list[str],
    key_labels: list[str],
    value_name: str,
    value_format: str,
    **style: Any,
) -> dict[str, Any]:
    """A heatmap trace in the project's style: NaN cells are gaps with no hover."""
    return dict(
        type="heatmap",
        z=z,
        x=key_labels,
        y=query_labels,
        hoverongaps=False,
        hovertemplate=(
            f"query %{{y}}<br>key %{{x}}<br>{value_name} %{{z:{value_format}}}<extra></extra>"
        ),
        **style,
    )


def _signed_range(z: np.ndarray) -> float:
    """Half-width of a symmetric colour range around 0 covering every finite value."""
    finite = np.abs(z[np.isfinite(z)])
    return float(finite.max()) if finite.size and finite.max() > 0 else 1.0


PAD_ROW_COLOR = "#e45756"


def query_axis(
    query_labels: list[str], large_font: bool, padded: np.ndarray | None = None
) -> dict[str, Any]:
    """The query (y) axis of a map, first query at the top; ``padded`` ``(Tq,)`` bool marks
    [PAD] query rows (their tick label red with :data:`PAD_ROW_MARK`)."""
    axis = {**category_axis("query", query_labels, large_font), "autorange": "reversed"}
    if padded is not None and padded.any():
        axis["tickmode"] = "array"
        axis["tickvals"] = list(query_labels)
        axis["ticktext"] = [
            f'<span style="color:{PAD_ROW_COLOR}">{label} {PAD_ROW_MARK}</span>' if pad else label
            for label, pad in zip(query_labels, padded, strict=True)
        ]
    return axis


def _padded_flags(flags: np.ndarray | None, n_queries: int) -> np.ndarray:
    """``(Tq,)`` bool, True for a [PAD] query row (none where ``flags`` is ``None``); checked
    in length."""
    padded = np.zeros(n_queries, bool) if flags is None else flags.reshape(-1)
    if padded.size != n_queries:
        raise ValueError(f"{padded.size} padding flags for {n_queries} query rows")
    return padded


def _map_axes(
    maps: Sequence[_Map],
    domains: Sequence[list[float] | None],
    large_font: bool,
    padded: np.ndarray | None,
) -> dict[str, Any]:
    """Each map's key (x) and query (y) axes, in ``domains`` side by side: the first map's
    queries labelled (its [PAD] rows marked where ``padded`` has a flag for each), a later
    map's rows on the first's axis where they are the same rows (a pooled panel has its own)."""
    axes: dict[str, Any] = {}
    for i, (m, domain) in enumerate(zip(maps, domains, strict=True)):
        n = "" if i == 0 else str(i + 1)
        queries = m.trace["y"]
        flags = padded if padded is not None and padded.size == len(queries) else None
        y_axis = query_axis(queries, large_font, flags)
        x_axis = category_axis("key", m.trace["x"], large_font)
        if domain is not None:
            x_axis["domain"] = domain
        if i:
            shared = queries == maps[0].trace["y"]
            y_axis = {**(axes["yaxis"] if shared else y_axis), "title": None, "anchor": f"x{n}"}
            y_axis.update({"showticklabels": False, **({"matches": "y"} if shared else {})})
            x_axis["anchor"] = f"y{n}"
        axes[f"xaxis{n}"], axes[f"yaxis{n}"] = x_axis, y_axis
    return axes


def _finish(
    traces: Sequence[dict[str, Any]],
    title: str,
    height: int,
    large_font: bool,
    titles: Sequence[tuple[str, list[float]]] = (),
    **layout: Any,
) -> go.Figure:
    """The figure of ``traces`` in the project's layout (``layout`` adds axes, colours, shapes),
    with each panel's title above its domain (30 px more room above the plots for them)."""
    spec = base_layout(title, height, large_font, **layout)
    if titles:
        spec["annotations"] = [panel_title(name, where, large_font) for name, where in titles]
        spec["margin"]["t"] += 30
    return figure(traces, spec)


def _draw(
    maps: Sequence[_Map],
    title: str,
    height: int,
    large_font: bool,
    *,
    padded: np.ndarray | None = None,
    gap: float = 0.06,
    **layout: Any,
) -> go.Figure:
    """The one drawing of this module's maps: ``maps`` side by side, ``gap`` apart, each under
    its title (a map with no title fills the figure), on the query axes :func:`_map_axes`
    gives them, with the colour axes and background in ``layout``."""
    domains: list[list[float] | None] = [None] * len(maps)
    if any(m.title for m in maps):
        domains = list(panel_domains(len(maps), gap=gap))
    traces = [
        {**m.trace, **({"xaxis": f"x{i + 1}", "yaxis": f"y{i + 1}"} if i else {})}
        for i, m in enumerate(maps)
    ]
    titles = [(m.title, d) for m, d in zip(maps, domains, strict=True) if d is not None]
    axes = _map_axes(maps, domains, large_font, padded)
    return _finish(traces, title, height, large_font, titles, **axes, **layout)


def _weight_bar(limit: float, note: str, unit: float = 1.0, **extra: Any) -> dict[str, Any]:
    """A weight colour bar: read in weights (0..1) whatever the data's unit, with its note."""
    return {"title": {"text": f"weight{note}"}, **weight_ticks(limit, unit), **extra}


def _weights_axis(shown: np.ndarray, unit: float = 1.0, **bar: Any) -> dict[str, Any]:
    """A colour axis for weights (0..1, or 0..``unit``), stopping at the 99th percentile
    where nearly every weight in ``shown`` is small."""
    limit, note = weight_limit(shown, unit=unit)
    return {
        "colorscale": WEIGHTS_COLORSCALE,
        "cmin": 0.0,
        "cmax": limit,
        "colorbar": _weight_bar(limit, note, unit=unit, **bar),
    }


def _scores_axis(scores: np.ndarray, bar_x: float) -> dict[str, Any]:
    """A colour axis for scores, diverging around 0 and stopping at the 99th percentile where
    a few outliers would flatten the rest; its bar at ``bar_x``."""
    half, note = robust_limit(scores)
    return {
        "colorscale": SIGNED_COLORSCALE,
        "cmid": 0.0,
        "cmin": -half,
        "cmax": half,
        "colorbar": {"x": bar_x, "title": {"text": f"score{note}"}, "len": 0.9},
    }


def attention_heatmap(
    matrix: Any,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    masked: Any | None = None,
    values: Values = "weights",
    title: str | None = None,
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """One attention matrix, exact, with token labels; masked cells grey.

    Args:
        matrix: ``(Tq, Tk)`` attention weights (or, with ``values="scores"``, the scores before
            softmax; ``-inf`` cells count as masked).
        query_labels: ``Tq`` unique row labels (see :func:`token_labels`).
        key_labels: ``Tk`` unique column labels.
        masked: ``(Tq, Tk)`` bool (or broadcastable), ``True`` where the mask removed the cell.
        values: ``"weights"`` (colour range 0..1) or ``"scores"`` (diverging around 0).
    """
    if values not in ("weights", "scores"):
        raise ValueError(f"values must be 'weights' or 'scores', got {values!r}")
    queries, keys, (z,), (m,) = _plain(query_labels, key_labels, [matrix], [masked])
    z = _masked_matrix(z, m)
    if values == "weights":
        limit, note = weight_limit(z)
        style = {"colorscale": WEIGHTS_COLORSCALE, "zmin": 0.0, "zmax": limit}
        style["colorbar"] = _weight_bar(limit, note)
        default_title = "Attention weights (after softmax)"
    else:
        half, note = robust_limit(z)
        style = {"colorscale": SIGNED_COLORSCALE, "zmin": -half, "zmax": half}
        style["colorbar"] = {"title": {"text": f"score{note}"}}
        default_title = "Attention scores QKᵀ/√d_k (before softmax)"
    trace = _heatmap(z, queries, keys, values[:-1], ".3f", **style)
    return _draw(
        [_Map(trace)],
        title or f"{default_title} · grey = masked",
        height or heatmap_height(len(queries), large_font),
        large_font,
        plot_bgcolor=MASKED_GREY,
    )


def head_figure(
    record: AttentionRecord,
    batch: int,
    head: int,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    values: Values = "weights",
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """One head of one attention record, large and exact (no downsampling at any length).

    Args:
        record: an :class:`AttentionRecord` with ``(B, H, Tq, Tk)`` scores and weights.
        batch: which sequence of the batch.
        head: which head.
        query_labels, key_labels: ``Tq`` and ``Tk`` unique labels.
        values: ``"weights"`` (after softmax) or ``"scores"`` (before softmax).
    """
    matrix = getattr(record, values) if values in ("weights", "scores") else None
    if matrix is None:
        raise ValueError(f"values must be 'weights' or 'scores', got {values!r}")
    title = f"{_describe(record)} · {head_name(record, head)} · {values} · grey = masked"
    return attention_heatmap(
        matrix[batch, head],
        query_labels,
        key_labels,
        masked=~record.mask[batch, 0],
        values=values,
        title=title,
        large_font=large_font,
        height=height,
    )


def _shares_kv(kv_head_of: Sequence[int] | None) -> bool:
    """Whether some query heads share a key/value head (grouped- or multi-query attention)."""
    if not kv_head_of:
        return False
    return len(set(kv_head_of)) < len(kv_head_of)


def head_name(record: AttentionRecord, head: int) -> str:
    """``"head 4"``, or ``"head 4 (kv 2)"`` where query heads share key/value heads (1-based)."""
    kv = getattr(record, "kv_head_of", ())
    if _shares_kv(kv):
        return f"head {head + 1} (kv {kv[head] + 1})"
    return f"head {head + 1}"


def _describe(record: AttentionRecord) -> str:
    kind = {
        "encoder_self": "Encoder self-attention",
        "decoder_self": "Decoder masked self-attention",
        "cross": "Cross-attention (decoder → encoder)",
    }[record.kind]
    return f"{kind} · layer {record.layer + 1}"


def scores_and_weights_figure(
    record: AttentionRecord,
    batch: int,
    head: int,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    exact_scores_up_to: int = 256,
    max_tile: int = 128,
    padded_queries: Any | None = None,
    large_font: bool = False,
    height: int | None = None,
    narrowest: float | None = None,
) -> go.Figure:
    """The scores before softmax beside the weights after it, for one head.

    Args:
        record: an :class:`AttentionRecord` with ``(B, H, Tq, Tk)`` scores and weights.
        batch, head: which sequence and which head.
        query_labels, key_labels: ``Tq`` and ``Tk`` unique labels.
        exact_scores_up_to: past this many queries or keys the *scores* panel is block-averaged
            to at most ``max_tile`` cells a side (and says so), which keeps a 512-token view
            under 2 MB; the weights panel is always exact.
        padded_queries: ``(Tq,)`` bool, ``True`` for [PAD] query rows (marked on the axis).
        narrowest: the least width in px the page gives the figure: a longer title wraps there.

    Scores use a diverging scale around 0, weights a 0..1 scale; masked cells are grey in both
    (their score was ``-inf``, their weight exactly 0). Where a few outliers would flatten a
    long input's map, a scale stops at the 99th percentile and its colour bar says so.
    """
    queries, keys, (scores, weights), (masked, padded_flags) = _plain(
        query_labels,
        key_labels,
        [record.scores[batch, head], record.weights[batch, head]],
        [~record.mask[batch, 0], padded_queries],
    )
    scores, weights = _masked_matrix(scores, masked), _masked_matrix(weights, masked)
    n_queries, n_keys = weights.shape
    padded = _padded_flags(padded_flags, n_queries)
    score_queries, score_keys, note = queries, keys, ""
    if max(n_queries, n_keys) > exact_scores_up_to:
        scores, fq, fk = _pool_mean(scores, max_tile)
        score_queries, score_keys = _block_labels(queries, fq), _block_labels(keys, fk)
        note = f" · scores downsampled {n_queries}×{n_keys}→{scores.shape[0]}×{scores.shape[1]}, weights exact"
    gap = 0.14
    maps = [
        _Map(
            _heatmap(scores, score_queries, score_keys, "score", ".3f", coloraxis="coloraxis"),
            "scores QKᵀ/√d_k (before softmax)",
        ),
        _Map(
            _heatmap(weights, queries, keys, "weight", ".3f", coloraxis="coloraxis2"),
            "weights (after softmax)",
        ),
    ]
    return _draw(
        maps,
        f"{_describe(record)} · {head_name(record, head)} · grey = masked{note}",
        height or heatmap_height(n_queries, large_font) + 40,
        large_font,
        narrowest=narrowest,
        padded=padded,
        gap=gap,
        plot_bgcolor=MASKED_GREY,
        coloraxis=_scores_axis(scores, panel_domains(2, gap=gap)[0][1] + 0.01),
        coloraxis2=_weights_axis(weights, x=1.01, len=0.9),
    )


def weights_beside_figure(
    before: Any,
    after: Any,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    masked_before: Any | None = None,
    masked_after: Any | None = None,
    panel_titles: tuple[str, str] = ("original", "changed"),
    title: str = "Attention weights: original beside changed",
    exact_up_to: int = 256,
    max_tile: int = 128,
    padded_queries: Any | None = None,
    large_font: bool = False,
    height: int | None = None,
    narrowest: float | None = None,
) -> go.Figure:
    """Two passes' weights of one head side by side, on one 0..1 scale (a what-if beside the
    original).

    Args:
        before, after: ``(Tq, Tk)`` attention weights without and with the change.
        masked_before, masked_after: ``(Tq, Tk)`` bool, ``True`` where each pass's mask removed
            the cell (grey).
        panel_titles: the two panels' titles.
        exact_up_to: past this many queries or keys both maps are pooled to attention mass per
            block (at most ``max_tile`` a side), and the title says so.
        padded_queries: ``(Tq,)`` bool, ``True`` for [PAD] query rows (marked on the axis).
        narrowest: the least width in px the page gives the figure: a longer title wraps there.
    """
    queries, keys, (b, a), (mb, ma, padded_flags) = _plain(
        query_labels, key_labels, [before, after], [masked_before, masked_after, padded_queries]
    )
    n_queries, n_keys = a.shape
    padded: np.ndarray | None = _padded_flags(padded_flags, n_queries)
    note = ""
    if max(n_queries, n_keys) > exact_up_to:
        b, mb, _, _ = downsample_attention(b, mb, max_tile)
        a, ma, fq, fk = downsample_attention(a, ma, max_tile)
        queries, keys = _block_labels(queries, fq), _block_labels(keys, fk)
        note = f" · downsampled {n_queries}×{n_keys}→{a.shape[0]}×{a.shape[1]}"
        padded = None
    shown = [_masked_matrix(b, mb), _masked_matrix(a, ma)]
    maps = [
        _Map(_heatmap(z, queries, keys, "weight", ".3f", coloraxis="coloraxis"), name)
        for z, name in zip(shown, panel_titles, strict=True)
    ]
    return _draw(
        maps,
        f"{title}{note}",
        height or heatmap_height(len(queries), large_font) + 40,
        large_font,
        narrowest=narrowest,
        padded=padded,
        plot_bgcolor=MASKED_GREY,
        coloraxis=_weights_axis(np.stack(shown), x=1.01, len=0.9),
    )


def attention_difference_figure(
    before: Any,
    after: Any,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    masked: Any | None = None,
    title: str = "Change in attention weights (after − before)",
    exact_up_to: int = 128,
    max_tile: int = 128,
    large_font: bool = False,
    height: int | None = None,
    narrowest: float | None = None,
) -> go.Figure:
    """What a what-if changed: ``after − before`` on a diverging scale centred on 0.

    Past ``exact_up_to`` queries or keys both maps are pooled to attention mass per block (at most
    ``max_tile`` a side) before subtracting, and the title says so.

    Args:
        before, after: ``(Tq, Tk)`` attention weights of the same head without and with the
            intervention.
        query_labels, key_labels: ``Tq`` and ``Tk`` unique labels.
        masked: ``(Tq, Tk)`` bool, cells masked in *both* runs (grey); a cell a what-if unmasked
            (e.g. the causal mask switched off) is not masked here, so its change shows.
        narrowest: the least width in px the page gives the figure: a longer title wraps there.

    Red: the query attends more to that key after the change; blue: less.
    """
    queries, keys, (b, a), (m,) = _plain(query_labels, key_labels, [before, after], [masked])
    n_queries, n_keys = a.shape
    if max(n_queries, n_keys) > exact_up_to:
        b, _, _, _ = downsample_attention(b, None, max_tile)
        a, m, fq, fk = downsample_attention(a, m, max_tile)
        queries, keys = _block_labels(queries, fq), _block_labels(keys, fk)
        title = f"{title} · downsampled {n_queries}×{n_keys}→{a.shape[0]}×{a.shape[1]}"
    z = _masked_matrix(a - b, m)
    half = _signed_range(z)
    style = {"colorscale": SIGNED_COLORSCALE, "zmin": -half, "zmax": half}
    trace = _heatmap(
        z, queries, keys, "change", "+.3f", colorbar={"title": {"text": "Δ weight"}}, **style
    )
    return _draw(
        [_Map(trace)],
        f"{title} · red = more, blue = less · grey = masked",
        height or heatmap_height(len(queries), large_font),
        large_font,
        narrowest=narrowest,
        plot_bgcolor=MASKED_GREY,
    )


# -- every head of every layer ---------------------------------------------------------------


def downsample_attention(
    weights: Any, masked: Any | None, max_size: int
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Average-pool ``(..., Tq, Tk)`` attention to at most ``max_size`` × ``max_size`` cells.

    A pooled cell is the attention *mass* a block of queries gives a block of keys: the sum
    over the block's keys, averaged over its queries, so each pooled row still sums to 1. A
    pooled cell counts as masked only if every cell in its block was masked.

    Returns:
        ``(pooled, pooled_masked, query_factor, key_factor)``; pooled is float32
        ``(..., ceil(Tq/fq), ceil(Tk/fk))`` and pooled_masked bool of the same last two axes.
    """
    w = to_numpy(weights)
    n_queries, n_keys = w.shape[-2:]
    m = np.zeros((n_queries, n_keys), bool) if masked is None else to_numpy(masked, bool)
    fq, fk = math.ceil(n_queries / max_size), math.ceil(n_keys / max_size)
    q_starts, k_starts = np.arange(0, n_queries, fq), np.arange(0, n_keys, fk)
    # reduceat sums each block (the last one may be short) without padding copies.
    mass = np.add.reduceat(np.add.reduceat(w, k_starts, axis=-1), q_starts, axis=-2)
    real_rows = np.diff(np.append(q_starts, n_queries)).astype(np.float32)
    mass /= real_rows[:, None]  # mean over each block's query rows
    pooled_masked = np.logical_and.reduceat(
        np.logical_and.reduceat(m, k_starts, axis=-1), q_starts, axis=-2
    )
    return mass.astype(np.float32), pooled_masked, fq, fk


def _pool_mean(matrix: np.ndarray, max_size: int) -> tuple[np.ndarray, int, int]:
    """Block means of a ``(Tq, Tk)`` matrix over its finite cells (NaN marks masked ones), to at
    most ``max_size`` cells a side; a block with no finite cell stays NaN (masked)."""
    n_queries, n_keys = matrix.shape
    fq, fk = math.ceil(n_queries / max_size), math.ceil(n_keys / max_size)
    q_starts, k_starts = np.arange(0, n_queries, fq), np.arange(0, n_keys, fk)
    finite = np.isfinite(matrix)

    def block_sum(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(np.add.reduceat(values, k_starts, axis=1), q_starts, axis=0)

    total = block_sum(np.where(finite, matrix, 0.0).astype(np.float64))
    count = block_sum(finite.astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled = np.where(count > 0, total / count, np.nan)
    return pooled.astype(np.float32), fq, fk


def _block_labels(labels: list[str], factor: int) -> list[str]:
    if factor == 1:
        return labels
    blocks = [labels[i : i + factor] for i in range(0, len(labels), factor)]
    return [b[0] if len(b) == 1 else f"{b[0]} … {b[-1]}" for b in blocks]


def _rectangles(masked: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Cover the True cells of a 2-D bool array with rectangles ``(row0, row1, col0, col1)``
    (exclusive ends): runs along each row, merged down while the next row has the same run."""
    open_runs: dict[tuple[int, int], int] = {}
    rects = []
    for r in range(masked.shape[0] + 1):
        runs = set()
        if r < masked.shape[0]:
            row = np.concatenate([[False], masked[r], [False]])
            edges = np.flatnonzero(row[1:] != row[:-1])
            runs = {(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)}
        for run in list(open_runs):
            if run not in runs:
                rects.append((open_runs.pop(run), r, *run))
        for run in runs:
            open_runs.setdefault(run, r)
    return rects


@dataclass
class _Tiles:
    """A grid's ``(H, rows, cols)`` tiles, one per layer, pooled where the input is long: with
    their ``(L, rows, cols)`` masks, the pooling factors of queries and keys, and what the
    title says of the pooling (``""`` when exact)."""

    layers: list[np.ndarray]
    masked: np.ndarray
    fq: int
    fk: int
    notice: str


def _grid_tiles(weights: Any, first: np.ndarray, masked: np.ndarray, side: int) -> _Tiles:
    """Each layer's ``(H, Tq, Tk)`` weights (``first`` already read), pooled to at most
    ``side`` × ``side`` when longer, with their ``(L, Tq, Tk)`` masks."""
    n_layers, (_, n_queries, n_keys) = len(weights), first.shape
    pooled = max(n_queries, n_keys) > side
    layers: list[np.ndarray] = []
    pooled_masks: list[np.ndarray] = []
    fq = fk = 1
    # One layer at a time, each pooled as soon as it is read: a trace that did not keep its
    # weights computes each layer's when read, so the whole stack is never held at once.
    shape, tile = first.shape, first
    for i in range(n_layers):
        if i:
            tile = to_numpy(weights[i])
        if tile.shape != shape:
            raise ValueError("expected (layers, heads, queries, keys) weights")
        if pooled:
            tile, tile_masked, fq, fk = downsample_attention(tile, masked[i], side)
            pooled_masks.append(tile_masked)
        layers.append(tile)
    if not pooled:
        return _Tiles(layers, masked, fq, fk, "")
    rows, cols = layers[0].shape[-2:]
    if (n_queries, rows) == (n_keys, cols):
        notice = f" · downsampled {n_queries}→{rows}"
    else:
        notice = f" · downsampled queries {n_queries}→{rows}, keys {n_keys}→{cols}"
    return _Tiles(layers, np.stack(pooled_masks), fq, fk, notice)


def _grid_values(
    layers: list[np.ndarray], masked: np.ndarray, gutter: int
) -> tuple[np.ndarray, np.ndarray]:
    """The tiles laid out in one ``uint16`` array of thousandths, layers down and heads across
    with ``gutter`` cells between them, and the thousandths the mask kept (what the colour
    scale is set by)."""
    n_layers, (n_heads, rows, cols) = len(layers), layers[0].shape
    tile_h, tile_w = rows + gutter, cols + gutter
    z = np.zeros((n_layers * tile_h - gutter, n_heads * tile_w - gutter), np.uint16)
    kept = np.concatenate([w[:, ~masked[i]].ravel() for i, w in enumerate(layers)])  # unmasked
    for layer, layer_weights in enumerate(layers):
        permille = np.rint(np.clip(layer_weights, 0.0, 1.0) * 1000)
        for head in range(n_heads):
            r0, c0 = layer * tile_h, head * tile_w
            z[r0 : r0 + rows, c0 : c0 + cols] = permille[head]
    return z, np.clip(kept, 0.0, 1.0) * 1000


def _grid_categories(
    queries: list[str],
    keys: list[str],
    n_layers: int,
    n_heads: int,
    tile: tuple[int, int],
    gutter: int,
    shape: tuple[int, ...],
) -> tuple[list[str], list[str]]:
    """The grid's ``x`` and ``y`` category labels, one per column and row of its ``shape``
    (gutters included): unique, so that a hover names layer, head, query and key with no
    per-cell text. ``tile`` is a tile's (rows, columns)."""
    rows, cols = tile
    y = [
        f"layer {layer + 1} · query {q}" if i < rows else f"layer {layer + 1} gap {i}"
        for layer in range(n_layers)
        for i, q in enumerate([*queries, *[""] * gutter])
    ][: shape[0]]
    x = [
        f"head {head + 1} · key {k}" if i < cols else f"head {head + 1} gap {i}"
        for head in range(n_heads)
        for i, k in enumerate([*keys, *[""] * gutter])
    ][: shape[1]]
    return x, y


def _group_lines(
    kv_head_of: Sequence[int] | None, tile_w: int, gutter: int, height: int
) -> list[dict[str, Any]]:
    """A dark line before each head that starts a new key/value group, where heads share one."""
    if not _shares_kv(kv_head_of) or not kv_head_of:
        return []
    return [
        {
            "type": "line",
            "x0": h * tile_w - (gutter + 1) / 2,
            "x1": h * tile_w - (gutter + 1) / 2,
            "y0": -0.5,
            "y1": height - 0.5,
            "line": {"color": "#222222", "width": 2},
            "layer": "above",
            "name": f"key/value group {kv_head_of[h] + 1} starts",
        }
        for h in range(1, len(kv_head_of))
        if kv_head_of[h] != kv_head_of[h - 1]
    ]


def _grid_notes(
    kv_head_of: Sequence[int] | None,
    n_heads: int,
    n_layers: int,
    rows: int,
    cols: int,
    gutter: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The heads' names above their columns of tiles (with their key/value head where heads
    share one) and the layers' names left of their rows."""
    grouped = _shares_kv(kv_head_of)
    head_text = [
        f"head {h + 1} (kv {kv_head_of[h] + 1})" if grouped and kv_head_of else f"head {h + 1}"
        for h in range(n_heads)
    ]
    head_notes = [
        {
            "x": head * (cols + gutter) + (cols - 1) / 2,
            "y": -0.5,
            "text": head_text[head],
            "yanchor": "bottom",
        }
        for head in range(n_heads)
    ]
    layer_notes = [
        {
            "x": -0.5,
            "y": layer * (rows + gutter) + (rows - 1) / 2,
            "text": f"layer {layer + 1}",
            "xanchor": "right",
        }
        for layer in range(n_layers)
    ]
    return head_notes, layer_notes


def _notes_above(layer_notes: list[dict[str, Any]], rows: int) -> None:
    """Move the layers' names from the left of their tiles to above them."""
    for note in layer_notes:
        note.update(x=0, xanchor="left", y=note["y"] - (rows - 1) / 2 - 0.5, yanchor="bottom")


def attention_grid(
    weights: Any,
    masked: Any | None = None,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    title: str = "Attention weights, every layer and head",
    exact_up_to: int = 128,
    max_tile: int = 128,
    max_cells: int = GRID_MAX_CELLS,
    padded_queries: Any | None = None,
    kv_head_of: Sequence[int] | None = None,
    large_font: bool = False,
    height: int | None = None,
    narrowest: float | None = None,
) -> go.Figure:
    """Every head of every layer as one tiled heatmap with one shared colour scale.

    Args:
        weights: ``(L, H, Tq, Tk)`` attention weights of one sequence (an array, or a sequence
            of ``L`` arrays or tensors ``(H, Tq, Tk)``).
        masked: ``(L, Tq, Tk)`` or ``(Tq, Tk)`` bool (or a list of ``L`` ``(Tq, Tk)``),
            ``True`` where the mask removed a cell.
        query_labels, key_labels: ``Tq`` and ``Tk`` unique labels, shown on hover.
        exact_up_to: longer sequences are average-pooled (:func:`downsample_attention`) to at
            most ``max_tile`` × ``max_tile`` per tile, and the title says so.
        max_cells: the most cells all tiles together may hold (the payload: 2 bytes a cell);
            past it every tile is pooled to a side that fits (a 6 × 12 grid keeps 64 tokens
            exact, a 12 × 12 grid 64 tokens too).
        padded_queries: ``(Tq,)`` bool, ``True`` for [PAD] query rows: a red tick beside each
            such row of every layer (they attend normally; the loss ignores their output).
        kv_head_of: ``(H,)`` the key/value head each query head reads
            (``AttentionRecord.kv_head_of``): where heads share one (grouped-query attention)
            each column is labelled ``head h (kv g)`` and a dark line separates the groups.
        narrowest: the least width in px the page gives the figure: a longer title wraps there.

    The colour bar reads in weights, 0..1, as the single-head view's does (a long input whose
    weights are nearly all small stops at their 99th percentile, and says so).

    The tiles are one heatmap separated by gutters (dozens of subplots are ~10× slower to
    build). Values ship as ``uint16`` thousandths (‰) of attention, exact to 0.05%: half the
    bytes of float32, which keeps a 6 × 8 grid at 64 tokens near 0.5 MB instead of over 1 MB.
    Masked cells are covered by grey shapes (integers have no NaN); hovering one shows its
    weight, 0.
    """
    grid = _grid(
        weights, masked, query_labels, key_labels, padded_queries, exact_up_to, max_tile, max_cells
    )
    return _grid_figure(grid, title, kv_head_of, large_font, (height, narrowest))


@dataclass
class _Grid:
    """What a grid draws: each layer's ``(H, rows, cols)`` tile (pooled where the input is
    long) with its ``(L, rows, cols)`` masks, the rows' and columns' labels, the ``(rows,)``
    [PAD] query flags, the title's note of any pooling, and the gutter between tiles."""

    layers: list[np.ndarray]
    masked: np.ndarray
    queries: list[str]
    keys: list[str]
    padded: np.ndarray
    notice: str
    gutter: int


def _grid(
    weights: Any,
    masked: Any | None,
    query_labels: Sequence[str] | None,
    key_labels: Sequence[str] | None,
    padded_queries: Any | None,
    exact_up_to: int,
    max_tile: int,
    max_cells: int,
) -> _Grid:
    """:func:`attention_grid`'s inputs checked, and its tiles pooled where they are long."""
    n_layers = len(weights)
    if not n_layers:
        raise ValueError("expected (layers, heads, queries, keys) weights")
    # One mask per layer (a trace's records), or one array for them all.
    layer_masks = list(masked) if isinstance(masked, list | tuple) else [masked]
    queries, keys, (first,), (flags, *masks) = _plain(
        query_labels, key_labels, [weights[0]], [padded_queries, *layer_masks], ndim=3
    )
    n_heads, n_queries, n_keys = first.shape
    given = [mask for mask in masks if mask is not None]
    m = np.stack(given) if given else np.zeros((n_queries, n_keys), bool)
    m = np.broadcast_to(m.reshape(-1, n_queries, n_keys), (n_layers, n_queries, n_keys))
    padded = _padded_flags(flags, n_queries)
    side = max(8, math.isqrt(max_cells // (n_layers * n_heads)))
    if max(n_queries, n_keys) > exact_up_to:
        side = min(side, max_tile)
    tiles = _grid_tiles(weights, first, m, side)
    del first
    layers, m, notice = tiles.layers, tiles.masked, tiles.notice
    if notice:  # pooled: the labels and the padding flags of each block of rows and columns
        queries, keys = _block_labels(queries, tiles.fq), _block_labels(keys, tiles.fk)
        padded = np.logical_and.reduceat(padded, np.arange(0, n_queries, tiles.fq))
    rows, cols = layers[0].shape[-2:]
    gutter = max(1, round(max(rows, cols) / 32))
    return _Grid(layers, m, queries, keys, padded, notice, gutter)


def _grid_figure(
    grid: _Grid,
    title: str,
    kv_head_of: Sequence[int] | None,
    large_font: bool,
    room: tuple[int | None, float | None],
) -> go.Figure:
    """The tiles of ``grid`` as one heatmap, with the heads' and layers' names, the masked
    cells grey, the [PAD] rows marked and, where heads share key/value heads, their groups;
    ``room``: its height (``None``: from its rows) and the least width the page gives it."""
    height, narrowest = room
    layers, m, queries, keys, padded = (
        grid.layers,
        grid.masked,
        grid.queries,
        grid.keys,
        grid.padded,
    )
    notice, gutter = grid.notice, grid.gutter
    n_layers, (n_heads, rows, cols) = len(layers), layers[0].shape
    tile_h, tile_w = rows + gutter, cols + gutter
    z, kept = _grid_values(layers, m, gutter)

    x, y = _grid_categories(queries, keys, n_layers, n_heads, (rows, cols), gutter, z.shape)
    size = font_size(large_font)
    heatmap = dict(
        type="heatmap",
        z=z,
        x=x,
        y=y,
        coloraxis="coloraxis",
        # Integers cannot be divided in a hover: the weight is written as a fraction of 1000.
        hovertemplate="%{y}<br>%{x}<br>weight %{z}/1000<extra></extra>",
    )
    hidden = dict(showticklabels=False, ticks="", showgrid=False, zeroline=False, type="category")
    if kv_head_of is not None and len(kv_head_of) != n_heads:
        raise ValueError(f"{len(kv_head_of)} key/value head numbers for {n_heads} heads")
    group_lines = _group_lines(kv_head_of, tile_w, gutter, z.shape[0])
    head_notes, layer_notes = _grid_notes(kv_head_of, n_heads, n_layers, rows, cols, gutter)
    height = height or int(min(1400, max(360, 110 + n_layers * (190 if large_font else 150))))
    x_axis, y_axis = _grid_tick_labels(
        x, y, keys, queries, (n_heads, n_layers), height, size, hidden
    )
    if y_axis.get("showticklabels"):  # query labels take the margin: the layer names go above
        _notes_above(layer_notes, rows)
    # The red bars beside each layer's tile say which query rows are [PAD]: said in the title.
    pad_note = f" · red bars at the left = [PAD] query rows {PAD_ROW_MARK}" if padded.any() else ""
    return _finish(
        [heatmap],
        f"{title}{notice} · grey = masked{pad_note}",
        height,
        large_font,
        narrowest=narrowest,
        plot_bgcolor="white",
        margin={"l": 80 if large_font else 60, "r": 20, "t": 105 if large_font else 80, "b": 60},
        xaxis=x_axis,
        yaxis={**y_axis, "autorange": "reversed"},
        # Thousandths, on a colour bar that reads 0..1 like the single head's.
        coloraxis=_weights_axis(kept, unit=1000),
        shapes=_grid_shapes(m, n_heads, rows, cols, tile_h, tile_w, z.shape)
        + _padded_row_marks(padded, n_layers, tile_h)
        + group_lines,
        annotations=[
            {**note, "showarrow": False, "font": {"size": size - 1}}
            for note in head_notes + layer_notes
        ],
    )


# The plot area a grid gets at the narrowest supported page (1280 px wide, minus the panel's
# margins and colour bar): tick labels are shown only where one fits per row or column there.
_GRID_MIN_PLOT_WIDTH = 1000


def _grid_tick_labels(
    x: list[str],
    y: list[str],
    keys: Sequence[str],
    queries: Sequence[str],
    tiles: tuple[int, int],
    height: int,
    size: int,
    hidden: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The x and y axes of a grid: every tile's key pieces under the bottom row of tiles and the
    query pieces left of the first column, each only when a label fits in its cell (at the
    narrowest page for x; at the figure's own height for y); otherwise hover alone names them."""
    n_heads, n_layers = tiles
    x_axis, y_axis = dict(hidden), dict(hidden)
    column_px = _GRID_MIN_PLOT_WIDTH / max(1, len(x))
    if column_px >= size * 1.2:  # rotated labels need one line height per column
        x_axis.update(
            showticklabels=True,
            tickvals=[name for name in x if " · key " in name],
            ticktext=[_short(k) for _ in range(n_heads) for k in keys],
            tickangle=-90,
            tickfont={"size": size - 1},
        )
    row_px = (height - 150) / max(1, len(y))
    if row_px >= size * 1.1:
        y_axis.update(
            showticklabels=True,
            tickvals=[name for name in y if " · query " in name],
            ticktext=[_short(q) for _ in range(n_layers) for q in queries],
            tickfont={"size": size - 1},
        )
    return x_axis, y_axis


def _short(label: str, width: int = 9) -> str:
    """A tick label (:func:`plot_text`) cut to ``width`` characters as shown (the full one is in
    the hover)."""
    text = plain_text(label)
    return label if len(text) <= width else plot_text(text[: width - 1] + "…")


def _padded_row_marks(padded: np.ndarray, n_layers: int, tile_h: int) -> list[dict[str, Any]]:
    """A short red bar left of each [PAD] query row of every layer (in paper coordinates on x,
    so it sits in the margin beside the tiles)."""
    rows = np.flatnonzero(padded)
    if not rows.size:
        return []
    path = "".join(
        f"M-0.012,{r + layer * tile_h - 0.5}V{r + layer * tile_h + 0.5}"
        for layer in range(n_layers)
        for r in rows
    )
    return [
        {
            "type": "path",
            "path": path,
            "xref": "paper",
            "yref": "y",
            "line": {"color": PAD_ROW_COLOR, "width": 4},
            "name": "padded query rows",
        }
    ]


def _grid_shapes(
    masked: np.ndarray,
    n_heads: int,
    rows: int,
    cols: int,
    tile_h: int,
    tile_w: int,
    shape: tuple[int, int],
) -> list[dict[str, Any]]:
    """White gutters between tiles and one grey path per layer over its masked cells."""
    shapes: list[dict[str, Any]] = []
    blank = {"type": "rect", "fillcolor": "white", "line": {"width": 0}, "layer": "above"}
    height, width = shape
    for start in range(rows, height, tile_h):
        y0, y1 = start - 0.5, start + tile_h - rows - 0.5
        shapes.append({**blank, "x0": -0.5, "x1": width - 0.5, "y0": y0, "y1": y1})
    for start in range(cols, width, tile_w):
        x0, x1 = start - 0.5, start + tile_w - cols - 0.5
        shapes.append({**blank, "x0": x0, "x1": x1, "y0": -0.5, "y1": height - 0.5})
    for layer, layer_masked in enumerate(masked):
        rects = _rectangles(layer_masked)
        if not rects:
            continue
        r_off = layer * tile_h
        path = "".join(
            f"M{c0 + c_off - 0.5},{r0 + r_off - 0.5}H{c1 + c_off - 0.5}"
            f"V{r1 + r_off - 0.5}H{c0 + c_off - 0.5}Z"
            for c_off in range(0, n_heads * tile_w, tile_w)
            for r0, r1, c0, c1 in rects
        )
        shapes.append(
            {
                "type": "path",
                "path": path,
                "fillcolor": MASKED_GREY,
                "line": {"width": 0},
                "layer": "above",
                "name": f"masked cells, layer {layer + 1}",
            }
        )
    return shapes


class _EachRead:
    """A sequence whose item ``i`` is ``read(i)``, computed each time it is read (a layer's
    weights, which a trace may compute when read rather than keep)."""

    def __init__(self, read: Callable[[int], Any], length: int) -> None:
        self._read, self._length = read, length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < self._length:
            raise IndexError(index)
        return self._read(index)


def grid_figure(
    records: Sequence[AttentionRecord],
    batch: int,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    exact_up_to: int = 128,
    max_tile: int = 128,
    max_cells: int = GRID_MAX_CELLS,
    padded_queries: Any | None = None,
    large_font: bool = False,
    height: int | None = None,
    narrowest: float | None = None,
) -> go.Figure:
    """:func:`attention_grid` for one sequence of a trace's records of one kind.

    Args:
        records: one :class:`AttentionRecord` per layer (``trace.attention_records(kind)``),
            each with ``(B, H, Tq, Tk)`` weights and a ``(B, 1, Tq, Tk)`` mask.
        batch: which sequence of the batch.
        query_labels, key_labels: ``Tq`` and ``Tk`` unique labels.
        padded_queries: ``(Tq,)`` bool, ``True`` for [PAD] query rows (marked in red).
        narrowest: the least width in px the page gives the figure: a longer title wraps there.
    """
    if not records:
        raise ValueError("no attention records to draw")
    weights = _EachRead(lambda layer: records[layer].weights[batch], len(records))
    masked = [~r.mask[batch, 0] for r in records]  # L of (Tq, Tk)
    kind = _describe(records[0]).split(" · ")[0]
    return attention_grid(
        weights,
        masked,
        query_labels,
        key_labels,
        title=f"{kind}: every layer (rows) and head (columns)"
        + (
            " · heads between dark lines share one key/value head"
            if _shares_kv(records[0].kv_head_of)
            else ""
        ),
        kv_head_of=records[0].kv_head_of,
        exact_up_to=exact_up_to,
        max_tile=max_tile,
        max_cells=max_cells,
        padded_queries=padded_queries,
        large_font=large_font,
        height=height,
        narrowest=narrowest,
    )


# -- the masks themselves ---------------------------------------------------------------------


def _mask_map(mask: np.ndarray, queries: list[str], keys: list[str], title: str) -> _Map:
    """A ``(Tq, Tk)`` bool mask as a map on the shared two-colour axis (1 = may attend)."""
    # 1-px gaps outline small masks; past 48 tokens they would hide the colour.
    gap = 1 if max(len(queries), len(keys)) <= 48 else 0
    trace = dict(
        type="heatmap",
        z=mask.astype(np.uint8),
        x=keys,
        y=queries,
        coloraxis="coloraxis",
        xgap=gap,
        ygap=gap,
        hovertemplate="query %{y}<br>key %{x}<br>may attend: %{z}<extra></extra>",
    )
    return _Map(trace, title)


_TWO_COLOURS = [[0, MASKED_GREY], [0.5, MASKED_GREY], [0.5, BASE_COLOR], [1, BASE_COLOR]]


def _mask_axis() -> dict[str, Any]:
    """The masks' colour axis: grey = masked (0), blue = may attend (1)."""
    return {
        "colorscale": _TWO_COLOURS,
        "cmin": 0,
        "cmax": 1,
        "colorbar": {"tickvals": [0.25, 0.75], "ticktext": ["masked", "may attend"], "len": 0.6},
    }


def masks_figure(
    real_keys: Any,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    causal: Any | None = None,
    changed: Any | None = None,
    changed_title: str = "applied with the what-if",
    large_font: bool = False,
    height: int | None = None,
    narrowest: float | None = None,
) -> go.Figure:
    """The masks themselves: padding, causal (if any) and their combination, side by side (the
    combination only where padding masks a key; else it is the causal mask, drawn once).

    Args:
        real_keys: ``(Tk,)`` bool, ``True`` for real tokens (``StackInput.real_tokens[b]``).
            Padding masks keys only, so it is drawn as whole columns.
        query_labels, key_labels: ``Tq`` and ``Tk`` unique labels (``Tq = Tk`` if causal).
        causal: ``(Tq, Tk)`` bool, ``True`` = may attend (``Trace.causal``), or None.
        changed: ``(Tq, Tk)`` bool, ``True`` = may attend: the mask a what-if pass applied,
            drawn last, beside the original (``changed_title`` above it).
        narrowest: the least width in px the page gives the figure: a longer title wraps there.

    Polarity as everywhere in the project: ``True`` (blue) = may attend, grey = masked.
    """
    n_keys = math.prod(np.shape(real_keys))
    n_queries = n_keys if query_labels is None else len(query_labels)
    queries, keys, _, (real, causal, changed) = _plain(
        query_labels, key_labels, [], [real_keys, causal, changed], (n_queries, n_keys)
    )
    assert real is not None
    padding = np.broadcast_to(real.reshape(1, -1), (n_queries, n_keys))
    panels = {"padding (keys only)": padding}
    if causal is not None:
        if causal.shape != (n_queries, n_keys):
            raise ValueError(f"causal mask {causal.shape} ≠ (queries, keys) {(n_queries, n_keys)}")
        if real.all():  # padding masks nothing: the combination is the causal mask itself
            panels["causal = combined (nothing is padded)"] = causal
        else:
            panels["causal (no future)"] = causal
            panels["combined = padding AND causal"] = padding & causal
    if changed is not None:
        panels[changed_title] = np.broadcast_to(changed, (n_queries, n_keys))
    return _draw(
        [_mask_map(mask, queries, keys, name) for name, mask in panels.items()],
        "Masks · blue = may attend, grey = masked",
        height or heatmap_height(n_queries, large_font, maximum=700) + 40,
        large_font,
        narrowest=narrowest,
        gap=0.04,
        coloraxis=_mask_axis(),
    )


PLACEHOLDER_LINE = 44  # characters a line of a placeholder's message: a 400-pixel column


def placeholder_figure(
    title: str,
    text: str,
    *,
    large_font: bool = False,
    height: int = 240,
    narrowest: float | None = None,
) -> go.Figure:
    """An empty figure with a message: what a view shows before there is anything to draw.

    Plotly never wraps an annotation: a sentence wider than a narrow figure (a column beside
    the tour's sidebar) was cut at both ends. The message is broken into lines of at most
    ``PLACEHOLDER_LINE`` characters (fewer in large font); a title longer than ``narrowest``
    px, the least width the page gives the figure, wraps there."""
    width = PLACEHOLDER_LINE * 4 // 5 if large_font else PLACEHOLDER_LINE
    message = {
        "text": "<br>".join(textwrap.wrap(text, width)),
        "x": 0.5,
        "y": 0.5,
        "xref": "paper",
        "yref": "paper",
        "showarrow": False,
        "font": {"size": font_size(large_font) + 2},
    }
    hidden = {"visible": False}
    return _finish(
        [],
        title,
        height,
        large_font,
        narrowest=narrowest,
        xaxis=hidden,
        yaxis=hidden,
        annotations=[message],
    )


# -- an Attention page's figures, drawn from its data ------------------------------------------

# The fewest cells a grid keeps however long the text (a 6 x 12 grid: ~45 x 45 per tile).
GRID_MIN_CELLS = 150_000


def head_figures(
    data: AttentionData, narrowest: float | None = None
) -> tuple[go.Figure, go.Figure, go.Figure]:
    """An Attention page's head, masks and change (:func:`~transformer.lab.head_view.attention_data`
    builds what they show): the head's scores beside its weights with a placeholder for the
    change, or (where the data holds a changed pass) its weights before beside after, and
    their difference. ``narrowest``: the least width in px the page gives each."""
    view, large, change = data.view, data.large, data.change
    masks = masks_figure(
        view.keys_real,
        view.query_labels,
        view.key_labels,
        causal=view.analysis.trace.causal if view.kind == "decoder_self" else None,
        changed=change.mask if change is not None else None,
        changed_title=change.mask_title if change is not None else "with the what-if",
        large_font=large,
        narrowest=narrowest,
    )
    if change is None:
        single = scores_and_weights_figure(
            view.records[view.layer],
            view.row,
            view.head,
            view.query_labels,
            view.key_labels,
            padded_queries=view.padded,
            large_font=large,
            narrowest=narrowest,
        )
        title, line = data.waiting
        waiting = placeholder_figure(title, line, large_font=large, narrowest=narrowest)
        return single, masks, waiting
    single = weights_beside_figure(
        change.before,
        change.after,
        view.query_labels,
        view.key_labels,
        masked_before=change.masked_before,
        masked_after=change.masked_after,
        panel_titles=change.panel_titles,
        title=change.title,
        padded_queries=view.padded,
        large_font=large,
        narrowest=narrowest,
    )
    diff = attention_difference_figure(
        change.before,
        change.after,
        view.query_labels,
        view.key_labels,
        masked=change.masked_before & change.masked_after,
        title=change.diff_title,
        large_font=large,
        narrowest=narrowest,
    )
    return single, masks, diff


def view_grid_figure(
    view: AttentionView, large_font: bool = False, narrowest: float | None = None
) -> go.Figure:
    """Every head of every layer of one view's attention kind, on one colour scale (its title
    wrapped at ``narrowest`` px, the least width the page gives it). Its cell budget leaves
    room for the single head (float32, exact, two grid cells' bytes per cell) that ships in
    the same response: together under 3 MB."""
    n_queries, n_keys = view.padded.numel(), view.keys_real.numel()  # (Tq,), (Tk,)
    budget = max(GRID_MIN_CELLS, GRID_MAX_CELLS - 2 * n_queries * n_keys)
    return grid_figure(
        view.records,
        view.row,
        view.query_labels,
        view.key_labels,
        max_cells=budget,
        padded_queries=view.padded,
        large_font=large_font,
        narrowest=narrowest,
    )
