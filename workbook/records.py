"""Measurements as rows of CSV files, one file per table and GPU: data/measured/<gpu>/<table>.csv.

    rows = [{"kernel": "ours", "variant": "ilp2", "N": 65536, "D": 128, "K": 4096,
             "ms_median": t.ms_median, "ms_min": t.ms_min, "ms_max": t.ms_max,
             "tflops": t.tflops(2 * 65536 * 128 * 4096), "match_rate": 1.0}]
    records.append("h200", "step_latency", rows)       # provenance columns are filled in
    df = records.read("h200", "step_latency")
    records.write_probe(frame, f"{out_dir}/probe.csv")   # a probe's own file, rewritten whole, provenance added

A row is `kernel, variant, <shape columns>, ms_median, ms_min, ms_max, tflops, match_rate` followed by
its provenance `gpu, sm_count, driver, torch, cutlass_dsl, commit, date`. The shape columns are
whatever the caller measures over (N, D, K, say, or M, N, K): this module does not know or care.
The first append to a table fixes its columns; later rows must have the same ones, so that a table never
silently grows blanks.

A row says which device measured it, and `append` refuses rows whose `gpu` column does not name
the folder's GPU exactly (`folders_for`): numbers taken on one machine cannot end up filed under another.

Appends are safe across processes and against a killed writer: each append holds a file lock
(`filelock`, `<table>.csv.lock` beside the table) while it reads the header and writes its rows, so two
benchmarks starting a new table write one header; the rows go out in one write and are flushed to disk. A
file whose last line was cut anyway (a writer killed mid-write, a full disk) has that fragment moved to
`<table>.csv.cut` by the next append, with a warning; `read` skips it, with a warning.
"""
from __future__ import annotations

import csv
import datetime
import functools
import importlib.metadata
import math
import numbers
import os
import re
import shutil
import subprocess
import warnings
from io import StringIO
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd
import torch
from filelock import FileLock

from workbook import DATA, ROOT

MEASURED = DATA / "measured"
IDENTITY = ("kernel", "variant")
RESULTS = ("ms_median", "ms_min", "ms_max", "tflops", "match_rate")
PROVENANCE = ("gpu", "sm_count", "driver", "torch", "cutlass_dsl", "commit", "date")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def _run(cmd: list[str]) -> str:
    """stdout of a short command, or "" if it is missing or fails."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _driver() -> str:
    if shutil.which("nvidia-smi") is None:
        return ""
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else ""


def _commit() -> str:
    # The caller's word wins: a copy of the tree sent to a lent GPU machine may carry no .git, or a stale one
    # that names another commit than the one the rows were measured at.
    said = os.environ.get("WORKBOOK_COMMIT")
    if said:
        return said
    sha = _run(["git", "rev-parse", "--short", "HEAD"])
    if not sha:
        return "unknown"
    # uncommitted edits mean the numbers may not come from the code at `sha`
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return f"{sha}-dirty" if dirty else sha


@functools.lru_cache(maxsize=1)
def _static_provenance() -> tuple[tuple[str, Any], ...]:
    # what cannot change while a process runs; the commit can, so it is looked up every time
    try:
        dsl = importlib.metadata.version("nvidia-cutlass-dsl")
    except importlib.metadata.PackageNotFoundError:
        dsl = ""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        gpu, sms = props.name, int(props.multi_processor_count)
    else:
        gpu, sms = "cpu", 0
    torch_version = torch.__version__ + (f" (CUDA {torch.version.cuda})" if torch.version.cuda else "")
    return (("gpu", gpu), ("sm_count", sms), ("driver", _driver()), ("torch", torch_version),
            ("cutlass_dsl", dsl))


def provenance() -> dict[str, Any]:
    """Where a measurement taken now, in this process, comes from: one value per PROVENANCE column.
    `gpu` is the CUDA device's name ("cpu" without one), `driver` is "" without nvidia-smi,
    `commit` is "unknown" outside a git checkout and ends in "-dirty" with uncommitted edits."""
    prov = dict(_static_provenance())
    prov["commit"] = _commit()
    prov["date"] = run_date()
    return {k: prov[k] for k in PROVENANCE}


def write_probe(frame: pd.DataFrame, path: Path | str) -> pd.DataFrame:
    """A probe's rows with this run's provenance columns (`provenance`), written to the CSV file `path` whole
    (a probe rewrites its file after every shape, so a run cut short keeps what it measured); returns them."""
    stamped = frame.assign(**provenance())
    stamped.to_csv(path, index=False)
    return stamped


_run_date: str | None = None
DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def run_date() -> str:
    """The `date` of every row this process records: when its run began (its first record, or the last
    `start_run()`), so that rows written shape by shape as they are measured still read back as one run. A run
    split over several processes (a sweep too long for one call to a lent GPU: `gemm_kernels.sweep --part`) gives
    each the first one's date in the environment variable WORKBOOK_RUN_DATE."""
    global _run_date
    if _run_date is None:
        said = os.environ.get("WORKBOOK_RUN_DATE")
        if said:
            try:
                datetime.datetime.strptime(said, DATE_FORMAT)
            except ValueError:
                raise ValueError(f"WORKBOOK_RUN_DATE must read like 2026-12-06T08:00:00Z, got {said!r}") from None
            _run_date = said
        else:
            start_run()
    return _run_date


