"""A class that typed its own sentences and left leaves the caches full of texts nobody reads
again: the registry drops the analyses and shared views unused for a while, keeping the ones
still read, and the sweeper gives their memory back."""

from __future__ import annotations

import time

from ui.serving.state import ModelRegistry, SharedViews


def test_views_unused_for_the_idle_time_are_dropped_and_those_read_are_kept() -> None:
    views = SharedViews(max_bytes=10**9, max_entries=100)
    for key in ("preset", "own sentence 1", "own sentence 2"):
        views.get(key, lambda key=key: (f"figure of {key}", True))
    time.sleep(0.02)
    mark = time.monotonic()
    time.sleep(0.02)
    views.get("preset", lambda: ("recomputed", True))  # read again: a hit, now recent
    assert views.hits == 1
    # Nothing is old yet.
    assert views.forget_unused(60.0, now=mark + 1.0) == 0 and len(views) == 3
    # Sixty seconds after the mark: the two sentences kept before it have gone, not the preset
    # read after it.
    assert views.forget_unused(60.0, now=mark + 60.0) == 2
    assert views.holds("preset")
    assert not views.holds("own sentence 1") and not views.holds("own sentence 2")
    # A dropped view is computed again when asked for; the kept one is served.
    assert views.get("own sentence 1", lambda: ("again", True)) == "again"
    assert views.get("preset", lambda: ("recomputed", True)) == "figure of preset"


def test_the_registry_drops_its_unused_analyses_and_views_and_keeps_the_read_ones() -> None:
    registry = ModelRegistry("cpu")
    registry.shared_views = SharedViews(max_bytes=10**9, max_entries=100)
    name = registry.model_names[0]
    checkpoint = registry.checkpoint(name, None)
    first = registry.analysis(name, checkpoint, ["the cat sat"])
    registry.analysis(name, checkpoint, ["a dog ran"])
    registry.shared_views.get("view", lambda: ("figure", True))
    # Read again: the same analysis object, from the cache.
    assert registry.analysis(name, checkpoint, ["the cat sat"]) is first
    assert registry.forget_unused(60.0) == 0
    assert registry.forget_unused(60.0, now=time.monotonic() + 61.0) == 3
    assert len(registry.shared_views) == 0
    # Asked for again after it was dropped: a new pass, equal to the first.
    again = registry.analysis(name, checkpoint, ["the cat sat"])
    assert again is not first
    assert again.source_pieces == first.source_pieces
    assert again.target_pieces == first.target_pieces
