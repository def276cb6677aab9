"""Every core, then several machines: N app processes behind HAProxy, sharing one Redis.

One Python process runs about one core of Python whatever the machine, so ``python app.py
--workers N`` starts N of them (each a plain ``python app.py`` on a loopback port of its own)
behind HAProxy, an existing layer-7 balancer, never one of our own. A student's session lives
in one process (their generation, their trained model), so HAProxy pins each browser to its
worker with a cookie (``VISUALISER_WORKER``), never by client IP: a lecture hall behind one
router is one IP. What sessions share across processes (follow-me rooms, the shared views) is
kept in Redis, named to each worker by ``VISUALISER_REDIS_URL``; each worker's torch threads
are ``cores // N`` so that N workers never oversubscribe the cores.

The launcher supervises: a worker that dies is started again on its port. Its students' pages
were served by a process that is gone, and so are their sessions: every worker stamps the page
it serves with a cookie naming itself and its start (``visualiser_page``) and names itself in
every answer; it refuses the queued events of a page another process served (HTTP 409,
:data:`RESTARTED`: an API client's signal), and the page's script, as soon as another process
answers it (gradio asks every 2 s once its connection is lost), shows that sentence in a banner
with a Reload button, instead of gradio's own silent reload, which would leave the student
wondering why their generation started over. Ctrl-C or SIGTERM stops the workers, HAProxy and
the Redis it started; each child also gets SIGTERM if the launcher itself is killed (Linux), so
nothing is left.

Several machines: each host runs ``python app.py --workers N --no-balancer --redis URL --host
ADDRESS --port P`` (workers on ports P .. P+N-1, supervised, no HAProxy) and one HAProxy in
front lists them all (``deploy/haproxy.cfg``, ``deploy/README.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

from .clients import TRUSTED_PROXIES_ENV
from .page_script import serve_with_script

log = logging.getLogger("visualiser.cluster")

WORKER_ENV = "VISUALISER_WORKER"
"""The worker's name (``w1``, ``w2``, ...), set by the launcher; unset in a plain process."""
WORKERS_ENV = "VISUALISER_WORKERS"
"""``--workers``'s default where set (a Space's variable)."""
REDIS_ENV = "VISUALISER_REDIS_URL"
"""Where the workers keep what sessions share across processes (``redis://host:port/0``)."""
BALANCER_COOKIE = "VISUALISER_WORKER"
"""HAProxy's cookie: which worker a browser is pinned to."""
PAGE_COOKIE = "visualiser_page"
"""The worker's cookie: which process (name and start) served the page."""
HEALTH_PATH = "/visualiser-worker"
"""A cheap GET each worker answers itself (name, start, pid): HAProxy's health check."""
# How often a page asks its worker's name (a class of 100 makes 20 tiny requests a second,
# answered by the worker's middleware without gradio).
ASK_WORKER_MS = 5000
RESTARTED = (
    "This part of the server restarted: reload the page to go on; the page's address (a "
    "linked view, a room) is kept."
)
"""What a page served by a process that is gone is told, and its events are answered."""
INSTALL = "apt-get install haproxy redis-server"
STOP_GRACE_S = 10.0
"""How long a child is given to stop after SIGINT/SIGTERM before it is killed."""
APP = Path(__file__).resolve().parents[2] / "app.py"
HAPROXY_SOURCE = "127.0.0.1"
"""The address our HAProxy reaches the workers from (they listen on loopback)."""

