"""Follow me: the registry of rooms (codes, secrets, versions, bounds, expiry) and the handlers
that host, follow and poll, called directly."""

from __future__ import annotations

import pytest

from ui.links.rooms import CODE_ALPHABET, CODE_LENGTH, FollowMe, RoomError, Rooms, normal_code


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_room_code_is_short_and_readable_and_each_is_new() -> None:
    rooms = Rooms()
    codes = {rooms.open().code for _ in range(50)}
    assert len(codes) == 50
    for code in codes:
        assert len(code) == CODE_LENGTH
        assert set(code) <= set(CODE_ALPHABET)
        assert not set(code) & set("0O1IL5S2Z8B")  # nothing a projector makes ambiguous


def test_publish_raises_the_version_only_when_the_view_changes() -> None:
    rooms = Rooms()
    room = rooms.open()
    assert rooms.latest(room.code) == (0, "")
    assert rooms.publish(room.code, room.secret, "tab=attention&layer=2") == 1
    assert rooms.publish(room.code, room.secret, "tab=attention&layer=2") == 1
    assert rooms.publish(room.code, room.secret, "tab=attention&layer=3") == 2
    # A student types the code in lower case, with a space.
    assert rooms.latest(" " + room.code.lower()[:2] + " " + room.code.lower()[2:]) == (
        2,
        "tab=attention&layer=3",
    )


def test_only_the_lecturers_secret_publishes_or_resumes() -> None:
    rooms = Rooms()
    room = rooms.open()
    with pytest.raises(RoomError, match="another page"):
        rooms.publish(room.code, "guess", "tab=generate")
    with pytest.raises(RoomError, match="another page"):
        rooms.resume(room.code, "guess")
    assert rooms.resume(room.code, room.secret) is room
    with pytest.raises(RoomError, match="no open room"):
        rooms.latest("NOPE9")


def test_rooms_are_bounded_least_recently_used_first() -> None:
    rooms = Rooms(max_rooms=3)
    first, second, third = rooms.open(), rooms.open(), rooms.open()
    rooms.latest(first.code)  # read: now the most recently used
    rooms.open()
    assert len(rooms) == 3
    with pytest.raises(RoomError):
        rooms.latest(second.code)
    assert rooms.latest(first.code) == (0, "")
    assert rooms.latest(third.code) == (0, "")


def test_an_idle_room_closes_and_a_used_one_stays() -> None:
    clock = Clock()
    rooms = Rooms(idle_s=100.0, clock=clock)
    idle, used = rooms.open(), rooms.open()
    for _ in range(3):
        clock.now += 60.0
        rooms.latest(used.code)  # followers polling keep it open
    assert len(rooms) == 1
    with pytest.raises(RoomError):
        rooms.latest(idle.code)


def test_a_view_longer_than_a_link_is_refused() -> None:
    rooms = Rooms()
    room = rooms.open()
    with pytest.raises(RoomError, match="longer than a link"):
        rooms.publish(room.code, room.secret, "x" * 9_000)


def test_normal_code_ignores_case_spaces_and_non_strings() -> None:
    assert normal_code(" k7m-qa ") == "K7MQA"
    assert normal_code(None) == ""
    assert normal_code(12) == ""


@pytest.fixture(scope="module")
def follow_me() -> FollowMe:
    import gradio as gr

    with gr.Blocks():
        return FollowMe(Rooms())


def test_a_follower_gets_each_change_once_and_a_lecturers_reload_resumes(
    follow_me: FollowMe,
) -> None:
    hosting, line, timer = follow_me.open_room(["", ""])
    code, secret = hosting
    assert code in line and timer.active
    follow_me.rooms.publish(code, secret, "tab=attention&layer=2")

    following, note, poll, button, followed, accordion = follow_me.start_following(code.lower())
    assert following == [code, -1] and poll.active and code in note
    # The page turns read-only, with a visible way back: the button names the room.
    assert followed == code and "read-only" in note
    assert button.visible and button.value == f"Following {code} — Take over"
    assert accordion.open
    following, incoming, *unchanged = follow_me.poll(following)
    assert incoming == {"query": "tab=attention&layer=2", "version": 1}
    assert all(u == {"__type__": "update"} for u in unchanged)  # still read-only
    # Nothing new: nothing is sent.
    unchanged = follow_me.poll(following)
    assert all(type(u).__name__ == "skip" or u == {"__type__": "update"} for u in unchanged)
    follow_me.rooms.publish(code, secret, "tab=generate&step=3")
    following, incoming, *_ = follow_me.poll(following)
    assert following == [code, 2] and incoming["query"] == "tab=generate&step=3"

    # The lecturer reloads: the same room is hosted again, its latest view brought back.
    _, line, timer, view = follow_me.resume_room([code, secret])
    assert code in line and view["query"] == "tab=generate&step=3"
    # It publishes again once that view is back on the page, not before.
    assert not timer.active and follow_me.publish_again([code, secret]).active
    # Hosting again from that page keeps the room and its code.
    assert follow_me.open_room([code, secret])[0] == [code, secret]


def test_a_wrong_code_says_so_and_take_over_stops(follow_me: FollowMe) -> None:
    following, note, poll, button, followed, _ = follow_me.start_following("QQQQQ")
    assert following == ["", -1] and "no open room QQQQQ" in note and not poll.active
    assert followed == "" and not button.visible
    following, note, poll, button, followed = follow_me.stop_following()
    assert following == ["", -1] and not poll.active
    assert followed == "" and not button.visible  # the page is interactive again


def test_a_room_that_closes_gives_the_follower_its_page_back() -> None:
    import gradio as gr

    clock = [0.0]
    with gr.Blocks():
        follow_me = FollowMe(Rooms(idle_s=10, clock=lambda: clock[0]))
    code, _ = follow_me.open_room(["", ""])[0]
    following = follow_me.start_following(code)[0]
    clock[0] = 11.0  # nobody used the room for longer than it is kept
    following, _, line, poll, button, followed = follow_me.poll(following)
    assert following == ["", -1] and followed == "" and not button.visible
    assert not poll.active and "closed" in line
