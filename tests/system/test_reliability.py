"""Reliability: bad input through every named endpoint, faults (disconnects, cancelled training,
out-of-memory and device errors, broken bundled checkpoints) and the security defaults.

Every bad input must come back as a normal result or as a clear message, with no traceback and
no file path in it, and the server must go on serving: another session's cheap request is
answered again and again while the bad inputs arrive, and each sending session is answered
after its last.
"""

from __future__ import annotations

import functools
import html
import io
import itertools
import json
import logging
import pickle
import re
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import httpx
import pytest
import torch
from conftest import REPOSITORY as ROOT
from gradio_client import Client, handle_file
from serving import (
    CROSS,
    GENERATE,
    TOKENIZE,
    Tally,
    api_client,
    call,
    leaks,
    raw_call,
    run_async,
    serve,
    still_serves,
)

import app as visualiser
from transformer.training import bundled as bundled_module
from transformer.training.live import TRAINING_THREAD
from ui.serving import errors, limits, state
from ui.tabs import positions
from ui.tabs import tokenize as tokenize_tab

# A system test: the app over HTTP, over a thousand requests; `-m "not slow"` leaves it out.
pytestmark = pytest.mark.slow


BAD_TEXTS = {
    "empty": "",
    "whitespace": "   \n\t  \u3000",
    "100,000 characters": "a" * 100_000,
    "emoji": "🤖🧠✨" * 30 + " 👩‍👩‍👧‍👦 🇺🇳",
    "CJK": "注意力机制就是你所需要的一切。トランスフォーマー",
    "right-to-left": "مرحبا بالعالم שלום עולם",
    "combining marks": "e\u0301\u0302\u0303" * 20 + "a\u0338" * 10,
    "NUL": "\x00",
    "control characters": "a\x00b\x01\x07\x1b[31m\x7f\x9f\x08",
    "bidi and zero-width": "\u202eevil\u202c \u200b\u200d\ufeff\u2028x",
}
LONE_SURROGATES = "a\ud800b\udfff"  # valid JSON ("\ud800"), not valid UTF-8: raw HTTP only
BAD_NUMBERS = [-1e12, 1e12, None, "x"]
RAW_NUMBERS = [float("nan"), float("inf")]  # gradio_client cannot send these


@dataclass
class Endpoint:
    """A named endpoint: valid arguments, and which of them are strings and which numbers."""

    args: list
    strings: list[int]
    numbers: list[int] = field(default_factory=list)
    trained: bool = False  # needs a session that has trained a model (the snapshot slider)
    api: str = ""  # the endpoint's name, when the key says more (which model it runs)


# Generate's numbers: temperature, top-k, top-p, beam width, new tokens, seed, layer, head.
GEN_NUMBERS = [3, 4, 5, 6, 7, 8, 9, 10]
MINILM = "all-MiniLM-L6-v2"
ENCODER = "encoder self-attention"
DECODER = "decoder masked self-attention"
SHORT_GENERATE = [*GENERATE[:7], 3, *GENERATE[8:]]  # 3 new tokens: the matrix is about input


# Generate's four buttons read their controls with one reader: /generate_step gets every bad
# number in every place; the other three every bad text, and bad numbers in two places (a
# decoding control and a view's), enough to show each goes through that reader.
GEN_SOME_NUMBERS = [3, 9]
# A pretrained folder is a different model behind the same reader: every bad text (its own
# tokenizer reads it), and bad numbers where the range is the model's own (layer and head).
GEN_MODEL_NUMBERS = [9, 10]


def _generate_step(model: str, decoding: list) -> Endpoint:
    """``/generate_step`` on ``model`` with ``decoding`` (strategy, temperature, top-k, top-p,
    beam width): 3 new tokens, seed 0, layer 2, head 4."""
    args = ["the cat", model, *decoding, 3, 0, 2, 4, False]
    return Endpoint(args, [0, 1, 2], GEN_MODEL_NUMBERS, api="/generate_step")


ENDPOINTS = {
    "/tokenize": Endpoint(TOKENIZE, strings=[0, 1, 4], numbers=[2, 5]),
    "/learn_bpe": Endpoint(["low lower lowest\nnewer wider", 20, "lowest"], [0, 2], [1]),
    "/positional_encoding": Endpoint(
        [64, 32, 10000, "0, 1, 5", "cosine", False], [3, 4], [0, 1, 2]
    ),
    "/embeddings": Endpoint(["the small cat", "translate", False], [0, 1]),
    "/attention": Endpoint(
        ["a b c\nd e", "reverse", CROSS, 1, 1, 1, [], False], [0, 1, 2], [3, 4, 5]
    ),
    "/attention_grid": Endpoint(["a b c\nd e", "reverse", CROSS, 1, False], [0, 1, 2], [3]),
    "/generate": Endpoint(SHORT_GENERATE, [0, 1, 2], GEN_SOME_NUMBERS),
    "/generate_step": Endpoint(SHORT_GENERATE, [0, 1, 2], GEN_NUMBERS),
    "/generate_back": Endpoint(SHORT_GENERATE, [0, 1, 2], GEN_SOME_NUMBERS),
    "/generate_reset": Endpoint(SHORT_GENERATE, [0, 1, 2], GEN_SOME_NUMBERS),
    "/teacher_forcing": Endpoint(["the small cat", "translate", "le minou petol"], [0, 1, 2]),
    "/train": Endpoint(["reverse", 20, 0, False], [0], [1, 2]),
    "/snapshot": Endpoint([0, "a b c", False], [1], [0], trained=True),
    "/model_info": Endpoint(["reverse"], [0]),
    "/inside_layer": Endpoint(
        ["the small cat", "translate", "decoder", 2, 3, "2", False], [0, 1, 2, 5], [3, 4]
    ),
    "/attention mistake": Endpoint(
        ["a b c\nd e", "reverse", CROSS, 1, 1, 1, [], False, "scores ÷ √d_model"],
        [0, 1, 2, 8],
        [3, 4, 5],
        api="/attention",
    ),
    # The pretrained models: the shipped MiniLM (BERT family, 6 layers x 12 heads, attention
    # on the encoder only) and tiny GPT-2 and Marian folders added as `--model` adds them.
    "/embeddings MiniLM": Endpoint(["the small cat", MINILM, False], [0, 1], api="/embeddings"),
    "/attention MiniLM": Endpoint(
        ["the cat sat\na dog", MINILM, ENCODER, 6, 8, 2, ["padding mask off"], False],
        [0, 1, 2],
        [3, 4, 5],
        api="/attention",
    ),
    "/attention_grid MiniLM": Endpoint(
        ["the cat sat\na dog", MINILM, ENCODER, 2, False], [0, 1, 2], [3], api="/attention_grid"
    ),
    "/model_info MiniLM": Endpoint([MINILM], [0], api="/model_info"),
    "/inside_layer GPT-2 folder": Endpoint(
        ["the cat sat", "gpt2", "decoder", 2, 4, "1", False],
        [0, 1, 2, 5],
        [3, 4],
        api="/inside_layer",
    ),
    "/attention GPT-2 folder": Endpoint(
        ["the cat sat", "gpt2", DECODER, 2, 4, 1, [], False], [0, 1, 2], [3, 4, 5], api="/attention"
    ),
    "/generate_step GPT-2 folder": _generate_step("gpt2", ["sample", 0.8, 5, 0.9, 2]),
    "/attention Marian folder": Endpoint(
        ["the cat sat", "marian", CROSS, 2, 4, 1, [], False], [0, 1, 2], [3, 4, 5], api="/attention"
    ),
    "/generate_step Marian folder": _generate_step("marian", ["greedy", 1.0, 0, 1.0, 3]),
    "/teacher_forcing Marian folder": Endpoint(
        ["the cat sat", "marian", "sat the cat"], [0, 1, 2], api="/teacher_forcing"
    ),
}
# The Tokenize tab's real tokenizers (BERT's WordPiece, GPT-2's byte-level BPE, cl100k_base),
# whichever it offers: every choice that is not bundled, trained live or uploaded.
REAL_TOKENIZERS = [
    label
    for label, value in tokenize_tab.TOKENIZER_CHOICES.items()
    if not (isinstance(value, tuple) and value and value[0] in {"bundled", "train", "upload"})
]
for _label in REAL_TOKENIZERS:
    ENDPOINTS[f"/tokenize {_label}"] = Endpoint(
        ["the cat sat", _label, 400, None, "(none)", 5], [0], [5], api="/tokenize"
    )
