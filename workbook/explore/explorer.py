"""The explorer's logic: one shape (`Explorer.explore` -> `Result`) or a sweep of one dimension (`Sweep`), each
configuration predicted by its wave model, looked up in ONE recorded benchmark run, and timed live where the
GPU is here; the winner, with the kind of number it rests on."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pandas as pd

from workbook import gpus, records
from workbook.explore.problem import Problem, Waves

def record_label(kernel, variant) -> str:
    """The name a recorded row goes by: the variant for our kernels ('ilp2'), else 'kernel variant'
    ('torch matmul_argmin', 'flashlib triton'); a variant that already starts with its kernel stays as it is
    ('torch.matmul')."""
    kernel = "" if pd.isna(kernel) else str(kernel)
    variant = "" if pd.isna(variant) else str(variant)
    if kernel in ("", "ours") or variant.startswith(kernel):
        return variant
    return kernel if not variant else f"{kernel} {variant}"


PROVENANCE_SHOWN = ("gpu", "driver", "torch", "cutlass_dsl", "commit", "date")


def provenance_text(rows: pd.DataFrame | Mapping) -> str:
    """Where measured rows come from, in one line: each provenance column's distinct values
    ('gpu NVIDIA H200, driver 570.1, ..., date 2026-11-30T01:02:03Z .. 2026-11-30T02:00:00Z')."""
    df = pd.DataFrame([dict(rows)]) if isinstance(rows, (Mapping, pd.Series)) else rows
    parts = []
    for k in PROVENANCE_SHOWN:
        if k not in df.columns:
            continue
        values = sorted({str(v) for v in df[k] if not pd.isna(v) and str(v) != ""})
        if values:
            shown = f"{values[0]} .. {values[-1]}" if k == "date" and len(values) > 1 else " / ".join(values)
            parts.append(f"{k} {shown}")
    return ", ".join(parts)


def recorded_run(df: pd.DataFrame, dims: Sequence[str], shape: Sequence[int],
                 wanted: Sequence[str]) -> pd.DataFrame:
    """The rows of ONE benchmark run of exactly `shape`: the run that timed the most of `wanted` (names as
    `record_label` gives them), the newest among equals; it comes from `records.last_run`. Empty if the
    shape was never recorded."""
    if df.empty or not set(dims) <= set(df.columns):
        return df.iloc[0:0]
    at = df
    for name, v in zip(dims, shape):
        at = at[at[name] == v]
    if at.empty:
        return at
    labels = [record_label(k, v) for k, v in zip(at["kernel"], at["variant"])]
    at = at.assign(_label=labels)
    coverage = {date: len(set(run["_label"]) & set(wanted)) for date, run in at.groupby("date")}
    best = max(coverage.values())
    run_date = max(d for d, c in coverage.items() if c == best)
    covered = set(at.loc[at.date == run_date, "_label"]) & set(wanted)
    needed = {(k, v) for k, v, lab in zip(at.kernel, at.variant, at._label) if lab in covered}
    return records.last_run(at, needed).drop(columns="_label")


ORIGINS = ("ours", "baseline", "recorded", "reference")   # our configuration; a baseline configuration; a row
                                                          # recorded beside them; someone else's published number


@dataclass
class Row:
    """One configuration (or recorded baseline, or published kernel) at the explored shape."""
    name: str
    origin: str = "ours"
    waves: Waves | None = None
    predicted_ms: float | None = None
    recorded_ms: float | None = None
    recorded_in: str = ""
    live_ms: float | None = None

    @property
    def published_ms(self) -> float | None:
        return self.recorded_ms if self.origin == "reference" else None

    @property
    def ours_recorded_ms(self) -> float | None:
        return self.recorded_ms if self.origin != "reference" else None

    @property
    def shown(self) -> tuple[float | None, str]:
        """The number this row is judged by and what it is: live, else recorded, else predicted."""
        for ms, basis in ((self.live_ms, "live"), (self.ours_recorded_ms, "recorded"),
                          (self.published_ms, "published"), (self.predicted_ms, "predicted")):
            if ms is not None:
                return ms, basis
        return None, ""


@dataclass
class Result:
    problem: Problem
    shape: tuple[int, ...]
    gpu: gpus.GpuSpec
    roofline: gpus.Roofline
    rows: list[Row]
    run: str = ""                      # where the recorded numbers come from: file, run, provenance
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.problem.name} {self.problem.label(self.shape)} on {self.gpu.name}"

    TIERS = (("live_ms", "measured live on this GPU"), ("ours_recorded_ms", "recorded measurement"),
             ("published_ms", "published measurement (their kernel, their GPU)"),
             ("predicted_ms", "model only, no measurement of this shape"))

    def _tier(self) -> tuple[str, str] | None:
        """The best kind of number any row has: live, then our recorded runs, then published, then the model."""
        return next(((key, words) for key, words in self.TIERS
                     if any(getattr(r, key) is not None for r in self.rows)), None)

    @property
    def winner(self) -> str | None:
        """The fastest by the best kind of number there is; None on a tie (the model ties configurations that
        differ only inside an item)."""
        tier = self._tier()
        if tier is None:
            return None
        key = tier[0]
        timed = [r for r in self.rows if getattr(r, key) is not None]
        best = min(getattr(r, key) for r in timed)
        fastest = [r.name for r in timed if math.isclose(getattr(r, key), best, rel_tol=1e-9)]
        return fastest[0] if len(fastest) == 1 else None

    @property
    def winner_basis(self) -> str:
        tier = self._tier()
        return tier[1] if tier else "nothing to compare"

    def table(self) -> pd.DataFrame:
        """One row per configuration: the number it is judged by and what kind it is, then each kind."""
        out = []
        for r in self.rows:
            ms, basis = r.shown
            w = r.waves
            out.append({"configuration": r.name, "ms": ms, "kind": basis or "none", "% of roofline":
                        100 * self.roofline.ms / ms if ms else None,
                        "predicted ms": r.predicted_ms, "recorded ms": r.recorded_ms, "live ms": r.live_ms,
                        "slots": w.slots if w else None, "waves": w.waves if w else None,
                        "wave efficiency": w.efficiency if w else None, "recorded in": r.recorded_in})
        return pd.DataFrame(out)

    def tilings(self) -> dict[Waves, list[str]]:
        """The different tilings among the rows, each with the names of the configurations that share it."""
        groups: dict[Waves, list[str]] = {}
        for r in self.rows:
            if r.waves is not None:
                groups.setdefault(r.waves, []).append(r.name)
        return groups

    def summary(self) -> str:
        lines = [f"{self.label} ({self.gpu.sm_count} SMs).", f"Roofline at datasheet peaks: {self.roofline}."]
        groups = self.tilings()
        for w, names in groups.items():
            lines.append(f"{', '.join(names)}: {w.describe()}.")
        if any(len(names) > 1 for names in groups.values()):
            lines.append("Configurations on one line tile alike, so the model predicts them alike: it counts tiles "
                         "and waves, not what runs inside an item.")
        if self.run:
            lines.append(f"Recorded: {self.run}.")
        w = self.winner
        if w:
            lines.append(f"Winner: {w}, by {self.winner_basis}.")
        elif self.winner_basis.startswith("model"):
            lines.append("No single winner: only the model speaks for this shape, and it ties the fastest. "
                         "A measurement would separate them.")
        else:
            lines.append(f"No single winner: the fastest are tied, by {self.winner_basis}.")
        return "\n".join(lines + self.notes)


@dataclass
class Sweep:
    """The same configurations explored over a range of one dimension."""
    problem: Problem
    gpu: gpus.GpuSpec
    dim: str
    results: list[Result]
    notes: list[str] = field(default_factory=list)

    @property
    def values(self) -> list[int]:
        i = [d.name for d in self.problem.dims].index(self.dim)
        return [r.shape[i] for r in self.results]

    @property
    def runs(self) -> list[str]:
        """The distinct recorded runs the sweep's numbers come from."""
        return list(dict.fromkeys(r.run for r in self.results if r.run))

    def table(self) -> pd.DataFrame:
        """Long form: one row per (value of the swept dimension, configuration)."""
        frames = []
        for v, r in zip(self.values, self.results):
            t = r.table()
            t.insert(0, self.dim, v)
            t["roofline ms"] = r.roofline.ms
            frames.append(t)
        return pd.concat(frames, ignore_index=True)


