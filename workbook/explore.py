"""The shape explorer: for one problem shape, or a sweep over one of its dimensions, on one GPU, every named
configuration's latency, predicted by a wave model, recorded in data/measured/, and timed live when a GPU of
that kind is here; the waves each configuration runs in; and the winner, with the number it rests on.

    ex = Explorer(problem)                       # a Problem from a kernel package (below)
    r = ex.explore((65536, 128, 4096), gpu="h200")
    r.summary(); r.table(); figure(r)            # figure(r, view="roofline"): each bar as a fraction of the bound
    s = ex.sweep((65536, 128, 4096), "K", [512, 1024, 2048, 4096], gpu="h200")
    s.table(); sweep_figure(s)
    build_ui([Explorer(p) for p in problems])    # the same behind ipywidgets

The explorer knows no kernel. A kernel package describes its problem through `Problem`, the one interface
between them: the shape's dimensions and their ranges, FLOPs and bytes (which `gpus.roofline_ms` turns into a
bound), the named configurations, each configuration's `Waves` (its work items, how many run at once, when the
last one finishes), the table its benchmark records, others' published numbers, and optionally a live runner.

The prediction is deliberately simple, and says so: one slot of the GPU (an SM, a CTA pair, one of two CTAs
sharing an SM) gets `1/slots` of the tensor cores' datasheet peak; an item takes its FLOPs (tile padding
included) at that rate; the configuration takes until its last slot finishes, or the time to move its bytes,
whichever is longer. So configurations that tile differently (other widths, other CTAs per SM, balanced tails)
predict differently, and configurations that differ only inside an item (a scan, an epilogue, the pipeline
depth) predict the same; only a measurement separates those, and the winner is picked from measurements
whenever there are any.

Recorded numbers of a shape come from ONE benchmark run (`records.last_run`: the newest run of that shape
that timed the most of the chosen configurations), so a bar never mixes an older run into a newer one; the
run's commit and date are in every caption.
"""
from __future__ import annotations

import abc
import math
import textwrap
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import pandas as pd

from workbook import gpus, records

MAX_ELEMENTS = 2**31 - 1       # what 32-bit indexing reaches: the kernels index their tensors with int32


@dataclass(frozen=True)
class Dim:
    """One dimension of a problem shape: its name, the value the explorer starts at, the range it offers, and
    the multiple the kernels need (16, say, where a tensor-core K step is 16 elements; else 1)."""
    name: str
    default: int
    low: int
    high: int
    multiple: int = 1

    def values(self, low: int, high: int, count: int) -> list[int]:
        """About `count` values from `low` to `high`, evenly spaced on a log axis, each a multiple of
        `multiple`, none repeated, both ends included (rounded to the multiple)."""
        if not (isinstance(count, int) and count >= 2):
            raise ValueError(f"a sweep needs at least 2 points, got {count!r}")
        lo, hi = sorted((int(low), int(high)))
        if lo < 1:
            raise ValueError(f"{self.name} must be >= 1 to sweep, got {lo}")
        m = self.multiple
        out = []
        for i in range(count):
            v = lo * (hi / lo) ** (i / (count - 1))
            v = max(m, int(round(v / m)) * m)
            if not out or v > out[-1]:
                out.append(v)
        return out


