"""Probe: fit's per-iteration sums with the rows grouped by `lloyd_update.Grouping` (a counting sort) against
`torch.sort(ids, stable=True)` before the same sums kernel, and the grouping's ranks from global atomics only
(ClusterRanks) against a shared-memory histogram first (ClusterRanksShared, fit's choice for k + 1 <= 32768),
and the sums kernel loading 8 rows per batch against lu.UNROLL, in one run taking turns
(`workbook.timing.compare`, both timings, ratios with bootstrap 95 % intervals): the accumulate alone (zero,
group, sum), then the whole Lloyd iteration replayed from fit's graphs with each grouping, and the assignment alone.
    python lloyd_update_ab_probe.py OUT_DIR [N,D,K ...]"""
import sys
import cutlass.cute as cute
import cuda.bindings.driver as cuda
import pandas as pd
import torch
from kmeans_kernels import lloyd, lloyd_bench, lloyd_update as lu
from workbook import launch, records, timing

_batch8 = {}


def cluster_sums_8(x, sorted_ids, order, s, sums, counts):
    """lu.cluster_sums with the kernel loading 8 rows per batch instead of lu.UNROLL."""
    N, D = x.shape
    if D not in _batch8:
        compiled = cute.compile(lu.ClusterSums(D, lu._DTYPES[x.dtype], unroll=8), *lu._placeholder_args(x.dtype),
                                options="--gpu-arch sm_90a")
        _batch8[D] = launch.LaunchCache(compiled, device=0, pointers=5)
    values = (x.data_ptr(), sorted_ids.data_ptr(), order.data_ptr(), sums.data_ptr(), counts.data_ptr(), N,
              sums.shape[0] - 1, lu.rows_per_group(N, D, lu._sm_count(0)), *lloyd.scale_factors(s))
    _batch8[D](values, lambda st: lu._args(x.dtype, *values, cuda.CUstream(st)), launch.stream_handle(0))


class SortedLloyd(lloyd._Lloyd):
    """fit's state with the rows sorted by torch.sort, as before the grouping."""

    def accumulate(self, ids, previous):
        k = self.k
        self.acc.zero_()
        torch.sort(ids, stable=True, out=(self.sorted_ids, self.order))
        lu.cluster_sums(self.x, self.sorted_ids, self.order, self.s, self.sums, self.counts[:k + 1])
        if previous is not None:
            self.counts[k + 1] = (ids != previous).sum()
        self.shards.all_reduce(self.acc)
        self.unassigned += self.counts[k]


