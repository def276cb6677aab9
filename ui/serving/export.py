"""Exports: every figure as PNG or SVG from its own toolbar, a whole view as one HTML file that
opens offline, every table as CSV.

Gradio's ``gr.Plot`` draws plotly figures with ``Plotly.react(div, data, layout, config)`` and a
config of its own (``responsive`` only), so the modebar keeps plotly's camera button ("Download
plot as a PNG") but its file is called ``newplot.png``. ``PLOT_TOOLBAR_JS`` (run once on page
load) wraps ``Plotly.react`` so that every plot's camera button saves a PNG named after the tab
and the figure's title, and adds a second button that saves the same plot as SVG; all of it is
plotly.js's own ``downloadImage``, already in the page, nothing fetched.

The view and table exports read the values the page holds (the figures as their plotly JSON,
the captions as Markdown, the tables) and build the files only when asked.
"""

from __future__ import annotations

import html
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gradio as gr
from markdown_it import MarkdownIt

from transformer.figures.export import slug, standalone_html, table_csv

PLOT_TOOLBAR_JS = """
(() => {
  // A title is plotly's text: its tags and entities (a piece's < > & escaped) are not words.
  const slug = (text) => (text || '').normalize('NFKD').replace(/<[^>]*>/g, ' ')
    .replace(/&(#?[a-z0-9]+);/gi, ' ').replace(/[^\\x00-\\x7f]/g, '').toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '').slice(0, 80).replace(/-+$/, '');
  const name = (gd) => {
    const panel = gd.closest('[id^="view-"]');
    const tab = panel ? panel.id.slice(5) : 'figure';
    const layout = gd.layout || {};
    const title = typeof layout.title === 'string' ? layout.title : (layout.title || {}).text;
    return [tab, slug(title) || 'figure'].join('-');
  };
  const patch = (Plotly) => {
    if (!Plotly || Plotly.__exportPatched || typeof Plotly.react !== 'function') return;
    const react = Plotly.react;
    Plotly.react = function (gd, data, layout, config) {
      const svg = {
        name: 'downloadSvg',
        title: 'Download plot as an SVG',
        icon: Plotly.Icons.disk,
        click: (g) => Plotly.downloadImage(g, {format: 'svg', filename: name(g)}),
      };
      const png = {format: 'png', scale: 2};
      Object.defineProperty(png, 'filename', {enumerable: true, get: () => name(gd)});
      config = Object.assign({}, config || {}, {
        displaylogo: false, toImageButtonOptions: png, modeBarButtonsToAdd: [svg],
      });
      // gr.Plot draws a changed figure twice: into the plot about to be replaced (which then
      // leaves the page), then into its replacement. Drawn a moment later, only plots still
      // on the page are drawn: half the work of every figure update.
      const drawn = Promise.resolve().then(
        () => (gd.isConnected ? react.call(this, gd, data, layout, config) : gd)
      );
      gd.__drawn = drawn;
      return drawn;
    };
    const resize = Plotly.Plots.resize;
    Plotly.Plots.resize = function (gd) {
      const div = typeof gd === 'string' ? document.getElementById(gd) : gd;
      // gr.Plot asks for a resize after every draw: plotly then waits 100 ms and lays the
      // figure out again even when its box kept its size (a fresh plot is drawn to its box).
      const same = () => {
        const full = div._fullLayout;
        const fixed = div.layout && div.layout.height;
        return Math.abs(div.clientWidth - full.width) < 1 &&
          (fixed || Math.abs(div.clientHeight - full.height) < 1);
      };
      const ready = () => (div && div.isConnected && div._fullLayout && !same()
        ? resize.call(this, gd) : Promise.resolve(gd));
      return div && div.__drawn ? div.__drawn.then(ready) : ready();
    };
    Plotly.__exportPatched = true;
  };
  if (window.Plotly) { patch(window.Plotly); return; }
  let held;
  Object.defineProperty(window, 'Plotly', {
    configurable: true,
    get: () => held,
    set: (value) => { held = value; try { patch(value); } catch (e) { console.warn(e); } },
  });
})();
"""

log = logging.getLogger("visualiser")

# The exports on disk are bounded (without a bound, every HTML export, ~4.6 MB, went to a new temporary
# folder that was never removed, and any client can ask for one through the queue). The newest
# EXPORT_MAX_FILES files are kept, at most EXPORT_MAX_BYTES together, none older than
# EXPORT_MAX_AGE_S; older ones are removed when the next export is written. Each file is written
# where gradio would copy it to serve it (its cache, in a folder named by the content's hash),
# so it is on disk once, not twice.
EXPORT_MAX_FILES = 40
EXPORT_MAX_BYTES = 200 * 1024 * 1024
EXPORT_MAX_AGE_S = 3600.0

