"""Probe: where a `kmeans_kernels.fit(x, k, iters=5, tol=None, init=c0)` call spends its time beyond its Lloyd
iterations (lloyd_bench's `ours/fit` against `ours/lloyd`). fit's own steps, run one by one as fit runs them, each
closed by torch.cuda.synchronize() and timed on the host: the checks (`_check`), the state (`_Lloyd`: the scale,
the mean, the spread, the buffers), the first centroids, then the graph loop: the eager warm-up iteration, the
iterations that capture each parity's graph, the replays, the closing assignment. Then the whole fit call,
timed the same way. Calls 2..CALLS (the first compiles), median ms.
    python fit_phases_probe.py OUT_DIR [N,D,K ...]"""
import sys
import time

import pandas as pd
import torch

from kmeans_kernels import lloyd, lloyd_bench
from workbook import records
import kmeans_kernels

CALLS = 6
ITERS = 5


def phases(x, c0):
    """{phase: ms} for one fit-like call, fit's steps run one by one."""
    out = {}
    t = [time.perf_counter()]

    def done(name):
        torch.cuda.synchronize()
        t.append(time.perf_counter())
        out[name] = (t[-1] - t[-2]) * 1e3

    k = c0.shape[0]
    shards = lloyd._Shards(None, 0)
    lloyd._check(x, k, ITERS, None, c0, "auto", shards, lloyd._comm_device(None))
    done("check")
    state = lloyd._Lloyd(x, k, "auto", shards)
    done("state")
    c = lloyd._initial_centroids(x, k, c0, 0, shards)
    done("first centroids")
    loop = lloyd._GraphLoop(state, ITERS, None)
    loop.start(c)
    done("loop buffers")
    for i in range(ITERS):
        loop.run(i % 2)
        done(["warm-up (eager)", "capture 1 + replay", "capture 0 + replay", "replay 3", "replay 4"][i])
    state.step(loop.c[ITERS % 2], loop.ids[ITERS % 2], loop.ids[1 - ITERS % 2])
    int(state.unassigned)
    done("closing assignment")
    return out


out_dir = sys.argv[1]
shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [(65536, 64, 512), (1048576, 128, 4096)]
rows = []
for N, D, K in shapes:
    x, c0 = lloyd_bench.input_sets(N, D, K)[0]
    for call in range(CALLS):
        p = phases(x, c0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        kmeans_kernels.fit(x, K, iters=ITERS, tol=None, init=c0)
        torch.cuda.synchronize()
        p["whole fit call"] = (time.perf_counter() - t0) * 1e3
        if call:
            rows += [dict(N=N, D=D, K=K, call=call, phase=k, ms=v) for k, v in p.items()]
    print(f"{N}x{D}x{K} done", flush=True)

df = pd.DataFrame(rows)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{out_dir}/fit_phases.csv", index=False)
table = df.groupby(["N", "D", "K", "phase"], sort=False).ms.median().unstack([0, 1, 2])
print(table.round(3).to_string())
