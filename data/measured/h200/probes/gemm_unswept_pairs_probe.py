"""Probe: configurations the sweep never timed, shaped after the kernel cuBLAS runs at the K-heavy shapes with few
tiles, against the rule's pick and torch.matmul. At 1024 x 1024 x 8192 cuBLAS launches 128 CTAs of three warpgroups
in clusters of two (`nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT`, grid (2, 64)) and reads 6.05 M L2 sectors
(probes/ncu_kheavy_2x2_l2.txt): what 128 x 128 tiles split in two along K read when each pair of CTAs side by side
shares its A tile (128 CTAs x 64 K-blocks x 24 KiB). Our 2 x 2 clusters of the same tile read as few sectors but
fit only 30 clusters (120 CTAs) and stall 23 % of their warps' cycles on barriers; pairs along N fit 66. So:
  * "128 stream-k cluster2n": 128 x 128 tiles, pairs side by side along N sharing A, stream-K (split along K where
    the tiles are fewer than the slots);
  * "256 stream-k cluster2n": the same with 128 x 256 tiles.
Each contender's answer is checked (exact on small integers) first; CUPTI GPU time and both timings against the
rule's pick, taking turns (`workbook.timing.compare`).
    python gemm_unswept_pairs_probe.py OUT_DIR   (its run: gemm_unswept_pairs_<commit>.csv)"""
import sys

import pandas as pd
import torch

from gemm_kernels import hopper_options
from probe_rows import gemm_rows, save

_H = hopper_options.Options
EXTRA = {
    "128 stream-k cluster2n": _H(tile=(128, 128, 64), schedule="uniform", cluster_m=1, cluster_n=2, stream_k=True),
    "256 stream-k cluster2n": _H(tile=(128, 256, 64), schedule="uniform", cluster_m=1, cluster_n=2, stream_k=True),
}
# the K-heavy class's worst shapes in the rule check (eb9634a): 79-92 % of torch.matmul's GPU time
SHAPES = [(1024, 1024, 8192), (1024, 1024, 32768), (1536, 1024, 8192), (1536, 1536, 12288), (512, 2048, 16384)]


def main(out_dir):
    rows = []
    g = torch.Generator(device="cuda").manual_seed(23)
    for M, N, K in SHAPES:
        rows += gemm_rows(M, N, K, EXTRA, g, 8)
        df = save(rows, f"{out_dir}/gemm_unswept_pairs.csv")
    pd.set_option("display.width", 220)
    print(df.pivot_table(index=["M", "N", "K", "contender"], columns="timing", values="ratio").round(3).to_string())


if __name__ == "__main__":
    main(sys.argv[1])