@dataclass
class Explorer:
    """Explores one problem; `records_root` points at another data/measured/ (tests)."""
    problem: Problem
    records_root: object = None

    def explore(self, shape: Sequence[int], gpu="h200", configurations: Sequence[str] | None = None, *,
                live: bool = True) -> Result:
        """Everything known about `shape` on `gpu` for the chosen configurations (default: all). ValueError
        for a shape, GPU or configuration that does not exist or that the kernels refuse."""
        p = self.problem
        shape = p.shape(shape)
        spec = gpus.get(gpu)
        p.check(shape, spec)
        offered = list(p.configurations(spec))
        chosen = offered if configurations is None else list(configurations)
        unknown = [c for c in chosen if c not in offered]
        if unknown:
            raise ValueError(f"unknown {p.name} configuration(s) {unknown} for {spec.name}; choose from {offered}")
        roof = gpus.roofline_ms(p.flops(shape), p.nbytes(shape), spec)
        result = Result(p, shape, spec, roof, rows=[])
        for name in chosen:
            try:
                w = p.waves(shape, spec, name)
            except ValueError as err:          # this configuration refuses the shape; the others may not
                result.notes.append(f"{name} left out: {err}")
                continue
            predicted = max(w.compute_ms(spec), roof.memory_ms) if w is not None else None
            result.rows.append(Row(name, "baseline" if name in p.baselines else "ours", w, predicted_ms=predicted))
        self._add_recorded(result, offered, chosen)
        for ref in p.references(shape, spec):
            result.rows.append(Row(ref.name, "reference", recorded_ms=ref.ms, recorded_in=ref.source))
        self._add_live(result, chosen, live)
        return result

    def _add_recorded(self, result: Result, offered: list[str], chosen: list[str]) -> None:
        p, spec = self.problem, result.gpu
        df = records.read(spec.key, p.table, root=self.records_root)
        dims = [d.name for d in p.dims]
        run = recorded_run(df, dims, result.shape, chosen)
        where = f"data/measured/{spec.key}/{p.table}.csv"
        if run.empty:
            result.notes.append(f"No measurement of this shape is recorded in {where}: predictions only"
                                + (", and the published numbers." if p.references(result.shape, spec) else "."))
            return
        result.run = f"{where}, one run: {provenance_text(run)}"
        rows = {r.name: r for r in result.rows}
        for kernel, variant, ms in zip(run["kernel"], run["variant"], run["ms_median"]):
            name = record_label(kernel, variant)
            if name in offered and name not in chosen:
                continue                                   # a configuration the user switched off
            row = rows.get(name)
            if row is None:
                row = rows[name] = Row(name, "recorded")
                result.rows.append(row)
            row.recorded_ms, row.recorded_in = float(ms), where

    def _add_live(self, result: Result, chosen: list[str], live: bool) -> None:
        here = gpus.current()
        if here is None:
            result.notes.append("No GPU here: the numbers are the model's and the recorded ones; nothing ran live.")
            return
        if here.arch != result.gpu.arch:
            result.notes.append(f"This machine has a {here.name}, not a {result.gpu.name}: nothing ran live.")
            return
        if not live:
            return
        timed = []
        for row in result.rows:
            if row.name in chosen:
                ms = self.problem.measure(result.shape, row.name)
                if ms is not None:
                    row.live_ms = float(ms)
                    timed.append(row.name)
        if timed:
            result.notes.append(f"Live: {', '.join(timed)} timed just now on this {here.name}.")

    def sweep(self, base: Sequence[int], dim: str, values: Sequence[int], gpu="h200",
              configurations: Sequence[str] | None = None, *, live: bool = True) -> Sweep:
        """`explore` at each shape that is `base` with `dim` set to one of `values`. A value the kernels
        refuse is left out with a note; ValueError when they refuse them all."""
        names = [d.name for d in self.problem.dims]
        if dim not in names:
            raise ValueError(f"{dim!r} is not a dimension of {self.problem.name}; choose from {names}")
        base = list(self.problem.shape(base))
        i = names.index(dim)
        spec = gpus.get(gpu)
        out = Sweep(self.problem, spec, dim, [])
        for v in values:
            shape = base[:i] + [v] + base[i + 1:]
            try:
                out.results.append(self.explore(shape, spec, configurations, live=live))
            except ValueError as err:
                out.notes.append(f"{dim}={v:,} left out: {err}")
        if not out.results:
            raise ValueError(f"no value of {dim} in {list(values)} can be explored: " + "; ".join(out.notes))
        return out

