"""Event handlers that receive a tab's request object instead of the components' values.

A tab's request class has a constructor (``of``) whose parameters are the components' values in
the order its API sends them. :func:`takes_request` turns ``handler(registry, request)`` into the
event handler gradio calls with ``registry`` and those values: its signature, which gradio reads
for the API page and to count the inputs, is the constructor's, so the order is written once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


def takes_request(
    build: Callable[..., Any], values: Sequence[str] | None = None, *, switch: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: ``handler(registry, request)`` as an event handler taking ``registry``, then
    ``values`` (names of ``build``'s parameters; all of them, in order, when None), which it
    passes to ``build`` by name to make the request once.

    ``switch`` names one more value among ``values``, a checkbox that turns the view on: when
    it is off the handler gets ``None`` instead of a request, and no value is read."""
    accepted = inspect.signature(build).parameters
    names = list(accepted) if values is None else list(values)

    def parameter(name: str) -> inspect.Parameter:
        annotation = "bool" if name == switch else accepted[name].annotation
        return inspect.Parameter(name, _POSITIONAL, annotation=annotation)

    registry = inspect.Parameter("registry", _POSITIONAL, annotation="ModelRegistry")
    parameters = [registry, *map(parameter, names)]

    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        returns = inspect.signature(handler).return_annotation
        signature = inspect.Signature(parameters, return_annotation=returns)

        def endpoint(*args: Any, **kwargs: Any) -> Any:
            given = signature.bind(*args, **kwargs).arguments
            registry = given.pop("registry")
            if switch is not None and not given.pop(switch):
                return handler(registry, None)
            return handler(registry, build(**given))

        endpoint.__signature__ = signature  # type: ignore[attr-defined]
        endpoint.__name__ = endpoint.__qualname__ = handler.__name__
        endpoint.__doc__ = handler.__doc__
        endpoint.__module__ = handler.__module__
        return endpoint

    return decorate
