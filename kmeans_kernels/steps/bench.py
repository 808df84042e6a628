"""Time every step kernel, the production kernel and flashlib's Hopper CuTe kernel on the seed shapes, both ways.

    python -m kmeans_kernels.steps.bench              # the 13 seed shapes -> data/measured/h200/kmeans_steps.csv
    python -m kmeans_kernels.steps.bench --quick      # 3 shapes, fewer rounds: a check that it all runs
    python -m kmeans_kernels.steps.bench --no-record --shapes "65536,128,4096"

Per shape, every contender is first checked (match rate against the fp32 reference on the first 2048 rows of
each input set, kmeans_kernels.bench.match_rate) and then timed with `workbook.timing.compare`: interleaved
rounds, in each the seeds' synchronised calls (latency) and calls back to back (kernel time), the order rotating.
Each row holds one contender and one timing: the medians, the 95 % interval of the median over rounds, the
ratio to the previous step (step 2 / step 1, ..., production auto / step 4, flashlib / auto) with its interval
and verdict, and the ratio to flashlib where flashlib ran. Rows are appended shape by shape.

Contenders: ours/step1_serial .. ours/step4_hopper (kmeans_kernels.steps), ours/auto (kmeans_kernels.assign, the
production kernels), flashlib/cute (flashlib's cutedsl_assign_euclid, when importable; its static tile
heuristic unless --flashlib-autotune, which costs ~18 s of compilation per shape). Same inputs, same c_sq.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

import kmeans_kernels
from kmeans_kernels import bench as assign_bench
from kmeans_kernels.steps import STEPS
from workbook import gpus, records, stepper, timing

TABLE = "kmeans_steps"
QUICK_SHAPES = [(65536, 128, 512), (65536, 128, 4096), (262144, 128, 4096)]   # one D: few compilations
PRODUCTION = "ours/auto"
FLASHLIB = "flashlib/cute"


def contenders(flashlib_autotune: bool = False) -> dict[str, object]:
    """{name: fn(x, c, c_sq) -> ids}, in the order of the walkthrough; flashlib last, when it imports."""
    fns = {}
    for name in STEPS:
        module = stepper.load(f"kmeans_kernels.steps.{name}")
        fns[f"ours/{name}"] = lambda x, c, c_sq, m=module: m.assign(x, c, c_sq)
    fns[PRODUCTION] = lambda x, c, c_sq: kmeans_kernels.assign(x, c, c_sq=c_sq)
    for kernel, variant, fn in assign_bench.contenders("sm_90a", {"flashlib"}, flashlib_autotune):
        if variant.startswith("cute"):
            fns[FLASHLIB] = fn
    return fns


def previous(names: list[str]) -> dict[str, str]:
    """Each contender's reference: the one before it in the walkthrough (step 1: itself)."""
    return {name: names[max(i - 1, 0)] for i, name in enumerate(names)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kmeans_kernels.steps.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{len(QUICK_SHAPES)} shapes, 8 rounds of 4 calls")
    ap.add_argument("--shapes", default=None, help="'N,D,K;...' (default: the 13 seed shapes)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds per shape (default 16)")
    ap.add_argument("--calls", type=int, default=None, help="calls per contender per round and timing (default 8)")
    ap.add_argument("--flashlib-autotune", action="store_true", help="let flashlib autotune (slow to compile)")
    ap.add_argument("--no-record", action="store_true", help=f"print only; append nothing to {TABLE}.csv")
    args = ap.parse_args(argv)

    spec = gpus.current()
    if spec is None or spec.arch != "sm_90a":
        print(f"the step kernels run on an H100/H200 only ({gpus.describe(spec)}). Recorded results: "
              f"{records.path('h200', TABLE)}")
        return 2
    shapes = assign_bench.parse_shapes(args.shapes) if args.shapes else (
        QUICK_SHAPES if args.quick else assign_bench.seed_shapes())
    rounds = args.rounds or (8 if args.quick else 16)
    calls = args.calls or (4 if args.quick else 8)
    fns = contenders(args.flashlib_autotune)
    names = list(fns)
    against = previous(names)
    print(f"{gpus.describe(spec)}; {len(shapes)} shapes x {len(names)} contenders, {rounds} rounds of {calls} calls "
          f"each way; ratio = time / the previous contender's", flush=True)
    start = time.time()
    comparisons = {}
    for N, D, K in shapes:
        sets = assign_bench.input_sets(N, D, K)
        rates = {name: assign_bench.match_rate(fn, sets) for name, fn in fns.items()}   # compiles, and checks
        cmp = timing.compare(fns, sets, baseline=names[0], rounds=rounds, calls=calls)
        comparisons[(N, D, K)] = cmp
        frame = cmp.frame({"N": N, "D": D, "K": K}, against=against, also={"flashlib": FLASHLIB},
                          flops=2.0 * N * D * K, match_rate=rates)
        if not args.no_record:
            records.append(spec.key, TABLE, frame)
        cells = "  ".join(f"{n.split('/')[-1][:14]} {cmp.kernel[n].ms_median:.3g}" for n in names)
        print(f"{N:>8} {D:>4} {K:>6}  kernel ms: {cells}   ({time.time() - start:.0f} s)", flush=True)
        low = {n: r for n, r in rates.items() if r < 1 and not n.startswith("flashlib")}
        if low:
            print(f"  match rate below 1: {low}", flush=True)
        del sets
        torch.cuda.empty_cache()
    print("\ngeometric mean over the shapes (ratio to the previous contender, 95 % interval):")
    print(f"  {'contender':<26} {'kernel ms':>10} {'latency ms':>11}   {'kernel ratio':<30} latency ratio")
    for name in names:
        row = [f"  {name:<26}"]
        row.append(f"{timing.geomean(c.kernel[name].ms_median for c in comparisons.values()):>10.4g}")
        row.append(f"{timing.geomean(c.latency[name].ms_median for c in comparisons.values()):>11.4g}")
        for t in timing.TIMINGS[::-1]:
            r = timing.geomean_ratio([c.ratio(name, t, against=against[name]) for c in comparisons.values()])
            row.append(f"   {r.value:.3f} [{r.lo:.3f}, {r.hi:.3f}] {r.verdict:<7}")
        print("".join(row) + f"  vs {against[name]}")
    if not args.no_record:
        print(f"appended {len(shapes) * len(names) * 2} rows to {records.path(spec.key, TABLE)}")
    print(f"{time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
