"""Probe: two host-side steps of a later `fit(x, k, iters=ITERS, tol=None, init=c0)` call (its graph loop kept from
earlier fits on x), in whole calls, with flashlib's call, in one run taking turns (`workbook.timing.compare`, both
timings, ratios with bootstrap 95 % intervals, ms per call):

* "fit, before": the checks read x's extent and init's finiteness with a wait each, and the state reads x's
  magnitude again (one more pass over x and wait), its passes launched from the host: the two steps undone
  (`_check` wrapped to also wait on init's finiteness alone and to hand nothing on; `lloyd._STATE_GRAPH` off);
* "fit, one read": the checks' one read of x's extent and init's finiteness, handed on to the scale;
* "fit": that, and the state's passes over x replayed from the kept loop's graph (as shipped).

Each contender keeps its own graph loops (`lloyd._KeptLoops`); all give the same centroids and ids (asserted).
`--twin` adds "fit, twin": the shipped code again with loops of its own, a control for what a contender's own
buffers (where the allocator put them) or its place in the turns do to its time.
    python fit_host_steps_probe.py OUT_DIR [--twin] [--rounds R] [N,D,K ...]"""
import sys

import pandas as pd
import torch

import kmeans_kernels
from kmeans_kernels import lloyd, lloyd_bench
from workbook import records, timing

ITERS = 5
args = sys.argv[2:]
twin = "--twin" in args
rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 10
args = [a for i, a in enumerate(args) if a != "--twin" and a != "--rounds" and (i == 0 or args[i - 1] != "--rounds")]
shapes = [tuple(map(int, s.split(","))) for s in args] or [
    (65536, 64, 512), (65536, 128, 512), (65536, 128, 4096), (65536, 256, 4096), (262144, 128, 4096),
    (1048576, 128, 4096)]
shipped_check = lloyd._check


def separate_reads(x, k, iters, tol, init, variant, shards, comm):
    if isinstance(init, torch.Tensor):
        bool(torch.isfinite(init).all())
    shipped_check(x, k, iters, tol, init, variant, shards, comm)
    return None   # the state then reads x's magnitude itself


def fit_with(check, state_graph):
    store, kept = lloyd._KeptLoops(4), lloyd._KEPT

    def fn(x, c0):
        lloyd._check, lloyd._STATE_GRAPH, lloyd._KEPT = check, state_graph, store
        try:
            return kmeans_kernels.fit(x, c0.shape[0], iters=ITERS, tol=None, init=c0)
        finally:
            lloyd._check, lloyd._STATE_GRAPH, lloyd._KEPT = shipped_check, True, kept
    return fn


fns = {"fit, before": fit_with(separate_reads, False), "fit, one read": fit_with(shipped_check, False),
       "fit": fit_with(shipped_check, True)}
if twin:
    fns["fit, twin"] = fit_with(shipped_check, True)
frames = []
for N, D, K in shapes:
    sets = lloyd_bench.input_sets(N, D, K)
    for x, c0 in sets:
        want = fns["fit, before"](x, c0)
        for name in [n for n in fns if n != "fit, before" for _ in range(2)]:   # a second call replays the state graph
            got = fns[name](x, c0)
            assert torch.equal(got.centroids, want.centroids) and torch.equal(got.ids, want.ids)
            assert got.inertia == want.inertia, (name, got.inertia, want.inertia)
    flashlib = lloyd_bench.contenders({"flashlib"}, ITERS, sets)   # empty where flashlib is not importable
    cmp = timing.compare({**fns, **flashlib}, sets, baseline="fit, before", rounds=rounds, calls=3)
    frames.append(cmp.frame(dict(N=N, D=D, K=K)))
    print(f"{N}x{D}x{K} done", flush=True)

df = pd.concat(frames, ignore_index=True)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{sys.argv[1]}/fit_host_steps.csv", index=False)
pd.set_option("display.width", 200)
print(df[["N", "D", "K", "kernel", "variant", "timing", "ms_median", "ratio", "ratio_lo", "ratio_hi"]].round(4)
      .to_string(index=False))