_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")


def components_of(block: Any) -> list[gr.Component]:
    """Every component inside ``block`` (a tab, a row, ...), in the order they are laid out."""
    found: list[gr.Component] = []
    for child in getattr(block, "children", []):
        if isinstance(child, gr.Component):
            found.append(child)
        found.extend(components_of(child))
    return found


def _name(component: Any, fallback: str) -> str:
    return getattr(component, "label", None) or fallback


def _rows(value: Any) -> tuple[list, list[list]]:
    """(headers, rows) of a Dataframe's value (pandas, or gradio's dict)."""
    if value is None:
        return [], []
    if hasattr(value, "columns"):
        return [str(c) for c in value.columns], value.astype(object).values.tolist()
    if isinstance(value, dict):
        return list(value.get("headers") or []), list(value.get("data") or [])
    raise TypeError(f"not a table: {type(value).__name__}")


def _is_empty(headers: list, rows: list[list]) -> bool:
    return not rows or all(all(cell in (None, "") for cell in row) for row in rows)


def view_file_name(tab_slug: str, values: dict[str, Any], suffix: str) -> str:
    """``<tab>-<model>-<layer…>.<suffix>``: what the export shows, from the tab's controls."""
    words = [tab_slug]
    for key in ("model", "kind", "tokenizer", "layer", "head", "snapshot"):
        if values.get(key) not in (None, "", []):
            value = values[key]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            words.append(f"{key}{value}" if key in {"layer", "head", "snapshot"} else str(value))
    return slug("-".join(map(str, words)), limit=100) + suffix


def view_html(title: str, parts: Iterable[tuple[Any, Any]]) -> str:
    """The standalone HTML of a view from its components and their values in page order:
    Markdown becomes text, HTML stays HTML, plots figures, tables HTML tables, highlighted
    tokens a row of pieces; empty ones are left out."""
    out: list[tuple[str, Any]] = []
    for component, value in parts:
        if isinstance(component, gr.Markdown):
            if value and str(value).strip():
                out.append(("html", _markdown.render(str(value))))
        elif isinstance(component, gr.HTML):
            # The app's own HTML (Inside a layer's comparison), escaped where it was built.
            if isinstance(value, str) and value.strip():
                out.append(("html", value))
        elif isinstance(component, gr.Plot):
            kind, plot = _plot(value)
            if plot and kind == "plotly":
                out.append(("figure", plot))
        elif isinstance(component, gr.HighlightedText):
            pieces = _pieces(value)
            if pieces:
                label = html.escape(_name(component, "Tokens"))
                spans = "".join(
                    f'<code class="piece" title="{html.escape(str(kind or ""))}">'
                    f"{html.escape(text)}</code> "
                    for text, kind in pieces
                )
                out.append(("html", f"<p><strong>{label}</strong></p><p>{spans}</p>"))
        elif isinstance(component, gr.Dataframe):
            headers, rows = _rows(value)
            if not _is_empty(headers, rows):
                caption = f"**{_name(component, 'Table')}**\n\n"
                table = "| " + " | ".join(map(_cell, headers)) + " |\n"
                table += "|" + "---|" * len(headers) + "\n"
                table += "".join("| " + " | ".join(map(_cell, r)) + " |\n" for r in rows)
                out.append(("html", _markdown.render(caption + table)))
    return standalone_html(title, out)


def _pieces(value: Any) -> list[tuple[str, Any]]:
    """(text, category) pairs of a HighlightedText's value (pairs, or gradio's dicts)."""
    if not value:
        return []
    if isinstance(value, dict):
        value = value.get("data") or value.get("value") or []
    pairs = []
    for item in value:
        if isinstance(item, dict):
            pairs.append((str(item.get("token", "")), item.get("class_or_confidence")))
        else:
            pairs.append((str(item[0]), item[1] if len(item) > 1 else None))
    return pairs


def _plot(value: Any) -> tuple[str | None, str | None]:
    """(type, JSON) of a Plot's value as gradio hands it over (``PlotData`` or a dict)."""
    if value is None:
        return None, None
    if isinstance(value, dict):
        return value.get("type"), value.get("plot")
    return getattr(value, "type", None), getattr(value, "plot", None)


def _cell(value: Any) -> str:
    return str("" if value is None else value).replace("|", "\\|").replace("\n", " ")


