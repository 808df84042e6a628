"""Probe: the SM clock and board power while our GEMM and torch.matmul (cuBLAS) each run back to back for 3 s, at the
few-tile K-heavy shape where cuBLAS is fastest against us, at a square where we are level and at the worst odd shape.
If both sit at the power cap, time is energy there, and the bytes cuBLAS does not read (probes/ncu_kheavy_pairs_l2.txt)
are energy it does not spend. nvidia-smi samples every 20 ms (`sustained_clocks.sustained`; the first fifth of the
samples is dropped as ramp).
    python gemm_clocks_sustained_probe.py OUT_DIR   (its run: gemm_clocks_sustained_<commit>.csv)"""
import sys
from pathlib import Path

import torch

from gemm_kernels import configs, gemm, rule
from probe_rows import save
from sustained_clocks import sustained

out_dir = sys.argv[1]
SECONDS = 3.0
CASES = [(1024, 1024, 8192, "64x128 uniform cluster2"), (1024, 1024, 8192, None), (4096, 4096, 4096, None),
         (800, 5000, 3000, None)]
rows = []
g = torch.Generator(device="cuda").manual_seed(5)
for M, N, K, name in CASES:
    a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    b = torch.randn(K, N, device="cuda", generator=g).bfloat16()
    label = name or rule.choose(M, N, K)
    opts = configs.HOPPER_CANDIDATES[name] if name else None
    for contender, fn in (("torch.matmul", lambda: torch.matmul(a, b)), (f"ours {label}", lambda: gemm(a, b, opts))):
        row = dict(M=M, N=N, K=K, contender=contender, **sustained(fn, Path(out_dir) / "smi.csv", SECONDS, batch=20))
        rows.append(dict(row, joules_per_call=row["power_w_median"] * row["us_per_call"] * 1e-6))
        print(rows[-1], flush=True)
df = save(rows, f"{out_dir}/gemm_clocks_sustained.csv")
print(df[["M", "N", "K", "contender", "us_per_call", "sm_mhz_median", "power_w_median", "joules_per_call",
          "throttle"]].round(3).to_string())
