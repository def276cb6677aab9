"""A model larger than one device, spread by ``accelerate``'s big-model dispatch: run here on the
CPU with part of the model offloaded to disk (read back layer by layer), so the same hooks and
placement run as across GPUs. Spread or not, the model computes the same numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import llama_folder

from transformer.core.run import TRACE
from transformer.generation import greedy_batch
from transformer.pretrained import PretrainedError, _common, load_pretrained
from transformer.pretrained.dispatch import NO_SPLIT_MODULES, device_map_for, dispatch

pytest.importorskip("accelerate")
pytest.importorskip("transformers")

VOCAB = 71


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dispatch") / "llama"
    llama_folder(path, VOCAB, seed=4, norms=0.2, num_hidden_layers=4, tie_word_embeddings=False)
    return path


def _weights_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_the_device_map_puts_whole_layers_on_each_device(folder: Path) -> None:
    model = load_pretrained(folder).model
    budget = _weights_bytes(model) // 2
    device_map = device_map_for(model, {"cpu": budget})
    assert set(device_map.values()) == {"cpu", "disk"}  # it had to spread
    layer_names = {
        name for name, module in model.named_modules() if type(module).__name__ in NO_SPLIT_MODULES
    }
    for name in device_map:  # no entry inside a layer: a layer is never split
        assert not any(name.startswith(layer + ".") for layer in layer_names), name


def test_a_model_spread_over_cpu_and_disk_computes_what_the_whole_one_does(
    folder: Path, tmp_path: Path
) -> None:
    whole = load_pretrained(folder).model
    spread = load_pretrained(folder).model
    used = dispatch(spread, {"cpu": _weights_bytes(spread) // 2}, offload_dir=tmp_path)
    assert "disk" in used.values()
    assert any(p.is_meta for p in spread.parameters())  # offloaded: read in per layer
    assert spread.device == torch.device("cpu")  # where inputs go
    ids = torch.randint(0, VOCAB, (2, 13))
    with torch.no_grad():
        torch.testing.assert_close(spread(tgt=ids), whole(tgt=ids), atol=0, rtol=0)
        traced, expected = spread(tgt=ids, call=TRACE), whole(tgt=ids, call=TRACE)
    for ours, theirs in zip(traced.decoder_layers, expected.decoder_layers, strict=True):
        assert torch.equal(ours.self_attention.weights, theirs.self_attention.weights)
        assert torch.equal(ours.feed_forward_output, theirs.feed_forward_output)
    torch.testing.assert_close(traced.logits, expected.logits, atol=0, rtol=0)
    prompts = ids[:, :5]
    assert greedy_batch(spread, prompts=prompts, eos_id=None, max_new_tokens=6) == greedy_batch(
        whole, prompts=prompts, eos_id=None, max_new_tokens=6
    )


def test_device_auto_spreads_only_what_one_device_cannot_hold(folder: Path, monkeypatch) -> None:
    checkpoint = load_pretrained(folder, device="auto")
    assert "device_map" not in checkpoint.info  # it fits: one device, nothing spread
    size = _weights_bytes(checkpoint.model)
    # Each device's share given, and enough: spread by accelerate (here all of it on the CPU).
    spread = load_pretrained(folder, device="auto", max_memory={"cpu": 2 * size})
    assert set(spread.info["device_map"].values()) == {"cpu"}
    ids = torch.randint(0, VOCAB, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(spread.model(tgt=ids), checkpoint.model(tgt=ids))
    # The device's share given: spread, and past it (with no disk allowed) refused, by name.
    with pytest.raises(PretrainedError, match="does not fit in the GPUs and RAM together"):
        load_pretrained(folder, device="auto", max_memory={"cpu": size // 2})
    # Larger than RAM: refused before anything is read, saying how much is needed.
    monkeypatch.setattr(_common, "free_memory", lambda device: size // 3)
    with pytest.raises(PretrainedError, match=r"needs .* free"):
        load_pretrained(folder, device="auto")


def test_the_library_imports_accelerate_only_to_spread_a_model() -> None:
    """The app runs without accelerate: only a model spread over devices needs it."""
    code = (
        "import sys, transformer, transformer.pretrained.loading, transformer.pretrained.dispatch"
        "; print('accelerate' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.strip() == "False"
