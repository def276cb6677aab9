"""A client that sends its request a byte at a time is answered 408 and cut off.

uvicorn as gradio starts it (``http="auto"``, after `clients.install`), serving a small app
behind `TimeRequestBodies`, with the limits lowered to a second or two; the clients are raw
sockets."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ui.serving import clients, limits
from ui.serving.clients import TimeRequestBodies


async def echo(request: Request) -> PlainTextResponse:
    body = await request.body()
    return PlainTextResponse(f"read {len(body)} bytes")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(limits, "REQUEST_HEAD_TIMEOUT_S", 1.5)
    monkeypatch.setattr(limits, "REQUEST_BODY_TIMEOUT_S", 1.5)
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1")
    clients.install()
    # Inside Starlette's error middleware, as gradio's app_kwargs put it.
    app = Starlette(
        routes=[Route("/", echo, methods=["GET", "POST"])],
        middleware=[Middleware(TimeRequestBodies)],
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    while not served.started:
        time.sleep(0.05)
    yield port
    served.should_exit = True
    thread.join(10)


def answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 15 s pass)."""
    sock.settimeout(15)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except TimeoutError:
        pass
    return got


def test_a_head_sent_a_byte_at_a_time_is_cut_off(server: int) -> None:
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 40 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sent = 0
        try:
            for byte in head:
                sock.sendall(bytes([byte]))
                sent += 1
                time.sleep(0.1)
        except OSError:  # the server closed the connection
            pass
        got = answer(sock)
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    assert sent < len(head)  # cut off before the head was whole
    # A head sent whole is answered.
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert b"200 OK" in answer(sock)


def test_a_body_that_stops_arriving_is_cut_off(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"a" * 10)
        got = answer(sock)
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    assert b"took too long" in got
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello"
        )
        assert b"read 5 bytes" in answer(sock)
