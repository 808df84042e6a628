"""Probe: `assign(x, c)` with the norms in one launch (`kmeans_kernels.norms`) against the same call with the norms
given and against the old path (`reference.centroid_norms`, four eager torch operations, then the kernel).
Contenders in interleaved rounds (`workbook.timing.compare`, three input sets in turn); both timings, ratios to
assign(x, c, c_sq=...) with 95 % intervals. Each contender's answer is checked against the reference first.
    python kmeans_norms_kernel_probe.py OUT_DIR   (its run: kmeans_norms_kernel_<commit>.csv)"""
import sys

import pandas as pd
import torch

import kmeans_kernels
from kmeans_kernels import norms, reference
from workbook import records, timing

SHAPES = [(65536, 64, 512), (65536, 128, 512), (65536, 256, 512), (65536, 128, 4096), (1 << 20, 128, 4096)]
fns = {"assign(x, c, c_sq=c_sq)": lambda x, c, c_sq: kmeans_kernels.assign(x, c, c_sq=c_sq),
       "assign(x, c)": lambda x, c, c_sq: kmeans_kernels.assign(x, c),
       "reference norms, then assign": lambda x, c, c_sq: kmeans_kernels.assign(x, c,
                                                                                 c_sq=reference.centroid_norms(c)),
       "norms.centroid_norms(c)": lambda x, c, c_sq: norms.centroid_norms(c)}
rows = []
for N, D, K in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(N + D + K)
    sets = []
    for _ in range(3):
        x = torch.randn(N, D, device="cuda", generator=g).to(torch.bfloat16)
        c = torch.randn(K, D, device="cuda", generator=g).to(torch.bfloat16)
        sets.append((x, c, reference.centroid_norms(c)))
    x, c, c_sq = sets[0]
    assert torch.equal(norms.centroid_norms(c), c_sq)
    want = reference.assign(x[:4096], c, c_sq)
    for name, fn in fns.items():
        if name.startswith("assign") or name.startswith("reference"):
            assert torch.equal(fn(x, c, c_sq)[:4096], want), name
    got = timing.compare(fns, sets, baseline="assign(x, c, c_sq=c_sq)", rounds=16, calls=20)
    for name in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r = got.ratio(name, t)
            rows.append(dict(N=N, D=D, K=K, contender=name, timing=t, us_median=1e3 * got.timing(name, t).ms_median,
                             ratio=r.value, ratio_lo=r.lo, ratio_hi=r.hi, rounds=r.rounds))
    print(f"{N}x{D}x{K} done", flush=True)
df = pd.DataFrame(rows)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{sys.argv[1]}/kmeans_norms_kernel.csv", index=False)
pd.set_option("display.width", 220)
print(df.pivot_table(index=["N", "D", "K", "timing"], columns="contender", values="us_median").round(1).to_string())
print(df.pivot_table(index=["N", "D", "K", "timing"], columns="contender", values="ratio").round(3).to_string())
