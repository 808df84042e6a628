"""Probe: gemm(a, b)'s host path with the launch key's fixed tail cached and the output from a.new_empty (new,
the code of c846bef) against the path before (old: rebuilt here, the same launch cache). Three input sets in
turn, a new output each call. Host issue rate (time.perf_counter over 2000 calls, GPU drained between rounds, 9
rounds taking turns), and workbook.timing.compare's two timings (20 rounds). Ratios new / old, bootstrap 95 %."""
import itertools, statistics, sys, time
import cuda.bindings.driver as cuda_driver
import pandas as pd
import torch
from gemm_kernels import hopper_host
from workbook import launch, records, timing

def old_gemm(a, b):
    M, N, K, device = hopper_host._operands(a, b)
    call = hopper_host._call_for(M, N, K, device, None, dtype=a.dtype)
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    with launch.on_device(device):
        stream = launch.stream_handle(device)
        addrs = (a.data_ptr(), b.data_ptr(), out.data_ptr(), call.work.data_ptr(),
                 *(t.data_ptr() for t in call.scratch(stream)))
        call.launches(addrs + call.sizes, lambda s: hopper_host._args(call.cfg, *addrs, *call.sizes,
                                                                      cuda_driver.CUstream(s)), stream)
    return out

out_dir = sys.argv[1]
rows = []
for M, N, K in [(128, 4096, 4096), (1024, 1024, 1024), (16, 8192, 4096), (64, 8192, 4096)]:
    sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
             torch.randn(K, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    fns = {"new": hopper_host.gemm, "old": old_gemm}
    a, b = sets[0]
    assert torch.equal(fns["new"](a, b), fns["old"](a, b))
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
    rr = timing.ratio_of([x / y for x, y in zip(per["new"], per["old"])])
    base = dict(M=M, N=N, K=K)
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
df.to_csv(f"{out_dir}/gemm_host_tail.csv", index=False)
