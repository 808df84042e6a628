"""Probe: the halves variants (each warpgroup's tile in two accumulators, one half folded while the other's WGMMAs
run) against folded_norms, lazy_index and auto, at the seed shapes they take: both timings with 95 % intervals
(`workbook.timing.compare`, ratio to auto) and CUPTI GPU time; every variant's answer equal to auto's first.
    python kmeans_halves_probe.py OUT_DIR [N,D,K ...]   (its run: kmeans_halves_<commit>.csv; the variants exist at
    commit 263b938 only)"""
import sys

import pandas as pd
import torch

import kmeans_kernels as km
from gemm_kernels import sweep
from kmeans_kernels import bench, hopper
from workbook import records, timing

out_dir = sys.argv[1]
shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[2:]] or [
    s for s in bench.seed_shapes() if hopper.takes("halves", s[1])]
VARIANTS = ("auto", "folded_norms", "lazy_index", "halves", "lazy_halves")
rows = []
for N, D, K in shapes:
    sets = bench.input_sets(N, D, K)
    fns = {v: (lambda x, c, c_sq, v=v: km.assign(x, c, variant=v, c_sq=c_sq)) for v in VARIANTS if v == "auto"
           or hopper.takes(v, D)}
    want = fns["auto"](*sets[0])
    for v, fn in fns.items():
        assert torch.equal(fn(*sets[0]), want), (N, D, K, v)      # the same scores, the same tie rule
    cmp = timing.compare(fns, sets, baseline="auto", rounds=12)
    gpu = sweep.gpu_ms(fns, sets)
    line = f"{N}x{D}x{K} ({hopper.auto_variant(N, D, K)}):"
    for v in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio(v, t)
            rows.append(dict(N=N, D=D, K=K, variant=v, auto=hopper.auto_variant(N, D, K), timing=t,
                             us_median=1e3 * cmp.timing(v, t).ms_median, ratio=r.value, ratio_lo=r.lo, ratio_hi=r.hi,
                             rounds=r.rounds))
        rows.append(dict(N=N, D=D, K=K, variant=v, auto=hopper.auto_variant(N, D, K), timing="gpu",
                         us_median=1e3 * gpu[v]))
        k = cmp.ratio(v, timing.KERNEL)
        line += f"  {v} {k.value:.3f} [{k.lo:.3f},{k.hi:.3f}] gpu {1e3 * gpu[v]:.1f}us"
    records.write_probe(pd.DataFrame(rows), f"{out_dir}/kmeans_halves.csv")
    print(line, flush=True)
