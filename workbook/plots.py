"""The figures of the workbook, each one function that returns a matplotlib Figure.

    latency_vs_shape(df, x="K", hue="variant", source="data/measured/h200/<table>.csv")
    speedup_bars(labels, pcts, geomean_pct=7.77, title="PR vs main", source="data/pr/<table>.csv, their B200")
    wave_occupancy(256, slots=74, slot_label="CTA pair")                   # equal tiles, round-robin
    wave_occupancy([[(0, 1, "256 wide"), (1, 0.75, "192 wide")], ...])      # a Gantt chart per slot
    dumbbell(labels, {"before": ms0, "after": ms1}, source=...)            # one row per case, a marker per series
    grouped_bars(frame, source=...)                                          # rows = groups, columns = bars

Every figure carries its data source in a small grey caption under the axes, so that a picture
copied out of a notebook still says which machine and file (or publication) its numbers came from.
Each function draws into `ax` if given (to compose panels) or into a new figure, and works on a
headless machine (the Agg backend). Nothing here knows what the numbers measure.
"""
from __future__ import annotations

import math
import numbers
import textwrap
from typing import Any, Sequence

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from workbook.timing import geomean_speedup_pct

AXIS_LABELS = {
    "ms_median": "median latency (ms)",
    "ms_min": "fastest call (ms)",
    "ms_max": "slowest call (ms)",
    "tflops": "throughput (TFLOP/s)",
    "match_rate": "match rate vs reference",
}
GAIN, LOSS, IDLE = "#2b7bba", "#c44e52", "#9a9a9a"


def new_axes(ax, size: tuple[float, float]) -> tuple[Figure, Any]:
    if ax is None:
        fig, ax = plt.subplots(figsize=size, layout="constrained")
        return fig, ax
    return ax.figure, ax


def caption(ax, source: str, *, below: float = 4) -> None:
    """A small grey 'Source: ...' line under the axes (below the x label), right-aligned, wrapped to the axes'
    width so that a long provenance never squeezes the plot. `below`: extra points of offset."""
    fig = ax.figure
    width_in = fig.get_figwidth() * ax.get_position().width
    chars = max(40, int(width_in * 72 / (0.55 * 8.3)))     # x-small is ~8.3 pt; a glyph is ~0.55 em wide
    text = textwrap.fill(f"Source: {source}", width=chars, break_long_words=False, break_on_hyphens=False)
    ax.annotate(text, xy=(1.0, 0.0), xycoords=("axes fraction", ax.xaxis.label),
                xytext=(0, -below), textcoords="offset points", ha="right", va="top",
                fontsize="x-small", color="0.4", annotation_clip=False)



def require_source(source: Any) -> str:
    if not isinstance(source, str) or not source.strip():
        raise ValueError("source= must say where the numbers come from, e.g. "
                         "'data/measured/h200/<table>.csv' or 'data/pr/<table>.csv, the PR author's B200'")
    return source


def _spans_decades(values: Sequence[float]) -> bool:
    vals = [float(v) for v in values]
    return bool(vals) and min(vals) > 0 and max(vals) / min(vals) >= 10


def _plain(v: float, _pos=None) -> str:
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def latency_vs_shape(df: pd.DataFrame, x: str, y: str = "ms_median", hue: str | Sequence[str] = "kernel", *,
                     ax=None, title: str | None = None, source: str, logx: bool | None = None,
                     logy: bool | None = None, ylabel: str | None = None) -> Figure:
    """One line per `hue` group (a column, or several joined with ' / '), `y` against the shape column `x`.

    Axes go logarithmic by default when their values span a factor of 10 or more. A non-numeric `x`
    (e.g. a shape label "65536x128x4096") is drawn as evenly spaced categories in order of appearance."""
    require_source(source)
    hues = [hue] if isinstance(hue, str) else list(hue)
    if not isinstance(df, pd.DataFrame) or df.empty:
        raise ValueError("latency_vs_shape needs a non-empty DataFrame")
    missing = [c for c in [x, y, *hues] if c not in df.columns]
    if missing:
        raise ValueError(f"column(s) {missing} not in the frame; it has {list(df.columns)}")

    fig, ax = new_axes(ax, (7.0, 4.2))
    numeric_x = pd.api.types.is_numeric_dtype(df[x])
    categories = list(dict.fromkeys(df[x])) if not numeric_x else []
    position = {c: i for i, c in enumerate(categories)}
    keys = df[hues].astype(str).agg(" / ".join, axis=1)
    for key in dict.fromkeys(keys):
        part = df[keys == key]
        if numeric_x:
            part = part.sort_values(x)
            xs = part[x].to_numpy(dtype=float)
        else:
            part = part.assign(_pos=part[x].map(position)).sort_values("_pos")
            xs = part["_pos"].to_numpy()
        ax.plot(xs, part[y].to_numpy(dtype=float), marker="o", markersize=4, linewidth=1.6, label=key)

    if numeric_x:
        if logx if logx is not None else _spans_decades(df[x]):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    else:
        ax.set_xticks(range(len(categories)), [str(c) for c in categories],
                      rotation=30 if len(categories) > 4 else 0, ha="right" if len(categories) > 4 else "center")
    if logy if logy is not None else _spans_decades(df[y]):
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel or AXIS_LABELS.get(y, y))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(title=" / ".join(hues), fontsize="small", title_fontsize="small", frameon=False)
    if title:
        ax.set_title(title)
    caption(ax, source)
    return fig


