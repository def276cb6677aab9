"""A throwaway ``redis-server`` for the tests: on a free loopback port, nothing saved to disk,
stopped when the test is done. Where ``redis-server`` (or the ``redis`` client) is missing the
tests that need it are skipped, unless ``REQUIRE_CLUSTER=1`` (set by ``.ci/run``) makes that a failure."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest


def require(what: str) -> None:
    """Skip the test for lack of ``what``, or fail it where the services are required."""
    message = f"{what} is not installed"
    if os.environ.get("REQUIRE_CLUSTER") == "1":
        pytest.fail(f"{message} (REQUIRE_CLUSTER=1)")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process; :meth:`stop` kills it (as a crash would)."""

    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            require("redis-server")
        try:
            import redis
        except ImportError:
            require("the redis client (pip install redis)")
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._folder = tempfile.TemporaryDirectory(prefix="redis-test-")
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", self._folder.name,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)
        client.close()

    def stop(self) -> None:
        """Kill the server and wait for it."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._folder.cleanup()
