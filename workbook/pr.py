"""The seed PRs' tables, transcribed into data/pr/, and their headline numbers recomputed from them.

    pr.main_table()          flashlib PR #22, main vs PR on B200 (seed 000; the same table is in seed 001)
    pr.nightly_table()       flashlib PR #22, nightly vs PR on B200, per-shape latencies (seed 000)
    pr.gemm_table()          cuda-oxide gemm_sol_final, TFLOP/s and us against cuBLASLt on B200 (seed 004)
    pr.headlines()           every stated summary number next to the one recomputed from its table
    pr.nightly_per_shape()   the nightly table's per-shape percentages recomputed from its ms columns
    pr.gemm_per_size()       the GEMM table's TFLOP/s and "vs top-8" recomputed from its us columns

A PR states its summaries from its raw measurements; the tables it shows are rounded. Recomputing
from the rounded table therefore need not give the stated digits back. Each `Headline` carries the
range of values that the rounded table allows (every entry moved anywhere within its rounding
step), so "the stated number is consistent with the table" is checked, not assumed, and where the
recomputed digits differ, `explanation` says by how much and why.

Paths are stable ids: `ws` (warp-specialized), `ilp2` (two-chain argmin), `norm_broadcast`
(register-staged norms, shuffle broadcast), `x_resident`; `PATH_LABELS` gives the PR's wording.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import pandas as pd

from workbook import DATA
from workbook.timing import geomean, geomean_speedup_pct

PR_DATA = DATA / "pr"
SEED_KMEANS = "000_1326c6fcbc937f5e.txt"
SEED_GEMM = "004_eb05cde9e86beab2.txt"
PATH_LABELS = {"ws": "WS", "ilp2": "ILP2", "norm_broadcast": "Norm broadcast", "x_resident": "X-resident"}

# The rounding step of each transcribed column: half of it is the most a printed value can be off.
MAIN_PCT_STEP = 0.1       # "5.3%"
NIGHTLY_MS_STEP = 1e-4    # "0.2963" ms, i.e. 0.1 us
NIGHTLY_PCT_STEP = 0.01   # "16.84%"
GEMM_TFLOPS_STEP = 0.1    # "1857.5 TFLOPS"
GEMM_US_STEP = 0.01       # "73.99 us"
GEMM_PCT_STEP = 0.01      # "100.97%"


@functools.lru_cache(maxsize=None)
def _load(name: str) -> pd.DataFrame:
    return pd.read_csv(PR_DATA / name)


def main_table() -> pd.DataFrame:
    """N, D, K, main_path, pr_path, improvement_pct, source: 13 shapes, B200, main 81e5dea vs PR e4ce568a."""
    return _load("kmeans_pr22_main.csv").copy()


def nightly_table() -> pd.DataFrame:
    """N, D, K, nightly_path, pr_path, nightly_ms, pr_ms, pr_faster_pct, source: the same 13 shapes, B200."""
    return _load("kmeans_pr22_nightly.csv").copy()


def gemm_table() -> pd.DataFrame:
    """size (M = N = K), before/after/cuBLASLt top-8 TFLOP/s and us, cuBLASLt exhaustive TFLOP/s, vs_top8_pct.

    The PR's bar chart prints cuBLASLt top-8 at 8192^3 as 2.080 PFLOP/s where its table says 2077.2
    TFLOP/s; the table (which also gives the time) is what is transcribed here."""
    return _load("gemm_sol_final.csv").copy()


def shape_labels(df: pd.DataFrame, sep: str = " x ") -> list[str]:
    """'65,536 x 128 x 4,096' for each N, D, K row: the labels of the seed figures."""
    return [sep.join(f"{int(v):,}" for v in (n, d, k)) for n, d, k in zip(df["N"], df["D"], df["K"])]


@dataclass(frozen=True)
class Headline:
    """A summary number as the PR states it, and as its own table gives it back."""
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
        span = (f"{self.low:.{self.decimals + 2}f}{self.unit} .. {self.high:.{self.decimals + 2}f}{self.unit}")
        verdict = ("so the stated value is consistent with the table: it was computed before rounding" if self.consistent else
                   "and the stated value lies OUTSIDE that range: the table and the summary disagree")
        by = f"{self.difference:+.{self.decimals + 2}f}" + (" percentage points" if self.unit == "%" else self.unit)
        return (f"recomputed {got} differs from the stated {self.stated:.{self.decimals}f}{self.unit} by {by}; "
                f"{self.rounding}, which allows any value in {span}, {verdict}" + (f". {self.note}" if self.note else ""))

    def __str__(self) -> str:
        return f"{self.what}: {self.explanation}"


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


def gemm_flops(size: int) -> float:
    """Operations of an M = N = K = size GEMM: one multiply and one add per term."""
    return 2.0 * float(size) ** 3


def gemm_per_size() -> pd.DataFrame:
    """The GEMM table plus, for each of before / after / cublaslt_top8: TFLOP/s recomputed from its us column
    (`<side>_tflops_from_us`) and whether the two agree within their printed rounding
    (`<side>_consistent`); and the after / top-8 ratio recomputed from the TFLOP/s columns
    (`vs_top8_pct_recomputed`) with the TFLOP/s margin over top-8 (`margin_over_top8_tflops`)."""
    t = gemm_table()
    flops = t["size"].map(gemm_flops)
    for side in ("before", "after", "cublaslt_top8"):
        us = t[f"{side}_us"]
        t[f"{side}_tflops_from_us"] = flops / (us * 1e-6) / 1e12
        slowest = flops / ((us + GEMM_US_STEP / 2) * 1e-6) / 1e12
        fastest = flops / ((us - GEMM_US_STEP / 2) * 1e-6) / 1e12
        stated = t[f"{side}_tflops"]
        t[f"{side}_consistent"] = ((slowest - GEMM_TFLOPS_STEP / 2 <= stated)
                                   & (stated <= fastest + GEMM_TFLOPS_STEP / 2))
    t["vs_top8_pct_recomputed"] = t["after_tflops"] / t["cublaslt_top8_tflops"] * 100
    t["margin_over_top8_tflops"] = t["after_tflops"] - t["cublaslt_top8_tflops"]
    return t


def gemm_inconsistencies() -> list[str]:
    """In words, every GEMM table entry whose TFLOP/s and time do not describe the same run."""
    t = gemm_per_size()
    out = []
    for _, r in t.iterrows():
        for side in ("before", "after", "cublaslt_top8"):
            if not r[f"{side}_consistent"]:
                n = int(r["size"])
                out.append(f"{n}^3 {side}: {r[f'{side}_tflops']:.1f} TFLOP/s is stated, but "
                           f"2 x {n}^3 / {r[f'{side}_us']:.2f} us = {r[f'{side}_tflops_from_us']:.1f} TFLOP/s "
                           f"({r[f'{side}_tflops'] - r[f'{side}_tflops_from_us']:+.1f}), more than their rounding allows; "
                           f"seed 004 does not say how each column was summarized")
    return out
