"""The costly queue is served in turns by client (``ui/serving/fairness.py``), on gradio's own
queue: the order its ``get_events`` hands out against a round-robin written out here, and one
client's waiting calls capped with a message; and an event stream that ends early is one log
line (``ui/serving/event_streams.py``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import gradio as gr
import pytest
from serving import run_async

from ui.serving import limits
from ui.serving.event_streams import QuietEventStreams
from ui.serving.fairness import share_fairly

COSTLY = "costly"


@pytest.fixture
def demo() -> gr.Blocks:
    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.submit(lambda text: text, box, box, concurrency_id=COSTLY, concurrency_limit=1)
        box.change(lambda text: text, box, box)  # a cheap event: left as gradio serves it
    return demo


def _event(fn, address: str, session: str, name: str):
    request = SimpleNamespace(client=SimpleNamespace(host=address))
    return SimpleNamespace(
        fn=fn, request=request, session_hash=session, concurrency_id=fn.concurrency_id, name=name
    )


def _queued(demo: gr.Blocks, arrivals: list[tuple[str, str, str]]) -> list[str]:
    """Queue ``(address, session, name)`` in this order on the costly queue; the names in the
    order gradio's ``get_events`` hands them out."""
    queue = demo._queue
    fn = next(f for f in demo.fns.values() if f.concurrency_id == COSTLY)
    queue.create_event_queue_for_fn(fn)
    waiting = queue.event_queue_per_concurrency_id[COSTLY].queue
    waiting.extend(_event(fn, *arrival) for arrival in arrivals)
    served = []
    while (taken := queue.get_events()) is not None:
        events, _, concurrency_id = taken
        assert concurrency_id == COSTLY
        served += [event.name for event in events]
    return served


def test_one_clients_queue_delays_another_by_one_turn_at_most(demo):
    share_fairly(demo, COSTLY)
    flood = [("10.0.0.1", f"s{n}", f"A{n}") for n in range(1, 6)]
    arrivals = [*flood, ("10.0.0.2", "t", "B1"), ("10.0.0.3", "u", "C1"), ("10.0.0.2", "t", "B2")]
    # Round-robin by address, each client's calls in their arrival order.
    assert _queued(demo, arrivals) == ["A1", "B1", "C1", "A2", "B2", "A3", "A4", "A5"]


def test_without_turns_gradio_serves_in_arrival_order(demo):
    # The reference the fairness changes: the same arrivals, first come first served.
    arrivals = [*[("10.0.0.1", f"s{n}", f"A{n}") for n in range(1, 4)], ("10.0.0.2", "t", "B1")]
    assert _queued(demo, arrivals) == ["A1", "A2", "A3", "B1"]


def test_sessions_behind_one_address_take_turns_too(demo):
    share_fairly(demo, COSTLY)
    hall = "192.168.1.1"  # a lecture hall behind one router
    arrivals = [
        (hall, "anna", "a1"),
        (hall, "anna", "a2"),
        (hall, "anna", "a3"),
        (hall, "ben", "b1"),
    ]
    assert _queued(demo, arrivals) == ["a1", "b1", "a2", "a3"]


def test_a_clients_waiting_calls_are_capped_with_a_message(demo, monkeypatch):
    monkeypatch.setattr(limits, "COSTLY_QUEUED_PER_CLIENT", 2)
    share_fairly(demo, COSTLY)
    queue = demo._queue
    costly = next(i for i, f in demo.fns.items() if f.concurrency_id == COSTLY)
    cheap = next(i for i, f in demo.fns.items() if f.concurrency_id != COSTLY)
    fn = demo.fns[costly]
    queue.create_event_queue_for_fn(fn)
    waiting = queue.event_queue_per_concurrency_id[COSTLY].queue
    waiting += [_event(fn, "10.0.0.1", "s1", "A1"), _event(fn, "10.0.0.1", "s2", "A2")]

    def push(index: int, address: str):
        body = SimpleNamespace(fn_index=index, session_hash=None)
        request = SimpleNamespace(client=SimpleNamespace(host=address))
        return run_async(queue.push(body=body, request=request, username=None))

    accepted, detail, status = push(costly, "10.0.0.1")
    assert (accepted, status) == (False, "validator_error")
    message = detail[0]["message"]
    assert "2 long runs waiting" in message and "wait for one of them" in message
    # Another client, and a cheap event from the same one, are not refused by the cap (gradio's
    # own push then handles them: it fails here, on a bare request, past the cap's check).
    for index, address in [(costly, "10.0.0.2"), (cheap, "10.0.0.1")]:
        try:
            outcome = push(index, address)
        except Exception as error:  # gradio's own push, given a bare test request
            outcome = (None, repr(error), None)
        assert outcome[2] != "validator_error", outcome


# -- event streams that end early --------------------------------------------------------------


def _stream_app(fail_after_start: bool):
    async def app(scope, receive, send):
        if fail_after_start:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("Caught handled exception, but response already started.")

    return app


def _call(app, path: str) -> list[dict]:
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.disconnect"}

    run_async(app({"type": "http", "path": path}, receive, send))
    return sent


def test_an_event_stream_that_ends_early_is_one_line(caplog):
    quiet = QuietEventStreams(_stream_app(fail_after_start=True))
    sent_all: list[dict] = []
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            sent_all += _call(quiet, "/gradio_api/queue/data")
    assert quiet.ended == 3
    ends = [m for m in sent_all if m["type"] == "http.response.body"]
    assert len(ends) == 3 and not any(m.get("more_body") for m in ends)  # each response ended
    lines = [r for r in caplog.records if "event stream ended" in r.getMessage()]
    assert len(lines) == 3 and all(r.exc_info is None for r in lines)
    assert all("\n" not in r.getMessage() for r in lines)


def test_other_failures_pass_on_unchanged():
    # Before the response starts, the error is gradio's to answer; other paths are not touched.
    with pytest.raises(RuntimeError):
        _call(QuietEventStreams(_stream_app(fail_after_start=False)), "/gradio_api/queue/data")
    with pytest.raises(RuntimeError):
        _call(QuietEventStreams(_stream_app(fail_after_start=True)), "/gradio_api/info")
