"""Probe: A's TMA box cut to the rows a short M has (`Options.short_a_box`, new) against the whole tile_m-row box
(old), the same candidate, at skinny shapes with M below one 64-row tile, torch.matmul in the same turns
(`workbook.timing.compare`, 10 rounds x 10 calls, three input sets; both timings; new / old with bootstrap 95 %
intervals). The two answers must be equal bit for bit (the same WGMMAs over the rows M has).
    python gemm_short_a_box_probe.py OUT_DIR"""
import functools
import sys

import pandas as pd
import torch

from gemm_kernels import configs, hopper_host
from gemm_kernels.hopper_options import Options
from workbook import records, timing

CANDIDATES = ("64x64 uniform cluster1", "64x128 uniform cluster1", "64x128 stream-k cluster1")
NK = [(4096, 4096), (4096, 14336), (8192, 4096), (8192, 8192), (14336, 4096), (14336, 14336), (6144, 4096)]
out_dir = sys.argv[1]
rows = []
for M in (8, 16, 32):
    for N, K in NK:
        sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
                 torch.randn(K, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
        for name in CANDIDATES:
            new = configs.HOPPER_CANDIDATES[name]
            old = Options.of(new, short_a_box=False)
            fns = {"new": functools.partial(hopper_host.gemm, options=new),
                   "old": functools.partial(hopper_host.gemm, options=old), "torch": torch.matmul}
            assert torch.equal(fns["new"](*sets[0]), fns["old"](*sets[0])), (M, N, K, name)
            cmp = timing.compare(fns, sets, baseline="old", rounds=10, calls=10)
            for t in (timing.KERNEL, timing.LATENCY):
                r = cmp.ratio("new", t)
                us = {k: cmp.timing(k, t).ms_median * 1e3 for k in fns}
                rows.append(dict(M=M, N=N, K=K, candidate=name, timing=t, ratio=r.value, lo=r.lo, hi=r.hi,
                                 rounds=r.rounds, new_us=us["new"], old_us=us["old"], torch_us=us["torch"]))
            x = rows[-2]
            print(f"{M}x{N}x{K} {name:26s} b2b new/old {x['ratio']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]  new "
                  f"{x['new_us']:.1f} old {x['old_us']:.1f} torch {x['torch_us']:.1f} us", flush=True)
df = pd.DataFrame(rows)
for k, v in records.provenance().items():
    df[k] = v
df.to_csv(f"{out_dir}/gemm_short_a_box.csv", index=False)
