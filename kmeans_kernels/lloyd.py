"""k-means clustering (Lloyd's algorithm) built on the assignment kernel, on one device or across processes.

    r = kmeans_kernels.fit(x, 4096)                          # x: bf16 or fp16 [N, D], CUDA or CPU
    r.centroids, r.ids, r.inertia, r.iterations, r.converged
    r = kmeans_kernels.fit(x_shard, 4096, group=pg)          # each rank holds a shard of the rows

One Lloyd iteration assigns every point to its nearest centroid, then moves each centroid to the mean of its
points. Here:

* **Assignment**: `kmeans_kernels.assign` on CUDA (the variant resolved once for the whole data, so that
  every rank and every iteration runs the same kernel), `kmeans_kernels.reference.assign` on the CPU; both
  give the same ids on exact inputs. The centroids are kept in fp32; each iteration casts them to x's dtype
  for the assignment and passes their norms (`c_sq`) to it.
* **Update, deterministic by arithmetic**: every coordinate of x counts as a 64-bit fixed-point integer
  (x * 2^s, truncated toward zero, with s chosen from the largest |x| and N so that no sum can overflow;
  the rule and why it is exact: `fixed_point`), and the per-cluster sums are integer sums.
  Integer addition is associative, so the order in which the GPU's atomics land cannot change a single bit:
  the same input gives the same centroids run after run, and the all-reduce of integer sums is exact, so the
  sharded run equals the single-process run bit for bit (given the same ids). Float atomics would round
  differently with every arrival order. On CUDA each iteration groups the rows by id (a counting sort,
  `lloyd_update.Grouping`) and one kernel sums runs of equal ids from the 16-bit x itself
  (`lloyd_update.cluster_sums`: x read once in 16 bits, a few million atomics); on the CPU the sums are
  `index_add_`s of a fixed-point copy of x made once (8 bytes per coordinate); both give the same integers.
  Precision, with L = ceil(log2 N): the grid step is
  at most 2^(L - 61) max|x|, so a bf16 value at least max|x| / 2^(55 - L) (fp16: / 2^(52 - L)) is exact,
  a factor 2^35 (2^32) at N = 1M, and a smaller one is truncated toward zero to the grid. The mean is then
  formed in float64 and rounded once to fp32, the same operations on CPU and GPU.
* **Empty clusters keep their centroid** (no points, no move): deterministic, the same on every rank, and
  the objective does not increase. It also means a centroid that starts far from every point stays unused;
  scikit-learn instead moves an empty centroid onto a far point.
* **Initialisation**: `"k-means++"` (default) runs k-means++ (Arthur & Vassilvitskii) on a seeded sample of
  at most max(16 k, 8192) rows, drawn by global row index, so that any sharding sees the same sample; rank 0
  computes and broadcasts. k-means++ adds one centre at a time, each pick weighted by the squared distance
  to the centres before it, so every distance pass is a matrix-vector product against one new centre, which
  a tensor-core GEMM kernel cannot tile; the pass uses the assignment's score, d^2 = ||x||^2 + 2 s with
  s = 0.5 ||c||^2 - <x, c> and ||x||^2 computed once, in float64 (exact on exact inputs), and the running
  sum that a pick draws from is taken in fixed point, so no scan order can move a pick: the same picks on
  CPU and GPU, run after run. `"random"`: k distinct rows, uniformly, in row order. A tensor: the initial centroids
  (rank 0's under a group).
* **Convergence** as scikit-learn's Lloyd: stop when an assignment equals the previous one, or when the
  squared centroid shift summed over centroids is at most `tol` times the mean per-feature variance of x,
  then assign once more to the final centroids. `iterations` counts Lloyd iterations as scikit-learn's
  `n_iter_` does, and on the same initial centroids the centroids, ids and final inertia agree with its
  `KMeans(init=c0, n_init=1, algorithm="lloyd", max_iter=iters, tol=tol)` (see tests/test_fit.py).
  `tol=None` runs exactly `iters` iterations with no convergence test, so the loop never waits for the GPU.
* **Launches**: an iteration is about twenty-five small launches (torch operations, the grouping, our kernels), each
  costing the host 5-20 us, which at small N is far more than the GPU's work. On CUDA without a process group, `fit`
  therefore runs the first iteration from the host (it compiles and loads everything), captures the iteration body
  once into a CUDA graph (two: the centroid and id buffers alternate; with tol=None a third for the closing
  assignment, which alone compares the ids) and replays it, one driver call per iteration (`_GraphLoop`); every
  value it produces goes into fixed buffers, read by the host once per iteration with a tol and only at the end with
  tol=None. Before the loop, x's fixed-point column totals and spread take one read of x each on CUDA
  (`kmeans_kernels.lloyd_state`), torch's chunked passes on the CPU. The eager loop (the CPU, a process group, or a
  capture that fails, with a warning) runs the same operations on the same inputs: the same bits. Up to four loops,
  graphs and buffers, stay kept for the next fit on the same live x (`_KeptLoops`; its state measured anew from x's
  values, the passes replayed from a graph of the loop's): a second fit, another start, skips the warm-up and the
  captures. The checks read x's extent once, with one wait, and hand its magnitude on to the fixed-point scale. A
  kept loop's GPU memory (about what one fit's buffers take) goes when x does, or when newer loops push it out.
* **Inertia** (sum of squared distances, float64) is computed per iteration from the cluster sums and counts,
  O(K D) instead of a pass over x, around the data mean to avoid cancellation: entry i is the objective of
  iteration i's assignment to the fp32 centroids it started from; `inertia[-1]` is that of the returned
  centroids and ids. Ranked by bf16 centroids, a point on a near-tie may join the centroid that is not the
  nearest of the fp32 ones, so the objective can rise by such round-off.

Bad input raises ValueError naming it: x not bf16/fp16, not 2-D, not contiguous, not on CPU or CUDA, with a
NaN or inf (the row is named); k < 1 or k > N; a bad init tensor, iters, tol or variant. Under a group every
rank raises the same error. A point whose every score overflows fp32 (|x| or |c| beyond ~1e19) gets no
centroid: fit raises rather than drop it.

Distributed (`group=` a torch.distributed process group; NCCL with CUDA tensors, gloo with CPU tensors): rank r
holds rows [offset_r, offset_r + N_r) of the global x, in rank order (shards may differ in size, each N_r >= 1);
per-cluster sums and counts are all-reduced once per iteration; the result's `ids` are the rank's own rows,
`centroids` and `inertia` are global and equal on every rank.
"""
from __future__ import annotations

