"""Probe: where the few-wave and K-heavy shapes lose to cuBLAS. Per shape: cuBLAS's kernel (name, grid, block,
from a torch.profiler chrome trace), the GPU time of torch.matmul and of some candidates (CUDA events around 50
back-to-back calls, 7 rounds in turn, medians), and one traced launch per candidate (hopper_trace.summary, plus
the K loop and epilogue split by role for stream-K rows).
    python gemm_kheavy_probe.py OUT_DIR"""
import sys, json, statistics, os
import torch
from gemm_kernels import hopper_host, configs, rule
from gemm_kernels.hopper_trace import summary
torch.manual_seed(0)
out = sys.argv[1]
SHAPES = [(1024, 1024, 8192), (3072, 1024, 24576), (1024, 1024, 32768), (2048, 1024, 4096), (1000, 1000, 1000),
          (1024, 1024, 1024), (1536, 1536, 1536), (200, 4096, 6144), (1500, 2504, 3000), (16, 8192, 4096)]
CANDS = ["256 stream-k cluster2", "128 stream-k cluster2", "128 stream-k cluster1", "64x128 uniform cluster2",
         "256 balanced cluster2"]

def b2b(fn, calls=50):
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(calls):
        fn()
    e.record(); e.synchronize()
    return s.elapsed_time(e) / calls * 1e3

rows, kernels = [], []
for (M, N, K) in SHAPES:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    # cuBLAS's kernel
    torch.matmul(a, b); torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            torch.matmul(a, b)
        torch.cuda.synchronize()
    path = f"{out}/trace_{M}x{N}x{K}.json"
    prof.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
    ks = [e for e in ev if e.get("cat") == "kernel"]
    for e in ks[-3:]:
        kernels.append(dict(shape=f"{M}x{N}x{K}", name=e["name"], grid=e["args"].get("grid"), block=e["args"].get("block"),
                            dur_us=e.get("dur"), regs=e["args"].get("registers per thread"), smem=e["args"].get("shared memory")))
    os.remove(path)
    names = list(dict.fromkeys([rule.choose(M, N, K), *CANDS]))
    cs = {n: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for n in names}
    fns = {"torch": lambda: torch.matmul(a, b)}
    for n in names:
        fns[n] = (lambda o, c: (lambda: hopper_host.gemm(a, b, o, out=c)))(configs.HOPPER_CANDIDATES[n], cs[n])
    for f in fns.values():
        f(); f()
    torch.cuda.synchronize()
    times = {n: [] for n in fns}
    for r in range(7):
        for n, f in fns.items():
            times[n].append(b2b(f))
    t_torch = statistics.median(times["torch"])
    ref = a.float() @ b.float()
    for n in names:
        o = configs.HOPPER_CANDIDATES[n]
        hopper_host.timeline(a, b, o)
        c, fr = hopper_host.timeline(a, b, o)
        call = hopper_host._call_for(M, N, K, a.get_device(), o, dtype=a.dtype, trace=True)
        role = call.work[:, 5].cpu().numpy()
        fr["role"] = role[fr.row.to_numpy()]
        err = ((cs[n].float() - ref).abs().max() / ref.abs().max()).item()
        s = {k: round(float(v), 2) for k, v in summary(fr).items()}
        for rl, g in fr.groupby("role"):
            s[f"kloop_role{rl}"] = round(float((g.mma_done - g.data).median()), 2)
            s[f"epi_role{rl}"] = round(float((g.stored - g.mma_done).median()), 2)
            s[f"n_role{rl}"] = int(len(g))
        t = statistics.median(times[n])
        s.update(shape=f"{M}x{N}x{K}", cand=n, rule=n == names[0], us_b2b=round(t, 2), torch_us=round(t_torch, 2),
                 pct_torch=round(100 * t_torch / t, 1), err=err, ctas=int(fr.cta.nunique()), segs=len(fr))
        rows.append(s)
        print(json.dumps(s), flush=True)
import pandas as pd
pd.set_option("display.width", 250); pd.set_option("display.max_colwidth", 90)
kd = pd.DataFrame(kernels); kd.to_csv(f"{out}/cublas_kernels.csv", index=False)
df = pd.DataFrame(rows); df.to_csv(f"{out}/summary.csv", index=False)
print(kd.drop_duplicates("shape").to_string())
print(df[["shape", "cand", "rule", "us_b2b", "torch_us", "pct_torch", "makespan_us", "first_data_us(med)", "kloop_us(med)", "epilogue_us(med)", "busy_frac", "ctas", "segs", "err"]].to_string())
cols = [c for c in df.columns if c.startswith(("kloop_role", "epi_role", "n_role"))]
print(df[["shape", "cand"] + cols].to_string())
