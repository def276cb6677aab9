"""Helpers for the tests that talk to the app over HTTP: launch it in-process on loopback, call
it through gradio_client or raw HTTP, and check that an error message is fit for a user."""

from __future__ import annotations

import json
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterator
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
    even for http. Nothing here is encrypted, so no certificate is loaded."""
    return Client(url, verbose=False, ssl_verify=False, httpx_kwargs=httpx_kwargs)


def leaks(message: str) -> list[str]:
    """The forbidden fragments found in a message shown to a user."""
    return [fragment for fragment in _LEAKS if fragment and fragment in message]


def call(client: Client, api_name: str, *args: Any) -> tuple[bool, Any]:
    """(True, result) or (False, error message) of one request through gradio_client."""
    try:
        return True, client.predict(*args, api_name=api_name)
    except Exception as error:  # gradio_client's AppError, or the client's own ValueError
        return False, str(error)


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
