"""Time `kmeans_kernels.fit` per Lloyd iteration against flashlib 0.4.0's k-means loop and a plain torch loop.

    python -m kmeans_kernels.lloyd_bench                  # the 13 seed shapes (1M x 128 x 4096 among them)
    python -m kmeans_kernels.lloyd_bench --quick          # 1M x 128 x 4096 and 65536 x 128 x 4096, fewer rounds
    python -m kmeans_kernels.lloyd_bench --shapes 1048576,128,4096 --kernels ours,flashlib --no-record
    python -m kmeans_kernels.lloyd_bench --shapes 1048576,128,4096 --kernels ours     # issue 19's lloyd/assign

Every contender runs a whole loop of --iters Lloyd iterations from the same initial centroids (K rows of x, drawn
with a fixed seed) on bf16 randn data, called as a user calls it, and all of them are timed in one process by
`workbook.timing.compare`: interleaved rounds (the order rotating), in each round every contender gets --calls
synchronised calls (the latency a user sees, the seeds' method) and --calls calls back to back between two events
(kernel time, no host sync), each after one untimed settling call; a contender that reads a value back inside its
call (fit reads max|x| for its scale and checks for points with no centroid) waits for the GPU there in both
timings. Every time in a row is per Lloyd iteration: a call's time divided by --iters (the loops run back to back
inside a call). Each row carries its ratio to ``ours/assign`` (so every ratio reads "x the assignment kernel";
issue 19 asks for lloyd <= 1.15x assign at 1M x 128 x 4096) and its ratio to flashlib's loop (``ratio_flashlib``),
each the median over rounds of the per-round ratio with a bootstrap 95 % interval, and the 95 % interval of its own
median (ms_lo, ms_hi).

GPU time, estimated from the per-iteration times in data/measured/h200/kmeans_fit.csv (the 13-shape run): summed
over the shapes, one iteration of every contender takes about 0.35 s (ours/fit 34 ms, flashlib 25, ours/lloyd 21,
ours/lloyd_index_add 23, ours/lloyd_eager about as much, ours/assign 13, ours/sums 3; torch/loop about 16x the
assignment, 0.21 s, the largest part). Each contender makes 2 warm-up calls, 2 match-rate calls of one iteration
and rounds x 2 x (calls + 1) timed and settling calls of --iters iterations: with the defaults (10 rounds of 1
call, 5 iterations) 42 calls, about 75 s of loops over the 13 shapes. On top: compiling our kernels (three D),
flashlib's autotune of its CuTe assignment on its first call at D = 256, K >= 4096 (4 shapes, ~18 s each), the
CUDA-graph captures and the inputs: about 3 minutes in all. --quick (2 shapes, 6 rounds): under a minute.
--kernels ours,flashlib drops the torch loop and 60 % of the timed work.

Contenders:

* ``ours/fit``: ``fit(x, K, iters=n, tol=None, init=c0)``, everything a user pays on a later call on the same x
  (fit keeps its graph loop between fits on an x, so the warm-up calls pay the captures): the input checks, the
  state (the fixed-point scale, the data mean and spread: one read of x per pass) and the closing assignment
  (n + 1 assignments);
* ``ours/lloyd``: n iterations of fit's loop body alone (assignment, integer sums, update, inertia), on a
  state prepared outside the timed call, replayed as fit replays it on CUDA: from the two CUDA graphs of
  `lloyd._GraphLoop` (captured in the warm-up calls), one driver call per iteration: the cost of one iteration;
* ``ours/lloyd_eager``: the same body launched operation by operation from the host, as fit runs it under a
  process group (and on the CPU): the same device work, so the difference to ``ours/lloyd`` is host time;
* ``ours/lloyd_index_add``: the same with the update fit uses on the CPU (``index_add_`` of the int64
  fixed-point copy of x) instead of the sort and the sums kernel (`kmeans_kernels.lloyd_update`): the same
  centroids bit for bit, the update's cost before and after;
* ``ours/sums``: n calls of the per-iteration sums alone (on CUDA: sort the ids, the sums kernel; zeroing the
  buffer included) for the ids of c0, the part of ``ours/lloyd`` that the sums kernel changed;
* ``ours/assign``: n calls of ``kmeans_kernels.assign`` (same c_sq passing): the kernel alone, the floor of
  ``ours/lloyd``; issue 19 asks for lloyd <= 1.15x assign at 1M x 128 x 4096;
* ``flashlib/flash_kmeans``: ``flashlib.primitives.kmeans.flash_kmeans(x, K, max_iters=n, tol=0.0,
  init_centroids=c0)``, flashlib's own loop behind its router (its Triton kernels, or its Hopper CuTe DSL
  assignment where D >= 256 and K >= 4096, which autotunes on its first call, in the warm-up); only where
  flashlib is importable (the package never depends on it); its centroid update adds fp32 atomically;
* ``torch/loop``: what a user writes: chunked ``(0.5 c_sq - x @ c.T).argmin`` with the product in bf16,
  ``index_add_`` sums in fp32, ``bincount`` counts, empty clusters keep their centroid.

match_rate: for each contender, one iteration from c0, the fraction of the first 2048 rows whose id equals
``kmeans_kernels.reference.assign`` of those rows to the centroids that iteration assigned to (c0, or for
``ours/fit`` the centroids it returns). Rows go to data/measured/<gpu>/kmeans_fit.csv, shape by shape, one per
contender and timing. Rows recorded before the table had a ``timing`` column were timed by synchronised calls
alone (`workbook.timing.bench_interleaved`, no interval): `summary` reads them as latency.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd
import torch

import kmeans_kernels
from kmeans_kernels import bench, reference
from kmeans_kernels import lloyd as _fit
from workbook import gpus, records, timing

TABLE = "kmeans_fit"
SEEDS = (17, 29)
CHECK_ROWS = 2048
QUICK_SHAPES = [(1048576, 128, 4096), (65536, 128, 4096)]
KERNELS = ("ours", "flashlib", "torch")
ASSIGN = ("ours", "assign")                 # the baseline of every ratio: the kernel alone
FLASHLIB = ("flashlib", "flash_kmeans")
ROUNDS, CALLS, WARMUP = 10, 1, 2            # the GPU-time estimate in the module docstring assumes these
QUICK_ROUNDS = 6
GOAL_SHAPE, GOAL_LLOYD = (1048576, 128, 4096), 1.15      # issue 19: lloyd <= 1.15x assign at this shape
# summary's ratios: (column, numerator, denominator), each as the run recorded it where it can
RATIOS = (("lloyd/assign", ("ours", "lloyd"), ASSIGN),
          ("lloyd_eager/assign", ("ours", "lloyd_eager"), ASSIGN),
          ("lloyd_index_add/assign", ("ours", "lloyd_index_add"), ASSIGN),
          ("flashlib/lloyd", FLASHLIB, ("ours", "lloyd")),
          ("flashlib/fit", FLASHLIB, ("ours", "fit")))


def input_sets(N: int, D: int, K: int):
    """(x bf16 [N, D], c0 fp32 [K, D]) per seed: c0 is K distinct rows of x."""
    sets = []
    for seed in SEEDS:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(N, D, generator=gen, device="cuda").to(torch.bfloat16)
        rows = torch.randperm(N, generator=gen, device="cuda")[:K]
        sets.append((x, x[rows].float()))
    return sets


def torch_loop(x: torch.Tensor, c0: torch.Tensor, iters: int):
    """A plain torch Lloyd loop: (ids of the last assignment, the centroids it assigned to)."""
    N, K = x.shape[0], c0.shape[0]
    rows = max(1, (1 << 28) // K)  # a [rows, K] fp32 score block of at most 1 GiB
    c = c0
    ids = torch.empty(N, dtype=torch.int64, device=x.device)
    for it in range(iters):
        c_low = c.to(x.dtype)
        half = 0.5 * (c_low.float() ** 2).sum(1)
        for r0 in range(0, N, rows):
            ids[r0:r0 + rows] = (half - (x[r0:r0 + rows] @ c_low.t()).float()).argmin(1)
        if it == iters - 1:
            return ids, c
        sums = torch.zeros_like(c).index_add_(0, ids, x.float())
        counts = torch.bincount(ids, minlength=K)
        c = torch.where((counts > 0)[:, None], sums / counts.clamp(min=1)[:, None], c)


def contenders(kernels: set[str], iters: int, sets):
    """{(kernel, variant): fn(x, c0) -> (ids, centroids assigned to)} and, per input set, fit's prepared state."""
    out = {}
    if "ours" in kernels:
        states, old_states, graph_loops, c0_ids = {}, {}, {}, {}
        for x, c0 in sets:
            shards = _fit._Shards(None, x.shape[0])
            states[x.data_ptr()] = lloyd = _fit._Lloyd(x, c0.shape[0], "auto", shards)
            graph_loops[x.data_ptr()] = _fit._GraphLoop(_fit._Lloyd(x, c0.shape[0], "auto", shards), iters, None)
            old_states[x.data_ptr()] = _fit._Lloyd(x, c0.shape[0], "auto", shards, update="index_add")
            c0_ids[x.data_ptr()] = lloyd.assign(c0, torch.empty_like(lloyd.ids))

        def ours_fit(x, c0, n=iters):
            r = kmeans_kernels.fit(x, c0.shape[0], iters=n, tol=None, init=c0)
            return r.ids, r.centroids

        def loop(lloyd, c0, n):
            c = c0
            for _ in range(n):
                new, _ = lloyd.step(c, lloyd.ids, None)
                used, c = c, new
            return lloyd.ids, used

        def ours_lloyd(x, c0, n=iters):
            graphed = graph_loops[x.data_ptr()]
            graphed.start(c0)
            for i in range(n):
                graphed.run(i % 2)
            last = (n - 1) % 2   # run(p) assigns from c[p] into ids[p]
            return graphed.ids[last], graphed.c[last]

        def ours_lloyd_eager(x, c0, n=iters):
            return loop(states[x.data_ptr()], c0, n)

        def ours_lloyd_index_add(x, c0, n=iters):
            return loop(old_states[x.data_ptr()], c0, n)

        def ours_sums(x, c0, n=iters):
            lloyd, ids = states[x.data_ptr()], c0_ids[x.data_ptr()]
            for _ in range(n):
                lloyd.accumulate(ids, None)
            return ids, c0

        def ours_assign(x, c0, n=iters):
            c_low = c0.to(x.dtype)
            c_sq = reference.centroid_norms(c_low)
            ids = torch.empty(x.shape[0], dtype=torch.int32, device=x.device)
            for _ in range(n):
                kmeans_kernels.assign(x, c_low, c_sq=c_sq, out=ids)
            return ids, c0

        out["ours", "fit"] = ours_fit
        out["ours", "lloyd"] = ours_lloyd
        out["ours", "lloyd_eager"] = ours_lloyd_eager
        out["ours", "lloyd_index_add"] = ours_lloyd_index_add
        out["ours", "sums"] = ours_sums
        out["ours", "assign"] = ours_assign
    if "flashlib" in kernels:
        try:
            from flashlib.primitives.kmeans import flash_kmeans
        except Exception as e:  # noqa: BLE001 - any import failure means: not available here
            print(f"flashlib not importable ({type(e).__name__}: {e}); skipping it", flush=True)
        else:
            def flash(x, c0, n=iters):
                # its loop writes into the centroid buffer it is given: a fresh copy each call
                ids, _, _ = flash_kmeans(x, c0.shape[0], max_iters=n, tol=0.0, init_centroids=c0.to(x.dtype))
                return ids.reshape(-1), c0 if n == 1 else None  # its ids are the last assignment's
            try:  # a first call compiles (and on its CuTe DSL path autotunes); a failure drops it, not the run
                flash(*sets[0], n=1)
            except Exception as e:  # noqa: BLE001
                print(f"flashlib's flash_kmeans failed here ({type(e).__name__}: {e}); skipping it", flush=True)
            else:
                out["flashlib", "flash_kmeans"] = flash
    if "torch" in kernels:
        out["torch", "loop"] = lambda x, c0, n=iters: torch_loop(x, c0, n)
    return out


