"""Tables transcribed from published pull requests into data/pr/, and the summary numbers a PR states, checked
against its own table.

    pr.table("some_table")     a fresh copy of data/pr/some_table.csv
    Headline(what, stated=7.77, recomputed=..., low=..., high=..., decimals=2, unit="%", ...)

A PR states its summaries from its raw measurements; the tables it shows are rounded. Recomputing from the
rounded table therefore need not give the stated digits back. A `Headline` carries the range of values the
rounded table allows (every entry moved anywhere within its rounding step), so "the stated number is
consistent with the table" is checked, not assumed, and where the recomputed digits differ, `explanation`
says by how much and why. What each table holds, and which summaries it states, belongs to the package whose
kernel the PR is about.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import pandas as pd

from workbook import DATA

PR_DATA = DATA / "pr"


@functools.lru_cache(maxsize=None)
def _load(name: str) -> pd.DataFrame:
    path = PR_DATA / f"{name}.csv"
    if not path.is_file():
        known = sorted(p.stem for p in PR_DATA.glob("*.csv"))
        raise ValueError(f"no table {name!r} in {PR_DATA}; the transcribed tables are {known}")
    return pd.read_csv(path)


def table(name: str) -> pd.DataFrame:
    """data/pr/<name>.csv as a DataFrame; a copy, so a caller's edits never reach the next reader."""
    return _load(name).copy()


@dataclass(frozen=True)
class Headline:
    """A summary number as a PR states it, and as its own table gives it back."""
    what: str
    stated: float
    recomputed: float
    low: float        # the smallest value the rounded table allows
    high: float       # the largest
    decimals: int     # how many decimals the PR states
    unit: str
    rounding: str     # how the table is rounded, in words
    source: str
    note: str = ""    # anything else the numbers show

    @property
    def difference(self) -> float:
        return self.recomputed - self.stated

    @property
    def rounds_to_stated(self) -> bool:
        """The recomputed value, rounded as the PR rounds, is the stated value."""
        return math.isclose(round(self.recomputed, self.decimals), self.stated, abs_tol=1e-9)

    @property
    def consistent(self) -> bool:
        """The stated value (itself rounded) could come from numbers that round to this table."""
        half = 0.5 * 10.0 ** -self.decimals
        return self.low - half <= self.stated <= self.high + half

    @property
    def explanation(self) -> str:
        got = f"{self.recomputed:.{self.decimals + 2}f}{self.unit}"
        if self.rounds_to_stated:
            return f"recomputed {got} rounds to the stated {self.stated:.{self.decimals}f}{self.unit}"
        span = f"{self.low:.{self.decimals + 2}f}{self.unit} .. {self.high:.{self.decimals + 2}f}{self.unit}"
        verdict = ("so the stated value is consistent with the table: it was computed before rounding"
                   if self.consistent else
                   "and the stated value lies OUTSIDE that range: the table and the summary disagree")
        by = f"{self.difference:+.{self.decimals + 2}f}" + (" percentage points" if self.unit == "%" else self.unit)
        return (f"recomputed {got} differs from the stated {self.stated:.{self.decimals}f}{self.unit} by {by}; "
                f"{self.rounding}, which allows any value in {span}, {verdict}" + (f". {self.note}" if self.note else ""))

    def __str__(self) -> str:
        return f"{self.what}: {self.explanation}"
