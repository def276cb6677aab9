"""Floods a visitor could send, each against one app on loopback, with a poller reading
``/gradio_api/info`` once a second: for each row, the slowest ``/info`` answer and the server's
resident memory before the flood, at its highest, and once the flood's sessions have left and
the server has been idle ``--settle`` seconds (a minute by default).

Rows (``--rows`` picks some, by name):

- ``beam20``: 20 sessions, ``/generate`` beam 3, 128 tokens, at once;
- ``beam50``: 50 sessions, ``/generate`` beam 3, 40 tokens, at once;
- ``abandoned``: 300 sessions, one ``/generate_step`` each, then left;
- ``surrogates`` / ``nulls``: text with lone surrogates / null bytes through 13 endpoints;
- ``fdfa``: two loops of ``/tokenize`` on 20,000 U+FDFA (NFKC expands it 18x), Unigram;
- ``wordpiece``: a 347-byte WordPiece tokenizer (``max_input_chars_per_word`` 1e9) on
  20,000 'z' (the worker must not hand the server hundreds of MB to parse);
- ``uploads``: 30 simultaneous 19.9 MB uploads from one address (a forged
  ``X-Forwarded-For`` on each), counted: how many got in;
- ``rooms``: a lecture's room read every second while one client opens 400 rooms;
- ``runs``: 50 "Run to the end" queued by one client, then another visitor's 8-token run:
  how long that one waited;
- ``streams``: 200 event streams held open then dropped: tracebacks in the server's log.

The app runs as ``python app.py`` in a child process (its log kept in a file, read for the
``streams`` row). SmolLM2 is the generating model, as a lecture uses it; ``--small`` uses the
bundled ``continue`` model instead (seconds, not minutes), and ``--scale 0.25`` shrinks every
row's counts. The load average is printed at the start and the end: figures measured on a
shared machine are comparable within one run only.

Usage: python -m benchmarks.reliability [--rows beam20,abandoned] [--small] [--scale 1]
       [--settle 60] [--port 8510]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2 = "SmolLM2-135M-Instruct"
SMALL = "continue"


def rss_mb(pid: int) -> float:
    """The resident set of process ``pid`` in MB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class Poller:
    """Reads ``/gradio_api/info`` once a second (and the server's RSS four times a second),
    keeping the slowest answer and the highest RSS since :meth:`reset`."""

    url: str
    pid: int
    info_max: float = 0.0
    rss_peak: float = 0.0
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Poller:
        threading.Thread(target=self._info, daemon=True).start()
        threading.Thread(target=self._rss, daemon=True).start()
        return self

    def reset(self) -> None:
        self.info_max, self.rss_peak, self.failures = 0.0, rss_mb(self.pid), 0

    def stop(self) -> None:
        self._stop.set()

    def _info(self) -> None:
        with httpx.Client(timeout=60) as http:
            while not self._stop.is_set():
                began = time.monotonic()
                try:
                    http.get(f"{self.url}gradio_api/info").raise_for_status()
                except httpx.HTTPError:
                    self.failures += 1
                self.info_max = max(self.info_max, time.monotonic() - began)
                self._stop.wait(max(0.0, 1.0 - (time.monotonic() - began)))

    def _rss(self) -> None:
        while not self._stop.wait(0.25):
            self.rss_peak = max(self.rss_peak, rss_mb(self.pid))


def client(url: str) -> Any:
    """A gradio_client session on loopback (no certificates loaded: see tests/serving.py)."""
    from gradio_client import Client

    for attempt in range(3):  # a loaded server may take long to answer /info
        try:
            return Client(url, verbose=False, ssl_verify=False, httpx_kwargs={"timeout": 120})
        except httpx.HTTPError:
            if attempt == 2:
                raise
            time.sleep(2.0)
    raise AssertionError("unreachable")


def _safely(call: Callable[[], Any]) -> tuple[bool, str]:
    try:
        call()
        return True, ""
    except Exception as error:  # what a visitor would be told
        return False, str(error)[:200]


