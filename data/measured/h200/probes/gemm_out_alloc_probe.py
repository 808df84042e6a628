"""Probe: gemm(a, b)'s output from torch.empty_like of the call's expanded element (new) against a.new_empty((M,
N)) (old, the same path otherwise), three input sets in turn, a new output each call: host issue rate (9 rounds
of 2000 calls, taking turns) and workbook.timing.compare's two timings (20 rounds x 10 calls), new / old with
bootstrap 95 % intervals.
    python gemm_out_alloc_probe.py OUT_DIR"""
import itertools, statistics, sys, time
import pandas as pd
import torch
import gemm_kernels
from gemm_kernels import hopper_host
from workbook import launch, records, timing

def old_gemm(a, b):
    M, N, K, device = hopper_host._operands(a, b)
    call = hopper_host._call_for(M, N, K, device, None, dtype=a.dtype)
    out = a.new_empty((M, N))
    with launch.on_device(device):
        hopper_host._launch(call, a, b, out, launch.stream_handle(device))
    return out

def new_gemm(a, b):
    M, N, K, device = hopper_host._operands(a, b)
    call = hopper_host._call_for(M, N, K, device, None, dtype=a.dtype)
    out = torch.empty_like(call.out_like)
    with launch.on_device(device):
        hopper_host._launch(call, a, b, out, launch.stream_handle(device))
    return out

out_dir = sys.argv[1]
rows = []
for M, N, K in [(1024, 1024, 1024), (128, 4096, 4096), (16, 8192, 4096)]:
    sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
             torch.randn(K, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    fns = {"new": new_gemm, "old": old_gemm}
    assert torch.equal(new_gemm(*sets[0]), old_gemm(*sets[0]))
    for f in fns.values():
        for i in range(30):
            f(*sets[i % 3])
    torch.cuda.synchronize()
    per = {n: [] for n in fns}
    for r in range(9):
        for n in (("new", "old") if r % 2 == 0 else ("old", "new")):
            f, turn = fns[n], itertools.cycle(sets)
            t = time.perf_counter()
            for _ in range(2000):
                f(*next(turn))
            per[n].append((time.perf_counter() - t) / 2000 * 1e6)
            torch.cuda.synchronize()
    base = dict(M=M, N=N, K=K)
    rr = timing.ratio_of([x / y for x, y in zip(per["new"], per["old"])])
    rows.append(dict(base, timing="host", ratio=rr.value, lo=rr.lo, hi=rr.hi, rounds=rr.rounds,
                     new_us=statistics.median(per["new"]), old_us=statistics.median(per["old"])))
    cmp = timing.compare(fns, sets, baseline="old", rounds=20, calls=10)
    for t in (timing.LATENCY, timing.KERNEL):
        r = cmp.ratio("new", t)
        rows.append(dict(base, timing=t, ratio=r.value, lo=r.lo, hi=r.hi, rounds=r.rounds,
                         new_us=cmp.timing("new", t).ms_median * 1e3, old_us=cmp.timing("old", t).ms_median * 1e3))
    for x in rows[-3:]:
        print(f"{M}x{N}x{K} {x['timing']:8s} {x['ratio']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]  new {x['new_us']:.2f} us  old {x['old_us']:.2f} us", flush=True)
df = pd.DataFrame(rows)
for k, v in records.provenance().items():
    df[k] = v
df.to_csv(f"{out_dir}/gemm_out_alloc.csv", index=False)