def match_rate(fn, sets) -> float:
    """Lowest over the sets: rows whose id after one iteration equals the reference's to the centroids used."""
    rates = []
    for x, c0 in sets:
        ids, used = fn(x, c0, n=1)
        rows = min(CHECK_ROWS, x.shape[0])
        want = reference.assign(x[:rows], used.to(x.dtype)).long()
        rates.append((ids.reshape(-1)[:rows].long() == want).double().mean().item())
    return min(rates)


def measure(fns, sets, iters: int, *, rounds: int = ROUNDS, calls: int = CALLS, warmup: int = WARMUP,
            clock=None):
    """One shape's rows: match rates first (the first calls also compile), then `timing.compare` of `fns` on
    `sets`, against ours/assign (else the first contender), with flashlib's loop as a second reference.
    Every ms column is per Lloyd iteration (a call's time / `iters`); ratios are unchanged by that.
    `clock`: the host clock of `timing.compare`'s CPU path (CPU tensors only, to test this)."""
    x, c0 = sets[0]
    N, D, K = x.shape[0], x.shape[1], c0.shape[0]
    rates = {name: match_rate(fn, sets) for name, fn in fns.items()}
    baseline = ASSIGN if ASSIGN in fns else next(iter(fns))
    cmp = timing.compare(fns, sets, baseline=baseline, rounds=rounds, calls=calls, warmup=warmup, clock=clock)
    frame = cmp.frame({"N": N, "D": D, "K": K, "iters": iters}, also={"flashlib": FLASHLIB},
                      flops=2.0 * N * D * K * iters, match_rate=rates)
    for col in ("ms_median", "ms_min", "ms_max", "ms_lo", "ms_hi"):
        frame[col] = frame[col] / iters
    return frame


