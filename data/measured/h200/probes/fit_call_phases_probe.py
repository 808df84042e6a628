"""Probe: where a later `fit(x, k, iters=5, tol=None, init=c0)` call (its graph loop kept from earlier fits on x)
spends its time: fit's own steps wrapped in place (`_check`, `_KeptLoops.take` with the state's `measure`,
`_initial_centroids`, `_graph_loop` with the five iterations and the closing assignment), each timed by CUDA events
on the stream around it (GPU time between the marks, host gaps included) and by the host clock (the time to
issue it); the whole call the same way. No synchronisation is added inside the call. Median of 7 calls after 3.
    python fit_call_phases_probe.py OUT_DIR [N,D,K ...]   (its run: fit_call_phases_bec37b8.csv)"""
import sys
import time

import pandas as pd
import torch

import kmeans_kernels
from kmeans_kernels import lloyd, lloyd_bench
from workbook import records

shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [
    (65536, 128, 4096), (262144, 128, 4096), (1048576, 128, 4096)]
marks = []


def wrapped(name, fn):
    def inner(*args, **kwargs):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        a.record()
        out = fn(*args, **kwargs)
        b.record()
        marks.append((name, a, b, time.perf_counter() - t0))
        return out
    return inner


lloyd._check = wrapped("checks", lloyd._check)
lloyd._KeptLoops.take = wrapped("kept loop + state", lloyd._KeptLoops.take)
lloyd._initial_centroids = wrapped("first centroids", lloyd._initial_centroids)
lloyd._graph_loop = wrapped("5 iterations + closing", lloyd._graph_loop)
call = wrapped("whole call", kmeans_kernels.fit)

rows = []
for N, D, K in shapes:
    x, c0 = lloyd_bench.input_sets(N, D, K)[0]
    for rep in range(10):
        marks.clear()
        call(x, K, iters=5, tol=None, init=c0)
        torch.cuda.synchronize()
        if rep >= 3:
            for name, a, b, host in marks:
                rows.append(dict(N=N, D=D, K=K, phase=name, rep=rep, gpu_ms=a.elapsed_time(b), host_ms=host * 1e3))
    print(f"{N}x{D}x{K} done", flush=True)

df = pd.DataFrame(rows)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{sys.argv[1]}/fit_call_phases.csv", index=False)
pd.set_option("display.width", 200)
print(df.groupby(["N", "D", "K", "phase"], sort=False)[["gpu_ms", "host_ms"]].median().round(3).to_string())