def generate_args(model: str, text: str, strategy: str, beam: int, tokens: int) -> list[Any]:
    """``/generate``'s arguments (``ui/tabs/generate/request.py``'s order)."""
    return [text, model, strategy, 1.0, 0, 1.0, beam, tokens, 0, 1, 1, False]


# -- rows ------------------------------------------------------------------------------------


def concurrent_generations(url: str, model: str, sessions: int, tokens: int) -> str:
    """``sessions`` clients, each one ``/generate`` (beam 3) at once, then closed."""
    clients = [client(url) for _ in range(sessions)]
    args = generate_args(model, "The lecture hall was quiet until", "beam", 3, tokens)
    with ThreadPoolExecutor(sessions) as pool:
        results = list(
            pool.map(lambda c: _safely(lambda: c.predict(*args, api_name="/generate")), clients)
        )
    for c in clients:
        c.close()
    return _outcome(results)


def abandoned_sessions(url: str, model: str, sessions: int) -> str:
    """``sessions`` clients, one ``/generate_step`` each (8 at a time), then left."""
    texts = [f"Student {n} wrote a sentence about" for n in range(sessions)]

    def one(text: str) -> tuple[bool, str]:
        c = client(url)
        try:
            args = generate_args(model, text, "greedy", 1, 40)
            return _safely(lambda: c.predict(*args, api_name="/generate_step"))
        finally:
            c.close()

    with ThreadPoolExecutor(8) as pool:
        return _outcome(list(pool.map(one, texts)))


ENDPOINT_ARGS: dict[str, Callable[[str, str], list[Any]]] = {
    "/tokenize": lambda t, m: [
        t,
        "BPE, trained live on the bundled corpus",
        400,
        None,
        "(none)",
        5,
    ],
    "/learn_bpe": lambda t, m: [t, 20, t[:50]],
    "/embeddings": lambda t, m: [t, "translate", False],
    "/attention": lambda t, m: [t, "reverse", "encoder self-attention", 1, 1, 1, [], False],
    "/attention_grid": lambda t, m: [t, "reverse", "encoder self-attention", 1, False],
    "/generate": lambda t, m: generate_args(m, t, "greedy", 1, 3),
    "/generate_step": lambda t, m: generate_args(m, t, "greedy", 1, 3),
    "/generate_back": lambda t, m: generate_args(m, t, "greedy", 1, 3),
    "/generate_reset": lambda t, m: generate_args(m, t, "greedy", 1, 3),
    "/teacher_forcing": lambda t, m: [t, "translate", t],
    "/inside_layer": lambda t, m: [t, "translate", "decoder", 1, 1, "1", False],
    "/attention_scale": lambda t, m: [t, m, "entropy", 1, 1, 0, 16, 3, -1, False],
    "/model_info": lambda t, m: [t],
}


def raw(
    url: str, api: str, data: list[Any], timeout: float = 120, local: str | None = None
) -> tuple[bool, str]:
    """One call through gradio's REST API with a body gradio_client could not send, from the
    loopback address ``local`` (another client, as the server sees it) when given."""
    body = json.dumps({"data": data})
    transport = httpx.HTTPTransport(local_address=local) if local else None
    try:
        with httpx.Client(timeout=timeout, transport=transport) as http:
            posted = http.post(
                f"{url}gradio_api/call{api}",
                content=body.encode("utf-8", "surrogatepass"),
                headers={"content-type": "application/json"},
            )
            if posted.status_code != 200:
                return False, f"HTTP {posted.status_code}: {posted.text[:150]}"
            event = posted.json()["event_id"]
            got = http.get(f"{url}gradio_api/call{api}/{event}").text
        return "event: complete" in got, got[-200:]
    except httpx.HTTPError as error:
        return False, str(error)


