"""The server gives freed memory back once it stops working (``ui/serving/memory.py``): when the idle
trimmer trims, and that glibc's ``malloc_trim`` does give memory back (measured in the process's
own resident set, not taken on trust)."""

from __future__ import annotations

import ctypes
import platform
import sys

import pytest

from ui.serving import memory
from ui.serving.memory import IdleTrimmer, glibc_trim

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


class Process:
    """A fake process: CPU seconds and a clock that the test moves."""

    def __init__(self) -> None:
        self.cpu, self.now, self.trimmed = 0.0, 0.0, 0

    def trim(self) -> None:
        self.trimmed += 1
        self.cpu += 0.2  # trimming costs CPU: it must not count as work

    def after(self, seconds: float, cpu: float, trimmer: IdleTrimmer) -> bool:
        self.now += seconds
        self.cpu += cpu
        return trimmer.tick()


MB = 2**20


class Heap:
    """A fake resident set that grows as the test says and falls back when the heap is trimmed."""

    def __init__(self, base: int) -> None:
        self.base = self.resident = base
        self.heap_trims = 0

    def trim(self) -> None:
        self.heap_trims += 1
        self.resident = self.base + 40 * MB  # what the work still holds


@pytest.fixture
def process() -> Process:
    return Process()


def _trimmer(process: Process, heap: Heap | None = None) -> IdleTrimmer:
    """The process's trimmer; with ``heap``, one that also trims a heap grown by 512 MB."""
    return IdleTrimmer(
        process.trim,
        quiet=1.0,
        busy_share=0.1,
        cpu_seconds=lambda: process.cpu,
        clock=lambda: process.now,
        trim_heap=None if heap is None else heap.trim,
        resident=None if heap is None else lambda: heap.resident,
        growth=512 * MB,
    )


def test_work_then_a_quiet_second_trims_once(process):
    trimmer = _trimmer(process)
    assert not process.after(0.25, 0.25, trimmer)  # a request: busy
    assert not process.after(0.25, 0.2, trimmer)  # still busy
    ticks = [process.after(0.25, 0.001, trimmer) for _ in range(3)]
    assert ticks == [False, False, False] and process.trimmed == 0  # 0.75 s quiet: not yet
    assert process.after(0.25, 0.001, trimmer)  # one second after the work ended
    assert process.trimmed == 1
    # Idle from now on (the trim's own CPU is not work): no second trim.
    assert not any(process.after(0.25, 0.001, trimmer) for _ in range(40))
    assert process.trimmed == 1


def test_an_idle_server_and_a_busy_one_are_not_trimmed(process):
    idle = _trimmer(process)
    assert not any(process.after(0.25, 0.01, idle) for _ in range(40))
    busy = _trimmer(process)
    assert not any(process.after(0.25, 0.2, busy) for _ in range(40))  # steady work: Run, train
    assert process.trimmed == 0
    assert process.after(0.5, 0.0, busy) is False  # quiet for half a second only
    assert process.after(0.5, 0.0, busy) is True


def test_work_during_the_quiet_second_starts_it_again(process):
    trimmer = _trimmer(process)
    process.after(0.25, 0.25, trimmer)
    process.after(0.75, 0.0, trimmer)
    process.after(0.25, 0.1, trimmer)  # the next click
    assert not process.after(0.75, 0.0, trimmer)
    assert process.after(0.25, 0.0, trimmer)
    assert process.trimmed == 1


def test_what_a_sweep_frees_is_given_back_at_the_next_quiet_moment_not_while_others_work(
    process, monkeypatch
):
    """The sweep of idle sessions runs beside the requests: trimming there held the heap's lock
    for a second while generations ran, and every request waited. It owes the trim instead."""
    trimmer = _trimmer(process)
    monkeypatch.setattr(memory, "_trimmer", trimmer)
    process.after(0.25, 0.001, trimmer)  # an idle server, never trimmed on its own
    memory.give_back_memory()  # a sweep dropped sessions; then others work
    assert process.trimmed == 0  # not at once
    assert not any(process.after(0.25, 0.2, trimmer) for _ in range(8))  # others work: not yet
    assert not any(process.after(0.25, 0.001, trimmer) for _ in range(3))
    assert process.after(0.25, 0.001, trimmer)  # a quiet second after the work
    assert process.trimmed == 1
    # And on an idle server, a second after the sweep.
    memory.give_back_memory()
    assert [process.after(0.25, 0.001, trimmer) for _ in range(4)] == [False, False, False, True]
    assert process.trimmed == 2


def test_a_server_answering_light_requests_still_gives_back_what_it_owes(process, monkeypatch):
    """Polls (a class's pages, a monitor's /info) take a few percent of each interval: with the
    app's own bound of work they are quiet, and the owed trim comes a second after the sweep."""
    trimmer = IdleTrimmer(
        process.trim, quiet=1.0, cpu_seconds=lambda: process.cpu, clock=lambda: process.now
    )
    monkeypatch.setattr(memory, "_trimmer", trimmer)
    process.after(0.25, 0.25, trimmer)  # the burst's last generation
    memory.give_back_memory()
    polls = [process.after(0.25, 0.25 * share, trimmer) for share in (0.15, 0.3, 0.1, 0.2, 0.15)]
    assert polls == [False, False, False, True, False]
    assert process.trimmed == 1


