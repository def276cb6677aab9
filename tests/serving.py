"""Helpers for the tests that talk to the app over HTTP: launch it in-process on loopback, call
it through gradio_client or raw HTTP, and check that an error message is fit for a user."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from gradio_client import Client

import app as visualiser
from ui.testing import CROSS, GENERATE, free_port, launched  # noqa: F401  (tests import them here)

BPE = "BPE, trained live on the bundled corpus"
TOKENIZE = ["the cat sat", BPE, 400, None, "(none)", 5]

# What must never reach a user: a traceback, a source location, an absolute path of this machine.
_LEAKS = ["Traceback", 'File "', "site-packages", "/work", "/tmp", "/root", "/home", "/usr/"]
_LEAKS += [str(Path.cwd()), sys.prefix]


def run_async(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(coroutine)`` on a thread of its own: a browser module earlier on the same
    test worker leaves Playwright's event loop running on the main thread, where asyncio.run
    refuses to start."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


@contextmanager
def serve(
    device: str = "cpu", models: tuple[str, ...] = (), allow_download: bool = False
) -> Iterator[tuple[Any, str]]:
    """The app launched in-process on 127.0.0.1 as ``python app.py [--model M ...]`` launches
    it; (demo, url)."""
    demo = visualiser.build_demo(device, models, allow_download)
    with launched(demo) as url:
        yield demo, url


def api_client(url: str, **httpx_kwargs: Any) -> Client:
    """A gradio_client session on the app at ``url`` (plain http on loopback).

    gradio_client opens new httpx clients for every request, and httpx loads the whole CA
    bundle into a TLS context for each (about 25 ms of CPU each; 75 of a cheap request's 95 ms)
    even for http. Nothing here is encrypted, so no certificate is loaded.

    httpx gives up on a read after 5 s; on a machine busy with other test workers a model's
    first pass can take longer, so the tests wait a minute to connect and five minutes to read
    (what they check is that a call completes, and how; how fast is for the benchmarks). The
    same timeout reaches the session's event stream, which gradio_client opens with none: it
    stays open between calls and hears only gradio's 15-second heartbeats, so a one-minute read
    limit there could close it under a loaded machine, and every call still waiting on it then
    ends in an empty ``CancelledError``."""
    httpx_kwargs.setdefault("timeout", httpx.Timeout(60, read=300))
    return Client(url, verbose=False, ssl_verify=False, httpx_kwargs=httpx_kwargs)


def leaks(message: str) -> list[str]:
    """The forbidden fragments found in a message shown to a user."""
    return [fragment for fragment in _LEAKS if fragment and fragment in message]


def call(client: Client, api_name: str, *args: Any) -> tuple[bool, Any]:
    """(True, result) or (False, error message) of one request through gradio_client."""
    for _ in range(2):
        try:
            return True, client.predict(*args, api_name=api_name)
        except concurrent.futures.CancelledError:
            # The client's own event stream closed under it: no answer from the app, so the
            # call is sent again.
            continue
        except Exception as error:  # gradio_client's AppError, or the client's own ValueError
            return False, str(error)
    return False, ""  # the stream lost twice: reported as an empty, unexplained message


def raw_call(url: str, api_name: str, *data: Any, timeout: float = 60) -> tuple[bool, Any]:
    """One request through gradio's REST API, with a body gradio_client could not send (NaN,
    infinity, lone surrogates): (True, output list) or (False, error message)."""
    body = json.dumps({"data": list(data)})  # allow_nan: NaN and Infinity go out as such
    name = api_name.lstrip("/")
    posted = httpx.post(
        f"{url}gradio_api/call/{name}",
        verify=False,
        content=body,
        headers={"content-type": "application/json"},
        timeout=timeout,
    )
    if posted.status_code != 200:
        return False, f"HTTP {posted.status_code}: {posted.text}"
    event_id = posted.json()["event_id"]
    stream = httpx.get(
        f"{url}gradio_api/call/{name}/{event_id}", timeout=timeout, verify=False
    ).text
    events = re.findall(r"event: (\w+)\ndata: (.*)", stream)
    kind, data = events[-1]
    payload = json.loads(data) if data not in ("", "null") else None
    if kind == "complete":
        return True, payload
    return False, (payload or {}).get("error", "") if isinstance(payload, dict) else str(payload)


def still_serves(client: Client) -> None:
    """A cheap request succeeds: the server is up and its queue is moving."""
    stats, *_ = client.predict(*TOKENIZE, api_name="/tokenize")
    assert "3 tokens" in stats or "tokens" in stats


class Tally:
    """Requests and failures counted across threads, for the figures the README reports."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.failures: list[str] = []

    def add(self, key: str, failure: str | None = None) -> None:
        with self.lock:
            self.requests[key] += 1
            if failure is not None:
                self.failures.append(failure)

    @property
    def total(self) -> int:
        return sum(self.requests.values())


def bundled_only_env(folder: Path) -> dict[str, str]:
    """The environment of an app process that serves only the bundled models: an empty module
    of each shipped model's name in ``folder``, first on ``PYTHONPATH``, hides its package
    (no folder to find), so each process starts in seconds and holds tens of MB, not a GB."""
    from transformer.pretrained.shipped import shipped_models

    folder.mkdir(parents=True, exist_ok=True)
    for model in shipped_models():
        (folder / f"{model.module}.py").write_text("")
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "GRADIO_ANALYTICS_ENABLED": "False"}


def worker_of(url: str, cookies: dict[str, str] | None = None) -> dict[str, Any]:
    """What the worker that ``cookies`` (a client's, with HAProxy's sticky cookie) is pinned to
    says of itself: ``{"worker": name, "stamp": name and start, "pid": ...}``."""
    from ui.serving.cluster import HEALTH_PATH

    answer = httpx.get(url.rstrip("/") + HEALTH_PATH, cookies=cookies or {}, timeout=10)
    answer.raise_for_status()
    return dict(answer.json())


def sticky_client(url: str) -> Client:
    """A gradio_client session behind HAProxy that stays on its worker.

    gradio_client opens a new httpx client for each request, so nothing keeps cookies between
    them by itself; but it reads the cookies of its first request (``/config``) and sends them
    with every later one. That first answer carries HAProxy's ``VISUALISER_WORKER`` (the worker
    it balanced to) and the worker's ``visualiser_page``: every request goes to that worker.
    This checks that both cookies are there, so a test never passes on a client that wanders."""
    from ui.serving.cluster import BALANCER_COOKIE, PAGE_COOKIE

    client = api_client(url)
    missing = {BALANCER_COOKIE, PAGE_COOKIE} - set(client.cookies)
    assert not missing, f"the first answer set no {missing} cookie: {client.cookies}"
    return client


@contextmanager
def launcher(
    args: list[str], folder: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen]:
    """``python app.py ARGS`` (the launcher of ``--workers N``) with only the bundled models,
    its output in ``folder/launcher.log``; stopped with SIGTERM on exit (as a service manager
    stops it), and killed if it does not stop."""
    log_path = folder / "launcher.log"
    process = subprocess.Popen(
        [sys.executable, "app.py", "--device", "cpu", *args],
        cwd=Path(__file__).resolve().parents[1],
        env=env or bundled_only_env(folder / "bundled-only"),
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def until(what: str, check: Any, timeout: float = 180, process: Any = None) -> Any:
    """Poll ``check()`` until it returns something truthy (returned); fail after ``timeout``
    seconds, or at once if ``process`` exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except (httpx.HTTPError, OSError, ValueError):
            found = None
        if found:
            return found
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the launcher exited ({process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout:.0f} s")
        time.sleep(0.25)
