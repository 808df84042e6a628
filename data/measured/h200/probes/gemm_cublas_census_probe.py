"""Probe: which kernel cuBLAS runs for torch.matmul at every shape of the rule check (`gemm_kernels.sweep`'s
swept and held-out shapes, bf16), read from a CUPTI trace (torch.profiler): name, grid, block, registers, shared
memory and the median duration of 5 calls. Needs torch only (no CuTe DSL), so it runs on a bare device machine.
The nvjet names spell the tile in cuBLAS's column-major terms: torch hands cuBLAS c^T = b^T a^T, so the name's
first tile size runs along our N and its second along our M (`nvjet_columns`).
    python gemm_cublas_census_probe.py OUT_DIR          # writes OUT_DIR/gemm_cublas_census.csv"""
import csv
import os
import re
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from gemm_kernels import sweep

NVJET = re.compile(r"nvjet_sm\d+_\w+?_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_([hv])_")


def nvjet_columns(name: str) -> dict:
    """The tile, K-block, stages and cluster an nvjet kernel's name spells, in our (M, N) terms; {} otherwise."""
    m = NVJET.search(name)
    if not m:
        return {}
    tn, tm, tk, stages, cn, cm, raster = m.groups()
    return dict(tile_n=int(tn), tile_m=int(tm), tile_k=int(tk), stages=int(stages), cluster_n=int(cn),
                cluster_m=int(cm), raster=raster, split_k="splitK" in name, stream_k="streamK" in name.lower()
                or "_sk_" in name)


def main(out: str) -> None:
    shapes = sweep.all_shapes(None, (sweep.SHAPES, sweep.HELD_OUT))
    rows = []
    gpu = torch.cuda.get_device_name()
    for cls, (M, N, K) in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                torch.matmul(a, b)
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        names = list(dict.fromkeys(e.name for e in kernels))
        per_call = sum(e.device_time for e in kernels) / 5
        main_kernel = max(names, key=lambda n: sum(e.device_time for e in kernels if e.name == n))
        durs = [e.device_time for e in kernels if e.name == main_kernel]
        row = dict(cls=cls, M=M, N=N, K=K, kernel=main_kernel, kernels_per_call=len(kernels) / 5,
                   other_kernels=" | ".join(n for n in names if n != main_kernel),
                   main_us=round(statistics.median(durs), 3), call_us=round(per_call, 3), gpu=gpu,
                   torch=torch.__version__, commit=os.environ.get("WORKBOOK_COMMIT", ""))
        row.update(nvjet_columns(main_kernel))
        rows.append(row)
        print(cls, M, N, K, main_kernel, row["main_us"], flush=True)
        del a, b
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(os.path.join(out, "gemm_cublas_census.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main(sys.argv[1])
