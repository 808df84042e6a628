"""GEMM A/B in one device call (scratch probe): what cuBLAS runs, and ours vs torch.matmul synced and back to back.

    python tools/probes/probe_gemm.py > gemm_probe.csv
"""
import sys

import torch

from gemm_kernels import bench as gb, hopper
from workbook import timing

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (8448, 2048, 4096),
          *gb.poor_wave_shapes()]


def back_to_back_ms(fn, sets, calls=50):
    """The probes' back-to-back time: 50 calls after 5 warm-up calls (workbook.timing.back_to_back)."""
    return timing.back_to_back(fn, sets, calls, warmup=5)[0]


def cublas_kernel(a, b):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        torch.matmul(a, b)
        torch.cuda.synchronize()
    return ";".join(sorted({ev.name for ev in p.events() if ev.device_type.name == "CUDA"}))


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    contenders = {"torch": torch.matmul,
                  "balanced": lambda a, b: hopper.gemm(a, b),
                  "uniform": lambda a, b: hopper.gemm(a, b, schedule="uniform")}
    print("shape,kernel,synced_ms,b2b_ms,tflops_synced,tflops_b2b,rel_err,cublas")
    for M, N, K in SHAPES:
        sets = gb.input_sets(M, N, K)
        flop = 2.0 * M * N * K
        name = cublas_kernel(*sets[0])
        extra = {}
        if M * N >= 8192 * 8192:
            for band in (4, 16, 32):
                extra[f"balanced_band{band}"] = lambda a, b, band=band: hopper.gemm(a, b, band_rows=band)
        for kname, fn in {**contenders, **extra}.items():
            err = gb.rel_error(fn(*sets[0]), *sets[0])
            synced = timing.bench(fn, sets).ms_median
            b2b = back_to_back_ms(fn, sets)
            print(f"{M}x{N}x{K},{kname},{synced:.4f},{b2b:.4f},{flop / synced / 1e9:.1f},{flop / b2b / 1e9:.1f},"
                  f"{err:.1e},{name if kname == 'torch' else ''}", flush=True)
        del sets
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
