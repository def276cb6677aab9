"""What the tests and the benchmarks that drive the running app share: how it is launched on
loopback, how headless Chromium is found and started, and the lecture example they request.

Benchmarks must not import from ``tests/``; both import this module. Nothing here runs in the
app itself.
"""

from __future__ import annotations

import gc
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Headless Chromium without the network chatter of a desktop browser."""
VIEWPORT = {"width": 1280, "height": 800}
"""A student's laptop; the README's screenshots are taken at this size."""

CROSS = "cross-attention (decoder → encoder)"
"""The Attention tab's cross-attention choice."""
GENERATE = [
    "the small cat sees a red ball",
    "translate",
    "greedy",
    1.0,
    0,
    1.0,
    3,
    40,
    0,
    1,
    1,
    False,
]
"""The arguments of ``/generate`` (and ``/generate_step``, ``/generate_reset``) for the lecture
example: the bundled translation model, greedy decoding."""


def chromium() -> tuple[str, str | None]:
    """``(wanted, executable)``: the Chromium asked for (``$CHROMIUM``, else Debian's
    ``/usr/bin/chromium``) and the one found (that file, else ``chromium`` on PATH, else None)."""
    wanted = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    return wanted, wanted if Path(wanted).is_file() else shutil.which("chromium")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def launched(demo: Any) -> Iterator[str]:
    """``demo`` launched in-process on 127.0.0.1 with the app's launch options (as ``python
    app.py`` launches it), without blocking; yields its URL and closes it on exit, dropping
    the models its registry read (a closed app stays reachable: see ``ModelRegistry.release``)
    and giving the freed memory back to the system (glibc), so that a process that launches
    one app after another holds one app's memory, not the sum."""
    from .demo import launch_options
    from .serving.memory import glibc_trim

    port = free_port()
    try:
        demo.launch(
            prevent_thread_lock=True,
            server_name="127.0.0.1",
            server_port=port,
            quiet=True,
            **launch_options(),
        )
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()
        registry = getattr(demo, "model_registry", None)
        if registry is not None:
            registry.release()
            gc.collect()
            trim = glibc_trim()
            if trim is not None:
                trim()
