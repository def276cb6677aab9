"""Plotly figure builders for the visualiser: arrays or trace records in, figures out.

Pure functions that import plotly and numpy (torch tensors are accepted, never required) and
never the UI, so they work in a notebook and in tests. Conventions: rows are queries, columns
keys; masked cells are grey; token labels are unique (``token_labels``); every builder sets its
figure's height and takes ``large_font`` for projecting in a hall.
"""

from .attention import (
    attention_difference_figure,
    attention_grid,
    attention_heatmap,
    downsample_attention,
    grid_figure,
    head_figure,
    head_figures,
    masks_figure,
    placeholder_figure,
    scores_and_weights_figure,
    view_grid_figure,
)
from .common import to_numpy, token_labels
from .generation import causal_growth_figure, cross_attention_step_figure, top_k_figure
from .positional import (
    EmbeddingOptions,
    embedding_norms_figure,
    embedding_sum_figure,
    positional_curves_figure,
    positional_encoding_figure,
    positional_similarity,
    positional_similarity_figure,
    rotary_angle_figure,
    rotary_pair_figure,
    rotary_scores,
    rotary_scores_figure,
)
from .training import training_curves_figure

__all__ = [
    "EmbeddingOptions",
    "attention_difference_figure",
    "attention_grid",
    "attention_heatmap",
    "causal_growth_figure",
    "cross_attention_step_figure",
    "downsample_attention",
    "embedding_norms_figure",
    "embedding_sum_figure",
    "grid_figure",
    "head_figure",
    "head_figures",
    "masks_figure",
    "placeholder_figure",
    "positional_curves_figure",
    "positional_encoding_figure",
    "positional_similarity",
    "positional_similarity_figure",
    "rotary_angle_figure",
    "rotary_pair_figure",
    "rotary_scores",
    "rotary_scores_figure",
    "scores_and_weights_figure",
    "to_numpy",
    "token_labels",
    "top_k_figure",
    "training_curves_figure",
    "view_grid_figure",
]
