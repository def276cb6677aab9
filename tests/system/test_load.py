"""Load: many client sessions at once on loopback, doing what visitors do (the bundled models and
the shipped MiniLM), with zero failures,
and no session ever seeing another's trained model or generation state.

Bounded in count (``SESSIONS`` sessions, a fixed list of requests each) and in time (every
request has a timeout, the whole run a deadline).
"""

from __future__ import annotations

import inspect
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serving import BPE, CROSS, GENERATE, Tally, api_client, serve, still_serves

from ui import demo as demo_module
from ui.serving.state import TRAINED_HERE

# a system test: 20 concurrent sessions over HTTP; `python -m pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow

SESSIONS = 20
TRAINERS = {0, 7, 14}  # sessions that also train (training runs one at a time)
REQUEST_TIMEOUT = 120  # seconds, any single request
DEADLINE = 300  # seconds, the whole run
NOT_TRAINED = "no model has been trained in this session"
MINILM = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def url():
    with serve() as (_, address):
        yield address


def visitor(url: str, index: int, tally: Tally) -> None:
    """One session's visit. Failures are recorded, never raised, so every session finishes."""
    key = f"session {index}"

    def request(label: str, *args, api_name: str, stream: bool = False):
        start = time.monotonic()
        try:
            job = client.submit(*args, api_name=api_name)
            if stream:
                updates = list(job)
                assert updates, "no update"
                result = updates[-1]
            else:
                result = job.result(timeout=REQUEST_TIMEOUT)
        except Exception as error:
            tally.add(key, f"{key} {label}: {type(error).__name__}: {str(error)[:200]}")
            return None
        tally.add(key)
        tally.latencies.append(time.monotonic() - start)
        return result

    def check(condition: bool, what: str) -> None:
        if not condition:
            tally.add(key, f"{key}: {what}")

    # The client's own timeouts as long as a request may take here: on a loaded machine (the
    # suite runs on every core) joining the queue may take longer than httpx's default 5 s.
    client = api_client(url, timeout=REQUEST_TIMEOUT)
    sentence = ["the small cat sees a red ball", "a big dog sleeps", "my old bird eats"][index % 3]
    request("tokenize", sentence, BPE, 400, None, "(none)", 30, api_name="/tokenize")
    request("attention", sentence, "translate", CROSS, 1, 1, 1, [], False, api_name="/attention")
    # The shipped pretrained model, shared by every session (its weights load in the background:
    # the first sessions wait for them), each session on a head of its own.
    request(
        "attention (MiniLM)",
        sentence,
        MINILM,
        "encoder self-attention",
        1 + index % 6,
        1 + index % 8,
        1,
        [],
        False,
        api_name="/attention",
    )
    streamed = request(
        "generate", sentence, *GENERATE[1:7], 8, *GENERATE[8:], api_name="/generate", stream=True
    )
    check(streamed is not None and "Output so far" in streamed[0], "streamed generation")
    # Step this session's own generation a session-specific number of times, interleaved with
    # everyone else's: the count it reports must be its own.
    steps = 1 + index % 3
    args = [sentence, "translate", "greedy", 1.0, 0, 1.0, 3, 40, index, 1, 1, False]
    for _ in range(steps):
        stepped = request("generate_step", *args, api_name="/generate_step")
    counted = f"({steps} step{'s' if steps > 1 else ''})"
    check(stepped is not None and counted in stepped[0], "generation state is private")
    trained_here = [sentence, TRAINED_HERE, CROSS, 1, 1, 1, [], False]
    if index in TRAINERS:
        done = request("train", "reverse", 20, index, False, api_name="/train", stream=True)
        check(done is not None and "Done: 20 steps" in done[0], "training finished")
        view = request(
            "attention (trained here)", "a b c", *trained_here[1:], api_name="/attention"
        )
        check(view is not None, "the session's own trained model")
    else:
        # Another session's training must not be visible here.
        try:
            client.predict("a b c", *trained_here[1:], api_name="/attention")
            tally.add(key, f"{key}: sees a model trained by another session")
        except Exception as error:
            tally.add(key, None if NOT_TRAINED in str(error) else f"{key}: {error}")
    request("embeddings", sentence, "translate", False, api_name="/embeddings")


def test_many_sessions_at_once(url):
    tally = Tally()
    tally.latencies = []
    start = time.monotonic()
    with ThreadPoolExecutor(SESSIONS) as pool:
        futures = [pool.submit(visitor, url, i, tally) for i in range(SESSIONS)]
        for future in futures:
            future.result(timeout=DEADLINE)
    wall = time.monotonic() - start
    latencies = sorted(tally.latencies)
    print(
        f"\n[load] {SESSIONS} sessions, {tally.total} requests, {len(tally.failures)} failures, "
        f"{wall:.1f} s wall, median latency {latencies[len(latencies) // 2]:.2f} s, "
        f"slowest {latencies[-1]:.2f} s"
    )
    assert not tally.failures, "\n".join(tally.failures)
    assert wall < DEADLINE
    still_serves(api_client(url))


# -- what anyone can do to a public Space: many anonymous sessions ----------------


def anonymous_call(url: str, api_name: str, data: list, session: str | None = None) -> bool:
    """One request through gradio's REST API as a session of its own; True when it completed."""
    session = session or uuid.uuid4().hex
    posted = httpx.post(
        f"{url}gradio_api/call/{api_name}",
        json={"data": data, "session_hash": session},
        timeout=REQUEST_TIMEOUT,
    )
    if posted.status_code != 200:
        return False
    event = posted.json()["event_id"]
    stream = httpx.get(f"{url}gradio_api/call/{api_name}/{event}", timeout=REQUEST_TIMEOUT).text
    return re.findall(r"event: (\w+)\n", stream)[-1:] == ["complete"]


