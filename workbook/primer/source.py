"""Show a lesson's code in short pieces, as a notebook should: a few lines of a function, or the diff
between two versions, syntax-highlighted in a notebook and plain text elsewhere.

    excerpt(tma_copy.tma_copy_kernel, "with cute.arch.elect_one", "mbarrier_wait")
    diff(wgmma_tile.wgmma_host, tcgen05_tile.tcgen05_host)
"""
from __future__ import annotations

import difflib
import inspect
import textwrap

MAX_LINES = 30


class Listing:
    """Source text that renders highlighted in a notebook (`_repr_html_` via IPython's Code) and as text."""

    def __init__(self, text: str, language: str = "python"):
        self.text = text
        self.language = language

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        from IPython.display import Code
        return Code(self.text, language=self.language)._repr_html_()

    @property
    def lines(self) -> int:
        return len(self.text.splitlines())


def _source(obj) -> list[str]:
    fn = getattr(obj, "__wrapped__", obj)
    return textwrap.dedent(inspect.getsource(fn)).splitlines()


def _find(lines: list[str], needle: str, start: int, what: str) -> int:
    for i in range(start, len(lines)):
        if needle in lines[i]:
            return i
    raise ValueError(f"no line containing {needle!r} ({what}) in the source")


def excerpt(obj, first: str | None = None, last: str | None = None, max_lines: int = MAX_LINES) -> Listing:
    """The lines of `obj`'s source (a function, class or module) from the first line containing `first`
    (default: the top) to the next line containing `last` (default: `first`'s line alone if given, else the
    end). Refuses more than `max_lines`: a notebook shows code in short pieces."""
    lines = _source(obj)
    begin = 0 if first is None else _find(lines, first, 0, "first")
    end = (begin if first is not None else len(lines) - 1) if last is None else _find(lines, last, begin, "last")
    piece = textwrap.dedent("\n".join(lines[begin:end + 1]))
    count = end - begin + 1
    if count > max_lines:
        raise ValueError(f"the excerpt is {count} lines long, more than {max_lines}: show a shorter piece")
    return Listing(piece)


def diff(old, new, context: int = 2, max_lines: int = 60) -> Listing:
    """A unified diff from `old`'s source to `new`'s (functions, classes or modules), `context` lines around
    each change."""
    a, b = _source(old), _source(new)
    name = lambda o: getattr(o, "__qualname__", getattr(o, "__name__", str(o)))  # noqa: E731
    text = "\n".join(difflib.unified_diff(a, b, name(old), name(new), n=context, lineterm=""))
    if len(text.splitlines()) > max_lines:
        raise ValueError(f"the diff is {len(text.splitlines())} lines long, more than {max_lines}")
    return Listing(text, language="diff")
