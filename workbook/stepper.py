"""Step files a learner reads, copies, edits and re-runs: load them, show what changed, compare the SASS.

    step = stepper.load("my_steps/step2_ilp2.py")        # a learner's edited copy, imported by path
    path = stepper.copy_for_editing(step2, "my_steps")    # an editable copy of a step module
    stepper.diff(step1, step2)                            # renders as a coloured unified diff (HTML or text)
    stepper.excerpt(step1, "def argmin")                  # one function of a step file, with line numbers
    stepper.sass_delta(old_art.sass, new_art.sass)        # opcode counts: old, new, change

Generic: this module knows no kernel. A "step" is any Python module with a source file.

Why a fresh module name per load: CuTe DSL reads a kernel's source from its file (it compiles only functions
whose source it can find), and a module imported twice under one name would be the cached first copy. Each
`load` of a path imports the file as it is now, under a name of its own, so an edited copy is compiled anew.
"""
from __future__ import annotations

import difflib
import html
import importlib
import importlib.util
import itertools
import re
import shutil
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Union

import pandas as pd

from workbook import sass

Source = Union[types.ModuleType, str, Path]
_loads = itertools.count()


def _is_path(thing) -> bool:
    """A Path, or a string naming a file (not a dotted module name, not source text)."""
    if isinstance(thing, Path):
        return True
    return isinstance(thing, str) and "\n" not in thing and (thing.endswith(".py") or "/" in thing)


def load(path_or_module: Source) -> types.ModuleType:
    """A step as a module: a module is returned as is, a dotted name is imported, a path to a .py file is
    imported from that file under a new unique module name (so that edits since the last load count)."""
    if isinstance(path_or_module, types.ModuleType):
        return path_or_module
    if not _is_path(path_or_module):
        return importlib.import_module(path_or_module)
    path = Path(path_or_module).expanduser().resolve()
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"no Python file at {path}")
    name = f"_workbook_step_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{next(_loads)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module          # the DSL and dataclasses look the module up by name while it runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def source_path(step: Source) -> Path:
    """The file a step's source lives in."""
    if _is_path(step):
        return Path(step).expanduser().resolve()
    module = load(step)
    file = getattr(module, "__file__", None)
    if not file:
        raise ValueError(f"module {module.__name__} has no source file")
    return Path(file).resolve()


def copy_for_editing(module: Source, dest_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Copy a step's file into `dest_dir` (created if needed) and return the copy's path. An existing copy is
    kept (it may hold the learner's edits) unless `overwrite`."""
    src = source_path(module)
    dest = Path(dest_dir).expanduser() / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if overwrite or not dest.exists():
        shutil.copyfile(src, dest)
    return dest.resolve()


def _text(thing: Source) -> tuple[str, str]:
    """(source text, label) of a module, a path, or source text itself."""
    if isinstance(thing, types.ModuleType) or _is_path(thing):
        path = source_path(thing)
        return path.read_text(encoding="utf-8"), path.name
    if isinstance(thing, str) and "\n" in thing:
        return thing, "<text>"
    path = source_path(thing)              # a dotted module name
    return path.read_text(encoding="utf-8"), path.name


_MODULE_DOCSTRING = re.compile(r'\A\s*(?:[rRuU]?"""(?:.|\n)*?"""|[rRuU]?\'\'\'(?:.|\n)*?\'\'\')[ \t]*\n')


def strip_module_docstring(text: str) -> str:
    """The source without its leading module docstring (the prose a notebook shows on its own)."""
    return _MODULE_DOCSTRING.sub("", text, count=1)


class Diff:
    """A unified diff of two sources; renders coloured in a notebook (`_repr_html_`) and plain as text."""

    def __init__(self, lines: list[str], old_label: str, new_label: str):
        self.lines = lines
        self.old_label, self.new_label = old_label, new_label

    @property
    def added(self) -> int:
        return sum(1 for l in self.lines if l.startswith("+") and not l.startswith("+++"))

    @property
    def removed(self) -> int:
        return sum(1 for l in self.lines if l.startswith("-") and not l.startswith("---"))

    def __str__(self) -> str:
        return "\n".join(self.lines) if self.lines else f"{self.old_label} and {self.new_label} are identical"

    def __repr__(self) -> str:
        return f"<Diff {self.old_label} -> {self.new_label}: +{self.added} -{self.removed}>"

    def _repr_html_(self) -> str:
        style = {"+": "background:#e6ffec;color:#116329", "-": "background:#ffebe9;color:#82071e",
                 "@": "background:#ddf4ff;color:#0550ae"}
        rows = []
        for line in self.lines:
            css = "font-weight:bold" if line.startswith(("+++", "---")) else style.get(line[:1], "")
            rows.append(f'<span style="{css}">{html.escape(line) or " "}</span>')
        head = (f"<div style='font-family:sans-serif;font-size:90%'><b>{html.escape(self.old_label)}</b> &rarr; "
                f"<b>{html.escape(self.new_label)}</b>: {self.added} lines added, {self.removed} removed</div>")
        body = "\n".join(rows) if rows else "(identical)"
        return (f"{head}<pre style='line-height:1.25;font-size:85%;padding:.5em;border:1px solid #ddd'>"
                f"{body}</pre>")


def diff(old: Source, new: Source, *, context: int = 3, module_docstring: bool = True) -> Diff:
    """The unified diff from `old` to `new` (modules, paths, or source text). `module_docstring=False` leaves
    the leading docstrings out, so that the diff shows only the code that changed."""
    (a, a_label), (b, b_label) = _text(old), _text(new)
    if not module_docstring:
        a, b = strip_module_docstring(a), strip_module_docstring(b)
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), a_label, b_label, n=context, lineterm=""))
    return Diff(lines, a_label, b_label)


