"""Execute every notebook headless and write the HTML report.

    python -m workbook.report             # executed copies + figures under build/report/
    python -m workbook.report --inplace   # also write the outputs back into notebooks/ (to commit)
    python -m workbook.report 03          # execute only notebooks whose name contains "03" (the others
                                          # appear in the report with their committed outputs)
    python -m workbook.report --out DIR   # write the report somewhere else
    python -m workbook.report --no-execute   # render the committed outputs as they are (seconds, no kernel)

The report is plain static files: `index.html` (one row per notebook: its title, whether it ran, how long
it took, a thumbnail of every figure), `NN_name.html` (the executed notebook), `figures/NN_name_MM.png`
(every figure the notebook displayed, in order), `mathjax/` (MathJax, from the `jupyter-server-mathjax`
package). Open `index.html` in a browser, or serve the folder: nothing is fetched from elsewhere.

Pages are rendered the way JupyterLab shows an untrusted notebook: HTML in markdown cells and in outputs is
sanitized (`clean_html`: no scripts, event handlers, frames or `javascript:` links; tables, images, details,
styles kept), JavaScript outputs are not emitted, and widget views (which need a kernel) fall back to their
text. Our own figures (PNG) and tables show as they do in JupyterLab.

A notebook that fails still gets its page (showing the traceback where it stopped) and a red row in the
index; the command then exits with status 1. Without a GPU the notebooks run on the CPU with recorded
data; they say so themselves.
"""
from __future__ import annotations

import argparse
import base64
import html
import os
import re
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from workbook import ROOT

NOTEBOOKS = ROOT / "notebooks"
REPORT = ROOT / "build" / "report"
MATHJAX_DIR = "mathjax"          # under the report folder
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"   # "Safe": math cannot carry links or styles either
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# What survives in the HTML of markdown cells and outputs (JupyterLab's sanitizer keeps about as much).
SAFE_TAGS = frozenset("""a abbr b blockquote br caption code col colgroup dd del details div dl dt em figcaption
    figure h1 h2 h3 h4 h5 h6 hr i img ins kbd li mark ol p pre s samp small span strong style sub summary sup
    table tbody td tfoot th thead tr u ul""".split())
_ANY_TAG_ATTRIBUTES = frozenset({"class", "id", "title", "style", "align"})
_TAG_ATTRIBUTES = {"a": {"href"}, "img": {"src", "alt", "width", "height"}, "td": {"colspan", "rowspan"},
                   "th": {"colspan", "rowspan"}, "details": {"open"}, "table": {"border"}, "ol": {"start"}}
_DROPPED_WITH_CONTENT = ("script", "iframe", "frame", "frameset", "object", "embed", "applet", "base", "link",
                         "meta", "noscript", "template")
# CSS properties kept in style attributes: bleach's list and the box and background shorthands our own outputs
# use (a coloured diff, a framed block); whatever would fetch something is removed from every style first
_SIDES = ("", "-top", "-bottom", "-left", "-right")
STYLE_PROPERTIES = frozenset({"background", "border-radius", "border-style", "border-width", "max-width",
                              "min-width", "opacity", "overflow-x", "overflow-y", "word-break",
                              *(f"{box}{side}" for box in ("border", "padding", "margin") for side in _SIDES)})
_CSS_FETCH = re.compile(r"@import[^;]*;?|url\s*\([^)]*\)|expression\s*\(", re.IGNORECASE)
_SCHEME = re.compile(r"^\s*([a-zA-Z][a-zA-Z0-9+.-]*):")

# nbconvert's lab page without the scripts it would fetch from a CDN (require.js, mermaid, the widget
# manager); MathJax comes from the report folder, or not at all, with the one web font its package ships.
_PAGE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- if resources.mathjax_url -%}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({"HTML-CSS": {availableFonts: ["STIX-Web"], preferredFont: "STIX-Web", webFont: "STIX-Web",
                                 imageFont: null}});
