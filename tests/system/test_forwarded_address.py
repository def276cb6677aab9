"""Behind the launcher's HAProxy, a worker sees each client's own address, whatever the client
writes in ``X-Forwarded-For``.

HAProxy runs the configuration ``python app.py --workers N`` writes, in front of uvicorn serving
a small app that answers `client_address`, with the worker's trusted proxies as the launcher
sets them. The client connects from 127.0.0.2 (Linux routes all of 127.0.0.0/8 to loopback), an
address other than HAProxy's own 127.0.0.1.

``REQUIRE_CLUSTER=1`` (set by ``.ci/run``) turns the skip where haproxy is missing into a
failure."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ui.serving import cluster
from ui.serving.clients import TRUSTED_PROXIES_ENV, client_address


async def whoami(request: Request) -> PlainTextResponse:
    return PlainTextResponse(client_address(request))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def behind_haproxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """HAProxy's port, in front of one worker as the launcher configures both."""
    haproxy = cluster.program("haproxy")
    if haproxy is None or not sys.platform.startswith("linux"):
        if os.environ.get("REQUIRE_CLUSTER") == "1" and haproxy is None:
            pytest.fail("REQUIRE_CLUSTER=1 but haproxy is not installed")
        pytest.skip("needs haproxy, and Linux's 127.0.0.2")
    monkeypatch.delenv(TRUSTED_PROXIES_ENV, raising=False)
    import argparse

    args = argparse.Namespace(workers=2, no_balancer=False)
    worker_port = free_port()
    worker = cluster.Worker("w1", "127.0.0.1", worker_port)
    monkeypatch.setenv(
        TRUSTED_PROXIES_ENV, cluster.Cluster(args).worker_env(worker)[TRUSTED_PROXIES_ENV]
    )
    app = Starlette(routes=[Route("/", whoami), Route(cluster.HEALTH_PATH, whoami)])
    config = uvicorn.Config(app, host="127.0.0.1", port=worker_port, log_level="warning")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    port = free_port()
    written = tmp_path / "haproxy.cfg"
    written.write_text(
        cluster.haproxy_config(f"127.0.0.1:{port}", [("w1", f"127.0.0.1:{worker_port}")])
    )
    process = subprocess.Popen(
        [haproxy, "-W", "-db", "-f", str(written)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(10)
        served.should_exit = True
        thread.join(10)


def ask(port: int, forwarded: str | None) -> str:
    """What the worker says this client's address is, asked from 127.0.0.2."""
    with socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0)) as sock:
        extra = f"X-Forwarded-For: {forwarded}\r\n" if forwarded else ""
        request = f"GET / HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
        sock.sendall(request.encode())
        sock.settimeout(10)
        got = b""
        while chunk := sock.recv(4096):
            got += chunk
    return got.split(b"\r\n\r\n", 1)[1].decode()


def test_the_worker_sees_the_client_s_own_address(behind_haproxy: int) -> None:
    assert ask(behind_haproxy, None) == "127.0.0.2"
    assert ask(behind_haproxy, "198.51.100.9") == "127.0.0.2"
    assert ask(behind_haproxy, "198.51.100.9, 10.1.2.3") == "127.0.0.2"
