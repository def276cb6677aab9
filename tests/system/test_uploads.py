"""Uploads are bounded per request, per visitor and for the app, and deleted once unused.

The fast tests put `CapUploads` in front of a stand-in upload route (it writes each file as
gradio does, in a folder named by its hash, and answers their paths); the slow one drives the
launched app's own ``/gradio_api/upload``."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from ui.serving import limits, uploads
from ui.serving.uploads import CapUploads, UploadLedger

KB = 1024


@pytest.fixture
def small_limits(monkeypatch):
    monkeypatch.setattr(limits, "MAX_UPLOAD_BYTES", 1 * KB)
    monkeypatch.setattr(limits, "UPLOAD_REQUEST_BYTES", 2 * KB)
    monkeypatch.setattr(limits, "UPLOAD_VISITOR_BYTES", 3 * KB)
    monkeypatch.setattr(limits, "UPLOAD_TOTAL_BYTES", 5400)  # five files and a form
    monkeypatch.setattr(limits, "UPLOAD_IDLE_S", 60.0)


@pytest.fixture
def served(tmp_path, small_limits):
    """(app, ledger, folder): the stand-in upload route behind `CapUploads`."""
    folder = tmp_path / "uploads"

    async def upload(request: Request) -> JSONResponse:
        form = await request.form()
        paths = []
        for item in form.getlist("files"):
            data = await item.read()  # type: ignore[union-attr]
            where = folder / hashlib.sha256(data).hexdigest() / str(item.filename)  # type: ignore[union-attr]
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_bytes(data)
            paths.append(str(where))
        return JSONResponse(paths)

    ledger = UploadLedger()
    app = Starlette(routes=[Route("/gradio_api/upload", upload, methods=["POST"])])
    return CapUploads(app, ledger), ledger, folder


def send(app: CapUploads, *sizes: int, visitor: str = "1.2.3.4", seed: int = 0):
    """An upload of one file per size, from a connection of ``visitor``'s address."""
    files = [
        ("files", (f"f{i}.json", bytes([(seed + i) % 256]) * size)) for i, size in enumerate(sizes)
    ]
    return TestClient(app, client=(visitor, 50000)).post("/gradio_api/upload", files=files)


def on_disk(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def test_one_request_carries_one_file_s_worth(served):
    client, ledger, folder = served
    many = send(client, *[900] * 5)  # five files of 900 bytes in one request
    assert many.status_code == 413 and "one file of at most 1,024 bytes" in many.text, many.text
    assert on_disk(folder) == 0 and ledger.total() == 0  # refused before any byte was read
    assert send(client, 900).status_code == 200


def test_a_visitor_s_uploads_are_capped_and_others_are_not(served):
    client, ledger, folder = served
    assert send(client, 1000, seed=1).status_code == 200
    assert send(client, 1000, seed=2).status_code == 200
    third = send(client, 1000, seed=3)
    assert third.status_code == 429
    assert (
        "your uploads take 2,000 bytes" in third.text and "per visitor is 3,072 bytes" in third.text
    )
    assert ledger.visitor_bytes("1.2.3.4") == 2000 == on_disk(folder)
    other = send(client, 1000, visitor="5.6.7.8", seed=4)
    assert other.status_code == 200
    assert send(client, 1000, visitor="5.6.7.8", seed=5).status_code == 200
    full = send(client, 1000, visitor="9.9.9.9", seed=6)  # 4,000 bytes held, 5,400 for everyone
    assert full.status_code == 200
    over = send(client, 1000, visitor="8.8.8.8", seed=7)
    assert over.status_code == 503 and "try again" in over.text
    assert on_disk(folder) == 5000


def test_unused_uploads_are_deleted_and_a_used_one_is_kept(served, monkeypatch):
    client, ledger, _ = served
    first = json.loads(send(client, 1000, seed=1).text)[0]
    second = json.loads(send(client, 1000, seed=2).text)[0]
    assert Path(first).exists() and Path(second).exists()
    now = time.monotonic()
    monkeypatch.setattr(uploads.time, "monotonic", lambda: now + 50)
    ledger.touch(second)  # a request read the second file 50 s later
    monkeypatch.setattr(uploads.time, "monotonic", lambda: now + 61)
    assert ledger.sweep() == [first]
    assert not Path(first).exists() and not Path(first).parent.exists()
    assert Path(second).exists()
    # the deleted one no longer counts: the visitor may upload two more
    assert send(client, 1000, seed=3).status_code == 200
    assert send(client, 1000, seed=4).status_code == 429


def test_an_upload_of_unknown_length_is_refused(served):
    client = TestClient(served[0])

    def chunks():
        yield b"--x\r\n"

    answer = client.post(
        "/gradio_api/upload",
        content=chunks(),
        headers={"content-type": "multipart/form-data; boundary=x"},
    )
    assert answer.status_code == 411


def test_the_tokenize_tab_marks_its_upload_as_used(tmp_path):
    from ui.tabs.tokenize.choices import uploaded_tokenizer

    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    ledger = uploads.LEDGER
    ledger.record("visitor", [str(path)], 2)
    try:
        before = ledger.paths()
        assert before[-1] == str(path)
        ledger.record("visitor", [str(tmp_path / "other.json")], 2)
        assert ledger.paths()[-1] != str(path)
        uploaded_tokenizer(str(path))
        assert ledger.paths()[-1] == str(path)  # now the most recently used
    finally:
        ledger.forget(str(path))
        ledger.forget(str(tmp_path / "other.json"))


@pytest.mark.slow
def test_the_app_caps_uploads_per_visitor_and_per_request(tmp_path):
    """The launched app: 19 MB files from one visitor, until the 50 MB a visitor may keep,
    each request naming a new ``X-Forwarded-For`` (from loopback, which uvicorn trusted by
    default: a new visitor each time); 200 files of 1 MB in one request."""
    from serving import serve

    before = set(uploads.LEDGER.paths())  # what earlier tests of this process uploaded
    with serve() as (_, url):
        statuses = []
        for seed in range(4):
            body = bytes([seed]) * (19 * 2**20)
            answer = httpx.post(
                f"{url}gradio_api/upload",
                files={"files": ("t.json", body)},
                headers={"x-forwarded-for": f"198.51.100.{seed}"},
                timeout=60,
            )
            statuses.append(answer.status_code)
            if answer.status_code != 200:
                assert "limit per visitor is 50 MB" in answer.text, answer.text
        assert statuses[:2] == [200, 200] and 429 in statuses[2:]
        many = [("files", (f"{i}.json", bytes([i % 256]) * 2**20)) for i in range(200)]
        bulk = httpx.post(f"{url}gradio_api/upload", files=many, timeout=60)
        assert bulk.status_code == 413
        held = [path for path in uploads.LEDGER.paths() if path not in before]
        assert len(held) == 2  # what the app keeps: the two it let in
        for path in held:
            uploads.LEDGER.forget(path)
            assert not Path(path).exists()