def speedup_bars(labels: Sequence[str], speedups_pct: Sequence[float], *, geomean_pct: float | None = None,
                 ax=None, title: str, source: str, ylabel: str = "speedup (%)", xlabel: str = "") -> Figure:
    """One bar per case (positive: faster, in blue; negative: slower, in red), its value printed on top,
    and a dashed horizontal line at the geometric-mean speedup, labelled. `geomean_pct=None` computes
    it from the bars (`workbook.timing.geomean_speedup_pct`); pass the stated value to show that one."""
    require_source(source)
    labels = [str(v) for v in labels]
    values = list(speedups_pct)
    if not values or len(labels) != len(values):
        raise ValueError(f"need one label per speedup and at least one; got {len(labels)} labels, "
                         f"{len(values)} speedups")
    if any(isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) for v in values):
        raise ValueError(f"speedups must be finite numbers (percent), got {values}")
    g = geomean_speedup_pct(values) if geomean_pct is None else float(geomean_pct)

    fig, ax = new_axes(ax, (max(6.0, 0.55 * len(values) + 2.0), 4.2))
    colors = [GAIN if v >= 0 else LOSS for v in values]
    bars = ax.bar(range(len(values)), values, color=colors, width=0.7)
    ax.bar_label(bars, labels=[f"{v:+.1f}" for v in values], padding=2, fontsize="x-small")
    ax.axhline(0, color="0.3", linewidth=0.8)
    ax.axhline(g, color="0.15", linestyle="--", linewidth=1.2)
    ax.annotate(f"geomean {g:+.2f}%", xy=(1.0, g), xycoords=("axes fraction", "data"), xytext=(-2, 3),
                textcoords="offset points", ha="right", va="bottom", fontsize="small", color="0.15",
                bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=1.0))
    ax.set_xticks(range(len(labels)), labels, fontsize="x-small")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    top, bottom = max(max(values), g, 0.0), min(min(values), g, 0.0)
    pad = 0.12 * (top - bottom or 1.0)
    ax.set_ylim(bottom - (pad if bottom < 0 else 0), top + pad)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title)
    caption(ax, source)
    return fig


