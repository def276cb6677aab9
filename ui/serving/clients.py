"""The client as the server sees it: its address, and how long it may take to send a request.

**Its address.** A client can write anything in ``X-Forwarded-For``: trusted from anyone, one
client filled everyone's upload space in 11 s by naming a new address in each request. So
`client_address` reads the connection's own address, and reads the forwarded chain only when
that connection comes from a proxy the operator named (``--trusted-proxy``,
``$VISUALISER_TRUSTED_PROXIES``: addresses or networks such as ``10.0.0.0/8``). A proxy appends
the address it was reached from, so the chain is read from its right end: the first address
that is not a trusted proxy is the client's, and whatever a client wrote to the left of it is
never read. ``python app.py --workers N`` names its own HAProxy (``ui/serving/cluster.py``);
on a Hugging Face Space, which is reached only through Hugging Face's proxy on the Space's
private network, the private networks are the default. uvicorn rewrites the connection's
address from the header by itself (by default for a proxy on loopback, which let a loopback
client name any address): `install` sets uvicorn's list to this same one, so that gradio's
``request.client`` and `client_address` agree.

**How long it may take.** uvicorn times out neither a request's head sent a byte a second nor
a body that never ends: each such connection is held as long as the client likes, and a few
hundred of them hold every file descriptor. `install` puts `TimedHTTPProtocol` in uvicorn's
place (gradio builds uvicorn's configuration itself and offers no other hook): a request's head
must arrive within ``limits.REQUEST_HEAD_TIMEOUT_S``; `TimeRequestBodies`, an ASGI middleware,
bounds the time to receive its body (``limits.REQUEST_BODY_TIMEOUT_S`` and a floor on the rate,
``limits.REQUEST_BODY_MIN_RATE``). Both answer 408 and close the connection. HAProxy, in front
of the workers, has its own ``timeout http-request``.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import os
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from . import limits
from .event_streams import WatchedSend

log = logging.getLogger("visualiser.clients")

TRUSTED_PROXIES_ENV = "VISUALISER_TRUSTED_PROXIES"
"""The proxies whose ``X-Forwarded-For`` is read: addresses or networks, separated by commas."""
SPACE_PROXIES = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"
"""A Space's default: its container is reached only through Hugging Face's proxy, from the
Space's private network."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_proxies(text: str) -> tuple[Network, ...]:
    """Addresses and networks (``127.0.0.1``, ``10.0.0.0/8``, ``::1``), separated by commas or
    spaces. Raises ValueError naming one that is neither."""
    networks = []
    for item in text.replace(",", " ").split():
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(
                f"a trusted proxy is an IP address or network such as 127.0.0.1 or 10.0.0.0/8, "
                f"not {item[:60]!r}"
            ) from None
    return tuple(networks)


def trusted_proxies_text() -> str:
    """The trusted proxies as configured: ``$VISUALISER_TRUSTED_PROXIES``, else a Space's
    private networks on a Space, else none (``""``)."""
    given = os.environ.get(TRUSTED_PROXIES_ENV)
    if given is not None:
        return given
    return SPACE_PROXIES if os.environ.get("SPACE_ID") else ""


@functools.lru_cache(maxsize=8)
def _networks(text: str) -> tuple[Network, ...]:
    try:
        return parse_proxies(text)
    except ValueError:
        log.warning("%s is not a list of addresses: no proxy is trusted", TRUSTED_PROXIES_ENV)
        return ()


def _trusted(host: str, networks: tuple[Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in networks)


def _host(hop: str) -> str:
    """The address of one ``X-Forwarded-For`` entry (``1.2.3.4:5678``, ``[::1]:80`` → the host)."""
    hop = hop.strip()
    if hop.startswith("["):
        return hop[1 : hop.find("]")] if "]" in hop else hop
    if hop.count(":") == 1:
        return hop.split(":", 1)[0]
    return hop


def _scope_parts(request: Any) -> tuple[str, list[str]]:
    """(the connection's address, the ``X-Forwarded-For`` values in order) of an ASGI scope,
    a Starlette request or a ``gr.Request``."""
    # A gr.Request reads an attribute it lacks from its Starlette request through JSON, which
    # the scope's bytes refuse: its own request is taken from its __dict__.
    inner = vars(request).get("request") if hasattr(request, "__dict__") else None
    scope: Any = (
        request
        if isinstance(request, dict)
        else getattr(inner if inner is not None else request, "scope", None)
    )
    if isinstance(scope, dict):
        client = scope.get("client")
        forwarded = [
            value.decode("latin-1")
            for name, value in scope.get("headers") or []
            if name == b"x-forwarded-for"
        ]
        return (str(client[0]) if client else "unknown"), forwarded
    # A gr.Request made for a queued event: its client and headers as plain attributes.
    client = getattr(request, "client", None)
    host = getattr(client, "host", None) or (
        client.get("host") if isinstance(client, dict) else None
    )
    headers = getattr(request, "headers", None) or {}
    value = headers.get("x-forwarded-for") if hasattr(headers, "get") else None
    return str(host or "unknown"), [value] if value else []


def client_address(request: Any) -> str:
    """The client's address as this server sees it: the connection's, or, when that is a trusted
    proxy, the last ``X-Forwarded-For`` address that is not a trusted proxy (see the module's
    notes). ``request``: an ASGI scope, a Starlette request or a ``gr.Request``."""
    peer, forwarded = _scope_parts(request)
    networks = _networks(trusted_proxies_text())
    if not networks or not _trusted(peer, networks):
        return peer
    hops = [hop for value in forwarded for hop in value.split(",") if hop.strip()]
    for hop in reversed(hops):
        host = _host(hop)
        if not _trusted(host, networks):
            return host[:100]
    return _host(hops[0])[:100] if hops else peer


# -- slow clients ---------------------------------------------------------------------------


_TIMEOUT_PAGE = (
    b"The request took too long to arrive and the connection was closed: check the network "
    b"and try again."
)


def _timeout_answer() -> bytes:
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(_TIMEOUT_PAGE)
    ) + _TIMEOUT_PAGE


class TimedHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """uvicorn's HTTP protocol (h11 or httptools, as uvicorn chooses), with a deadline on each
    request's head: from the connection's start, or the end of the previous answer, the head
    must arrive within ``limits.REQUEST_HEAD_TIMEOUT_S``, else the client is answered 408 and
    the connection closed. (uvicorn's keep-alive timer stops at the first byte of a head, so a
    head sent a byte a second was never timed out.)"""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_cycle: Any = None
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_cycle = self.cycle  # a new request's head makes a new cycle
        self._head_timer = self.loop.call_later(limits.REQUEST_HEAD_TIMEOUT_S, self._head_overdue)

    def _head_arrived(self) -> None:
        if self._head_timer is not None and self.cycle is not self._head_cycle:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._head_arrived()

    def on_response_complete(self) -> None:
        answered = self.cycle
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.cycle is answered:  # no pipelined request started: the next head is timed
            self._arm_head_timer()
        else:
            self._head_arrived()

    def handle_websocket_upgrade(self, *args: Any) -> Any:
        if self._head_timer is not None:  # another protocol reads the connection from here
            self._head_timer.cancel()
            self._head_timer = None
        return super().handle_websocket_upgrade(*args)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self.cycle is not self._head_cycle or self.transport.is_closing():
            return
        log.info(
            "closed a connection from %s: its request's head took over %g s",
            (self.client or ("?",))[0],
            limits.REQUEST_HEAD_TIMEOUT_S,
        )
        self.transport.write(_timeout_answer())
        self.transport.close()


class _BodyOverdue(Exception):
    """The request's body did not arrive in time."""


class TimeRequestBodies:
    """ASGI middleware: a request's body must arrive within ``limits.REQUEST_BODY_TIMEOUT_S``
    plus its declared length at ``limits.REQUEST_BODY_MIN_RATE`` bytes a second; past that the
    client is answered 408 and the connection closed. Only the body is timed: once it has
    arrived, an answer may stream for as long as it likes (gradio's event streams)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        length = 0
        for name, value in scope.get("headers") or []:
            if name == b"content-length" and value.isdigit():
                length = int(value)
        loop = asyncio.get_running_loop()
        deadline = (
            loop.time() + limits.REQUEST_BODY_TIMEOUT_S + length / limits.REQUEST_BODY_MIN_RATE
        )
        received = False

        async def timed_receive() -> dict[str, Any]:
            nonlocal received
            if received:
                return dict(await receive())
            try:
                message = dict(await asyncio.wait_for(receive(), max(0.0, deadline - loop.time())))
            except TimeoutError:
                raise _BodyOverdue from None
            if message.get("type") != "http.request" or not message.get("more_body", False):
                received = True
            return message

        watched_send = WatchedSend(send)
        try:
            await self.app(scope, timed_receive, watched_send)
        except _BodyOverdue:
            log.info(
                "closed a connection from %s: its request's body took too long",
                client_address(scope),
            )
            if not watched_send.started:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 408,
                        "headers": [
                            (b"content-type", b"text/plain; charset=utf-8"),
                            (b"connection", b"close"),
                            (b"content-length", b"%d" % len(_TIMEOUT_PAGE)),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": _TIMEOUT_PAGE})


def install() -> None:
    """Before the server starts: uvicorn reads forwarded addresses from the trusted proxies
    only, and times out slow requests' heads with `TimedHTTPProtocol` (see the module's notes).
    ``TimeRequestBodies`` goes in the app's middleware."""
    import uvicorn.config

    os.environ["FORWARDED_ALLOW_IPS"] = ",".join(
        str(network) for network in _networks(trusted_proxies_text())
    )
    uvicorn.config.HTTP_PROTOCOLS["auto"] = f"{__name__}:TimedHTTPProtocol"