def _with_timing(run):
    """`run` with a timing on every row: rows from before the column existed were synchronised calls alone."""
    run = run.copy()
    run["timing"] = run["timing"].fillna(timing.LATENCY) if "timing" in run else timing.LATENCY
    return run


def _ratio(run, num, den):
    """(value, lo, hi) per (N, D, K, timing) of `num`'s time over `den`'s: the recorded per-round ratio and its
    interval where the run has one (den is the row's `vs`, or flashlib's loop), else the ratio of the medians
    with no interval."""
    key = ["N", "D", "K", "timing"]
    name = {k: "/".join(k) for k in (num, den)}
    rows = run[(run.kernel == num[0]) & (run.variant == num[1])].set_index(key)
    other = run[(run.kernel == den[0]) & (run.variant == den[1])].set_index(key)
    if rows.empty or other.empty:
        return None
    for prefix, ref in (("ratio", rows.get("vs")), ("ratio_flashlib", "/".join(FLASHLIB))):
        if prefix in rows and rows[prefix].notna().all() and bool(np.all(ref == name[den])):
            return pd.DataFrame({"value": rows[prefix], "lo": rows[f"{prefix}_lo"], "hi": rows[f"{prefix}_hi"]})
    if num == FLASHLIB:                   # flashlib / ours: the inverse of ours' recorded ratio to flashlib
        inv = _ratio(run, den, num)
        if inv is not None and inv.lo.notna().all():
            return pd.DataFrame({"value": 1 / inv.value, "lo": 1 / inv.hi, "hi": 1 / inv.lo})
    value = rows.ms_median / other.ms_median
    return pd.DataFrame({"value": value, "lo": float("nan"), "hi": float("nan")}).dropna(subset=["value"])


