"""Write a notebook from a plain Python script in jupytext's "percent" format, so notebooks are authored and
reviewed as code.

    python -m workbook.nbsrc notebooks/src/00_setup_and_hardware.py    # -> notebooks/00_setup_and_hardware.ipynb
    python -m workbook.report --inplace 00                             # then execute it, outputs saved
    python -m workbook.nbsrc --keep-outputs notebooks/src/09_*.py      # prose edits: the executed outputs stay

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


def keep_outputs(new: nbformat.NotebookNode, old: nbformat.NotebookNode) -> tuple[int, int]:
    """Give `new`'s code cells the outputs, execution counts and timings of `old`'s, position by position among
    the code cells, up to the first code cell whose source differs: a later cell ran after different code, so
    its outputs are not its own. Markdown may differ anywhere. -> (code cells that kept outputs, code cells)."""
    new_code = [c for c in new.cells if c.cell_type == "code"]
    old_code = [c for c in old.cells if c.cell_type == "code"]
    kept = 0
    for fresh, done in zip(new_code, old_code):
        if fresh.source != done.source:
            break
        fresh.outputs, fresh.execution_count = done.outputs, done.execution_count
        if "execution" in done.metadata:
            fresh.metadata["execution"] = done.metadata["execution"]
        kept += 1
    if kept and "language_info" in old.metadata:   # what the executing kernel reported
        new.metadata["language_info"] = old.metadata["language_info"]
    return kept, len(new_code)


def target(script: Path) -> Path:
    """notebooks/src/NN_name.py -> notebooks/NN_name.ipynb."""
    script = Path(script)
    return script.resolve().parent.parent / f"{script.stem}.ipynb"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scripts", nargs="+", type=Path, help="notebooks/src/NN_name.py files")
    ap.add_argument("--keep-outputs", action="store_true",
                    help="keep the committed outputs of the code cells before the first one whose code changed")
    args = ap.parse_args(argv)
    for script in args.scripts:
        if not script.is_file():
            print(f"no such script: {script}", file=sys.stderr)
            return 2
        path = target(script)
        nb = notebook(script)
        kept, code = (keep_outputs(nb, nbformat.read(path, as_version=4)) if args.keep_outputs and path.exists()
                      else (0, 0))
        nbformat.write(nb, path)
        try:
            shown = path.relative_to(ROOT)
        except ValueError:
            shown = path
        if not kept:
            state = "no outputs yet"
        elif kept == code:
            state = "every code cell's outputs kept"
        else:
            state = f"the outputs of the first {kept} of {code} code cells kept; execute it for the rest"
        print(f"wrote {shown} ({len(nb.cells)} cells, {state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
