"""Write a notebook from a plain Python script in jupytext's "percent" format, so notebooks are authored and
reviewed as code.

    python -m workbook.nbsrc notebooks/src/00_setup_and_hardware.py    # -> notebooks/00_setup_and_hardware.ipynb
    python -m workbook.report --inplace 00                             # then execute it, outputs saved

The script is split into cells at marker lines (https://jupytext.readthedocs.io, "The percent format"):

    # %% [markdown]
    # # A heading
    # Prose, each line behind "# ".
    # %%
    x = 1  # a code cell runs to the next marker
    # %% [markdown] jupyter={"source_hidden": true}
    # A cell folded away in JupyterLab (an exercise's solution, say): metadata after the marker is kept.

jupytext does the parsing. This module fixes what a committed notebook needs on top: no outputs (execute it
next), the same kernel for every notebook, no jupytext bookkeeping in the metadata, and cell ids that depend
only on the cell's position, so regenerating an unchanged script gives a byte-identical file.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat
from jupytext.cell_metadata import _JUPYTEXT_CELL_METADATA

from workbook import ROOT

FORMAT = "py:percent"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
# jupytext's own round-trip hints (blank lines, marker style): they describe the script, not the notebook
_BOOKKEEPING = set(_JUPYTEXT_CELL_METADATA)


def cells(text: str) -> list[nbformat.NotebookNode]:
    """The cells of a percent-format script, in order, ids by position; text before the first marker is a
    code cell."""
    nb = jupytext.reads(text, fmt=FORMAT)
    out = []
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:03d}"
        cell.metadata = {k: v for k, v in cell.metadata.items() if k not in _BOOKKEEPING}
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        out.append(cell)
    return out


def notebook(script: Path) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=cells(Path(script).read_text(encoding="utf-8")))
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nb


def target(script: Path) -> Path:
    """notebooks/src/NN_name.py -> notebooks/NN_name.ipynb."""
    script = Path(script)
    return script.resolve().parent.parent / f"{script.stem}.ipynb"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scripts", nargs="+", type=Path, help="notebooks/src/NN_name.py files")
    args = ap.parse_args(argv)
    for script in args.scripts:
        if not script.is_file():
            print(f"no such script: {script}", file=sys.stderr)
            return 2
        path = target(script)
        nb = notebook(script)
        nbformat.write(nb, path)
        try:
            shown = path.relative_to(ROOT)
        except ValueError:
            shown = path
        print(f"wrote {shown} ({len(nb.cells)} cells, no outputs yet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
