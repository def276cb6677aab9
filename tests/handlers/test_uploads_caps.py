"""The upload caps count each client by the address the server sees, and count an upload when
it starts.

`CapUploads` is driven in front of a stand-in upload route with raw ASGI calls, each naming the
connection's address as uvicorn does (``scope["client"]``). `client_address` is compared with
uvicorn's own reading of ``X-Forwarded-For`` (its ``ProxyHeadersMiddleware``) given the same
trusted proxies."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import gradio as gr
import pytest
from serving import run_async
from starlette.requests import Request
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from ui.serving import limits
from ui.serving.clients import TRUSTED_PROXIES_ENV, client_address
from ui.serving.uploads import CapUploads, UploadLedger

KB = 1024


@pytest.fixture(autouse=True)
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_UPLOAD_BYTES", 1 * KB)
    monkeypatch.setattr(limits, "UPLOAD_REQUEST_BYTES", 2 * KB)
    monkeypatch.setattr(limits, "UPLOAD_VISITOR_BYTES", 3 * KB)
    monkeypatch.setattr(limits, "UPLOAD_TOTAL_BYTES", 100 * KB)
    monkeypatch.delenv(TRUSTED_PROXIES_ENV, raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)


class StandIn:
    """An upload route: counts the requests it was given, optionally holds each until
    ``gate`` opens, reads the body and answers one path per request (as gradio does)."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.entered = 0
        self.gate = gate

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.entered += 1
        number = self.entered
        if self.gate is not None:
            await self.gate.wait()
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.dumps([f"/nowhere/{number}/t.json"]).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


async def upload(app: Any, size: int, peer: str, forwarded: str | None = None) -> int:
    """One upload request of ``size`` bytes from ``peer``; its status."""
    headers = [(b"content-length", str(size).encode())]
    if forwarded is not None:
        headers.append((b"x-forwarded-for", forwarded.encode()))
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/gradio_api/upload",
        "headers": headers,
        "client": (peer, 40000),
    }
    sent = [{"type": "http.request", "body": b"x" * size, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if sent:
            return sent.pop()
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    status = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def test_a_forwarded_address_from_an_unnamed_proxy_is_not_a_new_visitor() -> None:
    """One client naming a new address in each request was a new visitor each time."""
    capped = CapUploads(StandIn(), UploadLedger())

    async def run() -> list[int]:
        return [
            await upload(capped, 1000, "203.0.113.7", forwarded=f"198.51.100.{i}") for i in range(6)
        ]

    statuses = run_async(run())
    assert statuses == [200, 200, 200, 429, 429, 429]  # 3 KB a visitor, 1,000 bytes each


def test_a_named_proxy_s_forwarded_address_is_read_from_its_right_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Behind a named proxy each client is its own visitor; what a client wrote to the left of
    the address the proxy appended is never read."""
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "10.0.0.1")
    capped = CapUploads(StandIn(), UploadLedger())

    async def run() -> list[int]:
        first = [
            await upload(capped, 1000, "10.0.0.1", forwarded=f"192.0.2.{i}, 198.51.100.1")
            for i in range(4)
        ]
        other = await upload(capped, 1000, "10.0.0.1", forwarded="198.51.100.2")
        return [*first, other]

    assert run_async(run()) == [200, 200, 200, 429, 200]


def test_simultaneous_uploads_are_counted_when_they_start() -> None:
    """30 uploads at once from one address: only as many as the visitor's cap holds are read."""
    gate = asyncio.Event()
    route = StandIn(gate)
    capped = CapUploads(route, UploadLedger())

    async def run() -> list[int]:
        tasks = [asyncio.create_task(upload(capped, 1000, "203.0.113.7")) for _ in range(30)]
        for _ in range(10):
            await asyncio.sleep(0)  # every request has started and is held in the route
        gate.set()
        return list(await asyncio.gather(*tasks))

    statuses = run_async(run())
    assert route.entered == 3
    assert sorted(statuses) == [200] * 3 + [429] * 27


def test_an_upload_under_way_counts_against_everyone_s_total(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "UPLOAD_TOTAL_BYTES", 2500)
    gate = asyncio.Event()
    ledger = UploadLedger()
    capped = CapUploads(StandIn(gate), ledger)

    async def run() -> tuple[list[int], int, int]:
        tasks = [asyncio.create_task(upload(capped, 1000, f"203.0.113.{i}")) for i in (1, 2, 3)]
        for _ in range(10):
            await asyncio.sleep(0)
        under_way = ledger.total()
        gate.set()
        return list(await asyncio.gather(*tasks)), under_way, ledger.total()

    statuses, under_way, after = run_async(run())
    assert statuses == [200, 200, 503]
    assert under_way == 2000
    assert after == 2000  # the two recorded files (1,000 bytes each, said by their length)


PROXY_CASES = [
    # (connection's address, X-Forwarded-For, trusted proxies)
    ("203.0.113.7", "198.51.100.1", ""),
    ("127.0.0.1", "198.51.100.1", ""),
    ("10.0.0.1", "198.51.100.1", "10.0.0.1"),
    ("10.0.0.1", "192.0.2.9, 198.51.100.1", "10.0.0.1"),
    ("10.0.0.1", "192.0.2.9, 198.51.100.1, 10.0.0.2", "10.0.0.0/8"),
    ("10.0.0.1", "10.0.0.3, 10.0.0.2", "10.0.0.0/8"),
    ("203.0.113.7", "192.0.2.9", "10.0.0.0/8"),
    ("::1", "2001:db8::5", "::1"),
    ("10.0.0.1", None, "10.0.0.1"),
]


@pytest.mark.parametrize(("peer", "forwarded", "trusted"), PROXY_CASES)
def test_the_client_address_is_uvicorn_s_reading_of_the_same_proxies(
    peer: str, forwarded: str | None, trusted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, trusted)
    headers = [] if forwarded is None else [(b"x-forwarded-for", forwarded.encode())]
    scope = {"type": "http", "headers": headers, "client": (peer, 1234)}
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["client"][0])

    # uvicorn with no trusted host: "" matches none (its default trusts loopback).
    run_async(ProxyHeadersMiddleware(app, trusted_hosts=trusted)(dict(scope), None, None))  # type: ignore[arg-type]
    # As a handler meets it: the scope, Starlette's request, and gradio's request wrapping one
    # (whose unknown attributes gradio reads through JSON, which the scope's bytes refuse).
    starlette = Request(dict(scope))
    assert client_address(scope) == seen[0]
    assert client_address(starlette) == seen[0]
    assert client_address(gr.Request(request=starlette)) == seen[0]


def test_install_tells_uvicorn_the_same_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn.config

    from ui.serving import clients

    monkeypatch.setitem(uvicorn.config.HTTP_PROTOCOLS, "auto", "unchanged")
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1")
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "")
    clients.install()
    assert uvicorn.config.Config(app=None).forwarded_allow_ips == ""  # type: ignore[arg-type]
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "10.0.0.0/8, 192.0.2.1")
    clients.install()
    assert uvicorn.config.Config(app=None).forwarded_allow_ips == "10.0.0.0/8,192.0.2.1/32"  # type: ignore[arg-type]
    assert uvicorn.config.HTTP_PROTOCOLS["auto"] == "ui.serving.clients:TimedHTTPProtocol"


