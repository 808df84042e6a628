"""Probe: at shapes whose rows are off 128-byte lines, do clusters that share both operands recover what the pitch
costs? Profiles at 5000^3 (`nvidia_h100_80gb_hbm3/probes/ncu_pitch_5000_4717722.txt`) put the single-CTA 128 x 256
kernel at 78 M L2 requests and 93 % of the L2's throughput (5120^3, on lines: 25 M, 71 %), pairs along M sharing B
at 48 M, cuBLAS at 46 M: the L2's request rate sets the pace there, and each operand a cluster shares halves its
boxes' requests. Contenders, against the rule's pick and torch.matmul:
  * "256 balanced cluster2" (pairs along M share B; the default), where it is not the pick;
  * "256 uniform cluster2x2": 128 x 256 tiles in 2 x 2 clusters, A shared along each row, B along each column
    (never swept: the sweep's 2 x 2 candidates are 128 and 64 wide);
  * "128 uniform cluster2x2" and "128 uniform cluster2n".
5120^3 (rows on lines) is the control. Each contender's answer is checked (exact on small integers) first; CUPTI GPU
time and both timings against the rule's pick, taking turns (`workbook.timing.compare`).
    python gemm_misaligned_clusters_probe.py OUT_DIR   (its run: gemm_misaligned_clusters_<commit>.csv)"""
import sys

import pandas as pd
import torch

from gemm_kernels import configs, hopper_options
from probe_rows import gemm_rows, save

_H = hopper_options.Options
EXTRA = {
    "256 balanced cluster2": configs.HOPPER_CANDIDATES["256 balanced cluster2"],
    "256 uniform cluster2x2": _H(tile=(128, 256, 64), schedule="uniform", cluster_m=2, cluster_n=2),
    "128 uniform cluster2x2": configs.HOPPER_CANDIDATES["128 uniform cluster2x2"],
    "128 uniform cluster2n": configs.HOPPER_CANDIDATES["128 uniform cluster2n"],
}
# rows off lines (2N or 2K not a multiple of 128), the worst of the odd class first; 5120^3 on lines
SHAPES = [(5000, 5000, 5000), (3000, 3000, 3000), (4097, 4104, 4104), (800, 5000, 3000), (1500, 2504, 3000),
          (5120, 5120, 5120)]


def main(out_dir):
    rows = []
    g = torch.Generator(device="cuda").manual_seed(29)
    for M, N, K in SHAPES:
        rows += gemm_rows(M, N, K, EXTRA, g, 8, input_sets=2)
        df = save(rows, f"{out_dir}/gemm_misaligned_clusters.csv")
    pd.set_option("display.width", 220)
    print(df.pivot_table(index=["M", "N", "K", "contender"], columns="timing", values="ratio").round(3).to_string())


if __name__ == "__main__":
    main(sys.argv[1])