FIGURES: dict[str, int] = {}  # inputs tried per endpoint, printed for the README


@pytest.fixture(scope="module")
def server(hf_models):
    with serve(models=(str(hf_models["gpt2"]), str(hf_models["marian"]))) as (demo, url):
        yield demo, url


def test_the_pretrained_models_answer_their_valid_arguments(client):
    """The bad-input matrix below varies one argument at a time from these: each works."""
    for key, endpoint in ENDPOINTS.items():
        if endpoint.trained or " " not in key:  # the bundled models have tests of their own
            continue
        ok, result = call(client, endpoint.api or key, *endpoint.args)
        assert ok, (key, result)


@pytest.fixture(scope="module")
def url(server):
    return server[1]


@pytest.fixture(scope="module")
def client(url):
    return api_client(url)


WORKERS = 6


@pytest.fixture(scope="module")
def pool(url):
    """Sessions that send the bad-input matrix in parallel (one thread each)."""
    return [api_client(url) for _ in range(WORKERS)]


@pytest.fixture(scope="module")
def trained_client(url):
    """A session that has trained a model, so the snapshot slider is live."""
    trained = api_client(url)
    updates = list(trained.submit("reverse", 20, 0, False, api_name="/train"))
    assert "Done: 20 steps" in updates[-1][0]
    return trained


def _cases(endpoint: Endpoint) -> list[tuple[str, list, bool]]:
    """(label, arguments, via raw HTTP) for every bad value in every position."""
    cases = []
    for position in endpoint.strings:
        for label, text in BAD_TEXTS.items():
            args = list(endpoint.args)
            args[position] = text
            cases.append((f"arg {position} {label}", args, False))
        args = list(endpoint.args)
        args[position] = LONE_SURROGATES
        cases.append((f"arg {position} lone surrogates", args, True))
    for position in endpoint.numbers:
        for value in BAD_NUMBERS + RAW_NUMBERS:
            args = list(endpoint.args)
            args[position] = value
            cases.append((f"arg {position} = {value!r}", args, isinstance(value, float)))
    return cases


def _check(name: str, label: str, args: list, ok: bool, result, out_of_range: bool) -> str | None:
    """Why this outcome is wrong, or None."""
    if ok:
        if out_of_range:
            return f"{name} {label}: out-of-range number accepted"
        return None
    message = str(result)
    if found := leaks(message):
        return f"{name} {label}: message leaks {found}: {message[:300]!r}"
    if "something went wrong" in message or not message.strip():
        return f"{name} {label}: unhandled error: {message[:300]!r}"
    return None


@pytest.fixture(scope="module")
def watchdog(url):
    """A session of its own that sends a cheap request again and again during each matrix."""
    return api_client(url)


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_bad_input_gets_a_clear_message_and_the_server_keeps_serving(
    url, pool, trained_client, watchdog, name
):
    endpoint = ENDPOINTS[name]
    tally = Tally()

    api = endpoint.api or name

    def run(client: Client, cases: list[tuple[str, list, bool]]) -> None:
        for label, args, raw in cases:
            ok, result = raw_call(url, api, *args) if raw else call(client, api, *args)
            out_of_range = any(isinstance(a, float) and abs(a) >= 1e12 for a in args)
            tally.add(name, _check(name, label, args, ok, result, out_of_range))
        still_serves(client)  # after its last bad input, this session is still answered

    cases = _cases(endpoint)
    clients = [trained_client] if endpoint.trained else pool
    done = threading.Event()
    answered: list[int] = []
    broken: list[BaseException] = []

    def watch() -> None:
        # While the bad inputs arrive, another session's cheap request keeps being answered:
        # the server is up and its queue moves during the matrix, not only after it.
        try:
            while not done.is_set():
                still_serves(watchdog)
                answered.append(1)
                done.wait(0.2)
        except BaseException as error:  # reported by the test's own thread below
            broken.append(error)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(len(clients)) as threads:
            chunks = [cases[i :: len(clients)] for i in range(len(clients))]
            list(threads.map(run, clients, chunks))
    finally:
        done.set()
        watcher.join()
    assert not broken, f"a cheap request failed while the bad inputs were sent: {broken[0]!r}"
    assert answered, "no cheap request was answered while the bad inputs were sent"
    FIGURES[name] = tally.total
    print(f"\n[reliability] {name}: {tally.total} bad inputs, {len(tally.failures)} failures")
    assert not tally.failures, "\n".join(tally.failures)


# -- uploads ---------------------------------------------------------------------------------


