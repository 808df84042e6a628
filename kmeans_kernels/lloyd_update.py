"""The centroid update of `kmeans_kernels.fit` on CUDA: per-cluster fixed-point sums of the rows grouped by id,
then the new centroids and the inertia from them.

    sorted_ids, order = Grouping(N, k, device)(ids)            # ids int32 [N]; order: the permutation
    cluster_sums(x, sorted_ids, order, s, sums, counts)        # sums [k+1, D], counts [k+1]: added to
    centroid_update(sums, counts, c, mean, 2.0**-s, out, terms)  # out: the means; inertia = spread + terms.sum()
    art = compile(D=128, dtype=torch.bfloat16, arch="sm_90a")  # no GPU needed: .ptx, .sass (compile_update too)

The sums are those of ``index_add_`` of `kmeans_kernels.lloyd.fixed_point(x, s)` (x * 2^s truncated toward
zero, exactly; the rule and why it is exact are there), bit for bit, without that int64 copy of x.

**Why group the rows.** `index_add_` of the fixed-point copy costs, per iteration, a read of 8 bytes per coordinate
(1 GiB at 1M x 128) and one int64 atomic per coordinate (128M). Here, per iteration:

1. group the rows by id with a counting sort on the device (`Grouping`: one int32 atomic per row for its rank
   in its cluster, the counts' prefix sums, each row to its place; no wait for the host) into `sorted_ids`
   and the permutation `order` (`torch.sort(ids)` gives the same sums);
2. one kernel walks the sorted order in fixed chunks of rows (`rows_per_group`; never one CTA per cluster,
   so one huge cluster cannot serialise it): a group of D / 8 threads reads each row of the 16-bit x through
   the permutation (16 contiguous bytes per thread, a whole row per group), converts it by the rule
   (fp32(x) * 2^s1 * 2^s2, truncated to int64: one F2I.S64 per coordinate), adds runs of equal ids in int64
   registers, and at the end of a run adds the run's D sums and its length to ``sums`` and ``counts`` with
   int64 atomic adds (`red.global.add.u64`). Integer addition commutes, so the result cannot depend on which
   run lands first: the same sums run after run. The grouping only makes the runs long; any order of the
   ids gives the same sums, with more atomics.

Per iteration at N = 1M, D = 128, k = 4096: x read once in 16 bits (256 MiB instead of 1 GiB), about 40 bytes per
row for the grouping, and about (N / 64 chunks) x (1 + 64 / mean cluster size) runs x D = 2.6M atomics
instead of 128M. An id < 0 (a point with no winner) goes to row k of sums and counts.

**The new centroids** (`CentroidUpdate`): one group of D / 8 threads per cluster forms its mean by the torch
formula's own IEEE operations (int64 -> float64, x 2^-s, / max(n, 1), one rounding to fp32), so the centroids are
those of `torch.where(n > 0, (sums * 2^-s / n).float(), c)` bit for bit, and writes its part of the inertia about
the data mean (n ||c'||^2 - 2 <S', c'>); one launch where torch took about twenty.

The sums kernel takes 16-bit x with D a multiple of 8 (rows of whole 16-byte vectors) from a 16-byte aligned
start; it compiles for sm_90a and sm_100a (plain loads and integer atomics: nothing arch-specific).
"""
from __future__ import annotations

import functools

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.memory
import torch

import kmeans_kernels
from kmeans_kernels.lloyd import scale_factors
from workbook import launch, sass

VEC = 8                # 16-bit elements per thread per row: one 16-byte load
THREADS = 256          # per CTA, at most: whole row groups of D / VEC threads
ROWS_PER_GROUP = 64    # sorted rows a group walks, at most: the grid's unit of work, whatever the cluster sizes
UNROLL = 4             # rows a group loads before it adds them: 4 loads in flight per thread
CTAS_PER_SM = 4        # fewer rows per group where N would give fewer CTAs than this per SM
MAX_ROWS = 2**31 - 1 - (THREADS + 1) * ROWS_PER_GROUP   # row indices (and a grid's overshoot) in 32 bits
D_LIMIT = THREADS * VEC
ARCHS = ("sm_90a", "sm_100a")
_DTYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}


