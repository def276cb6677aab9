"""Exports: a view as one HTML file that needs no network, tables as CSV that read back to the
same values, file names that say what they hold."""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from transformer.figures.export import slug, standalone_html, table_csv
from ui.serving.export import ViewExport, components_of, view_file_name, view_html


class Scripts(HTMLParser):
    """Every <script>: its attributes and text; and every element with a src or href."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[dict, str]] = []
        self.links: list[str] = []
        self._open: dict | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        self.links += [v for k, v in attributes.items() if k in {"src", "href"} and v]
        if tag == "script":
            self._open = attributes
            self.scripts.append((attributes, ""))

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            attributes, text = self.scripts[-1]
            self.scripts[-1] = (attributes, text + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._open = None


def _heatmap(title: str) -> go.Figure:
    z = np.arange(12, dtype=np.float32).reshape(3, 4) / 11
    return go.Figure(go.Heatmap(z=z, x=list("abcd"), y=list("xyz")), layout={"title": title})


@pytest.fixture(scope="module")
def page() -> str:
    figures = [_heatmap("Layer 1 · head 2"), _heatmap("</script><b>tricky</b> title")]
    parts = [
        ("html", "<p>Rows are <strong>queries</strong>.</p>"),
        ("figure", figures[0]),
        ("text", "a < b & c"),
        ("figure", figures[1].to_json()),
    ]
    return standalone_html("Attention — a view", parts)


def test_the_html_file_loads_nothing_from_the_network(page: str) -> None:
    parser = Scripts()
    parser.feed(page)
    assert parser.links == []  # no script src, stylesheet or image from anywhere
    assert not re.search(
        r"https?://[^\"'\s]*\.js", "".join(a.get("src", "") for a, _ in parser.scripts)
    )
    library = parser.scripts[0][1]
    assert len(library) > 1_000_000 and "plotly.js" in library[:500].lower()


def test_the_html_file_holds_every_figure_as_drawn(page: str) -> None:
    parser = Scripts()
    parser.feed(page)
    specs = [
        json.loads(match.group(1).replace("<\\/", "</"))
        for _, text in parser.scripts[1:]
        if (match := re.search(r"var spec = (.*);\n", text))
    ]
    assert len(specs) == 2 and page.count("Plotly.newPlot(") == 2
    for spec, title in zip(
        specs, ["Layer 1 · head 2", "</script><b>tricky</b> title"], strict=True
    ):
        expected = json.loads(_heatmap(title).to_json())
        assert spec == expected  # the data (base64 float32) and layout, unchanged
    assert "<strong>queries</strong>" in page
    assert "a &lt; b &amp; c" in page
    assert page.lower().count("</script>") == len(parser.scripts)  # nothing closed early


def test_a_table_is_csv_that_reads_back_to_its_values() -> None:
    headers = ["#", "piece", "p(reference)", "note"]
    rows = [[1, "Ġthe", 0.25, 'say "hi", then\nleave'], [2, "", None, "a,b"]]
    text = table_csv(headers, rows)
    read = list(csv.reader(io.StringIO(text)))
    assert read[0] == headers
    assert read[1:] == [["1", "Ġthe", "0.25", 'say "hi", then\nleave'], ["2", "", "", "a,b"]]


def test_a_tabs_tables_and_view_export_to_files(tmp_path: Path) -> None:
    with gr.Blocks():
        with gr.Tab("Generate") as tab:
            model = gr.Dropdown(["translate"], value="translate", label="Model")
            caption = gr.Markdown()
            plot = gr.Plot()
            table = gr.Dataframe(headers=["position", "reference", "p"], label="Teacher forcing")
        export = ViewExport("Generate", "generate", tab, {"model": model})
    assert export.content == [caption, plot, table]
    frame = pd.DataFrame({"position": [1, 2], "reference": ["der", "Hund"], "p": [0.5, 0.125]})
    update = export.csv("translate", frame)
    (path,) = update["value"]
    assert Path(path).name == "generate-translate-teacher-forcing.csv"
    read = list(csv.reader(io.StringIO(Path(path).read_text(encoding="utf-8"))))
    assert read == [["position", "reference", "p"], ["1", "der", "0.5"], ["2", "Hund", "0.125"]]

    figure = _heatmap("Cross-attention · head 1")
    plot_value = {"type": "plotly", "plot": figure.to_json()}
    update = export.html("translate", "**Output so far**: der", plot_value, frame)
    (path,) = update["value"]
    assert Path(path).name == "generate-translate.html"
    text = Path(path).read_text(encoding="utf-8")
    assert "<strong>Output so far</strong>" in text and "Hund" in text
    assert text.count("Plotly.newPlot(") == 1


def test_token_pieces_are_written_as_pieces() -> None:
    with gr.Blocks(), gr.Row():
        tokens = gr.HighlightedText(label="Tokens")
    page = view_html("t", [(tokens, [("▁The", "A"), ("<b>", "special")])])
    assert '<code class="piece" title="A">▁The</code>' in page
    assert '<code class="piece" title="special">&lt;b&gt;</code>' in page


def test_empty_parts_are_left_out_of_a_view() -> None:
    with gr.Blocks(), gr.Row() as row:
        md, plot, table = gr.Markdown(), gr.Plot(), gr.Dataframe()
    assert components_of(row) == [md, plot, table]
    page = view_html("t", [(md, ""), (plot, None), (table, pd.DataFrame())])
    assert "Plotly.newPlot(" not in page and "<table" not in page


def test_file_names_say_what_they_show() -> None:
    assert slug("Layer 2 · head 1: weights (QKᵀ/√d_k)") == "layer-2-head-1-weights-qkt-d-k"
    assert slug("√") == "figure"
    values = {"model": "reverse", "kind": "encoder self-attention", "layer": 2.0, "head": 1}
    assert (
        view_file_name("attention", values, ".html")
        == "attention-reverse-encoder-self-attention-layer2-head1.html"
    )
    with pytest.raises(ValueError, match="part kind"):
        standalone_html("x", [("video", "")], plotly_js="")


def test_exports_on_disk_are_bounded_in_count_bytes_and_age(monkeypatch) -> None:
    """Every export used to go to a new temporary folder that was never removed (~4.6 MB an
    HTML view, for any client through the queue): the newest are kept, the rest removed."""
    from ui.serving import export as export_module

    monkeypatch.setattr(export_module, "EXPORTS", export_module.ExportStore())
    monkeypatch.setattr(export_module, "EXPORT_MAX_FILES", 3)
    with gr.Blocks():
        with gr.Tab("Attention") as tab:
            model = gr.Dropdown(["translate"], value="translate", label="Model")
            gr.Markdown()
        export = ViewExport("Attention", "attention", tab, {"model": model})
    paths = [Path(export.html("translate", f"view {i}")["value"][0]) for i in range(8)]
    assert len(set(paths)) == 8  # different content, different files
    assert [p.exists() for p in paths] == [False] * 5 + [True] * 3
    assert "view 7" in paths[-1].read_text(encoding="utf-8")
    assert not any(p.parent.exists() for p in paths[:5])  # their folders are gone too
    # gradio serves the file where it lies: no second copy in its cache.
    assert gr.File().move_resource_to_block_cache(str(paths[-1])) == str(paths[-1])

    monkeypatch.setattr(export_module, "EXPORT_MAX_BYTES", paths[-1].stat().st_size * 2 + 1)
    newest = Path(export.html("translate", "view 8")["value"][0])
    assert newest.exists() and sum(p.exists() for p in paths) == 1  # bytes: one older kept

    monkeypatch.setattr(export_module, "EXPORT_MAX_AGE_S", -1.0)  # every older one has expired
    last = Path(export.html("translate", "view 9")["value"][0])
    assert last.exists() and not newest.exists() and not any(p.exists() for p in paths)
