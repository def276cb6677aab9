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