def _schedule(work: Any, slots: int | None) -> list[list[tuple[float, float, str]]]:
    """Normalize the accepted forms of `work` to one list of (start, duration, label) per slot."""
    if isinstance(work, numbers.Integral) and not isinstance(work, bool):
        if not isinstance(slots, numbers.Integral) or isinstance(slots, bool) or slots < 1:
            raise ValueError(f"a count of work items needs slots= (a positive integer), got {slots!r}")
        if work < 1:
            raise ValueError(f"need at least one work item, got {work}")
        # item j runs on slot j % slots in wave j // slots: how a grid of equal CTAs fills the GPU
        return [[(float(w), 1.0, "work item") for w in range(work // slots + (s < work % slots))]
                for s in range(slots)]
    if isinstance(work, (str, bytes)) or not isinstance(work, Sequence) or len(work) == 0:
        raise ValueError("work must be an item count, a list of items per slot, "
                         "or a list (one per slot) of (start, duration[, label]) tuples")
    if slots is not None and slots != len(work):
        raise ValueError(f"slots={slots} but work describes {len(work)} slots")
    if all(isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in work):
        if any(n < 0 for n in work):
            raise ValueError(f"items per slot must be >= 0, got {list(work)}")
        return [[(float(w), 1.0, "work item") for w in range(n)] for n in work]
    out = []
    for s, items in enumerate(work):
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise ValueError(f"slot {s}: expected a list of (start, duration[, label]) tuples, got {items!r}")
        row = []
        for item in items:
            if not isinstance(item, Sequence) or len(item) not in (2, 3):
                raise ValueError(f"slot {s}: {item!r} is not (start, duration[, label])")
            try:
                start, dur = float(item[0]), float(item[1])
            except (TypeError, ValueError):
                raise ValueError(f"slot {s}: {item!r} needs numbers for start and duration") from None
            label = str(item[2]) if len(item) == 3 else "work item"
            if not (math.isfinite(start) and math.isfinite(dur)) or start < 0 or dur <= 0:
                raise ValueError(f"slot {s}: {item!r} needs start >= 0 and duration > 0")
            row.append((start, dur, label))
        row.sort()
        for (s0, d0, _), (s1, _, _) in zip(row, row[1:]):
            if s1 < s0 + d0 - 1e-9:
                raise ValueError(f"slot {s}: items at {s0} and {s1} overlap; a slot runs one item at a time")
        out.append(row)
    if not any(out):
        raise ValueError("work has no items")
    return out


def wave_occupancy(work: Any, *, slots: int | None = None, ax=None, title: str | None = None,
                   source: str = "schedule computed in Python (not a measurement)", slot_label: str = "SM",
                   time_label: str = "time (1 = one full item)") -> Figure:
    """Which slot (SM, CTA pair) is busy when: x is the slot, y is time downward, in units of one full-size
    item's run time.

    `work` is one of
      * an int: that many equal work items, item j on slot j % slots in wave j // slots (needs `slots`);
      * a list of ints: the number of equal items each slot runs back to back;
      * a list, one per slot, of (start, duration[, label]) tuples in wave units: a Gantt chart, so a
        tile 192 wide next to 256-wide ones can be drawn 0.75 long. Items of one label share a colour.
    Busy time is filled; idle time up to the last slot's finish is hatched grey. The title line reports
    the waves (items per slot: 3.46 is three full waves and a last one 46 % full), the makespan (when the
    last slot finishes: 4.00 for those 3.46 waves of equal items) and the fraction of slot-time that is busy."""
    schedule = _schedule(work, slots)
    n_slots = len(schedule)
    makespan = max(st + d for row in schedule for st, d, _ in row)
    busy = sum(d for row in schedule for _, d, _ in row)
    n_items = sum(len(row) for row in schedule)

    fig, ax = new_axes(ax, (min(14.0, max(6.0, 0.09 * n_slots + 4.0)), 3.8))
    width = 0.8 if n_slots <= 40 else 0.9
    by_label: dict[str, list[tuple[int, float, float]]] = {}
    for s, row in enumerate(schedule):
        for st, d, label in row:
            by_label.setdefault(label, []).append((s, st, d))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, items) in enumerate(by_label.items()):
        xs, starts, durs = zip(*items)
        ax.bar(xs, durs, bottom=starts, width=width, color=palette[i % len(palette)],
               edgecolor="white", linewidth=0.8 if n_slots <= 80 else 0.2, label=label)

    gaps = []  # idle stretches: before, between and after each slot's items
    for s, row in enumerate(schedule):
        t = 0.0
        for st, d, _ in row + [(makespan, 0.0, "")]:
            if st - t > 1e-9:
                gaps.append((s, t, st - t))
            t = max(t, st + d)
    if gaps:
        xs, starts, durs = zip(*gaps)
        ax.bar(xs, durs, bottom=starts, width=width, facecolor="#efefef", edgecolor=IDLE, hatch="///",
               linewidth=0.4, label="idle")

    for w in range(1, math.ceil(makespan - 1e-9)):
        ax.axhline(w, color="0.5", linewidth=0.5, linestyle=":")
    ax.set_xlim(-0.6, n_slots - 0.4)
    ax.set_ylim(makespan, 0)
    if n_slots <= 16:
        ax.set_xticks(range(n_slots))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=16))
    ax.set_xlabel(f"{slot_label} index")
    ax.set_ylabel(time_label)
    summary = (f"{n_items} work items on {n_slots} {slot_label}s = {n_items / n_slots:.2f} waves, makespan "
               f"{makespan:.2f}; {slot_label}s busy {busy / (n_slots * makespan):.1%} of the time")
    ax.set_title(f"{title}\n{summary}" if title else summary, fontsize="medium")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)
    caption(ax, source)
    return fig


