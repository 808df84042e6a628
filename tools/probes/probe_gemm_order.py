"""Does the configuration or the order of timing decide the GEMM's per-call number? (scratch probe)

Times torch.matmul and several configurations of ours *interleaved*, three rounds, synced (the seeds' method)
and back to back, so that clock drift between consecutive measurements cannot pose as a difference.
    python tools/probes/probe_gemm_order.py > order.csv
"""
import sys

import torch

from gemm_kernels import bench as gb, hopper
from workbook import timing
from probe_gemm import back_to_back_ms

CONFIGS = {
    "torch": None,
    "default": {},
    "uniform c1 band1": dict(schedule="uniform", cluster_m=1, band_rows=1),
    "uniform c1 band8": dict(schedule="uniform", cluster_m=1),
    "uniform c2 band1": dict(schedule="uniform", cluster_m=2, band_rows=1),
    "balanced c2 band1": dict(schedule="balanced", cluster_m=2, band_rows=1),
    "uniform c2 band8": dict(schedule="uniform", cluster_m=2),
}


def main():
    print("shape,round,config,synced_ms,b2b_ms")
    for M, N, K in ((4096, 4096, 4096), (2048, 5120, 8192), (2560, 7168, 8192), (2048, 6656, 8192)):
        sets = gb.input_sets(M, N, K)
        fns = {name: torch.matmul if kw is None else (lambda a, b, kw=kw: hopper.gemm(a, b, **kw))
               for name, kw in CONFIGS.items()}
        for rnd in range(3):
            for name, fn in fns.items():
                synced = timing.bench(fn, sets).ms_median
                print(f"{M}x{N}x{K},{rnd},{name},{synced:.4f},{back_to_back_ms(fn, sets):.4f}", flush=True)
        del sets
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
