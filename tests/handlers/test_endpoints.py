"""ui.serving.endpoints.takes_request: the event handlers built from a request's constructor take the
components' values under the names and in the order the APIs have always had (written out here),
build the request once, and a switched-off view reads nothing."""

from __future__ import annotations

import inspect

import gradio as gr
import pytest

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


GENERATE = ["registry", "source", "model", "strategy", "temperature", "top_k", "top_p", "beam"]
GENERATE += ["max_tokens", "seed", "layer", "head", "large", "session", "state"]


def test_the_generate_endpoints_take_their_inputs_by_name_in_the_api_order() -> None:
    from ui.tabs.generate import handlers
    from ui.tabs.generate.cache_view import kv_cache

    every = [handlers.step, handlers.back, handlers.reset, handlers.run, handlers.first_step]
    every += [handlers.redraw, handlers.show_stream, handlers.redraw_attention, kv_cache]
    for endpoint in every:
        assert _names(endpoint) == GENERATE, endpoint.__name__
    # Gradio streams a generator function's updates only: /generate must stay one.
    assert inspect.isgeneratorfunction(handlers.run)
    assert not inspect.isgeneratorfunction(handlers.step)


def test_a_generator_handler_streams_through_the_decorator() -> None:
    def build(a):
        return a * 2

    def handler(registry, request):
        yield registry
        yield request

    endpoint = takes_request(build)(handler)
    assert inspect.isgeneratorfunction(endpoint) and list(endpoint("r", 5)) == ["r", 10]


def test_a_build_that_takes_the_registry_gets_it_and_unknown_values_are_refused() -> None:
    def build(registry, a, b=2, *, flag=False):
        return (registry, a, b, flag)

    endpoint = takes_request(build)(lambda registry, request: request)
    assert _names(endpoint) == ["registry", "a", "b"]  # neither registry twice nor the flag
    assert inspect.signature(endpoint).parameters["b"].default is inspect.Parameter.empty
    assert endpoint("r", 1, 3) == ("r", 1, 3, False)
    optional = takes_request(build, optional=True)(lambda registry, request: request)
    assert inspect.signature(optional).parameters["b"].default == 2
    assert optional("r", 1) == ("r", 1, 2, False)
    with pytest.raises(TypeError, match="takes no"):
        takes_request(build, ("a", "c"))


def test_tokenize_refuses_a_tokenizer_the_menus_do_not_have_by_name() -> None:
    import torch

    from ui.serving.state import ModelRegistry

    registry = ModelRegistry(torch.device("cpu"))
    for choice, compare in (
        ("no such", "(none)"),
        ("translate model's tokenizer (BPE)", "no such"),
    ):
        with pytest.raises(gr.Error, match=r"there is no tokenizer called .*no such"):
            tokenize.tokenize(registry, "a cat", choice, 500, None, compare, None)
