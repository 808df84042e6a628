"""Probe: where a k-means warp waits, instruction by instruction (Nsight Compute's source page, stall sampling).

One launch of a library variant inside the profiler window (launch graphs off, so ncu sees a plain kernel), then
the SASS with its stall samples as CSV, and a summary read from that CSV (no GPU needed):
    WORKBOOK_LAUNCH_GRAPHS=0 ncu --clock-control none --profile-from-start off --section SourceCounters \
        --section WarpStateStats --import-source no -o REP python kmeans_ncu_source_probe.py lazy_index 65536,64,16384
    ncu --import REP.ncu-rep --page source --csv --print-source sass > SOURCE.csv
    python kmeans_ncu_source_probe.py --summary SOURCE.csv[.gz]
(its run: kmeans_ncu_source_<variant>_<N>x<D>x<K>_<commit>.csv.gz)"""
import sys

import pandas as pd

SAMPLES = "Warp Stall Sampling (All Samples)"


def launch_once(variant, shape):
    import torch
    from kmeans_kernels import bench, hopper
    N, D, K = map(int, shape.split(","))
    x, c, c_sq = bench.input_sets(N, D, K)[0]
    out = torch.empty(N, dtype=torch.int32, device="cuda")
    for _ in range(3):                      # compiled and warm before the window opens
        hopper.run(variant, x, c, c_sq, out)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    hopper.run(variant, x, c, c_sq, out)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def read_source(path):
    """The source page: one row per SASS instruction, the first line (the kernel's name) dropped."""
    df = pd.read_csv(path, skiprows=1)
    stalls = [c for c in df.columns if c.startswith("stall_") and "Not Issued" not in c]
    for c in [SAMPLES, *stalls]:
        df[c] = pd.to_numeric(df[c], errors="coerce").fillna(0)
    df["opcode"] = df.Source.str.strip().str.replace(r"^@!?U?P[T0-9]+\s+", "", regex=True).str.split().str[0]
    return df, stalls


def summary(path, top=12):
    df, stalls = read_source(path)
    total = df[SAMPLES].sum()
    print(f"{path}: {total:.0f} samples\nstall reasons (share of all samples):")
    print((df[stalls].sum() / total).sort_values(ascending=False).head(8).round(3).to_string())
    print("\ninstructions with the most samples (index in the SASS, share, its two main reasons):")
    for i, r in df.sort_values(SAMPLES, ascending=False).head(top).iterrows():
        main = r[stalls].sort_values(ascending=False).head(2)
        print(f"{i:5d} {r[SAMPLES] / total:6.3f}  {r.Source.strip()[:58]:<58} "
              + ", ".join(f"{k[6:]} {v / total:.3f}" for k, v in main.items() if v > 0))
    print("\nby opcode:")
    print((df.groupby("opcode")[SAMPLES].sum() / total).sort_values(ascending=False).head(top).round(3).to_string())


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        for p in sys.argv[2:]:
            summary(p)
    else:
        launch_once(sys.argv[1], sys.argv[2])