def start_run() -> str:
    """Begin a new run in this process: rows recorded from now on carry a new `date`."""
    global _run_date
    _run_date = datetime.datetime.now(datetime.timezone.utc).strftime(DATE_FORMAT)
    return _run_date


def _check_name(what: str, value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{what} must be a lowercase name like 'h200' or 'step_latency' "
                         f"(letters, digits, '_', '-', '.'), got {value!r}")
    return value


def path(gpu: str, table: str, *, root: Path | str | None = None) -> Path:
    """The CSV file of `table` measured on `gpu`."""
    return Path(root or MEASURED) / _check_name("gpu", gpu) / f"{_check_name('table', table)}.csv"


def folders_for(device_name: str) -> tuple[str, ...]:
    """The folder names under which rows measured on `device_name` may be filed, matched exactly: the model
    (the first word with a digit: "NVIDIA H200" -> "h200", "NVIDIA H100 80GB HBM3" -> "h100") and the whole
    name as `workbook.gpus` spells an unknown GPU's key ("nvidia_h100_80gb_hbm3"); "cpu" for the CPU."""
    name = str(device_name).lower()
    slug = "".join(ch if ch.isalnum() else "_" for ch in name).strip("_")
    words = [w for w in re.split(r"[^a-z0-9]+", name) if w]
    model = next((w for w in words if any(ch.isdigit() for ch in w)), None)
    return tuple(dict.fromkeys(f for f in (model, slug) if f))


def _check_results(i: int, row: Mapping[str, Any]) -> None:
    def number(col: str) -> float:
        v = row[col]
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"row {i}: {col} must be a finite number, got {v!r}")
        return float(v)
    lo, med, hi = number("ms_min"), number("ms_median"), number("ms_max")
    if not 0 < lo <= med <= hi:
        raise ValueError(f"row {i}: need 0 < ms_min <= ms_median <= ms_max, got {lo}, {med}, {hi}")
    if number("tflops") < 0:
        raise ValueError(f"row {i}: tflops must be >= 0, got {row['tflops']}")
    if not 0 <= number("match_rate") <= 1:
        raise ValueError(f"row {i}: match_rate is a fraction in [0, 1], got {row['match_rate']}")


def append(gpu: str, table: str, rows: Iterable[Mapping[str, Any]] | pd.DataFrame, *,
           root: Path | str | None = None) -> Path:
    """Append `rows` (dicts, or a DataFrame) to data/measured/<gpu>/<table>.csv, writing the header on
    first use; provenance columns a row lacks are filled from `provenance()`. Returns the file.

    Raises ValueError, writing nothing, if a row lacks a required column, has columns the table does
    not have, holds an impossible result, or was measured on a device that is not `gpu`."""
    target = path(gpu, table, root=root)
    records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else [dict(r) for r in rows]
    if not records:
        raise ValueError("no rows to append")
    prov = provenance()
    records = [{**{k: v for k, v in prov.items() if k not in r}, **r} for r in records]

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.lock"):
        _repair_cut_line(target)
        header = _header(target)
        new = header is None
        if new:
            first = records[0]
            shape = [c for c in first if c not in IDENTITY + RESULTS + PROVENANCE]
            header = [*IDENTITY, *shape, *RESULTS, *PROVENANCE]
        _check_rows(records, header, gpu, table, target)
        text = StringIO()
        writer = csv.DictWriter(text, fieldnames=header)      # csv's own "\r\n", as the tables have
        if new:
            writer.writeheader()
        writer.writerows(records)
        # one write of whole lines, flushed to disk before the lock goes: a reader never sees half a batch
        with target.open("a", newline="") as f:
            f.write(text.getvalue())
            f.flush()
            os.fsync(f.fileno())
    return target


def _header(target: Path) -> list[str] | None:
    """The table's columns, or None for a table not started yet (no file, or an empty one)."""
    if not target.exists() or target.stat().st_size == 0:
        return None
    with target.open(newline="") as f:
        return next(csv.reader(f))


def _check_rows(records, header, gpu: str, table: str, target: Path) -> None:
    required = set(IDENTITY + RESULTS + PROVENANCE) | set(header)
    for i, r in enumerate(records):
        missing = [c for c in header if c not in r] + sorted(required - set(header) - set(r))
        if missing:
            raise ValueError(f"row {i} of {table!r} lacks required column(s) {missing}")
        extra = [c for c in r if c not in header]
        if extra:
            raise ValueError(f"row {i} has column(s) {extra} that {target.name} does not have "
                             f"(its columns: {header})")
        _check_results(i, r)
        if gpu not in folders_for(r["gpu"]):
            raise ValueError(f"row {i} was measured on {r['gpu']!r}, which is not {gpu!r}; file it under that "
                             f"device's folder ({' or '.join(repr(f) for f in folders_for(r['gpu']))})")