@dataclass(frozen=True)
class Waves:
    """How one configuration's work falls onto the GPU: `items` work items (CTAs, or CTA pairs), `slots` of
    them running at once, the last slot finishing at `makespan` (in units of one full item's run time),
    `busy` item-time of work in all (equal to `items` when all items are full size). `item_flops`: the
    tensor-core operations of one full item, with the padding of a tile that hangs over the edge."""
    items: int
    slots: int
    makespan: float
    busy: float
    item_flops: float
    slot: str = "SM"          # what one slot is, for the pictures: "SM", "CTA pair", "CTA (2 per SM)"
    tile: str = ""            # what one item is, e.g. "M128 x N256"
    schedule: Callable[[], Sequence[Sequence[tuple[float, float, str]]]] | None = field(
        default=None, compare=False, repr=False)   # per slot, (start, duration, label); default: equal items

    @property
    def waves(self) -> float:
        """Items per slot: 3.46 means three full waves and a last one 46 % full."""
        return self.items / self.slots

    @property
    def efficiency(self) -> float:
        """The share of slot-time doing work until the last slot finishes (1.0: no tail)."""
        return self.busy / (self.makespan * self.slots)

    @property
    def last_wave_fill(self) -> float:
        full = math.ceil(self.items / self.slots)
        return (self.items - (full - 1) * self.slots) / self.slots

    def compute_ms(self, gpu: gpus.GpuSpec) -> float:
        """The model's math time: the makespan, an item taking its FLOPs at a slot's share of the peak."""
        return self.makespan * self.item_flops * self.slots / (gpu.bf16_dense_tflops * 1e12) * 1e3

    def gantt(self) -> list[list[tuple[float, float, str]]]:
        """What `plots.wave_occupancy` draws: per slot, (start, duration, label) of each item."""
        if self.schedule is not None:
            return [list(row) for row in self.schedule()]
        return [[(float(w), 1.0, self.tile or "work item") for w in range(self.items // self.slots
                                                                          + (s < self.items % self.slots))]
                for s in range(self.slots)]

    def describe(self) -> str:
        tile = f" ({self.tile})" if self.tile else ""
        return (f"{self.items:,} items{tile} on {self.slots} slots ({self.slot}) = {self.waves:.2f} waves, "
                f"makespan {self.makespan:.2f}, wave efficiency {self.efficiency:.1%}")


def uniform_waves(items: int, slots: int, item_flops: float, *, slot: str = "SM", tile: str = "") -> Waves:
    """Equal items on `slots` slots, each slot taking the next item as it frees: ceil(items / slots) waves."""
    if items < 1 or slots < 1:
        raise ValueError(f"need items >= 1 and slots >= 1, got {items} and {slots}")
    return Waves(items=items, slots=slots, makespan=float(math.ceil(items / slots)), busy=float(items),
                 item_flops=float(item_flops), slot=slot, tile=tile)


@dataclass(frozen=True)
class Reference:
    """A latency someone else measured and published, of exactly the explored shape (not ours: say whose)."""
    name: str
    ms: float
    source: str


class Problem(abc.ABC):
    """What a kernel package tells the explorer about its problem. Subclasses set the class attributes and
    implement the abstract methods; `references`, `describe` and `measure` are optional."""
    name: str                          # shown in the UI, e.g. "k-means assignment"
    dims: tuple[Dim, ...]              # the shape's dimensions, in order
    table: str                         # its benchmark's table: data/measured/<gpu>/<table>.csv
    gpus: tuple[str, ...] = ("h200", "b200")
    model: str = "wave model"          # one line on what the prediction counts, for captions
    baselines: tuple[str, ...] = ()    # configurations that are someone else's library (torch, cuBLAS)

    def shape(self, values: Sequence[int]) -> tuple[int, ...]:
        """`values` as a shape, or a ValueError in words for anything that is not one."""
        values = tuple(values)
        names = tuple(d.name for d in self.dims)
        if len(values) != len(names):
            raise ValueError(f"a {self.name} shape is ({', '.join(names)}); got {len(values)} numbers")
        for name, v in zip(names, values):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        return values

    def label(self, shape: Sequence[int]) -> str:
        return ", ".join(f"{d.name}={v:,}" for d, v in zip(self.dims, shape))

    @abc.abstractmethod
    def check(self, shape: tuple[int, ...], gpu: gpus.GpuSpec) -> None:
        """Raise ValueError, saying why, if the kernels refuse this shape on this GPU."""

    @abc.abstractmethod
    def flops(self, shape: tuple[int, ...]) -> float:
        """Tensor-core operations of the problem (2 per multiply-add), without padding."""

    @abc.abstractmethod
    def nbytes(self, shape: tuple[int, ...]) -> float:
        """The least HBM traffic: every input read once, every output written once."""

    @abc.abstractmethod
    def configurations(self, gpu: gpus.GpuSpec) -> list[str]:
        """Our named configurations for this GPU in tutorial order, then the baselines, each named as the
        benchmark records it (`record_label` of its kernel and variant columns)."""

    @abc.abstractmethod
    def waves(self, shape: tuple[int, ...], gpu: gpus.GpuSpec, configuration: str) -> Waves | None:
        """The configuration's work on the GPU's slots; None where it is not modelled (a vendor library)."""

    def describe(self, configuration: str, gpu: gpus.GpuSpec) -> str:
        """One line: what the configuration is made of on this GPU."""
        return ""

    def references(self, shape: tuple[int, ...], gpu: gpus.GpuSpec) -> list[Reference]:
        """Published latencies of exactly this shape on this GPU (other people's kernels)."""
        return []

    def measure(self, shape: tuple[int, ...], configuration: str) -> float | None:
        """Median ms of the configuration timed now on this machine's GPU; None when it cannot be run here."""
        return None


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