</script>
{{ super() }}
{%- endif -%}{%- endblock -%}
"""


def notebooks(*patterns: str) -> list[Path]:
    """The notebooks whose file name contains any of `patterns` (all of them with none), in order."""
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")
                  if not patterns or any(pattern in p.name for pattern in patterns))


def _kernel_env() -> dict[str, str]:
    """The kernel imports the packages of *this* checkout, whatever is (or is not) pip-installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def code_cells(nb: nbformat.NotebookNode) -> int:
    return sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())


def execute(path: Path, timeout: int = 1800, on_cell_done=None) -> nbformat.NotebookNode:
    """Run one notebook top to bottom in its own folder; raise on the first failing cell.

    `on_cell_done()` is called after each code cell (the report's progress bar). On failure the raised
    `CellExecutionError` carries the partly executed notebook as `.notebook`, so its page can still be written.
    """
    import uuid

    from jupyter_client.manager import KernelManager
    from jupyter_core.paths import jupyter_runtime_dir
    nb = nbformat.read(path, as_version=4)
    # IPC sockets, not TCP on localhost: nothing else on the machine can listen in (and the kernel does not
    # warn about it at every start). An absolute socket path: the kernel runs in the notebook's folder.
    runtime = Path(jupyter_runtime_dir())
    runtime.mkdir(parents=True, exist_ok=True)
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(runtime / f"report-{uuid.uuid4().hex[:12]}"))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", km=km,
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_executed=(lambda **_: on_cell_done()) if on_cell_done else None)
    try:
        client.execute(env=_kernel_env())
    except CellExecutionError as err:
        err.notebook = nb
        raise
    finally:
        for socket in runtime.glob(f"{Path(km.ip).name}-*"):   # the kernel's sockets, one file per channel
            socket.unlink(missing_ok=True)
    return nb


def figures(nb: nbformat.NotebookNode) -> list[bytes]:
    """Every PNG the notebook displayed, in order."""
    return [base64.b64decode(out["data"]["image/png"])
            for cell in nb.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]


