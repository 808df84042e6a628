"""Probe: does the order of turns bias a ratio? Two copies of one kernel beside flashlib's, ordered by rotation
(each contender always behind the same neighbour) and by a Williams design (`workbook.timing.turn_orders`).

Found in the H200's floor tables (`data/measured/h200/kmeans_floor.csv`, three runs): at 65536 x 256 x 512 `ours/auto`
and `ours/lean_select` are one kernel (`hopper.auto_variant` picks lean_select there), yet auto read 38-40 us a call
back to back and lean_select 35 us, in every run. In the rotation auto always follows flashlib's Triton kernel (100 us
a call there), lean_select always follows auto. Here the floor bench's contenders (`floor_bench.contenders`, flashlib's
static tiles) with a second copy of `ours/auto` right behind the first, at two K = 512 shapes, `workbook.timing.compare`
under each order, twice each in turn; the ratio of the two copies (auto against its copy) is the bias (1 where there
is none).

    python timing_turn_order_probe.py OUT_DIR   (its run: timing_turn_order_<commit>.csv)"""
import sys

import pandas as pd

from kmeans_kernels import bench, floor_bench
from probe_rows import save
from workbook import timing

SHAPES = [(65536, 256, 512), (65536, 64, 512)]
ROUNDS, CALLS = 12, 8
COPY = "ours/auto (copy)"


def rotation(names: list, r: int) -> list:
    """The order of turns before `turn_orders`: rotated by r."""
    k = r % len(names)
    return names[k:] + names[:k]


def main(out_dir: str) -> None:
    williams = timing._turn_order
    rows = []
    for N, D, K in SHAPES:
        sets = bench.input_sets(N, D, K)
        found = floor_bench.contenders(flashlib_autotune=False)
        fns = {"ours/auto": found.pop("ours/auto"), COPY: None, **found}
        fns[COPY] = fns["ours/auto"]
        for fn in fns.values():
            fn(*sets[0])
        for rep in range(2):
            for order, how in (("rotation", rotation), ("williams", williams)):
                timing._turn_order = how
                try:
                    cmp = timing.compare(fns, sets, baseline=COPY, rounds=ROUNDS, calls=CALLS)
                finally:
                    timing._turn_order = williams
                for name in fns:
                    for t in (timing.LATENCY, timing.KERNEL):
                        r = cmp.ratio(name, t)
                        rows.append(dict(N=N, D=D, K=K, order=order, rep=rep, contender=name, timing=t,
                                         us_median=1e3 * cmp.timing(name, t).ms_median, ratio=r.value,
                                         ratio_lo=r.lo, ratio_hi=r.hi))
                df = save(rows, f"{out_dir}/timing_turn_order.csv")
                copy = df[(df.contender == "ours/auto") & (df.order == order) & (df.rep == rep) & (df.N == N)
                          & (df.D == D)]
                print(N, D, K, order, rep, copy[["timing", "us_median", "ratio", "ratio_lo", "ratio_hi"]]
                      .round(3).to_dict("records"), flush=True)
    pd.set_option("display.width", 200)
    print(df[df.contender == "ours/auto"].pivot_table(index=["N", "D", "order", "rep"], columns="timing",
                                                       values="ratio").round(3).to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])
