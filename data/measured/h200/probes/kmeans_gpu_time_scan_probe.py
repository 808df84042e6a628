"""Probe: GPU time (CUPTI) of auto's kernel over N and K at D = 64 and 128, one wave of CTAs and a CTA per point
tile: the fixed cost of a call and the cost of a centroid tile.  python kmeans_gpu_time_scan_probe.py > out.txt"""
import sys
import torch
from gemm_kernels import sweep
from kmeans_kernels import bench, hopper
from workbook import launch

rows = []
for D in (64, 128):
    for N, K in [(65536, 128), (65536, 256), (65536, 512), (65536, 1024), (65536, 2048),
                 (16896, 512), (33792, 512), (131072, 512), (262144, 512)]:
        sets = bench.input_sets(N, D, K)
        v = hopper.auto_variant(N, D, K)
        fns = {}
        spec = hopper.VARIANT_SPECS[v]
        wave = hopper.ctas_per_sm(D, spec.block_n, spec.staged_norms) * launch.sm_count(0)
        for ctas in (wave, hopper.MAX_CTAS):
            run = hopper.launcher(v, N, D, K, torch.bfloat16, 0, False, ctas)
            def fn(x, c, c_sq, run=run):
                out = torch.empty(N, dtype=torch.int32, device="cuda"); run(x, c, c_sq, out); return out
            fns["wave" if ctas == wave else "tile"] = fn
        g = sweep.gpu_ms(fns, sets)
        floor_us = 2 * N * D * K / 790e12 * 1e6
        print(f"D={D} N={N} K={K} {v} gpu_us wave {1e3*g['wave']:.2f} tile {1e3*g['tile']:.2f} "
              f"mma_floor_us {floor_us:.2f} point_tiles {N // 128}", flush=True)
