"""The server's freed memory, given back to the system once it stops working (glibc only).

glibc keeps the memory a request frees, so that the next request reuses it without asking the
system again; each worker thread can hold its own heap (arena), so after requests on several
threads the resident set is the sum of their high-water marks. Giving freed memory back at every
``free`` (a small mmap threshold) keeps the resident set low but costs every pass its page
faults: a SmolLM2 capture at 512 tokens took 1.6 s that way against 1.0 s with glibc's defaults.

So the app keeps glibc's defaults while it works and gives back what is free once it has been
idle for a moment (:class:`IdleTrimmer` calling ``malloc_trim``): a student clicking Step after
Step keeps reusing warm memory, and a server nobody is using holds what its caches hold.

Not while others work, as a rule: with one heap, ``malloc_trim`` holds the heap's lock for as
long as it walks it, and every thread that allocates waits, the web server's too; and a full
``gc.collect`` holds the interpreter. What a sweep of idle sessions frees is owed to the trimmer
(:func:`give_back_memory`), which gives it back at the next quiet moment.

Except when the heap grows while the work goes on. Many sessions decoding at once, each step
allocating blocks of megabytes (every layer's logit lens) among smaller allocations, leave
holes the next step's blocks do not fit (with the mmap threshold fixed at 4 MB, which sends
such blocks around the heap, the growth is gone): twenty beam searches of 128 tokens grew the
server from 1 to 15 GB in one burst, every byte of it free. The trimmer then trims the heap (no
collection) each time the resident set has grown by ``GROWTH_BYTES`` since its lowest point
after the last trim: tens of milliseconds for what that much growth leaves, where a burst's
whole heap took a second.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

QUIET_SECONDS = 1.0  # idle this long after working: give freed memory back
POLL_SECONDS = 0.25
# A poll interval with more CPU than this share of it is working. Light requests (a class's
# pages polling their room, /gradio_api/info once a second) are not work: a server that answers
# them without a pause never had a quiet second at 10 %, and never gave a burst's memory back.
BUSY_SHARE = 0.5
# Growth of the resident set, while working, that has the heap trimmed at once: about 50 ms of
# everyone's allocations waiting, in proportion to the 209 ms that 2.3 GB of holes left by
# concurrent generations took to give back.
GROWTH_BYTES = 512 * 1024 * 1024


def resident_bytes() -> int:
    """This process's resident set in bytes (Linux's ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def glibc_trim() -> Callable[[], object] | None:
    """``malloc_trim(0)`` of this process's glibc, or ``None`` where there is none (macOS,
    Windows, musl): it returns every free page of every arena to the system."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class IdleTrimmer:
    """Calls ``trim`` once the process has worked and then been idle for ``quiet`` seconds.

    "Working" is measured, not announced: a poll interval in which the process used more than
    ``busy_share`` of it in CPU time (every thread together). Each stretch of work is followed
    by one trim; an idle server is not trimmed again and again. ``cpu_seconds`` and ``clock``
    are the process's CPU time and a monotonic clock (given in tests).

    With ``trim_heap`` and ``resident`` (the resident set in bytes), a working process whose
    resident set has grown by ``growth`` bytes since its lowest point after the last trim has
    ``trim_heap`` called at once (the heap only: ``trim`` may also collect, which would hold
    the interpreter while others work).
    """

    def __init__(
        self,
        trim: Callable[[], object],
        *,
        quiet: float = QUIET_SECONDS,
        poll: float = POLL_SECONDS,
        busy_share: float = BUSY_SHARE,
        cpu_seconds: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.monotonic,
        trim_heap: Callable[[], object] | None = None,
        resident: Callable[[], int] | None = None,
        growth: int = GROWTH_BYTES,
    ) -> None:
        self.trim, self.quiet, self.poll, self.busy_share = trim, quiet, poll, busy_share
        self.cpu_seconds, self.clock = cpu_seconds, clock
        self.trim_heap, self.resident, self.growth = trim_heap, resident, growth
        self.trims = self.heap_trims = 0
        self._lowest = resident() if resident is not None else 0  # since the last trim
        self._cpu, self._at = cpu_seconds(), clock()
        self._worked_at: float | None = None  # the end of the last busy interval not yet trimmed
        self._stop = threading.Event()

    def owe(self) -> None:
        """Memory was freed without a stretch of work (a sweep dropped sessions and caches):
        trim at the next quiet moment all the same."""
        self._worked_at = self.clock()

    def tick(self) -> bool:
        """Look at the interval since the last tick; trim if the time has come (True then)."""
        cpu, now = self.cpu_seconds(), self.clock()
        busy = cpu - self._cpu > self.busy_share * max(now - self._at, 1e-9)
        self._cpu, self._at = cpu, now
        resident = self.resident() if self.resident is not None else 0
        self._lowest = min(self._lowest, resident)
        if busy:
            self._worked_at = now
            return self._trim_heap_if_grown(resident)
        if self._worked_at is None or now - self._worked_at < self.quiet:
            return False
        self.trim()
        self.trims += 1
        self._worked_at = None
        self._after_trim()
        return True

    def _trim_heap_if_grown(self, resident: int) -> bool:
        """Trim the heap if the resident set grew by ``growth`` since its low point (True)."""
        if self.trim_heap is None or resident - self._lowest <= self.growth:
            return False
        self.trim_heap()
        self.heap_trims += 1
        self._after_trim()
        return True

    def _after_trim(self) -> None:
        self._cpu, self._at = self.cpu_seconds(), self.clock()  # the trim's own CPU is not work
        if self.resident is not None:
            self._lowest = self.resident()

    def run(self) -> None:
        """Tick every ``poll`` seconds until :meth:`stop`."""
        while not self._stop.wait(self.poll):
            try:
                self.tick()
            except Exception:  # never take the server down for memory bookkeeping
                logger.exception("giving freed memory back failed; not trying again")
                return

    def start(self) -> IdleTrimmer:
        """Run in a daemon thread; returns itself."""
        threading.Thread(target=self.run, name="idle-trimmer", daemon=True).start()
        return self

    def stop(self) -> None:
        """End :meth:`run` at its next poll."""
        self._stop.set()


def collect_and_trim(trim: Callable[[], object]) -> Callable[[], None]:
    """``trim`` after a full garbage collection: what was just dropped may be held in a cycle
    (a session's state and the figures that name it)."""

    def give_back() -> None:
        gc.collect()
        trim()

    return give_back


# The process's trimmer once return_memory_when_idle has started it.
_trimmer: IdleTrimmer | None = None


def give_back_memory() -> None:
    """Give back what a sweep just dropped (caches emptied without a burst of work, which the
    idle trimmer waits for): at the trimmer's next quiet moment when it runs, else now (no
    trimmer: a test, or a process that never started one)."""
    if _trimmer is not None:
        _trimmer.owe()
        return
    trim = glibc_trim()
    collect_and_trim(trim if trim is not None else lambda: None)()


def return_memory_when_idle() -> IdleTrimmer | None:
    """Serve every thread from one heap and give its freed memory back to the system after each
    stretch of work (glibc only; ``None`` elsewhere, where there is nothing to do).

    One heap: gradio runs requests on a pool of threads, and glibc gives each thread its own
    heap (up to 8 per core), so two requests one after the other could each leave a trace's
    worth of memory in a different heap. Called at start-up, before the request threads exist.
    A heap that grows by ``GROWTH_BYTES`` while the work goes on is trimmed then too.
    """
    trim = glibc_trim()
    if trim is None:
        return None
    global _trimmer
    m_arena_max = -8  # from malloc.h
    ctypes.CDLL("libc.so.6").mallopt(m_arena_max, 1)
    if _trimmer is None:
        _trimmer = IdleTrimmer(
            collect_and_trim(trim), trim_heap=trim, resident=resident_bytes
        ).start()
    return _trimmer
