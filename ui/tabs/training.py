"""Model & training tab: a model's configuration and parameters per component, a small model
trained live in the background (private to the session), and attention at each snapshot kept
during training."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import gradio as gr

from transformer import figures
from transformer.analysis import parameter_groups
from transformer.config import base_config
from transformer.model import Transformer, count_parameters
from transformer.training.live import LiveTraining, history_row, snapshot_checkpoint
from transformer.training.recipes import RECIPES

from .. import limits
from ..errors import friendly, gpu
from ..inputs import as_int
from ..state import TRAINED_HERE, ModelRegistry, SessionModels, bind
from .attention import attention_grid

ACCURACY_KEYS = ["val_token_accuracy", "val_exact_match", "val_next_token_accuracy"]
BAR_WIDTH = 30  # characters of the progress bar


@lru_cache(maxsize=1)
def base_parameter_count() -> int:
    """Parameters of the paper's base preset (built once: 63M parameters take a second)."""
    return count_parameters(Transformer(base_config()))


def parameter_table(model: Transformer) -> list[list[Any]]:
    """Rows (component, parameters) of ``parameter_groups``: tied tensors counted once."""
    return [[label, f"{n:,}"] for label, n in parameter_groups(model).items()]


@friendly
def model_info(
    registry: ModelRegistry, name: str, session: SessionModels
) -> tuple[str, list[list[Any]], list[list[Any]]]:
    """The ``/model_info`` endpoint: (summary, parameters per component, configuration)."""
    checkpoint = registry.checkpoint(name, session)
    config_rows = [[key, str(value)] for key, value in checkpoint.config.to_dict().items()]
    metrics = ", ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
        for k, v in checkpoint.metrics.items()
        if isinstance(v, int | float)  # the nested test-sample record is for the tests
    )
    text = (
        f"Running on **{registry.device}**. Recorded metrics: {metrics or 'none'}.\n\n"
        f"The paper's base model (N=6, d_model=512, d_ff=2048, h=8, shared 37,000-token vocabulary, tied "
        f"embeddings) built with this code has **{base_parameter_count():,}** parameters; the paper reports 65M."
    )
    return text, parameter_table(checkpoint.model), config_rows


def training_curves(history: list[dict[str, float]], large: bool) -> Any:
    """Loss and accuracy curves; accuracy panels only for the metrics this run reports."""
    present = [key for key in ACCURACY_KEYS if any(key in row for row in history)]
    return figures.training_curves_figure(history, accuracy_keys=present, large_font=large)


def progress_line(step: int, total: int, loss: float, tokens_per_second: float) -> str:
    """A text progress bar with the step, the loss and the speed."""
    done = int(step / total * BAR_WIDTH)
    bar = "█" * done + "░" * (BAR_WIDTH - done)
    return f"`{bar}` step {step}/{total} · loss {loss:.3f} · {tokens_per_second:,.0f} tokens/s"


@friendly
@gpu
def run_training(
    registry: ModelRegistry, task: str, steps: float, seed: float, large: bool, session: Any
) -> Iterator[tuple[str, Any, SessionModels]]:
    """The ``/train`` endpoint: train a recipe's task live, streaming (progress, curves, session);
    the trained model and its snapshots end up in the session."""
    n_steps = as_int(steps, "steps", 1, 3000)
    live = LiveTraining.for_task(
        task,
        n_steps,
        seed=as_int(seed, "seed", 0, 2**31 - 1),
        device=str(registry.device),
        time_limit_s=limits.TRAINING_TIME_LIMIT_S,
    )
    history: list[dict[str, float]] = []
    try:
        for report in live.reports():
            history.append(history_row(report))
            if report.step % 10 == 0 or report.validation or report.step == n_steps:
                line = progress_line(report.step, n_steps, report.loss, report.tokens_per_second)
                yield line, training_curves(history, large), session
    finally:
        live.cancel()  # a cancelled or disconnected client stops the training thread too
    result = live.result()
    session = SessionModels(trained=live.checkpoint(result), snapshots=result.snapshots)
    stopped = (
        f"Stopped at the time limit of {limits.TRAINING_TIME_LIMIT_S:g} s. "
        if result.cancelled
        else ""
    )
    yield (
        f"{stopped}Done: {result.steps_done} steps in {result.seconds:.1f} s. The model is now "
        f"available as **{TRAINED_HERE}** in the other tabs; {len(result.snapshots)} snapshots kept.",
        training_curves(history, large),
        session,
    )


@friendly
def snapshot_view(
    registry: ModelRegistry, index: float, sentence: str, large: bool, session: SessionModels
) -> Any:
    """The ``/snapshot`` endpoint: every head's attention at one snapshot of the last training
    run, reading the task's correct answer where there is one."""
    if session is None or session.trained is None:
        raise ValueError("train a model first: snapshots are kept from the last training run")
    step, frozen = snapshot_checkpoint(
        session.trained, session.snapshots, as_int(index, "snapshot", 0, 100)
    )
    kind = (
        "cross-attention (decoder → encoder)"
        if frozen.config.has_encoder
        else "decoder masked self-attention"
    )
    grid = attention_grid(
        registry,
        session,
        sentence,
        TRAINED_HERE,
        kind,
        1,
        large,
        checkpoint=frozen,
        use_reference=True,
    )
    grid.update_layout(title=f"Snapshot at step {step} of training")
    return grid


def build(registry: ModelRegistry, large: gr.Checkbox, session: gr.State) -> None:
    """Lay out the tab and wire its events (``/model_info``, ``/train``, ``/snapshot``)."""
    with gr.Row():
        names = registry.model_names
        model_name = gr.Dropdown(names, value=names[0], label="Model")
        show = gr.Button("Describe")
    info = gr.Markdown()
    with gr.Row():
        config_table = gr.Dataframe(
            headers=["field", "value"], label="Configuration", max_height=360
        )
        params_table = gr.Dataframe(
            headers=["component", "parameters"], label="Parameters per component"
        )
    show.click(
        bind(model_info, registry),
        [model_name, session],
        [info, params_table, config_table],
        api_name="model_info",
    )

    gr.Markdown("### Train a small model live (it belongs to your session alone)")
    with gr.Row():
        task = gr.Dropdown(list(RECIPES), value="reverse", label="Task")
        steps = gr.Slider(20, 3000, value=300, step=10, label="Steps")
        seed = gr.Number(value=0, precision=0, label="Seed")
    with gr.Row():
        start = gr.Button("Train", variant="primary")
        cancel = gr.Button("Cancel", variant="stop")
    progress = gr.Markdown()
    curves = gr.Plot(label="Loss and accuracy")
    gr.Markdown("### Attention as it formed during training")
    with gr.Row():
        snapshot = gr.Slider(
            0, 4, value=4, step=1, label="Snapshot (0 = first step … last = end of training)"
        )
        snap_sentence = gr.Textbox(value="a b c d e f", label="Input")
    snap_button = gr.Button("Draw this snapshot's attention")
    snap_plot = gr.Plot(label="Cross-attention (or self-attention) of every head, at this snapshot")

    event = start.click(
        bind(run_training, registry),
        [task, steps, seed, large, session],
        [progress, curves, session],
        api_name="train",
        concurrency_limit=1,
        concurrency_id="training",
    )
    cancel.click(None, None, None, cancels=[event], api_visibility="private")
    snap_inputs = [snapshot, snap_sentence, large, session]
    snap = bind(snapshot_view, registry)
    snap_button.click(snap, snap_inputs, [snap_plot], api_name="snapshot")
    snapshot.release(snap, snap_inputs, [snap_plot], api_visibility="private")
