"""Probe: where the 1024- to 2048-row rectangles lose to cuBLAS, in the K loop or around it.

At 1024 x 2048 x 4096 a 128 x 128 tile gives 128 tiles, one per SM, and cuBLAS runs the same count (its nvjet
128x128 in 2 x 1 clusters, `gemm_cublas_census_probe.py`), yet the rule check on the H200 measured gemm(a, b) at
83-90 % of torch.matmul's speed at these shapes. With one tile per SM, a CTA's time is fixed costs (launch, the
ring's fill, the epilogue) plus K / 64 K-blocks at its mainloop's pace: timing each build at three K and fitting
time = intercept + slope x K separates the two. A slope above cuBLAS's is the mainloop (the WGMMA issue, the ring's
barriers); an intercept above it is the fill or the epilogue.

Contenders, each at every K of its (M, N), answers exact on small integers first, CUPTI GPU time and both timings
against torch.matmul taking turns (`probe_rows.gemm_rows`): the 128-wide builds the rule picks here (pairs along M
sharing B, one CTA alone, pairs along N sharing A), the 256-wide build it picks at 1024 x 4096, the swapped build.

    python gemm_k_slope_probe.py OUT_DIR     (its run: gemm_k_slope_<commit>.csv, the fitted lines printed last)"""
import sys

import numpy as np
import pandas as pd
import torch

from gemm_kernels import configs
from probe_rows import gemm_rows, save

PLANES = [(1024, 2048), (2048, 1024), (1024, 4096), (2048, 2048)]
KS = [1024, 4096, 16384]
BUILDS = ["128 balanced cluster2", "128 balanced cluster1", "128 uniform cluster2n", "256 balanced cluster1",
          "128 uniform cluster4 swapped"]


def lines(df: pd.DataFrame) -> pd.DataFrame:
    """GPU time = intercept + slope x K per (M, N, contender), least squares over the run's K: the intercept in us,
    the slope in us per 1024 of K, both also as ratios to torch.matmul's."""
    gpu = df[df.timing == "gpu"]
    out = []
    for (M, N, name), g in gpu.groupby(["M", "N", "contender"]):
        slope, intercept = np.polyfit(g.K / 1024, g.us_median, 1)
        out.append(dict(M=M, N=N, contender=name, intercept_us=intercept, us_per_1024_k=slope))
    fit = pd.DataFrame(out)
    torch_ = fit[fit.contender == "torch.matmul"].set_index(["M", "N"])
    fit["slope_vs_torch"] = [r.us_per_1024_k / torch_.loc[(r.M, r.N), "us_per_1024_k"] for r in fit.itertuples()]
    fit["intercept_minus_torch_us"] = [r.intercept_us - torch_.loc[(r.M, r.N), "intercept_us"]
                                       for r in fit.itertuples()]
    return fit


def main(out_dir: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(17)
    options = {name: configs.HOPPER_CANDIDATES[name] for name in BUILDS}
    rows = []
    for M, N in PLANES:
        for K in KS:
            rows += gemm_rows(M, N, K, options, g, 6, input_sets=2, with_pick=False)
            df = save(rows, f"{out_dir}/gemm_k_slope.csv")
    pd.set_option("display.width", 220)
    print(df[df.timing == "gpu"].pivot_table(index=["M", "N", "K"], columns="contender", values="us_median")
          .round(1).to_string())
    fit = lines(df)
    fit.to_csv(f"{out_dir}/gemm_k_slope_lines.csv", index=False)
    print(fit.round(3).to_string(index=False))


if __name__ == "__main__":
    main(*sys.argv[1:])