def test_a_space_trusts_its_private_network_and_a_wrong_proxy_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ui.serving.clients import parse_proxies

    scope = {
        "type": "http",
        "headers": [(b"x-forwarded-for", b"198.51.100.1")],
        "client": ("10.16.3.80", 1),
    }
    assert client_address(scope) == "10.16.3.80"
    monkeypatch.setenv("SPACE_ID", "someone/visualiser")
    assert client_address(scope) == "198.51.100.1"
    with pytest.raises(ValueError, match=r"not 'proxy\.example'"):
        parse_proxies("127.0.0.1, proxy.example")


def test_the_command_line_names_the_trusted_proxies(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], main_launches: Any
) -> None:
    import os

    import app as visualiser

    monkeypatch.setattr(visualiser, "return_memory_when_idle", lambda: None)
    monkeypatch.setattr(visualiser, "install_shipped_models", lambda: {})
    # main() writes both for its server (and its workers): restored after the test.
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "")
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "")
    with pytest.raises(SystemExit):
        visualiser.main(["--trusted-proxy", "proxy.example"])
    error = capsys.readouterr().err
    assert "--trusted-proxy" in error and "'proxy.example'" in error and "Traceback" not in error
    visualiser.main(["--trusted-proxy", "10.0.0.1", "--trusted-proxy", "192.168.0.0/16"])
    assert main_launches["blocked"]
    assert os.environ[TRUSTED_PROXIES_ENV] == "10.0.0.1,192.168.0.0/16"


def test_the_cluster_s_workers_read_the_address_its_haproxy_forwards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    from ui.serving import cluster

    config = cluster.haproxy_config("127.0.0.1:7860", [("w1", "127.0.0.1:40001")])
    directives = [line.strip() for line in config.splitlines()]
    assert "option forwardfor" in directives and "timeout http-request 30s" in directives
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "10.0.0.9")
    args = argparse.Namespace(workers=2, no_balancer=False)
    worker = cluster.Worker("w1", "127.0.0.1", 40001)
    env = cluster.Cluster(args).worker_env(worker)
    assert env[TRUSTED_PROXIES_ENV].split(",") == ["10.0.0.9", cluster.HAPROXY_SOURCE]
    alone = cluster.Cluster(argparse.Namespace(workers=2, no_balancer=True)).worker_env(worker)
    assert alone[TRUSTED_PROXIES_ENV] == "10.0.0.9"  # only what the operator named
    # A worker so configured reads the client's address behind HAProxy.
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, env[TRUSTED_PROXIES_ENV])
    scope = {
        "headers": [(b"x-forwarded-for", b"192.0.2.1"), (b"x-forwarded-for", b"198.51.100.7")],
        "client": (cluster.HAPROXY_SOURCE, 5000),
    }
    assert client_address(scope) == "198.51.100.7"
