"""Probe: two questions about the worst GEMM shapes against torch.matmul, from one process, taking turns.

1. Do a CTA pair's rows past M cost time? At 200 x 4096 x 6144 the rule's `64x128 uniform cluster2` runs pairs of
   64-row tiles; in the second item row the second CTA has 8 real rows of 64. Timed: the same options on a's first
   200 rows and on all 256 rows of the same buffer (random values, no zero rows), and torch.matmul at 200 rows.
   Prediction (per-K-block rate of the measured 256-row shapes): 256 rows about 23.7 us of GPU time, 200 rows 31.
2. At 800 x 5000 x 3000, two stream-K configurations of CTA pairs along N that the options take and no sweep timed,
   against the rule's `256 stream-k cluster2`; and that pick's timeline (`hopper_host.timeline`).
Both timings with 95 % intervals (`workbook.timing.compare`, ratios to torch.matmul) and CUPTI GPU time.
    python gemm_odd_skinny_probe.py OUT_DIR   (its run: gemm_odd_skinny_<commit>.csv, gemm_odd_skinny_trace.csv)"""
import sys

import pandas as pd
import torch

from gemm_kernels import configs, gemm, hopper_host, sweep
from gemm_kernels.hopper_options import Options
from workbook import records, timing

out_dir = sys.argv[1]
PAIRS_N = {"128x256 stream-k cluster2n": Options(tile=(128, 256, 64), stages=4, epilogue="register", schedule="uniform",
                                                 cluster_m=1, cluster_n=2, stream_k=True),
           "128x128 stream-k cluster2n": Options(tile=(128, 128, 64), schedule="uniform", cluster_m=1, cluster_n=2,
                                                 stream_k=True)}
rows = []


def run(label, M, N, K, fns, sets):
    for name, fn in fns.items():   # every answer against torch.matmul's, before any timing
        x = sets[0]
        want = torch.matmul(x[0][:M], x[1]).float()
        got = fn(*x)[:M].float()
        err = ((got - want).norm() / want.norm()).item()
        assert err < 1e-2, (name, err)
    cmp = timing.compare(fns, sets, baseline="torch.matmul", rounds=12, calls=20)
    gpu = sweep.gpu_ms(fns, sets)
    for name in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio(name, t)
            rows.append(dict(question=label, M=M, N=N, K=K, contender=name, timing=t,
                             us_median=1e3 * cmp.timing(name, t).ms_median, ratio=r.value, ratio_lo=r.lo,
                             ratio_hi=r.hi, rounds=r.rounds))
        rows.append(dict(question=label, M=M, N=N, K=K, contender=name, timing="gpu", us_median=1e3 * gpu[name]))
    print(label, "done", flush=True)


g = torch.Generator(device="cuda").manual_seed(7)
# 1. rows past M
sets = [(torch.randn(256, 6144, device="cuda", generator=g).bfloat16(),
         torch.randn(6144, 4096, device="cuda", generator=g).bfloat16()) for _ in range(3)]
pick = configs.HOPPER_CANDIDATES["64x128 uniform cluster2"]
run("rows past M", 200, 4096, 6144, {
    "torch.matmul": lambda a, b: torch.matmul(a[:200], b),
    "64x128 uniform cluster2, 200 rows": lambda a, b: gemm(a[:200], b, pick),
    "64x128 uniform cluster2, 256 rows": lambda a, b: gemm(a, b, pick)}, sets)
# 2. pairs along N at 800 x 5000 x 3000
sets = [(torch.randn(800, 3000, device="cuda", generator=g).bfloat16(),
         torch.randn(3000, 5000, device="cuda", generator=g).bfloat16()) for _ in range(3)]
current = configs.HOPPER_CANDIDATES["256 stream-k cluster2"]
fns = {"torch.matmul": torch.matmul, "256 stream-k cluster2": lambda a, b: gemm(a, b, current)}
fns.update({name: (lambda a, b, o=o: gemm(a, b, o)) for name, o in PAIRS_N.items()})
run("pairs along N", 800, 5000, 3000, fns, sets)
_, frame = hopper_host.timeline(*sets[0], current)
frame.to_csv(f"{out_dir}/gemm_odd_skinny_trace.csv", index=False)

df = pd.DataFrame(rows)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{out_dir}/gemm_odd_skinny.csv", index=False)
pd.set_option("display.width", 220)
print(df.pivot_table(index=["question", "contender"], columns="timing", values="us_median").round(1).to_string())
print(df[df.timing != "gpu"].pivot_table(index=["question", "contender"], columns="timing", values="ratio").round(3))
