"""Execute every notebook headless and write the HTML report.

    python -m workbook.report             # executed copies + figures under build/report/
    python -m workbook.report --inplace   # also write the outputs back into notebooks/ (to commit)
    python -m workbook.report 03          # execute only notebooks whose name contains "03" (the others
                                          # appear in the report with their committed outputs)
    python -m workbook.report --out DIR   # write the report somewhere else
    python -m workbook.report --no-execute   # render the committed outputs as they are (seconds, no kernel)

The report is plain static files: `index.html` (one row per notebook: its title, whether it ran, how long
it took, a thumbnail of every figure), `NN_name.html` (the executed notebook), `figures/NN_name_MM.png`
(every figure the notebook displayed, in order). Open `index.html` in a browser, or serve the folder.

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
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from workbook import ROOT

NOTEBOOKS = ROOT / "notebooks"
REPORT = ROOT / "build" / "report"


def notebooks(pattern: str = "") -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if pattern in p.name)


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
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_executed=(lambda **_: on_cell_done()) if on_cell_done else None)
    try:
        client.execute(env=_kernel_env())
    except CellExecutionError as err:
        err.notebook = nb
        raise
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


def notebook_html(nb: nbformat.NotebookNode, page_title: str) -> str:
    from nbconvert import HTMLExporter
    body, _ = HTMLExporter().from_notebook_node(nb, resources={"metadata": {"name": page_title}})
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
        (out / f"{path.stem}.html").write_text(notebook_html(nb, entry.title), encoding="utf-8")
        entries.append(entry)
    bar.close()
    provenance = (f"Executed on: {_machine()}" if to_run else
                  "Nothing was executed: these are the committed outputs of notebooks/.")
    (out / "index.html").write_text(index_html(entries, provenance), encoding="utf-8")
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pattern", nargs="?", default="", help="execute only notebooks whose file name contains this")
    ap.add_argument("--inplace", action="store_true", help="write outputs back into notebooks/ (to commit)")
    ap.add_argument("--out", type=Path, default=REPORT, help=f"report folder (default {REPORT})")
    ap.add_argument("--no-execute", dest="run", action="store_false",
                    help="render the committed outputs without running anything")
    args = ap.parse_args(argv)
    if args.inplace and not args.run:
        ap.error("--inplace writes fresh outputs; it cannot be combined with --no-execute")

    selected = notebooks(args.pattern)
    if not selected:
        print(f"no notebooks match {args.pattern!r} in {NOTEBOOKS}", file=sys.stderr)
        return 2
    entries = build(notebooks(), args.out, run=selected if args.run else False, inplace=args.inplace)
    # a failure of what ran now fails the command; a committed error of one not re-run shows in the index
    failed = [e.stem for e in entries if e.error and (e.seconds is not None or not args.run)]
    print(f"report: {args.out / 'index.html'} ({len(entries)} notebooks, "
          f"{sum(len(e.figures) for e in entries)} figures" + (f"; FAILED: {', '.join(failed)})" if failed else ")"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
