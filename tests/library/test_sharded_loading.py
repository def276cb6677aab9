"""Sharded checkpoints (``model.safetensors.index.json`` and its shards), as every Hugging Face
model from 3B parameters up is saved: read tensor by tensor, one shard at a time, into the model
itself (no second copy), equal to the single-file folder and to ``transformers``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import build_hf_model, llama_folder, load_hf_reference

from transformer.pretrained import PretrainedError, _common, load_pretrained

transformers = pytest.importorskip("transformers")

VOCAB = 61


def _sharded_copy(reference: torch.nn.Module, single: Path, folder: Path, shard: str) -> Path:
    """``reference`` saved in ``folder`` in shards of at most ``shard`` (``"20KB"``), with the
    tokenizer files of ``single``."""
    reference.save_pretrained(folder, max_shard_size=shard)
    for path in single.iterdir():
        if "token" in path.name or path.suffix in (".txt", ".spm") or path.name == "vocab.json":
            shutil.copy(path, folder)
    return folder


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, torch.nn.Module]:
    """(single-file folder, sharded folder, the ``transformers`` model both hold)."""
    root = tmp_path_factory.mktemp("sharded")
    reference = llama_folder(root / "single", VOCAB, seed=5, norms=0.2, tie_word_embeddings=False)
    sharded = _sharded_copy(reference, root / "single", root / "sharded", "20KB")
    return root / "single", sharded, reference


def test_a_sharded_folder_has_an_index_and_several_shards(llama_pair) -> None:
    _, sharded, _ = llama_pair
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert not (sharded / "model.safetensors").exists()
    assert len(set(index["weight_map"].values())) > 3


def test_a_sharded_llama_loads_equal_to_its_single_file_and_to_transformers(llama_pair) -> None:
    single, sharded, reference = llama_pair
    one, many = load_pretrained(single), load_pretrained(sharded)
    ours = dict(many.model.state_dict())
    assert ours.keys() == dict(one.model.state_dict()).keys()
    for name, tensor in one.model.state_dict().items():
        assert torch.equal(ours[name], tensor), name
    ids = torch.randint(0, VOCAB, (2, 11))
    with torch.no_grad():
        expected = reference(ids).logits
        got = many.model(tgt=ids)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_a_sharded_gpt2_with_tied_embeddings_and_packed_projections_matches_transformers(
    tmp_path: Path,
) -> None:
    single = build_hf_model("gpt2", tmp_path / "single", perturb=1, layers=3)
    reference = load_hf_reference(transformers.GPT2LMHeadModel, single)
    sharded = _sharded_copy(reference, single, tmp_path / "sharded", "30KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    model = load_pretrained(sharded).model
    # The tie survives assignment: one matrix, not two equal ones.
    assert model.generator.proj.weight is model.tgt_embedding.lookup.weight
    ids = torch.randint(0, 90, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(tgt=ids), reference(ids).logits, atol=1e-4, rtol=1e-4)


class _CountingOpen:
    """``safe_open`` that counts the shards mapped at once (entered and not yet exited)."""

    def __init__(self) -> None:
        self.open: set[str] = set()
        self.most = 0
        self.opened: list[str] = []

    def __call__(self, path: str, **kwargs):  # type: ignore[no-untyped-def]
        real = _REAL_SAFE_OPEN(path, **kwargs)
        counter = self

        class Handle:
            def __enter__(self):  # type: ignore[no-untyped-def]
                real.__enter__()
                counter.open.add(path)
                counter.opened.append(Path(path).name)
                counter.most = max(counter.most, len(counter.open))
                return self

            def __exit__(self, *args):  # type: ignore[no-untyped-def]
                counter.open.discard(path)
                return real.__exit__(*args)

            def get_tensor(self, name: str) -> torch.Tensor:
                assert path in counter.open, "a tensor was read from a closed shard"
                return real.get_tensor(name)

            def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
                return getattr(real, name)

        return Handle()


_REAL_SAFE_OPEN = _common.safe_open


def test_shards_are_read_one_at_a_time_and_all_let_go(llama_pair, monkeypatch) -> None:
    _, sharded, _ = llama_pair
    counting = _CountingOpen()
    monkeypatch.setattr(_common, "safe_open", counting)
    load_pretrained(sharded)
    shards = set(
        json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"].values()
    )
    assert set(counting.opened) == shards  # every shard was read ...
    assert counting.most == 1  # ... never two mapped at once ...
    assert not counting.open  # ... and none is left mapped after the load


@pytest.fixture
def broken(llama_pair, tmp_path: Path) -> Path:
    """A copy of the sharded Llama folder that a test may damage."""
    return Path(shutil.copytree(llama_pair[1], tmp_path / "broken"))


def test_a_missing_shard_is_named(broken: Path) -> None:
    victim = sorted(broken.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(PretrainedError, match=victim.name):
        load_pretrained(broken)


def test_an_index_that_places_a_tensor_in_the_wrong_shard_is_refused(broken: Path) -> None:
    index_path = broken / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shards = sorted(set(index["weight_map"].values()))
    name = next(n for n, s in index["weight_map"].items() if s == shards[0])
    index["weight_map"][name] = shards[-1]
    index_path.write_text(json.dumps(index))
    with pytest.raises(PretrainedError, match="lack"):
        load_pretrained(broken)


def test_a_truncated_shard_is_refused_before_its_tensors_are_read(broken: Path) -> None:
    victim = sorted(broken.glob("model-*.safetensors"))[0]
    victim.write_bytes(victim.read_bytes()[:-16])
    with pytest.raises(PretrainedError, match=f"{victim.name} is truncated"):
        load_pretrained(broken)


# -- memory: one copy of the model, not two -----------------------------------------------------

_PEAK_SCRIPT = textwrap.dedent(
    """
    import sys
    from transformer.pretrained import load_pretrained

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    load_pretrained(sys.argv[2])  # every module the load imports, imported
    before = status("VmRSS")
    checkpoint = load_pretrained(sys.argv[1])
    weights = sum(p.numel() * p.element_size() for p in checkpoint.model.parameters())
    print(status("VmHWM") - before, weights)
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads Linux's /proc")
def test_loading_a_sharded_model_holds_it_once_not_twice(tmp_path: Path) -> None:
    """The peak resident memory of a load (a fresh process, after a warm-up load of another
    model) stays well under twice the weights: a load that read every tensor into a dict and
    then copied it into a model initialised at random would hold two copies at its peak."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=20000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        max_position_embeddings=64,
    )  # fmt: skip
    big = transformers.LlamaForCausalLM(config)
    big.save_pretrained(tmp_path / "big", max_shard_size="4MB")
    (tmp_path / "small").mkdir()
    small = llama_folder(tmp_path / "small", VOCAB, seed=1)
    shutil.copy(tmp_path / "small" / "tokenizer.json", tmp_path / "big")
    del big, small
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(tmp_path / "big"), str(tmp_path / "small")],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    peak, weights = (int(n) for n in done.stdout.split())
    assert weights > 40 * 10**6  # large enough that a second copy shows above the noise
    assert peak < 1.4 * weights, f"peak {peak / 1e6:.0f} MB for {weights / 1e6:.0f} MB of weights"
