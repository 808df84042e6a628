"""Probe: what the centroid norms cost an `assign(x, c)` call. Without `c_sq`, assign computes them with
`reference.centroid_norms` (four eager torch operations: to float64, square, sum, to float32) before its one kernel
launch; at the K = 512 seed shapes the host, not the GPU, sets the pace of back-to-back calls. Contenders, in
interleaved rounds (`workbook.timing.compare`, three input sets in turn): assign(x, c), assign(x, c, c_sq=...) with
the norms given, and centroid_norms(c) alone; both timings, ratios to assign(x, c) with 95 % intervals.
    python kmeans_norms_host_probe.py OUT_DIR   (its run: kmeans_norms_host_<commit>.csv)"""
import sys

import pandas as pd
import torch

import kmeans_kernels
from kmeans_kernels import reference
from workbook import records, timing

SHAPES = [(65536, 64, 512), (65536, 128, 512), (65536, 256, 512), (65536, 128, 4096)]
fns = {"assign(x, c)": lambda x, c, c_sq: kmeans_kernels.assign(x, c),
       "assign(x, c, c_sq=c_sq)": lambda x, c, c_sq: kmeans_kernels.assign(x, c, c_sq=c_sq),
       "centroid_norms(c)": lambda x, c, c_sq: reference.centroid_norms(c)}
rows = []
for N, D, K in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(N + D + K)
    sets = []
    for _ in range(3):
        x = torch.randn(N, D, device="cuda", generator=g).to(torch.bfloat16)
        c = torch.randn(K, D, device="cuda", generator=g).to(torch.bfloat16)
        sets.append((x, c, reference.centroid_norms(c)))
    x, c, c_sq = sets[0]
    assert torch.equal(kmeans_kernels.assign(x, c), kmeans_kernels.assign(x, c, c_sq=c_sq))
    got = timing.compare(fns, sets, baseline="assign(x, c)", rounds=16, calls=20)
    for name in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r = got.ratio(name, t)
            rows.append(dict(N=N, D=D, K=K, contender=name, timing=t, us_median=1e3 * got.timing(name, t).ms_median,
                             ratio=r.value, ratio_lo=r.lo, ratio_hi=r.hi, rounds=r.rounds))
    print(f"{N}x{D}x{K} done", flush=True)
df = pd.DataFrame(rows)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{sys.argv[1]}/kmeans_norms_host.csv", index=False)
pd.set_option("display.width", 200)
print(df.pivot_table(index=["N", "D", "K", "timing"], columns="contender", values="us_median").round(1).to_string())
