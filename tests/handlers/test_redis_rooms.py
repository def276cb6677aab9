"""Follow me across app processes: the rooms kept in Redis (``RedisRooms``) against the
in-memory registry (``Rooms``), two processes' registries on one Redis, concurrent publishes,
expiry by Redis, and the handlers when Redis stops answering. Each test runs against a real
``redis-server`` (the ``redis_url`` fixture)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ui.links.rooms import FollowMe, RedisRooms, RoomError, Rooms, RoomsUnavailable


def client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=2)


def outcome(call: Any) -> Any:
    """What a registry's call gave: its value, or its error's type and message."""
    try:
        return ("ok", call())
    except RoomError as error:
        return ("error", type(error).__name__, str(error))


def run_script(rooms: Any, codes: dict[str, str]) -> list[Any]:
    """One lecture's operations on ``rooms``; ``codes`` maps each room's name in the script to
    its code in this registry (codes are random), so that both registries see the same
    story. Returns each operation's outcome, with the codes written back as names."""
    made = {name: rooms.open() for name in ("a", "b", "c")}
    for name, room in made.items():
        codes[name] = room.code
    a, b, c = made["a"], made["b"], made["c"]
    steps = [
        lambda: rooms.latest(a.code),
        lambda: rooms.publish(a.code, a.secret, "tab=attention&layer=2"),
        lambda: rooms.publish(a.code, a.secret, "tab=attention&layer=2"),  # unchanged
        lambda: rooms.publish(a.code.lower(), a.secret, "tab=attention&layer=3"),
        lambda: rooms.latest(" " + a.code.lower()[:2] + "-" + a.code[2:] + " "),
        lambda: rooms.publish(a.code, "guess", "tab=generate"),
        lambda: rooms.publish(a.code, b.secret, "tab=generate"),  # another room's secret
        lambda: rooms.resume(a.code, None),
        lambda: rooms.resume(a.code, "sécret"),  # not ASCII: refused, not a traceback
        lambda: rooms.publish(b.code, b.secret, "x" * 9_000),
        lambda: rooms.publish(b.code, b.secret, ""),  # the same empty view: no new version
        lambda: rooms.publish(b.code, b.secret, "tab=tokenize"),
        lambda: rooms.latest("NOPE9"),
        lambda: rooms.latest(""),
        lambda: rooms.latest(None),
        lambda: len(rooms),
        lambda: rooms.latest(a.code),  # a read: now the most recently used
        lambda: rooms.open() and None,  # past the bound: the least recently used (c) closes
        lambda: len(rooms),
        lambda: rooms.latest(c.code),
        lambda: rooms.publish(c.code, c.secret, "tab=inside"),
        lambda: rooms.latest(b.code),
        lambda: rooms.publish(a.code, a.secret, "tab=generate&step=4"),
    ]
    results = [outcome(step) for step in steps]
    for name, room in made.items():
        resumed = rooms.resume(room.code, room.secret) if name != "c" else None
        results.append(None if resumed is None else (resumed.code, resumed.view, resumed.version))
    text = repr(results)
    for name, code in codes.items():
        text = text.replace(code, f"<{name}>")
    return [text]


def test_redis_rooms_behave_as_the_rooms_in_memory(redis_url: str) -> None:
    memory_codes: dict[str, str] = {}
    redis_codes: dict[str, str] = {}
    expected = run_script(Rooms(max_rooms=3), memory_codes)
    got = run_script(RedisRooms(client(redis_url), max_rooms=3), redis_codes)
    assert got == expected
    # The script exercised what it claims: versions moved, errors were raised, a room closed.
    assert "'error', 'RoomError', 'room <a> belongs to another page'" in expected[0]
    assert "longer than a link" in expected[0]
    assert "there is no open room <c>" in expected[0]
    assert "('ok', 3)" in expected[0]


def test_one_client_opening_many_rooms_is_refused_and_never_closes_a_lecture_in_redis(
    redis_url: str,
) -> None:
    from test_rooms import check_flood, flood_beside_a_lecture

    rooms = RedisRooms(client(redis_url), max_rooms=12, per_client=4, prefix="flood:")
    check_flood(flood_beside_a_lecture(rooms), 4, 12)
    # Every room a lecture: the next is refused, none closed.
    full = RedisRooms(client(redis_url), max_rooms=2, prefix="full:")
    first, second = full.open("a"), full.open("b")
    full.latest(first.code)
    full.publish(second.code, second.secret, "tab=tokenize")
    with pytest.raises(RoomError, match="all 2 rooms are lectures in progress"):
        full.open("c")
    assert full.latest(first.code) == (0, "") and len(full) == 2


