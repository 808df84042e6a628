"""Probe: a 64-row tile's two consumer warpgroups splitting its columns (`Options(split_n=True)`) against the one
warpgroup of the same tile, cluster and schedule, with torch.matmul in the same run, taking turns, at the shapes
where the rule picks a 64-row tile and at the few-tile K-heavy ones where cuBLAS runs this tile with two.
Both timings with 95 % intervals (`workbook.timing.compare`) and CUPTI GPU time.
    python gemm_split_n_probe.py OUT_DIR   (its run: gemm_split_n_<commit>.csv)
The option did not pay and was removed; it builds at commit d253484, where this probe ran."""
import dataclasses
import sys

import pandas as pd
import torch

from gemm_kernels import configs, gemm, rule, sweep
from workbook import records, timing

out_dir = sys.argv[1]
# (M, N, K, the one-warpgroup candidate)
CASES = [(16, 14336, 4096, "64x128 uniform cluster1"), (64, 14336, 8192, "64x128 uniform cluster1"),
         (256, 4096, 4096, "64x128 uniform cluster2"), (128, 14336, 14336, "64x128 uniform cluster2"),
         (1000, 1000, 1000, "64x128 uniform cluster2"), (1024, 1024, 8192, "64x128 uniform cluster2"),
         (96, 12288, 8192, "64x128 stream-k cluster2"), (16, 8192, 8192, "64x128 uniform cluster1"),
         (6144, 1024, 32768, "64x256 uniform cluster1")]
rows = []
g = torch.Generator(device="cuda").manual_seed(13)
for M, N, K, name in CASES:
    one = configs.HOPPER_CANDIDATES[name]
    two = dataclasses.replace(one, split_n=True)
    sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
             torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
    fns = {"torch.matmul": torch.matmul, "one": lambda a, b: gemm(a, b, one), "split_n": lambda a, b: gemm(a, b, two)}
    want = torch.matmul(*sets[0]).float()
    for f in fns.values():
        got = f(*sets[0]).float()
        assert ((got - want).norm() / want.norm()).item() < 1e-2, (M, N, K)
    ints = [t.round().clamp(-2, 2) for t in sets[0]]
    assert torch.equal(fns["one"](*ints), fns["split_n"](*ints))
    cmp = timing.compare(fns, sets, baseline="one", rounds=10, calls=20)
    gpu = sweep.gpu_ms(fns, sets)
    for f in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio(f, t)
            rows.append(dict(M=M, N=N, K=K, candidate=name, pick=rule.choose(M, N, K), contender=f, timing=t,
                             us_median=1e3 * cmp.timing(f, t).ms_median, vs_one=r.value, vs_one_lo=r.lo,
                             vs_one_hi=r.hi, rounds=r.rounds))
        rows.append(dict(M=M, N=N, K=K, candidate=name, contender=f, timing="gpu", us_median=1e3 * gpu[f],
                         vs_one=gpu[f] / gpu["one"]))
    print(M, N, K, name, {k: round(1e3 * v, 1) for k, v in gpu.items()}, flush=True)
    df = pd.DataFrame(rows)
    for key, value in records.provenance().items():
        df[key] = value
    df.to_csv(f"{out_dir}/gemm_split_n.csv", index=False)

pd.set_option("display.width", 220)
print(df.pivot_table(index=["M", "N", "K", "contender"], columns="timing", values="us_median").round(1).to_string())
print(df[df.contender == "split_n"].pivot_table(index=["M", "N", "K"], columns="timing",
                                                 values=["vs_one", "vs_one_lo", "vs_one_hi"]).round(3).to_string())
