"""Which GEMM configuration is faster, with the clock's drift cancelled? (scratch probe, one device call)

Rounds of whole benchmarks (probe_gemm_order.py) put minutes between contenders, and the H200's clock drifts
that much in a minute: one 4096^3 torch.matmul call read 0.175 ms back to back in one round and 0.205 ms two
rounds later (probes/gemm_narrow_rounds.csv). Here every contender runs once per *cycle*, in an order that
rotates from cycle to cycle, back to back on one stream with a CUDA event between consecutive calls; a call's
time is the gap between the events around it. A cycle lasts a few calls, so any drift hits all contenders
alike, and the per-cycle ratio to the first contender cancels it.

    python tools/probes/probe_ab.py --shapes 4096x4096x4096 --configs torch default narrow64 --out DIR

Writes DIR/gemm_ab_calls.csv (every timed call) and DIR/gemm_ab_summary.csv, and prints the summary: per shape
and contender the median call time and the median per-cycle ratio to the first contender.
"""
import argparse
import os
import sys

import torch

from gemm_kernels import bench as gb, hopper
from probe_gemm_order import CONFIGS

BLOCK = 10   # cycles between synchronisations (the host stays ahead of the GPU within a block)


def contender(name):
    kw = CONFIGS[name]
    return torch.matmul if kw is None else (lambda a, b: hopper.gemm(a, b, **kw))


def cycles(fns, sets, count, warmup=10):
    """[(cycle, name, ms)] for `count` cycles of every fn in `fns`, rotated, back to back."""
    names = list(fns)
    for i in range(warmup):
        for name in names:
            fns[name](*sets[i % len(sets)])
    rows = []
    for start in range(0, count, BLOCK):
        torch.cuda.synchronize()
        fns[names[0]](*sets[0])                # untimed: the stream is busy again before the first event
        events, order = [torch.cuda.Event(enable_timing=True)], []
        events[0].record()
        for c in range(start, min(count, start + BLOCK)):
            for name in names[c % len(names):] + names[:c % len(names)]:
                fns[name](*sets[c % len(sets)])
                events.append(torch.cuda.Event(enable_timing=True))
                events[-1].record()
                order.append((c, name))
        events[-1].synchronize()
        rows += [(c, name, events[i].elapsed_time(events[i + 1])) for i, (c, name) in enumerate(order)]
    return rows


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=["4096x4096x4096"])
    p.add_argument("--configs", nargs="+", default=["torch", "default"], choices=list(CONFIGS))
    p.add_argument("--cycles", type=int, default=200)
    p.add_argument("--out", default=".")
    args = p.parse_args(argv)
    import pandas as pd
    torch.backends.cuda.matmul.allow_tf32 = False
    frames = []
    for shape in args.shapes:
        M, N, K = map(int, shape.split("x"))
        sets = gb.input_sets(M, N, K)
        fns = {name: contender(name) for name in args.configs}
        want = torch.matmul(*sets[0]).float()
        for name, fn in fns.items():           # compile, and check every contender against torch once
            err = ((fn(*sets[0]).float() - want).norm() / want.norm()).item()
            if err > 1e-2:
                raise SystemExit(f"{name} at {shape}: relative error {err:.2e}")
        df = pd.DataFrame(cycles(fns, sets, args.cycles), columns=["cycle", "config", "ms"])
        df.insert(0, "shape", shape)
        frames.append(df)
        del sets
        torch.cuda.empty_cache()
    calls = pd.concat(frames, ignore_index=True)
    calls.to_csv(os.path.join(args.out, "gemm_ab_calls.csv"), index=False, float_format="%.5f")
    rows = []
    for shape, df in calls.groupby("shape", sort=False):
        wide = df.pivot(index="cycle", columns="config", values="ms")
        ref = args.configs[0]
        for name in args.configs:
            rows.append(dict(shape=shape, config=name, ms_median=wide[name].median(),
                             ratio_to_first=(wide[name] / wide[ref]).median(),
                             ms_p10=wide[name].quantile(0.1), ms_p90=wide[name].quantile(0.9), calls=len(wide)))
    summary = pd.DataFrame(rows)
    summary.to_csv(os.path.join(args.out, "gemm_ab_summary.csv"), index=False, float_format="%.5f")
    print(summary.round(4).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
