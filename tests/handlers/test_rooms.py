"""Follow me: the registry of rooms (codes, secrets, versions, bounds, expiry) and the handlers
that host, follow and poll, called directly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from serving import run_async

from ui.links.rooms import (
    CODE_ALPHABET,
    CODE_LENGTH,
    FollowMe,
    RoomError,
    RoomRefused,
    Rooms,
    normal_code,
)


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


def flood_beside_a_lecture(rooms: Any) -> dict[str, Any]:
    """A lecture (its room published to and followed) while one client opens rooms until it
    is refused, then clients at other addresses open as many again as the registry holds:
    what each part saw. Shared with the Redis registry's test."""
    lecture = rooms.open("10.0.0.1")
    rooms.publish(lecture.code, lecture.secret, "tab=generate&step=3")
    rooms.latest(lecture.code)  # a follower's read
    opened, refusal = 0, ""
    for _ in range(3 * rooms.per_client):
        try:
            rooms.open("10.6.6.6")
            opened += 1
        except RoomRefused as error:
            refusal = str(error)
            break
    others = [rooms.open(f"10.7.{n // 5}.{n % 5}") for n in range(2 * rooms.max_rooms)]
    return {
        "opened": opened,
        "refusal": refusal,
        "lecture": rooms.latest(lecture.code),
        "still": rooms.publish(lecture.code, lecture.secret, "tab=generate&step=4"),
        "count": len(rooms),
        "newest open": rooms.latest(others[-1].code),
    }


def check_flood(seen: dict[str, Any], per_client: int, max_rooms: int) -> None:
    """What :func:`flood_beside_a_lecture` must see: the flooding client stopped at its bound
    with a message that says why, the lecture's room never closed, the registry bounded."""
    assert seen["opened"] == per_client
    assert f"this address has {per_client} rooms open already" in seen["refusal"]
    assert seen["lecture"] == (1, "tab=generate&step=3")  # the same code, the same view
    assert seen["still"] == 2
    assert seen["count"] == max_rooms
    assert seen["newest open"] == (0, "")


def test_one_client_opening_many_rooms_is_refused_and_never_closes_a_lecture() -> None:
    check_flood(flood_beside_a_lecture(Rooms(max_rooms=12, per_client=4)), 4, 12)


def test_when_every_room_is_a_lecture_a_new_one_is_refused_and_an_idle_lecture_makes_way() -> None:
    clock = Clock()
    rooms = Rooms(max_rooms=2, clock=clock, active_s=600.0)
    first, second = rooms.open("a"), rooms.open("b")
    rooms.latest(first.code)
    rooms.publish(second.code, second.secret, "tab=tokenize")
    with pytest.raises(RoomRefused, match="all 2 rooms are lectures in progress"):
        rooms.open("c")
    clock.now += 500.0
    rooms.latest(second.code)  # still followed; the first lecture ended 500 s ago
    clock.now += 200.0
    third = rooms.open("c")
    with pytest.raises(RoomError, match="no open room"):
        rooms.latest(first.code)
    assert rooms.latest(second.code) == (1, "tab=tokenize")
    assert rooms.latest(third.code) == (0, "")


def test_hosting_past_the_bound_says_why_in_the_page() -> None:
    import gradio as gr

    class Request:  # what the handler reads of gradio's request: the client's address
        def __init__(self, host: str) -> None:
            self.client = type("Client", (), {"host": host})()

    with gr.Blocks():
        follow_me = FollowMe(Rooms(per_client=2))
    for _ in range(2):
        assert "Room code" in follow_me.open_room(None, Request("10.1.1.1"))[1]  # type: ignore[arg-type]
    hosting, line, timer = follow_me.open_room(None, Request("10.1.1.1"))  # type: ignore[arg-type]
    assert hosting == gr.skip() and timer == gr.skip()
    assert line.startswith("⚠️ No room: this address has 2 rooms open already")
    assert "Room code" in follow_me.open_room(None, Request("10.2.2.2"))[1]  # type: ignore[arg-type]


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
    import gradio as gr

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
    _, line, timer, view = follow_me.resume_room([code, secret], [code, secret])
    assert code in line and view["query"] == "tab=generate&step=3"
    # It publishes again once that view is back on the page, not before: once it is settled,
    # or, a Generate step to replay, once it is replayed (the page shows step 1 until then).
    assert not timer.active and follow_me.publish_again([code, secret]).active
    attention = {"tab": "attention", "values": {"layer": 2}}
    assert follow_me.publish_settled([code, secret], attention).active
    assert follow_me.publish_settled([code, secret], {"tab": "generate", "step": 3}) == gr.skip()
    assert follow_me.publish_settled([code, secret], {"tab": "generate", "step": 1}).active
    # Hosting again from that page keeps the room and its code.
    assert follow_me.open_room([code, secret])[0] == [code, secret]
    # A fresh page that hosted this room while it opened (nothing held as it opened) is not
    # sent back to the room's last view, nor is a page that no longer hosts the room.
    assert all(part == gr.skip() for part in follow_me.resume_room(["", ""], [code, secret]))
    assert all(part == gr.skip() for part in follow_me.resume_room([code, secret], ["", ""]))


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


