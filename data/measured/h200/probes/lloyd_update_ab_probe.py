"""Probe: fit's per-iteration sums before and after two changes, in one run taking turns
(`workbook.timing.compare`, both timings, ratios with bootstrap 95 % intervals):
  * the rows grouped by a counting sort (`lloyd_update.Grouping`) instead of `torch.sort(ids, stable=True)`;
  * the sums kernel loading 8 rows per batch (`lloyd_update.ClusterSums`, 128 bytes in flight per thread at
    76 registers) instead of 4 (`OldClusterSums` below: the kernel as it was at 1c2f0b9, 56 registers).
Contenders per shape: the accumulate (zero, group, sum) for each of the four pairs; then the whole Lloyd
iteration replayed from fit's graphs with the old pair and with the new one, and the assignment alone.
    python lloyd_update_ab_probe.py OUT_DIR [N,D,K ...]"""
import sys
import cutlass
import cutlass.cute as cute
import cuda.bindings.driver as cuda
import pandas as pd
import torch
from kmeans_kernels import lloyd, lloyd_bench, lloyd_update as lu
from kmeans_kernels.lloyd_update import VEC

UNROLL = 4   # the old kernel's batch (the library's is now 8)
from workbook import launch, records, timing


class OldClusterSums(lu.ClusterSums):
    """The sums kernel before the change: batches of 4 rows."""

    @cute.kernel
    def kernel(self, x_ptr: cute.Pointer, ids_ptr: cute.Pointer, order_ptr: cute.Pointer,
               sums_ptr: cute.Pointer, counts_ptr: cute.Pointer, N: cutlass.Int32, k: cutlass.Int32,
               rows: cutlass.Int32, f1: cutlass.Float32, f2: cutlass.Float32):
        tidx, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        ids = cute.make_tensor(ids_ptr, cute.make_layout(N))
        order = cute.make_tensor(order_ptr, cute.make_layout(N))
        lane = tidx % self.lanes
        start = (block * self.groups + tidx // self.lanes) * rows
        end = cutlass.min(start + rows, N)
        acc = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.Int64)
        acc.fill(0)
        run_id = cutlass.Int32(0)
        run = cutlass.Int32(0)
        if start < N:
            run_id = ids[start]
        for i in cutlass.range(start, end, UNROLL, unroll=1):
            # every load of the batch first (past `end`, the last row again: in bounds, and never added) ...
            batch_ids = cute.make_rmem_tensor(cute.make_layout(UNROLL), cutlass.Int32)
            batch_rows = cute.make_rmem_tensor(cute.make_layout(UNROLL), cutlass.Int64)
            for u in cutlass.range_constexpr(UNROLL):
                j = cutlass.min(i + u, end - 1)
                batch_ids[u] = ids[j]
                batch_rows[u] = order[j]
            values = []
            for u in cutlass.range_constexpr(UNROLL):
                # D is a multiple of VEC, so every thread's 8 elements start on a 16-byte boundary
                offset = cute.assume(batch_rows[u] * self.D + lane * VEC, divby=VEC)
                values.append(cute.make_tensor(x_ptr + offset, cute.make_layout(VEC)).load())
            # ... then add them, flushing a run where the id changes
            for u in cutlass.range_constexpr(UNROLL):
                if i + u < end:
                    if batch_ids[u] != run_id:
                        self._flush(sums_ptr, counts_ptr, acc, run_id, run, k, lane)
                        acc.fill(0)
                        run_id = batch_ids[u]
                        run = cutlass.Int32(0)
                    # the fixed-point rule: fp32(x) * 2^s1 * 2^s2, truncated toward zero to int64
                    q = (values[u].to(cutlass.Float32) * f1 * f2).to(cutlass.Int64)
                    acc.store(acc.load() + q)
                    run += 1
        if run > 0:
            self._flush(sums_ptr, counts_ptr, acc, run_id, run, k, lane)


_old = {}


