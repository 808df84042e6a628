"""Probe: A's TMA box kept inside M (`Options.clamp_a_box`) against the same pick with the box from m0 (zero
filled past M), with torch.matmul in the same run, taking turns, at shapes whose M is not a multiple of the rule's
item rows, and one square where the two builds must tie (M a multiple of 256).
Both timings with 95 % intervals (`workbook.timing.compare`, ratios to torch.matmul) and CUPTI GPU time.
    python gemm_clamp_a_probe.py OUT_DIR   (its run: gemm_clamp_a_<commit>.csv)"""
import dataclasses
import sys

import pandas as pd
import torch

from gemm_kernels import gemm, rule, sweep
from workbook import records, timing

out_dir = sys.argv[1]
SHAPES = [(200, 4096, 6144), (800, 5000, 3000), (96, 12288, 8192), (1500, 2504, 3000), (4097, 4104, 4104),
          (999, 7000, 5000), (500, 14336, 4096), (4096, 4096, 4096)]
rows = []
g = torch.Generator(device="cuda").manual_seed(11)
for M, N, K in SHAPES:
    pick = rule.choose(M, N, K)
    on = rule.options_for(M, N, K)
    off = dataclasses.replace(on, clamp_a_box=False)
    sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
             torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
    fns = {"torch.matmul": torch.matmul, "clamped": lambda a, b: gemm(a, b, on),
           "from m0": lambda a, b: gemm(a, b, off)}
    want = torch.matmul(*sets[0]).float()
    for name, fn in fns.items():
        got = fn(*sets[0]).float()
        err = ((got - want).norm() / want.norm()).item()
        assert err < 1e-2, (M, N, K, name, err)
    assert torch.equal(fns["clamped"](*sets[0]), fns["from m0"](*sets[0]))
    cmp = timing.compare(fns, sets, baseline="torch.matmul", rounds=12, calls=20)
    vs_off = timing.compare({k: fns[k] for k in ("from m0", "clamped")}, sets, baseline="from m0", rounds=12,
                            calls=20)
    gpu = sweep.gpu_ms(fns, sets)
    for name in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r, r_off = cmp.ratio(name, t), vs_off.ratio(name, t) if name != "torch.matmul" else None
            rows.append(dict(M=M, N=N, K=K, pick=pick, contender=name, timing=t,
                             us_median=1e3 * cmp.timing(name, t).ms_median, ratio=r.value, ratio_lo=r.lo,
                             ratio_hi=r.hi, rounds=r.rounds,
                             vs_from_m0=r_off.value if r_off else None, vs_from_m0_lo=r_off.lo if r_off else None,
                             vs_from_m0_hi=r_off.hi if r_off else None))
        rows.append(dict(M=M, N=N, K=K, pick=pick, contender=name, timing="gpu", us_median=1e3 * gpu[name]))
    print(M, N, K, pick, {k: round(1e3 * v, 1) for k, v in gpu.items()}, flush=True)
    df = pd.DataFrame(rows)
    for key, value in records.provenance().items():
        df[key] = value
    df.to_csv(f"{out_dir}/gemm_clamp_a.csv", index=False)

pd.set_option("display.width", 220)
print(df.pivot_table(index=["M", "N", "K", "contender"], columns="timing", values="us_median").round(1).to_string())
print(df[df.timing != "gpu"].pivot_table(index=["M", "N", "K", "contender"], columns="timing",
                                         values=["ratio", "vs_from_m0"]).round(3).to_string())
