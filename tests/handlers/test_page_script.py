"""The middlewares' script reaches gradio's page before its own script, once, with the answer's
length and headers right; any other answer passes unchanged."""

from __future__ import annotations

from typing import Any

from serving import run_async

from ui.serving.page_script import serve_with_script

PAGE = b'<html><head><script type="module" src="/assets/index.js"></script></head></html>'


def _answer(status: int, kind: bytes, chunks: list[bytes]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", kind), (b"content-length", b"%d" % sum(map(len, chunks)))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for i, chunk in enumerate(chunks):
            more = i < len(chunks) - 1
            await send({"type": "http.response.body", "body": chunk, "more_body": more})

    return app


def _serve(app: Any, script: bytes, headers: list | None = None) -> tuple[dict, bytes]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    run_async(serve_with_script(app, {"type": "http"}, None, send, script, headers))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start, body


def test_the_script_goes_before_gradios_module_once_and_the_length_follows() -> None:
    script = b"<script>window.x = 1</script>"
    app = _answer(200, b"text/html; charset=utf-8", [PAGE[:20], PAGE[20:]])
    start, body = _serve(app, script, [(b"set-cookie", b"a=b")])
    # Written out: the page with the script spliced in before gradio's <script type="module">.
    at = PAGE.index(b'<script type="module"')
    assert body == PAGE[:at] + script + PAGE[at:]
    headers = start["headers"]
    assert (b"content-length", b"%d" % len(body)) in headers
    assert [v for k, v in headers if k == b"content-length"] == [b"%d" % len(body)]
    assert (b"set-cookie", b"a=b") in headers


def test_anything_but_a_plain_page_passes_unchanged_but_for_the_headers() -> None:
    script = b"<script>window.x = 1</script>"
    for status, kind in ((404, b"text/html"), (200, b"application/json")):
        start, body = _serve(_answer(status, kind, [PAGE]), script, [(b"x-worker", b"w1")])
        assert body == PAGE and start["status"] == status
        assert (b"x-worker", b"w1") in start["headers"]
