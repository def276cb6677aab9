"""The model registry and the app's model flags: ``python app.py --model PATH_OR_ID``
(repeatable) and ``--allow-download``; local folders of each supported family, hub ids from a
temporary local Hugging Face cache (offline), broken folders reported by name while the app
keeps serving the other models; and the ZeroGPU decorator's stand-in."""

from __future__ import annotations

import functools
import gc
import importlib.util
import inspect
import shutil
import sys
import threading
import time
import types
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from serving import CROSS, api_client, call, leaks, serve, still_serves

import app as visualiser
from ui import demo as demo_module
from ui.serving import errors
from ui.serving.state import TRAINED_HERE, ModelRegistry

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
KIND = {
    "bert": "encoder self-attention",
    "gpt2": "decoder masked self-attention",
    "marian": CROSS,
}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _wait_for_preload(registry: ModelRegistry, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while registry.preloading and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not registry.preloading, "background loading did not finish"


# -- the command line --------------------------------------------------------------------------


def test_model_flags_reach_the_registry(monkeypatch, hf_models):
    built = {}

    events = []

    class FakeDemo:
        def launch(self, **kwargs):
            assert kwargs["prevent_thread_lock"] is True  # main goes on to start the preload
            events.append("launch")

        def block_thread(self):
            events.append("serve")

    def fake_build(device, models, allow_download, preload, dtype):
        built.update(device=device, models=list(models), allow_download=allow_download)
        assert dtype == "auto"  # float32 on a CPU, the checkpoint's own on a GPU
        assert preload is False  # weights are read once the page is served, not during start-up
        return FakeDemo()

    monkeypatch.setattr(visualiser, "build_demo", fake_build)
    monkeypatch.setattr(visualiser, "preload_models", lambda demo: events.append("preload"))
    bert, gpt2 = str(hf_models["bert"]), str(hf_models["gpt2"])
    visualiser.main(["--model", bert, "--model", gpt2])
    assert built["models"] == [bert, gpt2] and built["allow_download"] is False
    visualiser.main(["--model", "gpt2", "--allow-download"])
    assert built["models"] == ["gpt2"] and built["allow_download"] is True
    visualiser.main([])
    assert built["models"] == [] and built["allow_download"] is False
    assert events == ["launch", "preload", "serve"] * 3


def test_a_space_s_server_address_is_honoured_and_loopback_is_the_default(
    monkeypatch, main_launches
):
    launched = main_launches
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    visualiser.main([])
    assert (launched["server_name"], launched["server_port"]) == ("127.0.0.1", 7860)
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")  # what a Space sets
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7861")
    visualiser.main([])
    assert (launched["server_name"], launched["server_port"]) == ("0.0.0.0", 7861)
    visualiser.main(["--host", "127.0.0.1", "--port", "8000"])
    assert (launched["server_name"], launched["server_port"]) == ("127.0.0.1", 8000)


# -- local folders -----------------------------------------------------------------------------


def test_local_folders_are_listed_by_name_and_load_lazily(hf_models):
    registry = ModelRegistry(torch.device("cpu"), [str(p) for p in hf_models.values()])
    names = registry.model_names
    # Bundled first, then the shipped MiniLM and the folders (by their own name: a menu never
    # shows this machine's paths), then the session's own model.
    assert names[:3] == ["translate", "reverse", "continue"] and names[-1] == TRAINED_HERE
    assert [n for n in names if n in hf_models] == ["bert", "gpt2", "marian"]
    assert not registry.pretrained  # nothing read yet: listed at once, loaded on first use
    for family in hf_models:
        checkpoint = registry.checkpoint(family, None)
        assert checkpoint.info["family"] == family
        assert registry.is_shared(family, checkpoint)
        assert registry.checkpoint(family, None) is checkpoint  # read once


def test_two_folders_with_the_same_name_get_distinct_menu_names(tmp_path, hf_models):
    twin = tmp_path / "elsewhere" / "bert"
    shutil.copytree(hf_models["bert"], twin)
    registry = ModelRegistry(torch.device("cpu"), [str(hf_models["bert"]), str(twin)])
    assert "bert" in registry.model_names and "bert (2)" in registry.model_names
    assert registry.sources["bert (2)"] == str(twin)
    assert registry.checkpoint("bert (2)", None).path == twin


def test_a_local_bert_attends_as_transformers_does(hf_models):
    """The folder's model, through the registry's cached analysis, gives the attention
    probabilities of ``transformers``' own BertModel on the same tokens."""
    registry = ModelRegistry(torch.device("cpu"), [str(hf_models["bert"])])
    checkpoint = registry.checkpoint("bert", None)
    analysis = registry.analysis("bert", checkpoint, ["the cat sat w9 w20"])
    vocab = (hf_models["bert"] / "vocab.txt").read_text(encoding="utf-8").split("\n")
    ids = torch.tensor([[vocab.index(piece) for piece in analysis.source_pieces[0]]])
    assert ids.shape[1] >= 5
    reference = transformers.BertModel.from_pretrained(
        hf_models["bert"], attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        theirs = reference(ids, output_attentions=True).attentions
    ours = analysis.trace.attention_records("encoder_self")
    assert len(ours) == len(theirs) == 2
    for layer, (record, expected) in enumerate(zip(ours, theirs, strict=True)):
        difference = (record.weights - expected).abs().max().item()
        assert difference < 1e-5, f"layer {layer}: {difference:.2e}"


def test_the_app_serves_every_family_from_model_flags(hf_models):
    with serve(models=tuple(str(p) for p in hf_models.values())) as (_demo, url):
        client = api_client(url)
        for family, kind in KIND.items():
            ok, result = call(client, "/model_info", family)
            assert ok, (family, result)
            _summary, _parameters, config = result
            rows = {row[0]: row[1] for row in config["data"]}
            architecture = {
                "bert": "encoder-only",
                "gpt2": "decoder-only",
                "marian": "encoder-decoder",
            }[family]
            assert rows["architecture"] == architecture, rows
            assert (rows["d_model"], rows["n_heads"]) == ("32", "4"), rows
            ok, result = call(client, "/attention", "the cat sat", family, kind, 1, 1, 1, [], False)
            assert ok, (family, result)
        still_serves(client)


# -- hub ids through a local Hugging Face cache ------------------------------------------------


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, hf_models):
    """A Hugging Face cache in ``tmp_path`` holding ``tiny/gpt2`` as huggingface_hub lays a
    downloaded snapshot out; the hub is offline."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--tiny--gpt2"
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(hf_models["gpt2"], snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_a_hub_id_resolves_from_the_local_cache(hub_cache):
    registry = ModelRegistry(torch.device("cpu"), ["tiny/gpt2"])
    assert "tiny/gpt2" in registry.model_names
    checkpoint = registry.checkpoint("tiny/gpt2", None)
    assert checkpoint.info["family"] == "gpt2" and checkpoint.info["source"] == "tiny/gpt2"
    assert (
        checkpoint.path.resolve()
        == (hub_cache / "models--tiny--gpt2" / "snapshots" / COMMIT).resolve()
    )


def test_an_uncached_hub_id_says_how_to_download(hub_cache):
    registry = ModelRegistry(torch.device("cpu"), ["nobody/not-cached"])
    with pytest.raises(ValueError) as caught:
        registry.checkpoint("nobody/not-cached", None)
    message = str(caught.value)
    assert "nobody/not-cached" in message and "local Hugging Face cache" in message
    assert "--allow-download" in message and "allow_download=True" not in message
    assert "--allow-download" in registry.errors["nobody/not-cached"]
    assert not any((hub_cache / "models--nobody--not-cached").glob("snapshots/*/*"))


# -- broken folders ----------------------------------------------------------------------------


def _broken(tmp_path: Path, hf_models: dict[str, Path]) -> dict[str, tuple[Path, str]]:
    """Broken model folders, each with a fragment the message must hold."""
    wrong = shutil.copytree(hf_models["bert"], tmp_path / "wrong-type")
    config = (
        (wrong / "config.json").read_text().replace('"model_type": "bert"', '"model_type": "t5"')
    )
    (wrong / "config.json").write_text(config)
    pickled = shutil.copytree(hf_models["bert"], tmp_path / "pickled")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    corrupted = shutil.copytree(hf_models["gpt2"], tmp_path / "corrupted")
    weights = corrupted / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:500])
    return {
        "wrong-type": (wrong, "model_type='t5'"),
        "pickled": (pickled, "pytorch_model.bin"),
        "corrupted": (corrupted, "model.safetensors"),
        "absent": (tmp_path / "no-such-folder", "does not exist"),
    }


def _bound_registry(demo: Any) -> ModelRegistry:
    """The registry the app's handlers are bound to (under the wrapper that orders them)."""
    handlers = [inspect.unwrap(function.fn) for function in demo.fns.values() if function.fn]
    return next(
        fn.args[0]
        for fn in handlers
        if isinstance(fn, functools.partial) and isinstance(fn.args[0], ModelRegistry)
    )


def test_broken_folders_are_reported_by_name_and_the_app_serves_the_rest(tmp_path, hf_models):
    broken = _broken(tmp_path, hf_models)
    specs = [str(path) for path, _ in broken.values()] + [str(hf_models["bert"])]
    with serve(models=tuple(specs)) as (demo, url):
        registry = _bound_registry(demo)
        _wait_for_preload(registry)
        client = api_client(url)
        assert set(registry.pretrained_errors) == {
            "wrong-type",
            "pickled",
            "corrupted",
            "no-such-folder",
        }
        for name, (path, fragment) in broken.items():
            menu_name = path.name
            ok, message = call(client, "/model_info", menu_name)
            assert not ok and fragment in message and menu_name in message, (name, message)
            assert not leaks(message) and str(tmp_path) not in message, message
            still_serves(client)
        assert "t5" in registry.pretrained_errors["wrong-type"]
        assert "BERT" in registry.pretrained_errors["wrong-type"]  # names the supported families
        # The page lists them like a broken bundled model, without this machine's paths.
        status = demo_module.model_status(registry)
        for path, fragment in broken.values():
            assert f"model **{path.name}** unavailable" in status and fragment in status
        assert str(tmp_path) not in status
        # The good folder and the bundled models still work.
        ok, result = call(client, "/attention", "the cat", "bert", KIND["bert"], 1, 1, 1, [], False)
        assert ok, result
        ok, result = call(client, "/attention", "the cat", "translate", CROSS, 1, 1, 1, [], False)
        assert ok, result


def test_the_page_status_follows_background_loading(tmp_path, hf_models):
    broken = _broken(tmp_path, hf_models)
    registry = ModelRegistry(torch.device("cpu"), [str(broken["wrong-type"][0])])
    text, timer = demo_module._refresh_status(registry)
    assert text == "" and timer.active is False  # nothing tried yet, nothing loading
    registry.preload()
    _wait_for_preload(registry)
    text, timer = demo_module._refresh_status(registry)
    assert "model **wrong-type** unavailable" in text and "t5" in text
    assert timer.active is False  # loading is over: the page stops asking


def test_build_demo_does_not_wait_for_pretrained_weights(monkeypatch, hf_models):
    """Weights load in the background: build_demo returns while a load is still blocked."""
    import threading

    from transformer import pretrained

    release = threading.Event()
    original = pretrained.load_pretrained

    def slow(*args, **kwargs):
        release.wait(30)
        return original(*args, **kwargs)

    monkeypatch.setattr("ui.serving.state.load_pretrained", slow)
    try:
        start = time.monotonic()
        built = visualiser.build_demo("cpu", [str(hf_models["bert"])])
        elapsed = time.monotonic() - start
        assert elapsed < 25, elapsed
        registry = _bound_registry(built)
        assert registry.preloading and "bert" not in registry.pretrained
    finally:
        release.set()
    _wait_for_preload(registry)
    assert "bert" in registry.pretrained


# -- ZeroGPU -----------------------------------------------------------------------------------


def _fresh_errors_module(monkeypatch, spaces_module):
    """ui/serving/errors.py imported afresh under another name, with ``spaces`` as given (None: absent)."""
    monkeypatch.setitem(sys.modules, "spaces", spaces_module)
    spec = importlib.util.spec_from_file_location(
        "errors_copy", ROOT / "ui" / "serving" / "errors.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_is_a_no_op_without_spaces(monkeypatch):
    copy = _fresh_errors_module(monkeypatch, None)  # None in sys.modules: import fails

    def handler(x):
        return x + 1

    assert copy.gpu(handler) is handler  # @gpu
    assert copy.gpu(duration=120)(handler) is handler  # @gpu(duration=120)
    assert copy.gpu()(handler) is handler  # @gpu()
    assert errors.gpu(handler)(1) == 2  # the app's own, on this machine


def test_gpu_is_spaces_gpu_under_zerogpu(monkeypatch):
    calls = []

    def fake_gpu(fn=None, **kwargs):
        calls.append(kwargs)
        mark = lambda f: types.SimpleNamespace(wrapped=f, kwargs=kwargs)  # noqa: E731
        return mark(fn) if fn is not None else mark

    copy = _fresh_errors_module(monkeypatch, types.SimpleNamespace(GPU=fake_gpu))

    def handler():
        return "ran"

    assert copy.gpu(handler).wrapped is handler
    assert copy.gpu(duration=60)(handler).kwargs == {"duration": 60}
    assert calls == [{}, {"duration": 60}]


# -- the analysis cache ------------------------------------------------------------------------


def test_the_cache_counts_every_tensor_of_a_trace_and_stays_in_its_bound(monkeypatch):
    from ui.serving import limits

    registry = ModelRegistry(torch.device("cpu"))
    checkpoint = registry.checkpoint("translate", None)
    first = registry.analysis("translate", checkpoint, ["the small cat sees a red ball"])
    trace = first.trace
    records = [
        r
        for kind in ("encoder_self", "decoder_self", "cross")
        for r in trace.attention_records(kind)
    ]
    floor = trace.logits.nbytes + sum(r.scores.nbytes + r.weights.nbytes for r in records)
    (size,) = [n for _, n in registry._analyses.values()]
    assert size >= floor  # the logits count too, not only the attention maps
    # With room for about one entry, a second analysis evicts the first.
    monkeypatch.setattr(limits, "CACHE_BYTES", int(size * 1.5))
    registry.analysis("translate", checkpoint, ["a big dog sleeps under the old table"])
    assert len(registry._analyses) == 1
    assert sum(n for _, n in registry._analyses.values()) <= limits.CACHE_BYTES


def _held_while_computing(monkeypatch, registry: ModelRegistry) -> list[int]:
    """How many analyses the cache holds each time ``analyse`` starts (filled as it runs)."""
    from ui.serving import state as state_module

    held: list[int] = []
    real = state_module.analyse

    def counting(*args, **kwargs):
        held.append(len(registry._analyses))
        return real(*args, **kwargs)

    monkeypatch.setattr(state_module, "analyse", counting)
    return held


def test_an_analysis_over_the_bound_is_dropped_before_the_next_is_computed(monkeypatch):
    """Two analyses over the cache's bound (SmolLM2's at 512 tokens: 700 MB each) are never
    held at once: the kept one is dropped when another input's analysis starts."""
    from ui.serving import limits
    from ui.serving import state as state_module

    registry = ModelRegistry(torch.device("cpu"))
    checkpoint = registry.checkpoint("translate", None)
    monkeypatch.setattr(limits, "CACHE_BYTES", 1)  # every analysis is over the bound
    held_while_computing = _held_while_computing(monkeypatch, registry)
    counting = state_module.analyse
    first = registry.analysis("translate", checkpoint, ["the small cat sees a red ball"])
    assert registry.analysis("translate", checkpoint, ["the small cat sees a red ball"]) is first
    first_alive = weakref.ref(first)
    del first
    alive_while_computing = []
    monkeypatch.setattr(
        state_module,
        "analyse",
        lambda *a, **k: (
            alive_while_computing.append(first_alive() is not None) or counting(*a, **k)
        ),
    )
    registry.analysis("translate", checkpoint, ["a big dog sleeps under the old table"])
    assert held_while_computing == [0, 0]  # the first was not held while the second was made
    assert alive_while_computing == [False]  # nor anywhere else: its memory was free
    assert len(registry._analyses) == 1  # the newest is kept alone, for its next click


def test_an_analysis_whose_weights_pass_the_bound_is_computed_with_nothing_else_held(
    monkeypatch,
):
    """The others would be dropped once it is kept: they are dropped before it is computed.
    One whose weights fit leaves them (and the bound is what it was)."""
    from transformer.lab.inspection import least_captured_bytes
    from ui.serving import limits

    registry = ModelRegistry(torch.device("cpu"))
    checkpoint = registry.checkpoint("continue", None)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    short, long = "the small cat", "the small cat sees a red ball and a big dog sleeps " * 6
    registry.analysis("continue", checkpoint, [short])
    (small,) = [n for _, n in registry._analyses.values()]
    bound = max(small, least_captured_bytes(model, tokenizer, ["a big dog sleeps"])) + 1
    assert least_captured_bytes(model, tokenizer, [long]) > bound  # the premise
    monkeypatch.setattr(limits, "CACHE_BYTES", bound)
    held_while_computing = _held_while_computing(monkeypatch, registry)
    registry.analysis("continue", checkpoint, ["a big dog sleeps"])
    registry.analysis("continue", checkpoint, [long])
    assert held_while_computing == [1, 0]
    assert len(registry._analyses) == 1


def test_trained_here_is_offered_only_once_the_session_has_trained_a_model():
    from ui.serving.state import SessionModels

    registry = ModelRegistry("cpu", (), False)
    fresh = SessionModels()
    assert TRAINED_HERE not in registry.menu(fresh) and TRAINED_HERE not in registry.menu(None)
    assert registry.menu(fresh) == [n for n in registry.model_names if n != TRAINED_HERE]
    # A menu left on "trained here" falls back to the first model; a valid value is not sent.
    kept, moved = demo_module.model_menus(registry, fresh, "reverse", TRAINED_HERE)
    assert kept == {"__type__": "update", "choices": registry.menu(fresh)}
    assert moved["value"] == registry.menu(fresh)[0]
    fresh.trained = registry.checkpoint("reverse", None)  # what a finished training leaves
    assert registry.menu(fresh)[-1] == TRAINED_HERE
    (offered,) = demo_module.model_menus(registry, fresh, TRAINED_HERE)
    assert offered["choices"][-1] == TRAINED_HERE and "value" not in offered


# -- config.json sizes checked against the weights' header before anything is allocated --------

# (family, config.json changes, what the message names); each would allocate gigabytes or loop
# for minutes over the layers if the model were built before the weights were checked.
OVERSIZED = [
    ("bert", {"vocab_size": 5_000_000}, "vocab_size is 5,000,000"),
    ("gpt2", {"vocab_size": 5_000_000}, "vocab_size is 5,000,000"),
    ("bert", {"num_hidden_layers": 3_000_000}, "3,000,000 layers"),
    ("gpt2", {"n_layer": 3_000_000}, "3,000,000 layers"),
    ("marian", {"encoder_layers": 3_000_000}, "3,000,002 layers"),
    ("bert", {"hidden_size": 65_536, "num_attention_heads": 4}, "parameters"),
    ("gpt2", {"n_embd": 4_096 * 16, "n_inner": 4_000_000}, "parameters"),
]


@pytest.mark.parametrize(("family", "changes", "named"), OVERSIZED)
def test_an_oversized_config_is_refused_by_name_before_anything_is_allocated(
    tmp_path, hf_models, monkeypatch, family, changes, named
):
    import json

    from transformer.pretrained import PretrainedError, _common, load_pretrained, loading

    folder = shutil.copytree(hf_models[family], tmp_path / family)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))

    def never(*args, **kwargs):
        raise AssertionError("the model was built or its weights read before the sizes held")

    monkeypatch.setattr(loading, "Transformer", never)
    monkeypatch.setattr(_common.TensorReader, "get", never)
    with pytest.raises(PretrainedError, match=named.replace("(", r"\(")) as raised:
        load_pretrained(folder)
    assert "config.json" in str(raised.value)


