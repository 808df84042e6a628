"""Probe: the SM clock and board power while our GEMM and torch.matmul (cuBLAS) each run back to back for 3 s, at the
few-tile K-heavy shape where cuBLAS is fastest against us, at a square where we are level and at the worst odd shape.
If both sit at the power cap, time is energy there, and the bytes cuBLAS does not read (probes/ncu_kheavy_pairs_l2.txt)
are energy it does not spend. nvidia-smi samples every 20 ms; the first fifth of the samples is dropped as ramp.
    python gemm_clocks_sustained_probe.py OUT_DIR   (its run: gemm_clocks_sustained_<commit>.csv)"""
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from gemm_kernels import configs, gemm, rule
from workbook import records

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
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        log = Path(out_dir) / "smi.csv"
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active",
                                "--format=csv,noheader,nounits", "-lms", "20", "-f", str(log)])
        time.sleep(0.3)
        t0, calls = time.perf_counter(), 0
        while time.perf_counter() - t0 < SECONDS:
            for _ in range(20):
                fn()
            calls += 20
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        smi.terminate()
        smi.wait()
        s = pd.read_csv(log, header=None, names=["t", "sm_mhz", "power_w", "throttle"], skipinitialspace=True)
        s = s.iloc[len(s) // 5:]
        rows.append(dict(M=M, N=N, K=K, contender=contender, us_per_call=1e6 * elapsed / calls,
                         sm_mhz_median=s.sm_mhz.median(), sm_mhz_min=s.sm_mhz.min(), power_w_median=s.power_w.median(),
                         samples=len(s), throttle=";".join(sorted(set(map(str, s.throttle))))))
        print(rows[-1], flush=True)
df = pd.DataFrame(rows)
df["joules_per_call"] = df.power_w_median * df.us_per_call * 1e-6
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{out_dir}/gemm_clocks_sustained.csv", index=False)
print(df[["M", "N", "K", "contender", "us_per_call", "sm_mhz_median", "power_w_median", "joules_per_call",
          "throttle"]].round(3).to_string())