class ViewExport:
    """A tab's export row: the whole view as HTML, and its tables as CSV (when it has any)."""

    def __init__(self, label: str, tab_slug: str, block: Any, controls: dict[str, Any]) -> None:
        self.label, self.slug = label, tab_slug
        self.controls = {
            k: c for k, c in controls.items() if isinstance(c, gr.components.FormComponent)
        }
        shown = (gr.Markdown, gr.HTML, gr.Plot, gr.Dataframe, gr.HighlightedText)
        content = [c for c in components_of(block) if isinstance(c, shown)]
        self.content = content
        self.tables = [c for c in content if isinstance(c, gr.Dataframe)]
        private: dict[str, Any] = {"api_visibility": "private"}
        with gr.Accordion("Export this view", open=False, elem_classes="export-row"):
            with gr.Row():
                html_button = gr.Button("Whole view as HTML (opens offline)", size="sm")
                csv_button = (
                    gr.Button(f"Tables as CSV ({len(self.tables)})", size="sm")
                    if self.tables
                    else None
                )
            gr.Markdown(
                "<small>Each plot's toolbar (top right, on hover) saves it as PNG (camera) or "
                "SVG (disk).</small>"
            )
            files = gr.File(label="Files", file_count="multiple", visible=False)
        keys = list(self.controls)
        html_button.click(
            self.html, [*self.controls.values(), *content], files, concurrency_limit=2, **private
        )
        self._keys = keys
        if csv_button is not None:
            csv_button.click(self.csv, [*self.controls.values(), *self.tables], files, **private)

    def _split(self, values: tuple) -> tuple[dict[str, Any], tuple]:
        n = len(self._keys)
        return dict(zip(self._keys, values[:n], strict=True)), values[n:]

    def html(self, *values: Any) -> Any:
        """Write the view's HTML file; returns the file output's update."""
        controls, rest = self._split(values)
        title = f"{self.label} — Transformer, step by step"
        text = view_html(title, zip(self.content, rest, strict=True))
        path = EXPORTS.write(view_file_name(self.slug, controls, ".html"), text)
        return gr.update(value=[str(path)], visible=True)

    def csv(self, *values: Any) -> Any:
        """Write one CSV file per table; returns the file output's update."""
        controls, rest = self._split(values)
        paths = []
        for component, value in zip(self.tables, rest, strict=True):
            headers, rows = _rows(value)
            stem = view_file_name(self.slug, controls, "")
            name = f"{stem}-{slug(_name(component, 'table'), 40)}.csv"
            paths.append(str(EXPORTS.write(name, table_csv(headers, rows))))
        return gr.update(value=paths, visible=True)


class ExportStore:
    """The export files on disk, oldest first, bounded by count, bytes and age."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: list[Path] = []

    @staticmethod
    def root() -> Path:
        """gradio's cache folder (where it copies a file it serves), or a folder of our own."""
        try:
            from gradio.utils import get_upload_folder

            return Path(get_upload_folder())
        except ImportError:  # pragma: no cover - gradio is a dependency
            return Path(tempfile.gettempdir()) / "visualiser-exports"

    def write(self, name: str, text: str) -> Path:
        """Write ``text`` as a file called ``name``, remove what is over the bounds, and
        return the file's path."""
        root = self.root()
        root.mkdir(parents=True, exist_ok=True)
        handle, staging = tempfile.mkstemp(dir=root, prefix=".export-")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        try:
            from gradio.processing_utils import hash_file

            folder = root / hash_file(staging)  # where gradio looks for this content
        except Exception:  # another gradio: a folder of its own (gradio then copies it)
            folder = Path(tempfile.mkdtemp(prefix="export-", dir=root))
        folder.mkdir(exist_ok=True)
        path = folder / name
        os.replace(staging, path)
        with self.lock:
            self.files = [f for f in self.files if f != path] + [path]
            self._prune()
        return path

    def _prune(self) -> None:
        """Remove the oldest files until the rest are within the bounds (lock held); the file
        just written (the last) always stays."""
        now = time.time()
        *older, newest = self.files
        kept: list[tuple[Path, int]] = []
        for path in older:
            try:
                stat = path.stat()
            except OSError:  # removed already (gradio's own cache expiry)
                continue
            if now - stat.st_mtime <= EXPORT_MAX_AGE_S:
                kept.append((path, stat.st_size))
            else:
                self._remove(path)
        total = sum(size for _, size in kept) + newest.stat().st_size
        while kept and (len(kept) + 1 > EXPORT_MAX_FILES or total > EXPORT_MAX_BYTES):
            path, size = kept.pop(0)
            total -= size
            self._remove(path)
        self.files = [path for path, _ in kept] + [newest]

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
            if path.parent != ExportStore.root() and not any(path.parent.iterdir()):
                shutil.rmtree(path.parent, ignore_errors=True)
        except OSError as error:
            log.warning("could not remove an old export: %s", type(error).__name__)


EXPORTS = ExportStore()