def test_the_size_bound_holds_without_a_weights_file_to_compare(monkeypatch):
    """The absolute bound: a header as large as the config still cannot ask for more than
    MAX_PARAMETERS."""
    from transformer.core.config import ModelConfig
    from transformer.pretrained import PretrainedError, _common

    config = ModelConfig(
        src_vocab_size=100, tgt_vocab_size=100, d_model=4096, n_heads=4, d_ff=16384,
        n_encoder_layers=2, n_decoder_layers=0, architecture="encoder-only",
    )  # fmt: skip
    shapes = {f"encoder.layer.{i}.w": (4096, 4096) for i in range(2)}
    shapes["embeddings.word_embeddings.weight"] = (100, 4096)
    monkeypatch.setattr(_common, "MAX_PARAMETERS", 1_000_000)
    with pytest.raises(PretrainedError, match="at most 1,000,000"):
        _common.check_config_against_header(config, shapes)
    monkeypatch.setattr(_common, "MAX_PARAMETERS", 10**12)
    with pytest.raises(PretrainedError, match="holds 33,964,032 values"):
        _common.check_config_against_header(config, shapes)


def test_every_family_s_real_config_passes_the_size_check(hf_models):
    """The lower bound on parameters is below every family's real count (no false refusal)."""
    from transformer.pretrained import load_pretrained
    from transformer.pretrained._common import parameter_floor

    for folder in hf_models.values():
        checkpoint = load_pretrained(folder)
        real = sum(p.numel() for p in checkpoint.model.parameters())
        assert parameter_floor(checkpoint.model.config) <= real