def title(nb: nbformat.NotebookNode, fallback: str) -> str:
    """The notebook's first markdown heading, as text (its emphasis and code marks dropped)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return re.sub(r"[*`]", "", line.lstrip("# ")).strip()
    return fallback


def _attribute_ok(tag: str, name: str, value: str) -> bool:
    if name not in _ANY_TAG_ATTRIBUTES and name not in _TAG_ATTRIBUTES.get(tag, ()):
        return False
    if name in ("href", "src"):
        scheme = _SCHEME.match(value)
        if scheme is None:                       # a relative link: this report's own pages and figures
            return True
        if tag == "img":                         # images embedded in the page, nothing fetched from elsewhere
            return value.lstrip().lower().startswith("data:image/")
        return scheme.group(1).lower() in ("http", "https", "mailto")
    return True


def clean_html(fragment) -> str:
    """The HTML of a markdown cell or an output, as JupyterLab shows it for an untrusted notebook: scripts,
    frames and embedded objects dropped with their content, event handlers and `javascript:` links dropped,
    CSS that would fetch something (`@import`, `url()`) removed; tables, images, details and styles kept."""
    import bleach
    from bleach.css_sanitizer import ALLOWED_CSS_PROPERTIES, CSSSanitizer
    from bs4 import BeautifulSoup
    text = fragment.decode() if isinstance(fragment, bytes) else str(fragment)
    soup = BeautifulSoup(text, "html.parser")
    for element in soup.find_all(_DROPPED_WITH_CONTENT):
        element.decompose()
    for style in soup.find_all("style"):
        style.string = _CSS_FETCH.sub("", style.get_text())
    for element in soup.find_all(style=True):
        element["style"] = _CSS_FETCH.sub("", element["style"])
    return bleach.clean(str(soup), tags=SAFE_TAGS, attributes=_attribute_ok, strip=True, strip_comments=True,
                        protocols={"http", "https", "mailto", "data"},
                        css_sanitizer=CSSSanitizer(allowed_css_properties=ALLOWED_CSS_PROPERTIES | STYLE_PROPERTIES))


def _without_widget_views(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy whose widget views fall back to their text: a static page has no kernel to drive them."""
    nb = nbformat.from_dict(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            out.get("data", {}).pop(WIDGET_VIEW, None)
    return nb


def mathjax_source() -> Path | None:
    """The MathJax 2 tree shipped by the `jupyter-server-mathjax` package, or None without it."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        return None
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    return static if (static / "MathJax.js").exists() else None


def install_mathjax(out: Path) -> str:
    """Copy MathJax into the report folder (once); the page-relative URL that loads it, "" without it."""
    source = mathjax_source()
    if source is None:
        warnings.warn("jupyter-server-mathjax is not installed (pip install -e '.[dev]'): the report shows math "
                      "as TeX source", RuntimeWarning, stacklevel=2)
        return ""
    target = out / MATHJAX_DIR
    if not (target / "MathJax.js").exists():
        shutil.copytree(source, target, dirs_exist_ok=True)
    return f"{MATHJAX_DIR}/MathJax.js?config={MATHJAX_CONFIG}"


def notebook_html(nb: nbformat.NotebookNode, page_title: str, mathjax_url: str = "") -> str:
    """One notebook's page: sanitized as an untrusted notebook (`clean_html`), nothing loaded from a CDN."""
    from nbconvert import HTMLExporter
    exporter = HTMLExporter(template_name="lab", raw_template=_PAGE_TEMPLATE, sanitize_html=True,
                            mathjax_url=mathjax_url)
    exporter.register_filter("clean_html", clean_html)
    body, _ = exporter.from_notebook_node(_without_widget_views(nb), resources={"metadata": {"name": page_title}})
    return body


@dataclass
class Entry:
    """One notebook's row in the index."""
    stem: str
    title: str
    seconds: float | None                              # None: committed outputs, not run now
    figures: list[str] = field(default_factory=list)   # paths relative to the report folder
    error: str | None = None                           # the failing cell's error name and message


def _machine() -> str:
    try:
        from workbook import gpus
        return gpus.describe()
    except Exception as err:  # noqa: BLE001  (the index is still useful without the machine line)
        return f"(machine description unavailable: {type(err).__name__})"


def index_html(entries: list[Entry], provenance: str) -> str:
    """The report's front page; `provenance` says what produced the outputs."""
    rows = []
    for e in entries:
        thumbs = "".join(f'<a href="{p}"><img src="{p}" alt="{html.escape(e.stem)} figure {i + 1}" '
                         f'height="120"></a>' for i, p in enumerate(e.figures))
        ran = "committed outputs" if e.seconds is None else f"{e.seconds:.0f} s"
        status = ('<td class="ok">ok</td>' if e.error is None else
                  f'<td class="fail" title="{html.escape(e.error)}">failed</td>')
        rows.append(f'<tr><td class="nb"><a href="{e.stem}.html">{html.escape(e.title)}</a><br>'
                    f'<code>{html.escape(e.stem)}.ipynb</code></td>{status}<td>{ran}</td>'
                    f'<td class="figs">{thumbs}</td></tr>')
    n_fig = sum(len(e.figures) for e in entries)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Kernel workbook report</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:80em}td,th{padding:.4em;vertical-align:top;"
            "text-align:left}td.nb{width:18em}td.nb code{font-size:80%;color:#555}img{margin:2px;border:1px solid #ccc}.ok{color:#1a7f37}.fail{color:#cf222e;"
            "font-weight:bold}</style></head><body>"
            "<h1>Kernel workbook: executed notebooks</h1>"
            f"<p>{len(entries)} notebooks, {n_fig} figures. Built {time.strftime('%Y-%m-%d %H:%M:%S')} "
            f"by <code>python -m workbook.report</code>. {html.escape(provenance)}</p>"
            "<table><tr><th>notebook</th><th>status</th><th>ran</th><th>figures</th></tr>"
            + "".join(rows) + "</table></body></html>")


