"""Probe: a whole `kmeans_kernels.fit(x, k, iters=ITERS, tol=None, init=c0)` call with fit's graph loops kept between
fits on the same x (`lloyd._KeptLoops(4)`: no warm-up iteration, no captures after the first fit on an x) against
the same call building its loop anew (`lloyd._KEPT` as shipped), and flashlib's whole call, in one run taking turns
(`workbook.timing.compare`, both timings, ratios with bootstrap 95 % intervals); ms per call. Three input sets
rotate, so each x has its own kept loop. Every contender's answer is checked against the plain fit's first.
    python fit_kept_loops_probe.py OUT_DIR [N,D,K ...]"""
import sys

import pandas as pd
import torch

import kmeans_kernels
from kmeans_kernels import lloyd, lloyd_bench
from workbook import records, timing

ITERS = 5
shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [(65536, 64, 512), (65536, 128, 4096),
                                                                   (1048576, 128, 4096)]
plain, kept = lloyd._KEPT, lloyd._KeptLoops(4)


def fit_with(store):
    def fn(x, c0):
        lloyd._KEPT = store
        try:
            return kmeans_kernels.fit(x, c0.shape[0], iters=ITERS, tol=None, init=c0)
        finally:
            lloyd._KEPT = plain
    return fn


fns = {"fit": fit_with(plain), "fit, loops kept": fit_with(kept)}
try:
    from flashlib.primitives.kmeans import flash_kmeans
    fns["flashlib"] = lambda x, c0: flash_kmeans(x, c0.shape[0], max_iters=ITERS, tol=0.0,
                                                 init_centroids=c0.to(x.dtype))
except Exception as e:  # noqa: BLE001 - a comparison only
    print(f"flashlib not importable ({type(e).__name__}: {e})", flush=True)

rows = []
for N, D, K in shapes:
    sets = lloyd_bench.input_sets(N, D, K)
    for x, c0 in sets:   # the same answer both ways, a kept loop's second fit included
        want = fns["fit"](x, c0)
        for _ in range(2):
            got = fns["fit, loops kept"](x, c0)
            assert torch.equal(got.centroids, want.centroids) and torch.equal(got.ids, want.ids)
            assert got.inertia == want.inertia
    cmp = timing.compare(fns, sets, baseline="fit", rounds=10, calls=3)
    for name in fns:
        for t in (timing.KERNEL, timing.LATENCY):
            r = cmp.ratio(name, t)
            rows.append(dict(N=N, D=D, K=K, contender=name, timing=t, ms=cmp.timing(name, t).ms_median, vs="fit",
                             ratio=r.value, lo=r.lo, hi=r.hi))
    print(f"{N}x{D}x{K} done", flush=True)

df = pd.DataFrame(rows)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{sys.argv[1]}/fit_kept_loops.csv", index=False)
pd.set_option("display.width", 200)
print(df[["N", "D", "K", "contender", "timing", "ms", "ratio", "lo", "hi"]].round(4).to_string(index=False))