class Code:
    """Lines of a source file with their numbers; renders highlighted in a notebook and plain as text."""

    def __init__(self, lines: list[str], first_line: int, label: str):
        self.lines, self.first_line, self.label = lines, first_line, label

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def __str__(self) -> str:
        width = len(str(self.first_line + len(self.lines)))
        return "\n".join(f"{self.first_line + i:>{width}}  {line}" for i, line in enumerate(self.lines))

    def __repr__(self) -> str:
        return f"<Code {self.label} lines {self.first_line}-{self.first_line + len(self.lines) - 1}>"

    def _repr_html_(self) -> str:
        head = (f"<div style='font-family:sans-serif;font-size:90%'><b>{html.escape(self.label)}</b>, lines "
                f"{self.first_line}-{self.first_line + len(self.lines) - 1}</div>")
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer
            body = highlight(self.text, PythonLexer(), HtmlFormatter(noclasses=True, linenos="inline",
                                                                     linenostart=self.first_line))
        except ImportError:
            body = f"<pre>{html.escape(str(self))}</pre>"
        return head + body


def excerpt(step: Source, start: str, end: str | None = None) -> Code:
    """The lines of a step's file from the first line containing `start` to the first later line containing
    `end` (inclusive), or, without `end`, the block that `start` opens (its line and every following line
    indented deeper, e.g. a whole `def`). Raises ValueError when a marker is not found."""
    text, label = _text(step)
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if start in line), None)
    if first is None:
        raise ValueError(f"{start!r} does not occur in {label}")
    if end is not None:
        last = next((i for i in range(first + 1, len(lines)) if end in lines[i]), None)
        if last is None:
            raise ValueError(f"{end!r} does not occur in {label} after {start!r}")
    else:
        # the opening line may continue over several lines (a long signature): the block starts after the ':'
        indent = len(lines[first]) - len(lines[first].lstrip())
        last = first
        while last + 1 < len(lines) and lines[last].lstrip().startswith("@"):   # decorators, then the def
            last += 1
        for i in range(last + 1, len(lines)):
            line = lines[i]
            if line.strip() and len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith((")", "]")):
                break
            last = i
        while last > first and not lines[last].strip():
            last -= 1
    return Code(lines[first:last + 1], first + 1, label)


def sass_delta(old_sass, new_sass, *, base: bool = True, changed_only: bool = False) -> pd.DataFrame:
    """Opcode counts of two SASS listings (`workbook.sass.histogram`), one row per opcode: old, new, change;
    the largest changes first. `base=False` keeps modifiers (`IMAD.WIDE`); `changed_only` drops equal rows.
    Either side may also be a list of `workbook.sass.Instruction` (a part of a kernel, e.g. one loop body)."""
    def counts(listing):
        if isinstance(listing, str):
            return sass.histogram(listing, base=base)
        return Counter(ins.base if base else ins.opcode for ins in listing)
    a, b = counts(old_sass), counts(new_sass)
    ops = sorted(set(a) | set(b))
    df = pd.DataFrame({"old": [a.get(o, 0) for o in ops], "new": [b.get(o, 0) for o in ops]},
                      index=pd.Index(ops, name="opcode"))
    df["change"] = df["new"] - df["old"]
    if changed_only:
        df = df[df["change"] != 0]
    order = df["change"].abs().sort_values(ascending=False, kind="stable").index
    return df.loc[order]