out_dir = sys.argv[1]
shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [(1048576, 128, 4096)]
rows = []
for N, D, K in shapes:
    sets = lloyd_bench.input_sets(N, D, K)[:2]
    st, ids, old_st, graphs, global_st = {}, {}, {}, {}, {}
    for x, c0 in sets:
        p = x.data_ptr()
        shards = lloyd._Shards(None, N)
        st[p] = lloyd._Lloyd(x, K, "auto", shards)
        ids[p] = st[p].assign(c0, torch.empty_like(st[p].ids))
        st[p].sorted_ids = torch.empty(N, dtype=torch.int32, device="cuda")
        st[p].order = torch.empty(N, dtype=torch.int64, device="cuda")
        global_st[p] = lloyd._Lloyd(x, K, "auto", shards)
        global_st[p].grouping.shared = False
        old_st[p] = SortedLloyd(x, K, "auto", shards)
        old_st[p].sorted_ids, old_st[p].order = st[p].sorted_ids, st[p].order
        graphs[p] = {"new": lloyd._GraphLoop(lloyd._Lloyd(x, K, "auto", shards), 10 ** 6, None)}
        g = SortedLloyd(x, K, "auto", shards)
        g.sorted_ids, g.order = torch.empty_like(st[p].sorted_ids), torch.empty_like(st[p].order)
        graphs[p]["old"] = lloyd._GraphLoop(g, 10 ** 6, None)
        g = lloyd._Lloyd(x, K, "auto", shards)
        g.grouping.shared = False
        graphs[p]["global"] = lloyd._GraphLoop(g, 10 ** 6, None)

    def sums(group):
        def fn(x, c0):
            s = st[x.data_ptr()]
            s.acc.zero_()
            i = ids[x.data_ptr()]
            if group == "torch.sort":
                si, o = torch.sort(i, stable=True, out=(s.sorted_ids, s.order))
            else:
                si, o = (global_st[x.data_ptr()] if group == "grouping, global ranks" else s).grouping(i)
            (cluster_sums_8 if group.endswith("batches of 8") else lu.cluster_sums)(x, si, o, s.s, s.sums,
                                                                                   s.counts[:K + 1])
        return fn

    def iteration(which):
        def fn(x, c0):
            loop = graphs[x.data_ptr()][which]
            if loop.runs == 0 or loop.runs >= 10 ** 6 - 2:
                loop.start(c0)
            loop.run(loop.runs % 2)
        return fn

    def assign(x, c0):
        st[x.data_ptr()].assign(c0, ids[x.data_ptr()])

    # every contender's sums equal (the integer sums cannot depend on the order)
    fns = {g: sums(g) for g in ("torch.sort", "grouping, global ranks", "grouping", "grouping, sums in batches of 8")}
    got = []
    for f in fns.values():
        f(*sets[0])
        got.append(st[sets[0][0].data_ptr()].acc.clone())
    assert all(torch.equal(got[0], g) for g in got[1:]), "the sums differ"
    cmp = timing.compare(fns, sets, baseline="torch.sort", rounds=15, calls=10)
    for name in fns:
        for t in (timing.KERNEL, timing.LATENCY):
            r = cmp.ratio(name, t)
            rows.append(dict(N=N, D=D, K=K, part="accumulate", contender=name, timing=t,
                             ms=cmp.timing(name, t).ms_median, vs="torch.sort", ratio=r.value, lo=r.lo, hi=r.hi))
    for t in (timing.KERNEL, timing.LATENCY):
        for name, against in [("grouping", "grouping, global ranks"), ("grouping, sums in batches of 8", "grouping")]:
            r = cmp.ratio(name, t, against=against)
            rows.append(dict(N=N, D=D, K=K, part="accumulate", contender=name, timing=t,
                             ms=cmp.timing(name, t).ms_median, vs=against, ratio=r.value, lo=r.lo, hi=r.hi))
    its = {"iteration old": iteration("old"), "iteration global ranks": iteration("global"),
           "iteration new": iteration("new"), "assign": assign}
    for f in its.values():
        for _ in range(3):
            f(*sets[0]); f(*sets[1])
    cmp = timing.compare(its, sets, baseline="assign", rounds=15, calls=10)
    for t in (timing.KERNEL, timing.LATENCY):
        for name, against in [("iteration old", "assign"), ("iteration global ranks", "assign"),
                              ("iteration new", "assign"), ("iteration new", "iteration old"),
                              ("iteration new", "iteration global ranks")]:
            r = cmp.ratio(name, t, against=against)
            rows.append(dict(N=N, D=D, K=K, part="iteration", contender=name, timing=t,
                             ms=cmp.timing(name, t).ms_median, vs=against, ratio=r.value, lo=r.lo, hi=r.hi))
        rows.append(dict(N=N, D=D, K=K, part="iteration", contender="assign", timing=t,
                         ms=cmp.timing("assign", t).ms_median, vs="assign", ratio=1.0, lo=1.0, hi=1.0))
    print(f"{N}x{D}x{K} done", flush=True)

df = pd.DataFrame(rows)
for key, value in records.provenance().items():
    df[key] = value
df.to_csv(f"{out_dir}/lloyd_update_ab.csv", index=False)
pd.set_option("display.width", 250, "display.max_rows", 200)
print(df[["N", "D", "K", "part", "contender", "timing", "ms", "vs", "ratio", "lo", "hi"]].round(4).to_string(index=False))