def test_a_released_registry_lets_its_models_go_and_reads_them_again_when_asked(hf_models):
    """A closed app stays reachable (FastAPI caches its routes' dependencies), and with it its
    registry: ``release`` drops what the registry read, so the memory can go."""
    registry = ModelRegistry(torch.device("cpu"), [str(hf_models["gpt2"])])
    checkpoint = registry.checkpoint("gpt2", None)
    registry.analysis("translate", registry.checkpoint("translate", None), ["a big dog sleeps"])
    model = weakref.ref(checkpoint.model)
    assert registry._analyses
    del checkpoint
    registry.release()
    assert not registry.pretrained and not registry._analyses
    gc.collect()
    assert model() is None, "the released model is still held"
    again = registry.checkpoint("gpt2", None)  # asked for again: read again
    assert again.info["family"] == "gpt2" and registry.pretrained == {"gpt2": again}


def test_a_released_registry_starts_no_other_model_in_the_background(monkeypatch, hf_models):
    registry = ModelRegistry(torch.device("cpu"), [str(hf_models["bert"]), str(hf_models["gpt2"])])
    read: list[str] = []
    for name in ("bert", "gpt2"):
        loader = registry._loaders[name]

        def slow(loader=loader, name=name):
            read.append(name)
            time.sleep(0.3)
            return loader()

        registry._loaders[name] = slow
    monkeypatch.setattr("ui.serving.state.PRELOAD_FIRST", "bert")
    registry._loaders = {name: registry._loaders[name] for name in ("bert", "gpt2")}
    registry.preload()
    deadline = time.monotonic() + 30
    while not read and time.monotonic() < deadline:  # the first model is being read
        time.sleep(0.01)
    registry.release()
    assert not registry.preloading and read == ["bert"] and not registry.pretrained


def test_launched_releases_the_registry_of_the_app_it_closes(monkeypatch):
    from ui import testing

    events: list[str] = []

    class Registry:
        def release(self) -> None:
            events.append("release")

    class Demo:
        model_registry = Registry()

        def launch(self, **kwargs) -> None:
            events.append("launch")

        def close(self) -> None:
            events.append("close")

    # glibc keeps what a process frees: the freed models are given back to the system. Only
    # this thread's trims count: another app's session sweeper on this worker may trim too.
    here = threading.current_thread()

    def trim() -> None:
        if threading.current_thread() is here:
            events.append("trim")

    monkeypatch.setattr("ui.serving.memory.glibc_trim", lambda: trim)
    with testing.launched(Demo()):
        events.append("serving")
    assert events == ["launch", "serving", "close", "release", "trim"]
