"""Probe: where the first microseconds of a launch go, the first item from the counter (old, `Options(old_first=True)`
of notes/patches/gemm-first-item-ab.patch on e81c776) against known from its index (new): five traced launches
(`hopper_host.timeline`) per shape and build; entry -> start (the consumers have their row), start -> data (its
first K-block has landed). Output: gemm_first_item_trace_<commit>.csv (as first_trace.csv).
    python gemm_first_item_trace_probe.py OUT_DIR"""
import sys, json, dataclasses
import torch
from gemm_kernels import hopper_host, configs, rule
from gemm_kernels.hopper_trace import summary
import pandas as pd
out = sys.argv[1]
rows = []
for (M, N, K) in [(128, 4096, 4096), (16, 8192, 4096), (1024, 1024, 1024), (4096, 4096, 4096)]:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    name = rule.choose(M, N, K)
    for tag, o in (("new", configs.HOPPER_CANDIDATES[name]), ("old", dataclasses.replace(configs.HOPPER_CANDIDATES[name], old_first=True))):
        for rep in range(5):
            c, fr = hopper_host.timeline(a, b, o)
            s = summary(fr)
            f0 = fr[fr.seq == 0]
            s = {k: round(float(v), 3) for k, v in s.items()}
            s.update(shape=f"{M}x{N}x{K}", cand=name, ab=tag, rep=rep,
                     entry_to_start=round(float((f0.start - f0.entry).median()), 3),
                     start_to_data=round(float((f0.data - f0.start).median()), 3))
            rows.append(s)
df = pd.DataFrame(rows)
df.to_csv(f"{out}/first_trace.csv", index=False)
g = df.groupby(["shape", "ab"])[["makespan_us", "first_data_us(med)", "entry_to_start", "start_to_data"]].median()
print(g.to_string())
