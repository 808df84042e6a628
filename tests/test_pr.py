"""workbook.pr: the reader of data/pr/ and the check of a stated summary against its rounded table."""
from __future__ import annotations

import pytest

from workbook import pr


def test_every_transcribed_table_reads_and_is_a_copy():
    names = sorted(p.stem for p in pr.PR_DATA.glob("*.csv"))
    assert names
    for name in names:
        t = pr.table(name)
        assert len(t) and "source" in t.columns
        t.iloc[0, 0] = -99
        assert pr.table(name).iloc[0, 0] != -99


def test_an_unknown_table_is_a_value_error_that_lists_the_known_ones():
    with pytest.raises(ValueError, match="transcribed tables are"):
        pr.table("no_such_table")


def headline(stated, recomputed, low, high, decimals=2):
    return pr.Headline(what="x", stated=stated, recomputed=recomputed, low=low, high=high, decimals=decimals,
                       unit="%", rounding="rounded to 0.1%", source="test")


def test_a_recomputation_that_rounds_to_the_stated_value():
    h = headline(7.77, 7.7733, 7.72, 7.82)
    assert h.rounds_to_stated and h.consistent and "rounds to the stated 7.77%" in h.explanation


def test_a_stated_value_within_the_rounding_range_is_consistent_and_says_why():
    h = headline(28.05, 28.0419, 27.9593, 28.1246)
    assert not h.rounds_to_stated and h.consistent
    assert "-0.0081 percentage points" in h.explanation and "consistent with the table" in h.explanation


def test_a_stated_number_the_table_cannot_give_is_flagged():
    h = headline(9.0, 7.77, 7.72, 7.82)
    assert not h.consistent and not h.rounds_to_stated and "OUTSIDE" in h.explanation
    # the rounding of the stated value itself counts: 7.825 could have been printed as 7.83
    assert headline(7.83, 7.77, 7.72, 7.8251).consistent and not headline(7.84, 7.77, 7.72, 7.8251).consistent
