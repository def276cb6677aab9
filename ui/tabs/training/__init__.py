"""Model & training tab: what a model is (family, source, configuration, parameters per
component), a small model trained live in the background (private to the session), and
attention at each snapshot kept during training (a bundled model's, or the session's own).

Modules: ``request`` (what each section's controls ask for, read once), ``description``,
``running``, ``snapshots``, ``layout``."""

from __future__ import annotations

from .description import (
    FAMILIES,
    base_parameter_count,
    describe,
    human,
    metric,
    model_info,
    parameter_counts,
    parameter_table,
    plural,
)
from .layout import build
from .request import snapshot_steps
from .running import (
    ACCURACY_KEYS,
    BAR_WIDTH,
    cancel_training,
    progress_line,
    redraw_curves,
    run_training,
    training_curves,
)
from .snapshots import (
    TASK_SENTENCES,
    snapshot_controls,
    snapshot_live,
    snapshot_of,
    snapshot_sources,
    snapshot_view,
)

__all__ = [
    "ACCURACY_KEYS",
    "BAR_WIDTH",
    "FAMILIES",
    "TASK_SENTENCES",
    "base_parameter_count",
    "build",
    "cancel_training",
    "describe",
    "human",
    "metric",
    "model_info",
    "parameter_counts",
    "parameter_table",
    "plural",
    "progress_line",
    "redraw_curves",
    "run_training",
    "snapshot_controls",
    "snapshot_live",
    "snapshot_of",
    "snapshot_sources",
    "snapshot_steps",
    "snapshot_view",
    "training_curves",
]