class _Tripwire:
    """Unpickling this creates a file: proof that a pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _upload(client: Client, path: Path) -> tuple[bool, object]:
    return call(
        client,
        "/tokenize",
        "ab ba",
        "uploaded tokenizer.json",
        400,
        handle_file(str(path)),
        "(none)",
        5,
    )


def test_uploads_that_are_not_what_their_name_says(client, tmp_path):
    marker = tmp_path / "UNPICKLED"
    buffer = io.BytesIO()
    torch.save({"weights": torch.zeros(3)}, buffer)
    valid = (ROOT / "assets/models/translate/tokenizer.json").read_text(encoding="utf-8")
    files = {
        "pickle protocol 0 (ASCII)": (
            "p0.json",
            pickle.dumps(_Tripwire(marker), protocol=0),
            "not JSON",
        ),
        "pickle protocol 5": ("p5.json", pickle.dumps(_Tripwire(marker), protocol=5), "not UTF-8"),
        "torch.save .pt": ("weights.json", buffer.getvalue(), "not UTF-8"),
        "pickle named .pt": ("model.pt", pickle.dumps(_Tripwire(marker)), "Invalid file type"),
        "PNG": ("image.json", b"\x89PNG\r\n\x1a\n" + bytes(64), "not UTF-8"),
        "empty": ("empty.json", b"", "not JSON"),
        "not JSON": ("text.json", b"hello, world", "not JSON"),
        "JSON list": ("list.json", b"[1, 2, 3]", "not an object"),
        "JSON, not a tokenizer": (
            "config.json",
            b'{"vocab_size": 3, "architectures": []}',
            "config.json",
        ),
        "nested 100,000 deep": ("deep.json", b"[" * 100_000, "nested too deeply"),
        "truncated tokenizer": ("cut.json", valid[: len(valid) // 2].encode(), "not JSON"),
        "no model vocabulary": ("novocab.json", b'{"model": {"type": "BPE"}}', "vocab"),
    }
    for label, (filename, content, expected) in files.items():
        path = tmp_path / filename
        path.write_bytes(content)
        ok, message = _upload(client, path)
        assert not ok, label
        assert expected in message, (label, message)
        assert not leaks(message), (label, message)
        still_serves(client)
    assert not marker.exists(), "an uploaded pickle was unpickled"


def test_a_tokenizer_without_replay_still_tokenizes(client, tmp_path):
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    word_level = Backend(models.WordLevel({"ab": 0, "ba": 1, "[UNK]": 2}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    path.write_text(word_level.to_str(), encoding="utf-8")
    ok, result = _upload(client, path)
    assert ok, result
    stats, *_, replay_md = result
    assert "2 tokens" in stats and "No replay for this tokenizer" in replay_md


def test_upload_size_limits(client, url, tmp_path, monkeypatch):
    options = visualiser.launch_options()
    assert options["max_file_size"] == f"{limits.MAX_UPLOAD_BYTES >> 20}mb"
    # gradio refuses a bigger upload at the door, before any handler runs ...
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (limits.MAX_UPLOAD_BYTES + 1))
    with big.open("rb") as handle:
        response = httpx.post(f"{url}gradio_api/upload", files={"files": handle}, timeout=60)
    assert response.status_code == 413, response.text[:200]
    # ... and the app checks the size of what it reads too (a limit set lower for this test).
    monkeypatch.setattr(limits, "MAX_UPLOAD_BYTES", 1000)
    small = tmp_path / "tokenizer.json"
    small.write_text(json.dumps({"model": {"vocab": {f"t{i}": i for i in range(200)}}}))
    ok, message = _upload(client, small)
    assert not ok and "larger than the limit of 1,000 bytes" in message, message
    still_serves(client)


def test_a_path_that_was_not_uploaded_is_never_read(url):
    for path in ["/etc/passwd", str(ROOT / "assets/models/translate/tokenizer.json"), "../app.py"]:
        file_data = {"path": path, "meta": {"_type": "gradio.FileData"}}
        ok, message = raw_call(
            url, "/tokenize", "ab", "uploaded tokenizer.json", 400, file_data, "(none)", 5
        )
        assert not ok, path
        assert "not uploaded" in message or "not in the upload folder" in message, message
    for name in ["../../etc/passwd", "/etc/passwd", "assets/models/translate"]:
        ok, message = raw_call(url, "/model_info", name)
        assert not ok and "not in the list of choices" in message


# -- numbers the UI cannot send ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "args", "message"),
    [
        ("/generate_step", {3: float("nan")}, "temperature must be a number|between"),
        ("/generate_step", {5: float("nan")}, "top-p must be"),
        ("/generate_step", {7: float("nan")}, "max tokens must be a number"),
        # gradio's Number refuses it: the message names the input, not Python's types
        ("/generate_step", {8: float("inf")}, "Seed must be a number"),
        ("/train", {1: float("nan")}, "steps must be a number"),
        ("/positional_encoding", {2: float("nan")}, "base must be"),
    ],
)
def test_nan_and_infinity_are_refused_by_name(url, api, args, message):
    base = {
        "/generate_step": GENERATE,
        "/train": ["reverse", 20, 0, False],
        "/positional_encoding": [64, 32, 10000, "0", "cosine", False],
    }[api]
    values = list(base)
    for index, value in args.items():
        values[index] = value
    ok, result = raw_call(url, api, *values)
    assert not ok and re.search(message, result), result


# -- faults ----------------------------------------------------------------------------------


def _training_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(TRAINING_THREAD)]


def _wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def _join_and_drop(url: str, api_name: str, data: list, updates: int) -> None:
    """Start a streaming request over gradio's queue protocol, read ``updates`` progress
    messages, then drop the connection as a closed browser tab does."""
    config = httpx.get(f"{url}config").json()
    fn_index = next(
        i
        for i, dep in enumerate(config["dependencies"])
        if dep.get("api_name") == api_name.lstrip("/")
    )
    session = f"drop{time.monotonic_ns()}"
    joined = httpx.post(
        f"{url}gradio_api/queue/join",
        json={"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None},
    )
    assert joined.status_code == 200, joined.text
    seen = 0
    with httpx.stream(
        "GET", f"{url}gradio_api/queue/data", params={"session_hash": session}, timeout=60
    ) as stream:
        for line in stream.iter_lines():
            if '"process_generating"' in line:
                seen += 1
                if seen >= updates:
                    break  # leaving the block closes the connection mid-stream


def test_a_client_that_disconnects_mid_training_stops_the_training(url, client):
    assert not _training_threads()
    _join_and_drop(url, "/train", ["reverse", 3000, 0, False, None], updates=2)
    assert _wait_until(lambda: not _training_threads(), 30), (
        "the training thread outlived its client"
    )
    still_serves(client)
    updates = list(client.submit("reverse", 20, 0, False, api_name="/train"))
    assert "Done: 20 steps" in updates[-1][0]


def test_a_client_that_disconnects_mid_generation_leaves_nothing_running(server, client):
    demo, url = server
    _join_and_drop(url, "/generate", [*GENERATE[:7], 128, *GENERATE[8:], None, None], updates=2)
    queue = demo._queue
    assert _wait_until(lambda: not any(queue.active_jobs), 30), "the generation outlived its client"
    still_serves(client)


def test_cancelling_a_training_leaves_the_app_usable(url):
    trainer = api_client(url)
    job = trainer.submit("reverse", 3000, 0, False, api_name="/train")
    assert _wait_until(lambda: len(job.outputs()) >= 2, 60), "training did not report progress"
    job.cancel()
    assert _wait_until(lambda: not _training_threads(), 30), "the cancelled training runs on"
    # gradio_client ends the cancelled job's stream on its own thread; a call made on the same
    # client before that ends can be ended with it (a busy machine showed it), so wait.
    assert _wait_until(job.done, 30), "the cancelled job never ended"
    still_serves(trainer)
    updates = list(trainer.submit("reverse", 20, 1, False, api_name="/train"))
    assert "Done: 20 steps" in updates[-1][0]


def test_time_limits_bound_training_and_generation(url, monkeypatch):
    limited = api_client(url)
    monkeypatch.setattr(limits, "TRAINING_TIME_LIMIT_S", 0.0)
    updates = list(limited.submit("reverse", 3000, 0, False, api_name="/train"))
    assert "Stopped at the time limit of 0 s" in updates[-1][0]
    monkeypatch.setattr(limits, "GENERATION_TIME_LIMIT_S", 0.0)
    updates = list(limited.submit(*GENERATE, api_name="/generate"))
    assert "(1 step)" in updates[-1][0] and "**Paused** at the time limit" in updates[-1][0]


def _fails_once(monkeypatch, module, name: str, error: Exception) -> None:
    original = getattr(module, name)
    calls = {"n": 0}

    @functools.wraps(original)
    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, flaky)


_FRESH = itertools.count()


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
            "out of memory",
        ),
        (MemoryError(), "out of memory"),
        (RuntimeError("CUDA error: device-side assert triggered"), "accelerator reported an error"),
        (RuntimeError("MPS backend out of memory"), "out of memory"),
    ],
)
def test_out_of_memory_and_device_errors_become_messages(client, monkeypatch, error, message):
    _fails_once(monkeypatch, state, "analyse", error)
    # A fresh input each time: the app caches analyses per input, and a cached one would not
    # reach the failing call.
    letters = [
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
        "g",
        "h",
        "i",
        "j",
        "k",
        "l",
        "m",
        "n",
        "o",
        "p",
        "q",
        "r",
        "s",
        "t",
    ]
    fresh = " ".join(letters[next(_FRESH) % 20 :][:4] + ["a"] * (next(_FRESH) % 5))
    args = [fresh, "reverse", CROSS, 1, 1, 1, [], False]
    ok, result = call(client, "/attention", *args)
    assert not ok and message in result and not leaks(result), result
    ok, result = call(client, "/attention", *args)
    assert ok, result  # the next request works


def test_an_unexpected_error_is_a_message_without_its_traceback(client, monkeypatch):
    _fails_once(monkeypatch, positions, "sinusoidal_table", KeyError(f"{ROOT}/secret"))
    ok, result = call(client, "/positional_encoding", 64, 32, 10000, "0", "cosine", False)
    assert not ok and "something went wrong (KeyError)" in result and not leaks(result)
    assert call(client, "/positional_encoding", 64, 32, 10000, "0", "cosine", False)[0]


def test_messages_are_scrubbed_of_paths_html_and_length():
    scrub = errors.scrub
    assert (
        scrub("cannot read /tmp/gradio/0a1b/tokenizer.json: denied")
        == "cannot read tokenizer.json: denied"
    )
    assert scrub(r"C:\Users\me\tokenizer.json is bad") == "tokenizer.json is bad"
    assert scrub(f"{Path.cwd()}/assets/models/x") == "./assets/models/x"
    assert scrub("1,000 tokens/s, layer 1/2") == "1,000 tokens/s, layer 1/2"
    assert scrub("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)&gt;"
    assert len(scrub("x" * 100_000)) == errors.MAX_MESSAGE_CHARS


def _copy_bundled(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    shutil.copytree(bundled_module.BUNDLED_DIR, folder)
    return folder


def _damage(folder: Path, name: str, how: str, monkeypatch) -> None:
    checkpoint = folder / name
    if how == "missing":
        shutil.rmtree(checkpoint)
    elif how == "corrupted weights":
        weights = checkpoint / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    elif how == "config not JSON":
        (checkpoint / "config.json").write_text("{ not json")
    elif how == "unreadable":  # an error the loader does not expect: it must not stop start-up
        original = bundled_module.load_checkpoint

        def load(path, device="cpu"):
            if Path(path).name == name:
                raise PermissionError(13, "Permission denied", str(path))
            return original(path, device)

        monkeypatch.setattr(bundled_module, "load_checkpoint", load)


@pytest.mark.parametrize("how", ["missing", "corrupted weights", "config not JSON", "unreadable"])
def test_a_broken_bundled_checkpoint_is_reported_by_name(tmp_path, monkeypatch, how):
    folder = tmp_path / "models"
    shutil.copytree(bundled_module.BUNDLED_DIR, folder)
    _damage(folder, "reverse", how, monkeypatch)
    loaded = bundled_module.load_bundled("cpu", folder)
    assert set(loaded.models) == {"translate", "continue"}
    assert set(loaded.errors) == {"reverse"}
    assert not leaks(loaded.errors["reverse"]) and str(tmp_path) not in loaded.errors["reverse"]


def test_the_app_starts_without_its_broken_checkpoints(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    shutil.copytree(bundled_module.BUNDLED_DIR, folder)
    _damage(folder, "reverse", "corrupted weights", monkeypatch)
    _damage(folder, "continue", "unreadable", monkeypatch)
    monkeypatch.setattr(
        state, "load_bundled", functools.partial(bundled_module.load_bundled, folder=folder)
    )
    with serve() as (_, url):
        client = api_client(url)
        for name in ["reverse", "continue"]:
            ok, message = call(client, "/model_info", name)
            # dropped from the menu: gradio's own refusal, in words (no Python list)
            assert not ok and f"{name} is not in the list of choices" in message, message
            assert "['translate'" not in message
            assert not leaks(message) and str(tmp_path) not in message
        ok, result = call(client, "/attention", "the cat", "translate", CROSS, 1, 1, 1, [], False)
        assert ok, result
        config = json.dumps(httpx.get(f"{url}config").json())
        assert "bundled model **reverse** unavailable" in config
        assert "bundled model **continue** unavailable" in config


# -- security defaults -----------------------------------------------------------------------


def test_the_server_binds_loopback_and_does_not_share_by_default(main_launches):
    launched = main_launches
    visualiser.main([])
    assert launched["server_name"] == "127.0.0.1"
    assert launched["share"] is False
    assert launched["max_file_size"] == visualiser.launch_options()["max_file_size"]
    visualiser.main(["--host", "0.0.0.0", "--share"])
    assert launched["server_name"] == "0.0.0.0" and launched["share"] is True


def test_queue_and_concurrency_limits(server):
    demo, _ = server
    assert demo._queue.max_size == limits.QUEUE_SIZE
    # Four workers, and one more for each request that may sleep on the costly pool.
    assert demo._queue.default_concurrency_limit == 4 + limits.COSTLY_PASS_CAPACITY
    by_name = {fn.api_name: fn for fn in demo.fns.values()}
    assert by_name["train"].concurrency_limit == 1  # one training at a time, all sessions together
    # Run to the end waits in the costly queue (one at a time on a CPU), never beside a Step.
    assert by_name["generate"].concurrency_id == "costly"
    assert by_name["generate"].concurrency_limit == 1
    # max tokens is a slider up to 128 and each run has a wall-clock limit
    assert 0 < limits.GENERATION_TIME_LIMIT_S <= 120
    assert 0 < limits.TRAINING_TIME_LIMIT_S <= 600


def test_nothing_unpickles():
    """Only safetensors and JSON are ever loaded: no pickle, no torch.load, anywhere."""
    forbidden = re.compile(
        r"\b(torch\.load|pickle\.loads?|import pickle|from pickle|dill|joblib\.load|allow_pickle\s*=\s*True|weights_only\s*=\s*False)\b"
    )
    offenders = []
    for path in [
        ROOT / "app.py",
        *(ROOT / "ui").rglob("*.py"),
        *(ROOT / "transformer").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
    ]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if forbidden.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, offenders


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    """The figures for the README's reliability section, printed once the module has run (with
    -s to see them); not a test, since printing cannot fail."""
    yield
    if FIGURES:
        total = sum(FIGURES.values())
        print(
            f"\n[reliability] bad inputs: {total} over {len(FIGURES)} endpoints (each followed by a request that succeeded)"
        )


# -- the error policy: refused input, bugs, panics, and never an error in place of a control ----


def test_a_refused_input_is_one_log_line_and_a_bug_is_logged_with_its_traceback(caplog):
    refused = errors.friendly(lambda: (_ for _ in ()).throw(errors.InputError("layer too big")))
    with caplog.at_level("INFO", logger="visualiser"), pytest.raises(Exception) as raised:
        refused()
    assert raised.value.message == "layer too big" and raised.value.print_exception is False
    assert [r.exc_info for r in caplog.records] == [None]  # one line, no traceback
    caplog.clear()

    def bug():
        return [][1]  # a programmer's IndexError is not the user's fault

    with caplog.at_level("INFO", logger="visualiser"), pytest.raises(Exception) as raised:
        errors.friendly(bug)()
    assert "something went wrong (IndexError)" in raised.value.message
    assert "list index" not in raised.value.message
    (record,) = caplog.records
    assert record.exc_info is not None and record.exc_info[0] is IndexError  # the traceback
    with pytest.raises(Exception) as raised:  # a plain ValueError is a bug too
        errors.friendly(lambda: int("x"))()
    assert "something went wrong (ValueError)" in raised.value.message


def test_the_tokenizers_rust_panic_is_a_message(tmp_path):
    """pyo3's PanicException is a BaseException: the wrapper must catch it, not let it escape
    (gradio then never answers the request)."""
    from tokenizers import Regex, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    backend = Backend(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("(a|a)+$"), behavior="isolated")
    path = tmp_path / "tokenizer.json"
    path.write_text(backend.to_str(), encoding="utf-8")
    with pytest.raises(BaseException) as panic:
        backend.encode("a" * 40 + "c")
    assert not isinstance(panic.value, Exception)  # the case the policy must cover
    registry = state.ModelRegistry("cpu")
    upload = "uploaded tokenizer.json"
    with pytest.raises(Exception) as raised:
        tokenize_tab.tokenize(registry, "a" * 40 + "c", upload, 400, str(path), "(none)", 5)
    assert "cannot encode the text" in raised.value.message
    view = tokenize_tab.tokenize_view(registry, "a" * 40 + "c", upload, 400, str(path), "(none)")
    assert "cannot encode the text" in view[-1]
    # and the decorator catches any other BaseException that is not the server stopping
    panicking = errors.friendly(
        lambda: (_ for _ in ()).throw(type("PanicException", (BaseException,), {})("boom"))
    )
    with pytest.raises(Exception) as raised:
        panicking()
    assert "tokenizer failed" in raised.value.message
    with pytest.raises(KeyboardInterrupt):
        errors.friendly(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))()


def test_tokenizer_work_is_bounded_in_time(monkeypatch):
    registry = state.ModelRegistry("cpu")
    monkeypatch.setattr(limits, "TOKENIZER_TIME_LIMIT_S", 0.05)
    slow = threading.Event()
    original = tokenize_tab.handlers.highlighted

    def stuck(tokenizer, text):
        slow.wait(2)
        return original(tokenizer, text)

    monkeypatch.setattr(tokenize_tab.handlers, "highlighted", stuck)
    with pytest.raises(Exception) as raised:
        tokenize_tab.tokenize(registry, "the cat", TOKENIZE[1], 400, None, "(none)", 5)
    slow.set()
    assert "took longer than 0.05 s" in raised.value.message


def _answers_again(registry, *args) -> tuple:
    """``/tokenize`` on ``args`` once the tokenizer threads are free again (a generous limit:
    the stand-ins released, the work they held finishes at once)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return tokenize_tab.tokenize(registry, *args)
        except Exception as error:
            if "busy" not in error.message or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.parametrize("slow_step", ["parsing an upload", "training live"])