def test_the_sessions_kept_are_bounded_and_idle_ones_dropped(monkeypatch):
    """gradio kept up to 10,000 sessions (about 0.46 MB each) for anyone making API calls; the
    app keeps MAX_SESSIONS, least recently used first out, and drops idle ones."""
    monkeypatch.setattr(demo_module, "MAX_SESSIONS", 5)
    with serve() as (demo, url):
        sessions = [uuid.uuid4().hex for _ in range(12)]
        with ThreadPoolExecutor(4) as pool:
            answered = list(
                pool.map(lambda s: anonymous_call(url, "model_info", ["translate"], s), sessions)
            )
        assert all(answered)
        held = demo.state_holder.session_data
        assert 0 < len(held) <= 5
        # The session used last is kept; an old one is gone but may come back as a new one.
        assert anonymous_call(url, "model_info", ["translate"], sessions[0])
        assert sessions[0] in held and len(held) <= 5
        assert demo_module.evict_idle_sessions(demo.state_holder, max_idle_s=3600) == 0
        dropped = demo_module.evict_idle_sessions(demo.state_holder, max_idle_s=-1)
        assert dropped > 0 and len(held) == 0 and not demo.state_holder.time_last_used
        assert anonymous_call(url, "model_info", ["translate"])  # and the app serves on


def _queued_call(url: str, fn_index: int, data: list) -> bool:
    """One event through gradio's queue by its index, as the page sends it (private events
    too): True when it completed successfully."""
    session = uuid.uuid4().hex
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "trigger_id": None}
    posted = httpx.post(f"{url}gradio_api/queue/join", json=body, timeout=REQUEST_TIMEOUT)
    if posted.status_code != 200:
        return False
    stream = httpx.get(
        f"{url}gradio_api/queue/data", params={"session_hash": session}, timeout=REQUEST_TIMEOUT
    ).text
    return '"msg":"process_completed"' in stream and '"success":true' in stream


def test_exports_asked_for_by_many_clients_stay_bounded_on_disk(monkeypatch):
    """Every "Whole view as HTML" wrote a new file that was never removed, and
    any client can ask for one through the queue."""
    from ui.serving import export as export_module

    monkeypatch.setattr(export_module, "EXPORTS", export_module.ExportStore())
    monkeypatch.setattr(export_module, "EXPORT_MAX_FILES", 3)
    with serve() as (demo, url):
        (html_export,) = [
            f
            for f in demo.fns.values()
            if getattr(f.fn, "__name__", "") == "html"
            and getattr(inspect.unwrap(f.fn), "__self__", None) is not None
            and inspect.unwrap(f.fn).__self__.slug == "tokenize"
        ]
        controls = len(inspect.unwrap(html_export.fn).__self__.controls)
        data = [c.value for c in html_export.inputs[:controls]]
        # Each client's own caption, so that every export is a different file.
        texts = [f"export {i}" for i in range(12)]
        content = html_export.inputs[controls:]
        first_markdown = next(
            i for i, c in enumerate(content) if c.__class__.__name__ == "Markdown"
        )

        def one(text: str) -> bool:
            values = [
                {"headers": ["a"], "data": [["b"]]} if c.__class__.__name__ == "Dataframe" else None
                for c in content
            ]
            values[first_markdown] = text
            return _queued_call(url, html_export._id, [*data, *values])

        with ThreadPoolExecutor(4) as pool:
            answered = list(pool.map(one, texts))
        assert all(answered)
        held = [path for path in export_module.EXPORTS.files if path.exists()]
        assert 0 < len(held) <= 3
        written = {t for path in held for t in texts if f"<p>{t}</p>" in path.read_text()}
        assert len(written) == len(held)  # the newest exports, each once


def test_the_built_app_deletes_what_visitors_upload():
    """Uploads (a tokenizer.json, up to 20 MB each, from any client) were never
    deleted. gradio removes the files it cached for an app every ``delete_cache[0]`` seconds
    once they are ``delete_cache[1]`` seconds old: the app sets both, the age within an hour."""
    demo = demo_module.build_demo("cpu", preload=False)
    try:
        assert demo.delete_cache is not None
        sweep, age = demo.delete_cache
        assert 0 < sweep <= age <= 3600
    finally:
        demo.close()


def test_an_upload_is_gone_once_past_its_age(monkeypatch, tmp_path):
    """The same setting, launched: an uploaded file is removed from disk (seconds here)."""
    monkeypatch.setattr(demo_module, "CACHE_SWEEP_S", 1)
    monkeypatch.setattr(demo_module, "CACHE_MAX_AGE_S", 1)
    sent = tmp_path / "tokenizer.json"
    sent.write_text('{"model": {"type": "WordLevel", "vocab": {"a": 0}}}')
    with serve() as (_, url):
        with sent.open("rb") as handle:
            answer = httpx.post(f"{url}gradio_api/upload", files={"files": handle}, timeout=60)
        assert answer.status_code == 200, answer.text[:200]
        (kept,) = answer.json()
        kept = Path(kept)
        assert kept.is_file() and kept.read_bytes() == sent.read_bytes()
        deadline = time.monotonic() + 60  # a generous bound: the sweep runs every second
        while kept.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not kept.exists()
        assert anonymous_call(url, "model_info", ["translate"])  # and the app serves on
