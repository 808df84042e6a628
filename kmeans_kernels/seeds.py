"""flashlib PR #22 (seeds 000 and 001): its k-means tables, its headline numbers recomputed, and our H200
measurement of the same steps beside them.

    seeds.main_table()          PR #22 vs main on B200, % improvement per shape (seed 000; the same table is in 001)
    seeds.nightly_table()       PR #22 vs nightly on B200, per-shape latencies (seed 000)
    seeds.headlines()           every stated summary number next to the one recomputed from its table
    seeds.nightly_per_shape()   the nightly table's per-shape percentages recomputed from its ms columns
    seeds.ours_step(measured)   our H200: on each seed shape, the step the PR took against our serial scan
    seeds.ours_latencies(measured)   our H200 latencies on the seed shapes, one benchmark run

Paths are stable ids: `ws` (warp-specialized, serial argmin scan), `ilp2` (two-chain argmin),
`norm_broadcast` (register-staged norms, shuffle broadcast), `x_resident`; `PATH_LABELS` gives the PR's
wording, `HOPPER_VARIANTS` the variant of `kmeans_kernels.hopper` that takes the same step.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from workbook import records
from workbook.pr import Headline, table
from workbook.timing import geomean, geomean_speedup_pct

SEED_KMEANS = "000_1326c6fcbc937f5e.txt"
SEED_KMEANS_FIRST = "001_bf66d6344b0f9495.txt"    # the same PR before its follow-up comment
MAIN_CSV, NIGHTLY_CSV = "data/pr/kmeans_pr22_main.csv", "data/pr/kmeans_pr22_nightly.csv"
PATH_LABELS = {"ws": "WS", "ilp2": "ILP2", "norm_broadcast": "Norm broadcast", "x_resident": "X-resident"}
# the Hopper kernel's variant for each path: its baseline scan is `serial`; it has no x_resident
HOPPER_VARIANTS = {"ws": "serial", "ilp2": "ilp2", "norm_broadcast": "norm_broadcast"}
TORCH = ("torch", "matmul_argmin")            # the baseline as kmeans_kernels.bench records it

# The rounding step of each transcribed column: half of it is the most a printed value can be off.
MAIN_PCT_STEP = 0.1       # "5.3%"
NIGHTLY_MS_STEP = 1e-4    # "0.2963" ms, i.e. 0.1 us
NIGHTLY_PCT_STEP = 0.01   # "16.84%"


def main_table() -> pd.DataFrame:
    """N, D, K, main_path, pr_path, improvement_pct, source: 13 shapes, B200, main 81e5dea vs PR e4ce568a."""
    return table("kmeans_pr22_main")


def nightly_table() -> pd.DataFrame:
    """N, D, K, nightly_path, pr_path, nightly_ms, pr_ms, pr_faster_pct, source: the same 13 shapes, B200."""
    return table("kmeans_pr22_nightly")


def shape_labels(df: pd.DataFrame, sep: str = " x ") -> list[str]:
    """'65,536 x 128 x 4,096' for each N, D, K row: the labels of the seed figures."""
    return [sep.join(f"{int(v):,}" for v in (n, d, k)) for n, d, k in zip(df["N"], df["D"], df["K"])]


def main_geomean_improvement() -> Headline:
    """Seed 000: "All 13 affected shapes improved, with a 7.77% geometric-mean speedup"."""
    pct = main_table()["improvement_pct"]
    half = MAIN_PCT_STEP / 2
    return Headline(
        what="k-means PR #22 vs main, geometric-mean improvement", stated=7.77,
        recomputed=geomean_speedup_pct(pct), low=geomean_speedup_pct(pct - half),
        high=geomean_speedup_pct(pct + half), decimals=2, unit="%",
        rounding="the per-shape improvements are printed to 0.1%", source=SEED_KMEANS)


def _nightly_geomean_ms(column: str, what: str, stated: float) -> Headline:
    """One side of seed 000's "geometric-mean latency 0.2641 ms versus 0.3381 ms", recomputed from `column`."""
    ms = nightly_table()[column]
    return Headline(
        what=what, stated=stated, recomputed=geomean(ms),
        low=geomean(ms - NIGHTLY_MS_STEP / 2), high=geomean(ms + NIGHTLY_MS_STEP / 2), decimals=4, unit=" ms",
        rounding="the per-shape latencies are printed to 0.0001 ms (0.1 us)", source=SEED_KMEANS)


def nightly_geomean_ms() -> Headline:
    """Seed 000's nightly side: 0.3381 ms."""
    return _nightly_geomean_ms("nightly_ms", "k-means nightly, geometric-mean latency", 0.3381)