def test_choosing_the_tokenizer_is_bounded_in_time_too(monkeypatch, tmp_path, slow_step):
    """The first parse of an uploaded tokenizer.json (up to 21 s for a large
    one) and training one live ran before the time limit applied, so a request could wait as
    long as they took. A large file, or a stand-in that waits for the test, plays the slow step."""
    from ui.tabs.tokenize import choices

    registry = state.ModelRegistry("cpu")
    release = threading.Event()
    if slow_step == "parsing an upload":
        # GPT-2's tokenizer.json (3.6 MB) takes a worker process about a second to check and
        # parse, long past the limit below; the worker is stopped there and replaced.
        from transformer.text.real_tokenizers import load_real_tokenizer

        path = tmp_path / "tokenizer.json"
        path.write_text(load_real_tokenizer("gpt2").to_json_str() + "\n" * 7, encoding="utf-8")
        args = ("a b", "uploaded tokenizer.json", 400, str(path), "(none)", 1)
    else:
        original_training = choices.corpus_tokenizer

        def slow_training(algorithm, vocab_size):
            release.wait(5)
            return original_training(algorithm, vocab_size)

        monkeypatch.setattr(choices, "corpus_tokenizer", slow_training)
        args = ("the cat", TOKENIZE[1], 400, None, "(none)", 1)
    monkeypatch.setattr(limits, "TOKENIZER_TIME_LIMIT_S", 0.05)
    try:
        with pytest.raises(Exception) as raised:
            tokenize_tab.tokenize(registry, *args)
        assert "took longer than 0.05 s" in raised.value.message
    finally:
        release.set()
    monkeypatch.setattr(limits, "TOKENIZER_TIME_LIMIT_S", 60.0)
    stats, *_ = _answers_again(registry, *args)  # and the tokenizer serves once it is free
    assert "tokens" in stats