def bad_texts(url: str, model: str, text: str) -> str:
    """``text`` (long, with what a browser would never send) through every endpoint, 4 at once."""
    calls = [(api, make(text, model)) for api, make in ENDPOINT_ARGS.items()]
    with ThreadPoolExecutor(4) as pool:
        return _outcome(list(pool.map(lambda c: raw(url, *c), calls)))


LOCAL_2 = "127.0.0.2"  # another visitor: loopback answers every 127.x address

SURROGATES = ("a\ud800b\udfff " * 4_000)[:20_000]
NULLS = ("a\x00b " * 5_000)[:20_000]


def fdfa(url: str, loops: int = 2) -> str:
    """``/tokenize`` on 20,000 U+FDFA with the app's own Unigram tokenizer, twice at once."""
    text = "\ufdfa" * 20_000
    args = [text, "continue model's tokenizer (Unigram)", 400, None, "(none)", 5]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: raw(url, "/tokenize", args), range(loops)))
    return _outcome(results)


WORDPIECE = {
    "version": "1.0",
    "model": {
        "type": "WordPiece",
        "unk_token": "[UNK]",
        "continuing_subword_prefix": "##",
        "max_input_chars_per_word": 1_000_000_000,
        "vocab": {"[UNK]": 0, "a": 1, "##b": 2},
    },
}


def wordpiece(url: str) -> str:
    """A 347-byte WordPiece tokenizer.json on 20,000 'z' (every prefix of the word rejected)."""
    from gradio_client import handle_file

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tokenizer.json"
        path.write_text(json.dumps(WORDPIECE), encoding="utf-8")
        c = client(url)
        args = ["z" * 20_000, "uploaded tokenizer.json", 300, handle_file(str(path)), "(none)", 1]
        results = [_safely(lambda: c.predict(*args, api_name="/tokenize")) for _ in range(2)]
        c.close()
    return _outcome(results)


def uploads(url: str, count: int) -> str:
    """``count`` simultaneous 19.9 MB uploads from one address, each claiming another with
    ``X-Forwarded-For``: how many the server took."""
    body = b"{" + b" " * (19_900_000) + b"}"

    def one(n: int) -> tuple[bool, str]:
        try:
            answer = httpx.post(
                f"{url}gradio_api/upload",
                files={"files": ("tokenizer.json", body, "application/json")},
                headers={"X-Forwarded-For": f"10.0.{n // 250}.{n % 250 + 1}"},
                timeout=120,
            )
            return answer.status_code == 200, f"HTTP {answer.status_code}"
        except httpx.HTTPError as error:
            return False, str(error)

    with ThreadPoolExecutor(count) as pool:
        results = list(pool.map(one, range(count)))
    return f"{sum(ok for ok, _ in results)} of {count} uploads taken"


def run_queue(url: str, model: str, runs: int) -> str:
    """``runs`` "Run to the end" queued by one client (one session each), then another
    visitor's 8-token run: how long the other visitor waited, and what the flood was told."""
    flood = [client(url) for _ in range(runs)]
    args = generate_args(model, "Once upon a time", "greedy", 1, 40)
    jobs = [c.submit(*args, api_name="/generate") for c in flood]
    time.sleep(2.0)  # they are queued
    began = time.monotonic()  # another visitor, from another address
    ok, said = raw(url, "/generate", generate_args(model, "Hello", "greedy", 1, 8), 900, LOCAL_2)
    waited = time.monotonic() - began
    outcomes = []
    for job in jobs:
        outcomes.append(_safely(lambda job=job: job.result(timeout=900)))
    for c in flood:
        c.close()
    return f"other visitor's run: {waited:.1f} s ({'ok' if ok else said}); flood: " + _outcome(
        outcomes
    )


def _click_index(url: str, label: str) -> int:
    """The event index of a click on the button labelled ``label`` (the page's private events
    have no API name), read from the app's config."""
    config = httpx.get(f"{url}config", timeout=60).json()
    button = next(c["id"] for c in config["components"] if c.get("props", {}).get("value") == label)
    return next(
        d["id"] for d in config["dependencies"] if [button, "click"] in d.get("targets", [])
    )


