"""One call each of torch.matmul (cuBLAS) and our default GEMM inside a profiler window, for Nsight Compute
(scratch probe). Inputs are made and our kernel compiled before the window opens, so ncu sees two kernels.
    ncu --clock-control none --profile-from-start off --section SpeedOfLight ... \
        python tools/probes/probe_ncu.py 16384
"""
import sys

import torch

from gemm_kernels import hopper


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        torch.matmul(a, b)
        hopper.gemm(a, b)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    torch.matmul(a, b)
    hopper.gemm(a, b)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
