"""Probe: the k-means assignment kernel with its grid capped at one wave of resident CTAs (`hopper.ctas_per_sm` x
the SMs), each walking every grid-th point tile, against the same compiled kernel with a CTA per point tile, at the
13 seed shapes. Both variants of a shape are auto's; each behind its own
launch cache as shipped. Both timings with 95 % intervals (`workbook.timing.compare`, ratio to one CTA per point
tile), and CUPTI GPU time.
    python kmeans_persistent_probe.py OUT_DIR   (its run: kmeans_persistent_<commit>.csv)"""
import sys

import pandas as pd
import torch

from gemm_kernels import sweep
from kmeans_kernels import bench, hopper, reference
from workbook import launch, records, timing

out_dir = sys.argv[1]
shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[2:]] or bench.seed_shapes()
rows = []


def assign_with(N, D, K, ctas):
    variant = hopper.auto_variant(N, D, K)
    run = hopper.launcher(variant, N, D, K, torch.bfloat16, 0, False, ctas)

    def fn(x, c, c_sq):
        out = torch.empty(N, dtype=torch.int32, device="cuda")
        run(x, c, c_sq, out)
        return out
    return fn


for N, D, K in shapes:
    sets = bench.input_sets(N, D, K)
    spec = hopper.VARIANT_SPECS[hopper.auto_variant(N, D, K)]
    wave = hopper.ctas_per_sm(D, spec.block_n, spec.staged_norms) * launch.sm_count(0)
    fns = {"one wave": assign_with(N, D, K, wave), "a CTA per tile": assign_with(N, D, K, hopper.MAX_CTAS)}
    got = {name: fn(*sets[0]) for name, fn in fns.items()}
    assert torch.equal(got["one wave"], got["a CTA per tile"]), (N, D, K)    # the same arithmetic, row by row
    if N * K <= 2**28:
        agree = (got["one wave"] == reference.assign(*sets[0]).to(torch.int32)).float().mean().item()
        assert agree > 0.999, (N, D, K, agree)                                # random bf16: near-ties may differ
    cmp = timing.compare(fns, sets, baseline="a CTA per tile", rounds=12)
    gpu = sweep.gpu_ms(fns, sets)
    for name in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio(name, t)
            rows.append(dict(N=N, D=D, K=K, variant=hopper.auto_variant(N, D, K), contender=name, timing=t,
                             us_median=1e3 * cmp.timing(name, t).ms_median, ratio=r.value, ratio_lo=r.lo,
                             ratio_hi=r.hi, rounds=r.rounds))
        rows.append(dict(N=N, D=D, K=K, variant=hopper.auto_variant(N, D, K), contender=name, timing="gpu",
                         us_median=1e3 * gpu[name]))
    records.write_probe(pd.DataFrame(rows), f"{out_dir}/kmeans_persistent.csv")
    k, l = cmp.ratio("one wave", timing.KERNEL), cmp.ratio("one wave", timing.LATENCY)
    print(f"{N}x{D}x{K} kernel {k.value:.3f} [{k.lo:.3f},{k.hi:.3f}] latency {l.value:.3f} [{l.lo:.3f},{l.hi:.3f}] "
          f"gpu us {1e3 * gpu['one wave']:.1f} / {1e3 * gpu['a CTA per tile']:.1f}", flush=True)
