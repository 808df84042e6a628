"""Probe: fit's centroid update and inertia by one CUDA kernel (`lloyd_update.centroid_update`, as shipped) against
torch's formula (about twenty small launches per iteration, the update before this kernel), in whole
`fit(x, k, iters=ITERS, tol=None, init=c0)` calls, and flashlib's call, in one run taking turns
(`workbook.timing.compare`, both timings, ratios with bootstrap 95 % intervals, ms per call). Each fit contender
keeps its own graph loops (`lloyd._KeptLoops`), so the timed calls are later fits replaying their own graphs.
Both ways give the same centroids and ids (asserted) and inertias within 1e-12.
    python fit_update_kernel_probe.py OUT_DIR [N,D,K ...]"""
import sys

import pandas as pd
import pytest
import torch

import kmeans_kernels
from kmeans_kernels import lloyd, lloyd_bench
from workbook import records, timing

ITERS = 5
shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [
    (65536, 64, 512), (65536, 64, 4096), (65536, 128, 512), (65536, 128, 4096), (65536, 256, 512),
    (1048576, 128, 4096)]
kernel_update = lloyd._Lloyd.update


def torch_update(self, c, out):
    n = self.counts[:self.k]
    mean = (self.sums[:self.k].double() * self.unit) / n.clamp(min=1).double()[:, None]
    out.copy_(torch.where((n > 0)[:, None], mean.float(), c))
    return out, self.inertia(c)


def fit_with(update):
    store, shipped = lloyd._KeptLoops(4), lloyd._KEPT

    def fn(x, c0):
        lloyd._Lloyd.update, lloyd._KEPT = update, store
        try:
            return kmeans_kernels.fit(x, c0.shape[0], iters=ITERS, tol=None, init=c0)
        finally:
            lloyd._Lloyd.update, lloyd._KEPT = kernel_update, shipped
    return fn


fns = {"fit, torch update": fit_with(torch_update), "fit": fit_with(kernel_update)}
try:
    from flashlib.primitives.kmeans import flash_kmeans
    fns["flashlib"] = lambda x, c0: flash_kmeans(x, c0.shape[0], max_iters=ITERS, tol=0.0,
                                                 init_centroids=c0.to(x.dtype))
except Exception as e:  # noqa: BLE001 - a comparison only
    print(f"flashlib not importable ({type(e).__name__}: {e})", flush=True)

rows = []
for N, D, K in shapes:
    sets = lloyd_bench.input_sets(N, D, K)
    for x, c0 in sets:
        want, got = fns["fit, torch update"](x, c0), fns["fit"](x, c0)
        assert torch.equal(got.centroids, want.centroids) and torch.equal(got.ids, want.ids)
        assert got.inertia == pytest.approx(want.inertia, rel=1e-12)
    cmp = timing.compare(fns, sets, baseline="fit, torch update", rounds=10, calls=3)
    for name in fns:
        for t in (timing.KERNEL, timing.LATENCY):
            r = cmp.ratio(name, t)
            rows.append(dict(N=N, D=D, K=K, contender=name, timing=t, ms=cmp.timing(name, t).ms_median,
                             vs="fit, torch update", ratio=r.value, lo=r.lo, hi=r.hi))
    print(f"{N}x{D}x{K} done", flush=True)

df = pd.DataFrame(rows)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{sys.argv[1]}/fit_update_kernel.csv", index=False)
pd.set_option("display.width", 200)
print(df[["N", "D", "K", "contender", "timing", "ms", "ratio", "lo", "hi"]].round(4).to_string(index=False))
