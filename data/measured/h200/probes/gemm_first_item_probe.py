"""Probe: a cluster's first item from the counter (old, `Options(old_first=True)` of
notes/patches/gemm-first-item-ab.patch, applied to e81c776) against known from its index (new), Hopper GEMM, each
shape with the configuration the rule chose at e81c776. Three timings: synchronised latency and back to back
(workbook.timing.compare, 20 interleaved rounds), and GPU kernel time from CUPTI (gemm_kernels.sweep.gpu_ms, 9
rounds taking turns). Ratios new / old with bootstrap 95 % intervals. Output: gemm_first_item_<commit>.csv.
    python gemm_first_item_probe.py OUT_DIR"""
import dataclasses, sys
import pandas as pd
import torch
from gemm_kernels import configs, hopper_host, rule, sweep
from workbook import records, timing

SHAPES = [(16, 4096, 4096), (128, 4096, 4096), (16, 8192, 4096), (64, 8192, 4096), (256, 4096, 4096),
          (512, 8192, 4096), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)]
out = sys.argv[1]
rows = []
prov = records.provenance()
for M, N, K in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N + K)
    sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g),
             torch.randn(K, N, device="cuda", dtype=torch.bfloat16, generator=g)) for _ in range(3)]
    name = rule.choose(M, N, K)
    new = configs.HOPPER_CANDIDATES[name]
    old = dataclasses.replace(new, old_first=True)
    outs = {k: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for k in ("new", "old")}
    fns = {"new": lambda a, b: hopper_host.gemm(a, b, new, out=outs["new"]),
           "old": lambda a, b: hopper_host.gemm(a, b, old, out=outs["old"])}
    a, b = sets[0]
    ref = (a.float() @ b.float())
    for k, f in fns.items():
        f(a, b)
        torch.cuda.synchronize()
    assert torch.equal(outs["new"], outs["old"])
    err = ((outs["new"].float() - ref).abs().max() / ref.abs().max()).item()
    calls = sweep.calls_per_round(M, N, K)
    cmp = timing.compare(fns, sets, baseline="old", rounds=20, calls=calls)
    base = dict(M=M, N=N, K=K, config=name, err=err, calls=calls)
    for t in (timing.LATENCY, timing.KERNEL):
        r = cmp.ratio("new", t)
        rows.append(dict(base, timing=t, ratio=r.value, lo=r.lo, hi=r.hi, rounds=r.rounds,
                         new_ms=cmp.timing("new", t).ms_median, old_ms=cmp.timing("old", t).ms_median))
    per, gn, go = [], [], []
    for r in range(9):
        order = {"new": fns["new"], "old": fns["old"]} if r % 2 == 0 else {"old": fns["old"], "new": fns["new"]}
        ms = sweep.gpu_ms(order, sets)
        per.append(ms["new"] / ms["old"]); gn.append(ms["new"]); go.append(ms["old"])
    rr = timing.ratio_of(per)
    import statistics
    rows.append(dict(base, timing="gpu", ratio=rr.value, lo=rr.lo, hi=rr.hi, rounds=rr.rounds,
                     new_ms=statistics.median(gn), old_ms=statistics.median(go)))
    for x in rows[-3:]:
        print(f"{M}x{N}x{K} {name:28s} {x['timing']:8s} {x['ratio']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]  new {x['new_ms']} old {x['old_ms']}", flush=True)
df = pd.DataFrame(rows)
for k, v in prov.items():
    df[k] = v
df.to_csv(f"{out}/gemm_first_item.csv", index=False)