def first_error(nb: nbformat.NotebookNode) -> str | None:
    """The first error output of a notebook as 'Name: message', or None."""
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error":
                return f"{out.get('ename')}: {out.get('evalue')}"
    return None


def build(paths: list[Path], out: Path, *, run=True, inplace: bool = False, progress: bool = True) -> list[Entry]:
    """Write the report of `paths` into `out`, executing those in `run` (True: all, False: none, or a collection
    of paths) and taking the committed outputs of the others; returns one Entry per notebook, in order."""
    from tqdm import tqdm

    to_run = set(paths) if run is True else set(run or ())
    (out / "figures").mkdir(parents=True, exist_ok=True)
    mathjax_url = install_mathjax(out)
    for stale in [*(out / "figures").glob("[0-9][0-9]_*.png"), *out.glob("[0-9][0-9]_*.html")]:
        stale.unlink()    # the report is rebuilt whole: nothing of a renamed or removed notebook survives
    loaded = [(p, nbformat.read(p, as_version=4)) for p in paths]
    bar = tqdm(total=sum(code_cells(nb) for p, nb in loaded if p in to_run), unit="cell", file=sys.stdout,
               disable=not (progress and to_run),
               bar_format="{desc:<34} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} cells [{elapsed}<{remaining}]")
    entries = []
    for path, committed in loaded:
        bar.set_description(path.stem[:34])
        t0, nb, error = time.time(), committed, first_error(committed)
        ran = path in to_run
        if ran:
            try:
                nb, error = execute(path, on_cell_done=lambda: bar.update(1)), None
            except CellExecutionError as err:
                nb, error = err.notebook, f"{err.ename}: {err.evalue}"
                bar.write(f"FAILED {path.name}: {error}")
        if inplace and ran and error is None:
            nbformat.write(nb, path)
        entry = Entry(path.stem, title(nb, path.stem), time.time() - t0 if ran else None, error=error)
        for i, png in enumerate(figures(nb)):
            rel = f"figures/{path.stem}_{i:02d}.png"
            (out / rel).write_bytes(png)
            entry.figures.append(rel)
        (out / f"{path.stem}.html").write_text(notebook_html(nb, entry.title, mathjax_url), encoding="utf-8")
        entries.append(entry)
    bar.close()
    provenance = (f"Executed on: {_machine()}" if to_run else
                  "Nothing was executed: these are the committed outputs of notebooks/.")
    (out / "index.html").write_text(index_html(entries, provenance), encoding="utf-8")
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("patterns", nargs="*", metavar="pattern",
                    help="execute only notebooks whose file name contains one of these (e.g. 01 02 _step)")
    ap.add_argument("--inplace", action="store_true", help="write outputs back into notebooks/ (to commit)")
    ap.add_argument("--out", type=Path, default=REPORT, help=f"report folder (default {REPORT})")
    ap.add_argument("--no-execute", dest="run", action="store_false",
                    help="render the committed outputs without running anything")
    args = ap.parse_args(argv)
    if args.inplace and not args.run:
        ap.error("--inplace writes fresh outputs; it cannot be combined with --no-execute")

    selected = notebooks(*args.patterns)
    if not selected:
        print(f"no notebooks match {' '.join(args.patterns)!r} in {NOTEBOOKS}", file=sys.stderr)
        return 2
    entries = build(notebooks(), args.out, run=selected if args.run else False, inplace=args.inplace)
    # a failure of what ran now fails the command; a committed error of one not re-run shows in the index
    failed = [e.stem for e in entries if e.error and (e.seconds is not None or not args.run)]
    print(f"report: {args.out / 'index.html'} ({len(entries)} notebooks, "
          f"{sum(len(e.figures) for e in entries)} figures" + (f"; FAILED: {', '.join(failed)})" if failed else ")"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
