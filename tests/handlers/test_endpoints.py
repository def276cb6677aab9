"""ui.serving.endpoints.takes_request: the event handlers built from a request's constructor take the
components' values under the names and in the order the APIs have always had (written out here),
build the request once, and a switched-off view reads nothing."""

from __future__ import annotations

import inspect

import gradio as gr

from ui.serving.endpoints import takes_request
from ui.tabs import inside, tokenize
from ui.tabs.inside.compare import inside_compare

INSIDE = ["registry", "text", "name", "stack", "layer", "head", "query", "large", "session"]


def _names(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_the_endpoints_keep_their_api_parameters() -> None:
    assert _names(inside.inside_layer) == INSIDE
    assert _names(inside.refresh) == INSIDE
    assert _names(inside.controls) == [n for n in INSIDE if n != "large"]
    assert _names(inside_compare) == [*INSIDE[:-1], "on", "session"]
    tokenize_api = ["registry", "text", "choice", "vocab", "upload", "compare", "step"]
    assert _names(tokenize.tokenize) == tokenize_api
    assert inside.inside_layer.__name__ == "inside_layer"
    parameters = inspect.signature(inside.refresh).parameters.values()
    assert all(p.default is inspect.Parameter.empty for p in parameters)  # every value is sent


def test_the_request_is_built_by_name_and_a_switch_off_reads_nothing() -> None:
    built = []

    def build(a, b=2, c=3):
        built.append((a, b, c))
        return a + b + c

    def handler(registry, request):
        """Doc."""
        return registry, request

    endpoint = takes_request(build, ("c", "on", "a"), switch="on")(handler)
    assert _names(endpoint) == ["registry", "c", "on", "a"] and endpoint.__doc__ == "Doc."
    assert endpoint("r", 30, True, 1) == ("r", 33) and built == [(1, 2, 30)]
    assert endpoint("r", c=30, on=False, a="not a number") == ("r", None) and len(built) == 1


def test_inside_compare_switched_off_reads_nothing() -> None:
    # No registry, and a text that is not text: off, neither is read.
    update = inside_compare(None, 42, None, None, None, None, None, None, False, None)
    assert update == gr.update(value="", visible=False)
