"""torch.matmul (cuBLAS) and configurations of our GEMM inside a profiler window, for Nsight Compute
(scratch probe). Inputs are made and our kernels compiled before the window opens, so ncu sees one kernel
per contender, in the order printed to stderr.
    ncu --clock-control none --profile-from-start off --metrics dram__bytes_read.sum,... \
        python tools/probes/probe_ncu.py 16384 [band_rows:4 band_rows:16 cluster_m:1 ...]
"""
import sys

import torch

from gemm_kernels import hopper


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    configs = [{}] + [dict(tuple(kv.split(":")) for kv in arg.split(",")) for arg in sys.argv[2:]]
    # e.g. band_rows:16,persistent:0 or schedule:uniform
    configs = [{k: int(v) if v.isdigit() else v for k, v in kw.items()} for kw in configs]
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    runs = [("torch", lambda: torch.matmul(a, b))] + [
        (f"ours {kw or 'default'}", lambda kw=kw: hopper.gemm(a, b, **kw)) for kw in configs]
    for _ in range(2):
        for _, fn in runs:
            fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, fn in runs:
        print(f"profiled: {n}^3 {name}", file=sys.stderr, flush=True)
        fn()
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
