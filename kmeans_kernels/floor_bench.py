"""The assignment kernel against its floor: ours and flashlib on the 13 seed shapes, both timings, one run.

    python -m kmeans_kernels.floor_bench                         # 13 seed shapes -> data/measured/h200/kmeans_floor.csv
    python -m kmeans_kernels.floor_bench --quick                 # 2 shapes, 8 rounds: a check that it all runs
    python -m kmeans_kernels.floor_bench --no-flashlib-autotune  # flashlib's static tiles (rows say cute_heuristic)
    python -m kmeans_kernels.floor_bench --table                 # the newest recorded run's tables; no GPU needed

Contenders, on the same inputs (kmeans_kernels.bench.input_sets: three seeded sets, rotated between calls) and the
same precomputed c_sq: ``ours/auto``, ``ours/lean_select``, ``ours/norm_broadcast`` (`kmeans_kernels.assign(x, c,
variant=...)`; auto is lazy_index or folded_norms at D <= 128, wide or lean_select above: `hopper.auto_variant`), and
where flashlib is importable (the package never depends on it) its Hopper CuTe kernel, autotuned per shape on its
first call as it is by default, and its Triton kernel, called as kmeans_kernels.bench calls them. Every contender
is first checked against kmeans_kernels.reference on the first 2048 rows of each set (match_rate: the lowest of
the three; these first calls also compile and autotune), then all are timed by `workbook.timing.compare`:
interleaved rounds, the order rotating, in each the seeds' synchronised calls (latency) and calls back to back
(kernel time). Each row (one contender, one timing) holds the ratio to ours/auto and to both flashlib kernels with
95 % intervals, the floor of its shape (`kmeans_kernels.floor`: floor_ms, bound), its x-floor (the median over
rounds of round time / floor, with the 95 % bootstrap interval of that median) and the per-round times
themselves (per_round_ms), from which `floor_table` forms geometric means with honest intervals.

Intervals. A shape's rounds are its own, so shapes are independent samples: the interval of a geometric mean over
shapes bootstraps every shape's rounds independently (`workbook.timing.geomean_ratio`). The x-floor is an
absolute time, not a ratio within a round: its interval says how well this run's rounds pin its median, not
where another run (another day, another clock) would land; the ratios to flashlib cancel the clock round by round.

GPU time: one call of every contender summed over the 13 shapes is about 75 ms (from kmeans_steps.csv and
kmeans_assign.csv); each contender makes 10 warm-up calls, 3 checks and 16 rounds x 2 x (8 + 1) timed and settling
calls: about 25 s of kernels. Compilation: ours ~2 s per kernel (7 kernels); flashlib's CuTe autotune ~18 s per
shape (about 4 minutes over the 13, the largest part; --no-flashlib-autotune skips it), its Triton kernel a few
seconds per shape. In all about 5 minutes with the autotune and under 2 without; --quick under a minute.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd
import torch

import kmeans_kernels
from kmeans_kernels import bench, floor
from workbook import DATA, gpus, records, timing

TABLE = "kmeans_floor"
GPU = "h200"                        # the floor model's GPU (kmeans_kernels.floor)
OURS = ("ours/auto", "ours/lean_select", "ours/norm_broadcast")
BASELINE = OURS[0]
QUICK_SHAPES = [(65536, 128, 4096), (1048576, 128, 4096)]
ROUNDS, CALLS, WARMUP = 16, 8, 10
QUICK_ROUNDS = 8
LARGE_SCORES = 1 << 30              # N*K: a large shape, where launch and pipeline fill are a few per cent
LARGE_D = (64, 128)                 # issue 19: the large D = 64 / 128 shapes within 1.3x of the floor
# issue 19's goals for ours/auto, as multiples of the floor: (column of floor_table, timing, at most)
GOALS = (("x floor", timing.KERNEL, 1.35), ("x floor", timing.LATENCY, 1.6),
         ("large worst x floor", timing.KERNEL, 1.3), ("large worst x floor", timing.LATENCY, 1.3))


def contenders(flashlib_autotune: bool = True) -> dict[str, object]:
    """{name: fn(x, c, c_sq) -> ids}: our three variants, then flashlib's CuTe and Triton kernels if importable."""
    fns = {}
    for name in OURS:
        variant = name.split("/", 1)[1]
        fns[name] = lambda x, c, c_sq, v=variant: kmeans_kernels.assign(x, c, variant=v, c_sq=c_sq)
    for kernel, variant, fn in bench.contenders("sm_90a", {"flashlib"}, flashlib_autotune):
        fns[f"{kernel}/{variant}"] = fn
    return fns


