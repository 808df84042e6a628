"""Where the host time of one call goes (scratch probe, one device call): k-means assign and the GEMM.

For each: microseconds per call (async, no sync) of the whole Python call with the launch cache replaying
CUDA graphs (the default) and without graphs, of the compiled host code called with pre-built arguments, and
of torch's own path; then, for the 4096^3 GEMM, the seeds' per-call-synchronised timing and a back-to-back
timing (no sync between calls), ours with and without graphs beside torch.matmul, interleaved.
    python tools/probes/probe_host.py
"""
import time

import torch

import kmeans_kernels
from gemm_kernels import hopper as gh
from kmeans_kernels import reference
from workbook import launch, timing


def per_call_us(fn, n=500):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return us


def graphs(on: bool):
    """Switch graph capture on or off for the two kernels probed here (their cached launches are dropped)."""
    from kmeans_kernels import hopper as kh
    launch.GRAPHS = on
    caches = [kh._launches("norm_broadcast", 128, torch.bfloat16),
              gh._call_for(4096, 4096, 4096, 0).launches]
    for cache in caches:
        cache.graphs = on
        cache._entries.clear()


def main():
    x = torch.randn(65536, 128, device="cuda").bfloat16()
    c = torch.randn(512, 128, device="cuda").bfloat16()
    c_sq = reference.centroid_norms(c)
    out = torch.empty(65536, dtype=torch.int32, device="cuda")
    assign = lambda: kmeans_kernels.assign(x, c, variant="norm_broadcast", c_sq=c_sq, out=out)
    print("kmeans 65536x128x512, us per call (host, async):")
    for on in (True, False):
        graphs(on)
        print(f"  {'assign() graphs ' + ('on' if on else 'off'):<34} {per_call_us(assign):8.1f}")
    print(f"  {'torch matmul+argmin':<34} {per_call_us(lambda: (0.5 * c_sq - (x @ c.t()).float()).argmin(1)):8.1f}")

    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    o = torch.empty_like(a)
    print(f"gemm {n}^3, us per call (host, async):")
    for on in (True, False):
        graphs(on)
        tag = "on" if on else "off"
        print(f"  {'gemm(out=o) graphs ' + tag:<34} {per_call_us(lambda: gh.gemm(a, b, out=o)):8.1f}")
        print(f"  {'gemm() graphs ' + tag:<34} {per_call_us(lambda: gh.gemm(a, b)):8.1f}")
    call = gh._call_for(n, n, n, 0)
    import cuda.bindings.driver as cuda
    stream = torch.cuda.current_stream().cuda_stream
    args = gh._args(a.data_ptr(), b.data_ptr(), o.data_ptr(), call.work.data_ptr(),
                    *(t.data_ptr() for t in call.scratch(stream)), *call.sizes, cuda.CUstream(stream))
    exe, keep = call.launches.compiled.generate_execution_args(*args)
    print(f"  {'run_compiled_program(exe args)':<34} {per_call_us(lambda: call.launches.compiled.run_compiled_program(exe)):8.1f}")
    print(f"  {'torch.matmul(out=o)':<34} {per_call_us(lambda: torch.matmul(a, b, out=o)):8.1f}")
    print(f"  {'torch.matmul':<34} {per_call_us(lambda: torch.matmul(a, b)):8.1f}")

    sets = [(torch.randn(n, n, device="cuda", dtype=torch.bfloat16),
             torch.randn(n, n, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    graphs(True)
    print(f"\ngemm {n}^3 timing, ms (median of 30, interleaved rounds) and back to back:")
    res = timing.bench_interleaved({"torch": torch.matmul, "ours": lambda a, b: gh.gemm(a, b)}, sets, rounds=3)
    graphs(False)
    res_off = timing.bench_interleaved({"torch": torch.matmul, "ours graphs off": lambda a, b: gh.gemm(a, b)},
                                       sets, rounds=3)
    b2b_off = timing.back_to_back(lambda a, b: gh.gemm(a, b), sets, calls=60)[0]
    graphs(True)
    b2b_on = timing.back_to_back(lambda a, b: gh.gemm(a, b), sets, calls=60)[0]
    b2b_torch = timing.back_to_back(torch.matmul, sets, calls=60)[0]
    flops = 2 * n ** 3
    for name, t in (("torch (run 1)", res["torch"]), ("ours graphs on", res["ours"]),
                    ("torch (run 2)", res_off["torch"]), ("ours graphs off", res_off["ours graphs off"])):
        print(f"  {name:<20} sync per call {t.ms_median:.4f} ms  {t.tflops(flops):6.1f} TFLOP/s")
    for name, ms in (("torch", b2b_torch), ("ours graphs on", b2b_on), ("ours graphs off", b2b_off)):
        print(f"  {name:<20} back to back  {ms:.4f} ms  {flops / ms / 1e9:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()
