"""Probe: the grouping's pieces (`lloyd_update.Grouping`: zero the counts, the ranks kernel (ClusterRanksShared, and
ClusterRanks with global atomics only), cumsum, ClusterPlaces, in that order)
and the sums kernel on the grouping's order and on torch.sort's, each alone, 20 calls back to back between two
CUDA events, median of 7 rounds, us per call; ids of K distinct rows of x as the first centroids (fit's bench).
    python lloyd_grouping_pieces_probe.py OUT_DIR [N,D,K ...]"""
import sys
import cuda.bindings.driver as cuda
import pandas as pd
import torch
from kmeans_kernels import lloyd, lloyd_bench, lloyd_update as lu
from workbook import launch

out_dir = sys.argv[1]
shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [(1048576, 128, 4096), (262144, 128, 4096)]
rows = []
for N, D, K in shapes:
    x, c0 = lloyd_bench.input_sets(N, D, K)[0]
    state = lloyd._Lloyd(x, K, "auto", lloyd._Shards(None, N))
    ids = state.assign(c0, torch.empty_like(state.ids))
    g = state.grouping
    ranks, places = lu._grouping_launches("sm_90a", 0, g.shared)
    global_ranks, _ = lu._grouping_launches("sm_90a", 0, False)
    values = (ids.data_ptr(), g.count.data_ptr(), g.end.data_ptr(), g.rank.data_ptr(), g.sorted_ids.data_ptr(),
              g.order.data_ptr(), N, K)
    stream = launch.stream_handle(0)
    s_ids, s_order = torch.sort(ids, stable=True)
    shuffled = torch.randperm(N, device="cuda")
    r_ids, r_order = ids[shuffled].contiguous(), shuffled
    g(ids)
    pieces = {
        "zero counts": lambda: g.count.zero_(),
        # with the counts zeroed each time, so that the ranks, counts and ends stay consistent for what follows
        "zero counts + ranks (shared)": lambda: (g.count.zero_(), ranks(
            (values[0], values[1], values[3], N, K), lambda st: lu._grouping_args(*values, cuda.CUstream(st))[0],
            stream)),
        "zero counts + ranks (global atomics only)": lambda: (g.count.zero_(), global_ranks(
            (values[0], values[1], values[3], N, K), lambda st: lu._grouping_args(*values, cuda.CUstream(st))[0],
            stream)),
        "cumsum": lambda: torch.cumsum(g.count, 0, out=g.end),
        "places": lambda: places(values, lambda st: lu._grouping_args(*values, cuda.CUstream(st))[1], stream),
        "whole grouping": lambda: g(ids),
        "torch.sort stable": lambda: torch.sort(ids, stable=True, out=(s_ids, s_order)),
        "sums, grouping's order": lambda: lu.cluster_sums(x, g.sorted_ids, g.order, state.s, state.sums,
                                                          state.counts[:K + 1]),
        "sums, sort's order": lambda: lu.cluster_sums(x, s_ids, s_order, state.s, state.sums, state.counts[:K + 1]),
        "sums, unsorted (random rows)": lambda: lu.cluster_sums(x, r_ids, r_order, state.s, state.sums,
                                                                state.counts[:K + 1]),
        "copy of x (read + write)": lambda: torch.empty_like(x).copy_(x),
    }
    for name, fn in pieces.items():
        for _ in range(3):
            fn()
        times = []
        for r in range(7):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(20):
                fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / 20)
        rows.append(dict(N=N, D=D, K=K, piece=name, us=sorted(times)[3], us_min=min(times), us_max=max(times)))
    print(f"{N}x{D}x{K} done", flush=True)
df = pd.DataFrame(rows)
df.to_csv(f"{out_dir}/lloyd_grouping_pieces.csv", index=False)
print(df.round(1).to_string(index=False))
