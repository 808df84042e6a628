"""Does taking turns call by call change what a contender reads? (scratch probe, one device call)

The bench's first call-by-call run read torch.matmul at 4096^3 13 % slower than every earlier run, while our
kernels read as before. Times torch.matmul, synchronised per call (the seeds' method), alone; taking turns with
itself; taking turns with our default GEMM, with and without an untimed settling call before each timed one; and
in three rounds of 10 with it (the method before).
    python tools/probes/probe_turns.py > turns.csv          # WORKBOOK_LAUNCH_GRAPHS=0: ours without graphs
"""
import os
import sys

import torch

from gemm_kernels import bench as gb, hopper
from workbook import timing

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    graphs = os.environ.get("WORKBOOK_LAUNCH_GRAPHS", "1") != "0"
    print("shape,graphs,method,contender,ms_median,ms_min,ms_max")
    for M, N, K in SHAPES:
        sets = gb.input_sets(M, N, K)
        ours = lambda a, b: hopper.gemm(a, b)
        torch_again = lambda a, b: torch.matmul(a, b)
        runs = {
            "alone": {"torch": timing.bench(torch.matmul, sets)},
            "turns with itself": timing.bench_interleaved({"torch": torch.matmul, "torch again": torch_again}, sets,
                                                          settle=0),
            "turns with ours": timing.bench_interleaved({"torch": torch.matmul, "ours": ours}, sets, settle=0),
            "settled turns with ours": timing.bench_interleaved({"torch": torch.matmul, "ours": ours}, sets),
            "rounds of 10 with ours": timing.bench_interleaved({"torch": torch.matmul, "ours": ours}, sets, rounds=3),
            "ours alone": {"ours": timing.bench(ours, sets)},
        }
        for method, res in runs.items():
            for name, t in res.items():
                print(f"{M}x{N}x{K},{int(graphs)},{method},{name},{t.ms_median:.4f},{t.ms_min:.4f},{t.ms_max:.4f}",
                      flush=True)
        del sets
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
