"""Event handlers that receive a tab's request object instead of the components' values.

A tab's request class has a constructor (``of``) whose parameters are the components' values in
the order its API sends them. :func:`takes_request` turns ``handler(registry, request)`` into the
event handler gradio calls with ``registry`` and those values: its signature, which gradio reads
for the API page and to count the inputs, is the constructor's, so the order is written once.
Every tab's handlers are made by it, so each reads and checks its values once, the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
_EMPTY = inspect.Parameter.empty


def takes_request(
    build: Callable[..., Any],
    values: Sequence[str] | None = None,
    *,
    switch: str | None = None,
    optional: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: ``handler(registry, request)`` as an event handler taking ``registry``, then
    ``values`` (names of ``build``'s positional parameters; all of them, in order, when None),
    which it passes to ``build`` by name to make the request once. A ``build`` whose first
    parameter is ``registry`` (one that looks the model up) is given the registry too; its
    keyword-only parameters are not values (bind them with :func:`functools.partial`).

    ``switch`` names one more value among ``values``, a checkbox that turns the view on: when
    it is off the handler gets ``None`` instead of a request, and no value is read.

    With ``optional`` the values keep ``build``'s defaults (the API page lists them as
    optional); without, every value is required, as gradio always sends them all."""
    accepted = {
        name: parameter
        for name, parameter in inspect.signature(build).parameters.items()
        if parameter.kind is _POSITIONAL
    }
    wants_registry = next(iter(accepted), None) == "registry"
    accepted.pop("registry", None)
    names = list(accepted) if values is None else list(values)
    unknown = [name for name in names if name not in accepted and name != switch]
    if unknown:
        raise TypeError(f"{getattr(build, '__qualname__', build)} takes no {unknown}")

    # A value keeps its default only where every value after it has one too (a signature's rule).
    defaults: dict[str, Any] = {}
    for name in reversed(names if optional else []):
        default = _EMPTY if name == switch else accepted[name].default
        if default is _EMPTY:
            break
        defaults[name] = default

    def parameter(name: str) -> inspect.Parameter:
        annotation = "bool" if name == switch else accepted[name].annotation
        default = defaults.get(name, _EMPTY)
        return inspect.Parameter(name, _POSITIONAL, annotation=annotation, default=default)

    registry = inspect.Parameter("registry", _POSITIONAL, annotation="ModelRegistry")
    parameters = [registry, *map(parameter, names)]

    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        returns = inspect.signature(handler).return_annotation
        signature = inspect.Signature(parameters, return_annotation=returns)

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments
            registry = given.pop("registry")
            if switch is not None and not given.pop(switch):
                return handler(registry, None)
            request = build(registry, **given) if wants_registry else build(**given)
            return handler(registry, request)

        if inspect.isgeneratorfunction(handler):
            # Gradio streams the updates of a generator function only: the endpoint is one too.
            def endpoint(*args: Any, **kwargs: Any) -> Any:
                yield from call(*args, **kwargs)

        else:
            endpoint = call

        endpoint.__signature__ = signature  # type: ignore[attr-defined]
        endpoint.__name__ = endpoint.__qualname__ = handler.__name__
        endpoint.__doc__ = handler.__doc__
        endpoint.__module__ = handler.__module__
        return endpoint

    return decorate
