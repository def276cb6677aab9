"""Exports that need no UI: a view as one standalone HTML file, a table as CSV, file names.

The HTML file inlines plotly.js (from the installed ``plotly`` package, about 4.6 MB), so it
opens offline: no script is loaded from the network. Figures are given as plotly JSON (the
``{"data": ..., "layout": ...}`` that ``Figure.to_json()`` writes, float32 arrays as base64
typed arrays included) or as ``plotly.graph_objects.Figure``.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go


def slug(text: str, limit: int = 80) -> str:
    """A file-name-safe form of ``text``: ASCII lower case, words joined by ``-``.

    >>> slug("Layer 2 · head 1: weights (QKᵀ/√d_k)")
    'layer-2-head-1-weights-qkt-d-k'
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return words[:limit].rstrip("-") or "figure"


def table_csv(headers: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    """A table as CSV text (RFC 4180 quoting, ``\\r\\n`` line ends): the header row, then
    one line per row; ``None`` becomes an empty cell."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["" if h is None else h for h in headers])
    for row in rows:
        writer.writerow(["" if cell is None else cell for cell in row])
    return out.getvalue()


def _figure_json(figure: go.Figure | str | dict) -> str:
    if isinstance(figure, go.Figure):
        return figure.to_json()
    if isinstance(figure, dict):
        return json.dumps(figure)
    json.loads(figure)  # a clear error here rather than a blank plot in the file
    return figure


def _inline(text: str) -> str:
    """Text that may sit inside a <script> element: no ``</script>`` can end it early."""
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE).replace("<!--", "<\\!--")


def standalone_html(
    title: str,
    parts: Sequence[tuple[str, Any]],
    plotly_js: str | None = None,
) -> str:
    """One HTML document with the view's figures and text, readable offline.

    ``parts`` are drawn in order: ``("html", fragment)`` (already-escaped HTML, e.g. a caption
    rendered from Markdown), ``("text", plain)`` (escaped here), ``("figure", fig)`` (a Figure,
    its JSON string or dict). ``plotly_js`` defaults to the plotly.js bundled with the plotly
    package; it is inlined once, before the figures.
    """
    if plotly_js is None:
        from plotly.offline import get_plotlyjs

        plotly_js = get_plotlyjs()
    body: list[str] = []
    n_figures = 0
    for kind, content in parts:
        if kind == "html":
            body.append(f'<div class="caption">{content}</div>')
        elif kind == "text":
            body.append(f'<p class="caption">{html.escape(str(content))}</p>')
        elif kind == "figure":
            n_figures += 1
            div = f"figure-{n_figures}"
            spec = _inline(_figure_json(content))
            body.append(
                f'<div class="figure" id="{div}"></div>\n<script>(function () {{\n'
                f"  var spec = {spec};\n"
                f"  Plotly.newPlot('{div}', spec.data || [], spec.layout || {{}},"
                " {responsive: true, displaylogo: false});\n})();</script>"
            )
        else:
            raise ValueError(f"part kind must be 'html', 'text' or 'figure', not {kind!r}")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n"
        "<style>body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;"
        "padding:0 1em;color:#1f2937}.figure{margin:1.5em 0}.caption{line-height:1.5}"
        "code{background:#f3f4f6;padding:0 .2em;border-radius:3px}"
        "table{border-collapse:collapse}td,th{border:1px solid #d1d5db;padding:2px 6px}</style>\n"
        f"<script>{_inline(plotly_js)}</script>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )
