"""Model & training tab: what a model is (family, source, configuration, parameters per
component), a small model trained live in the background (private to the session), and
attention at each snapshot kept during training (a bundled model's, or the session's own)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import gradio as gr

from transformer import figures
from transformer.checkpoint import Checkpoint
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
FAMILIES = {
    "bert": "BERT family (encoder-only)",
    "gpt2": "GPT-2 family (decoder-only)",
    "marian": "Marian family (encoder-decoder translation)",
}
# A sentence each bundled task reads, for the snapshot view.
TASK_SENTENCES = {
    "translate": "the small cat sees a red ball",
    "reverse": "a b c d e f",
    "continue": "the teacher sees",
}
# Trainings running now, by browser session, so that Cancel can stop its own (bounded: a
# session that never comes back leaves one small entry, dropped oldest first).
_RUNNING: OrderedDict[str, tuple[LiveTraining, threading.Event]] = OrderedDict()
_HISTORIES: OrderedDict[str, list[dict[str, float]]] = OrderedDict()
_KEEP_SESSIONS = 256
_running_lock = threading.Lock()


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 step"``, ``"2 steps"``, ``"1,000 steps"``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def human(value: Any) -> str:
    """A number for people: ``1,234``, ``883.4``, ``0.0713``, ``1e-09``; anything else as is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.1f}"
    if magnitude >= 1e-3:
        return f"{value:.3g}" if magnitude < 1 else f"{value:,.3f}".rstrip("0").rstrip(".")
    return f"{value:.2g}"


def metric(key: str, value: float) -> str:
    """A recorded metric for people: accuracies and match rates as percentages."""
    if ("accuracy" in key or "match" in key) and 0 <= value <= 1:
        return f"{value:.1%}".replace(".0%", "%")
    return human(value)


@lru_cache(maxsize=1)
def base_parameter_count() -> int:
    """Parameters of the paper's base preset (built once: 63M parameters take a second)."""
    return count_parameters(Transformer(base_config()))


# Components in the order of the model, by the top-level module (or parameter) that holds them.
_COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("token embeddings", ("src_embedding", "tgt_embedding")),
    ("positions (learned)", ("src_positional", "tgt_positional")),
    ("token types", ("token_type_embedding",)),
    ("embedding norms", ("src_embedding_norm", "tgt_embedding_norm")),
    ("encoder layers", ("encoder.layers",)),
    ("encoder final norm", ("encoder",)),
    ("decoder layers", ("decoder.layers",)),
    ("decoder final norm", ("decoder",)),
    ("generator", ("generator",)),
]


def parameter_counts(model: Transformer) -> dict[str, int]:
    """Parameters per component in the model's order (a tied tensor counted once, where it
    first appears: a shared embedding under "token embeddings"); empty components left out;
    ``"total"`` last, equal to :func:`~transformer.model.count_parameters`."""
    counts: dict[str, int] = {}
    for name, parameter in model.named_parameters():  # each shared tensor once
        parts = name.split(".")
        label = next(
            (
                label
                for label, owners in _COMPONENTS
                if ".".join(parts[:2]) in owners or parts[0] in owners
            ),
            "other",
        )
        counts[label] = counts.get(label, 0) + parameter.numel()
    order = [label for label, _ in _COMPONENTS] + ["other"]
    result = {label: counts[label] for label in order if counts.get(label)}
    config = model.config
    if config.tie_embeddings and config.has_decoder and "token embeddings" in result:
        result = {
            ("token embeddings (tied to the generator)" if k == "token embeddings" else k): n
            for k, n in result.items()
        }
    result["total"] = count_parameters(model)
    return result


def parameter_table(model: Transformer) -> list[list[Any]]:
    """Rows (component, parameters) for the table."""
    return [[label, f"{n:,}"] for label, n in parameter_counts(model).items()]


def describe(name: str, checkpoint: Checkpoint, device: Any) -> str:
    """Family, source and shape of a model, in a few sentences."""
    info, config = checkpoint.info, checkpoint.config
    family = info.get("family")
    lines = []
    if family:
        shown = info.get("name") or name
        lines.append(
            f"**{shown}**: pretrained, {FAMILIES.get(family, family)}, read from "
            f"`{info.get('source', '?')}` into this project's Transformer."
        )
    elif checkpoint.task:
        where = "trained in this session" if name == TRAINED_HERE else "bundled with the app"
        lines.append(f"**{name}**: {where}, trained on the toy task *{checkpoint.task}*.")
    layers = []
    if config.n_encoder_layers:
        layers.append(plural(config.n_encoder_layers, "encoder layer"))
    if config.n_decoder_layers:
        layers.append(plural(config.n_decoder_layers, "decoder layer"))
    lines.append(
        f"{config.architecture}: {' and '.join(layers)}, {plural(config.n_heads, 'head')} each, "
        f"d_model {config.d_model:,}, d_ff {config.d_ff:,}, a vocabulary of "
        f"{checkpoint.tokenizer.vocab_size:,} tokens; "
        f"**{count_parameters(checkpoint.model):,}** parameters. Running on **{device}**."
    )
    metrics = [
        f"{key.replace('_', ' ')} {metric(key, value)}"
        for key, value in checkpoint.metrics.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and key != "parameters"
    ]  # the nested test-sample record is for the tests
    if metrics:
        lines.append("Recorded metrics: " + ", ".join(metrics) + ".")
    lines.append(
        "The paper's base model (N=6, d_model=512, d_ff=2048, h=8, shared 37,000-token "
        f"vocabulary, tied embeddings) built with this code has **{base_parameter_count():,}** "
        "parameters; the paper reports 65M."
    )
    return "\n\n".join(lines)


