"""Fixtures shared by several test files."""
import datetime
import importlib

import pytest

from workbook import records


@pytest.fixture
def ticking_clock(monkeypatch):
    """workbook.records' clock, a second later at every reading from 2026-01-01 00:00:00 UTC: rows appended one
    after the other would carry different times. The run's date it starts is the test's alone: a later test's rows
    must not read back as older than the recorded runs."""
    seconds = iter(range(3600))
    monkeypatch.setattr(records, "_run_date", records._run_date)

    class Clock(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime(2026, 1, 1, 0, 0, 0, tzinfo=tz) + datetime.timedelta(seconds=next(seconds))

    monkeypatch.setattr(records.datetime, "datetime", Clock)
    return Clock


@pytest.fixture(autouse=True)
def fresh_arch_lookup():
    """workbook.dispatch caches each device's arch (a real device's capability never changes); tests that stand
    in a different capability must not find the previous test's answer."""
    from workbook import dispatch
    dispatch._arch_of_index.cache_clear()
    yield
    dispatch._arch_of_index.cache_clear()


@pytest.fixture
def load_probe(monkeypatch):
    """A function that imports a probe of data/measured/h200/probes by its module name; the folder goes on sys.path
    for the test, since probes import their neighbours (`probe_rows`)."""
    monkeypatch.syspath_prepend(str(records.DATA / "measured" / "h200" / "probes"))
    return importlib.import_module