def summary(df):
    """One row per shape and timing of the newest run in `df` (records.read(gpu, TABLE)) that timed ours/fit: ms
    per Lloyd iteration of each contender, lloyd/assign (the loop's cost over the kernel's; issue 19 asks for
    <= 1.15 at 1M x 128 x 4096), the same for the eager launches and for the index_add update where they were
    timed, and flashlib/lloyd (> 1: ours is faster), each with its 95 % interval (`<ratio> lo`, `<ratio> hi`)
    where the run recorded one. A run from before the table had a timing column has one row per shape, its
    timing "latency", and no intervals. Empty if no run timed ours/fit."""
    run = records.last_run(df, [("ours", "fit")])
    if run.empty:
        return pd.DataFrame()
    run = _with_timing(run)
    table = run.pivot_table(index=["N", "D", "K", "timing"], columns=["kernel", "variant"], values="ms_median")
    table.columns = [f"{k}/{v} ms" for k, v in table.columns]
    for column, num, den in RATIOS:
        r = _ratio(run, num, den)
        if r is None:
            continue
        table[column] = r.value
        if r.lo.notna().any():
            table[f"{column} lo"], table[f"{column} hi"] = r.lo, r.hi
    return table.reset_index()


def _cell(row, column: str) -> str:
    if column not in row or row[column] != row[column]:
        return ""
    if f"{column} lo" in row and row[f"{column} lo"] == row[f"{column} lo"]:
        return f"{row[column]:.3f} [{row[f'{column} lo']:.3f}, {row[f'{column} hi']:.3f}]"
    return f"{row[column]:.3f}"


