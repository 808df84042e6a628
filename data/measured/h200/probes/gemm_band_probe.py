"""Probe: does the order of the work list's items (`Options.band_rows`: tile rows per band of the raster, 1 =
row-major) move the GPU time where the operands stay in L2? If neighbouring items that share an A or B panel run
at the same time on SMs that sit together, the L2 may serve their requests together; cuBLAS reads a third fewer L2
sectors than our kernel of the same tile at 1024 x 1024 x 8192 (probes/ncu_kheavy_pairs_l2.txt). Each candidate at
every band height, with torch.matmul, taking turns: CUPTI GPU time and both timings (`workbook.timing.compare`).
    python gemm_band_probe.py OUT_DIR   (its run: gemm_band_<commit>.csv)"""
import dataclasses
import sys

import pandas as pd
import torch

from gemm_kernels import configs, gemm, hopper_worklist, sweep
from workbook import records, timing

out_dir = sys.argv[1]
CASES = [(1024, 1024, 8192, "64x128 uniform cluster2", (1, 4, 8, 16)),
         (1024, 1024, 8192, "64 uniform cluster2n", (1, 2, 4, 8)),
         (2048, 1024, 4096, "128 balanced cluster2", (1, 2, 4, 8, 16)),
         (1024, 2048, 4096, "128 balanced cluster2", (1, 2, 4, 8)),
         (4096, 4096, 4096, "256 balanced cluster2", (2, 4, 8, 16))]
rows = []
g = torch.Generator(device="cuda").manual_seed(17)
for M, N, K, name, bands in CASES:
    base = configs.HOPPER_CANDIDATES[name]
    default = hopper_worklist.band_rows_for(K, base.tile_m)
    sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
             torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
    fns = {"torch.matmul": torch.matmul}
    for b in bands:
        o = dataclasses.replace(base, band_rows=b)
        fns[f"band {b}"] = lambda a, bb, o=o: gemm(a, bb, o)
    ints = [t.round().clamp(-2, 2) for t in sets[0]]
    want = torch.matmul(ints[0].float(), ints[1].float()).bfloat16()
    for f, fn in fns.items():
        if f != "torch.matmul":      # cuBLAS may reduce split-K partials in bf16
            assert torch.equal(fn(*ints), want), (M, N, K, f)
    ref = f"band {default}" if default in bands else f"band {bands[-1]}"
    cmp = timing.compare(fns, sets, baseline=ref, rounds=8, calls=20)
    gpu = sweep.gpu_ms(fns, sets)
    for f in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio(f, t)
            rows.append(dict(M=M, N=N, K=K, candidate=name, default_band=default, contender=f, timing=t,
                             us_median=1e3 * cmp.timing(f, t).ms_median, vs=ref, ratio=r.value, ratio_lo=r.lo,
                             ratio_hi=r.hi, rounds=r.rounds))
        rows.append(dict(M=M, N=N, K=K, candidate=name, default_band=default, contender=f, timing="gpu",
                         us_median=1e3 * gpu[f], vs=ref, ratio=gpu[f] / gpu[ref]))
    print(M, N, K, name, "default band", default, {k: round(1e3 * v, 1) for k, v in gpu.items()}, flush=True)
    df = pd.DataFrame(rows)
    for key, value in records.provenance().items():
        df[key] = value
    df.to_csv(f"{out_dir}/gemm_band.csv", index=False)

pd.set_option("display.width", 220)
print(df.pivot_table(index=["M", "N", "K", "candidate", "contender"], columns="timing",
                     values="ratio").round(3).to_string())
