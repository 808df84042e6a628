"""Probe: programmatic dependent launch (`Options.pdl`, `HopperAssign(pdl=True)`) against the same builds without
it, for the GEMM's rule pick (torch.matmul in the same run) and the k-means `auto` kernel, each launched through
its launch cache as shipped (a graph replay from the eighth sighting) and with the cache's graphs off (every
call a direct launch from its template), since a programmatic edge may not cross two graph launches.
Both timings with 95 % intervals (`workbook.timing.compare`, ratios to the shipped build) and CUPTI GPU time.
    python pdl_probe.py OUT_DIR   (its run: pdl_<commit>.csv)"""
import dataclasses
import sys

import pandas as pd
import torch

import kmeans_kernels
from gemm_kernels import hopper_host, rule, sweep
from kmeans_kernels import hopper as kh, reference
from workbook import launch, records, timing

out_dir = sys.argv[1]
GEMM_SHAPES = [(1024, 1024, 1024), (96, 12288, 8192), (800, 5000, 3000), (1024, 1024, 8192), (200, 4096, 6144),
               (4096, 4096, 4096)]
KMEANS_SHAPES = [(65536, 64, 512), (65536, 128, 512), (65536, 256, 512), (65536, 128, 4096)]
rows = []


def own_call(M, N, K, pdl: bool, graphs: bool):
    """A GEMM _Call of the rule's options (pdl set) with a launch cache of its own, graphs on or off."""
    o = dataclasses.replace(rule.options_for(M, N, K), pdl=pdl)
    call = hopper_host._prepare(M, N, K, 0, o, torch.bfloat16)
    cache = hopper_host._launches.__wrapped__(call.cfg, 0)
    cache.graphs = graphs
    return dataclasses.replace(call, launches=cache, scratches={}, tails={})


def gemm_with(call):
    def run(a, b):
        out = torch.empty_like(call.out_like)
        hopper_host._launch(call, a, b, out, launch.stream_handle(0))
        return out
    return run


def record(kind, shape, fns, sets, baseline):
    cmp = timing.compare(fns, sets, baseline=baseline, rounds=12, calls=20)
    gpu = sweep.gpu_ms(fns, sets)
    for name in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio(name, t)
            rows.append(dict(kind=kind, shape="x".join(map(str, shape)), contender=name, timing=t,
                             us_median=1e3 * cmp.timing(name, t).ms_median, ratio=r.value, ratio_lo=r.lo,
                             ratio_hi=r.hi, rounds=r.rounds))
        rows.append(dict(kind=kind, shape="x".join(map(str, shape)), contender=name, timing="gpu",
                         us_median=1e3 * gpu[name]))
    print(kind, shape, {k: round(1e3 * v, 1) for k, v in gpu.items()}, flush=True)
    return records.write_probe(pd.DataFrame(rows), f"{out_dir}/pdl.csv")


g = torch.Generator(device="cuda").manual_seed(5)
for M, N, K in GEMM_SHAPES:
    sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
             torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
    fns = {"torch.matmul": torch.matmul, "shipped": gemm_with(own_call(M, N, K, False, True)),
           "pdl": gemm_with(own_call(M, N, K, True, True)),
           "no graphs": gemm_with(own_call(M, N, K, False, False)),
           "pdl, no graphs": gemm_with(own_call(M, N, K, True, False))}
    want = fns["shipped"](*sets[0])
    for name, fn in fns.items():
        if name != "torch.matmul":
            assert torch.equal(fn(*sets[0]), want), (M, N, K, name)
    df = record("gemm", (M, N, K), fns, sets, "shipped")


def assign_with(N, D, K, pdl: bool, graphs: bool):
    """The auto variant's kernel behind a launch cache of its own, graphs on or off; a function of (x, c, c_sq)."""
    variant = kh.auto_variant(N, D, K)
    cache = kh._launches.__wrapped__(variant, D, torch.bfloat16, 0, pdl)
    cache.graphs = graphs

    def run(x, c, c_sq):
        out = torch.empty(N, dtype=torch.int32, device="cuda")
        addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), N, K)
        cache(addrs, lambda s: kh._args(torch.bfloat16, *addrs, kh.cuda.CUstream(s)), launch.stream_handle(0))
        return out
    return run


for N, D, K in KMEANS_SHAPES:
    sets = []
    for _ in range(3):
        x = torch.randn(N, D, device="cuda", generator=g).bfloat16()
        c = torch.randn(K, D, device="cuda", generator=g).bfloat16()
        sets.append((x, c, reference.centroid_norms(c)))
    fns = {"assign(x, c, c_sq=c_sq)": lambda x, c, c_sq: kmeans_kernels.assign(x, c, c_sq=c_sq),
           "shipped": assign_with(N, D, K, False, True), "pdl": assign_with(N, D, K, True, True),
           "no graphs": assign_with(N, D, K, False, False), "pdl, no graphs": assign_with(N, D, K, True, False)}
    want = kmeans_kernels.assign(*sets[0][:2], c_sq=sets[0][2])
    for name, fn in fns.items():
        assert torch.equal(fn(*sets[0]), want), (N, D, K, name)
    df = record("kmeans", (N, D, K), fns, sets, "shipped")

pd.set_option("display.width", 220)
print(df.pivot_table(index=["kind", "shape", "contender"], columns="timing", values="us_median").round(1).to_string())
print(df[df.timing != "gpu"].pivot_table(index=["kind", "shape", "contender"], columns="timing",
                                         values="ratio").round(3).to_string())