def test_runaway_work_holding_every_tokenizer_thread_is_answered_at_once(monkeypatch):
    """Work past its limit cannot be stopped and keeps its thread: once every tokenizer thread
    holds such work, a new request is told at once that the tokenizer is busy, instead of
    waiting behind them for the whole limit (and starting nothing)."""
    registry = state.ModelRegistry("cpu")
    # The tokenizer chosen once at the normal limit: on a busy machine its first choice alone
    # (trained live) outlasted 0.05 s, so a runaway never started and no thread was held.
    tokenize_tab.tokenize(registry, "warm", TOKENIZE[1], 400, None, "(none)", 1)
    monkeypatch.setattr(limits, "TOKENIZER_TIME_LIMIT_S", 0.05)
    release = threading.Event()
    started: list[str] = []
    original = tokenize_tab.handlers.highlighted

    def runaway(tokenizer, text):
        started.append(text)
        release.wait(30)
        return original(tokenizer, text)

    monkeypatch.setattr(tokenize_tab.handlers, "highlighted", runaway)
    try:
        # Every thread: work past its limit. On a busy machine a request may run out of its
        # 0.05 s before its runaway starts (choosing the tokenizer took that long): it holds no
        # thread, so another is sent until every thread holds a runaway.
        deadline = time.monotonic() + 30
        while len(started) < limits.TOKENIZER_WORKERS and time.monotonic() < deadline:
            with pytest.raises(Exception) as raised:
                tokenize_tab.tokenize(
                    registry, f"runaway {len(started)}", TOKENIZE[1], 400, None, "(none)", 1
                )
            assert "took longer than" in raised.value.message
        assert len(started) == limits.TOKENIZER_WORKERS
        with pytest.raises(Exception) as raised:
            tokenize_tab.tokenize(registry, "the cat", TOKENIZE[1], 400, None, "(none)", 1)
        assert "busy" in raised.value.message and "try again" in raised.value.message
        assert "the cat" not in started  # refused before it was queued
    finally:
        release.set()
    monkeypatch.setattr(limits, "TOKENIZER_TIME_LIMIT_S", 60.0)
    stats, *_ = _answers_again(registry, "the cat", TOKENIZE[1], 400, None, "(none)", 1)
    assert "tokens" in stats


SESSION = object()  # where a test's arguments take the session


def _live(demo, name: str):
    """The registered live handler called ``name`` (the first event that runs it)."""
    return next(f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == name)


@pytest.fixture(scope="module")
def live_demo():
    from ui.demo import build_demo

    return build_demo("cpu", preload=False)


