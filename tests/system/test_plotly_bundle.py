"""The plotly module the page loads registers only the trace types the app draws:
the types the app's code builds, by plotly's own names for them; the cut against gradio's
installed module and against modules of another shape (served whole); the middleware; and, in
a real browser, the trace types the page's plotly knows and a check that finds a trace plotly
could not draw."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import pytest
from plotly.basedatatypes import BaseTraceType
from test_browser import UNDRAWN_TRACES, _open

from ui.serving.plotly_bundle import (
    ASSETS,
    TRACES,
    ServePrunedPlotly,
    plotly_chunk,
    prune,
    pruned_chunk,
)

ROOT = Path(__file__).resolve().parents[2]
# Plotly's scatter is part of its core: registered whatever the list holds.
IN_CORE = {"scatter"}


def _source() -> str:
    name = plotly_chunk()
    assert name is not None, f"gradio ships no single PlotlyPlot-*.js in {ASSETS}"
    return (ASSETS / name).read_text(encoding="utf-8")


def _registered(source: str) -> list[str]:
    """The entries of the module's register list (``co()``, ``qo()``, …)."""
    found = re.findall(r"\b\w+\.register\(\[([\w$(),]*)\]\)", source)
    assert len(found) == 1
    return found[0].split(",")


def test_every_trace_type_the_app_builds_is_registered() -> None:
    """Every ``go.X(`` in the library and the UI, by the type name plotly gives that class."""
    built: dict[str, set[str]] = {}
    for path in [*ROOT.glob("transformer/**/*.py"), *ROOT.glob("ui/**/*.py"), ROOT / "app.py"]:
        for name in re.findall(r"\bgo\.([A-Z]\w*)\(", path.read_text(encoding="utf-8")):
            cls = getattr(go, name)
            if isinstance(cls, type) and issubclass(cls, BaseTraceType):
                built.setdefault(cls().type, set()).add(path.name)
    assert {"heatmap", "bar"} <= set(built)  # the scan sees the figures
    missing = {kind: files for kind, files in built.items() if kind not in {*TRACES, *IN_CORE}}
    assert not missing, f"trace types drawn but not registered in the page's plotly: {missing}"


def test_the_cut_keeps_the_registered_list_to_the_app_s_types() -> None:
    source = _source()
    before = _registered(source)
    pruned = prune(source)
    assert pruned is not None, "gradio's plotly module no longer has the shape the cut reads"
    after = _registered(pruned)
    assert len(before) > 40 and len(after) == len(TRACES)
    assert set(after) < set(before)
    # Only the list changed.
    assert pruned.replace(",".join(after), ",".join(before), 1) == source
    assert pruned_chunk() == pruned.encode("utf-8")
    # One type asked for, one entry kept.
    bar = prune(source, ("bar",))
    assert bar is not None and len(_registered(bar)) == 1


def test_a_module_of_another_shape_is_served_whole() -> None:
    source = _source()
    (call,) = re.findall(r"\b\w+\.register\(\[[\w$(),]*\]\)", source)
    assert prune(source.replace(call, "void 0")) is None  # no register list
    assert prune(source + ";" + call) is None  # two
    assert prune(source.replace("name:`heatmap`", "name:`heat`")) is None  # a kept type not found
    assert prune(source, ("bar", "sphere")) is None
    # Two entries read as the same type: which one is the real one is not known.
    assert prune(source.replace("name:`box`", "name:`bar`")) is None


def _app() -> Any:
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    return Starlette(
        routes=[
            Route(
                "/{path:path}",
                lambda request: PlainTextResponse(f"gradio: {request.url.path}"),
                methods=["GET", "HEAD", "POST"],
            )
        ],
        middleware=[Middleware(ServePrunedPlotly)],
    )


def test_the_middleware_answers_the_module_and_passes_the_rest() -> None:
    from starlette.testclient import TestClient

    name = plotly_chunk()
    client = TestClient(_app())
    module = client.get(f"/assets/{name}")
    assert module.status_code == 200 and module.content == pruned_chunk()
    assert module.headers["content-type"].startswith("application/javascript")
    assert int(module.headers["content-length"]) == len(module.content)
    # Revalidated, not fetched again: the same bytes answer 304 to their own tag.
    etag = module.headers["etag"]
    assert module.headers["cache-control"] == "no-cache"
    again = client.get(f"/assets/{name}", headers={"if-none-match": etag})
    assert again.status_code == 304 and again.content == b""
    other = client.get(f"/assets/{name}", headers={"if-none-match": '"another cut"'})
    assert other.status_code == 200 and other.content == pruned_chunk()
    head = client.head(f"/assets/{name}")
    assert head.status_code == 200 and head.content == b""
    for other in ("/assets/index.js", f"/assets/{name}x", "/", f"/file={name}"):
        assert client.get(other).text == f"gradio: {other}", other
    assert client.post(f"/assets/{name}").text == f"gradio: /assets/{name}"
    # Behind a proxy that mounts the app under a prefix (the path holds the root path).
    proxied = TestClient(_app(), root_path="/space")
    assert proxied.get(f"/space/assets/{name}").content == pruned_chunk()
    assert proxied.get(f"/other/assets/{name}").text == f"gradio: /other/assets/{name}"


@pytest.mark.browser
@pytest.mark.slow
def test_the_page_s_plotly_knows_only_the_app_s_types_and_an_unknown_one_is_caught(
    browser: Any, app_url: str
) -> None:
    context, page = _open(browser, f"{app_url}?tab=attention")
    try:
        page.wait_for_function("window.Plotly !== undefined")
        known = page.evaluate("Object.keys(Plotly.PlotSchema.get().traces)")
        assert sorted(known) == sorted({*TRACES, *IN_CORE})
        # The check the tab tests make finds a trace of a type plotly was not given.
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0")
        assert page.evaluate(UNDRAWN_TRACES) == []
        page.evaluate(
            """() => { const div = document.createElement('div'); document.body.appendChild(div);
              return Plotly.newPlot(div, [{type: 'heatmap', z: [[1, 2]]},
                                          {type: 'surface', z: [[1, 2], [3, 4]]}]); }"""
        )
        assert page.evaluate(UNDRAWN_TRACES) == ["surface"]
    finally:
        context.close()