# -- a follower's poll, in the whole app -------------------------------------------------------


@pytest.fixture(scope="module")
def app_demo() -> Iterator[Any]:
    import app

    built = app.build_demo("cpu", (), preload=False)
    yield built
    built.model_registry.release()


def _titles(figure: Any) -> str:
    """Every title of a figure (its own and its subplots'), as one text."""
    import plotly.graph_objects as go

    assert isinstance(figure, go.Figure)
    layout = figure.to_plotly_json()["layout"]
    return " | ".join(
        [str(layout.get("title", {}).get("text", ""))]
        + [str(a.get("text", "")) for a in layout.get("annotations", [])]
    )


def _prop(value: Any, key: str) -> Any:
    """A property an output sets: an update's entry, or a component's attribute."""
    return value.get(key) if isinstance(value, dict) else getattr(value, key)


def test_a_followers_poll_finds_the_change_and_one_event_draws_the_lecturers_tab(
    app_demo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import copy
    import inspect

    import gradio as gr

    from ui.links.share import encode_view

    views, follow_me = app_demo.views, app_demo.follow_me
    fns = list(app_demo.fns.values())
    poll = next(f for f in fns if getattr(f.fn, "__name__", "") == "poll_tabs")
    polled = follow_me.polled["attention"]
    draw = next(f for f in fns if (polled._id, "change") in [tuple(t) for t in f.targets])
    attention = next(f for f in fns if f.api_name == "attention")
    controls = {
        "sentences": "the small cat sees a red ball",
        "model": "translate",
        "kind": "encoder self-attention",
    }
    room = follow_me.rooms.open()
    query = encode_view(views.tabs["attention"], {**controls, "layer": 2, "head": 3})
    follow_me.rooms.publish(room.code, room.secret, query)

    # The poll is small whatever the page holds: gradio's cost grows with an event's outputs.
    assert len(poll.inputs) == 1 and len(poll.outputs) <= len(views.tabs) + 5
    answer = run_async(poll.fn([room.code, -1]))
    out = dict(zip([c._id for c in poll.outputs], answer, strict=True))
    assert out[follow_me.following._id] == [room.code, 1]
    incoming = out[polled._id]
    assert incoming == f"1 {query}"  # the version first: each change is a new value
    others = [s for slug, s in follow_me.polled.items() if slug != "attention"]
    assert all(out[s._id] == gr.skip() for s in others)  # only the view's tab draws
    assert not any(isinstance(s, gr.State) for s in follow_me.polled.values())

    # The tab's draw: its controls and figures only, not the whole page's.
    assert len(draw.outputs) < len(views.outputs) / 2
    page = [copy.deepcopy(c.value) if isinstance(c, gr.State) else c.value for c in draw.inputs]
    page[-1] = incoming  # the box the poll wrote, read last
    drawn = dict(zip([c._id for c in draw.outputs], draw.fn(*page), strict=True))
    assert _prop(drawn[views.tabs_block._id], "selected") == "attention"  # the lecturer's tab
    tab = views.tabs["attention"]
    shown = {c._id: v for c, v in zip(draw.inputs, page, strict=True)}
    for key, value in (("layer", 2), ("head", 3)):  # sent, where the page shows another
        control = tab.controls[key]
        assert _prop(drawn[control._id], "value") == (
            None if shown[control._id] == value else value
        )
    # The same figures as the Attention tab's own handler draws, computed anew here (not
    # through the views every session shares), for the lecturer's controls.
    handler = inspect.unwrap(attention.fn)
    assert not getattr(handler, "shared_view", False)
    alone = handler(*controls.values(), 2, 3, 1, [], False, "none (the correct pass)")
    figures = 0
    for component, expected in zip(attention.outputs, alone, strict=True):
        if isinstance(component, gr.Plot) and expected is not None:
            got = drawn[component._id]
            got = got.get("value") if isinstance(got, dict) else got
            assert got is not expected and got.to_json() == expected.to_json()
            figures += 1
    assert figures >= 1
    assert "layer 2" in _titles(drawn[attention.outputs[0]._id]).lower()

    # What the page shows already is not sent again (every output costs the server, for each
    # follower at each change): drawn again on a page that shows the view, no control's value
    # is sent, and the figures still are.
    showing = list(page)
    for i, component in enumerate(draw.inputs[:-1]):
        sent = drawn.get(component._id, gr.skip())
        if isinstance(sent, dict) and "value" in sent:
            showing[i] = sent["value"]
        elif not isinstance(sent, dict | gr.blocks.Block):
            showing[i] = sent
    again = dict(zip([c._id for c in draw.outputs], draw.fn(*showing), strict=True))
    read = {c._id for c in draw.inputs}
    resent = [
        key
        for key, control in tab.controls.items()
        if control._id in again
        and control._id in read
        and not (isinstance(again[control._id], dict) and "value" not in again[control._id])
    ]
    assert not resent
    assert _titles(again[attention.outputs[0]._id]) == _titles(drawn[attention.outputs[0]._id])

    # The next poll finds nothing new: nothing is drawn, no view computed.
    shared = app_demo.model_registry.shared_views
    computed = shared.computed
    monkeypatch.setattr("ui.links.rooms.WAIT_S", 0.2)  # how long a question waits for a change
    again = run_async(poll.fn(out[follow_me.following._id]))
    assert all(value == gr.skip() for value in again)
    assert shared.computed == computed


def test_taking_over_empties_the_boxes_so_that_following_again_draws_the_view(
    app_demo: Any,
) -> None:
    follow_me = app_demo.follow_me
    fns = list(app_demo.fns.values())
    take_over = next(f for f in fns if (follow_me.take_over._id, "click") in map(tuple, f.targets))
    following = ["ABCDE", 3]
    out = dict(zip([c._id for c in take_over.outputs], take_over.fn(following), strict=True))
    # Emptied in place too: a question the page asked before taking over brings nothing.
    assert following == ["", -1]
    assert out[follow_me.following._id] == ["", -1]
    # A box keeping "<version> <query>" would not change when the same view comes again, and
    # its tab would not be drawn.
    assert all(out[box._id] == "" for box in follow_me.polled.values())


def test_a_followers_generate_view_comes_at_the_lecturers_step_drawn_once_for_all(
    app_demo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view's own event shows the lecturer's step (never the first step first); a second
    follower is sent the same figures without a step of the model; the next Step is one step
    of the model in all; the page's own Generate events draw nothing while it follows; once it
    stops following, its own decoding is at the step it shows."""
    import copy

    import gradio as gr

    from ui.links.share import encode_view
    from ui.tabs.generate import handlers

    views, follow_me = app_demo.views, app_demo.follow_me
    registry = app_demo.model_registry
    fns = list(app_demo.fns.values())
    polled = follow_me.polled["generate"]
    draw = next(f for f in fns if (polled._id, "change") in [tuple(t) for t in f.targets])
    tab = views.tabs["generate"]
    state = tab.extra["state"]
    values = {"source": "the small cat sees a red ball", "model": "translate", "max_tokens": 12}
    steps = []
    real_step = registry.decode_step
    monkeypatch.setattr(
        registry, "decode_step", lambda *a, **k: steps.append(1) or real_step(*a, **k)
    )

    def page() -> list[Any]:
        return [copy.deepcopy(c.value) if isinstance(c, gr.State) else c.value for c in draw.inputs]

    def summary(inputs: list[Any], step: int) -> tuple[str, dict[int, Any]]:
        inputs[-1] = f"{step} " + encode_view(tab, values, step)
        out = dict(zip([c._id for c in draw.outputs], draw.fn(*inputs), strict=True))
        assert out[state._id] == gr.skip()  # the follower's own state is not sent
        text = out[summary_box._id]
        return str(text.get("value") if isinstance(text, dict) else text), out

    step_event = next(f for f in fns if f.api_name == "generate_step")
    summary_box = step_event.outputs[0]
    # The Generate tab's own handlers, three Steps from a fresh state: the reference.
    reference = copy.deepcopy(state.value)
    step_inputs = step_event.inputs
    by_id = {c._id: c.value for c in step_inputs}
    by_id |= {tab.controls[k]._id: v for k, v in values.items()}
    args = [by_id.get(c._id) for c in step_inputs]
    args[-1] = reference
    for _ in range(3):
        expected = handlers.step(registry, *args)
    assert "(3 steps)" in expected[0]
    steps.clear()

    first, second = page(), page()
    shown, _ = summary(first, 3)
    assert shown == expected[0]  # the lecturer's step, in the view's own event
    assert 0 < len(steps) <= 3
    steps.clear()
    assert summary(second, 3)[0] == expected[0]
    assert steps == []  # the same figures, no model run for the second follower
    expected = handlers.step(registry, *args)
    steps.clear()
    assert summary(first, 4)[0] == expected[0] and len(steps) == 1  # one Step: one step

    # The page's own events (a model or prompt the view set fires them) draw nothing meanwhile.
    mine = first[[c._id for c in draw.inputs].index(state._id)]
    live = next(
        f for f in fns if getattr(f.fn, "__name__", "") == "first_step" and state in f.inputs
    )
    live_args = [mine if c is state else by_id.get(c._id) for c in live.inputs]
    assert all(out == gr.skip() for out in live.fn(*live_args))

    # Taken over: its own decoding at the step its page shows, for its next Step.
    catch_up = next(f for f in fns if getattr(f.fn, "__name__", "") == "catch_up")
    assert catch_up.fn("ABCDE", mine, *[None] * (len(catch_up.inputs) - 2)) == gr.skip()
    rest = [by_id.get(c._id) for c in catch_up.inputs[2:]]
    assert catch_up.fn("", mine, *rest) is mine
    assert len(mine.decoding.records) == 4 and not mine.following
    assert live.fn(*live_args)[0] != gr.skip()  # its own again


def test_a_quieted_event_keeps_its_kind_and_answers_only_when_not_following():
    """Gradio streams a handler's values only when the function it holds is a generator
    function: quieting Generate's Run to the end for followers must keep it one."""
    import inspect
    from types import SimpleNamespace

    from ui.links.following import _quiet

    def steps(state: Any, n: int) -> Iterator[tuple[int, int]]:
        for i in range(n):
            yield i, i * i

    async def awaited(state: Any) -> tuple[int, int]:
        return 1, 2

    def called(state: Any) -> tuple[int, int]:
        return 3, 4

    alone, following = SimpleNamespace(following=None), SimpleNamespace(following="?tab=x")
    quiet_steps = _quiet(steps, 0, 2)
    assert inspect.isgeneratorfunction(quiet_steps)
    assert list(quiet_steps(alone, 3)) == [(0, 0), (1, 1), (2, 4)]
    (skipped,) = list(quiet_steps(following, 3))
    assert len(skipped) == 2 and all(isinstance(s, dict) for s in skipped)
    quiet_awaited = _quiet(awaited, 0, 2)
    assert inspect.iscoroutinefunction(quiet_awaited)
    assert _result(quiet_awaited(alone)) == (1, 2)
    assert _result(quiet_awaited(following)) != (1, 2)
    quiet_called = _quiet(called, 0, 2)
    assert quiet_called(alone) == (3, 4) and quiet_called(following) != (3, 4)


def _result(coroutine: Any) -> Any:
    """A coroutine that never waits, run to its value without an event loop (a browser module
    on the same test worker may hold one, where asyncio.run refuses to start)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine waited")


def test_every_tab_click_is_followed_by_the_publish_of_a_hosting_page(app_demo: Any) -> None:
    """A lecturer's tab click reaches the room at once: after each tab's click has set the tab
    on screen, the page's script clicks the hidden Publish (where the page hosts a room), whose
    event publishes as the tick does, from the same inputs."""
    import inspect

    import gradio as gr

    from ui.links.rooms import HOSTING_MARK, PUBLISH_NOW_JS, room_line

    views, follow_me = app_demo.views, app_demo.follow_me
    fns = list(app_demo.fns.values())
    tabs = [b for b in app_demo.blocks.values() if isinstance(b, gr.Tab) and b.id in views.tabs]
    assert len(tabs) == len(views.tabs) == len(views.tab_selected)
    for tab in tabs:
        (sets,) = [f for f in fns if (tab._id, "select") in map(tuple, f.targets)
                   and views.current in f.outputs]  # fmt: skip
        after = [f for f in fns if f.trigger_after == sets._id]
        assert [f.js for f in after] == [PUBLISH_NOW_JS] and after[0].fn is None
    (tick,) = [f for f in fns if (follow_me.publish_timer._id, "tick") in map(tuple, f.targets)]
    (now,) = [f for f in fns if (follow_me.publish_now._id, "click") in map(tuple, f.targets)]
    assert inspect.unwrap(now.fn) is inspect.unwrap(tick.fn)  # each event's wrappers its own
    assert now.inputs == tick.inputs and now.outputs == tick.outputs
    # The script knows a hosting page by its room line, and only a host's line says so.
    assert HOSTING_MARK in room_line("K7MQA") and repr(HOSTING_MARK) in PUBLISH_NOW_JS
    assert HOSTING_MARK not in follow_me.start_following("K7MQA")[1]