def distinct_colours(n: int) -> list:
    """`n` colours no two alike: matplotlib's tab10 up to 10, tab20 up to 20, then evenly spaced hues."""
    if n <= 10:
        return list(plt.get_cmap("tab10").colors[:n])
    if n <= 20:
        return list(plt.get_cmap("tab20").colors[:n])
    return [plt.get_cmap("hsv")(i / n) for i in range(n)]


def dumbbell(labels: Sequence[str], series: dict[str, Sequence[float]], *, ax=None, title: str, source: str,
             xlabel: str = "median latency (ms, log scale)") -> Figure:
    """One row per case; each named series a marker, joined by a grey line from the smallest to the largest
    value of the row. The x axis is logarithmic (cases often span a factor of 40 in time); NaN values are
    left out. Pass `ax` of a figure made with `sharex=True` to compare panels on one time axis."""
    require_source(source)
    labels = [str(v) for v in labels]
    if not labels or not series or any(len(v) != len(labels) for v in series.values()):
        raise ValueError(f"need one value per label in every series; got {len(labels)} labels and series of "
                         f"lengths {[len(v) for v in series.values()]}")
    values = pd.DataFrame({name: pd.to_numeric(pd.Series(list(v)), errors="raise") for name, v in series.items()})
    if (values <= 0).any(axis=None):
        raise ValueError("dumbbell values must be positive (a log axis)")
    fig, ax = new_axes(ax, (8.0, 0.35 * len(labels) + 1.8))
    y = list(range(len(labels)))
    ax.hlines(y, values.min(axis=1), values.max(axis=1), color="0.75", lw=3, zorder=1)
    for (name, v), marker, colour in zip(values.items(), "o^sDvP", distinct_colours(len(values.columns))):
        ax.scatter(v, y, label=name, marker=marker, s=36, zorder=2, color=colour)
    ax.set_yticks(y, labels, fontsize="x-small")
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[-1] in "25" else ""))
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="best", frameon=True)
    ax.set_title(title, fontsize="medium")
    caption(ax, source)
    return fig


def grouped_bars(frame: pd.DataFrame, *, ax=None, title: str, source: str, ylabel: str, xlabel: str = "",
                 fmt: str = "%.0f", reference: tuple[float, str] | None = None, legend: str = "right") -> Figure:
    """One group of bars per row of `frame` (its index labels the group), one bar per column, each column its
    own colour (`distinct_colours`: no colour repeats, however many columns), its value printed on top
    (upright beside many bars). `reference=(value, label)` adds a dashed horizontal line, e.g. a datasheet
    peak. `legend`: "right" of the axes or "inside" them (upper left)."""
    require_source(source)
    if not isinstance(frame, pd.DataFrame) or frame.empty:
        raise ValueError("grouped_bars needs a non-empty DataFrame: rows are groups, columns are bars")
    n = len(frame.columns)
    fig, ax = new_axes(ax, (max(7.0, 0.35 * n * len(frame) + 3.0), 4.4))
    width = 0.8 / n
    for i, (name, colour) in enumerate(zip(frame.columns, distinct_colours(n))):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(frame))]
        bars = ax.bar(xs, frame[name].to_numpy(dtype=float), width, label=str(name), color=colour)
        ax.bar_label(bars, fmt=fmt, fontsize="xx-small", padding=1, rotation=90 if n > 5 else 0)
    if reference is not None:
        ax.axhline(reference[0], color="k", ls="--", lw=1, label=reference[1])
    ax.set_xticks(range(len(frame)), [str(v) for v in frame.index])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)
    if legend == "inside":
        ax.set_ylim(top=ax.get_ylim()[1] * 1.25)          # room above the bars
        ax.legend(fontsize="x-small", loc="upper left", frameon=False, ncols=2)
    else:
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1, 1), frameon=False)
    caption(ax, source)
    return fig
