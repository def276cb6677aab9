"""Caches keyed by text are swept once unused (``ui/serving/state.py``'s ``forget_unused_views``):
every cache of views in the process, the tabs' own among them, not only the registry's."""

from __future__ import annotations

import time

from ui.serving.state import SharedViews, forget_unused_views
from ui.tabs.attention import scale


def test_every_cache_of_views_is_swept_once_unused():
    own = SharedViews(max_bytes=10**9, max_entries=8)  # as a tab keeps one of its own
    for n in range(3):
        own.get(("long text", n), lambda n=n: ("x" * 1000 * (n + 1), True))
    now = time.monotonic()
    assert own.get(("long text", 2), lambda: ("never computed", True)) == "x" * 3000  # a hit
    assert len(own) == 3
    forget_unused_views(60.0, now=now + 30.0)  # within the minute: all kept
    assert len(own) == 3
    # Other tests' caches of this process may be swept too: what counts is that this one is.
    assert forget_unused_views(60.0, now=time.monotonic() + 61.0) >= 3
    assert len(own) == 0


def test_the_long_views_passes_are_among_them():
    # The long view keeps its last passes in a cache of its own (up to 400 MB each).
    passes = scale._passes
    passes.get(("model", "a long text"), lambda: ("a pass", True))
    assert passes.holds(("model", "a long text"))
    forget_unused_views(60.0, now=time.monotonic() + 61.0)
    assert not passes.holds(("model", "a long text"))


def test_the_sweep_gives_memory_back_after_dropping_sessions(monkeypatch):
    """Sessions dropped (their pages closed) free their generations: the sweep gives the pages
    back then, even with no cache emptied (the idle trimmer only follows a stretch of work)."""
    from types import SimpleNamespace

    from ui import demo as demo_module

    given: list[int] = []
    monkeypatch.setattr(demo_module, "SESSION_SWEEP_S", 0.0)
    monkeypatch.setattr(demo_module, "give_back_memory", lambda: given.append(1))
    monkeypatch.setattr(demo_module, "reopen_on_heartbeat", lambda app, holder: True)
    monkeypatch.setattr(demo_module, "evict_idle_sessions", lambda holder, idle: 0)
    monkeypatch.setattr(demo_module, "forget_unused_views", lambda idle: 0)
    left = iter([2, 0])  # two sessions left at the first sweep, none at the second
    monkeypatch.setattr(demo_module, "drop_left_sessions", lambda holder, forget: next(left))
    fake = SimpleNamespace(
        state_holder=object(), is_running=True, server_app=None, write_order=None,
        model_registry=None,
    )  # fmt: skip
    sweeps = iter([fake, fake, None])
    demo_module._sweep_sessions(lambda: next(sweeps))
    assert given == [1]  # after the sweep that dropped sessions, not after the empty one