import contextlib
import math
import time
import warnings
import weakref
from dataclasses import dataclass

import torch
import torch.distributed as dist

import kmeans_kernels
from kmeans_kernels import reference

INIT_METHODS = ("k-means++", "random")
FIT_DTYPES = (torch.bfloat16, torch.float16)
SAMPLE_PER_CLUSTER = 16   # k-means++ runs on at most max(16 k, SAMPLE_MIN) rows of x
SAMPLE_MIN = 8192
FIXED_POINT_BITS = 62     # sums of N fixed-point values stay below 2^62 < 2^63
UPDATES = ("sorted", "index_add")  # the per-iteration sums: rows grouped by id + kernel (CUDA), or index_add_ of a fixed-point copy
_CUDA_UPDATE = "sorted"   # what fit uses on CUDA (tests switch it to compare the two)
_ALL_ZERO = -(1 << 30)     # `_top_exponent` of an x of zeros
_CHUNK_ELEMENTS = 1 << 22  # elements per chunk of the passes over x in torch: 16 MiB of fp32, 32 MiB of int64


@dataclass(frozen=True)
class FitResult:
    """What `fit` found. `centroids` fp32 [k, D] and `ids` int32 [N] (this rank's rows) on x's device;
    `inertia`: the objective at each iteration's assignment, then (unless the last iteration's assignment
    did not change) at the final one, so `inertia[-1]` belongs to `centroids` and `ids`; `iterations`:
    Lloyd iterations run; `converged`: the assignment stopped changing or the shift fell within tol (with
    tol=None: the final assignment equals the last iteration's)."""
    centroids: torch.Tensor
    ids: torch.Tensor
    inertia: tuple[float, ...]
    iterations: int
    converged: bool


_timeline: list | None = None  # (label, CUDA event or perf_counter seconds) while `timeline()` is on


@contextlib.contextmanager
def timeline():
    """Inside it, every `fit` appends (label, stamp) marks to the list it yields: "iteration" at the start of
    each Lloyd iteration, "all_reduce" and "reduced" around its collective, "final" before the closing
    assignment, "end" at the end. A stamp is a CUDA event recorded on the current stream for CUDA tensors
    (nothing waits for it), else time.perf_counter(). `iteration_times` reads them. For the launcher."""
    global _timeline
    marks: list = []
    _timeline, outer = marks, _timeline
    try:
        yield marks
    finally:
        _timeline = outer


def _mark(label: str, device: torch.device) -> None:
    if _timeline is None:
        return
    if device.type == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        _timeline.append((label, event))
    else:
        _timeline.append((label, time.perf_counter()))


@contextlib.contextmanager
def _no_marks():
    """No timeline marks while a graph is captured: an event recorded there would be a node, not a time."""
    global _timeline
    _timeline, outer = None, _timeline
    try:
        yield
    finally:
        _timeline = outer


def iteration_times(marks: list) -> list[tuple[float, float]]:
    """(ms of the iteration, ms of its all-reduce) for each Lloyd iteration of one fit's marks; the closing
    assignment is not an iteration. Synchronises CUDA first."""
    if any(not isinstance(stamp, float) for _, stamp in marks):
        torch.cuda.synchronize()

    def ms(a, b):
        return (b - a) * 1e3 if isinstance(a, float) else a.elapsed_time(b)

    out, start, reduce_ms, reduce_start = [], None, 0.0, None
    for label, stamp in marks:
        if label in ("iteration", "final", "end") and start is not None:
            out.append((ms(start, stamp), reduce_ms))
            start = None
        if label == "iteration":
            start, reduce_ms = stamp, 0.0
        elif label == "all_reduce":
            reduce_start = stamp
        elif label == "reduced" and start is not None:
            reduce_ms += ms(reduce_start, stamp)
    return out


