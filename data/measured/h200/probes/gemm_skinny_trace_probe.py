"""Probe: the skinny candidates traced (`hopper_host.timeline`, the second of two launches per candidate) at five
skinny shapes, with four configurations that were not candidates yet (marked *, two of which became
`64x64 uniform cluster2` and `64x128 stream-k cluster2`); ran at 07c97f2 on the H200 (driver 580.159.04, torch
2.11.0+cu130, CuTe DSL 4.8.1). Output: summary.csv (gemm_skinny_trace_07c97f2.csv: `hopper_trace.summary` per
launch) and one timeline per shape and candidate (one kept). Its us_b2b / torch_us columns are a plain event loop
(7 rounds of 50 calls, medians, no interval, host-bound at these shapes): the makespans are what it is kept for.
    python gemm_skinny_trace_probe.py OUT_DIR"""
import sys, json, statistics
import torch
from gemm_kernels import hopper_host, configs, rule
from gemm_kernels.hopper_options import Options
from gemm_kernels.hopper_trace import summary
torch.manual_seed(0)
out = sys.argv[1]
EXTRA = {
    "64x128 stream-k cluster2*": Options(tile=(64, 128, 64), schedule="uniform", cluster_m=2, stream_k=True),
    "64x256 stream-k cluster2*": Options(tile=(64, 256, 64), schedule="uniform", cluster_m=2, stream_k=True),
    "64x64 stream-k cluster1*": Options(tile=(64, 64, 64), schedule="uniform", cluster_m=1, stream_k=True),
    "64x64 uniform cluster2*": Options(tile=(64, 64, 64), schedule="uniform", cluster_m=2),
}
def opts(name):
    return EXTRA.get(name) or configs.HOPPER_CANDIDATES[name]

def b2b(fn, calls=50):
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(calls):
        fn()
    e.record(); e.synchronize()
    return s.elapsed_time(e) / calls * 1e3

rows = []
for (M, N, K) in [(16, 4096, 4096), (128, 4096, 4096), (16, 8192, 4096), (64, 8192, 4096), (256, 4096, 4096)]:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    names = [rule.choose(M, N, K), "64x128 stream-k cluster1", "64x64 uniform cluster1", "64x128 uniform cluster2", *EXTRA]
    names = list(dict.fromkeys(names))
    cs = {n: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for n in names}
    fns = {"torch": lambda: torch.matmul(a, b)}
    for n in names:
        fns[n] = (lambda o, c: (lambda: hopper_host.gemm(a, b, o, out=c)))(opts(n), cs[n])
    for f in fns.values():
        f(); f()
    torch.cuda.synchronize()
    times = {n: [] for n in fns}
    for r in range(7):
        for n, f in fns.items():
            times[n].append(b2b(f))
    t_torch = statistics.median(times["torch"])
    for n in names:
        c, fr = hopper_host.timeline(a, b, opts(n))
        c, fr = hopper_host.timeline(a, b, opts(n))
        err = ((cs[n].float() - ref).abs().max() / ref.abs().max()).item()
        s = summary(fr)
        s = {k: round(float(v), 2) for k, v in s.items()}
        t = statistics.median(times[n])
        s.update(shape=f"{M}x{N}x{K}", cand=n, us_b2b=round(t, 2), torch_us=round(t_torch, 2),
                 pct_torch=round(100 * t_torch / t, 1), err=err, ctas=int(fr.cta.nunique()), rows=len(fr))
        rows.append(s)
        fr.to_csv(f"{out}/tl_{M}x{N}x{K}_{n.replace(' ', '_').replace('*', 'X')}.csv", index=False)
        print(json.dumps(s), flush=True)
import pandas as pd
df = pd.DataFrame(rows)
df.to_csv(f"{out}/summary.csv", index=False)
pd.set_option("display.width", 250)
print(df[["shape", "cand", "us_b2b", "torch_us", "pct_torch", "makespan_us", "first_data_us(med)", "kloop_us(med)", "epilogue_us(med)", "busy_frac", "ctas", "err"]].to_string())
