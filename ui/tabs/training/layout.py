"""The Model & training tab's layout and event wiring."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from transformer.training.recipes import RECIPES

from ...serving.state import TRAINED_HERE, ModelRegistry, SessionModels, bind
from . import snapshots
from .description import model_info
from .request import snapshot_steps
from .running import cancel_training, redraw_curves, run_training, training_curves


def build(
    registry: ModelRegistry, large: gr.Checkbox, session: gr.State
) -> dict[str, gr.Component]:
    """Lay out the tab and wire its events (``/model_info``, ``/train``, ``/snapshot``)."""
    private: dict[str, Any] = {"api_visibility": "private"}
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
    describe_inputs, describe_outputs = [model_name, session], [info, params_table, config_table]
    describe_model = bind(model_info, registry)
    show.click(describe_model, describe_inputs, describe_outputs, api_name="model_info")
    model_name.change(describe_model, describe_inputs, describe_outputs, **private)

    gr.Markdown("### Train a small model live (it belongs to your session alone)")
    with gr.Row():
        task = gr.Dropdown(list(RECIPES), value="reverse", label="Task")
        steps = gr.Slider(20, 3000, value=300, step=10, label="Steps")
        seed = gr.Number(value=0, precision=0, label="Seed")
    with gr.Row():
        start = gr.Button("Train", variant="primary")
        cancel = gr.Button("Cancel", variant="stop")
    progress = gr.Markdown()
    cancel_note = gr.Markdown()
    curves = gr.Plot(label="Loss and accuracy", show_label=False)
    gr.Markdown("### Attention as it formed during training")
    sources = snapshots.snapshot_sources(registry)
    first = sources[0]
    first_steps = snapshot_steps(registry, first, None)
    with gr.Row():
        snapshot_model = gr.Dropdown(sources, value=first, label="Snapshots of")
        snapshot = gr.Slider(
            0,
            max(len(first_steps) - 1, 1),
            value=max(len(first_steps) - 1, 0),
            step=1,
            label="Snapshot: " + ", ".join(f"{i} = step {s:,}" for i, s in enumerate(first_steps)),
        )
        first_task = registry.checkpoint(first, None).task if first != TRAINED_HERE else None
        snap_sentence = gr.Textbox(
            value=snapshots.TASK_SENTENCES.get(first_task or "", "a b c d e f"), label="Input"
        )
    snap_button = gr.Button("Draw this snapshot's attention")
    snap_plot = gr.Plot(
        label="Cross-attention (or self-attention) of every head, at this snapshot",
        show_label=False,
    )

    def train(
        task: str, steps: float, seed: float, large: bool, session: Any, request: gr.Request
    ) -> Iterator[tuple[str, Any, SessionModels]]:
        # A closure, not bind(): gradio finds the gr.Request parameter through type hints,
        # which it cannot read through a functools.partial.
        yield from run_training(registry, task, steps, seed, large, session, request)

    train.__name__, train.__doc__ = run_training.__name__, run_training.__doc__
    event = start.click(
        train,
        [task, steps, seed, large, session],
        [progress, curves, session],
        api_name="train",
        concurrency_limit=1,
        concurrency_id="training",
    )
    # Outside the queue, so that it is not held behind the training it stops; the training
    # itself then reports where it stopped.
    cancel.click(cancel_training, None, cancel_note, queue=False, **private)
    snap_inputs = [snapshot, snap_sentence, large, session]
    snap_button.click(
        bind(snapshots.snapshot_view, registry), snap_inputs, [snap_plot], api_name="snapshot"
    )
    live_inputs = [snapshot_model, snapshot, snap_sentence, large, session]
    live_snapshot = bind(snapshots.snapshot_live, registry)
    controls = bind(snapshots.snapshot_controls, registry)
    snapshot_model.change(
        controls, [snapshot_model, session], [snapshot, snap_sentence], **private
    ).then(live_snapshot, live_inputs, [snap_plot], **private)
    snapshot.release(live_snapshot, live_inputs, [snap_plot], **private)
    snap_sentence.submit(live_snapshot, live_inputs, [snap_plot], **private)
    large.change(live_snapshot, live_inputs, [snap_plot], **private)
    large.change(redraw_curves, large, curves, **private)
    event.then(lambda: "", None, cancel_note, **private)
    # After a training, its snapshots are the ones to look at.
    event.then(lambda: gr.update(value=TRAINED_HERE), None, snapshot_model, **private).then(
        controls, [snapshot_model, session], [snapshot, snap_sentence], **private
    ).then(live_snapshot, live_inputs, [snap_plot], **private)
    # The tab opens describing the first model, with a bundled model's snapshots.
    demo = gr.context.Context.root_block
    if demo is not None:
        demo.load(describe_model, describe_inputs, describe_outputs, **private)
        demo.load(live_snapshot, live_inputs, [snap_plot], **private)
        demo.load(lambda large: training_curves([], large), large, curves, **private)
    return {
        "model": model_name,
        "snapshots_of": snapshot_model,
        "snapshot": snapshot,
        "input": snap_sentence,
    }
