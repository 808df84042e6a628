"""Execute every notebook headless and write the HTML report.

    python -m workbook.report             # executed copies + figures under build/report/
    python -m workbook.report --inplace   # also write the outputs back into notebooks/ (to commit)
    python -m workbook.report 03          # only notebooks whose name contains "03"

Without a GPU the notebooks run on the CPU with recorded data; they say so themselves.
"""
from __future__ import annotations

import argparse
import base64
import html
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from workbook import ROOT

NOTEBOOKS = ROOT / "notebooks"
REPORT = ROOT / "build" / "report"


def notebooks(pattern: str = "") -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if pattern in p.name)


def execute(path: Path, timeout: int = 1800) -> nbformat.NotebookNode:
    """Run one notebook top to bottom in its own folder; raise on the first failing cell."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def figures(nb: nbformat.NotebookNode) -> list[bytes]:
    """Every PNG the notebook displayed, in order."""
    return [base64.b64decode(out["data"]["image/png"])
            for cell in nb.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]


def _html(nb: nbformat.NotebookNode) -> str:
    from nbconvert import HTMLExporter
    body, _ = HTMLExporter().from_notebook_node(nb)
    return body


def _index(entries: list[tuple[str, str, list[str], float]]) -> str:
    rows = []
    for name, title, pngs, seconds in entries:
        thumbs = "".join(f'<a href="{p}"><img src="{p}" alt="{html.escape(p)}" height="120"></a>' for p in pngs)
        rows.append(f'<tr><td><a href="{name}.html">{html.escape(name)}</a></td><td>{html.escape(title)}</td>'
                    f'<td>{seconds:.0f} s</td><td class="figs">{thumbs}</td></tr>')
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Kernel workbook report</title>"
            "<style>body{font-family:sans-serif;margin:2em}td{padding:.4em;vertical-align:top}"
            "img{margin:2px;border:1px solid #ccc}</style></head><body>"
            "<h1>Kernel workbook: executed notebooks</h1>"
            f"<p>Built {time.strftime('%Y-%m-%d %H:%M:%S')} by <code>make run</code>.</p>"
            "<table><tr><th>notebook</th><th>title</th><th>ran</th><th>figures</th></tr>"
            + "".join(rows) + "</table></body></html>")


def _title(nb: nbformat.NotebookNode, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("# ").strip()
    return fallback


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pattern", nargs="?", default="")
    ap.add_argument("--inplace", action="store_true", help="write outputs back into notebooks/")
    ap.add_argument("--out", type=Path, default=REPORT)
    args = ap.parse_args(argv)
    from tqdm import tqdm

    paths = notebooks(args.pattern)
    if not paths:
        print(f"no notebooks match {args.pattern!r} in {NOTEBOOKS}", file=sys.stderr)
        return 2
    (args.out / "figures").mkdir(parents=True, exist_ok=True)
    entries = []
    bar = tqdm(paths, unit="notebook", file=sys.stdout)
    for path in bar:
        bar.set_description(path.stem)
        t0 = time.time()
        nb = execute(path)
        if args.inplace:
            nbformat.write(nb, path)
        pngs = []
        for i, png in enumerate(figures(nb)):
            rel = f"figures/{path.stem}_{i:02d}.png"
            (args.out / rel).write_bytes(png)
            pngs.append(rel)
        (args.out / f"{path.stem}.html").write_text(_html(nb), encoding="utf-8")
        entries.append((path.stem, _title(nb, path.stem), pngs, time.time() - t0))
    (args.out / "index.html").write_text(_index(entries), encoding="utf-8")
    print(f"report: {args.out / 'index.html'} ({len(entries)} notebooks, "
          f"{sum(len(e[2]) for e in entries)} figures)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