@friendly
def model_info(
    registry: ModelRegistry, name: str, session: SessionModels
) -> tuple[str, list[list[Any]], list[list[Any]]]:
    """The ``/model_info`` endpoint: (summary, parameters per component, configuration)."""
    checkpoint = registry.checkpoint(name, session)
    config_rows = [[key, human(value)] for key, value in checkpoint.config.to_dict().items()]
    return (
        describe(name, checkpoint, registry.device),
        parameter_table(checkpoint.model),
        config_rows,
    )


def training_curves(history: list[dict[str, float]], large: bool) -> Any:
    """Loss and accuracy curves; accuracy panels only for the metrics this run reports."""
    if not history:
        return figures.placeholder_figure(
            "Loss and accuracy",
            "press Train: the curves grow here as the model learns",
            large_font=large,
        )
    present = [key for key in ACCURACY_KEYS if any(key in row for row in history)]
    return figures.training_curves_figure(history, accuracy_keys=present, large_font=large)


def progress_line(step: int, total: int, loss: float, tokens_per_second: float) -> str:
    """A text progress bar with the step, the loss and the speed."""
    done = int(step / total * BAR_WIDTH)
    bar = "█" * done + "░" * (BAR_WIDTH - done)
    return f"`{bar}` step {step}/{total} · loss {loss:.3f} · {tokens_per_second:,.0f} tokens/s"


def _remember(table: OrderedDict, key: str, value: Any) -> None:
    with _running_lock:
        table[key] = value
        table.move_to_end(key)
        while len(table) > _KEEP_SESSIONS:
            table.popitem(last=False)


def _session_key(request: gr.Request | None) -> str | None:
    return getattr(request, "session_hash", None) if request is not None else None