def test_without_a_trimmer_a_sweep_collects_at_once(monkeypatch):
    """A process that never started the trimmer (a test, a notebook) collects at once: a cycle
    dropped by the sweep is gone when give_back_memory returns."""
    import gc
    import weakref

    monkeypatch.setattr(memory, "_trimmer", None)

    class Node:
        pass

    node = Node()
    node.me = node  # a cycle: only the collector frees it
    gone = weakref.ref(node)
    del node
    gc.disable()
    try:
        memory.give_back_memory()
    finally:
        gc.enable()
    assert gone() is None


def _resident_bytes() -> int:
    """VmRSS from /proc/self/status (kB): read apart from the app's own statm reader."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def _fragment(libc: ctypes.CDLL, block: int, count: int) -> int:
    """Write ``count`` heap blocks of ``block`` bytes and free them, one more block after them
    keeping the heap's top in place (the freed memory stays resident until a trim): the pin's
    address, to free at the end."""
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(block) for _ in range(count)]
    pin = libc.malloc(block)
    for address in blocks:
        ctypes.memset(address, 1, block)
    for address in blocks:
        libc.free(address)
    return pin


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; elsewhere nothing is trimmed")
def test_malloc_trim_gives_freed_heap_memory_back():
    """128 MB of 64 KB blocks (under any mmap threshold: served from the heap) are written and
    freed, a block after them keeps the heap's top in place; only the trim gives them back."""
    libc = ctypes.CDLL("libc.so.6")
    block, count = 64 * 1024, 2048
    pin = _fragment(libc, block, count)
    try:
        kept = _resident_bytes()
        trim = glibc_trim()
        assert trim is not None
        trim()
        returned = kept - _resident_bytes()
    finally:
        libc.free(pin)
    assert returned > 0.75 * block * count, f"only {returned / 2**20:.0f} MB given back"


def test_glibc_trim_is_offered_exactly_on_glibc():
    assert (glibc_trim() is not None) is GLIBC


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_resident_bytes_is_the_kernels_resident_set():
    measured, reference = memory.resident_bytes(), _resident_bytes()
    assert abs(measured - reference) < 16 * 2**20, (measured, reference)


def test_a_heap_growing_while_the_work_goes_on_is_trimmed_once_per_growth(process):
    """Concurrent generations fragment the heap for minutes without a quiet second: the heap is
    trimmed (without a collection) each time it has grown by the bound, not at every tick."""
    heap = Heap(1000 * MB)
    trimmer = _trimmer(process, heap)
    trims = []
    for _ in range(12):  # busy, 100 MB more each tick
        heap.resident += 100 * MB
        trims.append(process.after(0.25, 0.25, trimmer))
    # 600 MB past 1,000 at the 6th tick; trimmed to 40 MB above it, and 600 more by the 12th.
    assert [i for i, trimmed in enumerate(trims) if trimmed] == [5, 11]
    assert heap.heap_trims == 2 and process.trimmed == 0  # no collection while others work
    # Once quiet, the usual trim (with its collection) comes a second after the work.
    assert [process.after(0.25, 0.001, trimmer) for _ in range(4)] == [False] * 3 + [True]
    assert process.trimmed == 1 and heap.heap_trims == 2


def test_heap_growth_is_counted_from_its_lowest_point(process):
    heap = Heap(1000 * MB)
    trimmer = _trimmer(process, heap)
    heap.resident = 600 * MB  # a cache let go of 400 MB while working
    assert not process.after(0.25, 0.25, trimmer)
    heap.resident = 1100 * MB  # 500 MB above the low point: not yet
    assert not process.after(0.25, 0.25, trimmer)
    heap.resident = 1150 * MB
    assert process.after(0.25, 0.25, trimmer) and heap.heap_trims == 1


def test_heap_growth_while_idle_is_left_to_the_quiet_trim(process):
    heap = Heap(1000 * MB)
    trimmer = _trimmer(process, heap)
    heap.resident = 3000 * MB  # grown by a cache filled before the trimmer looked
    assert not any(process.after(0.25, 0.001, trimmer) for _ in range(8))
    assert heap.heap_trims == 0


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; elsewhere nothing is trimmed")
def test_the_app_trimmer_gives_a_fragmented_heap_back_while_work_goes_on():
    """The trimmer the app starts, with glibc's real trim and the real resident set: 128 MB
    written and freed in the heap while the process stays busy come back at the next tick."""
    libc = ctypes.CDLL("libc.so.6")
    trim = glibc_trim()
    assert trim is not None
    cpu = [0.0]
    trimmer = IdleTrimmer(
        lambda: None,
        cpu_seconds=lambda: cpu[0],
        trim_heap=trim,
        resident=memory.resident_bytes,
        growth=64 * MB,
    )
    trim()  # what earlier tests left is not this test's growth
    trimmer.tick()
    pin = _fragment(libc, 64 * 1024, 2048)
    try:
        cpu[0] += 10.0  # busy: every thread at work
        held = _resident_bytes()
        assert trimmer.tick() and trimmer.heap_trims == 1
        returned = held - _resident_bytes()
    finally:
        libc.free(pin)
    assert returned > 0.75 * 128 * MB, f"only {returned / MB:.0f} MB given back"