@pytest.mark.parametrize(
    ("handler", "args", "said"),
    [
        (
            "refit_everything",
            [" ".join(["word"] * 700), MINILM, ENCODER, 2, 1, 1, [], False, SESSION, None],
            "this model reads at most 512",
        ),
        (
            "refresh",
            [" ".join(["word"] * 700), MINILM, "encoder", 1, 1, 1, False, SESSION],
            "this model reads at most 512",
        ),
        (
            "tokenize_view",
            ["a" * 20_800, TOKENIZE[1], 400, None, "(none)"],
            "longer than 20,000",
        ),
        (
            "positional_view",
            [64, 32, 10000, "0, 999, banana", "cosine", False],
            "banana",
        ),
        ("positional_view", [64, 32, 1, "0", "cosine", False], "base must be between 2"),
        (
            "embeddings_view",
            [" ".join(["word"] * 700), MINILM, False, SESSION],
            "this model reads at most 512",
        ),
    ],
)
def test_a_refused_input_keeps_every_control_and_figure_and_says_why_beside_it(
    live_demo, handler, args, said
):
    """No live handler may raise into its outputs (gradio would draw a red "Error" in
    place of each control and leave the figures below without a word)."""
    function = _live(live_demo, handler)
    args = [state.SessionModels() if a is SESSION else a for a in args]
    result = function.fn(*args)  # must not raise
    status = function.outputs[-1]
    assert isinstance(status, gr.Markdown) and "input-status" in status.elem_classes
    assert said in result[-1] and "last input that worked" in result[-1]
    kept = [
        value
        for value, output in zip(result[:-1], function.outputs[:-1], strict=True)
        if not (isinstance(output, gr.File))
    ]
    assert all(value == gr.skip() for value in kept), kept


