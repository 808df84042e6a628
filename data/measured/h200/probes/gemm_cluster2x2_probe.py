"""Probe: 2 x 2 clusters (A multicast along each row of CTAs, B along each column) against the pairs at the few-tile
K-heavy shapes (`findings.FEW_TILE_KHEAVY`), torch.matmul in the same turns: both timings through
`gemm_kernels.sweep.measure_shape` (interleaved rounds, ratios to torch.matmul with 95 % intervals) and each
contender's GPU time from a CUPTI trace (timing "gpu").
    python gemm_cluster2x2_probe.py OUT_DIR   (its run: gemm_cluster2x2_<commit>.csv)"""
import sys

import pandas as pd
import torch

import gemm_kernels
from gemm_kernels import configs, hopper_options, sweep
from gemm_kernels.steps import findings
from workbook import records

torch.backends.cuda.matmul.allow_tf32 = False
options = {name: configs.HOPPER_CANDIDATES[name] for name in ("64x128 uniform cluster2", "64 uniform cluster2n")}
options["64 uniform cluster2x2"] = hopper_options.Options(tile=(128, 64, 64), schedule="uniform", cluster_n=2)
options["128 uniform cluster2x2"] = hopper_options.Options(tile=(128, 128, 64), schedule="uniform", cluster_n=2)
fns = {sweep.TORCH: torch.matmul}
fns.update({("ours", name): (lambda a, b, o=o: gemm_kernels.gemm(a, b, o)) for name, o in options.items()})
frames = []
for M, N, K in findings.FEW_TILE_KHEAVY:
    frames.append(sweep.measure_shape(fns, M, N, K, "k-heavy"))
    print(f"{M}x{N}x{K} done", flush=True)
df = pd.concat(frames, ignore_index=True)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{sys.argv[1]}/gemm_cluster2x2.csv", index=False)
pd.set_option("display.width", 200)
gpu = df[df.timing == "gpu"].pivot_table(index=["M", "N", "K"], columns="variant", values="ms_median") * 1e3
print("GPU us per call\n", gpu.round(1).to_string())
pct = 100 / df[df.timing == "kernel"].pivot_table(index=["M", "N", "K"], columns="variant", values="ratio")
print("% of torch.matmul, back to back\n", pct.round(1).to_string())
