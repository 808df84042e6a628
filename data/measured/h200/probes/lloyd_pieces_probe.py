"""Probe: where one Lloyd iteration of `kmeans_kernels.fit` spends its GPU time. For each shape, the loop body's
four parts (`_Lloyd.assign`, `accumulate` with the previous ids compared, `update`, `inertia`) run eagerly in
turn: each part's stream time from CUDA events between them (median of 10 iterations after 10 that settle), and
the accumulate's pieces and other sorts alone (medians of 7 rounds of 20 calls back to back), and every CUDA
kernel's GPU time by name from torch.profiler over 10 more iterations, per iteration.
    python lloyd_pieces_probe.py OUT_DIR [N,D,K ...]"""
import sys
import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile
from kmeans_kernels import lloyd, lloyd_bench

out_dir = sys.argv[1]
shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [(1048576, 128, 4096), (65536, 64, 512)]
rows = []
for N, D, K in shapes:
    x, c = lloyd_bench.input_sets(N, D, K)[0]          # c: K distinct rows of x, as fit's bench starts
    state = lloyd._Lloyd(x, K, "auto", lloyd._Shards(None, N))
    ids, prev = state.ids, torch.empty_like(state.ids)
    for _ in range(3):                                   # compile, load, warm the caches
        state.step(c, ids, prev)
    torch.cuda.synchronize()
    parts = [("assign", lambda: state.assign(c, ids)), ("accumulate", lambda: state.accumulate(ids, prev)),
             ("update", lambda: state.update(c)), ("inertia", lambda: state.inertia(c))]
    # each part's stream time between CUDA events, 10 iterations of 20 in turn (the first 10 settle)
    spans = {name: [] for name, _ in parts}
    for it in range(20):
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(len(parts) + 1)]
        marks[0].record()
        for (name, fn), mark in zip(parts, marks[1:]):
            fn()
            mark.record()
        torch.cuda.synchronize()
        if it >= 10:
            for (name, _), a, b in zip(parts, marks, marks[1:]):
                spans[name].append(a.elapsed_time(b) * 1e3)
    for name, v in spans.items():
        rows.append(dict(N=N, D=D, K=K, what="part", name=name, us=sorted(v)[len(v) // 2]))
    # the accumulate's pieces alone, and sorts the sums kernel could take instead, each 20 calls back to back
    k16 = torch.empty(N, dtype=torch.int16, device=x.device)
    s16, o16 = torch.empty_like(k16), torch.empty_like(state.order)
    pieces = {
        "zero": lambda: state.acc.zero_(),
        "sort int32 stable": lambda: torch.sort(ids, stable=True, out=(state.sorted_ids, state.order)),
        "sort int32 unstable": lambda: torch.sort(ids, out=(state.sorted_ids, state.order)),
        "sort int16 stable (cast included)": lambda: torch.sort(k16.copy_(ids), stable=True, out=(s16, o16)),
        "sums kernel": lambda: state.cluster_sums(x, state.sorted_ids, state.order, state.s, state.sums,
                                                   state.counts[:K + 1]),
        "changed ids": lambda: state.counts[K + 1].copy_((ids != prev).sum()),
    }
    for name, fn in pieces.items():
        times = []
        for r in range(7):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(20):
                fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / 20)
        rows.append(dict(N=N, D=D, K=K, what="piece", name=name, us=sorted(times)[3]))
    # every kernel of 10 iterations by name, from the profiler (GPU time only, no gaps)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            for _, fn in parts:
                fn()
        torch.cuda.synchronize()
    totals = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            totals[e.name[:100]] = totals.get(e.name[:100], 0.0) + e.device_time / 10
    for name, us in totals.items():
        rows.append(dict(N=N, D=D, K=K, what="kernel", name=name, us=us))
    print(f"{N}x{D}x{K} done", flush=True)
df = pd.DataFrame(rows)
df.to_csv(f"{out_dir}/lloyd_pieces.csv", index=False)
pd.set_option("display.width", 250, "display.max_colwidth", 90, "display.max_rows", 200)
for (N, D, K), g in df.groupby(["N", "D", "K"]):
    print(f"\n{N} x {D} x {K}: per iteration, us")
    print(g[g.what.isin(["part", "piece"])][["what", "name", "us"]].round(1).to_string(index=False))
    k = g[g.what == "kernel"].sort_values("us", ascending=False)
    print(f"kernels: {len(k)} names, {k.us.sum():.1f} us in all")
    print(k[["name", "us"]].head(16).round(1).to_string(index=False))