def test_two_processes_share_rooms_and_codes_never_repeat(redis_url: str) -> None:
    first, second = RedisRooms(client(redis_url)), RedisRooms(client(redis_url))
    lecturer = first.open()
    # A student's process reads the room the lecturer's process opened, and sees each change.
    assert second.latest(lecturer.code) == (0, "")
    assert first.publish(lecturer.code, lecturer.secret, "tab=attention") == 1
    assert second.latest(lecturer.code) == (1, "tab=attention")
    # The lecturer's reload lands on the other process: it resumes the room and publishes.
    resumed = second.resume(lecturer.code, lecturer.secret)
    assert (resumed.code, resumed.view, resumed.version) == (lecturer.code, "tab=attention", 1)
    assert second.publish(lecturer.code, lecturer.secret, "tab=inside") == 2
    assert first.latest(lecturer.code) == (2, "tab=inside")
    with pytest.raises(RoomError, match="another page"):
        second.resume(lecturer.code, "guess")
    # Codes are unique across the processes: each open by either is a new room.
    codes = {lecturer.code}
    for i in range(60):
        codes.add((first if i % 2 else second).open().code)
    assert len(codes) == 61
    assert len(first) == len(second) == 61


def test_a_code_taken_by_another_process_is_not_given_again(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = RedisRooms(client(redis_url)), RedisRooms(client(redis_url))
    taken = first.open()
    # The second process draws the taken code first, then another.
    letters = iter(taken.code + "ACDEF")
    monkeypatch.setattr("ui.links.rooms.secrets.choice", lambda _: next(letters))
    fresh = second.open()
    assert fresh.code == "ACDEF"
    assert second.resume(taken.code, taken.secret).secret == taken.secret  # left as it was


def test_concurrent_publishes_raise_the_version_once_per_change(redis_url: str) -> None:
    """Threads on two processes' registries publish to one room: every version is given to
    one change alone, and the room ends at the count of changes."""
    registries = [RedisRooms(client(redis_url)), RedisRooms(client(redis_url))]
    room = registries[0].open()
    results: list[tuple[str, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def publisher(n: int) -> None:
        rooms = registries[n % 2]
        start.wait()
        for i in range(25):
            view = f"tab=attention&writer={n}&i={i}"
            version = rooms.publish(room.code, room.secret, view)
            with lock:
                results.append((view, version))

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    versions = sorted(v for _, v in results)
    # Every publish set a view that differs from the one before it (no two writers share a
    # view), so each raised the version by one: 1..200, each once.
    assert versions == list(range(1, 201))
    last_view = max(results, key=lambda r: r[1])[0]
    assert registries[1].latest(room.code) == (200, last_view)


def test_a_room_nobody_uses_expires_and_a_used_one_stays(redis_url: str) -> None:
    # Margins of seconds, not tenths: on a loaded CI machine two polls meant to be 0.2 s
    # apart once came more than 0.8 s apart, and the used room expired between them.
    rooms = RedisRooms(client(redis_url), idle_s=2.0)
    idle, used = rooms.open(), rooms.open()
    for _ in range(6):
        time.sleep(0.4)
        rooms.latest(used.code)  # followers polling keep it open
    # The idle room has been unused for 2.4 s at least, the used one for a moment.
    with pytest.raises(RoomError, match="no open room"):
        rooms.latest(idle.code)
    assert len(rooms) == 1
    assert rooms.latest(used.code) == (0, "")
    ttl_ms = client(redis_url).pttl(f"visualiser:room:{used.code}")
    assert 0 < ttl_ms <= 2000


def test_follow_me_waits_out_a_redis_that_does_not_answer() -> None:
    """Redis gone: a follower's poll changes nothing (it asks again later), hosting says so
    in the page; no handler raises."""
    import gradio as gr
    from redis_server import RedisServer

    server = RedisServer()
    try:
        with gr.Blocks():
            follow_me = FollowMe(RedisRooms(client(server.url)))
        hosting, line, _ = follow_me.open_room(None)
        assert "Room code" in line
        code = hosting[0]
        following, *_ = follow_me.start_following(code)
        assert following == [code, -1]
        server.stop()
        with pytest.raises(RoomsUnavailable):
            follow_me.rooms.latest(code)
        polled = follow_me.poll(following)
        assert all(isinstance(part, dict) and part.get("__type__") == "update" for part in polled)
        assert follow_me.open_room(None)[1].startswith("⚠️ follow me is unavailable")
        resumed = follow_me.resume_room(hosting, hosting)
        assert resumed[0] == gr.skip() and "unavailable" in resumed[1]
    finally:
        server.stop()
