"""What an event writes costs gradio only what it changes.

Gradio answers every output of an event that is an update (``gr.skip()``, ``gr.update(...)``)
by building that component anew for the session and copying its config, whatever the update
holds: about 0.6 ms per output for a skip on a 2-core CPU, 0.9 ms for ``gr.update(value=...)``
against 0.4 ms for the same value sent plain. A follower's page asks every quarter of a second
and is answered with a dozen skips, and the view it then draws sets a few controls among twenty
outputs; thirty followers made that over half a second of the server's time at each of the
lecturer's changes, the last follower waiting for all of it. And each figure is serialised for
each answer, though the figures of a view every session shares are the same objects.

:func:`lighter_outputs` makes gradio leave a skipped output alone (what it sends the page for
it is what it sent before: an empty update), take an update that sets only a value as that
value, and send a shared figure as the JSON made for it once (:class:`SharedPlots`).
Everything else goes through gradio as it was.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections import OrderedDict
from typing import Any

import gradio as gr

SKIP: dict[str, str] = {"__type__": "update"}
# The shared figures' JSON kept for the next answers: a lecture's views are a few figures of
# tens of kilobytes each, sent to every follower within a second.
SHARED_PLOT_BYTES = 16 * 1024 * 1024


def _is_skip(value: Any) -> bool:
    return isinstance(value, dict) and value == SKIP


def _plain(block: Any, value: Any) -> Any:
    """An update of a component that sets only its value, as that value; anything else (a
    layout block's update among them: gradio takes no plain value for one) as it is; a shared
    figure as the JSON already made for it."""
    value = PLOTS.sent(block, value)
    if (
        isinstance(block, gr.components.Component)
        and isinstance(value, dict)
        and value.get("__type__") == "update"
        and value.keys() == {"__type__", "value"}
    ):
        return value["value"]
    return value


class SharedPlots:
    """The JSON of the figures every session shares (marked by ``ui/serving/shared_views.py``),
    made once and kept for the next answers, up to ``max_bytes`` of it, the least recently
    sent going first: thirty followers drawing the lecturer's Attention view sent the same nine
    figures, each serialised thirty times (5 ms a follower). Keyed by the figure object, which
    a kept entry holds only weakly."""

    def __init__(self, max_bytes: int = SHARED_PLOT_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, tuple[weakref.ref, Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def data(self, block: Any, figure: Any) -> Any:
        """What ``block`` (a ``gr.Plot``) sends for ``figure``, made once per figure."""
        key = id(figure)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0]() is figure:
                self._entries.move_to_end(key)
                return entry[1]
        data = block.postprocess(figure)
        size = len(getattr(data, "plot", "") or "")
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[2]
            if size <= self.max_bytes:
                self._entries[key] = (weakref.ref(figure), data, size)
                self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
        return data

    def sent(self, block: Any, value: Any) -> Any:
        """``value`` for ``block`` with a shared figure (alone, or an update's value) as the
        data gradio sends for it; anything else as it is."""
        if not isinstance(block, gr.Plot):
            return value
        if getattr(value, "_shared_view", False):
            return self.data(block, value)
        if isinstance(value, dict) and getattr(value.get("value"), "_shared_view", False):
            return {**value, "value": self.data(block, value["value"])}
        return value


PLOTS = SharedPlots()


def lighter_outputs(demo: gr.Blocks) -> None:
    """Make ``demo``'s answers cost nothing for a skipped output, and a value's cost for an
    update that sets only a value (see the module's doc); a second call finds it done."""
    original = demo.postprocess_data
    if getattr(original, "lighter", False):
        return

    async def postprocess_data(block_fn: Any, predictions: Any, state: Any) -> list[Any]:
        outputs = list(block_fn.outputs)
        if block_fn.batch or block_fn.is_validator_function or not outputs:
            return await original(block_fn, predictions, state)
        if len(outputs) == 1:
            if _is_skip(predictions) and not outputs[0].stateful:
                return [dict(SKIP)]
            return await original(block_fn, _plain(outputs[0], predictions), state)
        if not isinstance(predictions, (list, tuple)) or len(predictions) != len(outputs):
            return await original(block_fn, predictions, state)  # gradio's own checks and forms
        kept = [
            i
            for i, (block, value) in enumerate(zip(outputs, predictions, strict=True))
            if block.stateful or not _is_skip(value)
        ]
        if len(kept) == len(outputs):
            plain = [_plain(b, v) for b, v in zip(outputs, predictions, strict=True)]
            return await original(block_fn, plain, state)
        answered: list[Any] = [dict(SKIP) for _ in outputs]
        if kept:
            fewer = copy.copy(block_fn)
            fewer.outputs = [outputs[i] for i in kept]
            values = [_plain(outputs[i], predictions[i]) for i in kept]
            # gradio takes one output's value bare, several as a list
            data = await original(fewer, values[0] if len(kept) == 1 else values, state)
            for i, value in zip(kept, data, strict=True):
                answered[i] = value
        return answered

    postprocess_data.lighter = True  # type: ignore[attr-defined]
    demo.postprocess_data = postprocess_data  # type: ignore[method-assign]
