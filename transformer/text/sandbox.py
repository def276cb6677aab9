"""Untrusted tokenizers run in worker processes with a memory, CPU-time and wall-clock limit.

A ``tokenizer.json`` a visitor uploads is data that behaves like code (see
`transformer.text.untrusted`), and `tokenizers` keeps Python's interpreter lock while it
encodes: a file that backtracks for minutes in the server's process stops every thread of it.
So the server never loads such a file itself. `TokenizerSandbox` keeps a few worker processes;
each reads requests on its stdin and answers on its stdout, as length-prefixed JSON (never
pickles: what comes back from a worker is read as plain data). A worker

- limits its own address space (``RLIMIT_AS``) before it reads anything, so that a file that
  asks for gigabytes fails inside it;
- limits the CPU time of each request (``RLIMIT_CPU``; the kernel ends the process past it);
- is killed by the server when a request runs past its wall-clock deadline, and a fresh one
  takes its place at the next request;
- counts the text's length after the tokenizer's normaliser (NFKC writes U+FDFA as 18
  characters) against the request's limit;
- answers at most ``MAX_ANSWER_BYTES``: it parses and summarises its own results (a WordPiece
  choice sends the last `SENT_REJECTED` candidates it rejected, those the view shows; a replay
  too large to send is dropped, the tokens kept, with a message), so that what the server
  parses is bounded whatever the file. A 347-byte WordPiece file with
  ``max_input_chars_per_word`` 10⁹ had the worker send every rejected prefix of a 20,000-letter
  word, 200 MB that the server parsed in its own memory.

A worker that dies is named by its exit: a signal (``SIGSEGV`` inside `tokenizers`: the file
made the library crash), the CPU limit, or the memory limit.

The server's thread only waits on a pipe (without the interpreter lock) until the answer or the
deadline. A worker imports `tokenizers` and this package's text modules, not torch, so that a
replacement starts in a fraction of a second.

    >>> sandbox = TokenizerSandbox(workers=2)
    >>> encoded = sandbox.encode_text(Path("tokenizer.json").read_bytes(), "the cat sat")
    >>> [r.piece for r in encoded.records]
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from .encoded import EncodedText, encode_text, encoded_from_json, encoded_to_json
from .tokenization import Tokenizer, TokenizerError, check_normalized_text
from .untrusted import check_tokenizer_json

_resource: ModuleType | None
try:
    import resource as _resource
except ImportError:  # Windows: no rlimits there; the wall-clock deadline still holds
    _resource = None

MEMORY_LIMIT_BYTES = 1024 * 2**20
"""Address space a worker may map (with GPT-2's tokenizer loaded, encoding 12,000 characters
peaked at 122 MiB, most of it the interpreter and the library)."""
CPU_LIMIT_S = 20
"""CPU seconds one request may use (a backstop: the wall-clock deadline is usually first)."""
TIME_LIMIT_S = 10.0
"""Default wall-clock deadline of one request, in seconds."""
MAX_ANSWER_BYTES = 8 * 2**20
"""Largest answer a worker sends: a larger replay is dropped (the tokens kept); the server ends
a worker that sends more. (A 20,000-character text's answer is 0.7 to 1.8 MB with BERT's,
GPT-2's or cl100k_base's tokenizer, its replay included.)"""
MAX_TEXT_CHARS = 20_000
"""Default limit of a request's text, counted after the tokenizer's normaliser."""
SENT_REJECTED = 3
"""Rejected candidates sent for each WordPiece choice (the last ones: those the view shows)."""
KEPT_PER_WORKER = 4
"""Tokenizers a worker keeps loaded (by the SHA-256 of the file), so that each keystroke that
redraws does not parse the file again."""


class SandboxError(TokenizerError):
    """A worker was stopped at a limit (time, CPU, memory) or failed; the message says which."""


# -- framing: an 8-byte length, then the bytes ----------------------------------------------


def _write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(struct.pack(">Q", len(payload)))
    stream.write(payload)
    stream.flush()


def _read_exact(stream: IO[bytes], size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream: IO[bytes]) -> bytes | None:
    header = _read_exact(stream, 8)
    if header is None:
        return None
    return _read_exact(stream, struct.unpack(">Q", header)[0])


# -- the worker -----------------------------------------------------------------------------


def load_untrusted(data: bytes) -> Tokenizer:
    """A tokenizer from an untrusted ``tokenizer.json``: checked (`check_tokenizer_json`),
    then built. Call it only inside a worker: the checks cannot foresee every costly file."""
    check_tokenizer_json(data)
    return Tokenizer.from_json_str(data)


def serve(memory_bytes: int, cpu_seconds: int) -> None:
    """The worker's loop: set the limits, then answer requests from stdin until it closes.
    (Where the system has no rlimits, Windows, only the server's wall-clock deadline holds.)"""
    resource = _resource
    hard_cpu = 0
    if resource is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        hard_cpu = resource.getrlimit(resource.RLIMIT_CPU)[1]
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but answers on the answer pipe
    kept: OrderedDict[str, Tokenizer | str] = OrderedDict()
    while True:
        frame = _read_frame(stdin)
        if frame is None:
            return
        request = json.loads(frame)
        data = _read_frame(stdin) if request.get("data") else None
        if resource is not None:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            soft = int(usage.ru_utime + usage.ru_stime) + cpu_seconds
            if hard_cpu != resource.RLIM_INFINITY:
                soft = min(soft, hard_cpu)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard_cpu))
        _write_frame(stdout, _bounded_answer(_answer(request, data, kept)))