def _predict(http: httpx.Client, url: str, index: int, data: list[Any], session: str) -> Any:
    answer = http.post(
        f"{url}gradio_api/run/predict",
        json={"data": data, "fn_index": index, "session_hash": session},
    )
    answer.raise_for_status()
    return answer.json()["data"]


def rooms(url: str, count: int) -> str:
    """A lecturer opens a room, which is read every second (as a follower's Follow reads it),
    while one client opens ``count`` rooms: the slowest read, and whether the room survived."""
    host = _click_index(url, "Host a room (lecturer)")
    follow = _click_index(url, "Follow")
    with httpx.Client(timeout=60) as http:
        code = _predict(http, url, host, [None], "lecturer")[0][0]
        stop = threading.Event()
        reads: list[tuple[float, str]] = []

        def read() -> None:
            with httpx.Client(timeout=60) as reader:
                while not stop.is_set():
                    began = time.monotonic()
                    line = str(_predict(reader, url, follow, [code], "student")[1])
                    reads.append((time.monotonic() - began, line))
                    stop.wait(1.0)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        refused = 0
        for n in range(count):
            try:  # a refused room is told on the page: "⚠️ No room: ..."
                said = str(_predict(http, url, host, [None], f"flood{n}")[1])
                refused += "No room" in said
            except httpx.HTTPError:
                refused += 1
        stop.set()
        reader.join()
    lost = sum("⚠️" in line for _, line in reads)
    slowest = max(seconds for seconds, _ in reads)
    return (
        f"lecture room read {len(reads)} times, slowest {slowest:.2f} s, "
        f"{'closed ' + str(lost) + ' times' if lost else 'never closed'}; {refused} refused"
    )


def streams(url: str, count: int, hold_s: float, log: Path) -> str:
    """``count`` event streams (``/gradio_api/queue/data``) opened, held ``hold_s`` and dropped:
    the tracebacks the server's log gained."""
    before = log.read_text(errors="replace").count("Traceback")
    import socket

    socks = []
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    for n in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        request = (
            f"GET /gradio_api/queue/data?session_hash=flood{n} HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n"
        )
        sock.sendall(request.encode())
        socks.append(sock)
    time.sleep(hold_s)
    for sock in socks:
        sock.close()
    time.sleep(3.0)
    text = log.read_text(errors="replace")
    after = text.count("Traceback")
    return f"{after - before} tracebacks in the log"


def _outcome(results: list[tuple[bool, str]]) -> str:
    refused = [said for ok, said in results if not ok]
    line = f"{len(results) - len(refused)} answered, {len(refused)} refused"
    if refused:
        line += f" (e.g. {refused[0][:90]!r})"
    return line


# -- the app ---------------------------------------------------------------------------------