def pr_geomean_ms() -> Headline:
    """Seed 000's PR side: 0.2641 ms."""
    return _nightly_geomean_ms("pr_ms", "k-means PR #22, geometric-mean latency", 0.2641)


def nightly_geomean_speedup() -> Headline:
    """Seed 000: "the PR is 28.05% faster by geometric mean", recomputed from the ms columns.

    Improvement is nightly / PR - 1 per shape, so the geometric mean is geomean(nightly) / geomean(PR) - 1."""
    t = nightly_table()
    h = NIGHTLY_MS_STEP / 2

    def speedup(nightly, pr):
        return (geomean(nightly) / geomean(pr) - 1) * 100

    from_pct_column = geomean_speedup_pct(t["pr_faster_pct"])
    from_stated_geomeans = (nightly_geomean_ms().stated / pr_geomean_ms().stated - 1) * 100
    return Headline(
        what="k-means PR #22 vs nightly, geometric-mean speedup", stated=28.05,
        recomputed=speedup(t["nightly_ms"], t["pr_ms"]),
        low=speedup(t["nightly_ms"] - h, t["pr_ms"] + h), high=speedup(t["nightly_ms"] + h, t["pr_ms"] - h),
        decimals=2, unit="%", rounding="the per-shape latencies are printed to 0.0001 ms (0.1 us)",
        source=SEED_KMEANS,
        note=(f"The geometric mean of the stated per-shape percentages is {from_pct_column:.4f}%, and the ratio of "
              f"the two stated geometric-mean latencies gives {from_stated_geomeans:.4f}%: summaries of rounded "
              f"numbers drift by a few hundredths of a point"))


def headlines() -> list[Headline]:
    """Every summary number of the k-means seeds, recomputed."""
    return [main_geomean_improvement(), nightly_geomean_ms(), pr_geomean_ms(), nightly_geomean_speedup()]


def nightly_per_shape() -> pd.DataFrame:
    """The nightly table plus `recomputed_pct` = (nightly_ms / pr_ms - 1) * 100, the range the printed
    latencies allow for it (`recomputed_low_pct`, `recomputed_high_pct`: each ms anywhere within its 0.1 us
    rounding), `discrepancy_pct` = recomputed - stated in percentage points, and `consistent`: whether the
    stated percentage (itself rounded to 0.01) lies in that range."""
    t = nightly_table()
    h = NIGHTLY_MS_STEP / 2
    t["recomputed_pct"] = (t["nightly_ms"] / t["pr_ms"] - 1) * 100
    t["recomputed_low_pct"] = ((t["nightly_ms"] - h) / (t["pr_ms"] + h) - 1) * 100
    t["recomputed_high_pct"] = ((t["nightly_ms"] + h) / (t["pr_ms"] - h) - 1) * 100
    t["discrepancy_pct"] = t["recomputed_pct"] - t["pr_faster_pct"]
    half_pct = NIGHTLY_PCT_STEP / 2
    t["consistent"] = ((t["recomputed_low_pct"] - half_pct <= t["pr_faster_pct"])
                       & (t["pr_faster_pct"] <= t["recomputed_high_pct"] + half_pct))
    return t


@dataclass(frozen=True)
class Discrepancy:
    """How far the nightly table's stated per-shape percentages are from its own latencies."""
    max_abs_pct: float                 # percentage points
    at: tuple[int, int, int]           # the (N, D, K) where it is largest
    max_uncertainty_pct: float         # the widest +- range that 0.1 us rounding leaves on one percentage
    all_consistent: bool

    @property
    def explanation(self) -> str:
        n, d, k = self.at
        if self.all_consistent:
            tail = ("every stated percentage lies within what the printed latencies allow: printed to 0.1 us, "
                    f"they leave a percentage uncertain by up to +-{self.max_uncertainty_pct:.2f} points "
                    "(the shortest latencies, about 0.04 ms, the most)")
        else:
            tail = "some stated percentages cannot come from the printed latencies"
        return (f"per-shape speedups recomputed from the ms columns differ from the stated ones by at most "
                f"{self.max_abs_pct:.4f} percentage points (N={n:,}, D={d}, K={k:,}); {tail}")


def nightly_per_shape_discrepancy() -> Discrepancy:
    t = nightly_per_shape()
    i = t["discrepancy_pct"].abs().idxmax()
    return Discrepancy(max_abs_pct=float(abs(t.loc[i, "discrepancy_pct"])),
                       at=(int(t.loc[i, "N"]), int(t.loc[i, "D"]), int(t.loc[i, "K"])),
                       max_uncertainty_pct=float(((t["recomputed_high_pct"] - t["recomputed_low_pct"]) / 2).max()),
                       all_consistent=bool(t["consistent"].all()))


