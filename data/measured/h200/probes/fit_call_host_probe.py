"""Probe: where the host time of a later `fit(x, k, iters=5, tol=None, init=c0)` call goes (its graph loop kept
from earlier fits on x), by cProfile over 20 calls after 3, each call synchronised after it returns. cProfile slows
Python calls, so the totals are above a plain call's; the shares say which steps the host spends its time in.
    python fit_call_host_probe.py OUT_DIR [N,D,K ...]"""
import cProfile
import io
import pstats
import sys
import time

import torch

import kmeans_kernels
from kmeans_kernels import lloyd_bench

shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [(65536, 128, 4096)]
report = io.StringIO()
for N, D, K in shapes:
    x, c0 = lloyd_bench.input_sets(N, D, K)[0]
    for _ in range(3):
        kmeans_kernels.fit(x, K, iters=5, tol=None, init=c0)
    torch.cuda.synchronize()
    plain = []
    for _ in range(20):
        t0 = time.perf_counter()
        kmeans_kernels.fit(x, K, iters=5, tol=None, init=c0)
        plain.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    prof = cProfile.Profile()
    for _ in range(20):
        prof.enable()
        kmeans_kernels.fit(x, K, iters=5, tol=None, init=c0)
        prof.disable()
        torch.cuda.synchronize()
    plain.sort()
    print(f"{N}x{D}x{K}: plain call (returns after its last read of the GPU) median {plain[10] * 1e3:.3f} ms",
          file=report)
    stats = pstats.Stats(prof, stream=report)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(25)
with open(f"{sys.argv[1]}/fit_call_host.txt", "w") as f:
    f.write(report.getvalue())
print(report.getvalue()[:6000])