def _bounded_answer(answer: dict[str, Any], most: int | None = None) -> bytes:
    """The answer as JSON of at most ``most`` bytes (`MAX_ANSWER_BYTES`): a result too large
    loses its replay (with a message), then, if the tokens alone are too large, becomes an
    error."""
    most = MAX_ANSWER_BYTES if most is None else most
    payload = json.dumps(answer).encode("utf-8")
    result = answer.get("result")
    if len(payload) <= most or not isinstance(result, dict):
        return payload
    if result.get("replay") is not None:
        size = len(payload)
        result = {
            **result,
            "replay": None,
            "replay_error": f"the steps of this text take {size / 2**20:.1f} MB, more than the "
            f"{most / 2**20:g} MB a tokenizer's worker sends: try a shorter text",
        }
        payload = json.dumps({"result": result}).encode("utf-8")
        if len(payload) <= most:
            return payload
    return json.dumps(
        {
            "error": f"this text's tokens take {len(payload) / 2**20:.1f} MB, more than the "
            f"{most / 2**20:g} MB a tokenizer's worker sends: try a shorter text"
        }
    ).encode("utf-8")


def _summarised(result: dict[str, Any]) -> dict[str, Any]:
    """An encoded text's JSON with each WordPiece choice's rejected candidates cut to the last
    `SENT_REJECTED` (a word of n letters has up to n²/2 letters of them)."""
    for word in result.get("replay") or []:
        steps = word[6]
        if isinstance(steps, dict) and steps.get("kind") == "wordpiece":
            for choice in steps["choices"]:
                choice[2] = choice[2][-SENT_REJECTED:]
    return result


def _answer(request: dict[str, Any], data: bytes | None, kept: OrderedDict) -> dict[str, Any]:
    key = request["key"]
    tokenizer = kept.get(key)
    if tokenizer is None:
        if data is None:
            return {"need_data": True}
        try:
            tokenizer = load_untrusted(data)
        except TokenizerError as err:
            tokenizer = str(err)
        except MemoryError:
            tokenizer = "refused: loading this tokenizer needs more memory than a worker has"
        kept[key] = tokenizer
        while len(kept) > KEPT_PER_WORKER:
            kept.popitem(last=False)
    kept.move_to_end(key)
    if isinstance(tokenizer, str):
        return {"error": tokenizer}
    if request.get("op") == "check":
        return {"result": None}
    try:
        text = check_normalized_text(
            tokenizer, request["text"], int(request.get("max_chars", MAX_TEXT_CHARS))
        )
        encoded = encode_text(tokenizer, text, bool(request.get("replay", True)))
        return {"result": _summarised(encoded_to_json(encoded))}
    except TokenizerError as err:
        return {"error": str(err)}
    except MemoryError:
        return {"error": "this tokenizer needed more memory than a worker has on this text"}


_ROOT = str(Path(__file__).resolve().parent.parent)  # the ``transformer`` package folder
# The worker loads ``transformer.text`` without running ``transformer/__init__`` (which
# imports torch): the package is registered empty, with its folder as its path.
_BOOT = """
import sys, types
package = types.ModuleType("transformer")
package.__path__ = [{root!r}]
sys.modules["transformer"] = package
from transformer.text.sandbox import serve
serve({memory}, {cpu})
"""


class _Worker:
    """One worker process and the keys of the files it was sent."""

    def __init__(self, memory_bytes: int, cpu_seconds: int) -> None:
        env = {
            **os.environ,
            "TOKENIZERS_PARALLELISM": "false",
            "RAYON_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
        }
        boot = _BOOT.format(root=_ROOT, memory=memory_bytes, cpu=cpu_seconds)
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", boot],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        self.sent: set[str] = set()

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()

    def why_ended(self, limit_s: float, cpu_seconds: int, memory_bytes: int) -> str:
        """What stopped the process, from its exit status."""
        try:
            code = self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "the tokenizer's worker stopped answering"
        return ending(code, cpu_seconds, memory_bytes)


