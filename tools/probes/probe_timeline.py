"""Where does a GEMM launch's time go, CTA by CTA? (scratch probe, one device call)

Runs `hopper.timeline` (the traced build) a few times per shape and kernel variant, writes every segment's
stamps to CSV and prints a summary: time from launch to each CTA's first K-block, the wait for a row's first
K-block after the previous row's C (the ring running dry), the K loop, the epilogue, and the tail.
    python tools/probes/probe_timeline.py --out DIR --shapes 4096x4096x4096 --variants default plain
"""
import argparse
import os
import sys

import torch

from gemm_kernels import hopper

VARIANTS = {"default": {}, "plain": dict(defer_epilogue=False), "staged": dict(epilogue="staged"),
            "narrow64": dict(narrow_ns=(192, 128))}


def summary(df):
    first = df[df.seq == 0]
    later = df[df.seq > 0]
    per_cta = df.groupby("cta")
    busy = (df.stored - df.start).groupby(df.cta).sum()
    makespan = df.exit.max()
    return {
        "makespan_us": makespan,
        "first_data_us(med)": (first.data - first.entry).median(),
        "entry_spread_us": first.entry.max() - first.entry.min(),
        "row_wait_us(med)": (later.data - later.start).median(),
        "row_wait_us(p90)": (later.data - later.start).quantile(0.9),
        "kloop_us(med)": (df.mma_done - df.data).median(),
        "epilogue_us(med)": (df.stored - df.mma_done).median(),
        "gap_us(med)": (df.start - df.groupby("cta").stored.shift(1))[df.seq > 0].median(),
        "last_stored_spread_us": per_cta.stored.max().max() - per_cta.stored.max().min(),
        "busy_frac": busy.sum() / (makespan * df.cta.nunique()),
        **{f"kloop_us(med) w{w}": (g.mma_done - g.data).median() for w, g in df.groupby("width")},
    }


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=["4096x4096x4096"])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--launches", type=int, default=3)
    p.add_argument("--out", default=".")
    args = p.parse_args(argv)
    rows = []
    for M, N, K in (map(int, s.split("x")) for s in args.shapes):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        want = torch.matmul(a, b)
        for name in args.variants:
            hopper.timeline(a, b, **VARIANTS[name])     # compile and warm up
            for i in range(args.launches):
                c, df = hopper.timeline(a, b, **VARIANTS[name])
                err = ((c.float() - want.float()).abs().max() / want.float().abs().max()).item()
                df.insert(0, "launch", i)
                df.insert(0, "variant", name)
                df.insert(0, "shape", f"{M}x{N}x{K}")
                df.to_csv(os.path.join(args.out, f"gemm_timeline_{M}x{N}x{K}_{name}.csv"), mode="w" if i == 0 else "a",
                          header=i == 0, index=False, float_format="%.3f")
                rows.append({"shape": f"{M}x{N}x{K}", "variant": name, "launch": i, "max_rel_err": err,
                             **summary(df)})
                print(rows[-1], file=sys.stderr, flush=True)
    import pandas as pd
    table = pd.DataFrame(rows)
    table.to_csv(os.path.join(args.out, "gemm_timeline_summary.csv"), index=False, float_format="%.3f")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
