"""Probe: stream-K over the last partial wave and the full wave before it (new, `waves.stream_k`) against the
last partial wave alone (old, rebuilt below), the same compiled kernel (three segments per row) and candidate,
three input sets in turn: workbook.timing.compare's two timings (10 rounds x 10 calls), new / old with
bootstrap 95 % intervals, and each result's largest error against torch.matmul relative to its largest value.
    python gemm_stream_k_region_probe.py OUT_DIR"""
import functools, sys
import pandas as pd
import torch
from gemm_kernels import configs, hopper_host, waves
from workbook import launch, records, timing


def old_stream_k(items, slots, k_blocks):
    """The split before: the last partial wave alone, over all slots."""
    tail = items % slots
    return items - tail, waves.stream_k_units(items - tail, tail, slots, k_blocks)


def prepared(M, N, K, name, split):
    hopper_host._prepare.cache_clear()
    new = waves.stream_k
    waves.stream_k = split
    try:
        return hopper_host._prepare(M, N, K, 0, configs.HOPPER_CANDIDATES[name], torch.bfloat16)
    finally:
        waves.stream_k = new


def run(call, a, b):
    out = torch.empty_like(call.out_like)
    hopper_host._launch(call, a, b, out, launch.stream_handle(0))
    return out


CASES = [((800, 5000, 3000), ("256 stream-k cluster2", "256 stream-k cluster1", "128 stream-k cluster1")),
         ((1500, 2504, 3000), ("256 stream-k cluster2", "128 stream-k cluster1")),
         ((1024, 1024, 8192), ("128 stream-k cluster2", "64x128 stream-k cluster2")),
         ((1536, 1536, 12288), ("256 stream-k cluster2", "128 stream-k cluster1")),
         ((3072, 1024, 24576), ("256 stream-k cluster2",)),
         ((4097, 4104, 4104), ("256 stream-k cluster2", "192 stream-k cluster1")),
         ((2999, 2000, 4000), ("256 stream-k cluster2", "128 stream-k cluster1")),
         ((96, 12288, 8192), ("64x128 stream-k cluster2", "64x128 stream-k cluster1")),
         ((4096, 4096, 4096), ("256 stream-k cluster2",))]
out_dir = sys.argv[1]
rows = []
for (M, N, K), names in CASES:
    sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
             torch.randn(K, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    ref = torch.matmul(*sets[0]).float()
    torch.matmul(*sets[0])
    t_ms = None
    for name in names:
        calls = {"new": prepared(M, N, K, name, waves.stream_k), "old": prepared(M, N, K, name, old_stream_k)}
        fns = {k: functools.partial(run, c) for k, c in calls.items()}
        err = {k: ((f(*sets[0]).float() - ref).abs().max() / ref.abs().max()).item() for k, f in fns.items()}
        fns["torch"] = torch.matmul
        cmp = timing.compare(fns, sets, baseline="old", rounds=10, calls=10)
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio("new", t)
            rows.append(dict(M=M, N=N, K=K, candidate=name, timing=t, ratio=r.value, lo=r.lo, hi=r.hi,
                             rounds=r.rounds, new_us=cmp.timing("new", t).ms_median * 1e3,
                             old_us=cmp.timing("old", t).ms_median * 1e3,
                             torch_us=cmp.timing("torch", t).ms_median * 1e3,
                             new_err=err["new"], old_err=err["old"],
                             new_units=len(calls["new"].work), old_units=len(calls["old"].work)))
        x = rows[-1]
        print(f"{M}x{N}x{K} {name:26s} b2b new/old {x['ratio']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]  new "
              f"{x['new_us']:.1f} old {x['old_us']:.1f} torch {x['torch_us']:.1f} us  err {err['new']:.1e}/{err['old']:.1e}",
              flush=True)
df = pd.DataFrame(rows)
for k, v in records.provenance().items():
    df[k] = v
df.to_csv(f"{out_dir}/gemm_stream_k_region.csv", index=False)
