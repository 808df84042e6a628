"""Probe: kmeans_kernels.assign(x, c, c_sq=c_sq) with checked signatures (new: one dict look-up gives the variant,
the launch and the output's template) against the path before it (old, rebuilt below from the same modules:
check_inputs, arch_of, backend, auto_variant, torch.empty and hopper's per-call look-ups), three input sets in
turn, a new output each call: host issue rate (9 rounds of 2000 calls, taking turns) and
workbook.timing.compare's two timings (20 rounds x 10 calls), new / old with bootstrap 95 % intervals.
    python kmeans_host_signatures_probe.py OUT_DIR"""
import itertools, statistics, sys, time
import pandas as pd
import torch
from cuda.bindings import driver as cuda
import kmeans_kernels
from kmeans_kernels import bench, hopper
from workbook import launch, records, timing


def old_assign(x, c, c_sq):
    kmeans_kernels.check_inputs(x, c, c_sq, None)
    be = kmeans_kernels.backend(kmeans_kernels.arch_of(x.get_device()))
    (N, D), K = x.shape, c.shape[0]
    variant = be.auto_variant(N, D, K)
    out = torch.empty(N, dtype=torch.int32, device=x.device)
    dtype, device = x.dtype, x.get_device()
    addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), N, K)
    hopper._launches(variant, D, dtype, device)(addrs, lambda s: hopper._args(dtype, *addrs, cuda.CUstream(s)),
                                                launch.stream_handle(device))
    return out


def new_assign(x, c, c_sq):
    return kmeans_kernels.assign(x, c, c_sq=c_sq)


out_dir = sys.argv[1]
rows = []
for N, D, K in [(65536, 64, 512), (65536, 128, 512), (65536, 256, 512), (65536, 64, 4096), (262144, 128, 4096)]:
    sets = bench.input_sets(N, D, K)
    fns = {"new": new_assign, "old": old_assign}
    assert torch.equal(new_assign(*sets[0]), old_assign(*sets[0]))
    for f in fns.values():
        for i in range(30):
            f(*sets[i % 3])
    torch.cuda.synchronize()
    per = {n: [] for n in fns}
    calls = 2000 if K == 512 else 200
    for r in range(9):
        for n in (("new", "old") if r % 2 == 0 else ("old", "new")):
            f, turn = fns[n], itertools.cycle(sets)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(calls):
                f(*next(turn))
            per[n].append((time.perf_counter() - t) / calls * 1e6)
            torch.cuda.synchronize()
    base = dict(N=N, D=D, K=K, variant=hopper.auto_variant(N, D, K))
    rr = timing.ratio_of([a / b for a, b in zip(per["new"], per["old"])])
    rows.append(dict(base, timing="host", ratio=rr.value, lo=rr.lo, hi=rr.hi, rounds=rr.rounds,
                     new_us=statistics.median(per["new"]), old_us=statistics.median(per["old"])))
    cmp = timing.compare(fns, sets, baseline="old", rounds=20, calls=10)
    for t in (timing.LATENCY, timing.KERNEL):
        r = cmp.ratio("new", t)
        rows.append(dict(base, timing=t, ratio=r.value, lo=r.lo, hi=r.hi, rounds=r.rounds,
                         new_us=cmp.timing("new", t).ms_median * 1e3, old_us=cmp.timing("old", t).ms_median * 1e3))
    for x in rows[-3:]:
        print(f"{N}x{D}x{K} {x['timing']:8s} {x['ratio']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]  new {x['new_us']:.2f} us"
              f"  old {x['old_us']:.2f} us", flush=True)
df = pd.DataFrame(rows)
for k, v in records.provenance().items():
    df[k] = v
df.to_csv(f"{out_dir}/kmeans_host_signatures.csv", index=False)
