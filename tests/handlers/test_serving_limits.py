"""Limits set from the machine and the environment: the caches' bounds from the memory this
process may use, the queue's size from ``VISUALISER_QUEUE_SIZE``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ui.serving import limits
from ui.serving.limits import _setting, machine_memory


def _physical() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_a_containers_limit_below_the_machines_memory_is_what_the_process_may_use(
    tmp_path: Path,
) -> None:
    limit = tmp_path / "memory.max"
    limit.write_text(f"{2 * 2**30}\n", encoding="ascii")
    assert machine_memory((str(tmp_path / "absent"), str(limit))) == 2 * 2**30
    # No limit ("max"), or one above the machine's memory: the machine's.
    limit.write_text("max\n", encoding="ascii")
    assert machine_memory((str(limit),)) == _physical()
    limit.write_text(f"{2 * _physical()}\n", encoding="ascii")
    assert machine_memory((str(limit),)) == _physical()


def test_the_caches_are_bounded_by_a_share_of_a_small_machine(tmp_path: Path) -> None:
    limit = tmp_path / "memory.max"
    limit.write_text(f"{4 * 2**30}\n", encoding="ascii")  # a 4 GB container
    small = machine_memory((str(limit),))
    # What limits.py computes at import for such a machine, against the bounds written out.
    assert min(192 * 2**20, small // 64) == 64 * 2**20
    assert min(128 * 2**20, small // 128) == 32 * 2**20
    analyses = min(192 * 2**20, limits.MACHINE_BYTES // 64)
    views = min(128 * 2**20, limits.MACHINE_BYTES // 128)
    assert (analyses, views) == (limits.CACHE_BYTES, limits.SHARED_VIEW_BYTES)


def test_the_queue_holds_a_class_and_the_environment_may_size_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # At a change of the lecturer's view, each follower's page queues up to three events (the
    # tab's draw, its settling, Generate's replay); the other visitors keep the 64 places.
    assert limits.QUEUE_SIZE == 3 * limits.CLASS_SIZE + 64 and limits.CLASS_SIZE >= 100
    monkeypatch.delenv("VISUALISER_QUEUE_SIZE", raising=False)
    assert _setting("VISUALISER_QUEUE_SIZE", 364) == 364
    monkeypatch.setenv("VISUALISER_QUEUE_SIZE", " 1000 ")
    assert _setting("VISUALISER_QUEUE_SIZE", 364) == 1000
    for bad in ("lots", "0", "-5"):
        monkeypatch.setenv("VISUALISER_QUEUE_SIZE", bad)
        with pytest.raises(ValueError, match="VISUALISER_QUEUE_SIZE must be"):
            _setting("VISUALISER_QUEUE_SIZE", 364)
