"""Embeddings and positions: the sinusoidal table, its curves and similarity, a model's learned
position embeddings, and what enters the first layer for one sentence (token embedding × √d_model
+ positional encoding in the paper; token + position + token type, then LayerNorm, in BERT).

Tables are ``(positions, d_model)``: rows are positions, columns dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, Unpack

import numpy as np
import plotly.graph_objects as go

from .common import (
    BASE_COLOR,
    GREEN,
    HIGHLIGHT_COLOR,
    MUTED_COLOR,
    PALETTE,
    SIGNED_COLORSCALE,
    base_layout,
    category_axis,
    check_labels,
    heatmap_height,
    panel_domains,
    panel_titles,
    panelled_layout,
    robust_limit,
    to_numpy,
)


def _table(table: Any) -> np.ndarray:
    t = to_numpy(table)
    if t.ndim != 2:
        raise ValueError(f"expected a (positions, d_model) table, got shape {t.shape}")
    return t


def _signed_heatmap(z: np.ndarray, half: float, bar: str, hover: str) -> go.Heatmap:
    """A heatmap of ``z`` whose colours run from −``half`` through 0 (white) to ``half``."""
    return go.Heatmap(
        z=z,
        colorscale=SIGNED_COLORSCALE,
        zmin=-half,
        zmax=half,
        colorbar={"title": {"text": bar}},
        hovertemplate=hover,
    )


def _grid_axes(x_title: str, y_title: str, square: bool = False) -> dict[str, Any]:
    """``xaxis`` and ``yaxis`` of a heatmap: no grid lines, the first row on top; ``square``
    cells for a position-by-position grid."""
    x: dict[str, Any] = {"title": {"text": x_title}, "showgrid": False, "zeroline": False}
    y: dict[str, Any] = {"title": {"text": y_title}, "showgrid": False, "zeroline": False}
    y["autorange"] = "reversed"
    if square:
        x["constrain"], y["scaleanchor"] = "domain", "x"
    return {"xaxis": x, "yaxis": y}


def positional_encoding_figure(
    table: Any,
    *,
    title: str = "Sinusoidal positional encoding PE[pos, dim]",
    large_font: bool = False,
    height: int | None = None,
    zmax: float | None = 1.0,
) -> go.Figure:
    """The positional-encoding table as a heatmap: positions down, dimensions across.

    Args:
        table: ``(T, d_model)`` encodings, e.g. ``sinusoidal_table(T, d_model)``. Even dimensions
            are sines, odd ones cosines; wavelengths grow from left to right. A model's learned
            position embeddings draw the same way (pass ``zmax=None``).
        zmax: the colour scale runs from ``-zmax`` to ``zmax`` (1 for sin/cos); None takes
            :func:`robust_limit` (the 99th percentile of the magnitudes where a few outlying
            dimensions, as MiniLM has, would wash out every other cell; the colour bar says so).
    """
    z = _table(table)
    half, note = robust_limit(z) if zmax is None else (float(zmax), "")
    hover = "position %{y}<br>dimension %{x}<br>PE %{z:.3f}<extra></extra>"
    trace = _signed_heatmap(z, half, f"value{note}", hover)
    layout = base_layout(
        title,
        height or heatmap_height(min(z.shape[0], 40), large_font),
        large_font,
        **_grid_axes("dimension", "position"),
    )
    return go.Figure(trace, layout)


# Twelve distinct colours for up to twelve curves (Tableau 10, then two dark ones): plotly's own
# colour cycle repeats after ten.
CURVE_COLORS: tuple[str, ...] = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#b279a2",
    "#eeca3b",
    "#ff9da6",
    "#9d755d",
    "#7f7f7f",
    "#1b3a6b",
    "#8c2d04",
)


def readable_number(value: float) -> str:
    """A number as a person writes it: ``10000`` → ``"10,000"``, ``1e9`` → ``"1,000,000,000"``,
    ``62.83`` → ``"62.8"``, ``1.5e12`` → ``"1.5e+12"``."""
    if value >= 1e10:
        return f"{value:.3g}"
    if value >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _dimension_name(dim: int, d_model: int, base: float = 10000.0) -> str:
    i = dim // 2
    wavelength = 2 * np.pi * base ** (2 * i / d_model)
    kind = "sin" if dim % 2 == 0 else "cos"
    return f"dim {dim} ({kind}, wavelength {readable_number(wavelength)})"


def positional_curves_figure(
    table: Any,
    dims: Sequence[int] = (0, 1, 4, 10),
    *,
    base: float = 10000.0,
    title: str = "Positional encoding: chosen dimensions over position",
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """Chosen dimensions of the encoding as curves over position.

    Args:
        table: ``(T, d_model)`` sinusoidal encodings (``sinusoidal_table``).
        dims: dimension indices to draw (at most 12, each its own colour); the legend names
            each one's sin/cos and wavelength (``2π · base^(2i/d_model)`` for dimensions ``2i``
            and ``2i+1``).
        base: the base the table was made with (10,000 in the paper), for the wavelengths.
    """
    t = _table(table)
    n_positions, d_model = t.shape
    bad = [d for d in dims if not 0 <= d < d_model]
    if bad:
        raise ValueError(f"dimensions {bad} are outside 0..{d_model - 1}")
    if len(dims) > len(CURVE_COLORS):
        raise ValueError(f"draw at most {len(CURVE_COLORS)} dimensions at once, got {len(dims)}")
    positions = np.arange(n_positions, dtype=np.int32)
    traces = [
        go.Scatter(
            x=positions,
            y=t[:, d],
            mode="lines",
            name=_dimension_name(d, d_model, base),
            line={"color": CURVE_COLORS[k]},
            hovertemplate=f"dim {d}<br>position %{{x}}<br>PE %{{y:.3f}}<extra></extra>",
        )
        for k, d in enumerate(dims)
    ]
    layout = panelled_layout(
        title,
        height or (520 if large_font else 420),
        large_font,
        xaxis={"title": {"text": "position"}, "showgrid": True, "gridcolor": "#eee"},
        yaxis={"title": {"text": "PE value"}, "range": [-1.1, 1.1], "gridcolor": "#eee"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
    )
    return go.Figure(traces, layout)


def positional_similarity(table: Any, metric: Literal["cosine", "dot"] = "cosine") -> np.ndarray:
    """``(T, T)`` similarity between the encodings of every pair of positions.

    Args:
        table: ``(T, d_model)`` encodings.
        metric: ``"dot"`` for ``PE·PEᵀ`` or ``"cosine"`` for the dot product of unit vectors.
    """
    t = _table(table).astype(np.float64)
    if metric == "cosine":
        norms = np.linalg.norm(t, axis=1, keepdims=True)
        t = t / np.where(norms == 0, 1.0, norms)
    elif metric != "dot":
        raise ValueError(f"metric must be 'cosine' or 'dot', got {metric!r}")
    return (t @ t.T).astype(np.float32)


def positional_similarity_figure(
    table: Any,
    metric: Literal["cosine", "dot"] = "cosine",
    *,
    what: str = "Positional encodings",
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """Similarity of every position's encoding to every other's: for the sinusoidal table high
    near the diagonal and depending only on the distance between positions.

    Args:
        table: ``(T, d_model)`` encodings (sinusoidal or a model's learned position embeddings).
        metric: ``"cosine"`` (range -1..1) or ``"dot"`` (``PE·PEᵀ``; sinusoidal diagonal =
            d_model/2).
        what: what the rows are, for the title (e.g. ``"all-MiniLM-L6-v2's learned positions"``).
    """
    z = positional_similarity(table, metric)
    # One outlying position (MiniLM's first has a huge norm) would paint the rest one colour.
    half, note = robust_limit(z)
    hover = f"position %{{y}} · position %{{x}}<br>{metric} %{{z:.3f}}<extra></extra>"
    trace = _signed_heatmap(z, half, f"{metric}{note}", hover)
    layout = base_layout(
        f"{what} compared: {'cosine similarity' if metric == 'cosine' else 'dot product PE·PEᵀ'}",
        height or (620 if large_font else 520),
        large_font,
        **_grid_axes("position", "position", square=True),
    )
    return go.Figure(trace, layout)


EMBEDDING_MAX_CELLS = 65_536
"""Cells per panel of :func:`embedding_sum_figure` before dimensions are averaged in blocks."""


def _embedding_inputs(token_embedding: Any, positional: Any) -> tuple[np.ndarray, np.ndarray]:
    emb, pe = to_numpy(token_embedding), to_numpy(positional)
    if emb.ndim != 2 or emb.shape != pe.shape:
        raise ValueError(
            f"token_embedding {emb.shape} and positional {pe.shape} must both be (T, d_model)"
        )
    return emb, pe


def _dimension_block(n_tokens: int, d_model: int) -> int:
    """How many dimensions each cell of an embedding panel averages: 1, or the smallest power
    of two that keeps the panel within :data:`EMBEDDING_MAX_CELLS`."""
    block = 1
    while n_tokens * (d_model // block) > EMBEDDING_MAX_CELLS and d_model % (block * 2) == 0:
        block *= 2
    return block


def _embedding_panels(
    panels: dict[str, np.ndarray],
    tokens: list[str],
    domains: list[list[float]],
    block: int,
    large_font: bool,
) -> tuple[list[go.Heatmap], dict[str, Any]]:
    """One heatmap per ``(T, d_model / block)`` panel side by side, with its axes (the
    tokens labelled on the first only); a LayerNorm's panel on its own colour scale."""
    traces, axes = [], {}
    for i, (name, z) in enumerate(panels.items()):
        suffix = "" if i == 0 else str(i + 1)
        own_scale = name.startswith("LayerNorm")
        traces.append(
            go.Heatmap(
                z=z,
                y=tokens,
                xaxis=f"x{suffix}",
                yaxis=f"y{suffix}",
                coloraxis="coloraxis2" if own_scale else "coloraxis",
                hovertemplate=f"{name}<br>token %{{y}}<br>dim %{{x}}<br>%{{z:.3f}}<extra></extra>",
            )
        )
        axes[f"xaxis{suffix}"] = {
            "title": {"text": "dimension" if block == 1 else f"dimensions, mean of {block}"},
            "domain": domains[i],
            "anchor": f"y{suffix}",
            "showgrid": False,
            "zeroline": False,
        }
        y_axis = {**category_axis("token", tokens, large_font), "autorange": "reversed"}
        if i:
            y_axis.update(title=None, showticklabels=False, matches="y", anchor=f"x{suffix}")
        axes[f"yaxis{suffix}"] = y_axis
    return traces, axes


def _embedding_colour_axes(half: float, note: str, normed: np.ndarray | None) -> dict[str, Any]:
    """The shared signed colour scale up to ``half``, and where the layer's input is a
    LayerNorm of the sum (``normed``), a second one of its own below it."""
    color_axes: dict[str, Any] = {
        "coloraxis": {
            "colorscale": SIGNED_COLORSCALE,
            "cmin": -half,
            "cmax": half,
            "colorbar": {
                "x": 1.0,
                "len": 0.45 if normed is not None else 1.0,
                "y": 1.0,
                "yanchor": "top",
                "title": {"text": f"value{note}"},
            },
        }
    }
    if normed is not None:
        norm_half, norm_note = robust_limit(normed)
        color_axes["coloraxis2"] = {
            "colorscale": SIGNED_COLORSCALE,
            "cmin": -norm_half,
            "cmax": norm_half,
            "colorbar": {
                "x": 1.0,
                "len": 0.45,
                "y": 0.0,
                "yanchor": "bottom",
                "title": {"text": f"after norm{norm_note}"},
            },
        }
    return color_axes


class EmbeddingOptions(TypedDict, total=False):
    """What both embedding figures take besides the embeddings, the encodings and the labels:

    - ``token_type``: ``(T, d_model)`` token-type (segment) embeddings, for BERT; added to the
      sum.
    - ``layer_input``: ``(T, d_model)`` what the first layer actually receives when it differs
      from the sum (BERT's LayerNorm over the sum).
    - ``scaled``: whether the model multiplied the token embedding by √d_model (the paper, and
      the default) or not (BERT, GPT-2).
    - ``large_font``, ``height``: as for every figure.
    """

    token_type: Any
    layer_input: Any
    scaled: bool
    large_font: bool
    height: int | None


@dataclass(frozen=True)
class _Embeddings:
    """An embedding figure's inputs as checked arrays (``types`` and ``normed``: ``None`` where
    not given) and its options with their defaults."""

    emb: np.ndarray
    pe: np.ndarray
    tokens: list[str]
    types: np.ndarray | None
    normed: np.ndarray | None
    scaled: bool
    large_font: bool
    height: int | None


def _embeddings(
    token_embedding: Any,
    positional: Any,
    labels: Sequence[str] | None,
    options: EmbeddingOptions,
) -> _Embeddings:
    unknown = sorted(set(options) - set(EmbeddingOptions.__annotations__))
    if unknown:  # as a misspelt keyword argument would
        raise TypeError(f"an embedding figure takes no option {', '.join(unknown)}")
    emb, pe = _embedding_inputs(token_embedding, positional)
    tokens = check_labels(labels, emb.shape[0], "token")
    token_type, layer_input = options.get("token_type"), options.get("layer_input")
    return _Embeddings(
        emb,
        pe,
        tokens,
        None if token_type is None else _embedding_inputs(token_type, pe)[0],
        None if layer_input is None else _embedding_inputs(layer_input, pe)[0],
        options.get("scaled", True),
        options.get("large_font", False),
        options.get("height"),
    )


def embedding_sum_figure(
    token_embedding: Any,
    positional: Any,
    labels: Sequence[str] | None = None,
    **options: Unpack[EmbeddingOptions],
) -> go.Figure:
    """Token embedding, positional encoding and their sum (what enters the first layer), side by
    side on one shared colour scale, so their magnitudes compare honestly.

    Args:
        token_embedding: ``(T, d_model)`` token embeddings as the model adds them (already
            × √d_model where the model scales; ``StackInput.token_embedding[b]``).
        positional: ``(T, d_model)`` encodings (``StackInput.positional``), sinusoidal or learned.
        labels: ``T`` unique token labels (see :func:`token_labels`).
        options: see :class:`EmbeddingOptions`. A ``layer_input`` is drawn as a last panel on
            its own colour scale (a LayerNorm output is on another scale than its input);
            ``scaled`` names the first panel.
    """
    inputs = _embeddings(token_embedding, positional, labels, options)
    emb, pe, tokens, normed = inputs.emb, inputs.pe, inputs.tokens, inputs.normed
    scaled, large_font = inputs.scaled, inputs.large_font
    total = emb + pe
    panels = {"token embedding × √d_model" if scaled else "token embedding": emb}
    panels["+ positional encoding" if scaled else "+ position embedding"] = pe
    if inputs.types is not None:
        panels["+ token type"] = inputs.types
        total = total + inputs.types
    panels["= sum" if normed is not None else "= input to layer 1"] = total
    if normed is not None:
        panels["LayerNorm(sum) = input to layer 1"] = normed
    domains = panel_domains(len(panels), gap=0.03)
    shared = [z for name, z in panels.items() if not name.startswith("LayerNorm")]
    # A few outlying dimensions (MiniLM has some) would leave every other cell near white.
    half, note = robust_limit(np.concatenate([a.ravel() for a in shared]))
    # Long inputs of wide models (MiniLM at 512 tokens: five 512 × 384 maps) would ship
    # megabytes: past EMBEDDING_MAX_CELLS per panel, dimensions are averaged in blocks (the
    # colour scale above stays the one of the exact values) and the axis title says so.
    block = _dimension_block(*emb.shape)
    if block > 1:
        panels = {name: z.reshape(z.shape[0], -1, block).mean(-1) for name, z in panels.items()}
    traces, axes = _embedding_panels(panels, tokens, domains, block, large_font)
    color_axes = _embedding_colour_axes(half, note, normed)
    layout = panelled_layout(
        "What enters the first layer: "
        + " + ".join(["token", "position"] + (["token type"] if inputs.types is not None else []))
        + (", then LayerNorm" if normed is not None else ""),
        inputs.height or heatmap_height(emb.shape[0], large_font, maximum=700) + 40,
        large_font,
        annotations=panel_titles(panels, domains, large_font),
        **color_axes,
        **axes,
    )
    return go.Figure(traces, layout)


def embedding_norms_figure(
    token_embedding: Any,
    positional: Any,
    labels: Sequence[str] | None = None,
    **options: Unpack[EmbeddingOptions],
) -> go.Figure:
    """Per-token vector lengths: why the paper multiplies embeddings by √d_model.

    Args:
        token_embedding: ``(T, d_model)`` token embeddings as the model adds them (already
            × √d_model when ``scaled``; the unscaled length is then this / √d_model).
        positional: ``(T, d_model)`` encodings; a sinusoidal row has length √(d_model/2).
        labels: ``T`` unique token labels.
        options: see :class:`EmbeddingOptions`.

    Without the scale, small initial embeddings would be drowned by the positional encoding.
    """
    inputs = _embeddings(token_embedding, positional, labels, options)
    emb, pe, tokens, scaled = inputs.emb, inputs.pe, inputs.tokens, inputs.scaled
    large_font = inputs.large_font
    d_model = emb.shape[1]
    lengths = np.linalg.norm(emb, axis=1)
    total = emb + pe
    palette = [*PALETTE, MUTED_COLOR]
    if scaled:
        series = [
            ("embedding (unscaled)", lengths / np.sqrt(d_model), MUTED_COLOR),
            ("embedding × √d_model", lengths, BASE_COLOR),
            ("positional encoding", np.linalg.norm(pe, axis=1), HIGHLIGHT_COLOR),
        ]
    else:
        series = [
            ("token embedding", lengths, BASE_COLOR),
            ("position embedding", np.linalg.norm(pe, axis=1), HIGHLIGHT_COLOR),
        ]
    if inputs.types is not None:
        series.append(("token type", np.linalg.norm(inputs.types, axis=1), palette[4]))
        total = total + inputs.types
    if inputs.normed is None:
        series.append(("sum (input to layer 1)", np.linalg.norm(total, axis=1), GREEN))
    else:
        series.append(("sum", np.linalg.norm(total, axis=1), GREEN))
        series.append(
            ("LayerNorm(sum) (input to layer 1)", np.linalg.norm(inputs.normed, axis=1), palette[3])
        )
    traces = [
        go.Bar(
            x=tokens,
            y=values.astype(np.float32),
            name=name,
            marker_color=color,
            hovertemplate=f"{name}<br>token %{{x}}<br>length %{{y:.3f}}<extra></extra>",
        )
        for name, values, color in series
    ]
    title = (
        f"Vector length per token (L2 norm) · √d_model = {np.sqrt(d_model):.2f}"
        if scaled
        else "Vector length per token (L2 norm) · no √d_model scaling in this model"
    )
    layout = panelled_layout(
        title,
        inputs.height or (520 if large_font else 420),
        large_font,
        barmode="group",
        xaxis=category_axis("token", tokens, large_font),
        yaxis={"title": {"text": "length"}, "gridcolor": "#eee", "rangemode": "tozero"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
    )
    return go.Figure(traces, layout)


# -- rotary positions (RoPE) -------------------------------------------------------------------


def _rope_turn(
    vectors: Any,
    positions: Any,
    base: float,
    rotary_dims: int | None,
    scaling: dict[str, Any] | None,
    dtype: Any,
) -> Any:
    """``(N, d_head)`` vectors, each placed at every one of ``positions`` ``(P,)``: ``(N, P,
    d_head)``, turned as a model with this rotary does (its first ``rotary_dims`` dimensions by
    the frequencies ``scaling`` gives, cos and sin times its attention factor; the rest pass).
    The angles are float32, as the model computes them, then ``dtype``."""
    import torch

    from ..core.rotary import rotate, scaled_frequencies

    d_head = vectors.shape[-1]
    d_rotary = d_head if rotary_dims is None else rotary_dims
    inv_freq, factor = scaled_frequencies(d_rotary, base, scaling)
    angles = positions.float()[:, None] * inv_freq  # (P, d_rotary/2), float32 as in the model
    angles = torch.cat([angles, angles], dim=-1).to(dtype)
    cos, sin = angles.cos() * factor, angles.sin() * factor
    placed = vectors.to(dtype)[:, None, None, :].expand(-1, 1, len(positions), d_head)
    turned = rotate(placed[..., :d_rotary], cos, sin)
    return torch.cat([turned, placed[..., d_rotary:]], dim=-1)[:, 0]


def rotary_scores(
    q: Any,
    k: Any,
    query_positions: Any,
    key_positions: Any,
    base: float = 10000.0,
    *,
    rotary_dims: int | None = None,
    scaling: dict[str, Any] | None = None,
) -> np.ndarray:
    """``q·k`` after rotating ``q`` to each query position and ``k`` to each key position.

    Args:
        q, k: ``(d_head,)`` vectors before rotation (the same two vectors at every position).
        query_positions, key_positions: integer positions, ``(P,)`` and ``(K,)``.
        rotary_dims: how many of the ``d_head`` dimensions turn (partial rotary: GPT-NeoX,
            Phi); ``None``: all.
        scaling: the model's ``rope_scaling`` (linear, llama3, yarn, longrope); ``None``: plain.

    Returns:
        ``(P, K)`` float64 dot products ``R(m)q · R(n)k``, computed with the rotate-half
        convention of Hugging Face Llama (``transformer.core.rotary``), not from a formula for the
        result: that each value depends only on ``m − n`` is for a reader to check.
    """
    import torch

    q_t = torch.as_tensor(np.asarray(q), dtype=torch.float64).reshape(1, -1)
    k_t = torch.as_tensor(np.asarray(k), dtype=torch.float64).reshape(1, -1)
    d_head = q_t.shape[-1]
    if k_t.shape[-1] != d_head:
        raise ValueError(f"q and k must have the same width, got {d_head} and {k_t.shape[-1]}")
    pq = torch.as_tensor(np.asarray(query_positions), dtype=torch.int64).reshape(-1)
    pk = torch.as_tensor(np.asarray(key_positions), dtype=torch.int64).reshape(-1)
    rq = _rope_turn(q_t, pq, base, rotary_dims, scaling, torch.float64)[0]  # (P, d_head)
    rk = _rope_turn(k_t, pk, base, rotary_dims, scaling, torch.float64)[0]  # (K, d_head)
    return (rq @ rk.T).numpy()


def rotary_angle_figure(
    angles: Any,
    *,
    base: float = 10000.0,
    scaled: str | None = None,
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """The angle (mod 2π) by which RoPE turns each dimension pair at each position.

    Args:
        angles: ``(T, d_rotary/2)`` angles in radians, ``position · θ_i``
            (:func:`transformer.core.rotary.rotary_angles`, or the model's scaled frequencies);
            column i turns dimensions i and i + d_rotary/2. The first pairs spin fast, the last
            barely move.
        scaled: the model's ``rope_scaling`` type, named in the title (``None``: plain RoPE).
    """
    z = _table(angles)
    wrapped = np.mod(z, 2 * np.pi)
    trace = go.Heatmap(
        z=wrapped,
        customdata=z,
        colorscale="Twilight",
        zmin=0.0,
        zmax=2 * np.pi,
        colorbar={"title": {"text": "angle mod 2π (rad)"}},
        hovertemplate=(
            "position %{y}<br>pair %{x}<br>angle %{customdata:.3f} rad"
            " (%{z:.3f} mod 2π)<extra></extra>"
        ),
    )
    layout = base_layout(
        f"RoPE rotation angle position·θ_i, θ_i = {readable_number(base)}^(−2i/d)"
        + (f", scaled ({scaled})" if scaled else ""),
        height or heatmap_height(min(z.shape[0], 40), large_font),
        large_font,
        **_grid_axes(f"dimension pair i (turns dims i and i + {z.shape[1]})", "position"),
    )
    return go.Figure(trace, layout)


def rotary_scores_figure(
    scores: Any, *, large_font: bool = False, height: int | None = None
) -> go.Figure:
    """``q·k`` for one q and one k placed at every (query position, key position): a
    :func:`rotary_scores` table; equal along each diagonal when RoPE makes it depend only on
    the distance.

    Args:
        scores: ``(T, T)`` dot products, rows query positions, columns key positions.
    """
    z = _table(scores)
    half = float(np.abs(z).max()) or 1.0
    hover = "q at %{y} · k at %{x}<br>q·k %{z:.4f}<extra></extra>"
    trace = _signed_heatmap(z, half, "q·k", hover)
    layout = base_layout(
        "One q and one k, rotated to every pair of positions: q·k",
        height or (620 if large_font else 520),
        large_font,
        **_grid_axes("key position n", "query position m", square=True),
    )
    return go.Figure(trace, layout)


def _turned_arrows(
    tips: np.ndarray, name: str, color: str, places: list[int], theta: float
) -> list[go.Scatter]:
    """One vector's ``(P, 2)`` arrow tips at each of ``places``: the circle they turn on
    (dotted), the arrows from the origin, and the tips labelled by position (turned by
    position · ``theta``)."""
    x, y = tips[:, 0], tips[:, 1]
    radius = float(np.hypot(x[0], y[0]))
    circle = np.linspace(0, 2 * np.pi, 73)
    at = np.asarray(places, dtype=np.int64)
    return [
        go.Scatter(
            x=radius * np.cos(circle),
            y=radius * np.sin(circle),
            mode="lines",
            line={"color": color, "width": 1, "dash": "dot"},
            hoverinfo="skip",
            showlegend=False,
        ),
        go.Scatter(
            x=np.ravel([[0.0, xi, np.nan] for xi in x]),
            y=np.ravel([[0.0, yi, np.nan] for yi in y]),
            mode="lines",
            line={"color": color, "width": 2},
            hoverinfo="skip",
            showlegend=False,
        ),
        go.Scatter(
            x=x,
            y=y,
            name=name,
            mode="markers+text",
            marker={"color": color, "size": 9},
            text=[f"{name}@{p}" for p in places],
            textposition="top center",
            customdata=np.stack([at, at * theta], axis=-1),
            hovertemplate=(
                f"{name} at position %{{customdata[0]}}<br>turned by %{{customdata[1]:.3f}} "
                "rad<br>(%{x:.3f}, %{y:.3f})<extra></extra>"
            ),
        ),
    ]


def rotary_pair_figure(
    q: Any,
    k: Any,
    pair: int,
    positions: Sequence[int],
    base: float = 10000.0,
    *,
    rotary_dims: int | None = None,
    scaling: dict[str, Any] | None = None,
    what: str = "",
    large_font: bool = False,
    height: int | None = None,
) -> go.Figure:
    """One dimension pair of a q and a k as 2-D arrows, turned to each position by RoPE.

    Args:
        q, k: ``(d_head,)`` query and key before rotation (a real head's, or any two vectors).
        pair: i, the pair of dimensions i and i + d_rotary/2 drawn (x and y).
        positions: the integer positions to place both vectors at, ``(P,)``.
        base: RoPE's base; the pair turns by ``position · θ_i``, ``θ_i = base^(−2i/d_rotary)``
            (then scaled by ``scaling``).
        rotary_dims: d_rotary, how many dimensions turn (``None``: all of d_head).
        scaling: the model's ``rope_scaling`` (``None``: plain RoPE).
        what: where q and k come from, for the title.

    The rotation is the model's own (rotate-half, its frequencies and attention factor), so each
    arrow is what attention reads. Traces ``"q"`` and ``"k"`` hold the arrow tips (x: dimension
    i, y: dimension i + d_rotary/2) in the order of ``positions``.
    """
    import torch

    from ..core.rotary import scaled_frequencies

    vectors = torch.as_tensor(np.stack([np.asarray(q), np.asarray(k)]), dtype=torch.float32)
    d_rotary = vectors.shape[-1] if rotary_dims is None else rotary_dims
    if not 0 <= pair < d_rotary // 2:
        raise ValueError(f"pair must be in 0..{d_rotary // 2 - 1}, got {pair}")
    places = torch.as_tensor(list(positions), dtype=torch.int64)
    turned = _rope_turn(vectors, places, base, rotary_dims, scaling, torch.float32)  # (2, P, d)
    tips = turned[..., [pair, pair + d_rotary // 2]].double().numpy()  # (2, P, 2)
    theta = float(scaled_frequencies(d_rotary, base, scaling)[0][pair])
    traces = []
    reach = float(np.abs(tips).max()) * 1.15 or 1.0
    for row, (name, color) in enumerate((("q", BASE_COLOR), ("k", HIGHLIGHT_COLOR))):
        traces += _turned_arrows(tips[row], name, color, places.tolist(), theta)
    axis = {"range": [-reach, reach], "zeroline": True, "showgrid": False}
    title = (
        f"Pair {pair} of {what + ' ' if what else ''}q and k, turned by position · θ_{pair}"
        f" (θ_{pair} = {theta:.3g} rad)"
    )
    layout = base_layout(
        title,
        height or (620 if large_font else 520),
        large_font,
        xaxis={**axis, "title": {"text": f"dimension {pair}"}, "constrain": "domain"},
        yaxis={
            **axis,
            "title": {"text": f"dimension {pair + d_rotary // 2}"},
            "scaleanchor": "x",
        },
    )
    return go.Figure(traces, layout)
