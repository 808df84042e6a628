"""Where the host time of one call goes (scratch probe, one device call): kmeans assign and the GEMM.

For each: microseconds per call of the whole Python call (async, no sync), of the compiled function called
with pre-built arguments, of building the arguments, and a cProfile of 300 calls (top entries by own time).
    python tools/probes/probe_host.py
"""
import cProfile
import pstats
import time

import torch

import kmeans_kernels
from gemm_kernels import hopper as gh
from kmeans_kernels import hopper as kh, reference


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


def profile(name, fn, n=300):
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    print(f"--- cProfile {name} ({n} calls; tottime is total seconds)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


def main():
    x = torch.randn(65536, 128, device="cuda").bfloat16()
    c = torch.randn(512, 128, device="cuda").bfloat16()
    c_sq = reference.centroid_norms(c)
    out = torch.empty(65536, dtype=torch.int32, device="cuda")
    assign = lambda: kmeans_kernels.assign(x, c, variant="norm_broadcast", c_sq=c_sq, out=out)
    kernel = kh._launches("norm_broadcast", 128, torch.bfloat16).compiled
    import cuda.bindings.driver as cuda
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    args = kh._args(torch.bfloat16, x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), 65536, 512,
                    stream)
    exe, adapted = kernel.generate_execution_args(*args)
    torch_assign = lambda: (0.5 * c_sq - (x @ c.t()).float()).argmin(1)
    print("kmeans 65536x128x512, us per call (host, async):")
    for name, fn in (("assign()", assign), ("compiled(prebuilt args)", lambda: kernel(*args)),
                     ("run_compiled_program(exe args)", lambda: kernel.run_compiled_program(exe)),
                     ("generate_execution_args", lambda: kernel.generate_execution_args(*args)),
                     ("torch matmul+argmin", torch_assign)):
        print(f"  {name:<34} {per_call_us(fn):8.1f}")
    profile("kmeans assign", assign)

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    o = torch.empty_like(a)
    g = lambda: gh.gemm(a, b, out=o)
    g()
    cfg, plan, work = gh._prepare(4096, 4096, None, None, "register", "balanced", gh.DEFAULT_CLUSTER_M,
                                  gh.BAND_ROWS, a.device)
    gk = gh._launches(cfg).compiled
    gargs = gh._args(a.data_ptr(), b.data_ptr(), o.data_ptr(), work.data_ptr(), 4096, 4096, 4096,
                     len(plan.items), min(len(plan.items), plan.slots) * cfg.cluster_m, stream)
    gexe, gad = gk.generate_execution_args(*gargs)
    print("gemm 4096^3, us per call (host, async):")
    for name, fn in (("gemm()", g), ("compiled(prebuilt args)", lambda: gk(*gargs)),
                     ("run_compiled_program(exe args)", lambda: gk.run_compiled_program(gexe)),
                     ("_args", lambda: gh._args(a.data_ptr(), b.data_ptr(), o.data_ptr(), work.data_ptr(), 4096,
                                                4096, 4096, 1, 1, stream)),
                     ("torch.matmul", lambda: torch.matmul(a, b, out=o))):
        print(f"  {name:<34} {per_call_us(fn):8.1f}")
    profile("gemm", g)


if __name__ == "__main__":
    main()
