"""Probe: where a K = 512 assignment's back-to-back time goes beyond its kernel. At 65536 x 64 x 512 the floor
table reads ~20 us per call back to back where CUPTI reads ~14.5 us of kernel: is the rest the GPU waiting between
graph replays, or the host? Contenders at each shape (fn(x, c, c_sq); three input sets in turn):
  * `assign, new out`: kmeans_kernels.assign(x, c, c_sq=c_sq), as the floor table and the seeds' method call it
    (a re-aimed graph replay per call once warm);
  * `assign, out given`: the same into one output per input set (a replay, nothing re-aimed);
  * `template, new out`: the same compiled kernel behind a launch cache without graphs (`cuLaunchKernel` from a
    patched template every call);
  * `x @ c.T (cuBLAS)`: torch's GEMM of the same operands, a control for what a back-to-back launch costs.
Three readings per contender: both timings with intervals (`workbook.timing.compare`, 12 rounds, 8 calls each way
as the floor table, then 40), and from one CUPTI trace of 60 calls back to back: the kernel's median duration and
the median idle gap between consecutive kernels; and the host's issue time per call with the GPU kept busy.
    python kmeans_launch_gaps_probe.py OUT_DIR   (its run: kmeans_launch_gaps_<commit>.csv)"""
import statistics
import sys
import time

import cuda.bindings.driver as cuda
import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

import kmeans_kernels
from kmeans_kernels import bench, hopper
from workbook import launch, records, timing

SHAPES = [(65536, 64, 512), (65536, 128, 512), (65536, 256, 512), (65536, 128, 4096)]
DTYPE = torch.bfloat16


def template_launcher(N, D, K):
    """`hopper.launcher` for `auto`'s variant, behind a launch cache of its own with graphs off."""
    variant = hopper.auto_variant(N, D, K)
    shared = hopper._launches(variant, D, DTYPE, 0, False)
    cache = launch.LaunchCache(shared.compiled, device=0, pointers=4, reaimable=(2, 3), graphs=False)
    ctas = hopper.grid_cap(variant, D, 0)

    def run(x, c, c_sq):
        out = torch.empty(N, dtype=torch.int32, device=x.device)
        addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), N, K, ctas)
        cache(addrs, lambda s: hopper._args(DTYPE, *addrs, cuda.CUstream(s)), launch.stream_handle(0))
        return out
    return run


def trace(fn, sets, calls=60):
    """Kernel durations and the idle gaps between consecutive kernels (us, medians) over `calls` calls back to
    back after a drained stream; the first five calls' gaps dropped (the queue filling)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
    ks = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA)
    durations = [end - start for start, end in ks]
    gaps = [ks[i + 1][0] - ks[i][1] for i in range(5, len(ks) - 1)]
    return dict(kernels=len(ks), kernel_us=statistics.median(durations), gap_us=statistics.median(gaps),
                span_us_per_call=(ks[-1][1] - ks[5][0]) / (len(ks) - 5))


def host_us(fn, sets, calls=400):
    """Host time per call, issued back to back (the GPU busy, the queue far from full)."""
    for i in range(20):
        fn(*sets[i % len(sets)])
    t = time.perf_counter()
    for i in range(calls):
        fn(*sets[i % len(sets)])
    us = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    return us


rows = []
for N, D, K in SHAPES:
    sets = bench.input_sets(N, D, K, DTYPE)
    outs = {id(s[0]): torch.empty(N, dtype=torch.int32, device="cuda") for s in sets}
    fns = {"assign, new out": lambda x, c, c_sq: kmeans_kernels.assign(x, c, c_sq=c_sq),
           "assign, out given": lambda x, c, c_sq: kmeans_kernels.assign(x, c, c_sq=c_sq, out=outs[id(x)]),
           "template, new out": template_launcher(N, D, K),
           "x @ c.T (cuBLAS)": lambda x, c, c_sq: x @ c.T}
    want = kmeans_kernels.assign(*sets[0][:2], c_sq=sets[0][2])
    for name in ("assign, out given", "template, new out"):
        for _ in range(launch.CAPTURE_AFTER + 2):     # through the capture and replays
            got = fns[name](*sets[0])
        assert torch.equal(got if got is not None else outs[id(sets[0][0])], want), name
    shape = dict(N=N, D=D, K=K)
    for calls in (8, 40):
        cmp = timing.compare(fns, sets, baseline="assign, new out", rounds=12, calls=calls)
        for f in fns:
            for t in (timing.LATENCY, timing.KERNEL):
                r = cmp.ratio(f, t)
                rows.append(dict(**shape, contender=f, reading=t, calls=calls,
                                 us=1e3 * cmp.timing(f, t).ms_median, ratio=r.value, ratio_lo=r.lo, ratio_hi=r.hi,
                                 rounds=r.rounds))
    for f, fn in fns.items():
        tr = trace(fn, sets)
        for reading in ("kernel_us", "gap_us", "span_us_per_call"):
            rows.append(dict(**shape, contender=f, reading=reading, calls=60, us=tr[reading]))
        rows.append(dict(**shape, contender=f, reading="host_us", calls=400, us=host_us(fn, sets)))
    df = records.write_probe(pd.DataFrame(rows), f"{sys.argv[1]}/kmeans_launch_gaps_{records.provenance()['commit']}.csv")
    print(f"{N}x{D}x{K} done", flush=True)

pd.set_option("display.width", 250)
df["reading"] = df.reading + df.calls.map(lambda c: f"/{c}")
print(df.pivot_table(index=["N", "D", "K", "reading"], columns="contender", values="us").round(2).to_string())
