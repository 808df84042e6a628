"""The recorded step measurements (data/measured/h200/kmeans_steps.csv), summarised and drawn for the notebooks.

    run, note = results.latest_run()            # the newest benchmark run; note: "recorded data from <file>, ..."
    results.ratios(run, "ours/step2_ilp2")      # per shape: ratio to the previous step with its 95 % interval
    results.versus_floor(run, "ours/step1_serial")   # per shape: time, floor, % of floor, flashlib / this
    results.progression(run)                    # per step: geomean % of flashlib and % of the floor, intervals
    results.plot_progression(table, note)       # the progression figure, latest step last
    results.plot_ratios(run, ["ours/step2_ilp2"], note)   # one point per shape, error bars, no lines

Geometric means of ratios carry a 95 % interval combined from the shapes' intervals in log space (each shape's
half-width / 1.96 taken as its standard error, independent shapes): the benchmark measured every shape in rounds
of its own, so their errors are independent.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kmeans_kernels import floor
from kmeans_kernels.steps import STEPS
from workbook import records

TABLE = "kmeans_steps"
GPU = "h200"
OURS = tuple(f"ours/{s}" for s in STEPS)
PRODUCTION = "ours/auto"
FLASHLIB = "flashlib/cute"
SHAPE = ["N", "D", "K"]
Z95 = 1.959964


def label(name: str) -> str:
    """"ours/step2_ilp2" -> "step2_ilp2"; "ours/auto" -> "production auto"; "flashlib/cute" -> "flashlib cute"."""
    kernel, _, variant = name.partition("/")
    if kernel == "ours":
        return "production auto" if variant == "auto" else variant
    return f"{kernel} {variant}".strip()


def latest_run(df: pd.DataFrame | None = None, *, needed=OURS) -> tuple[pd.DataFrame, str]:
    """(rows of the newest run that measured every contender in `needed`, a sentence saying where they come from).
    Empty rows and a sentence saying so when nothing was recorded yet."""
    source = records.path(GPU, TABLE)
    shown = source.relative_to(records.DATA.parent) if source.is_relative_to(records.DATA.parent) else source
    df = records.read(GPU, TABLE) if df is None else df
    if df.empty or "timing" not in df.columns:
        return df.iloc[0:0], (f"no recorded data in {shown} yet: `python -m kmeans_kernels.steps.bench` on an "
                              "H200 writes it")
    run = records.last_run(df, [tuple(n.split("/", 1)) for n in needed])
    if run.empty:
        return run, f"no run in {shown} measured all of {', '.join(label(n) for n in needed)}"
    first = run.iloc[0]
    return run.copy(), (f"recorded data from {shown}, commit {first.commit}, {first.date} "
                        f"({first.gpu}, {run[SHAPE].drop_duplicates().shape[0]} shapes)")


def _name(run: pd.DataFrame) -> pd.Series:
    return run.kernel + "/" + run.variant


def ratios(run: pd.DataFrame, name: str, timing: str = "kernel", against: str = "vs") -> pd.DataFrame:
    """Per shape: `name`'s ratio to its reference (`against="vs"`: the previous contender, as recorded; or
    "flashlib"), with the interval and the verdict; one row per shape, 3 significant digits."""
    rows = run[(_name(run) == name) & (run.timing == timing)].set_index(SHAPE).sort_index()
    prefix = "ratio" if against == "vs" else f"ratio_{against}"
    out = pd.DataFrame({"ms": rows.ms_median, "ratio": rows[prefix], "lo": rows[f"{prefix}_lo"],
                        "hi": rows[f"{prefix}_hi"]})
    out["verdict"] = np.where(out.hi < 1, "faster", np.where(out.lo > 1, "slower", "noise"))
    if against == "vs":
        out.attrs["vs"] = label(rows.vs.iloc[0]) if len(rows) else ""
    return out


def versus_floor(run: pd.DataFrame, name: str, timing: str = "kernel") -> pd.DataFrame:
    """Per shape: `name`'s median time, the floor (kmeans_kernels.floor), % of the floor, and flashlib's time /
    `name`'s (> 1: `name` is faster) where flashlib was measured."""
    rows = run[(_name(run) == name) & (run.timing == timing)].set_index(SHAPE).sort_index()
    out = pd.DataFrame({"ms": rows.ms_median,
                        "floor ms": [floor.floor(int(n), int(d), int(k)).ms for n, d, k in rows.index]},
                       index=rows.index)
    out["% of floor"] = 100 * out["floor ms"] / out["ms"]
    if "ratio_flashlib" in rows and rows.ratio_flashlib.notna().all():
        out["flashlib / this"] = 1 / rows.ratio_flashlib
    return out


def geomean_ci(values, lo, hi) -> tuple[float, float, float]:
    """(geomean, lo, hi) of positive values with per-value 95 % intervals, combined in log space."""
    v, l, h = (np.log(np.asarray(a, dtype=float)) for a in (values, lo, hi))
    if v.size == 0:
        raise ValueError("geomean of no values")
    se = np.sqrt(np.sum(((h - l) / (2 * Z95)) ** 2)) / v.size
    centre = v.mean()
    return math.exp(centre), math.exp(centre - Z95 * se), math.exp(centre + Z95 * se)