def references(names) -> dict[str, str]:
    """The frame's second references, {label: name}: "flashlib" is its CuTe kernel (autotuned or not),
    "flashlib_triton" its Triton kernel; only those that are among `names`."""
    out = {}
    for name in names:
        if name.startswith("flashlib/cute"):
            out["flashlib"] = name
        elif name == "flashlib/triton":
            out["flashlib_triton"] = name
    return out


def measure(fns, sets, *, rounds: int = ROUNDS, calls: int = CALLS, warmup: int = WARMUP, clock=None):
    """One shape's rows: match rates (the first calls: compilation, flashlib's autotune), then `timing.compare`
    against ours/auto (else the first contender), the floor and x-floor columns, and each timing's per-round
    ms. A contender that refuses the shape (a ValueError on its first call: a variant whose ring cannot hold this
    D's tiles, say) is left out of it, with a line saying so. `clock`: the CPU path's clock (CPU tensors only: to
    test this)."""
    x, c, _ = sets[0]
    N, D, K = x.shape[0], x.shape[1], c.shape[0]
    rates = {}
    for name, fn in fns.items():
        try:
            rates[name] = bench.match_rate(fn, sets)
        except ValueError as e:
            print(f"  {name} refuses {label(N, D, K)}: {e}", flush=True)
    fns = {name: fn for name, fn in fns.items() if name in rates}
    baseline = BASELINE if BASELINE in fns else next(iter(fns))
    cmp = timing.compare(fns, sets, baseline=baseline, rounds=rounds, calls=calls, warmup=warmup, clock=clock)
    frame = cmp.frame({"N": N, "D": D, "K": K}, also=references(fns), flops=2.0 * N * D * K, match_rate=rates)
    f = floor.floor(N, D, K)
    names = frame.kernel + "/" + frame.variant
    medians = [cmp.interval(n, t).value for n, t in zip(names, frame.timing)]
    frame["floor_ms"], frame["bound"] = f.ms, f.bound
    # the median over rounds and its interval, / the floor: for the kernel timing x_floor is ms_median / floor_ms
    frame["x_floor"] = np.divide(medians, f.ms)
    frame["x_floor_lo"], frame["x_floor_hi"] = frame.ms_lo / f.ms, frame.ms_hi / f.ms
    frame["per_round_ms"] = [" ".join(f"{v:.6g}" for v in cmp.per_round[t][n]) for n, t in zip(names, frame.timing)]
    return frame


# ------------------------------------------------------------------------------------------ the recorded tables

def label(N: int, D: int, K: int) -> str:
    return f"{N}x{D}x{K}"