HAPROXY_TEMPLATE = """\
global
    maxconn 4096
    log stdout format raw local0 info

defaults
    mode http
    # Errors only (a 502, a request to no worker), in the launcher's output.
    log global
    option httplog
    option dontlog-normal
    # A request to a worker that died (connection refused, or a kept-alive connection that
    # ends without an answer) is retried on another worker, whose answer has the page show
    # "reload the page" (the session was in the dead worker) rather than a 502.
    retries 2
    retry-on conn-failure empty-response
    # Only the last retry goes to another worker: the first is on the same one, since a live
    # worker may close an idle kept-alive connection just as a request is sent on it (an empty
    # response), and another worker would answer that student "reload" for nothing. Nor are
    # idle connections to a worker reused, which is where that race starts.
    option redispatch -1
    http-reuse never
    # A retried request must be kept whole (gradio's requests are small).
    option http-buffer-request
    # The client's address goes to the workers appended to X-Forwarded-For, which they read
    # from this proxy only (--trusted-proxy): the per-visitor caps count visitors, not HAProxy.
    option forwardfor
    timeout connect 5s
    # A request's head and buffered body must arrive within 30 s (408 after): a client that
    # sends a byte a second does not hold a connection for ever.
    timeout http-request 30s
    timeout queue 30s
    # gradio's queue streams results as server-sent events and the page keeps a heartbeat
    # stream open: an idle stream must not be cut while a student reads a figure.
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h

frontend visualiser
    bind {bind}
    default_backend workers

backend workers
    balance roundrobin
    # Sticky by cookie, never by client IP: a lecture hall behind one router is one IP.
    cookie {cookie} insert indirect nocache httponly
    # A worker busy with a long pass may answer its check late (its event loop shares two
    # cores with the passes): only a worker that fails three checks of 10 s gets no new
    # students, and even then a student already pinned to it stays (persist) unless it refuses
    # the connection (dead: redispatched above). Moving a live worker's students would lose
    # their sessions.
    option httpchk GET {health}
    http-check expect status 200
    option persist
    timeout check 10s
    default-server check inter 3s fall 3 rise 1
{servers}
"""


def _workers_from_env() -> int:
    """``--workers``'s default: ``$VISUALISER_WORKERS`` (a Gradio Space runs ``python app.py``
    with no arguments; a variable of the Space's settings chooses), else 1. A worker started by
    the launcher is one process, whatever its environment says."""
    given = os.environ.get(WORKERS_ENV, "").strip()
    if os.environ.get(WORKER_ENV) or not given.isdigit():
        return 1
    return int(given)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line's options for serving with several processes."""
    parser.add_argument(
        "--workers",
        type=int,
        default=_workers_from_env(),
        metavar="N",
        help="serve with N app processes behind HAProxy, sticky by cookie, sharing a Redis "
        f"(default ${WORKERS_ENV}, else 1: one plain process, neither needed; see "
        "deploy/README.md)",
    )
    parser.add_argument(
        "--redis",
        metavar="URL",
        help="with --workers: an existing Redis (redis://host:port/0) instead of starting one",
    )
    parser.add_argument(
        "--no-balancer",
        action="store_true",
        help="with --workers: start the workers on --host at ports --port .. --port+N-1 "
        "without HAProxy, for a balancer on another host (deploy/haproxy.cfg)",
    )


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse combinations that cannot work, in words (``parser.error`` exits)."""
    if args.workers < 1:
        parser.error(f"--workers must be 1 or more, not {args.workers}")
    if args.no_balancer and not args.redis:
        parser.error(
            "--no-balancer serves one host's workers of a larger group: give the group's "
            "Redis with --redis redis://HOST:PORT/0 (see deploy/README.md)"
        )
    if args.redis and not launches(args):
        parser.error("--redis goes with --workers N (N > 1) or --no-balancer")
    if launches(args) and args.share:
        parser.error("--share makes a link to one process; with --workers serve on --host")
    if args.redis and not args.redis.startswith(("redis://", "rediss://", "unix://")):
        parser.error(f"--redis takes a URL such as redis://127.0.0.1:6379/0, not {args.redis!r}")


def launches(args: argparse.Namespace) -> bool:
    """Whether the command line asks for the launcher (workers), not one plain process."""
    return bool(args.workers > 1 or args.no_balancer)


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Torch threads for each of ``workers`` processes on ``cores`` cores (this machine's)."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // workers)


def program(name: str) -> str | None:
    """Where the program ``name`` is: on PATH, else in an sbin folder (Debian puts haproxy in
    /usr/sbin, which a user's PATH often lacks)."""
    return shutil.which(name) or shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")


def missing_programs(need_redis: bool, need_haproxy: bool = True) -> str:
    """What to install when a program the launcher runs is missing, else ""."""
    wanted = ["haproxy"] * need_haproxy + ["redis-server"] * need_redis
    missing = [name for name in wanted if program(name) is None]
    if not missing:
        return ""
    return (
        f"--workers needs {' and '.join(missing)}, not found: install "
        f"{'them' if len(missing) > 1 else 'it'} ({INSTALL} on Debian or Ubuntu), or run "
        "without --workers (one process)."
    )


def haproxy_config(bind: str, servers: list[tuple[str, str]]) -> str:
    """HAProxy's configuration: listen on ``bind`` (``host:port``) and balance over
    ``servers`` (``(name, host:port)``; the name is also the worker's cookie value)."""
    lines = [f"    server {name} {address} cookie {name}" for name, address in servers]
    return HAPROXY_TEMPLATE.format(
        bind=bind,
        cookie=BALANCER_COOKIE,
        health=HEALTH_PATH,
        servers="\n".join(lines),
    )


def address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child, before it runs: SIGTERM when the launcher dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG), so that no worker outlives it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def _start(command: list[str], env: dict[str, str] | None = None, log_file: Any = None) -> Any:
    """A child in a session of its own (a terminal's Ctrl-C reaches the launcher only, which
    stops the children in order) that dies with the launcher."""
    return subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT if log_file is not None else None,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )


def _stop(process: Any, sig: int | None = signal.SIGTERM) -> None:
    """Ask ``process`` to stop with ``sig`` (None: it was asked already); kill it after
    :data:`STOP_GRACE_S`."""
    if process is None or process.poll() is not None:
        return
    if sig is not None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()


def redis_answers(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a Redis on ``host:port`` answers PING."""
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def worker_answers(host: str, port: int, timeout: float = 1.0) -> dict[str, Any] | None:
    """The worker's own description (``HEALTH_PATH``), or None while it does not serve."""
    try:
        url = f"http://{address(host, port)}{HEALTH_PATH}"
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return dict(json.loads(answer.read()))
    except (OSError, ValueError):
        return None


@dataclass
class Worker:
    """One app process: its name (HAProxy's cookie value), address and the process now."""

    name: str
    host: str
    port: int
    process: Any = None
    started: float = 0.0
    restarts: int = 0
    failures: int = 0  # deaths in a row within a minute of starting: the next start waits
    next_start: float = 0.0
    ready: bool = False


@dataclass
class Cluster:
    """The processes ``python app.py --workers N`` runs: Redis (unless given), the workers and
    HAProxy (unless ``--no-balancer``), supervised until :meth:`stop`."""

    args: argparse.Namespace
    workers: list[Worker] = field(default_factory=list)
    redis: Any = None
    haproxy: Any = None
    redis_url: str = ""
    folder: Path | None = None
    stopping: bool = False

    def worker_command(self, worker: Worker) -> list[str]:
        """``python app.py`` with the launcher's model options and the worker's address."""
        args = self.args
        command = [sys.executable, str(APP), "--host", worker.host, "--port", str(worker.port)]
        command += ["--device", args.device, "--dtype", args.dtype]
        for model in args.model:
            command += ["--model", model]
        if args.allow_download:
            command.append("--allow-download")
        return command

    def worker_env(self, worker: Worker) -> dict[str, str]:
        """The worker's environment: its name, the Redis, and its share of the cores."""
        threads = str(threads_per_worker(self.args.workers))
        env = {**os.environ, WORKER_ENV: worker.name, REDIS_ENV: self.redis_url}
        env.pop(WORKERS_ENV, None)
        if not self.args.no_balancer:
            # Every request reaches a worker through our HAProxy, which connects from loopback
            # and appends the client's address to X-Forwarded-For (`option forwardfor`): the
            # workers read it (ui/serving/clients.py), else every visitor would be HAProxy.
            named = [p for p in os.environ.get(TRUSTED_PROXIES_ENV, "").split(",") if p]
            env[TRUSTED_PROXIES_ENV] = ",".join([*named, HAPROXY_SOURCE])
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        # An explicit --port reaches the worker; a Space's GRADIO_SERVER_PORT must not.
        env.pop("GRADIO_SERVER_PORT", None)
        return env

    def start(self) -> None:
        """Start Redis (unless ``--redis``), the workers, then HAProxy (unless
        ``--no-balancer``); raise ``RuntimeError`` if Redis or HAProxy does not start."""
        args = self.args
        self.folder = Path(tempfile.mkdtemp(prefix="visualiser-cluster-"))
        if args.redis:
            self.redis_url = args.redis
        else:
            port = free_port()
            self.redis = _start(
                [
                    program("redis-server") or "redis-server",
                    *("--port", str(port), "--bind", "127.0.0.1", "--save", ""),
                    *("--appendonly", "no", "--dir", str(self.folder), "--loglevel", "warning"),
                ],
                log_file=(self.folder / "redis.log").open("w"),
            )
            deadline = time.monotonic() + 10
            while not redis_answers(port):
                if self.redis.poll() is not None or time.monotonic() > deadline:
                    said = (self.folder / "redis.log").read_text(errors="replace").strip()
                    raise RuntimeError(f"redis-server did not start: {said[-500:]}")
                time.sleep(0.05)
            self.redis_url = f"redis://127.0.0.1:{port}/0"
            log.info("Redis on %s (no persistence)", self.redis_url)
        if args.no_balancer:
            host = args.host
            names = [f"{socket.gethostname()}-{args.port + i}" for i in range(args.workers)]
            self.workers = [Worker(n, host, args.port + i) for i, n in enumerate(names)]
        else:
            self.workers = [
                Worker(f"w{i + 1}", "127.0.0.1", free_port()) for i in range(args.workers)
            ]
        for worker in self.workers:
            self.start_worker(worker)
        if not args.no_balancer:
            config = self.folder / "haproxy.cfg"
            servers = [(w.name, address(w.host, w.port)) for w in self.workers]
            header = "# Written by `python app.py --workers N` (ui/serving/cluster.py).\n"
            config.write_text(header + haproxy_config(address(args.host, args.port), servers))
            haproxy = program("haproxy") or "haproxy"
            self.haproxy = _start([haproxy, "-W", "-db", "-f", str(config)])
            time.sleep(0.5)
            if self.haproxy.poll() is not None:
                raise RuntimeError(f"haproxy did not start (its message is above; {config})")
        threads = threads_per_worker(args.workers)
        where = address(args.host, args.port)
        if args.no_balancer:
            where += f" to {args.port + args.workers - 1} (no balancer)"
        log.info("%d workers, %d torch threads each, on %s", args.workers, threads, where)

    def start_worker(self, worker: Worker) -> None:
        """Start (or start again) ``worker``'s process; its log goes to the launcher's."""
        worker.process = _start(self.worker_command(worker), env=self.worker_env(worker))
        worker.started = time.monotonic()
        worker.ready = False

    def supervise_once(self) -> None:
        """One round: a worker that exited is started again (after a pause that grows while it
        keeps dying young); raise ``RuntimeError`` if HAProxy or our Redis exited."""
        for name, process in (("haproxy", self.haproxy), ("redis-server", self.redis)):
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{name} exited ({process.returncode}); stopping")
        now = time.monotonic()
        for worker in self.workers:
            code = worker.process.poll() if worker.process is not None else 0
            if code is None:
                if not worker.ready and worker_answers(worker.host, worker.port, 0.2):
                    worker.ready = True
                    log.info("worker %s serves on port %d", worker.name, worker.port)
                continue
            if worker.next_start == 0.0:  # just found dead
                young = now - worker.started < 60
                worker.failures = worker.failures + 1 if young else 0
                # At once the first time; 1, 2, 4 ... 30 s while it keeps dying young.
                wait = min(30.0, 2.0 ** (worker.failures - 2)) if worker.failures > 1 else 0.0
                log.warning(
                    "worker %s exited (%s); starting it again%s",
                    worker.name,
                    code,
                    f" in {wait:.0f} s" if wait else "",
                )
                worker.next_start = now + wait
            if now >= worker.next_start:
                worker.next_start = 0.0
                worker.restarts += 1
                self.start_worker(worker)

    def stop(self) -> None:
        """Stop HAProxy, the workers (as Ctrl-C stops one: SIGINT) and our Redis; remove the
        temporary folder."""
        self.stopping = True
        _stop(self.haproxy)
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGINT)
        for worker in self.workers:  # all asked at once, then each waited for
            _stop(worker.process, None)
        _stop(self.redis)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def serve(args: argparse.Namespace) -> int:
    """Run ``python app.py --workers N`` until Ctrl-C or SIGTERM; the exit status."""
    problem = missing_programs(need_redis=not args.redis, need_haproxy=not args.no_balancer)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    # A Space's shipped models are installed once, here, not by N workers at the same time.
    from .space import install_shipped_models

    install_shipped_models()
    cluster = Cluster(args)

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        cluster.start()
        while True:
            cluster.supervise_once()
            time.sleep(0.5)
    except KeyboardInterrupt:
        log.info("stopping the workers")
        return 0
    except (RuntimeError, OSError) as error:
        print(f"Stopping: {error}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
        signal.signal(signal.SIGTERM, previous)


# --- In each worker ------------------------------------------------------------------------


def worker_name() -> str:
    """This process's worker name ("" in a plain ``python app.py``)."""
    return os.environ.get(WORKER_ENV, "")


def limit_threads() -> None:
    """Torch threads as the launcher shared the cores out (``OMP_NUM_THREADS``)."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))


RESTARTED_JS = """
(() => {
  const message = %s;
  const served = %s;  // the process that served this page
  let shown = false;
  function banner() {
    if (shown) return;
    shown = true;
    const bar = document.createElement("div");
    bar.id = "worker-restarted";
    bar.setAttribute("role", "alert");
    bar.style.cssText = "position:fixed;top:0;left:0;right:0;z-index:2147483647;padding:12px 16px;"
      + "background:#b45309;color:#fff;font:16px sans-serif;display:flex;gap:12px;"
      + "align-items:center;justify-content:center;flex-wrap:wrap";
    // As large as the page's own text when a lecturer projects it (Large font).
    if (document.body.classList.contains("large-font")) bar.style.fontSize = "22px";
    const text = document.createElement("span");
    text.textContent = message;
    const button = document.createElement("button");
    button.textContent = "Reload";
    button.style.cssText = "padding:4px 14px;font:inherit;cursor:pointer";
    button.onclick = () => location.reload();
    bar.append(text, button);
    document.body.append(bar);
  }
  // Every worker names itself in each answer. An answer from another process means the
  // one that served this page is gone, with this page's session.
  const fetchBefore = window.fetch;
  window.fetch = async (...args) => {
    const answer = await fetchBefore(...args);
    const from = answer.headers.get("x-visualiser-worker");
    if (from && from !== served) {
      banner();
      // gradio, its connection lost, asks for the app's id every 2 s and reloads the page
      // without a word when a server answers: here it hears nothing, and the banner says why
      // a reload is needed (gradio sends no event meanwhile).
      const url = String(args[0] && args[0].url ? args[0].url : args[0]);
      const bare = url.split("?")[0];
      if (bare.endsWith("/app_id") || bare.endsWith("/app_id/")) {
        return new Response("", { status: 503 });
      }
    }
    return answer;
  };
  // A page left open on one tab asks nothing of the server, and gradio's heartbeat reconnects
  // by itself to whichever process answers: the page asks its worker's name every few seconds
  // (a tiny answer of the worker's own, outside gradio's queue), so that a student reading a
  // figure is told too.
  const health = new URL(%s, location.href);
  const ask = setInterval(() => {
    if (shown) { clearInterval(ask); return; }
    window.fetch(health, { cache: "no-store" }).catch(() => {});
  }, %d);
})();
"""


class WorkerIdentity:
    """ASGI middleware of a worker: answers :data:`HEALTH_PATH` itself; names this process
    (name and start) in a header of every answer; stamps the page (``GET /`` and gradio's
    ``/config``) with a cookie naming it; refuses with 409 and :data:`RESTARTED` every queued
    event of a page another process served (its session is not here); and puts
    :data:`RESTARTED_JS` in the page, which shows the banner when another process answers."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.name = worker_name() or "w"
        self.stamp = f"{self.name}.{secrets.token_hex(6)}"
        script = RESTARTED_JS % (
            json.dumps(RESTARTED),
            json.dumps(self.stamp),
            json.dumps("." + HEALTH_PATH),
            ASK_WORKER_MS,
        )
        self.script = b"<script>" + script.encode() + b"</script>"
        self.health = json.dumps(
            {"worker": self.name, "stamp": self.stamp, "pid": os.getpid()}
        ).encode()
        self.named = (b"x-visualiser-worker", self.stamp.encode())

    def _page_cookie(self, scope: dict[str, Any]) -> str | None:
        for key, value in scope.get("headers", []):
            if key == b"cookie":
                cookie: SimpleCookie = SimpleCookie()
                with contextlib.suppress(Exception):
                    cookie.load(value.decode("latin-1"))
                if PAGE_COOKIE in cookie:
                    return cookie[PAGE_COOKIE].value
        return None

    async def _answer(self, send: Any, status: int, body: bytes, headers: list) -> None:
        headers = [*headers, self.named, (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        method = scope.get("method")
        json_type = (b"content-type", b"application/json")
        if path == HEALTH_PATH:
            await self._answer(send, 200, self.health, [json_type])
            return
        page = self._page_cookie(scope)
        # Queued events (a Step, a view's draw, every API call) need the session, which was in
        # the process that served the page; unqueued ones (a menu, "Link to this view") take
        # all they need from the page, and pass.
        if method == "POST" and path == "/gradio_api/queue/join" and page not in (None, self.stamp):
            log.info("a page served by %s asked %s for an event: told to reload", page, self.stamp)
            refusal = json.dumps({"error": RESTARTED, "detail": RESTARTED}).encode()
            await self._answer(send, 409, refusal, [json_type])
            return
        if not (method == "GET" and path in ("/", "", "/config")):

            async def named(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), self.named]}
                await send(message)

            await self.app(scope, receive, named)
            return
        cookie = f"{PAGE_COOKIE}={self.stamp}; Path=/; HttpOnly; SameSite=Lax".encode()
        await serve_with_script(
            self.app, scope, receive, send, self.script, [(b"set-cookie", cookie), self.named]
        )


def worker_launch_options(options: dict[str, Any]) -> dict[str, Any]:
    """``launch_options()`` for a worker of ``--workers N``: :class:`WorkerIdentity` first."""
    from starlette.middleware import Middleware

    app_kwargs = dict(options.get("app_kwargs", {}))
    app_kwargs["middleware"] = [Middleware(WorkerIdentity), *app_kwargs.get("middleware", [])]
    return {**options, "app_kwargs": app_kwargs}