@friendly
@gpu
def run_training(
    registry: ModelRegistry,
    task: str,
    steps: float,
    seed: float,
    large: bool,
    session: Any,
    request: gr.Request | None = None,
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
    key = _session_key(request)
    asked = threading.Event()  # set by Cancel
    if key is not None:
        _remember(_RUNNING, key, (live, asked))
    history: list[dict[str, float]] = []
    try:
        for report in live.reports():
            history.append(history_row(report))
            if report.step % 10 == 0 or report.validation or report.step == n_steps:
                line = progress_line(report.step, n_steps, report.loss, report.tokens_per_second)
                yield line, training_curves(history, large), session
    finally:
        live.cancel()  # a cancelled or disconnected client stops the training thread too
        if key is not None:
            with _running_lock:
                if _RUNNING.get(key, (None,))[0] is live:
                    del _RUNNING[key]
    if key is not None:
        _remember(_HISTORIES, key, history)
    result = live.result()
    session = SessionModels(trained=live.checkpoint(result), snapshots=result.snapshots)
    kept = (
        f"The model as trained so far is kept: it is **{TRAINED_HERE}** in the other tabs; "
        f"{plural(len(result.snapshots), 'snapshot')} kept."
    )
    if result.cancelled and asked.is_set():
        head = (
            f"**Cancelled** at step {result.steps_done:,} of {n_steps:,} ({result.seconds:.1f} s). "
        )
    elif result.cancelled:
        head = (
            f"**Stopped at the time limit of {limits.TRAINING_TIME_LIMIT_S:g} s**, at step "
            f"{result.steps_done:,} of {n_steps:,}. "
        )
    else:
        head = f"Done: {plural(result.steps_done, 'step')} in {result.seconds:.1f} s. "
    yield head + kept, training_curves(history, large), session


def cancel_training(request: gr.Request) -> str:
    """Ask this session's training to stop; it reports where it stopped and keeps the model."""
    key = _session_key(request)
    with _running_lock:
        running = _RUNNING.get(key) if key is not None else None
    if running is None:
        return "_No training is running in this session._"
    live, asked = running
    asked.set()
    live.cancel()
    return "_Stopping after the current step…_"


def redraw_curves(large: bool, request: gr.Request) -> Any:
    """The last training's curves again (Large font switched)."""
    key = _session_key(request)
    history = _HISTORIES.get(key, []) if key is not None else []
    return training_curves(history, large)


# -- snapshots --------------------------------------------------------------------------------


def snapshot_sources(registry: ModelRegistry) -> list[str]:
    """The models whose snapshots can be shown: bundled ones that kept some, and the session's."""
    bundled = [n for n, c in registry.bundled.models.items() if c.snapshot_steps]
    return [*bundled, TRAINED_HERE]


def snapshot_steps(registry: ModelRegistry, name: str, session: SessionModels | None) -> list[int]:
    """The training steps at which ``name`` kept snapshots (``[]`` before any training)."""
    if name == TRAINED_HERE:
        return sorted(session.snapshots) if session is not None and session.trained else []
    return list(registry.checkpoint(name, session).snapshot_steps)


_SNAPSHOTS: OrderedDict[tuple[str, int], Checkpoint] = OrderedDict()


def _bundled_snapshot(name: str, checkpoint: Checkpoint, step: int) -> Checkpoint:
    """A bundled model's snapshot as a checkpoint, read from disk once (a few kept)."""
    key = (name, step)
    with _running_lock:
        if key in _SNAPSHOTS:
            return _SNAPSHOTS[key]
    frozen = Checkpoint(
        path=checkpoint.path,
        model=checkpoint.load_snapshot(step),
        tokenizer=checkpoint.tokenizer,
        info=checkpoint.info,
    )
    _remember(_SNAPSHOTS, key, frozen)
    return frozen


def _hint(large: bool, text: str) -> Any:
    return figures.placeholder_figure("Attention at a snapshot", text, large_font=large)


@gpu
def snapshot_of(
    registry: ModelRegistry,
    name: str,
    index: Any,
    sentence: str,
    large: bool,
    session: SessionModels | None,
) -> Any:
    """Every head's attention at snapshot ``index`` of ``name``'s training (a bundled model's
    or the session's own), reading the task's correct answer where there is one; a hint figure
    before there is anything to show."""
    steps = snapshot_steps(registry, name, session)
    if not steps:
        return _hint(
            large,
            "train a model above first: its snapshots appear here"
            if name == TRAINED_HERE
            else f"{name} kept no snapshots",
        )
    i = as_int(index, "snapshot", 0, 1000)
    if i >= len(steps):
        raise ValueError(f"snapshot must be between 0 and {len(steps) - 1}, got {i}")
    if name == TRAINED_HERE:
        step, frozen = snapshot_checkpoint(session.trained, session.snapshots, i)
    else:
        step = steps[i]
        frozen = _bundled_snapshot(name, registry.checkpoint(name, session), step)
    kind = (
        "cross-attention (decoder → encoder)"
        if frozen.config.has_encoder
        else "decoder masked self-attention"
    )
    grid = attention_grid(
        registry, session, sentence, name, kind, 1, large, checkpoint=frozen, use_reference=True
    )
    grid.update_layout(
        title=f"Snapshot at step {step:,} of training · {kind} · every layer and head"
    )
    return grid


@friendly
def snapshot_view(
    registry: ModelRegistry, index: float, sentence: str, large: bool, session: SessionModels
) -> Any:
    """The ``/snapshot`` endpoint: every head's attention at one snapshot of the session's last
    training run (a hint figure before any training)."""
    return snapshot_of(registry, TRAINED_HERE, index, sentence, large, session)


@friendly
def snapshot_live(
    registry: ModelRegistry,
    name: str,
    index: Any,
    sentence: str,
    large: bool,
    session: SessionModels | None,
) -> Any:
    """The live snapshot view (any model that kept snapshots)."""
    return snapshot_of(registry, name, index, sentence, large, session)


def snapshot_controls(registry: ModelRegistry, name: str, session: SessionModels | None) -> tuple:
    """(slider, input) updates for ``name``: the slider spans the snapshots that exist."""
    steps = snapshot_steps(registry, name, session)
    last = max(len(steps) - 1, 0)
    label = (
        "Snapshot: " + ", ".join(f"{i} = step {s:,}" for i, s in enumerate(steps))
        if steps
        else "Snapshot (none yet)"
    )
    slider = gr.update(
        minimum=0, maximum=max(last, 1), value=last, label=label, interactive=len(steps) > 1
    )
    task = TRAINED_HERE
    if name != TRAINED_HERE:
        task = registry.checkpoint(name, session).task or ""
    elif session is not None and session.trained is not None:
        task = session.trained.task or ""
    sentence = TASK_SENTENCES.get(task)
    return slider, gr.update(value=sentence) if sentence else gr.update()


def build(registry: ModelRegistry, large: gr.Checkbox, session: gr.State) -> None:
    """Lay out the tab and wire its events (``/model_info``, ``/train``, ``/snapshot``)."""
    private = {"api_visibility": "private"}
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
    sources = snapshot_sources(registry)
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
            value=TASK_SENTENCES.get(first_task or "", "a b c d e f"), label="Input"
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
    snap_button.click(bind(snapshot_view, registry), snap_inputs, [snap_plot], api_name="snapshot")
    live_inputs = [snapshot_model, snapshot, snap_sentence, large, session]
    live_snapshot = bind(snapshot_live, registry)
    controls = bind(snapshot_controls, registry)
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