def progression(run: pd.DataFrame, timing: str = "kernel") -> pd.DataFrame:
    """Per contender, over the run's shapes: geomean % of flashlib's speed (flashlib time / ours x 100, > 100: faster
    than flashlib) and % of the floor (floor time / ours x 100), each with its 95 % interval; the geomean ms."""
    rows = []
    names = [n for n in (*OURS, PRODUCTION) if (_name(run) == n).any()]
    has_flashlib = "ratio_flashlib" in run.columns and run.ratio_flashlib.notna().any()
    for name in names:
        r = run[(_name(run) == name) & (run.timing == timing)]
        fl = [floor.floor(int(a.N), int(a.D), int(a.K)).ms for a in r.itertuples()]
        g_ms = geomean_ci(r.ms_median, r.ms_lo, r.ms_hi)
        g_floor = geomean_ci(np.divide(fl, r.ms_median), np.divide(fl, r.ms_hi), np.divide(fl, r.ms_lo))
        row = {"contender": label(name), "geomean ms": g_ms[0], "% of floor": 100 * g_floor[0],
               "% of floor lo": 100 * g_floor[1], "% of floor hi": 100 * g_floor[2], "shapes": len(r)}
        if has_flashlib and r.ratio_flashlib.notna().all():
            g = geomean_ci(1 / r.ratio_flashlib, 1 / r.ratio_flashlib_hi, 1 / r.ratio_flashlib_lo)
            row.update({"% of flashlib": 100 * g[0], "% of flashlib lo": 100 * g[1], "% of flashlib hi": 100 * g[2]})
        rows.append(row)
    return pd.DataFrame(rows).set_index("contender") if rows else pd.DataFrame()


def plot_progression(table: pd.DataFrame, note: str, ax=None, timing: str = "kernel"):
    """Bars of every step as % of flashlib and of the floor, with error bars, latest step last; the production
    kernel as a dashed line. Returns the figure."""
    import matplotlib.pyplot as plt
    from workbook import plots
    panels = [c for c in ("% of flashlib", "% of floor") if c in table.columns]
    if ax is None:
        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), layout="constrained", squeeze=False)
        axes = list(axes[0])
    else:
        axes, fig = [ax], ax.figure
    steps = [s for s in table.index if s != label(PRODUCTION)]
    for a, col in zip(axes, panels):
        vals = table.loc[steps, col]
        err = np.vstack([vals - table.loc[steps, f"{col} lo"], table.loc[steps, f"{col} hi"] - vals])
        a.bar(range(len(steps)), vals, yerr=err, capsize=4, color=["#9ecae1"] * (len(steps) - 1) + ["#3182bd"])
        for i, v in enumerate(vals):
            a.text(i, v, f"{v:.3g}%", ha="center", va="bottom", fontsize=8)
        if label(PRODUCTION) in table.index:
            a.axhline(table.loc[label(PRODUCTION), col], color="#dd8452", ls="--", lw=1, label="production auto")
            a.legend(frameon=False, fontsize="small", loc="upper left")
        if col == "% of flashlib":
            a.axhline(100, color="0.3", lw=0.8)
        a.set_xticks(range(len(steps)), steps, rotation=15, fontsize="small")
        a.set_ylabel(f"{col} ({timing} time, geomean)")
        a.spines[["top", "right"]].set_visible(False)
    axes[0].set_title("The k-means steps on the H200, 95 % intervals", fontsize="medium", loc="left")
    plots.caption(axes[0], note)
    return fig


def plot_ratios(run: pd.DataFrame, names, note: str, timing: str = "kernel", ax=None):
    """One point per shape (and contender) for the ratio to the previous step, with its 95 % interval: shapes are
    categories, so no line joins them. Returns the figure."""
    import matplotlib.pyplot as plt
    from kmeans_kernels import seeds as pr
    from workbook import plots
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 3.6), layout="constrained")
    else:
        fig = ax.figure
    for i, name in enumerate(names):
        t = ratios(run, name, timing)
        x = np.arange(len(t)) + (i - (len(names) - 1) / 2) * 0.15
        ax.errorbar(x, t.ratio, yerr=np.vstack([t.ratio - t.lo, t.hi - t.ratio]), fmt="o", capsize=3, ms=4,
                    label=f"{label(name)} / {t.attrs.get('vs', '')}")
    shapes = ratios(run, names[0], timing).reset_index()
    ax.axhline(1, color="0.3", lw=0.8)
    ax.set_xticks(range(len(shapes)), pr.shape_labels(shapes), rotation=30, ha="right", fontsize="small")
    ax.set_ylabel(f"{timing} time ratio (< 1: faster)")
    ax.set_xlabel("N x D x K")
    ax.legend(frameon=False, fontsize="small")
    ax.spines[["top", "right"]].set_visible(False)
    plots.caption(ax, note)
    return fig


def table_3sig(df: pd.DataFrame):
    """A Styler that prints every number with 3 significant digits."""
    return df.style.format(lambda v: f"{v:.3g}" if isinstance(v, (int, float, np.floating)) else v)