def row_groups(D: int) -> int:
    """Row groups per CTA: whole groups of D / VEC threads (one row, or one cluster, each) in THREADS."""
    return max(1, THREADS // (D // VEC))


def _vec(ptr: cute.Pointer, start) -> cute.Tensor:
    """VEC consecutive elements from ptr + start (one vector load or store where aligned); traced in kernels."""
    return cute.make_tensor(ptr + start, cute.make_layout(VEC))


# ---- the kernel -----------------------------------------------------------------------------------------

class ClusterSums:
    """One compiled kernel per (D, dtype); N, k, the chunk length and the scale are runtime values. `unroll`:
    the rows a group loads before it adds them (UNROLL; another value only for probes)."""

    def __init__(self, D: int, dtype, unroll: int = UNROLL):
        self.D = D
        self.dtype = dtype
        self.unroll = unroll
        self.lanes = D // VEC                     # threads per row
        self.groups = row_groups(D)

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, ids_ptr: cute.Pointer, order_ptr: cute.Pointer,
                 sums_ptr: cute.Pointer, counts_ptr: cute.Pointer, N: cutlass.Int32, k: cutlass.Int32,
                 rows: cutlass.Int32, f1: cutlass.Float32, f2: cutlass.Float32, stream: cuda.CUstream):
        per_cta = self.groups * rows
        self.kernel(x_ptr, ids_ptr, order_ptr, sums_ptr, counts_ptr, N, k, rows, f1, f2).launch(
            grid=((N + per_cta - 1) // per_cta, 1, 1), block=[self.groups * self.lanes, 1, 1], stream=stream)

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
        for i in cutlass.range(start, end, self.unroll, unroll=1):
            # every load of the batch first (past `end`, the last row again: in bounds, and never added) ...
            batch_ids = cute.make_rmem_tensor(cute.make_layout(self.unroll), cutlass.Int32)
            batch_rows = cute.make_rmem_tensor(cute.make_layout(self.unroll), cutlass.Int64)
            for u in cutlass.range_constexpr(self.unroll):
                j = cutlass.min(i + u, end - 1)
                batch_ids[u] = ids[j]
                batch_rows[u] = order[j]
            values = []
            for u in cutlass.range_constexpr(self.unroll):
                # D is a multiple of VEC, so every thread's 8 elements start on a 16-byte boundary
                offset = cute.assume(batch_rows[u] * self.D + lane * VEC, divby=VEC)
                values.append(_vec(x_ptr, offset).load())
            # ... then add them, flushing a run where the id changes
            for u in cutlass.range_constexpr(self.unroll):
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

    @cute.jit
    def _flush(self, sums_ptr: cute.Pointer, counts_ptr: cute.Pointer, acc: cute.Tensor, run_id: cutlass.Int32,
               run: cutlass.Int32, k: cutlass.Int32, lane: cutlass.Int32):
        """Add one run's sums (this thread's VEC columns) and, from the group's first lane, its length."""
        slot = cutlass.Int64(cutlass.select_(run_id < 0, k, run_id))   # no winner: row k
        base = slot * self.D + lane * VEC
        for e in cutlass.range_constexpr(VEC):
            cute.arch.red(sums_ptr + (base + e), acc[e], op="add", dtype=cutlass.Uint64, sem="relaxed", scope="gpu")
        if lane == 0:
            cute.arch.red(counts_ptr + slot, cutlass.Int64(run), op="add", dtype=cutlass.Uint64, sem="relaxed",
                          scope="gpu")


# ---- the new centroids and the inertia terms, one pass over the sums --------------------------------------

class CentroidUpdate:
    """From the cluster sums and counts: each cluster's new centroid (its mean, rounded once to fp32; an empty
    cluster keeps its centroid) and its inertia term about the data mean. One group of D / VEC threads per
    cluster; one compiled kernel per D."""

    def __init__(self, D: int):
        self.D = D
        self.lanes = D // VEC
        self.groups = row_groups(D)

    @cute.jit
    def __call__(self, sums_ptr: cute.Pointer, counts_ptr: cute.Pointer, c_ptr: cute.Pointer,
                 mean_ptr: cute.Pointer, out_ptr: cute.Pointer, terms_ptr: cute.Pointer, k: cutlass.Int32,
                 unit: cutlass.Float64, stream: cuda.CUstream):
        self.kernel(sums_ptr, counts_ptr, c_ptr, mean_ptr, out_ptr, terms_ptr, k, unit).launch(
            grid=((k + self.groups - 1) // self.groups, 1, 1), block=[self.groups * self.lanes, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, sums_ptr: cute.Pointer, counts_ptr: cute.Pointer, c_ptr: cute.Pointer, mean_ptr: cute.Pointer,
               out_ptr: cute.Pointer, terms_ptr: cute.Pointer, k: cutlass.Int32, unit: cutlass.Float64):
        tidx, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        lane = tidx % self.lanes
        j = block * self.groups + tidx // self.lanes
        row = cutlass.min(j, k - 1)   # past k, the last cluster again: in bounds, and never stored
        n = cute.make_tensor(counts_ptr, cute.make_layout(k))[row]
        base = cute.assume(cutlass.Int64(row) * self.D + lane * VEC, divby=VEC)
        total = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.Float64)
        total.store(_vec(sums_ptr, base).load().to(cutlass.Float64) * unit)   # exact: unit is a power of two
        c = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.Float32)
        c.store(_vec(c_ptr, base).load())
        mean = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.Float64)
        mean.store(_vec(mean_ptr, cute.assume(lane * VEC, divby=VEC)).load())
        count = cutlass.Float64(cutlass.max(n, cutlass.Int64(1)))
        new = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.Float32)
        term = cutlass.Float64(0.0)
        for e in cutlass.range_constexpr(VEC):
            # the mean as torch forms it: (sum * unit) / max(n, 1) in float64, rounded once to fp32
            new[e] = cutlass.select_(n > 0, cutlass.Float32(total[e] / count), c[e])
            # n ||c'||^2 - 2 <S', c'> about the data mean: c' = c - mean, S' = sum - n mean
            centred = cutlass.Float64(c[e]) - mean[e]
            term += centred * (cutlass.Float64(n) * centred - 2.0 * (total[e] - cutlass.Float64(n) * mean[e]))
        terms = cute.make_tensor(terms_ptr, cute.make_layout(k * self.lanes))
        slot = j * self.lanes + lane
        if j < k:
            _vec(out_ptr, base).store(new.load())
            terms[slot] = term