def ending(code: int, cpu_seconds: int, memory_bytes: int) -> str:
    """What a worker's exit status ``code`` (``-N``: killed by signal N) tells a visitor: what
    happened, and what to do."""
    if code >= 0:
        return (
            f"the tokenizer's worker exited with status {code} on this text: try again, and if "
            "it happens again, check the tokenizer file"
        )
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    if name == "SIGXCPU":
        return (
            f"the tokenizer used more than {cpu_seconds} s of CPU time on this text and was "
            "stopped (SIGXCPU): try a shorter text or another tokenizer"
        )
    if name in ("SIGABRT", "SIGKILL"):
        # Rust aborts when an allocation fails; the kernel's out-of-memory killer sends SIGKILL.
        return (
            f"the tokenizers library stopped on this text ({name}), most likely for want of "
            f"memory (a worker may use {memory_bytes / 2**30:.1f} GiB): try a shorter text, or "
            "check the tokenizer file"
        )
    if name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"):
        return (
            f"the tokenizer file made the tokenizers library crash on this text ({name}): "
            "check the file (or try another tokenizer); the server goes on"
        )
    return f"the tokenizer's worker was stopped by {name} on this text: try again"


class TokenizerSandbox:
    """A few worker processes that load and run untrusted tokenizers (see the module's notes).

    ``workers`` requests run at once; another waits for a free worker until its deadline.
    Safe to call from many threads."""

    def __init__(
        self,
        workers: int = 2,
        memory_bytes: int = MEMORY_LIMIT_BYTES,
        cpu_seconds: int = CPU_LIMIT_S,
        time_limit_s: float = TIME_LIMIT_S,
    ) -> None:
        self.memory_bytes = memory_bytes
        self.cpu_seconds = cpu_seconds
        self.time_limit_s = time_limit_s
        self._free: list[_Worker | None] = [None] * workers  # started at first use
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._keys: OrderedDict[tuple[str, int, int], str] = OrderedDict()
        self.killed = 0  # workers stopped at a limit, since this sandbox started

    def encode_text(
        self,
        data: bytes | Path,
        text: str,
        deadline: float | None = None,
        with_replay: bool = True,
        time_limit_s: float | None = None,
        max_chars: int = MAX_TEXT_CHARS,
    ) -> EncodedText:
        """The token view of ``text`` by the tokenizer in ``data`` (a ``tokenizer.json``'s
        bytes, or its path: read only when a worker needs it), computed in a worker by
        ``deadline`` (a ``time.monotonic()`` time; by default ``time_limit_s``, else the
        sandbox's, from now), for a text of at most ``max_chars`` characters after the
        tokenizer's normaliser. Raises `TokenizerError` for a refused file or text, and
        `SandboxError` when the worker was stopped at a limit."""
        if not isinstance(text, str):
            raise TokenizerError(f"expected text as a str, got {type(text).__name__}")
        request = {"op": "encode", "text": text, "replay": with_replay, "max_chars": max_chars}
        return encoded_from_json(self._call(request, data, deadline, time_limit_s))

    def check(self, data: bytes | Path, deadline: float | None = None) -> None:
        """Load the tokenizer in ``data`` in a worker; raise `TokenizerError` if it is refused."""
        self._call({"op": "check"}, data, deadline, None)

    def _source(self, data: bytes | Path) -> tuple[str, Callable[[], bytes]]:
        """The file's key (the SHA-256 of its bytes) and how to read its bytes. A path's key is
        remembered by size and modification time, so that a redraw does not hash it again."""
        if isinstance(data, bytes):
            return hashlib.sha256(data).hexdigest(), lambda: data
        path = Path(data)

        def read() -> bytes:
            try:
                return path.read_bytes()
            except OSError as err:
                raise TokenizerError(f"cannot read the tokenizer file: {err.strerror}") from None

        try:
            stat = path.stat()
        except OSError as err:
            raise TokenizerError(f"cannot read the tokenizer file: {err.strerror}") from None
        seen = (str(path), stat.st_size, stat.st_mtime_ns)
        with self._lock:
            key = self._keys.get(seen)
        if key is None:
            key = hashlib.sha256(read()).hexdigest()
            with self._lock:
                self._keys[seen] = key
                while len(self._keys) > 64:
                    self._keys.popitem(last=False)
        return key, read

    def _call(
        self,
        request: dict[str, Any],
        data: bytes | Path,
        deadline: float | None,
        time_limit_s: float | None,
    ) -> Any:
        limit = self.time_limit_s if time_limit_s is None else time_limit_s
        if deadline is None:
            deadline = time.monotonic() + limit
        key, read = self._source(data)
        request = {**request, "key": key}
        worker = self._take(key, deadline)
        try:
            if worker is None or not worker.alive():
                worker = self._start()
            sent = read() if key not in worker.sent else None
            answer = self._exchange(worker, request, sent, deadline, limit)
            if answer.get("need_data"):
                answer = self._exchange(worker, request, read(), deadline, limit)
            worker.sent.add(key)
        except BaseException:
            if worker is not None and worker.alive():
                worker.kill()
            raise
        finally:
            with self._freed:
                self._free.append(worker)
                self._freed.notify()
        if "error" in answer:
            raise TokenizerError(str(answer["error"]))
        return answer["result"]

    def _take(self, key: str, deadline: float) -> _Worker | None:
        """A free worker by ``deadline``: one that holds ``key``'s tokenizer if there is one,
        else one started, else a slot to start one in (None)."""
        with self._freed:
            while not self._free:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SandboxError(
                        "every tokenizer worker is busy with other visitors' files: try again "
                        "in a moment"
                    )
                self._freed.wait(timeout=left)

            def rank(worker: _Worker | None) -> int:
                return 2 if worker is None else (0 if key in worker.sent else 1)

            ranked = sorted(range(len(self._free)), key=lambda i: rank(self._free[i]))
            return self._free.pop(ranked[0])

    def _start(self) -> _Worker:
        worker = _Worker(self.memory_bytes, self.cpu_seconds)
        with self._lock:
            self._all = [w for w in self._all if w.alive()] + [worker]
        return worker

    def _exchange(
        self,
        worker: _Worker,
        request: dict[str, Any],
        data: bytes | None,
        deadline: float,
        limit: float,
    ) -> dict[str, Any]:
        stdin, stdout = worker.process.stdin, worker.process.stdout
        assert stdin is not None and stdout is not None
        payload = json.dumps({**request, "data": data is not None}).encode("utf-8")
        try:
            _write_frame(stdin, payload)
            if data is not None:
                _write_frame(stdin, data)
        except (BrokenPipeError, OSError):
            raise SandboxError(self._ended(worker)) from None
        answer = self._read_until(worker, deadline, limit)
        try:
            return dict(json.loads(answer))
        except ValueError:
            worker.kill()
            raise SandboxError("the tokenizer's worker gave an answer that is not JSON") from None

    def _read_until(self, worker: _Worker, deadline: float, limit: float) -> bytes:
        """One frame from the worker's stdout by ``deadline``, else the worker is killed."""
        stdout = worker.process.stdout
        assert stdout is not None
        if os.name == "nt":  # no select() on pipes there: a thread reads, this one waits
            return self._read_by_thread(worker, deadline, limit)
        fd = stdout.fileno()
        buffer = bytearray()
        needed = 8
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while len(buffer) < needed:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(timeout=left):
                    raise self._overran(worker, limit)
                chunk = os.read(fd, max(needed - len(buffer), 65536))
                if not chunk:
                    raise SandboxError(self._ended(worker))
                buffer += chunk
                if needed == 8 and len(buffer) >= 8:
                    size = struct.unpack(">Q", bytes(buffer[:8]))[0]
                    if size > MAX_ANSWER_BYTES:
                        worker.kill()
                        raise SandboxError("the tokenizer's answer on this text is too large")
                    needed = 8 + size
        return bytes(buffer[8:needed])

    def _read_by_thread(self, worker: _Worker, deadline: float, limit: float) -> bytes:
        stdout = worker.process.stdout
        assert stdout is not None
        answers: list[bytes | None] = []
        done = threading.Event()

        def read() -> None:
            try:
                answers.append(_read_frame(stdout))
            except (OSError, ValueError):  # the pipe closed: the worker was killed
                answers.append(None)
            done.set()

        threading.Thread(target=read, daemon=True).start()
        if not done.wait(timeout=max(0.0, deadline - time.monotonic())):
            raise self._overran(worker, limit)
        if answers[0] is None:
            raise SandboxError(self._ended(worker))
        return answers[0]

    def _overran(self, worker: _Worker, limit: float) -> SandboxError:
        """Kill a worker past its deadline; the error to raise."""
        worker.kill()
        self.killed += 1
        return SandboxError(
            f"the tokenizer took longer than {limit:g} s on this text and was stopped: try a "
            "shorter text or another tokenizer"
        )

    def _ended(self, worker: _Worker) -> str:
        self.killed += 1
        message = worker.why_ended(self.time_limit_s, self.cpu_seconds, self.memory_bytes)
        worker.kill()
        return message

    def close(self) -> None:
        """Stop every worker (a worker also ends by itself when this process's end of its
        pipe closes)."""
        with self._lock:
            workers, self._all = self._all, []
        for worker in workers:
            worker.kill()

    def pids(self) -> list[int]:
        """The process ids of the live workers (for tests and the memory view)."""
        with self._lock:
            return [w.process.pid for w in self._all if w.alive()]
