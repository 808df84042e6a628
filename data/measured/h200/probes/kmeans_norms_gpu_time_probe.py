"""Probe: the GPU's own time (CUPTI kernel durations, `gemm_kernels.sweep.gpu_ms`, no host time) of the norms kernel
alone, of assign with and without c_sq, and of the reference's four norm operations, at three seed shapes.
    python kmeans_norms_gpu_time_probe.py OUT_DIR   (its run: kmeans_norms_gpu_time_<commit>.csv)"""
import sys

import pandas as pd
import torch

import kmeans_kernels
from gemm_kernels import sweep
from kmeans_kernels import norms, reference
from workbook import records

rows = []
for N, D, K in [(65536, 64, 512), (65536, 128, 512), (65536, 256, 512), (65536, 128, 4096)]:
    sets = []
    for _ in range(3):
        x, c = torch.randn(N, D, device="cuda").bfloat16(), torch.randn(K, D, device="cuda").bfloat16()
        sets.append((x, c, reference.centroid_norms(c)))
    fns = {"norms.centroid_norms(c)": lambda x, c, s: norms.centroid_norms(c),
           "assign(x, c, c_sq=c_sq)": lambda x, c, s: kmeans_kernels.assign(x, c, c_sq=s),
           "assign(x, c)": lambda x, c, s: kmeans_kernels.assign(x, c),
           "reference.centroid_norms(c)": lambda x, c, s: reference.centroid_norms(c)}
    for fn in fns.values():
        for _ in range(12):
            fn(*sets[0])
    for name, ms in sweep.gpu_ms(fns, sets).items():
        rows.append(dict(N=N, D=D, K=K, contender=name, timing="gpu", us_median=1e3 * ms))
df = pd.DataFrame(rows)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{sys.argv[1]}/kmeans_norms_gpu_time.csv", index=False)
print(df.pivot_table(index=["N", "D", "K"], columns="contender", values="us_median").round(2).to_string())