def newest_run(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of the newest run that timed ours/auto, with a `name` column ("ours/auto"); empty if none."""
    if df.empty or "per_round_ms" not in df:
        return df.iloc[0:0].assign(name=pd.Series(dtype=str))
    run = records.last_run(df, [tuple(BASELINE.split("/"))])
    return run.assign(name=run.kernel + "/" + run.variant)


def _rounds(r) -> np.ndarray:
    """A row's per-round times (ms), from its per_round_ms text."""
    values = np.array([float(v) for v in str(r.per_round_ms).split()])
    if values.size == 0 or not np.all(values > 0):
        raise ValueError(f"{r.name} {r.timing} at {label(r.N, r.D, r.K)}: per_round_ms must hold positive "
                         f"times, got {r.per_round_ms!r}")
    return values


def _x_floor(r) -> timing.Ratio:
    """A row's x-floor over its rounds: the median and bootstrap interval of round time / floor."""
    return timing.ratio_of(_rounds(r) / float(r.floor_ms))


def _versus(r, other) -> timing.Ratio:
    """A row's time over `other`'s (same shape and timing), round by round: what Comparison.ratio gave."""
    mine, theirs = _rounds(r), _rounds(other)
    if mine.size != theirs.size:
        raise ValueError(f"{r.name} and {other.name} at {label(r.N, r.D, r.K)} were timed in different rounds")
    return timing.ratio_of(mine / theirs)


def _is_large(r) -> bool:
    return r.D in LARGE_D and r.N * r.K >= LARGE_SCORES


def floor_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per contender and timing of the newest run: shapes, geomean ms, the geomean x-floor over the shapes with its
    95 % interval (every shape's rounds bootstrapped independently), the worst x-floor among the large D = 64 / 128
    shapes (N*K >= 2^30) with its interval and shape, and for ours, per flashlib kernel: the geomean ratio
    ours / flashlib with its interval and the shapes where ours is slower by interval (the whole interval of the
    ratio above 1; "" if none). Empty if no run was recorded."""
    run = newest_run(df)
    rows = list(run.itertuples(index=False))
    by = {(r.name, r.timing, r.N, r.D, r.K): r for r in rows}
    flashlib = [n for n in dict.fromkeys(run.name) if n.startswith("flashlib/")]
    out = []
    for name, t in dict.fromkeys((r.name, r.timing) for r in rows):
        mine = sorted((r for r in rows if (r.name, r.timing) == (name, t)), key=lambda r: (r.N, r.D, r.K))
        xf = [_x_floor(r) for r in mine]
        g = timing.geomean_ratio(xf)
        row = {"contender": name, "timing": t, "shapes": len(mine),
               "geomean ms": timing.geomean(r.ms_median for r in mine),
               "x floor": g.value, "x floor lo": g.lo, "x floor hi": g.hi}
        large = [(r, x) for r, x in zip(mine, xf) if _is_large(r)]
        if large:
            r, x = max(large, key=lambda pair: pair[1].value)
            row.update({"large worst x floor": x.value, "large worst lo": x.lo, "large worst hi": x.hi,
                        "large worst at": label(r.N, r.D, r.K)})
        for fl in flashlib if name.startswith("ours/") else ():
            pairs = [(r, by[fl, t, r.N, r.D, r.K]) for r in mine if (fl, t, r.N, r.D, r.K) in by]
            if not pairs:
                continue
            ratios = [_versus(r, o) for r, o in pairs]
            gr = timing.geomean_ratio(ratios)
            row.update({f"x {fl}": gr.value, f"x {fl} lo": gr.lo, f"x {fl} hi": gr.hi,
                        f"slower than {fl} at": ", ".join(label(r.N, r.D, r.K) for (r, _), q in zip(pairs, ratios)
                                                          if q.verdict == "slower")})
        out.append(row)
    return pd.DataFrame(out).set_index(["contender", "timing"]) if out else pd.DataFrame()


def shape_table(df: pd.DataFrame, ours: str = BASELINE, against: str | None = None) -> pd.DataFrame:
    """Issue 19's table shape by shape, for the newest run: per shape and timing, the floor and its bound, `ours`'
    and `against`'s ms (default: flashlib's CuTe kernel) and x-floor with intervals, and ours / against per round
    with its interval and verdict. Without `against` in the run, ours alone."""
    run = newest_run(df)
    if run.empty:
        return pd.DataFrame()
    if against is None:
        against = next((n for n in dict.fromkeys(run.name) if n.startswith("flashlib/cute")), None)
    rows = list(run.itertuples(index=False))
    by = {(r.name, r.timing, r.N, r.D, r.K): r for r in rows}
    out = []
    for r in sorted((r for r in rows if r.name == ours), key=lambda r: (r.N, r.D, r.K, r.timing)):
        x = _x_floor(r)
        row = {"N": r.N, "D": r.D, "K": r.K, "timing": r.timing, "floor ms": r.floor_ms, "bound": r.bound,
               f"{ours} ms": r.ms_median, f"{ours} x floor": x.value, f"{ours} lo": x.lo, f"{ours} hi": x.hi}
        o = by.get((against, r.timing, r.N, r.D, r.K))
        if o is not None:
            xo, q = _x_floor(o), _versus(r, o)
            row.update({f"{against} ms": o.ms_median, f"{against} x floor": xo.value, f"{against} lo": xo.lo,
                        f"{against} hi": xo.hi, "ratio": q.value, "ratio lo": q.lo, "ratio hi": q.hi,
                        "verdict": q.verdict})
        out.append(row)
    table = pd.DataFrame(out).set_index(["N", "D", "K", "timing"])
    table.attrs["ours"], table.attrs["against"] = ours, against if f"{against} ms" in table else None
    return table


def goals(table: pd.DataFrame, ours: str = BASELINE) -> pd.DataFrame:
    """Issue 19's goals for `ours` from `floor_table`'s table: each goal, the measured value with its interval, and
    whether it is met (the whole interval at or under the goal; for flashlib: no shape slower by interval)."""
    rows = []
    for column, t, most in GOALS:
        if (ours, t) not in table.index or column not in table or table.loc[(ours, t), column] != \
                table.loc[(ours, t), column]:
            continue
        r = table.loc[(ours, t)]
        lo, hi = ("x floor lo", "x floor hi") if column == "x floor" else ("large worst lo", "large worst hi")
        what = "geomean" if column == "x floor" else f"worst large D = 64 / 128 ({r['large worst at']})"
        rows.append({"goal": f"{t}, {what} <= {most}x the floor", "measured": _interval(r[column], r[lo], r[hi]),
                     "met": bool(r[hi] <= most)})
    for fl in [c[len("slower than "):-len(" at")] for c in table.columns if c.startswith("slower than ")]:
        for t in timing.TIMINGS:
            if (ours, t) in table.index and table.loc[(ours, t), f"x {fl}"] == table.loc[(ours, t), f"x {fl}"]:
                slower = table.loc[(ours, t), f"slower than {fl} at"]
                rows.append({"goal": f"{t}, at least as fast as {fl} at every shape",
                             "measured": f"slower at {slower}" if slower else "slower nowhere", "met": not slower})
    return pd.DataFrame(rows)


def _interval(value: float, lo: float, hi: float) -> str:
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]" if value == value else ""


def report(df: pd.DataFrame, source: str | None = None) -> str:
    """The two tables as text, for the newest run in `df` (read from `source`, default the recorded table): per
    shape (ours/auto against flashlib's CuTe kernel), then per contender."""
    source = source or str(records.path(GPU, TABLE).relative_to(DATA.parent))
    run = newest_run(df)
    if run.empty:
        return f"no run recorded in {source} yet: `python -m kmeans_kernels.floor_bench` on an H200 writes it"
    first = run.iloc[0]
    lines = [f"{source}: run of {first.date} at commit {first.commit} ({first.gpu}); x floor = time / floor "
             f"(kmeans_kernels.floor), median over rounds [95 % interval]", ""]
    shapes = shape_table(df)
    against = shapes.attrs["against"]
    lines.append(f"{'N x D x K':>18} {'timing':<8} {'floor ms':>9} {BASELINE + ' x floor':>26}"
                 + (f" {against + ' x floor':>26} {BASELINE + ' / ' + against:>32}" if against else ""))
    for (N, D, K, t), r in shapes.iterrows():
        cells = f"{label(N, D, K):>18} {t:<8} {r['floor ms']:>9.4f} " \
                f"{_interval(r[f'{BASELINE} x floor'], r[f'{BASELINE} lo'], r[f'{BASELINE} hi']):>26}"
        if against:
            cells += (f" {_interval(r[f'{against} x floor'], r[f'{against} lo'], r[f'{against} hi']):>26}"
                      f" {_interval(r['ratio'], r['ratio lo'], r['ratio hi']) + ' ' + r['verdict']:>32}")
        lines.append(cells)
    lines += ["", "geometric mean over the shapes (95 % interval); large: D = 64 / 128 with N*K >= 2^30"]
    table = floor_table(df)
    flashlib = [c[2:] for c in table.columns if c.startswith("x flashlib/") and not c.endswith((" lo", " hi"))]
    for (name, t), r in table.iterrows():
        text = (f"  {name:<24} {t:<8} {r['geomean ms']:.4f} ms  x floor "
                f"{_interval(r['x floor'], r['x floor lo'], r['x floor hi'])}")
        if "large worst x floor" in r and r["large worst x floor"] == r["large worst x floor"]:
            text += (f"  large worst {_interval(r['large worst x floor'], r['large worst lo'], r['large worst hi'])}"
                     f" at {r['large worst at']}")
        for fl in flashlib:
            if r.get(f"x {fl}") == r.get(f"x {fl}"):
                slower = r[f"slower than {fl} at"] or "none"
                text += f"\n  {'':<33} x {fl} {_interval(r[f'x {fl}'], r[f'x {fl} lo'], r[f'x {fl} hi'])};" \
                        f" slower at: {slower}"
        lines.append(text)
    met = goals(table)
    if not met.empty:
        lines += ["", f"issue 19's goals for {BASELINE} (met: the whole interval within the goal)"]
        lines += [f"  {'met' if r.met else 'NOT met':<8} {r.goal}: {r.measured}" for r in met.itertuples()]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kmeans_kernels.floor_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=None, help="'N,D,K;...' (default: the 13 seed shapes)")
    ap.add_argument("--quick", action="store_true", help=f"shapes {QUICK_SHAPES}, {QUICK_ROUNDS} rounds")
    ap.add_argument("--rounds", type=int, default=None, help=f"interleaved rounds per shape (default {ROUNDS})")
    ap.add_argument("--calls", type=int, default=CALLS, help=f"calls per contender, round and timing ({CALLS})")
    ap.add_argument("--no-flashlib-autotune", action="store_true",
                    help="flashlib's static tile heuristic instead of its per-shape autotune (~18 s a shape)")
    ap.add_argument("--table", action="store_true", help="print the newest recorded run's tables and stop")
    ap.add_argument("--no-record", action="store_true", help=f"print only; append nothing to {TABLE}.csv")
    args = ap.parse_args(argv)
    if args.table:
        print(report(records.read(GPU, TABLE)))
        return 0
    try:
        shapes = (bench.parse_shapes(args.shapes) if args.shapes
                  else QUICK_SHAPES if args.quick else bench.seed_shapes())
    except ValueError as e:
        ap.error(str(e))
    spec = gpus.current()
    if spec is None or spec.key != GPU:
        here = spec.name if spec is not None else "no CUDA GPU"
        table = records.path(GPU, TABLE)
        print(f"the floor model is the H200's (kmeans_kernels.floor) and this machine has {here}: nothing to "
              f"measure here. " + (f"Recorded: {table} (--table prints it)" if table.exists()
                                   else f"Nothing is recorded yet ({table.name} is written on an H200)."))
        return 2
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    fns = contenders(not args.no_flashlib_autotune)
    print(f"{gpus.describe(spec)}; {len(shapes)} shapes x {len(fns)} contenders ({', '.join(fns)}); {rounds} rounds "
          f"of {args.calls} calls each way, taking turns", flush=True)
    start, frames = time.time(), []
    for N, D, K in shapes:
        sets = bench.input_sets(N, D, K)
        frame = measure(fns, sets, rounds=rounds, calls=args.calls)
        if not args.no_record:
            records.append(spec.key, TABLE, frame)
        kernel = frame[frame.timing == timing.KERNEL]
        cells = "  ".join(f"{r.variant} {r.x_floor:.2f}" for r in kernel.itertuples())
        low = {f"{r.kernel}/{r.variant}": r.match_rate for r in kernel.itertuples() if r.match_rate < 1}
        print(f"{N:>8} {D:>4} {K:>6}  kernel x floor: {cells}   ({time.time() - start:.0f} s)"
              + (f"   match rate below 1: {low}" if low else ""), flush=True)
        frames.append(frame)
        del sets
        torch.cuda.empty_cache()
    run = pd.concat(frames, ignore_index=True).assign(**{k: v for k, v in records.provenance().items()
                                                          if k in ("date", "commit", "gpu")})
    where = ("this run, not recorded" if args.no_record
             else f"appended {len(run)} rows to {records.path(spec.key, TABLE)}")
    print(f"{where}; {time.time() - start:.0f} s\n")
    print(report(run, source="this run" if args.no_record else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