def launch(port: int, log: Path) -> subprocess.Popen:
    """``python app.py --port PORT`` in a child process, its output in ``log``; waits for it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out = open(log, "w", encoding="utf-8")  # noqa: SIM115  (closed with the process)
    process = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port)], cwd=ROOT, stdout=out, stderr=out, env=env
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}gradio_api/info", timeout=30).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"the app ended at start; see {log}")
        time.sleep(1.0)
    process.kill()
    raise SystemExit("the app did not answer within 3 minutes")


def warm_up(url: str, model: str) -> None:
    """One call of each kind the rows make, so that "before" counts what the first call of a
    kind builds once (plotly's figure code, a tokenizer read, the model read)."""
    c = client(url)
    for api, make in ENDPOINT_ARGS.items():
        _safely(lambda api=api, make=make: c.predict(*make("the cat sat", model), api_name=api))
    _safely(lambda: c.predict(*generate_args(model, "Hello", "beam", 3, 2), api_name="/generate"))
    c.close()


def settle(poller: Poller, seconds: float) -> float:
    """Wait ``seconds`` of idleness (sessions gone), then the server's RSS."""
    time.sleep(seconds)
    return rss_mb(poller.pid)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="all")
    parser.add_argument("--small", action="store_true", help="the bundled model, not SmolLM2")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every row's counts")
    parser.add_argument("--settle", type=float, default=60.0, help="idle seconds before 'after'")
    parser.add_argument("--hold", type=float, default=60.0, help="seconds streams stay open")
    parser.add_argument("--port", type=int, default=8510)
    args = parser.parse_args(argv)
    model = SMALL if args.small else SMOLLM2
    # Stopped with SIGTERM, end as with Ctrl-C: the app child is terminated on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def n(count: int) -> int:
        return max(1, round(count * args.scale))

    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "app.log"
        rows: dict[str, tuple[str, Callable[[str], str]]] = {
            "beam20": (
                f"{n(20)} sessions, /generate beam 3, 128 tokens, at once",
                lambda url: concurrent_generations(url, model, n(20), 128),
            ),
            "beam50": (
                f"{n(50)} sessions, /generate beam 3, 40 tokens, at once",
                lambda url: concurrent_generations(url, model, n(50), 40),
            ),
            "abandoned": (
                f"{n(300)} sessions, one Generate step each, then left",
                lambda url: abandoned_sessions(url, model, n(300)),
            ),
            "surrogates": (
                "text with lone surrogates through 13 endpoints",
                lambda url: bad_texts(url, model, SURROGATES),
            ),
            "nulls": (
                "text with null bytes through 13 endpoints",
                lambda url: bad_texts(url, model, NULLS),
            ),
            "fdfa": ("two /tokenize of 20,000 U+FDFA, Unigram", lambda url: fdfa(url)),
            "wordpiece": ("a 347-byte WordPiece tokenizer on 20,000 'z'", wordpiece),
            "uploads": (
                f"{n(30)} simultaneous 19.9 MB uploads, one address",
                lambda url: uploads(url, n(30)),
            ),
            "rooms": (f"{n(400)} rooms opened by one client", lambda url: rooms(url, n(400))),
            "runs": (
                f"{n(50)} Runs to the end queued by one client, then another's",
                lambda url: run_queue(url, model, n(50)),
            ),
            "streams": (
                f"{n(200)} event streams held open {args.hold:g} s",
                lambda url: streams(url, n(200), args.hold, log),
            ),
        }
        chosen = list(rows) if args.rows == "all" else args.rows.split(",")
        print(f"load average at start: {os.getloadavg()}", flush=True)
        process = launch(args.port, log)
        url = f"http://127.0.0.1:{args.port}/"
        poller = Poller(url, process.pid).start()
        table = [
            "| what was sent | `/info` max (s) | server RSS before → peak → after (MB) | outcome |",
            "| --- | ---: | --- | --- |",
        ]
        try:
            warm_up(url, model)  # first uses (figures, tokenizers) are not a flood's memory
            time.sleep(args.settle)  # the app's own start-up and preloads settle first
            for name in chosen:
                label, row = rows[name]
                before = rss_mb(process.pid)
                poller.reset()
                began = time.monotonic()
                outcome = row(url)
                took = time.monotonic() - began
                info_max, peak = poller.info_max, max(poller.rss_peak, before)
                after = settle(poller, args.settle)
                line = (
                    f"| {label} | {info_max:.2f} | {before:,.0f} → {peak:,.0f} → {after:,.0f} "
                    f"({(after - before) / before:+.0%}) | {outcome}; {took:.0f} s |"
                )
                table.append(line)
                print(line, flush=True)
        finally:
            poller.stop()
            process.terminate()
            process.wait(timeout=30)
        print(f"load average at end: {os.getloadavg()}")
        print("\n".join(table))
        text = log.read_text(errors="replace")
        print(f"tracebacks in the app's log over the whole run: {text.count('Traceback')}")
        print(re.sub(r"\n{3,}", "\n\n", text[-3000:]))


if __name__ == "__main__":
    main()
