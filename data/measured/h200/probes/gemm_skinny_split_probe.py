"""Probe: split-K on wide 64-row tiles at the memory-bound skinny shapes.

At M <= 256 and N, K >= 4096 a GEMM reads B (K x N, 32-200 MB) from DRAM once and little else: the sweep's best
candidates there (`64x64 uniform cluster1`, one 64 x 64 tile per SM at N = 8192) and cuBLAS (16 x 64 and 64 x 64
tiles) both run at about 80 % of the H200's DRAM bandwidth. A 64-wide tile reads each K-row of its B panel as one
128-byte run, 16 KB from the next; a 128- or 256-wide tile reads 256 or 512 contiguous bytes, but makes half or a
quarter of the tiles, too few for the SMs, unless each is cut along K (`Options.split_k`: every item in the same
pieces, all starting at once). Contenders at each shape, exact on small integers first, then taking turns
(`probe_rows.gemm_rows`): the rule's pick as `gemm(a, b)` runs it, torch.matmul, and 64 x 64, 64 x 128, 64 x 256
and 128 x 128 tiles with the split (one CTA per cluster).
    python gemm_skinny_split_probe.py OUT_DIR   (gemm_skinny_split_<commit>.csv)"""
import sys
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemm_kernels.hopper_options import Options  # noqa: E402
from probe_rows import gemm_rows  # noqa: E402
from workbook import records  # noqa: E402

SHAPES = [(16, 8192, 8192), (16, 8192, 4096), (16, 4096, 8192), (64, 4096, 14336), (64, 8192, 8192),
          (64, 4096, 8192), (128, 4096, 4096), (256, 4096, 14336)]
SPLIT = dict(schedule="uniform", cluster_m=1, stream_k=True, split_k=True)
BUILDS = {"64x64 split-k": Options(tile=(64, 64, 64), **SPLIT),
          "64x128 split-k": Options(tile=(64, 128, 64), **SPLIT),
          "64x256 split-k": Options(tile=(64, 256, 64), **SPLIT),
          "128 split-k cluster1": Options(tile=(128, 128, 64), **SPLIT)}

rows = []
g = torch.Generator(device="cuda").manual_seed(7)
for M, N, K in SHAPES:
    rows += gemm_rows(M, N, K, BUILDS, g, rounds=6)
    records.write_probe(pd.DataFrame(rows), f"{sys.argv[1]}/gemm_skinny_split_{records.provenance()['commit']}.csv")
df = pd.DataFrame(rows)
pd.set_option("display.width", 250)
print(df[df.timing == "gpu"].pivot_table(index=["M", "N", "K"], columns="contender", values="ratio").round(3).to_string())
print(df[df.timing == "kernel"].pivot_table(index=["M", "N", "K"], columns="contender", values="ratio").round(3).to_string())
