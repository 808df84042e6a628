"""Probe: gemm(a, b, autotune=True) against gemm(a, b) (the rule) and torch.matmul, three input sets in turn, at
held-out and worst-checked shapes: the first (tuning) call's wall time, the configuration it kept, and
workbook.timing.compare's two timings (15 rounds x 10 calls), each ratio with a bootstrap 95 % interval.
    python gemm_autotune_probe.py OUT_DIR"""
import sys, time
import pandas as pd
import torch
import gemm_kernels
from gemm_kernels import configs, hopper_host, rule
from workbook import records, timing

SHAPES = [(1500, 2504, 3000), (200, 4096, 6144), (96, 12288, 8192), (384, 5120, 10240), (1536, 1536, 12288),
          (1536, 6144, 1024), (3072, 1024, 24576), (800, 5000, 3000), (1024, 2048, 4096), (1536, 1024, 8192),
          (16, 8192, 4096), (4096, 4096, 4096)]


def prepared(M, N, K, name):
    """The cached _Call of candidate `name` (the one autotune kept is one of these), None where it refuses."""
    try:
        return hopper_host._prepare(M, N, K, 0, configs.HOPPER_CANDIDATES[name], torch.bfloat16)
    except ValueError:
        return None


out_dir = sys.argv[1]
rows = []
for M, N, K in SHAPES:
    sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
             torch.randn(K, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    gemm_kernels.gemm(*sets[0])
    torch.cuda.synchronize()
    t = time.perf_counter()
    tuned = gemm_kernels.gemm(*sets[0], autotune=True)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t
    call = hopper_host._tuned[(M, N, K, 0, torch.bfloat16)]
    kept = next(n for n in rule.contenders(M, N, K) if prepared(M, N, K, n) is call)
    ref = torch.matmul(*sets[0])
    err = ((tuned.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    fns = {"rule": gemm_kernels.gemm, "autotune": lambda a, b: gemm_kernels.gemm(a, b, autotune=True),
           "torch": torch.matmul}
    cmp = timing.compare(fns, sets, baseline="rule", rounds=15, calls=10)
    base = dict(M=M, N=N, K=K, rule_choice=rule.choose(M, N, K), contenders=" | ".join(rule.contenders(M, N, K)),
                autotune_kept=kept, first_call_s=first_s, max_rel_err=err)
    for t in (timing.LATENCY, timing.KERNEL):
        for name in ("autotune", "torch"):
            r = cmp.ratio(name, t)
            rows.append(dict(base, timing=t, contender=name, vs="rule", ratio=r.value, lo=r.lo, hi=r.hi,
                             rounds=r.rounds, us=cmp.timing(name, t).ms_median * 1e3,
                             rule_us=cmp.timing("rule", t).ms_median * 1e3))
    k = {r["contender"]: r for r in rows[-4:] if r["timing"] == timing.KERNEL}
    print(f"{M}x{N}x{K}: rule {base['rule_choice']} kept {kept} ({first_s:.2f} s) | b2b autotune/rule "
          f"{k['autotune']['ratio']:.3f} [{k['autotune']['lo']:.3f}, {k['autotune']['hi']:.3f}] "
          f"torch/rule {k['torch']['ratio']:.3f}", flush=True)
df = pd.DataFrame(rows)
for key, v in records.provenance().items():
    df[key] = v
df.to_csv(f"{out_dir}/gemm_autotune.csv", index=False)
