"""Probe: our GEMM's throughput against the row pitch, at nearly one size. From 4096 to 4160 in steps of 8 elements:
first K (M = N = 4096), so only A's rows (K elements) start 0, 16, ..., 112 bytes past a 128-byte line, then on one
again at 4160, the tiles the same (the last K-block partly zero); then N (M = K = 4096), B's and C's rows, where the
tiles are the same from 4104 to 4160 (one more, narrow, column of them than at 4096). If a TMA box row that starts off a line costs what the recorded sweep suggests (the single-CTA
build at 0.57-0.97 of torch.matmul's throughput where pitches are off lines, 0.98 where they are on:
notes/perf-log.md), our TFLOP/s falls at every off-line pitch and comes back at 4160, the pairs (half of B's boxes
each) fall less, and torch.matmul hardly moves. Each build's answer is checked (exact on small integers) first;
CUPTI GPU time and both timings against torch.matmul, taking turns.
    python gemm_pitch_probe.py OUT_DIR   (its run: gemm_pitch_<commit>.csv)"""
import sys

import pandas as pd
import torch

from gemm_kernels import configs
from probe_rows import gemm_rows, save

BUILDS = ("256 balanced cluster1", "256 balanced cluster2")
SIZES = range(4096, 4161, 8)


def main(out_dir):
    rows = []
    g = torch.Generator(device="cuda").manual_seed(29)
    cases = [(4096, 4096, S) for S in SIZES] + [(4096, S, 4096) for S in SIZES[1:]]
    for M, N, K in cases:
        varied = "K" if N == 4096 and K != 4096 else "N" if N != 4096 else "none"
        rows += gemm_rows(M, N, K, {name: configs.HOPPER_CANDIDATES[name] for name in BUILDS}, g, 6,
                          with_pick=False, varied=varied, pitch_past_line=(2 * max(N, K)) % 128)
        df = save(rows, f"{out_dir}/gemm_pitch.csv")
    df["tflops"] = 2 * df.M * df.N * df.K / (df.us_median * 1e-6) / 1e12
    pd.set_option("display.width", 220)
    print(df[df.timing == "gpu"].pivot_table(index=["varied", "N", "K", "pitch_past_line"], columns="contender",
                                              values="tflops").round(0).to_string())


if __name__ == "__main__":
    main(sys.argv[1])