# ------------------------------------------------------------------------------ our H200 beside the PR

def _at(run: pd.DataFrame, n: int, d: int, k: int, kernel: str, variant: str) -> float | None:
    hit = run[(run.N == n) & (run.D == d) & (run.K == k) & (run.kernel == kernel) & (run.variant == variant)]
    return float(hit["ms_median"].iloc[-1]) if len(hit) else None


def _seed_run(measured: pd.DataFrame, needed) -> pd.DataFrame:
    """The newest benchmark run (one `date`) of `measured` that timed every (kernel, variant) of `needed` on
    all 13 seed shapes: numbers compared from one process, as the method asks; empty if none did."""
    if measured.empty or not {"kernel", "variant", "N", "D", "K", "date"} <= set(measured.columns):
        return measured.iloc[0:0]
    shapes = main_table()[["N", "D", "K"]]
    on_seed = measured.merge(shapes, on=["N", "D", "K"])
    return records.last_run(on_seed, needed, min_shapes=len(shapes))


def ours_step(measured: pd.DataFrame) -> pd.DataFrame:
    """Per seed shape, our H200 time of `serial` and of the step the PR took there (`ilp2` or `norm_broadcast`),
    and the improvement in percent, from the newest run that timed the three steps on every seed shape.
    Columns N, D, K, step, serial_ms, step_ms, improvement_pct, commit, date; empty if no run did."""
    run = _seed_run(measured, [("ours", v) for v in ("serial", "ilp2", "norm_broadcast")])
    columns = ["N", "D", "K", "step", "serial_ms", "step_ms", "improvement_pct", "commit", "date"]
    if run.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for r in main_table().itertuples():
        step = HOPPER_VARIANTS[r.pr_path]
        serial, mine = _at(run, r.N, r.D, r.K, "ours", "serial"), _at(run, r.N, r.D, r.K, "ours", step)
        if serial is not None and mine is not None:
            rows.append(dict(N=r.N, D=r.D, K=r.K, step=step, serial_ms=serial, step_ms=mine,
                             improvement_pct=(serial / mine - 1) * 100, commit=run["commit"].iloc[0],
                             date=run["date"].iloc[0]))
    return pd.DataFrame(rows, columns=columns)


def ours_latencies(measured: pd.DataFrame) -> tuple[dict[str, list[float]], pd.DataFrame]:
    """Our H200 latencies (ms) on the seed shapes, in the nightly table's order, from one run: `serial`, the
    step the PR took on each shape, and torch (matmul + argmin). Returns ({series name: ms per shape, NaN where
    missing}, the run's rows); empty dict when no run timed all three on every seed shape."""
    run = _seed_run(measured, [("ours", v) for v in ("serial", "ilp2", "norm_broadcast")] + [TORCH])
    if run.empty:
        return {}, run
    series = {"ours: serial": [], "ours: the PR's step": [], "torch matmul + argmin": []}
    for r in nightly_table().itertuples():
        for name, (kernel, variant) in (("ours: serial", ("ours", "serial")),
                                        ("ours: the PR's step", ("ours", HOPPER_VARIANTS[r.pr_path])),
                                        ("torch matmul + argmin", TORCH)):
            ms = _at(run, r.N, r.D, r.K, kernel, variant)
            series[name].append(float("nan") if ms is None else ms)
    return series, run


def check_geomean(answer) -> str:
    """Notebook 14's exercise: the geometric-mean improvement (%) of the main table's 13 percentages. Says
    whether `answer` is right (to 0.01 points), and if not, the slip it looks like."""
    want = main_geomean_improvement()
    if answer is None:
        return "Not answered yet: compute it from seeds.main_table()['improvement_pct']."
    try:
        got = float(answer)
    except (TypeError, ValueError):
        return f"The answer is one number (percent), got {answer!r}."
    if abs(got - want.recomputed) < 0.01:
        return f"Right: {got:.2f}%, and the PR states {want.stated:.2f}%."
    pct = main_table()["improvement_pct"]
    if abs(got - pct.mean()) < 0.01:
        return ("That is the arithmetic mean of the percentages. The PR's statistic is the geometric mean of the "
                "speed ratios 1 + p/100, minus 1, in percent.")
    if abs(got - (want.recomputed / 100 + 1)) < 1e-4:
        return "That is the geometric-mean ratio itself: subtract 1 and give it in percent."
    return "Not this one. Hint: take the 13 ratios 1 + p/100, their geometric mean, minus 1, times 100."