# ---- grouping the rows by cluster: a counting sort --------------------------------------------------------

GROUP_THREADS = 256    # per CTA of the two grouping kernels
ROWS_PER_THREAD = 4    # rows per thread there: four independent chains of loads in flight
GROUP_ROWS = GROUP_THREADS * ROWS_PER_THREAD
SHARED_BINS = 32768    # clusters (k + 1) up to which the ranks are counted in shared memory first (128 KiB)
SHARED_THREADS = 1024
SHARED_ROWS_PER_THREAD = 16
SHARED_ROWS = SHARED_THREADS * SHARED_ROWS_PER_THREAD   # rows per CTA of ClusterRanksShared


class ClusterRanks:
    """rank[i] = how many rows of cluster slot(i) came before row i in the order the atomics landed, and
    count[slot] += 1 (slot = id, or k for an id < 0): one int32 atomic add with return per row."""

    @cute.jit
    def __call__(self, ids_ptr: cute.Pointer, count_ptr: cute.Pointer, rank_ptr: cute.Pointer, N: cutlass.Int32,
                 k: cutlass.Int32, stream: cuda.CUstream):
        self.kernel(ids_ptr, count_ptr, rank_ptr, N, k).launch(
            grid=((N + GROUP_ROWS - 1) // GROUP_ROWS, 1, 1), block=[GROUP_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, ids_ptr: cute.Pointer, count_ptr: cute.Pointer, rank_ptr: cute.Pointer, N: cutlass.Int32,
               k: cutlass.Int32):
        rows = _group_rows(N)
        ids = cute.make_tensor(ids_ptr, cute.make_layout(N))
        rank = cute.make_tensor(rank_ptr, cute.make_layout(N))
        # every load first, then every atomic (a row past N adds 0 to the last row's count), then the stores:
        # no branch between them, so that all are in flight at once
        slots = [_slot(ids, i, N, k) for i in rows]
        ranks = [cute.arch.atomic_add(count_ptr + slot, cutlass.select_(i < N, cutlass.Int32(1), cutlass.Int32(0)),
                                      sem="relaxed", scope="gpu") for i, slot in zip(rows, slots)]
        for u in cutlass.range_constexpr(ROWS_PER_THREAD):
            if rows[u] < N:
                rank[rows[u]] = ranks[u]


class ClusterRanksShared:
    """ClusterRanks for k + 1 <= SHARED_BINS, with fewer global atomics: a CTA counts its SHARED_ROWS rows in
    a shared-memory histogram (a row's rank among the CTA's rows of its cluster from a shared atomic), then
    adds each non-empty bin to count with one global atomic, whose old value is the CTA's base in that cluster;
    rank = base + the rank in the CTA. At 1M rows and k = 4096: about 4K global atomics per CTA of 16K rows,
    a quarter as many as rows, on addresses each hit by 64 CTAs instead of by 256 rows."""

    @cute.jit
    def __call__(self, ids_ptr: cute.Pointer, count_ptr: cute.Pointer, rank_ptr: cute.Pointer, N: cutlass.Int32,
                 k: cutlass.Int32, stream: cuda.CUstream):
        self.kernel(ids_ptr, count_ptr, rank_ptr, N, k).launch(
            grid=((N + SHARED_ROWS - 1) // SHARED_ROWS, 1, 1), block=[SHARED_THREADS, 1, 1],
            smem=SHARED_BINS * 4, stream=stream)

    @cute.kernel
    def kernel(self, ids_ptr: cute.Pointer, count_ptr: cute.Pointer, rank_ptr: cute.Pointer, N: cutlass.Int32,
               k: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        hist = cutlass.memory.SmemAllocator().allocate_tensor(cutlass.Int32, cute.make_layout(SHARED_BINS), 16)
        for b in cutlass.range(tidx, k + 1, SHARED_THREADS, unroll=1):
            hist[b] = cutlass.Int32(0)
        cute.arch.sync_threads()
        ids = cute.make_tensor(ids_ptr, cute.make_layout(N))
        rows = [block * SHARED_ROWS + tidx + u * SHARED_THREADS for u in range(SHARED_ROWS_PER_THREAD)]
        slots = [_slot(ids, i, N, k) for i in rows]
        local = [cute.arch.atomic_add(hist.iterator + slot, cutlass.select_(i < N, cutlass.Int32(1), cutlass.Int32(0)),
                                      sem="relaxed", scope="cta") for i, slot in zip(rows, slots)]
        cute.arch.sync_threads()
        for b in cutlass.range(tidx, k + 1, SHARED_THREADS, unroll=1):
            n = hist[b]
            if n > 0:
                hist[b] = cute.arch.atomic_add(count_ptr + b, n, sem="relaxed", scope="gpu")
        cute.arch.sync_threads()
        rank = cute.make_tensor(rank_ptr, cute.make_layout(N))
        for u in cutlass.range_constexpr(SHARED_ROWS_PER_THREAD):
            if rows[u] < N:
                rank[rows[u]] = hist[slots[u]] + local[u]


class ClusterPlaces:
    """Row i to position end[slot] - count[slot] + rank[i] (end: the inclusive prefix sums of count): order[pos]
    = i, sorted_ids[pos] = slot. The rows of a cluster end up side by side, in the order their atomics landed,
    which the integer sums do not see."""

    @cute.jit
    def __call__(self, ids_ptr: cute.Pointer, count_ptr: cute.Pointer, end_ptr: cute.Pointer,
                 rank_ptr: cute.Pointer, sorted_ptr: cute.Pointer, order_ptr: cute.Pointer, N: cutlass.Int32,
                 k: cutlass.Int32, stream: cuda.CUstream):
        self.kernel(ids_ptr, count_ptr, end_ptr, rank_ptr, sorted_ptr, order_ptr, N, k).launch(
            grid=((N + GROUP_ROWS - 1) // GROUP_ROWS, 1, 1), block=[GROUP_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, ids_ptr: cute.Pointer, count_ptr: cute.Pointer, end_ptr: cute.Pointer,
               rank_ptr: cute.Pointer, sorted_ptr: cute.Pointer, order_ptr: cute.Pointer, N: cutlass.Int32,
               k: cutlass.Int32):
        rows = _group_rows(N)
        ids, rank = cute.make_tensor(ids_ptr, cute.make_layout(N)), cute.make_tensor(rank_ptr, cute.make_layout(N))
        clusters = cute.make_layout(k + 1)
        end, count = cute.make_tensor(end_ptr, clusters), cute.make_tensor(count_ptr, clusters)
        sorted_ids = cute.make_tensor(sorted_ptr, cute.make_layout(N))
        order = cute.make_tensor(order_ptr, cute.make_layout(N))
        # every load before any store (past N a row stands for the last one: in bounds, never stored)
        slots = [_slot(ids, i, N, k) for i in rows]
        places = [end[slot] - count[slot] + rank[cutlass.min(i, N - 1)] for i, slot in zip(rows, slots)]
        for u in cutlass.range_constexpr(ROWS_PER_THREAD):
            if rows[u] < N:
                sorted_ids[places[u]] = slots[u]
                order[places[u]] = cutlass.Int64(rows[u])


def _group_rows(N):
    """This thread's rows in the grouping kernels (ROWS_PER_THREAD of them, GROUP_THREADS apart, so that a
    warp's loads of each are contiguous) and the ids as a tensor; traced inside the kernels."""
    tidx, _, _ = cute.arch.thread_idx()
    block, _, _ = cute.arch.block_idx()
    first = block * GROUP_ROWS + tidx
    return [first + u * GROUP_THREADS for u in range(ROWS_PER_THREAD)]


def _slot(ids, i, N, k):
    """Row i's slot: its id, or k for an id < 0 (a point with no winner); past N, the last row's."""
    row_id = ids[cutlass.min(i, N - 1)]
    return cutlass.select_(row_id < 0, k, row_id)


# ---- host side: compile (no GPU needed) and run --------------------------------------------------------

def check_shape(D: int, dtype: torch.dtype) -> None:
    if dtype not in _DTYPES:
        raise ValueError(f"the update kernel takes bf16 or fp16 x; got {dtype}")
    if isinstance(D, bool) or not isinstance(D, int) or D < VEC or D % VEC or D > D_LIMIT:
        raise ValueError(f"the update kernel takes D a multiple of {VEC} (16-byte rows) up to {D_LIMIT}; got D={D!r}")


def rows_per_group(N: int, D: int, sm_count: int) -> int:
    """Sorted rows per group: ROWS_PER_GROUP (long runs, few atomics), or fewer, in steps of UNROLL, where N
    would otherwise leave SMs idle. At 1M x 128, 64; at 65536 x 128 on 132 SMs, 4 (1024 CTAs, not 64)."""
    fit = N // (row_groups(D) * CTAS_PER_SM * sm_count)
    return max(UNROLL, min(ROWS_PER_GROUP, fit // UNROLL * UNROLL))


def _args(dtype: torch.dtype, x: int, ids: int, order: int, sums: int, counts: int, N: int, k: int, rows: int,
          f1: float, f2: float, stream):
    """The kernel's arguments: global pointers (x 16-byte aligned, for the vector loads), sizes, the scale."""
    gp = launch.gmem_pointer
    return (gp(_DTYPES[dtype], x, 16), gp(cutlass.Int32, ids, 4), gp(cutlass.Int64, order, 8),
            gp(cutlass.Int64, sums, 8), gp(cutlass.Int64, counts, 8), cutlass.Int32(N), cutlass.Int32(k),
            cutlass.Int32(rows), cutlass.Float32(f1), cutlass.Float32(f2), stream)


def _placeholder_args(dtype: torch.dtype):
    from cutlass.runtime import make_fake_stream
    return _args(dtype, 0, 0, 0, 0, 0, 0, 0, 0, 1.0, 1.0, make_fake_stream())


def compile(D: int = 128, dtype: torch.dtype = torch.bfloat16, arch: str = "sm_90a", dump_dir=None) -> sass.Artifacts:
    """Compile the kernel for D and dtype for `arch` with no GPU -> workbook.sass.Artifacts (.ptx, .sass)."""
    check_shape(D, dtype)
    if arch not in ARCHS:
        raise ValueError(f"the update kernel is built for {ARCHS}; got {arch!r}")
    return sass.compile_for(ClusterSums(D, _DTYPES[dtype]), *_placeholder_args(dtype), arch=arch, dump_dir=dump_dir)


@functools.lru_cache(maxsize=None)
def _launches(D: int, dtype: torch.dtype, arch: str, device: int) -> launch.LaunchCache:
    """The compiled kernel for (D, dtype) on one device, compiled on first use with that device current."""
    with launch.on_device(device):
        compiled = cute.compile(ClusterSums(D, _DTYPES[dtype]), *_placeholder_args(dtype), options=f"--gpu-arch {arch}")
    return launch.LaunchCache(compiled, device=device, pointers=5)   # x, ids, order, sums, counts


def check_x(x) -> None:
    """What a kernel walking x in 16-byte row slices needs of it (this module's and `lloyd_state`'s), each
    failure named."""
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or not x.is_cuda or not x.is_contiguous():
        raise ValueError("x must be a contiguous 2-D CUDA tensor")
    N, D = x.shape
    check_shape(D, x.dtype)
    if x.data_ptr() % 16:
        raise ValueError(f"x must start on a 16-byte boundary for the vector loads; its address is {x.data_ptr():#x}")
    if not 1 <= N <= MAX_ROWS:
        raise ValueError(f"N={N} is out of range: the kernel indexes rows with 32-bit integers (N <= {MAX_ROWS})")


def check_inputs(x, sorted_ids, order, sums, counts) -> None:
    """The kernel's preconditions, each failure named."""
    check_x(x)
    N, D = x.shape
    want = {"sorted_ids": (sorted_ids, torch.int32, (N,)), "order": (order, torch.int64, (N,)),
            "counts": (counts, torch.int64, None), "sums": (sums, torch.int64, None)}
    for name, (t, dtype, shape) in want.items():
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.device != x.device or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous {dtype} tensor on {x.device}")
        if shape is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}; got {tuple(t.shape)}")
    if sums.ndim != 2 or sums.shape[1] != D or sums.shape[0] < 1 or tuple(counts.shape) != (sums.shape[0],):
        raise ValueError(f"sums must be int64 [k + 1, D={D}] and counts int64 [k + 1]; got {tuple(sums.shape)} "
                         f"and {tuple(counts.shape)}")
    if sums.shape[0] > 2**31 - 1:
        raise ValueError(f"k={sums.shape[0] - 1} is too large: the kernel holds ids in 32-bit integers")


def cluster_sums(x: torch.Tensor, sorted_ids: torch.Tensor, order: torch.Tensor, s: int, sums: torch.Tensor,
                 counts: torch.Tensor) -> None:
    """sums[j] += sum of fixed_point(x, s)[order[i]] over the i with sorted_ids[i] == j, and counts[j] += their
    number, for j = 0..k-1; ids < 0 go to row k (sums int64 [k + 1, D], counts int64 [k + 1]). Adds to what
    the buffers hold; launches on the current stream and never waits for the GPU. `sorted_ids` must be
    ids in[0, k) or < 0; sorted (with `order` the permutation that sorts them) the runs are long and the
    atomics few, but any order gives the same sums."""
    check_inputs(x, sorted_ids, order, sums, counts)
    device = x.device.index
    arch = kmeans_kernels.arch_of(x.device)   # the assignment kernels' rule: sm_90a, sm_100a, else an error
    N, D = x.shape
    k = sums.shape[0] - 1
    values = (x.data_ptr(), sorted_ids.data_ptr(), order.data_ptr(), sums.data_ptr(), counts.data_ptr(), N, k,
              rows_per_group(N, D, launch.sm_count(device)), *scale_factors(s))
    _launches(D, x.dtype, arch, device)(values, lambda st: _args(x.dtype, *values, cuda.CUstream(st)),
                                         launch.stream_handle(device))


# ---- host side of the update ---------------------------------------------------------------------------

def _update_args(sums: int, counts: int, c: int, mean: int, out: int, terms: int, k: int, unit: float, stream):
    gp = launch.gmem_pointer
    return (gp(cutlass.Int64, sums, 16), gp(cutlass.Int64, counts, 8), gp(cutlass.Float32, c, 16),
            gp(cutlass.Float64, mean, 16), gp(cutlass.Float32, out, 16), gp(cutlass.Float64, terms, 8),
            cutlass.Int32(k), cutlass.Float64(unit), stream)


def _update_placeholders():
    from cutlass.runtime import make_fake_stream
    return _update_args(0, 0, 0, 0, 0, 0, 1, 1.0, make_fake_stream())


def compile_update(D: int = 128, arch: str = "sm_90a") -> sass.Artifacts:
    """Compile CentroidUpdate for D and `arch` with no GPU -> workbook.sass.Artifacts."""
    check_shape(D, torch.bfloat16)
    if arch not in ARCHS:
        raise ValueError(f"the update kernel is built for {ARCHS}; got {arch!r}")
    return sass.compile_for(CentroidUpdate(D), *_update_placeholders(), arch=arch)


@functools.lru_cache(maxsize=None)
def _update_launches(D: int, arch: str, device: int) -> launch.LaunchCache:
    with launch.on_device(device):
        compiled = cute.compile(CentroidUpdate(D), *_update_placeholders(), options=f"--gpu-arch {arch}")
    return launch.LaunchCache(compiled, device=device, pointers=6)   # sums, counts, c, mean, out, terms


def update_terms(k: int, D: int, device) -> torch.Tensor:
    """The buffer `centroid_update` writes the inertia terms to: float64 [k * D / VEC], one per thread."""
    return torch.empty(k * (D // VEC), dtype=torch.float64, device=device)


def centroid_update(sums: torch.Tensor, counts: torch.Tensor, c: torch.Tensor, mean: torch.Tensor, unit: float,
                    out: torch.Tensor, terms: torch.Tensor) -> None:
    """out[j] = fp32((sums[j] * unit) / counts[j]) where counts[j] > 0, else c[j], for the k clusters (sums int64
    [>= k, D], counts int64 [>= k], c and out fp32 [k, D], mean float64 [D]); and `terms` (from `update_terms`)
    the inertia's per-cluster parts: inertia = spread + terms.sum(). The centroids are those of the torch
    formula bit for bit (the same IEEE operations); launches on the current stream, never waits."""
    k, D = c.shape if c.ndim == 2 else (0, 0)
    want = {"sums": (sums, torch.int64), "counts": (counts, torch.int64), "c": (c, torch.float32),
            "mean": (mean, torch.float64), "out": (out, torch.float32), "terms": (terms, torch.float64)}
    for name, (t, dtype) in want.items():
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or not t.is_cuda or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous {dtype} CUDA tensor")
        align = 16 if name in ("sums", "c", "mean", "out") else 8   # vector loads and stores, or scalar ones
        if t.device != c.device or t.data_ptr() % align:
            raise ValueError(f"{name} must be on {c.device}, {align}-byte aligned")
    check_shape(D, torch.bfloat16)
    if (sums.ndim != 2 or sums.shape[1] != D or sums.shape[0] < k or counts.ndim != 1 or counts.shape[0] < k
            or tuple(mean.shape) != (D,) or tuple(out.shape) != (k, D) or tuple(terms.shape) != (k * (D // VEC),)):
        raise ValueError(f"shapes: sums [>= k, D], counts [>= k], c and out [k, D], mean [D], terms [k * D / {VEC}]; "
                         f"got {tuple(sums.shape)}, {tuple(counts.shape)}, {tuple(c.shape)}, {tuple(out.shape)}, "
                         f"{tuple(mean.shape)}, {tuple(terms.shape)}")
    if not 1 <= k * (D // VEC) <= 2**31 - 1:
        raise ValueError(f"k={k} is out of range for D={D}: the kernel indexes its terms with 32-bit integers")
    device = c.device.index
    values = (sums.data_ptr(), counts.data_ptr(), c.data_ptr(), mean.data_ptr(), out.data_ptr(), terms.data_ptr(), k,
              unit)
    _update_launches(D, kmeans_kernels.arch_of(c.device), device)(
        values, lambda st: _update_args(*values, cuda.CUstream(st)), launch.stream_handle(device))


# ---- host side of the grouping ------------------------------------------------------------------------

def _grouping_args(ids: int, count: int, end: int, rank: int, sorted_ids: int, order: int, N: int, k: int,
                   stream):
    """(ClusterRanks' arguments, ClusterPlaces' arguments) for these addresses and sizes."""
    gp = launch.gmem_pointer
    i32 = lambda a: gp(cutlass.Int32, a, 4)   # noqa: E731
    sizes = (cutlass.Int32(N), cutlass.Int32(k), stream)
    return ((i32(ids), i32(count), i32(rank)) + sizes,
            (i32(ids), i32(count), i32(end), i32(rank), i32(sorted_ids), gp(cutlass.Int64, order, 8)) + sizes)


def _grouping_placeholders():
    from cutlass.runtime import make_fake_stream
    return _grouping_args(0, 0, 0, 0, 0, 0, 0, 0, make_fake_stream())


def shared_ranks(k: int) -> bool:
    """Whether k clusters' ranks are counted in shared memory first (ClusterRanksShared): their k + 1 bins fit."""
    return k + 1 <= SHARED_BINS


def _ranks_kernel(shared: bool):
    return ClusterRanksShared() if shared else ClusterRanks()


def compile_grouping(arch: str = "sm_90a", k: int = 4096) -> tuple[sass.Artifacts, sass.Artifacts]:
    """Compile the ranks kernel for k and ClusterPlaces for `arch` with no GPU -> their workbook.sass.Artifacts."""
    if arch not in ARCHS:
        raise ValueError(f"the grouping kernels are built for {ARCHS}; got {arch!r}")
    ranks, places = _grouping_placeholders()
    return (sass.compile_for(_ranks_kernel(shared_ranks(k)), *ranks, arch=arch),
            sass.compile_for(ClusterPlaces(), *places, arch=arch))


@functools.lru_cache(maxsize=None)
def _grouping_launches(arch: str, device: int, shared: bool) -> tuple[launch.LaunchCache, launch.LaunchCache]:
    ranks, places = _grouping_placeholders()
    with launch.on_device(device):
        compiled = (cute.compile(_ranks_kernel(shared), *ranks, options=f"--gpu-arch {arch}"),
                    cute.compile(ClusterPlaces(), *places, options=f"--gpu-arch {arch}"))
    return (launch.LaunchCache(compiled[0], device=device, pointers=3),    # ids, count, rank
            launch.LaunchCache(compiled[1], device=device, pointers=6))    # ids, count, end, rank, sorted, order


class Grouping:
    """The rows of ids grouped by cluster, into buffers made once for (N, k) on one device:

        group = Grouping(N, k, device)
        sorted_ids, order = group(ids)    # ids int32 [N] in [0, k) or < 0; launches only, never waits

    sorted_ids[j] = slot(ids[order[j]]) (slot: the id, or k for an id < 0), non-decreasing, and order a
    permutation of 0..N-1: what `torch.sort(ids)` gives `cluster_sums`, except that the rows of one cluster
    come in the order their atomics landed (run to run they may differ; the integer sums do not) and that
    ids < 0 sort last, as k. A counting sort: zero the counts, a rank per row from one int32 atomic
    (ClusterRanksShared, or ClusterRanks where k + 1 > SHARED_BINS), the counts' prefix sums (`torch.cumsum`),
    each row to its place (ClusterPlaces); four launches where the sort of 1M int32 keys took seven and several
    passes over keys and values."""

    def __init__(self, N: int, k: int, device: torch.device):
        if not 1 <= N <= MAX_ROWS or not 1 <= k < 2**31 - 1:
            raise ValueError(f"Grouping takes 1 <= N <= {MAX_ROWS} and 1 <= k < 2^31 - 1; got N={N}, k={k}")
        i32 = dict(dtype=torch.int32, device=device)
        self.N, self.k, self.device = N, k, torch.device(device)
        self.count = torch.zeros(k + 1, **i32)
        self.end = torch.empty(k + 1, **i32)
        self.rank = torch.empty(N, **i32)
        self.sorted_ids = torch.empty(N, **i32)
        self.order = torch.empty(N, dtype=torch.int64, device=device)
        self.shared = shared_ranks(k)

    def __call__(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if (not isinstance(ids, torch.Tensor) or ids.dtype != torch.int32 or ids.device != self.device
                or tuple(ids.shape) != (self.N,) or not ids.is_contiguous()):
            raise ValueError(f"ids must be a contiguous int32 tensor of shape ({self.N},) on {self.device}")
        device = self.device.index
        ranks, places = _grouping_launches(kmeans_kernels.arch_of(self.device), device, self.shared)
        values = (ids.data_ptr(), self.count.data_ptr(), self.end.data_ptr(), self.rank.data_ptr(),
                  self.sorted_ids.data_ptr(), self.order.data_ptr(), self.N, self.k)
        stream = launch.stream_handle(device)
        self.count.zero_()
        ranks((values[0], values[1], values[3], self.N, self.k),
              lambda st: _grouping_args(*values, cuda.CUstream(st))[0], stream)
        torch.cumsum(self.count, 0, out=self.end)
        places(values, lambda st: _grouping_args(*values, cuda.CUstream(st))[1], stream)
        return self.sorted_ids, self.order