def goals(table):
    """Issue 19's goals per timing, from `summary`'s table: lloyd/assign at GOAL_SHAPE (with its interval where
    recorded) against GOAL_LLOYD, and on how many shapes ours/lloyd is faster than flashlib's loop, slower, or
    cannot be told apart (interval straddling 1). Beside them the same count for a whole `fit` call, its setup
    included, against flashlib's whole call (`flashlib/fit`; flashlib's figure is always its whole call). Without
    intervals (an old run) a shape is faster or slower by its medians alone, and `by interval` says False."""
    rows = []
    for t, part in table.groupby("timing", sort=False):
        row = {"timing": t, "shapes": len(part)}
        big = part[(part.N == GOAL_SHAPE[0]) & (part.D == GOAL_SHAPE[1]) & (part.K == GOAL_SHAPE[2])]
        if not big.empty and "lloyd/assign" in part:
            row["lloyd/assign at 1M x 128 x 4096"] = _cell(big.iloc[0], "lloyd/assign")
            hi = big.iloc[0].get("lloyd/assign hi", big.iloc[0]["lloyd/assign"])
            row[f"<= {GOAL_LLOYD}x, whole interval"] = bool(hi <= GOAL_LLOYD)
        if "flashlib/lloyd" in part:
            faster, slower, noise, by_interval = _counts(part, "flashlib/lloyd")
            row.update({"faster than flashlib's loop": faster, "slower": slower, "noise": noise,
                        "by interval": by_interval})
        if "flashlib/fit" in part:
            row["whole fit call faster / slower / noise"] = "{} / {} / {}".format(*_counts(part, "flashlib/fit")[:3])
        rows.append(row)
    return pd.DataFrame(rows).set_index("timing") if rows else pd.DataFrame()