def _cut_fragment(data: bytes) -> tuple[bytes, bytes]:
    """(complete lines, the cut fragment after the last line end) of a table's bytes; a line cut between the
    "\r" and the "\n" of csv's line end is whole."""
    end = len(data) if data.endswith(b"\r") else data.rfind(b"\n") + 1
    return data[:end], data[end:]


def _repair_cut_line(target: Path) -> None:
    """Move a cut last line (no newline: its writer was killed mid-write) to <table>.csv.cut, so the next row
    is not glued onto it. Called with the table's lock held."""
    if not target.exists() or target.stat().st_size == 0:
        return
    with target.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        if last == b"\n":
            return
        if last == b"\r":                  # cut between the "\r" and the "\n" of csv's line end: the row is whole
            with target.open("ab") as g:
                g.write(b"\n")
            return
        f.seek(0)
        complete, fragment = _cut_fragment(f.read())
    if not complete:
        raise ValueError(f"{target} holds no complete line (its header was cut: {fragment[:80]!r}); remove it")
    aside = target.with_name(target.name + ".cut")
    with aside.open("ab") as f:
        f.write(fragment + b"\n")
    with target.open("r+b") as f:
        f.truncate(len(complete))
    warnings.warn(f"{target.name}: its last line was cut (a writer killed mid-write?): moved "
                  f"{fragment[:60].decode(errors='replace')!r}... to {aside.name}", RuntimeWarning, stacklevel=3)


def read(gpu: str, table: str, *, root: Path | str | None = None) -> pd.DataFrame:
    """The rows of one table; an empty frame with the fixed columns if nothing was recorded yet."""
    target = path(gpu, table, root=root)
    if not target.exists():
        return pd.DataFrame(columns=[*IDENTITY, *RESULTS, *PROVENANCE])
    complete, fragment = _cut_fragment(target.read_bytes())
    if fragment:
        warnings.warn(f"{target.name}: skipping its cut last line {fragment[:60].decode(errors='replace')!r}... "
                      f"(a writer killed mid-write?); the next append moves it aside", RuntimeWarning, stacklevel=2)
    if not complete:
        return pd.DataFrame(columns=[*IDENTITY, *RESULTS, *PROVENANCE])
    # text stays text: a commit like "87493e1" would otherwise be parsed as the number 874930.0
    return pd.read_csv(StringIO(complete.decode()),
                       dtype={c: str for c in (*IDENTITY, *PROVENANCE) if c != "sm_count"})


def tables(gpu: str, *, root: Path | str | None = None) -> list[str]:
    """The tables recorded for `gpu`, by name."""
    folder = Path(root or MEASURED) / _check_name("gpu", gpu)
    return sorted(p.stem for p in folder.glob("*.csv"))


def last_run(df: pd.DataFrame, needed: Iterable[tuple[str, str]], min_shapes: int = 1) -> pd.DataFrame:
    """The rows of the most recent benchmark run (one `date`) that measured every (kernel, variant) in
    `needed`, each on at least `min_shapes` shapes: numbers compared from one process on the same inputs, as
    the method asks (`min_shapes` skips a later run that re-measured only a few shapes). Empty if none did."""
    needed = list(needed)

    def has_all(run: pd.DataFrame) -> bool:
        return all(((run.kernel == k) & (run.variant == v)).sum() >= min_shapes for k, v in needed)

    dates = [date for date, run in df.groupby("date") if has_all(run)]
    return df[df.date == max(dates)] if dates else df.iloc[0:0]


def versus(df: pd.DataFrame, new: str, old: str, shape: Iterable[str], kernel: str = "ours") -> pd.DataFrame:
    """Per shape measured for both variants of `kernel`: medians, min-max ranges, and the speedup of `new`
    over `old` in percent. Empty when either variant is missing."""
    shape = list(shape)
    rows = df[df.kernel == kernel].set_index(["variant", *shape])
    variants = set(rows.index.get_level_values(0))
    if new not in variants or old not in variants:
        return pd.DataFrame()
    a, b = rows.loc[new], rows.loc[old]
    both = a.index.intersection(b.index)
    out = pd.DataFrame({f"{old} ms": b.loc[both, "ms_median"], f"{new} ms": a.loc[both, "ms_median"],
                        f"{old} range": b.loc[both, "ms_max"] - b.loc[both, "ms_min"],
                        f"{new} range": a.loc[both, "ms_max"] - a.loc[both, "ms_min"]})
    out["speedup %"] = 100 * (out[f"{old} ms"] / out[f"{new} ms"] - 1)
    return out.sort_index().reset_index()
