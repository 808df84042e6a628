"""Probe: at the rule check's worst shapes, every candidate configuration's GPU time (CUPTI, `sweep.gpu_ms`)
beside torch.matmul's, to tell apart a rule that picks the wrong candidate from candidates that are all behind.
Each candidate's answer is checked against torch.matmul first; a candidate that refuses the shape is left out.
    python gemm_worst_all_candidates_probe.py OUT_DIR   (its run: gemm_worst_all_candidates_<commit>.csv)"""
import sys

import pandas as pd
import torch

from gemm_kernels import configs, gemm, rule, sweep
from workbook import records

out_dir = sys.argv[1]
SHAPES = [(96, 12288, 8192), (384, 5120, 10240), (800, 5000, 3000), (1024, 1024, 8192), (1024, 4096, 1024),
          (1024, 1024, 1024), (4097, 4104, 4104), (3000, 3000, 3000)]
rows = []
g = torch.Generator(device="cuda").manual_seed(5)
for M, N, K in SHAPES:
    sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
             torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
    want = torch.matmul(*sets[0]).float()
    fns = {"torch.matmul": torch.matmul}
    for name, o in configs.HOPPER_CANDIDATES.items():
        try:
            got = gemm(*sets[0], o).float()
        except ValueError:
            continue
        assert ((got - want).norm() / want.norm()).item() < 1e-2, (M, N, K, name)
        fns[name] = lambda a, b, o=o: gemm(a, b, o)
    gpu = sweep.gpu_ms(fns, sets)
    pick = rule.choose(M, N, K)
    for name, ms in gpu.items():
        rows.append(dict(M=M, N=N, K=K, contender=name, rule_pick=name == pick, gpu_us=1e3 * ms,
                         pct_of_torch=100 * gpu["torch.matmul"] / ms))
    best = min((n for n in gpu if n != "torch.matmul"), key=gpu.get)
    print(f"{M}x{N}x{K}: torch {1e3 * gpu['torch.matmul']:.1f} us; pick {pick} {1e3 * gpu[pick]:.1f}; "
          f"best {best} {1e3 * gpu[best]:.1f}", flush=True)
    df = pd.DataFrame(rows)
    for key, value in records.provenance().items():
        df[key] = value
    df.to_csv(f"{out_dir}/gemm_worst_all_candidates.csv", index=False)