def _counts(part, column: str) -> tuple[int, int, int, bool]:
    """(shapes where ours is faster, slower, can't be told apart, whether by interval) from flashlib/ours."""
    value = part[column]
    by_interval = f"{column} lo" in part and part[f"{column} lo"].notna().all()
    lo, hi = (part[f"{column} lo"], part[f"{column} hi"]) if by_interval else (value, value)
    noise = int(((lo <= 1) & (hi >= 1)).sum()) if by_interval else 0
    return int((lo > 1).sum()), int((hi < 1).sum()), noise, bool(by_interval)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kmeans_kernels.lloyd_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=None, help="'N,D,K;...' (default: the 13 seed shapes)")
    ap.add_argument("--quick", action="store_true", help=f"shapes {QUICK_SHAPES}, {QUICK_ROUNDS} rounds")
    ap.add_argument("--kernels", default=",".join(KERNELS), help="comma list of ours, flashlib, torch")
    ap.add_argument("--iters", type=int, default=5, help="Lloyd iterations per call (default 5)")
    ap.add_argument("--rounds", type=int, default=None, help=f"interleaved rounds per shape (default {ROUNDS})")
    ap.add_argument("--calls", type=int, default=CALLS,
                    help=f"calls per contender, round and timing (default {CALLS})")
    ap.add_argument("--no-record", action="store_true", help="print only; append nothing to data/measured/")
    args = ap.parse_args(argv)

    spec = gpus.current()
    if spec is None:
        print(f"no CUDA GPU here: the benchmark times fit live and cannot run. Recorded results are in "
              f"{records.path('h200', TABLE)}.")
        return 2
    kernels = {k.strip() for k in args.kernels.split(",") if k.strip()}
    if kernels - set(KERNELS):
        raise SystemExit(f"unknown --kernels {sorted(kernels - set(KERNELS))}")
    shapes = QUICK_SHAPES if args.quick and not args.shapes else bench.parse_shapes(args.shapes)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    print(f"{gpus.describe(spec)}; {len(shapes)} shapes; {args.iters} Lloyd iterations per call; {rounds} rounds "
          f"of {args.calls} call(s) each way per contender, taking turns; ms per iteration", flush=True)

    start = time.time()
    frames = []
    for N, D, K in shapes:
        sets = input_sets(N, D, K)
        fns = contenders(kernels, args.iters, sets)
        frame = measure(fns, sets, args.iters, rounds=rounds, calls=args.calls)
        if not args.no_record:
            records.append(spec.key, TABLE, frame)
        kernel_ms = frame[frame.timing == timing.KERNEL]
        cells = "  ".join(f"{r.kernel}/{r.variant} {r.ms_median:.3f}" for r in kernel_ms.itertuples())
        print(f"{N:>8} {D:>4} {K:>6}  kernel ms: {cells}   ({time.time() - start:.0f} s)", flush=True)
        frames.append(frame)
        del sets, fns
        torch.cuda.empty_cache()

    run = pd.concat(frames, ignore_index=True).assign(date="this run")
    table = summary(run)
    print("\nper shape, ms per Lloyd iteration; ratios: median over rounds [95 % interval]")
    ratio_cols = [c for c, _, _ in RATIOS if c in table]
    print(f"{'N':>8} {'D':>4} {'K':>6} {'timing':<8}" + "".join(f"{c:>32}" for c in ratio_cols))
    for _, row in table.iterrows():
        print(f"{row.N:>8} {row.D:>4} {row.K:>6} {row.timing:<8}"
              + "".join(f"{_cell(row, c):>32}" for c in ratio_cols))
    print("\ngeometric mean over the shapes, ms per Lloyd iteration (kernel time / latency):")
    for (kernel, variant), mine in run.groupby(["kernel", "variant"], sort=False):
        ms = {t: timing.geomean(mine[mine.timing == t].ms_median) for t in timing.TIMINGS}
        print(f"  {kernel + '/' + variant:<24} {ms[timing.KERNEL]:.4f} / {ms[timing.LATENCY]:.4f}   "
              f"lowest match rate {mine.match_rate.min():.4f}")
    if not table.empty:
        print("\nissue 19's goals:")
        print(goals(table).to_string())
    if not args.no_record:
        print(f"rows appended shape by shape to {records.path(spec.key, TABLE)}")
    print(f"{time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