def old_cluster_sums(x, sorted_ids, order, s, sums, counts):
    N, D = x.shape
    key = (D, x.dtype)
    if key not in _old:
        compiled = cute.compile(OldClusterSums(D, lu._DTYPES[x.dtype]), *lu._placeholder_args(x.dtype),
                                options="--gpu-arch sm_90a")
        _old[key] = launch.LaunchCache(compiled, device=0, pointers=5)
    k = sums.shape[0] - 1
    values = (x.data_ptr(), sorted_ids.data_ptr(), order.data_ptr(), sums.data_ptr(), counts.data_ptr(), N, k,
              lu.rows_per_group(N, D, lu._sm_count(0)), *lloyd.scale_factors(s))
    _old[key](values, lambda st: lu._args(x.dtype, *values, cuda.CUstream(st)), launch.stream_handle(0))


class SortedLloyd(lloyd._Lloyd):
    """fit's state with the update as it was: torch.sort, then the old kernel."""

    def accumulate(self, ids, previous):
        k = self.k
        self.acc.zero_()
        torch.sort(ids, stable=True, out=(self.sorted_ids, self.order))
        old_cluster_sums(self.x, self.sorted_ids, self.order, self.s, self.sums, self.counts[:k + 1])
        if previous is not None:
            self.counts[k + 1] = (ids != previous).sum()
        self.shards.all_reduce(self.acc)
        self.unassigned += self.counts[k]


out_dir = sys.argv[1]
shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [(1048576, 128, 4096)]
rows = []
for N, D, K in shapes:
    sets = lloyd_bench.input_sets(N, D, K)[:2]
    st, ids, old_st, graphs = {}, {}, {}, {}
    for x, c0 in sets:
        p = x.data_ptr()
        shards = lloyd._Shards(None, N)
        st[p] = lloyd._Lloyd(x, K, "auto", shards)
        ids[p] = st[p].assign(c0, torch.empty_like(st[p].ids))
        st[p].sorted_ids = torch.empty(N, dtype=torch.int32, device="cuda")
        st[p].order = torch.empty(N, dtype=torch.int64, device="cuda")
        old_st[p] = SortedLloyd(x, K, "auto", shards)
        old_st[p].sorted_ids, old_st[p].order = st[p].sorted_ids, st[p].order
        graphs[p] = {"new": lloyd._GraphLoop(lloyd._Lloyd(x, K, "auto", shards), 10 ** 6, None)}
        g = SortedLloyd(x, K, "auto", shards)
        g.sorted_ids, g.order = torch.empty_like(st[p].sorted_ids), torch.empty_like(st[p].order)
        graphs[p]["old"] = lloyd._GraphLoop(g, 10 ** 6, None)

    def sums(group, kernel):
        def fn(x, c0):
            s = st[x.data_ptr()]
            s.acc.zero_()
            i = ids[x.data_ptr()]
            si, o = s.grouping(i) if group == "grouping" else torch.sort(i, stable=True, out=(s.sorted_ids, s.order))
            (lu.cluster_sums if kernel == "new kernel" else old_cluster_sums)(x, si, o, s.s, s.sums, s.counts[:K + 1])
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
    fns = {(g, k): sums(g, k) for g in ("sort", "grouping") for k in ("old kernel", "new kernel")}
    got = []
    for f in fns.values():
        f(*sets[0])
        got.append(st[sets[0][0].data_ptr()].acc.clone())
    assert all(torch.equal(got[0], g) for g in got[1:]), "the sums differ"
    cmp = timing.compare(fns, sets, baseline=("sort", "old kernel"), rounds=15, calls=10)
    for name in fns:
        for t in (timing.KERNEL, timing.LATENCY):
            r = cmp.ratio(name, t)
            rows.append(dict(N=N, D=D, K=K, part="accumulate", contender=" + ".join(name), timing=t,
                             ms=cmp.timing(name, t).ms_median, vs="sort + old kernel", ratio=r.value, lo=r.lo, hi=r.hi))
    its = {"iteration old": iteration("old"), "iteration new": iteration("new"), "assign": assign}
    for f in its.values():
        for _ in range(3):
            f(*sets[0]); f(*sets[1])
    cmp = timing.compare(its, sets, baseline="assign", rounds=15, calls=10)
    for t in (timing.KERNEL, timing.LATENCY):
        for name, against in [("iteration old", "assign"), ("iteration new", "assign"),
                              ("iteration new", "iteration old")]:
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