def test_a_broken_upload_keeps_the_upload_box_and_is_not_brought_back(live_demo, tmp_path):
    registry = live_demo.model_registry
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{ not json")
    upload = "uploaded tokenizer.json"
    view = tokenize_tab.tokenize_view(registry, "ab", upload, 400, str(broken), "(none)")
    assert "not JSON" in view[-1]
    assert view[8] == gr.update(visible=True)  # the box stays: the file can be replaced
    assert all(value == gr.skip() for value in view[:8])
    # Another tokenizer chosen: the box hides and forgets the file, so choosing the upload
    # again asks for a file instead of bringing the broken one back.
    away = tokenize_tab.tokenize_view(registry, "ab", TOKENIZE[1], 400, str(broken), "(none)")
    assert away[8] == gr.update(visible=False, value=None) and away[-1] == ""


def test_an_upload_is_parsed_once_per_content(tmp_path, monkeypatch):
    """The worker process that runs an upload keeps its tokenizer (or its refusal) by the
    file's content: the file is sent to a worker, and parsed there, once."""
    from ui.tabs.tokenize.choices import upload_sandbox

    registry = state.ModelRegistry("cpu")
    sandbox = upload_sandbox()
    parsed = []
    original = sandbox._exchange

    def counting(worker, request, data, deadline, limit):
        if data is not None:
            parsed.append(len(data))
        return original(worker, request, data, deadline, limit)

    monkeypatch.setattr(sandbox, "_exchange", counting)
    # Contents no other test uploads (uploads are cached by content for the whole process).
    content = (ROOT / "assets/models/reverse/tokenizer.json").read_bytes() + b"\n\n\n"
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_bytes(content)
    second.write_bytes(content)  # a second upload of the same file: same content
    for path, text in [(first, "a b"), (first, "a b c"), (second, "c d")]:
        tokenize_tab.tokenize(
            registry, text, "uploaded tokenizer.json", 400, str(path), "(none)", 1
        )
    assert len(parsed) == 1
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": {"type": "BPE"}, "note": "parsed once"}')
    for _ in range(3):  # a broken file is refused again without a second parse
        with pytest.raises(Exception, match="vocab"):
            tokenize_tab.tokenize(
                registry, "a", "uploaded tokenizer.json", 400, str(broken), "(none)", 1
            )
    assert len(parsed) == 2


def test_a_tokenizer_json_with_a_byte_order_mark_is_read(tmp_path):
    # Contents no other test uploads (uploads are cached by content for the whole process).
    content = (ROOT / "assets/models/reverse/tokenizer.json").read_bytes() + b"\n\n\n"
    path = tmp_path / "tokenizer.json"
    path.write_bytes(b"\xef\xbb\xbf" + content)
    registry = state.ModelRegistry("cpu")
    stats, *_ = tokenize_tab.tokenize(
        registry, "a b", "uploaded tokenizer.json", 400, str(path), "(none)", 1
    )
    assert "tokens" in stats


def _real(name: str) -> str:
    """The Tokenize menu's label of the real tokenizer called ``name``."""
    return next(k for k, v in tokenize_tab.TOKENIZER_CHOICES.items() if v == ("real", name))


LECTURE_TEXT = "The transformer attends, unbelievably: 12345 tokens! " * 377  # ~20,000 characters
# Characters of four bytes, most of them joined by zero-width joiners: a byte-level tokenizer
# makes several pieces (and chips) of each, and the whole run is one word of its replay.
EMOJI_TEXT = ("🤖🧠✨👩‍👩‍👧‍👦" * 2_000)[: limits.MAX_TEXT]


@pytest.mark.parametrize("text", [LECTURE_TEXT, EMOJI_TEXT], ids=["lecture", "emoji"])
@pytest.mark.parametrize(
    ("choice", "compare"),
    [
        ("BPE, trained live on the bundled corpus", "WordPiece (BERT style), trained live"),
        (_real("gpt2"), _real("cl100k_base")),
        (_real("cl100k_base"), "byte-level BPE (GPT-2 style), trained live"),
    ],
    ids=["trained live", "GPT-2 and cl100k", "cl100k and byte-level"],
)
def test_a_long_text_answers_in_under_3_mb(url, text, choice, compare):
    """``/tokenize`` on 20,000 characters sent about 10 MB. Measured as sent over
    HTTP (gradio sends each chip of the token view as an object of its own)."""
    assert len(text) <= limits.MAX_TEXT
    posted = httpx.post(
        f"{url}gradio_api/call/tokenize",
        json={"data": [text, choice, 400, None, compare, 0]},
        timeout=120,
    )
    assert posted.status_code == 200, posted.text
    answer = httpx.get(f"{url}gradio_api/call/tokenize/{posted.json()['event_id']}", timeout=120)
    kind, data = re.findall(r"event: (\w+)\ndata: (.*)", answer.text)[-1]
    assert kind == "complete", data[:500]
    assert len(answer.content) < 3 * 2**20, len(answer.content)
    table = json.loads(data)[4]["data"]
    assert len(table) == limits.MAX_TABLE_ROWS and "more tokens" in str(table[-1])


def test_learn_bpe_says_how_many_merges_it_learned():
    summary, rows = tokenize_tab.learn("low lower lowest\nnewer wider", 400, "lowest")
    learned = len(rows)
    assert learned < 400
    assert f"400 of {learned}" not in summary
    assert f"all **{learned}** merges" in summary and "400 asked" in summary
    summary, rows = tokenize_tab.learn("low lower lowest\nnewer wider", 3, "lowest")
    assert f"After **3** of {learned} learned merges" in summary


def test_messages_speak_to_people():
    registry = state.ModelRegistry("cpu")
    with pytest.raises(errors.InputError) as raised:
        registry.checkpoint("nonexistent", None)
    assert "[" not in str(raised.value) and "translate" in str(raised.value)
    with pytest.raises(errors.InputError) as raised:
        registry.checkpoint(["translate"], None)  # a list sent as a name: not a TypeError
    assert "model" in str(raised.value)
    text = errors.clean("<object object at 0x7f3a2b4c5d60> in /srv/app/ui/x.py")
    assert "0x7f" not in text and "/srv" not in text


@pytest.mark.parametrize("task", [["reverse"], {"task": "reverse"}, None])
def test_a_task_that_is_not_a_name_is_named_in_the_message(task):
    """A list sent as the training task answered "something went wrong (TypeError)"
    (a list cannot be looked up among the recipes)."""
    from ui.tabs.training import run_training

    registry = state.ModelRegistry("cpu")
    with pytest.raises(gr.Error) as raised:  # the handler's message, as gradio shows it
        list(run_training(registry, task, 20, 0, False, state.SessionModels()))
    message = raised.value.message
    assert "TypeError" not in message and "something went wrong" not in message
    assert "unknown task" in message and "reverse" in message and not leaks(message)


def test_gradios_own_refusals_are_short_messages_without_a_traceback(live_demo):

    function = _live(live_demo, "refit_everything")
    # the model dropdown refusing a name, as gradio's preprocessing does
    index = next(i for i, c in enumerate(function.inputs) if isinstance(c, gr.Dropdown))
    values = [None] * len(function.inputs)
    values[index] = "nonexistent"
    with pytest.raises(gr.Error) as raised:
        run_async(live_demo.preprocess_data(function, values, None))
    assert raised.value.print_exception is False
    assert "not in the list of choices" in raised.value.message
    assert "[" not in raised.value.message  # no Python list
    slider = next(i for i, c in enumerate(function.inputs) if isinstance(c, gr.Slider))
    values = [c.value if hasattr(c, "value") else None for c in function.inputs]
    values[slider] = [1, 2]  # the wrong type: gradio's message would quote a TypeError
    with pytest.raises(gr.Error) as raised:
        run_async(live_demo.preprocess_data(function, values, None))
    assert "TypeError" not in raised.value.message and " at 0x" not in raised.value.message


def test_model_info_does_not_show_where_a_model_folder_lies(hf_models):
    from ui.tabs.training.description import describe

    registry = state.ModelRegistry("cpu", [str(hf_models["gpt2"])])
    name = registry.menu_name(str(hf_models["gpt2"]))
    text = describe(name, registry.checkpoint(name, None), "cpu")
    assert str(hf_models["gpt2"].parent) not in text and "gpt2" in text


HOSTILE = (
    "x`y [Session expired — log in](https://evil.example) ![i](https://evil.example/p.png) "
    "<img src=x onerror=alert(1)> <b>bold</b> www.evil.example"
)


def _rendered(markdown: str) -> str:
    """HTML as a Markdown renderer with raw HTML and bare-link detection (gradio's) makes it."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).render(markdown)


def test_user_text_in_markdown_stays_text():
    """Text a user typed (or a link carried) is shown, never rendered as a
    link, an image or HTML, and a backtick in it does not close the code span that holds it."""
    registry = state.ModelRegistry("cpu")
    from ui.tabs.attention import handlers as attention
    from ui.tabs.inside import handlers as inside

    answers = {
        "tokenize": tokenize_tab.tokenize(registry, HOSTILE, TOKENIZE[1], 400, None, "(none)", 30),
        "tokenize GPT-2": tokenize_tab.tokenize(
            registry, HOSTILE, REAL_TOKENIZERS[1], 400, None, "(none)", 30
        ),
        "learn_bpe": tokenize_tab.learn(HOSTILE, 20, HOSTILE[: limits.MAX_BPE_WORD]),
        "attention": attention.attention(
            registry, HOSTILE, "translate", CROSS, 1, 1, 1, [], False, state.SessionModels()
        ),
        "inside": inside.inside_layer(
            registry, HOSTILE, "translate", "encoder", 1, 1, 1, False, state.SessionModels()
        ),
    }
    status = errors.stale(f"there is no model called '{HOSTILE}'")
    answers["status"] = (status,)
    for name, answer in answers.items():
        for part in answer:
            if not isinstance(part, str):
                continue
            html_text = _rendered(part)
            assert "<a " not in html_text and "<img" not in html_text, (name, html_text[:400])
            assert "<b>" not in html_text, (name, html_text[:400])
    span = _rendered(errors.code_span("a`b ``c"))
    assert "<code>a`b ``c</code>" in span


def test_model_text_in_generate_and_mistake_summaries_stays_text():
    """What a model writes reaches Markdown too, and a real one writes backticks and links
    (SmolLM2 in chat writes code): Generate's output, pieces, chosen token and beams, and a
    seeds' mistake's predictions, are each one code span that nothing in them can close."""
    from types import SimpleNamespace

    from transformer.lab.effects import mistake_account
    from transformer.lab.mistakes import SEED_MISTAKES
    from ui.tabs.generate.drawing import _summary

    record = SimpleNamespace(
        step=0,
        tokens=[1],
        chosen_label=HOSTILE,
        chosen_id=5,
        chosen_prob=0.5,
        chosen_sampling_prob=None,
        method="beam",
        entropy=1.0,
        beams=[SimpleNamespace(tokens=[1], score=-1.0)],
    )
    decoding = SimpleNamespace(records=[record], output_ids=[1, 2], done=False)
    tokenizer = SimpleNamespace(decode=lambda ids: HOSTILE, id_to_token=lambda i: HOSTILE)
    effect = SimpleNamespace(
        broken=SimpleNamespace(trace=SimpleNamespace(logits=torch.zeros(1))),
        correct=SimpleNamespace(
            target_pieces=[[HOSTILE]],
            trace=SimpleNamespace(config=SimpleNamespace(architecture="decoder-only")),
        ),
        sentence=0,
        position=0,
        largest_change=1.0,
        predicted_before=[HOSTILE],
        predicted_after=[HOSTILE],
        changed=[True],
    )
    shown = html.escape(HOSTILE, quote=False).replace('"', "&quot;")
    for markdown, spans in (
        (_summary(decoding, tokenizer, [], HOSTILE), 6),  # output, 2 pieces, query, chosen, beam
        (mistake_account(SEED_MISTAKES[0], effect, 0), 3),  # type: ignore[arg-type]
    ):
        rendered = _rendered(markdown)
        assert "<a " not in rendered and "<img" not in rendered and "<b>" not in rendered
        # A piece is written with its spaces marked (␣), the text as it is: both whole spans.
        whole = rendered.count(f"<code>{shown}</code>")
        assert whole + rendered.count(f"<code>{shown.replace(' ', '␣')}</code>") == spans, rendered


def test_a_model_output_of_several_lines_keeps_its_lines_and_stays_text():
    """A model writing code writes lines and fences of its own: Generate shows its output as one
    code block with those lines, closed by nothing in it."""
    from types import SimpleNamespace

    from ui.tabs.generate.drawing import _summary

    output = (
        "```python\nprint('[x](https://evil.example)')\n```\n<img src=x onerror=alert(1)>\n````"
    )
    record = SimpleNamespace(
        step=0,
        tokens=[1],
        chosen_label="`",
        chosen_id=5,
        chosen_prob=0.5,
        chosen_sampling_prob=None,
        method="greedy",
        entropy=1.0,
        beams=[],
    )
    decoding = SimpleNamespace(records=[record], output_ids=[1], done=False)
    tokenizer = SimpleNamespace(decode=lambda ids: output, id_to_token=lambda i: "`")
    rendered = _rendered(_summary(decoding, tokenizer, [], "3:x"))
    assert "<a " not in rendered and "<img" not in rendered
    blocks = re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", rendered, flags=re.S)
    assert [html.unescape(b) for b in blocks] == [output + "\n"]  # whole, every line kept
    one_line = _rendered(
        _summary(
            decoding,
            SimpleNamespace(decode=lambda ids: " Paris.", id_to_token=lambda i: "`"),
            [],
            "3:x",
        )
    )
    assert "<pre>" not in one_line and "<code> Paris.</code>" in one_line  # one line stays inline


# -- bursts: memory comes back, dropped streams are quiet, costly work in turns ---------------


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


def test_after_a_burst_of_sessions_what_they_held_is_let_go(server, monkeypatch):
    """Six sessions generate at once (beam 3), others take one step and leave, long texts
    with lone surrogates and null bytes go through the caches; once the sessions have gone
    and the caches' idle time has passed, nothing of theirs is held: no session in gradio's
    store, no decoding counted, no cached analysis or view. The server's RSS (this process's:
    the app runs in it) is checked with a generous bound, the object counts strictly."""
    demo, url = server
    registry, holder = demo.model_registry, demo.state_holder
    monkeypatch.setattr(limits, "COSTLY_QUEUED_PER_CLIENT", 64)  # a class behind one address
    # The handlers run on a pool of their own, not the one /gradio_api/info is answered from.
    assert demo.limiter is not None and demo.limiter.total_tokens == limits.HANDLER_THREADS
    from ui.serving.memory import give_back_memory
    from ui.serving.sessions import drop_left_sessions

    give_back_memory()
    before_decodings = len(registry.decodings)  # other tests' sessions, still open
    before_mb = _rss_mb()
    beam = [GENERATE[0], "continue", "beam", 1.0, 0, 1.0, 3, 8, 0, 1, 1, False]
    clients = [api_client(url, timeout=120) for _ in range(6)]
    with ThreadPoolExecutor(6) as threads:
        runs = list(threads.map(lambda c: call(c, "/generate", *beam), clients))
    assert all(ok for ok, _ in runs), [r for ok, r in runs if not ok][:2]
    for text in ("a\ud800b " * 2_000, "a\x00b " * 2_000):  # raw HTTP: gradio_client cannot
        for api, args in [
            ("/attention", [text, "reverse", CROSS, 1, 1, 1, [], False]),
            ("/generate_step", [text, *GENERATE[1:]]),
            ("/embeddings", [text, "translate", False]),
        ]:
            raw_call(url, api, *args)

    # Each of the six sessions holds its decoding (counted by session: other tests' sessions
    # may be let go meanwhile, by the sweeper or the decodings' bound).
    def holds_a_decoding(session: str) -> bool:
        states = getattr(holder.session_data.get(session), "state_data", {}).values()
        return any(getattr(state, "decoding", None) is not None for state in states)

    assert all(holds_a_decoding(c.session_hash) for c in clients)
    for c in clients:
        c.close()  # the pages leave: their heartbeats end

    burst = {c.session_hash for c in clients}

    def gone() -> bool:  # as the sweeper does every 10 s, without waiting for its 30 s
        drop_left_sessions(holder, unused_s=0.0)
        return not burst & set(holder.session_data)

    assert _wait_until(gone, 30), burst & set(holder.session_data)
    registry.forget_unused(0.0)
    give_back_memory()
    assert len(registry.decodings) <= before_decodings
    assert len(registry.shared_views) == 0 and not registry._analyses
    after_mb = _rss_mb()
    assert after_mb < before_mb * 1.15 + 150, (before_mb, after_mb)


def test_dropped_event_streams_leave_no_traceback(url, caplog):
    """Twenty event streams for sessions with nothing pending, opened and dropped: one line
    each at most in the log (uvicorn's own logger, which does not reach the root's, listened
    to as well), no traceback, nothing at ERROR."""
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    import socket

    uvicorn = logging.getLogger("uvicorn")
    uvicorn.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            streams = []
            for n in range(20):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(
                    f"GET /gradio_api/queue/data?session_hash=gone{n} HTTP/1.1\r\n"
                    f"Host: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
                )
                streams.append(sock)
            time.sleep(1.0)
            for sock in streams:
                sock.close()
            time.sleep(1.0)
    finally:
        uvicorn.removeHandler(caplog.handler)
    records = caplog.records
    tracebacks = [r for r in records if r.exc_info or "Traceback" in r.getMessage()]
    assert not tracebacks, [r.getMessage() for r in tracebacks][:2]
    assert not [r for r in records if r.levelno >= logging.ERROR], [
        r.getMessage() for r in records
    ][:3]
    assert len([r for r in records if "stream" in r.getMessage()]) <= 20


def test_one_clients_queued_runs_do_not_hold_another_client(server, monkeypatch):
    """One client queues more "Run to the end" than it may (the rest are refused with a
    message); another client's run, from another address, is served after at most one turn of
    each client ahead of it, not after the whole queue."""
    from ui.demo import COSTLY
    from ui.serving.clients import client_address
    from ui.serving.fairness import waiting_events
    from ui.tabs.generate import handlers

    demo, url = server
    monkeypatch.setattr(limits, "COSTLY_QUEUED_PER_CLIENT", 3)
    # The first run holds the costly queue's one worker until every run is queued: a run of the
    # small model takes a fifth of a second, and on a busy machine the flood's clients came
    # further apart than that, so that none waited (and none was refused).
    gate, held_one = threading.Event(), threading.Event()
    current = handlers.current
    # Whose run the server starts, in order: what the turns decide. (When each client hears
    # that its run ended depends on its own threads too, which a loaded machine delays.)
    started: list[str] = []

    def held(registry, state, session, request):
        started.append("other" if request.source.startswith("other ") else "flood")
        held_one.set()
        gate.wait(120)
        return current(registry, state, session, request)

    monkeypatch.setattr(handlers, "current", held)

    order: list[str] = []
    run = [GENERATE[0], "continue", "greedy", 1.0, 0, 1.0, 1, 40, 0, 1, 1, False]
    flood = [api_client(url, timeout=120) for _ in range(6)]
    jobs: list = []
    other: list[bool] = []

    def waiting() -> list:
        return waiting_events(demo._queue, COSTLY) or []

    def settled() -> bool:  # each of the six is running (one), waiting or refused
        return held_one.is_set() and len(waiting()) + sum(job.done() for job in jobs) == 5

    def came() -> bool:
        return any(client_address(event.request) == "127.0.0.2" for event in waiting())

    def ask_as_other() -> None:
        other.append(_from_address(url, "127.0.0.2", [f"other {GENERATE[0]}", *run[1:]]))
        order.append("other")

    helper = threading.Thread(target=ask_as_other)
    try:
        jobs = [c.submit(*run, api_name="/generate") for c in flood]
        for n, job in enumerate(jobs):
            job.add_done_callback(lambda j, n=n: j.exception() or order.append(f"flood{n}"))
        assert _wait_until(settled, 60), (len(waiting()), [job.done() for job in jobs])
        helper.start()
        assert _wait_until(came, 60), len(waiting())
    finally:
        gate.set()
    helper.join(120)
    outcomes = []
    for job in jobs:
        try:
            job.result(timeout=120)
            outcomes.append("ok")
        except Exception as error:
            outcomes.append(str(error))
    for c in flood:
        c.close()
    assert other == [True], "the other client's run failed"
    refused = [o for o in outcomes if o != "ok"]
    assert refused and all("long runs waiting" in o for o in refused), outcomes
    # First come, first served, the three runs queued before the other's would start before
    # it; in turns, only the one running when it came.
    assert started.index("other") == 1, started
    assert len(started) == len(order) == 1 + len(outcomes) - len(refused), (started, order)


def _from_address(url: str, address: str, data: list) -> bool:
    """``/generate`` through gradio's REST API from the loopback ``address``."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport, timeout=120) as http:
        posted = http.post(f"{url}gradio_api/call/generate", json={"data": data})
        posted.raise_for_status()
        event = posted.json()["event_id"]
        return "event: complete" in http.get(f"{url}gradio_api/call/generate/{event}").text
