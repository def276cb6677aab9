"""A script put into the app's page by an ASGI middleware, before gradio's own script runs.

Both the link's opening tab (``ui/links/first_views.py``) and a worker's restart banner
(``ui/serving/cluster.py``) need a script that runs before gradio's reads the page: gradio
builds the page itself, so it is added on the way out, in the answer's body.
"""

from __future__ import annotations

from typing import Any

# Where the script goes: before gradio's own module script.
GRADIO_SCRIPT = b'<script type="module"'


async def serve_with_script(
    app: Any,
    scope: dict[str, Any],
    receive: Any,
    send: Any,
    script: bytes,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Run ``app`` on the request and send its answer with ``script`` (a whole ``<script>``
    element) before gradio's module script when the answer is an uncompressed HTML page of
    status 200 (anything else unchanged), and ``headers`` added to every answer."""
    start: dict[str, Any] = {}
    body: list[bytes] = []

    async def buffered(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        body.append(message.get("body", b""))
        if message.get("more_body"):
            return
        content = b"".join(body)
        given = dict(start.get("headers", []))
        html_page = given.get(b"content-type", b"").startswith(b"text/html")
        if start.get("status") == 200 and html_page and b"content-encoding" not in given:
            content = content.replace(GRADIO_SCRIPT, script + GRADIO_SCRIPT, 1)
        fixed = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
        fixed += [(b"content-length", b"%d" % len(content)), *(headers or [])]
        await send({**start, "headers": fixed})
        await send({"type": "http.response.body", "body": content})

    await app(scope, receive, buffered)
