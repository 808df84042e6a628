"""Where a small GEMM's time goes, ours against torch.matmul: the host's microseconds per call, piece by piece,
and the GPU's kernel time per call (CUPTI, through `gemm_kernels.sweep.gpu_ms`).

    python tools/host_cost.py                      # 1024^3 and 16x8192x4096
    python tools/host_cost.py --shapes 2048x2048x2048 --calls 2000

Host pieces are each timed over `--calls` repetitions with time.perf_counter; "issue rate" is back-to-back calls
with no synchronisation divided by their count (the host's rate, as long as the GPU keeps up).
"""
from __future__ import annotations

import argparse
import time

import torch

import gemm_kernels
from gemm_kernels import hopper_host, rule, sweep
from gemm_kernels.hopper_options import DTYPES
from gemm_kernels.bench import shape_arg
from workbook import launch


def per_call_us(fn, calls: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=shape_arg, nargs="+", default=[(1024, 1024, 1024), (16, 8192, 4096)])
    p.add_argument("--calls", type=int, default=3000)
    args = p.parse_args(argv)
    for M, N, K in args.shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        ours = lambda: gemm_kernels.gemm(a, b)            # noqa: E731
        call = hopper_host._call_for(M, N, K, 0)
        stream = launch.stream_handle(0)
        pieces = {
            "gemm(a, b) issue rate": ours,
            "torch.matmul issue rate": lambda: torch.matmul(a, b),
            "hopper_host.gemm(a, b, out=out)": lambda: hopper_host.gemm(a, b, out=out),
            "check_operand x2": lambda: (gemm_kernels.check_operand("a", a, DTYPES),
                                         gemm_kernels.check_operand("b", b, DTYPES)),
            "_operands": lambda: hopper_host._operands(a, b),
            "_call_for": lambda: hopper_host._call_for(M, N, K, 0),
            "rule.options_for": lambda: rule.options_for(M, N, K),
            "torch.empty": lambda: torch.empty((M, N), dtype=torch.bfloat16, device=a.device),
            "a.new_empty": lambda: a.new_empty((M, N)),
            "torch.empty_like(out)": lambda: torch.empty_like(out),
            "stream_handle": lambda: launch.stream_handle(0),
            "on_device": lambda: launch.on_device(0),
            "is_capturing": lambda: launch.is_capturing(stream),
            "_launch (graph launch path)": lambda: hopper_host._launch(call, a, b, out, stream),
            "torch.cuda.current_device": torch.cuda.current_device,
        }
        for _ in range(call.launches.capture_after):       # sighted often enough: now its graph exists
            hopper_host._launch(call, a, b, out, stream)
        graph = next(iter(call.launches._graphed.values()))
        pieces["cuGraphLaunch"] = lambda: launch.graph_launch(graph, stream)
        fresh = [torch.empty_like(out) for _ in range(args.calls + 1)]
        pieces["gemm(a, b, out=<a new tensor each call>)"] = lambda: hopper_host.gemm(a, b, out=fresh.pop())
        print(f"\n{M}x{N}x{K}: rule picks {rule.choose(M, N, K)!r}")
        for name, fn in pieces.items():
            us = per_call_us(fn, args.calls)
            torch.cuda.synchronize()
            print(f"  {name:<34} {us:8.2f} us per call")
        gpu = sweep.gpu_ms({"ours": ours, "torch": lambda: torch.matmul(a, b)}, [()], calls=200)
        for name, ms in gpu.items():
            print(f"  GPU time per call, {name:<5} {1e3 * ms:8.2f} us")


if __name__ == "__main__":
    main()