# --------------------------------------------------------------------------------------------- results

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

    def summary(self) -> str:
        lines = [f"{self.label} ({self.gpu.sm_count} SMs).", f"Roofline at datasheet peaks: {self.roofline}."]
        groups: dict[Waves, list[str]] = {}
        for r in self.rows:
            if r.waves is not None:
                groups.setdefault(r.waves, []).append(r.name)
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


# ------------------------------------------------------------------------------------------------- figures

STYLE = {"predicted": dict(fill=False, edgecolor="0.3", hatch="//", linewidth=0.8),
         "recorded": dict(color="tab:blue"), "recorded (baseline)": dict(color="0.6"),
         "published": dict(color="tab:orange"), "live": dict(color="tab:red")}
VIEWS = ("ms", "roofline")


def _value(ms: float | None, result: Result, view: str) -> float | None:
    """ms, or in the roofline view the fraction of the bound it reaches (1.0: at the roofline)."""
    if ms is None:
        return None
    return ms if view == "ms" else result.roofline.ms / ms


def _check_view(view: str) -> None:
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}, got {view!r}")


def _latency_panel(result: Result, ax, view: str) -> None:
    """Per row up to three bars: the prediction as a hatched outline, the recorded number solid (ours blue, a
    baseline grey, a published one orange), a live timing red; each value written at its end."""
    rows = result.rows
    values = [v for r in rows for v in (_value(r.predicted_ms, result, view), _value(r.recorded_ms, result, view),
                                        _value(r.live_ms, result, view)) if v]
    log = bool(view == "ms" and values and max(values) / min(values) >= 10)
    base = min(values) / 2 if log else 0.0
    seen = set()
    height = 0.26
    for i, r in enumerate(rows):
        recorded_kind = {"ours": "recorded", "baseline": "recorded (baseline)", "recorded": "recorded (baseline)",
                         "reference": "published"}[r.origin]
        bars = [(kind, _value(ms, result, view)) for kind, ms in
                (("predicted", r.predicted_ms), (recorded_kind, r.recorded_ms), ("live", r.live_ms))]
        bars = [(kind, v) for kind, v in bars if v is not None]
        if not bars:
            ax.text(base, i, "  not modelled, not measured", va="center", fontsize=7, color="0.4")
        for j, (kind, v) in enumerate(bars):
            y = i + (j - (len(bars) - 1) / 2) * height
            ax.barh(y, v - base, left=base, height=height * 0.92, label=None if kind in seen else kind,
                    **STYLE[kind])
            seen.add(kind)
            ax.annotate(f"{v:.3g}", (v, y), xytext=(2, 0), textcoords="offset points", va="center", fontsize=6,
                        color="0.25")
    if view == "ms":
        ax.axvline(result.roofline.ms, color="k", ls="--", lw=1,
                   label=f"roofline {result.roofline.ms * 1e3:.1f} us ({result.roofline.bound}-bound)")
        if log:
            ax.set_xscale("log")
        ax.set_xlabel("ms, log axis (shorter is faster)" if log else "ms (shorter is faster)")
    else:
        ax.axvline(1.0, color="k", ls="--", lw=1, label="the roofline")
        ax.set_xlim(0, 1.1)
        ax.set_xlabel("fraction of the roofline reached (longer is faster)")
    star = "\u2605 "
    ax.set_yticks(range(len(rows)), [(star if r.name == result.winner else "") + r.name for r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(True, axis="x", which="both", alpha=0.25)
    ax.set_title(f"latency per configuration ({star}winner: {result.winner_basis})", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def _sources(result: Result) -> str:
    parts = [f"predicted: {result.problem.model} at datasheet peaks (a model, not a measurement)"]
    if result.run:
        parts.append(f"recorded: {result.run}")
    refs = sorted({r.recorded_in for r in result.rows if r.origin == "reference"})
    if refs:
        parts.append("published: " + "; ".join(refs))
    if any(r.live_ms is not None for r in result.rows):
        parts.append("live: timed now on this machine")
    return ". ".join(parts)


def distinct_waves(result: Result) -> dict[str, Waves]:
    """The different tilings among the rows, each under the names of the configurations that share it."""
    groups: dict[Waves, list[str]] = {}
    for r in result.rows:
        if r.waves is not None:
            groups.setdefault(r.waves, []).append(r.name)
    return {", ".join(names): w for w, names in groups.items()}


MERGE_ABOVE = 4000     # items: beyond this a wave picture draws each slot's back-to-back items of one kind as one bar


def _merged(gantt: list[list[tuple[float, float, str]]]) -> list[list[tuple[float, float, str]]]:
    """Each slot's touching items of one label as one bar: the same picture, drawn in slots x kinds bars."""
    out = []
    for row in gantt:
        merged: list[tuple[float, float, str]] = []
        for start, dur, label in row:
            if merged and merged[-1][2] == label and abs(merged[-1][0] + merged[-1][1] - start) < 1e-9:
                s0, d0, _ = merged[-1]
                merged[-1] = (s0, d0 + dur, label)
            else:
                merged.append((start, dur, label))
        out.append(merged)
    return out


def figure(result: Result, *, view: str = "ms", max_wave_panels: int = 3):
    """Above, the wave picture of each distinct tiling (at most `max_wave_panels`); below, every row's
    latency (`view="ms"`, a log axis when the bars span a factor of 10) or its fraction of the roofline
    (`view="roofline"`). Predicted, recorded, published and live numbers are told apart by style."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    from workbook import plots

    _check_view(view)
    tilings = list(distinct_waves(result).items())
    shown = tilings[:max_wave_panels]
    top = 3.4 if shown else 0.0
    fig = plt.figure(figsize=(14.0, top + 0.42 * len(result.rows) + 2.2), layout="constrained")
    grid = fig.add_gridspec(2 if shown else 1, max(1, len(shown)),
                            height_ratios=[top, 0.42 * len(result.rows) + 1.6] if shown else None)
    for i, (names, w) in enumerate(shown):
        ax = fig.add_subplot(grid[0, i])
        gantt = w.gantt()
        plots.wave_occupancy(_merged(gantt) if w.items > MERGE_ABOVE else gantt, ax=ax, slot_label=w.slot,
                             source="the wave model, not a measurement")
        ax.set_title(textwrap.fill(f"{names}: {w.describe()}", 70), fontsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
        ax.get_legend().remove()
    ax = fig.add_subplot(grid[-1, :])
    _latency_panel(result, ax, view)
    plots.caption(ax, _sources(result))
    more = f" ({len(tilings) - len(shown)} more tilings, not drawn)" if 0 < len(shown) < len(tilings) else ""
    fig.suptitle(result.label + more, fontsize=11)
    return fig


def sweep_figure(sweep: Sweep, *, view: str = "ms"):
    """Each configuration's latency (log axis) or fraction of the roofline across the swept dimension: one
    colour per configuration; predicted dashed, recorded solid with dots, published dotted with squares,
    live as diamonds; the roofline black in the ms view."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from workbook import plots

    _check_view(view)
    xs = sweep.values
    names = list(dict.fromkeys(r.name for res in sweep.results for r in res.rows))
    colours = dict(zip(names, plots.distinct_colours(len(names))))
    fig, ax = plt.subplots(figsize=(9.5, 5.0), layout="constrained")
    for name in names:
        for key, style in (("predicted_ms", dict(ls="--", lw=1.2)), ("recorded_ms", dict(ls="-", marker="o", ms=4)),
                           ("live_ms", dict(ls="", marker="D", ms=6))):
            pts = [(x, _value(getattr(row, key), res, view)) for x, res in zip(xs, sweep.results)
                   for row in res.rows if row.name == name and getattr(row, key) is not None]
            if pts:
                ref = key == "recorded_ms" and any(r.origin == "reference" for res in sweep.results
                                                   for r in res.rows if r.name == name)
                if ref:
                    style = dict(ls=":", marker="s", ms=4)
                ax.plot(*zip(*pts), color=colours[name], **style)
    if view == "ms":
        ax.plot(xs, [r.roofline.ms for r in sweep.results], color="k", ls=":", lw=1.5)
        ax.set_yscale("log")
        ax.set_ylabel("ms, log axis")
    else:
        ax.axhline(1.0, color="k", ls=":", lw=1.5)
        ax.set_ylim(0, 1.08)
        ax.set_ylabel("fraction of the roofline reached")
    if len(xs) > 1 and max(xs) / min(xs) >= 4:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xticks(xs, [f"{x:,}" for x in xs], rotation=30 if len(xs) > 6 else 0, fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel(sweep.dim)
    ax.grid(True, alpha=0.3)
    kinds = [Line2D([], [], color="0.3", ls="--", label="predicted"),
             Line2D([], [], color="0.3", marker="o", label="recorded"),
             Line2D([], [], color="0.3", ls=":", marker="s", label="published"),
             Line2D([], [], color="0.3", ls="", marker="D", label="live"),
             Line2D([], [], color="k", ls=":", lw=1.5, label="roofline")]
    first = ax.legend(handles=kinds, fontsize=7, loc="upper left", frameon=False, title="kind", title_fontsize=7)
    ax.add_artist(first)
    ax.legend(handles=[Line2D([], [], color=c, lw=3, label=n) for n, c in colours.items()], fontsize=6,
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, title="configuration", title_fontsize=7)
    fixed = ", ".join(f"{d.name}={v:,}" for d, v in zip(sweep.problem.dims, sweep.results[0].shape)
                      if d.name != sweep.dim)
    ax.set_title(f"{sweep.problem.name} on {sweep.gpu.name}: {sweep.dim} swept at {fixed}", fontsize=10)
    runs = sweep.runs
    src = [f"predicted: {sweep.problem.model} (a model)"]
    if runs:
        src.append("recorded: " + ("; ".join(runs) if len(runs) <= 3 else f"{len(runs)} runs, e.g. {runs[-1]}"))
    plots.caption(ax, ". ".join(src))
    return fig


# ---------------------------------------------------------------------------------------------------- UI

def build_ui(explorers: Sequence[Explorer], *, gpus_offered: Sequence[str] | None = None):
    """ipywidgets: the problem, its shape, the GPU and the configurations; one shape or a sweep of one
    dimension; milliseconds on a log axis or the fraction of the roofline; live timing where a GPU of the
    chosen kind is here. Out come the summary, the table and the figure. Invalid input prints its ValueError
    as a message, never a traceback. Returns the top widget (`.children` in the order built)."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    by_name = {e.problem.name: e for e in explorers}
    here = gpus.current()
    problem = w.ToggleButtons(options=list(by_name))
    dims = [w.BoundedIntText(layout=w.Layout(width="13em")) for _ in range(3)]
    gpu = w.Dropdown(description="GPU")
    chosen = w.SelectMultiple(rows=6, description="configs", layout=w.Layout(width="38em"))
    mode = w.ToggleButtons(options=[("one shape", "one"), ("sweep", "sweep")])
    sweep_dim = w.Dropdown(description="sweep", layout=w.Layout(width="12em"))
    sweep_from = w.BoundedIntText(description="from", layout=w.Layout(width="13em"))
    sweep_to = w.BoundedIntText(description="to", layout=w.Layout(width="13em"))
    points = w.BoundedIntText(value=6, min=2, max=16, description="points", layout=w.Layout(width="10em"))
    view = w.ToggleButtons(options=[("ms, log axis", "ms"), ("fraction of roofline", "roofline")])
    live = w.Checkbox(value=here is not None, description="time live", disabled=here is None)
    go = w.Button(description="explore", button_style="primary")
    out = w.Output()

    def explorer() -> Explorer:
        return by_name[problem.value]

    def set_problem(*_):
        p = explorer().problem
        for box, d in zip(dims, p.dims):
            box.min, box.max = 1, d.high
            box.description, box.value, box.step = d.name, d.default, d.multiple
        offered = [((f"this GPU: {here.name}" if here is not None and here.key == g else gpus.get(g).name), g)
                   for g in (gpus_offered or p.gpus)]
        offered.sort(key=lambda option: not option[0].startswith("this GPU"))
        gpu.options = offered
        gpu.value = offered[0][1]
        sweep_dim.options = [d.name for d in p.dims]
        sweep_dim.value = p.dims[-1].name
        set_sweep()
        set_configurations()

    def set_sweep(*_):
        d = next((d for d in explorer().problem.dims if d.name == sweep_dim.value), None)
        if d is not None:            # None while the options are being replaced
            for box, v in ((sweep_from, d.low), (sweep_to, d.high)):
                box.min, box.max, box.value = 1, d.high, v

    def set_configurations(*_):
        if gpu.value is None:        # while the options are being replaced
            return
        options = list(explorer().problem.configurations(gpus.get(gpu.value)))
        chosen.options, chosen.value = options, tuple(options)

    def run(*_):
        out.clear_output()
        with out:
            try:
                ex, shape = explorer(), [b.value for b in dims]
                if mode.value == "one":
                    result = ex.explore(shape, gpu.value, list(chosen.value), live=live.value)
                    print(result.summary())
                    display(result.table())
                    fig = figure(result, view=view.value)
                else:
                    d = next(d for d in ex.problem.dims if d.name == sweep_dim.value)
                    values = d.values(sweep_from.value, sweep_to.value, points.value)
                    result = ex.sweep(shape, d.name, values, gpu.value, list(chosen.value), live=live.value)
                    print("\n".join(result.notes))
                    display(result.table()[[d.name, "configuration", "ms", "kind", "% of roofline"]])
                    fig = sweep_figure(result, view=view.value)
            except ValueError as err:
                print(f"Cannot explore this: {err}")
                return
            display(fig)
            plt.close(fig)

    problem.observe(set_problem, names="value")
    gpu.observe(set_configurations, names="value")
    sweep_dim.observe(set_sweep, names="value")
    go.on_click(run)
    set_problem()
    return w.VBox([problem, w.HBox(dims), w.HBox([gpu, chosen]), w.HBox([mode, sweep_dim, sweep_from, sweep_to, points]),
                   w.HBox([view, live, go]), out])