class _Shards:
    """Who holds which rows: this process alone (group=None) or the ranks of a process group."""

    def __init__(self, group, n_local: int):
        self.group = group
        self.rank = 0 if group is None else dist.get_rank(group)
        self.world = 1 if group is None else dist.get_world_size(group)
        self.sizes = [n_local]
        self.offset = 0

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def set_sizes(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.offset = sum(sizes[:self.rank])

    def all_reduce(self, t: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        if self.group is not None:
            dist.all_reduce(t, op=op, group=self.group)
        return t

    def broadcast_from_first(self, t: torch.Tensor) -> torch.Tensor:
        if self.group is not None:
            dist.broadcast(t, src=dist.get_global_rank(self.group, 0), group=self.group)
        return t

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        if self.group is None:
            return [t]
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t, group=self.group)
        return parts

    def rows(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """fp32 rows of the global x at the sorted global row `index` (CPU int64), the same on every rank."""
        lo, hi = self.offset, self.offset + x.shape[0]
        mine = index[(index >= lo) & (index < hi)] - lo
        local = x[mine.to(x.device)].float()
        if self.group is None:
            return local
        # ranks hold consecutive row ranges in rank order, so their pieces concatenate into index order
        bounds = torch.tensor([0, *self.sizes]).cumsum(0)
        counts = [int(((index >= bounds[r]) & (index < bounds[r + 1])).sum()) for r in range(self.world)]
        padded = torch.zeros(max(counts), x.shape[1], dtype=torch.float32, device=x.device)
        padded[:local.shape[0]] = local
        parts = self.all_gather(padded)
        return torch.cat([p[:n] for p, n in zip(parts, counts)])


def _comm_device(group) -> torch.device:
    """Where the tensors of the checking collective live: a CUDA device for NCCL, else the CPU."""
    if group is not None and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _local_problem(x, k, iters, tol, init, variant, group) -> str | None:
    """The first thing wrong with this rank's arguments, or None."""
    if not isinstance(x, torch.Tensor):
        return f"x must be a torch.Tensor, got {type(x).__name__}"
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        return f"x must be 2-D [N, D] with N, D >= 1; got shape {tuple(x.shape)}"
    if x.dtype not in FIT_DTYPES:
        return (f"fit takes bf16 or fp16 x (the assignment kernels' dtypes); got {x.dtype} "
                f"(convert with x.to(torch.bfloat16))")
    if x.device.type not in ("cpu", "cuda"):
        return f"x must be on the CPU or a CUDA device; it is on {x.device}"
    if not x.is_contiguous():
        return f"x must be row-major contiguous (call .contiguous()); got strides {x.stride()}"
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        return f"k must be an integer >= 1, got {k!r}"
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        return f"iters must be an integer >= 1, got {iters!r}"
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol >= 0
                            or not math.isfinite(tol)):
        return f"tol must be a finite number >= 0, or None for no convergence test; got {tol!r}"
    if isinstance(init, str):
        if init not in INIT_METHODS:
            return f"init must be one of {INIT_METHODS} or a [k, D] tensor; got {init!r}"
    elif isinstance(init, torch.Tensor):
        if init.shape != (k, x.shape[1]) or not init.is_floating_point():
            return f"an init tensor must be floating [k, D] = [{k}, {x.shape[1]}]; got {init.dtype} {tuple(init.shape)}"
    else:
        return f"init must be one of {INIT_METHODS} or a [k, D] tensor; got {type(init).__name__}"
    if x.device.type == "cpu" and variant != "auto":
        return f"variant={variant!r} names a CUDA kernel; on the CPU fit uses kmeans_kernels.reference (variant='auto')"
    if x.device.type == "cuda":
        try:
            kmeans_kernels.check_d(x.shape[1])
        except ValueError as e:
            return f"{e}; fit on the CPU takes any D"
    if group is not None and dist.get_backend(group) == "nccl" and x.device.type != "cuda":
        return f"an NCCL group needs x on a CUDA device; x is on {x.device}"
    return None


def _extent(x: torch.Tensor, init) -> tuple[float, float, bool]:
    """x's smallest and largest value (NaN where x has one) and whether `init`, where it is a tensor, is finite:
    one pass over x and one wait for its device, which fit's checks and its fixed-point scale share."""
    values = list(torch.aminmax(x))   # one pass; NaN propagates into both
    if isinstance(init, torch.Tensor):
        # the init is finite exactly where its min and max are: one kernel, where isfinite and all took two
        values += [v.to(x.device) for v in torch.aminmax(init.detach())]
        if init.dtype != x.dtype:
            values = [v.float() for v in values]
    read = torch.stack(values).float().tolist()
    return read[0], read[1], all(math.isfinite(v) for v in read[2:])


def _nonfinite_row(x: torch.Tensor) -> int:
    """The first row of x holding a NaN or inf, or -1 (called once x's extent says there is one)."""
    step = max(1, _CHUNK_ELEMENTS // x.shape[1])
    for r0 in range(0, x.shape[0], step):
        bad = ~torch.isfinite(x[r0:r0 + step]).all(dim=1)
        if bool(bad.any()):
            return r0 + int(bad.nonzero()[0, 0])
    return -1


def _top_exponent(lo: float, hi: float) -> int:
    """e with max(|lo|, |hi|) < 2^e; _ALL_ZERO where both are 0, below every other, so that the maximum over
    ranks is the exponent of the largest |x| of all."""
    top = max(-lo, hi)
    return math.frexp(top)[1] if top > 0 else _ALL_ZERO


def _check(x, k, iters, tol, init, variant, shards: _Shards, comm: torch.device) -> int:
    """Validate on every rank together, so that a bad shard makes every rank raise instead of one rank
    raising and the others waiting in the next collective. Sets the shard sizes and returns the exponent of
    the largest |x| over all ranks (`_top_exponent`), which `_scale_exponent` takes."""
    problem = _local_problem(x, k, iters, tol, init, variant, shards.group)
    bad_row, top = -1, _ALL_ZERO
    if problem is None:
        lo, hi, init_finite = _extent(x, init)
        if not init_finite:
            problem = "the init tensor has NaN or inf entries"
        elif math.isfinite(lo) and math.isfinite(hi):
            top = _top_exponent(lo, hi)
        else:
            bad_row = _nonfinite_row(x)
    mine = torch.tensor([problem is None, x.shape[0] if problem is None else 0,
                         x.shape[1] if problem is None else 0, bad_row, top], dtype=torch.int64, device=comm)
    facts = [p.tolist() for p in shards.all_gather(mine)]
    if problem is not None:
        raise ValueError(problem)
    for r, (ok, n, D, row, _) in enumerate(facts):
        where = "" if shards.group is None else f"rank {r}'s shard: "
        if not ok:
            raise ValueError(f"rank {r} was given invalid input (its own error says what)")
        if D != x.shape[1]:
            raise ValueError(f"D differs across ranks: rank {r} has D={D}, this rank D={x.shape[1]}")
        if row >= 0:
            raise ValueError(f"{where}row {row} of x has a NaN or inf; fit needs finite points "
                             f"(drop or impute those rows first)")
    shards.set_sizes([n for _, n, _, _, _ in facts])
    if k > shards.total:
        raise ValueError(f"k={k} is more clusters than points (N={shards.total})")
    return max(top for *_, top in facts)


def _scale_exponent(x: torch.Tensor, shards: _Shards, top: int | None = None) -> int:
    """s such that every |x * 2^s| < 2^(62 - ceil(log2 N)): N of them sum below 2^62. `top`: the exponent of the
    largest |x| over all ranks (`_top_exponent`), where the caller has it; else read from x here."""
    if top is None:
        lo, hi, _ = _extent(x, None)
        mine = torch.tensor([_top_exponent(lo, hi)], dtype=torch.int64, device=x.device)
        top = int(shards.all_reduce(mine, dist.ReduceOp.MAX)[0])
    return FIXED_POINT_BITS - math.ceil(math.log2(shards.total)) - (0 if top == _ALL_ZERO else top)


def scale_factors(s: int) -> tuple[float, float]:
    """(2^s1, 2^s2) with s1 + s2 = s, both normal fp32 numbers: `fixed_point` takes x * 2^s as
    fp32(x) * 2^s1 * 2^s2. Every s that bf16 or fp16 data can need (-97 <= s <= 194) splits so."""
    s1 = s // 2
    s2 = s - s1
    if not (-126 <= s1 <= 127 and -126 <= s2 <= 127):
        raise ValueError(f"fixed-point scale 2^{s} is outside what two fp32 factors hold (-252 <= s <= 254)")
    return math.ldexp(1.0, s1), math.ldexp(1.0, s2)


def fixed_point(x: torch.Tensor, s: int) -> torch.Tensor:
    """x * 2^s truncated toward zero, int64 [N, D] on x's device: exact for every coordinate on the 2^-s grid.

    The fixed-point rule of the whole update, here and in the CUDA kernel (`kmeans_kernels.lloyd_update`),
    which does the same three operations per coordinate: int64(fp32(x) * 2^s1 * 2^s2) with s1 + s2 = s
    (`scale_factors`). That equals int64(fp64(x) * 2^s) bit for bit: x (bf16 or fp16) has at most 11
    significant bits, so scaling it by a power of two is exact while the result is a normal fp32; it cannot
    overflow, as `_scale_exponent` makes every |x * 2^s| < 2^62; and a product that falls into the subnormal
    range has an exact value below 1, which truncates to 0 whether it was rounded or not. Two fp32 products
    and one conversion, where the float64 route takes two conversions: the conversions are the kernel's
    slowest operation. tests/test_lloyd_update.py checks it against float64 on every bf16 and fp16 value."""
    out = torch.empty(x.shape, dtype=torch.int64, device=x.device)
    step = max(1, _CHUNK_ELEMENTS // x.shape[1])
    for r0 in range(0, x.shape[0], step):
        out[r0:r0 + step] = _scaled(x[r0:r0 + step], s)   # the int64 copy truncates toward zero
    return out


def _scaled(x: torch.Tensor, s: int) -> torch.Tensor:
    """fp32(x) * 2^s1 * 2^s2: fixed_point's value before its truncation to int64."""
    f1, f2 = scale_factors(s)
    return x.float().mul_(f1).mul_(f2)


def fixed_point_total(x: torch.Tensor, s: int) -> torch.Tensor:
    """fixed_point(x, s).sum(0), int64 [D], chunk by chunk: the same integer without an N x D int64 copy."""
    total = torch.zeros(x.shape[1], dtype=torch.int64, device=x.device)
    step = max(1, _CHUNK_ELEMENTS // x.shape[1])
    for r0 in range(0, x.shape[0], step):
        total += _scaled(x[r0:r0 + step], s).sum(0, dtype=torch.int64)   # truncated by the sum's int64 cast
    return total


def spread_about(x: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """sum over rows of ||x_i - mean||^2, float64 [] (mean: float64 [D]), chunk by chunk."""
    spread = torch.zeros((), dtype=torch.float64, device=x.device)
    step = max(1, _CHUNK_ELEMENTS // x.shape[1])
    for r0 in range(0, x.shape[0], step):
        spread += (x[r0:r0 + step] - mean).square_().sum()   # bf16 - float64: float64, in one pass
    return spread


def _kmeans_plus_plus(sample: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    """k rows of `sample` (fp32 [m, D]) by k-means++ with one candidate per pick; fp32 [k, D]."""
    m = sample.shape[0]
    s64 = sample.double()
    x_sq = (s64 * s64).sum(1)
    u = torch.rand(k, generator=gen, dtype=torch.float64).to(sample.device)
    picks = torch.empty(k, dtype=torch.int64, device=sample.device)
    picks[0] = (u[0] * m).long().clamp_(max=m - 1)

    def dist_sq(j):  # ||x||^2 + 2 s, s = 0.5 ||c||^2 - <x, c>: the assignment's score, in float64
        c = s64[picks[j]]
        return (x_sq + (c @ c - 2.0 * (s64 @ c))).clamp_(min=0.0)

    headroom = FIXED_POINT_BITS - math.ceil(math.log2(m))
    d2 = dist_sq(0)
    d2[picks[0]] = 0.0
    for j in range(1, k):
        # the running sum in fixed point, like the cluster sums: a GPU's float scan may round in any order,
        # which would move a pick; an integer scan cannot (and it all stays on the device: no wait per pick)
        top = d2.max().clamp(min=torch.finfo(torch.float64).tiny)
        weights = (d2 / top * 2.0 ** headroom).long()    # each <= 2^headroom: m of them sum below 2^62
        cum = weights.cumsum(0)
        # a point already chosen has weight 0 and cannot be picked again, unless every weight is 0
        target = (u[j] * cum[-1].double()).long().reshape(1)
        picks[j] = torch.searchsorted(cum, target, right=True)[0].clamp_(max=m - 1)
        d2 = torch.minimum(d2, dist_sq(j))
        d2[picks[j]] = 0.0  # exactly, whatever the rounding of the expansion
    return sample[picks]


def _initial_centroids(x, k, init, seed, shards: _Shards) -> torch.Tensor:
    D = x.shape[1]
    if isinstance(init, torch.Tensor):
        # a copy: the broadcast writes into it, and the caller's tensor stays theirs
        c = init.detach().to(device=x.device, dtype=torch.float32, memory_format=torch.contiguous_format, copy=True)
        return shards.broadcast_from_first(c)
    N = shards.total
    gen = torch.Generator().manual_seed(seed)
    if init == "random":
        return shards.rows(x, torch.randperm(N, generator=gen)[:k].sort().values)
    m = min(N, max(SAMPLE_PER_CLUSTER * k, SAMPLE_MIN))
    index = torch.arange(N) if m == N else torch.randperm(N, generator=gen)[:m].sort().values
    sample = shards.rows(x, index)
    if shards.rank == 0:
        c = _kmeans_plus_plus(sample, k, gen)
    else:
        c = torch.empty(k, D, dtype=torch.float32, device=x.device)
    return shards.broadcast_from_first(c)


class _Lloyd:
    """The state of one fit: x's fixed-point scale, the data mean and spread, one buffer for the sums, and what
    the update needs per iteration. `update`: "sorted" (CUDA only: group the rows by id, sum runs from x itself) or
    "index_add" (a fixed-point copy of x, made once); None: "sorted" on CUDA, "index_add" on the CPU."""

    def __init__(self, x: torch.Tensor, k: int, variant: str, shards: _Shards, update: str | None = None,
                 top: int | None = None):
        self.x, self.k, self.shards = x, k, shards
        N, D = shards.total, x.shape[1]
        if x.is_cuda:
            be = kmeans_kernels.backend(kmeans_kernels.arch_of(x.device))
            variant = be.auto_variant(N, D, k) if variant == "auto" else variant
            if variant not in be.VARIANTS:
                raise ValueError(f"variant {variant!r} does not exist; choose from {('auto',) + tuple(be.VARIANTS)}")
        self.variant = variant
        self.update_method = update or (_CUDA_UPDATE if x.is_cuda else "index_add")
        if self.update_method not in UPDATES or (self.update_method == "sorted" and not x.is_cuda):
            raise ValueError(f"update {self.update_method!r}: choose from {UPDATES} ('sorted' on CUDA only)")
        self.s = None
        self.measure(top)
        if x.is_cuda:
            from kmeans_kernels import lloyd_update   # CuTe DSL: imported with the CUDA path only
            self.centroid_update = lloyd_update.centroid_update
            self.terms = lloyd_update.update_terms(k, D, x.device)
        if self.update_method == "sorted":
            self.cluster_sums = lloyd_update.cluster_sums
            self.grouping = lloyd_update.Grouping(x.shape[0], k, x.device)
        else:
            self.ones = torch.ones(x.shape[0], dtype=torch.int64, device=x.device)
        # one int64 buffer, all-reduced in one call: K+1 rows of sums (row K takes points with no winner),
        # then K+1 counts and the number of points whose id changed
        self.acc = torch.zeros((k + 1) * D + k + 2, dtype=torch.int64, device=x.device)
        self.sums = self.acc[:(k + 1) * D].view(k + 1, D)
        self.counts = self.acc[(k + 1) * D:]
        self.ids = torch.empty(x.shape[0], dtype=torch.int32, device=x.device)
        self.c_low = torch.empty(k, D, dtype=x.dtype, device=x.device)
        self.c_sq = torch.empty(k, dtype=torch.float32, device=x.device)
        self.unassigned = torch.zeros((), dtype=torch.int64, device=x.device)

    def measure(self, top: int | None = None, passes=None) -> bool:
        """x's fixed-point scale s, its mean and its spread (sum ||x - mean||^2 over all points), from x's values
        now. A state that has them already (a kept loop, whose graphs read these tensors and hold the scale)
        gets the new values written into the same tensors, and only if the scale is the same: else False, and
        nothing changes. `top`: the exponent of x's largest |value|, where fit's checks read it (`_check`).
        `passes`: what runs `measure_passes` (a kept loop replays it from a graph); by default, itself."""
        x, shards = self.x, self.shards
        s = _scale_exponent(x, shards, top)
        if self.s is not None and s != self.s:
            return False
        if self.s is None:
            self.s, self.unit = s, math.ldexp(1.0, -s)   # unit: the value of one fixed-point step
            self.mean = torch.empty(x.shape[1], dtype=torch.float64, device=x.device)
            self.spread = torch.empty((), dtype=torch.float64, device=x.device)
            self.variance = torch.empty((), dtype=torch.float64, device=x.device)
            self.xq = None
        (passes or self.measure_passes)()
        return True

    def measure_passes(self) -> None:
        """The passes over x behind `measure`, at the scale self.s, into the state's tensors: the mean, the spread,
        the mean per-feature variance (scikit-learn's tol is relative to it) and the CPU update's fixed-point
        copy of x. Launches only, nothing waits: a kept loop captures them."""
        x, shards = self.x, self.shards
        N, D = shards.total, x.shape[1]
        if x.is_cuda:
            from kmeans_kernels import lloyd_state   # CuTe DSL: one read of x per pass, not torch's several
            total_of, spread_of = lloyd_state.column_totals, lloyd_state.spread_about
        else:
            total_of, spread_of = fixed_point_total, spread_about
        self.mean.copy_((shards.all_reduce(total_of(x, self.s)).double() * self.unit) / N)
        self.spread.copy_(shards.all_reduce(spread_of(x, self.mean).reshape(1))[0])
        torch.div(self.spread, N * D, out=self.variance)
        if self.update_method == "index_add":
            xq = fixed_point(x, self.s)
            if self.xq is None:
                self.xq = xq
            else:
                self.xq.copy_(xq)

    def assign(self, c: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """ids of x to c rounded to x's dtype, into `out`. The rounded centroids and their norms live in the
        same two buffers every iteration: the kernel's launch cache, keyed by addresses, then hits."""
        self.c_low.copy_(c)
        if self.x.is_cuda:
            from kmeans_kernels import norms   # one launch, not the reference's four
            norms.centroid_norms(self.c_low, out=self.c_sq)
            return kmeans_kernels.assign(self.x, self.c_low, variant=self.variant, c_sq=self.c_sq, out=out)
        self.c_sq.copy_(reference.centroid_norms(self.c_low))
        out.copy_(reference.assign(self.x, self.c_low, self.c_sq))
        return out

    def accumulate(self, ids: torch.Tensor, previous: torch.Tensor | None) -> None:
        """Global per-cluster fixed-point sums and counts of `ids` (and how many changed) into self.acc."""
        k = self.k
        self.acc.zero_()
        if self.update_method == "sorted":
            # the buffers are the same every iteration, so the kernels' launch caches hit; nothing waits
            sorted_ids, order = self.grouping(ids)
            self.cluster_sums(self.x, sorted_ids, order, self.s, self.sums, self.counts[:k + 1])
        else:
            slot = torch.where(ids < 0, k, ids)
            self.sums.index_add_(0, slot, self.xq)
            self.counts[:k + 1].index_add_(0, slot, self.ones)  # not bincount: on CUDA it waits for the GPU
        if previous is not None:
            self.counts[k + 1] = (ids != previous).sum()
        _mark("all_reduce", self.x.device)
        self.shards.all_reduce(self.acc)
        _mark("reduced", self.x.device)
        self.unassigned += self.counts[k]

    def inertia(self, c: torch.Tensor) -> torch.Tensor:
        """sum over points of ||x - c_id||^2 for the ids just accumulated, from sums and counts, about the mean:
        sum ||x'||^2 - 2 sum_k <S'_k, c'_k> + sum_k n_k ||c'_k||^2 with x' = x - mean."""
        k = self.k
        n = self.counts[:k].double()
        centred = c.double() - self.mean
        sums = self.sums[:k].double() * self.unit - n[:, None] * self.mean
        return self.spread - 2.0 * (sums * centred).sum() + (n * (centred * centred).sum(1)).sum()

    def step(self, c: torch.Tensor, ids: torch.Tensor, previous: torch.Tensor | None,
             out: torch.Tensor | None = None):
        """One Lloyd iteration from centroids c (fp32 [k, D]): assign (into ids), sum, and return (the new
        centroids, in `out` or a new tensor, the inertia of c's assignment); self.counts[k + 1] then holds how
        many ids differ from `previous`."""
        self.assign(c, ids)
        self.accumulate(ids, previous)
        return self.update(c, torch.empty_like(c) if out is None else out)

    def update(self, c: torch.Tensor, out: torch.Tensor):
        """(out, inertia) from the sums just accumulated: the new centroids, each cluster's mean rounded once to
        fp32 (an empty cluster keeps its centroid), written into `out`; and the inertia of c's assignment. On
        CUDA one kernel does both (`lloyd_update.centroid_update`: the same centroids bit for bit, the inertia
        summed in another order) where torch takes about twenty small launches."""
        if self.x.is_cuda:
            self.centroid_update(self.sums, self.counts, c, self.mean, self.unit, out, self.terms)
            return out, self.spread + self.terms.sum()
        n = self.counts[:self.k]
        mean = (self.sums[:self.k].double() * self.unit) / n.clamp(min=1).double()[:, None]
        out.copy_(torch.where((n > 0)[:, None], mean.float(), c))
        return out, self.inertia(c)


_GRAPHS = True   # fit replays its CUDA iteration from a graph (tests and the bench switch it off to compare)
_STATE_GRAPH = True   # a later fit on a kept loop replays the state's passes from a graph (a probe compares)


def _eager_loop(lloyd: _Lloyd, c: torch.Tensor, iters: int, tol, threshold):
    """fit's Lloyd loop, launching every operation from the host: (centroids, ids, inertia per iteration as a
    float64 tensor, iterations, converged). Runs everywhere (CPU, CUDA, under a group)."""
    k = lloyd.k
    ids, previous = lloyd.ids, torch.empty_like(lloyd.ids)
    history = []
    converged = strict = False
    iterations = 0
    for it in range(iters):
        _mark("iteration", lloyd.x.device)
        new, inertia = lloyd.step(c, ids, previous if it > 0 and tol is not None else None)
        history.append(inertia)
        iterations = it + 1
        if tol is not None and it > 0 and int(lloyd.counts[k + 1]) == 0:
            converged = strict = True   # the same ids as before, so `new` equals c: it is final
            break
        shift = None if tol is None else (new.double() - c.double()).square().sum()
        c = new
        ids, previous = previous, ids
        if tol is not None and bool(shift <= threshold):
            converged = True
            break
    if not strict:
        # assign once more, so that ids (and the last inertia) belong to the centroids returned
        _mark("final", lloyd.x.device)
        _, inertia = lloyd.step(c, ids, previous)
        history.append(inertia)
        if tol is None:
            converged = int(lloyd.counts[k + 1]) == 0
    return c, ids, torch.stack(history), iterations, converged


class _CudaGraphs:
    """How `_GraphLoop` warms up and captures on CUDA, by torch's rules: on a side stream of x's device (the
    warm-up too, so that whatever a library binds to a stream on first use is bound to the capture's stream),
    the two graphs of a loop sharing one memory pool: they never run at once, and nothing they allocate
    outlives a replay (every result goes to the loop's fixed buffers)."""

    def __init__(self, device: torch.device):
        self.stream = torch.cuda.Stream(device)
        self.pool = torch.cuda.graph_pool_handle()

    def warm_up(self, body) -> None:
        current = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            body()
        current.wait_stream(self.stream)

    def capture(self, body):
        """The executable graph of what body() enqueues (it runs nothing); `.replay()` runs it on the current
        stream."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            graph.capture_begin(pool=self.pool)
            try:
                body()
            except BaseException:
                with contextlib.suppress(Exception):   # end the broken capture; body's error is the news
                    graph.capture_end()
                raise
            graph.capture_end()
        return graph


class _Replayer:
    """A 'graph' that runs its body when replayed: `_GraphLoop` with no CUDA graphs (CPU tests of its
    bookkeeping, the bench's CPU path)."""

    def __init__(self, body):
        self.replay = body


class _Eager:
    """The `_GraphLoop` backend without graphs: warm-up and replay both just run the body."""

    def warm_up(self, body) -> None:
        body()

    def capture(self, body) -> _Replayer:
        return _Replayer(body)


class _GraphLoop:
    """fit's loop body on fixed buffers, so that one capture of it replays every iteration (CUDA, group=None).

    The eager loop passes new tensors from iteration to iteration; here everything lives in buffers whose
    addresses a graph can hold: centroids `c[0]`, `c[1]` and ids `ids[0]`, `ids[1]` alternate (`run(p)`
    assigns from c[p] into ids[p], compares with ids[1 - p] and writes the new centroids into c[1 - p]), so
    there are two graphs, one per parity. Each run writes its inertia into `history[count]` and increments
    `count`, a device counter (no host value is computed from device data inside the body); with a
    `threshold` (tol) it also writes `status` = (ids changed, shift <= threshold), which the host reads. With no
    tol the iterations skip the comparison of ids, and the closing assignment, which needs it, has a graph of its
    own.
    The first run is the warm-up, run eagerly (it compiles and loads the kernels); each graph's first replay
    captures it. If a capture raises, the loop warns once and runs its body eagerly from then on:
    the same operations on the same buffers, so the same bits."""

    def __init__(self, lloyd: _Lloyd, iters: int, threshold: torch.Tensor | None, graphs=None):
        x = lloyd.x
        self.lloyd = lloyd
        self.threshold = threshold
        self.c = [torch.empty(lloyd.k, x.shape[1], dtype=torch.float32, device=x.device) for _ in range(2)]
        self.ids = [lloyd.ids, torch.empty_like(lloyd.ids)]
        self.history = torch.zeros(iters + 1, dtype=torch.float64, device=x.device)
        self.count = torch.zeros(1, dtype=torch.int64, device=x.device)
        self.status = torch.zeros(2, dtype=torch.int64, device=x.device)
        self.backend = graphs if graphs is not None else (_CudaGraphs(x.device) if x.is_cuda else _Eager())
        self.graphs: dict = {}   # (parity, whether it compares ids) -> graph; "state" -> measure's passes
        self.warm = False    # the first run (eager) has loaded everything a capture needs
        self.eager = False   # a capture failed: run the body from the host
        self.runs = 0        # the host's copy of `count`

    def start(self, c0: torch.Tensor) -> None:
        """Start a loop from centroids c0 (in c[0]); the graphs, once captured, stay."""
        self.c[0].copy_(c0)
        self.count.zero_()
        self.runs = 0

    def body(self, p: int, compare: bool) -> None:
        lloyd = self.lloyd
        c = self.c[p]
        new, inertia = lloyd.step(c, self.ids[p], self.ids[1 - p] if compare else None, out=self.c[1 - p])
        self.history.index_copy_(0, self.count, inertia.reshape(1))
        self.count += 1
        if compare:
            self.status[0] = lloyd.counts[lloyd.k + 1]
        if self.threshold is not None:
            shift = (new.double() - c.double()).square().sum()   # as the eager loop computes it
            self.status[1] = shift <= self.threshold

    def run(self, p: int, closing: bool = False) -> None:
        """One Lloyd iteration from c[p] (p = 0 or 1); `closing`: the closing assignment, which compares the ids
        with the previous ones even with no tol (its own graph then, captured once: a kept loop replays it)."""
        if self.runs >= self.history.shape[0]:
            raise RuntimeError(f"_GraphLoop holds the inertia of {self.history.shape[0]} runs; call start() first")
        key = (p, closing or self.threshold is not None)
        if not self.warm:
            self.backend.warm_up(lambda: self.body(*key))
            self.warm = True
        else:
            self._replay(key, lambda: self.body(*key))
        self.runs += 1

    def measure(self, top: int | None) -> bool:
        """`_Lloyd.measure` for a later fit on this loop's x, its passes over x replayed from a graph of their own
        (captured the first time; they ran from the host when the loop was made)."""
        passes = self.lloyd.measure_passes
        return self.lloyd.measure(top, lambda: self._replay("state", passes) if _STATE_GRAPH else passes())

    def _replay(self, key, body) -> None:
        """Replay the graph of `body` (captured the first time), or run body from the host where captures failed."""
        if not self.eager and key not in self.graphs:
            self._capture(key, body)
        if self.eager:
            body()
        else:
            self.graphs[key].replay()

    def _capture(self, key, body) -> None:
        """Capture the graph of body(); if that raises, warn and go eager (the capture ran nothing)."""
        try:
            with _no_marks():
                self.graphs[key] = self.backend.capture(body)
        except Exception as e:  # noqa: BLE001 - any failure to capture: the eager body is the same
            first = (str(e).strip().splitlines() or [""])[0]
            warnings.warn(f"fit: capturing the Lloyd iteration into a CUDA graph failed ({type(e).__name__}: "
                          f"{first}); running it eagerly", RuntimeWarning)
            self.eager = True
            self.graphs = {}


class _KeptLoops:
    """fit's graph loops (their buffers and captured graphs) kept between fits on the same x, at most `limit`.

    A loop is found again only for the same live tensor x (a weak reference: it does not keep x alive, and a new
    tensor at x's old address is not x) and the same k, variant, iters and kind of tol; its state is measured
    anew from x's values (`_Lloyd.measure`), and a loop whose scale changed is dropped, since its graphs hold the
    scale. A loop is taken out while a fit runs on it, so two fits never share one. Saves a fit on the same x
    the eager warm-up iteration and the two captures."""

    def __init__(self, limit: int):
        self.limit = limit
        self.loops: dict = {}    # (id(x), key) -> (weak reference to x, _GraphLoop)

    def take(self, x: torch.Tensor, key: tuple, top: int | None = None) -> _GraphLoop | None:
        entry = self.loops.pop((id(x), key), None)
        if entry is None or entry[0]() is not x:
            return None
        loop = entry[1]
        loop.lloyd.x = x
        if not loop.measure(top):
            return None
        loop.lloyd.unassigned.zero_()
        return loop

    def keep(self, x: torch.Tensor, key: tuple, loop: _GraphLoop) -> None:
        slot = (id(x), key)
        loop.lloyd.x = None      # no strong reference to x while kept
        self.loops.pop(slot, None)
        self.loops[slot] = (weakref.ref(x, lambda ref: self._drop(slot, ref)), loop)
        while len(self.loops) > self.limit:
            del self.loops[next(iter(self.loops))]   # the oldest

    def _drop(self, slot, ref) -> None:
        if self.loops.get(slot, (None,))[0] is ref:
            del self.loops[slot]


_KEPT = _KeptLoops(4)


def _graph_loop(lloyd: _Lloyd, c: torch.Tensor, iters: int, tol, threshold, graphs=None, loop=None):
    """`_eager_loop` with the iteration replayed from CUDA graphs (`_GraphLoop`): the same results bit for bit.
    With tol=None nothing waits for the GPU until the end; with a tol, one read of `status` per iteration.
    `loop`: a loop kept from an earlier fit on the same x (`_KeptLoops`), with its graphs; else a new one."""
    loop = loop or _GraphLoop(lloyd, iters, threshold, graphs)
    loop.start(c)
    converged = strict = False
    iterations = 0
    p = 0
    for it in range(iters):
        _mark("iteration", lloyd.x.device)
        loop.run(p)
        iterations = it + 1
        if tol is not None:
            changed, within = loop.status.tolist()
            if it > 0 and changed == 0:
                converged = strict = True   # c[p] is final, and ids[p] its assignment
                break
        p = 1 - p
        if tol is not None and within:
            converged = True
            break
    if not strict:
        _mark("final", lloyd.x.device)
        loop.run(p, closing=True)   # assign once more: ids and the last inertia of the centroids returned
        if tol is None:
            converged = int(loop.status[0]) == 0
    return loop.c[p], loop.ids[p], loop.history[:loop.runs], iterations, converged


def fit(x: torch.Tensor, k: int, *, iters: int = 100, tol: float | None = 1e-4,
        init: str | torch.Tensor = "k-means++", seed: int = 0, variant: str = "auto",
        group=None) -> FitResult:
    """Cluster the rows of x (bf16 or fp16 [N, D], CPU or CUDA) into k clusters by Lloyd's algorithm.

    iters: the most Lloyd iterations. tol: stop when the summed squared centroid shift is at most
    tol x the mean per-feature variance of x (scikit-learn's rule), or when the assignment stops changing;
    0 stops only on the latter; None runs all `iters` with no test (and no wait for the GPU per iteration).
    init: "k-means++", "random" or a [k, D] tensor. seed: for the initialisation. variant: the CUDA kernel
    (`kmeans_kernels.assign`'s); "auto" picks one for the whole data. group: a torch.distributed process
    group across which the rows are sharded. See the module docstring for the rules.
    """
    comm = _comm_device(group)
    shards = _Shards(group, 0)
    top = _check(x, k, iters, tol, init, variant, shards, comm)
    graphed = x.is_cuda and group is None and _GRAPHS
    return _run(x, k, iters, tol, init, seed, variant, shards, _KEPT if graphed else None, top=top)


def _run(x, k, iters, tol, init, seed, variant, shards: _Shards, kept: _KeptLoops | None, graphs=None,
         top: int | None = None) -> FitResult:
    """fit after its checks: the eager loop where `kept` is None, else the graph loop, on a loop that `kept`
    holds for this x when it holds one (and then keeps for the next fit: its graphs are captured already).
    `top`: what `_check` returned (x's magnitude, for the fixed-point scale), else read again from x."""
    key = (k, variant, iters, tol is None)
    loop = kept.take(x, key, top) if kept is not None else None
    lloyd = loop.lloyd if loop is not None else _Lloyd(x, k, variant, shards, top=top)
    c = _initial_centroids(x, k, init, seed, shards)
    threshold = None if tol is None else tol * lloyd.variance
    if kept is None:
        c, ids, history, iterations, converged = _eager_loop(lloyd, c, iters, tol, threshold)
    else:
        if loop is None:
            loop = _GraphLoop(lloyd, iters, threshold, graphs)
        elif threshold is not None:
            loop.threshold.copy_(threshold)   # the graphs read it there
        c, ids, history, iterations, converged = _graph_loop(lloyd, c, iters, tol, threshold, loop=loop)
    _mark("end", x.device)
    if int(lloyd.unassigned) > 0:
        raise ValueError(f"{int(lloyd.unassigned)} point assignments found no centroid with a finite fp32 score "
                         f"(|x| or |c| too large for fp32 scores)")
    if kept is not None and kept.limit and not loop.eager:   # a loop whose capture failed: the next fit tries anew
        c, ids = c.clone(), ids.clone()   # the loop's buffers: the next fit on x writes them
        kept.keep(x, key, loop)
    return FitResult(centroids=c, ids=ids, inertia=tuple(history.tolist()),
                     iterations=iterations, converged=converged)
