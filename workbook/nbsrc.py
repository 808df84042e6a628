"""Write a notebook from a plain Python script in the "percent" format, so notebooks are authored and
reviewed as code.

    python -m workbook.nbsrc notebooks/src/00_setup_and_hardware.py    # -> notebooks/00_setup_and_hardware.ipynb
    python -m workbook.report --inplace 00                             # then execute it, outputs saved

The script is split into cells at marker lines:

    # %% [markdown]
    # # A heading
    # Prose, each line behind "# ".
    # %%
    x = 1  # a code cell runs to the next marker

The notebook is written without outputs (execute it next) and with cell ids that depend only on the cell's
position, so regenerating an unchanged script gives an unchanged file.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from workbook import ROOT

_MARKER = re.compile(r"^# %%(?P<markdown>\s*\[markdown\])?(?P<rest>.*)$")


def _trim(lines: list[str]) -> str:
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def _uncomment(line: str, where: str) -> str:
    if line == "#" or not line.strip():
        return ""
    if not line.startswith("# "):
        raise ValueError(f"{where}: a markdown cell's lines must start with '# ' (got {line!r})")
    return line[2:]


def cells(text: str, name: str = "<script>") -> list[nbformat.NotebookNode]:
    """The cells of a percent-format script, in order; text before the first marker is a code cell."""
    out: list[nbformat.NotebookNode] = []
    kind, body = "code", []

    def flush():
        source = _trim(body)
        if source:
            new = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
            out.append(new(source, id=f"cell-{len(out):03d}"))

    for number, line in enumerate(text.splitlines(), start=1):
        m = _MARKER.match(line)
        if m:
            flush()
            kind, body = ("markdown" if m.group("markdown") else "code"), []
        elif kind == "markdown":
            body.append(_uncomment(line, f"{name}:{number}"))
        else:
            body.append(line)
    flush()
    return out


def notebook(script: Path) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=cells(script.read_text(encoding="utf-8"), script.name))
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nb


def target(script: Path) -> Path:
    """notebooks/src/NN_name.py -> notebooks/NN_name.ipynb."""
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
        nbformat.write(notebook(script), path)
        try:
            shown = path.relative_to(ROOT)
        except ValueError:
            shown = path
        print(f"wrote {shown} ({len(nbformat.read(path, as_version=4).cells)} cells, no outputs yet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
