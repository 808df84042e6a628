"""Probe: the SM clock and board power while each ablation build of `kmeans_ablation_probe.py` runs back to back
for a few seconds. If the fold and the WGMMAs add up because the board is at its power cap (the clock falls when
both run), the full build's clock is lower than either part's alone; if the clock holds, what they share is inside
the SM. nvidia-smi samples clocks, power and the throttle reasons every 20 ms (`sustained_clocks.sustained`).
    python kmeans_ablation_clocks_probe.py OUT_DIR   (its run: kmeans_ablation_clocks_<commit>.csv)"""
import sys
from pathlib import Path

import torch

from kmeans_ablation_probe import BUILDS, launcher
from kmeans_kernels import bench
from probe_rows import save
from sustained_clocks import sustained

out_dir = sys.argv[1]
SECONDS = 3.0
rows = []
for N, D, K in [(262144, 128, 16384), (65536, 64, 16384)]:
    sets = bench.input_sets(N, D, K)
    x, c, c_sq = sets[0]
    for name, cls in BUILDS.items():
        run, out = launcher(cls, D, x.dtype), torch.empty(N, dtype=torch.int32, device="cuda")
        rows.append(dict(N=N, D=D, K=K, build=name, **sustained(lambda: run(x, c, c_sq, out),
                                                                 Path(out_dir) / "smi.csv", SECONDS, batch=10)))
        print(rows[-1], flush=True)
df = save(rows, f"{out_dir}/kmeans_ablation_clocks.csv")
print(df[["N", "D", "K", "build", "us_per_call", "sm_mhz_median", "sm_mhz_min", "power_w_median", "throttle"]]
      .to_string())
