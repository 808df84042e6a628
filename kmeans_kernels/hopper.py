"""k-means assignment on Hopper (sm_90a): TMA + WGMMA + a fused argmin, warp-specialised.

One CTA owns ``BLOCK_M = 128`` points and streams every centroid past them:

* a **producer warp** loads the CTA's point tile ``x[128, D]`` once with TMA (it stays resident in shared
  memory), then streams centroid tiles ``c[128, 64]`` (128 centroids x one 64-wide slice of D, one
  128-byte swizzle atom) through a ring of ``stages`` shared-memory buffers guarded by mbarriers;
* two **consumer warpgroups** each own 64 of the points. For every centroid tile they run WGMMA
  ``64 x 128 x D`` into one fp32 register accumulator, give the ring slots back as soon as the WGMMAs
  retire (so the producer refills them during the argmin), and fold the 64 x 128 dot products into a
  running (score, index) winner per row with one of the strategies of :mod:`kmeans_kernels.reduce`.
  Nothing of size N x K is ever written: the kernel stores 4 bytes per point.

A CTA takes one point tile, or, where the grid is capped (`grid_cap`: one wave where one CTA holds an SM), every
grid-th one in turn: the consumers release the point buffer after their last WGMMAs on a tile, and the producer
loads the next tile into it (prefetched into L2 a tile earlier) while they fold.

**Two CTAs per SM.** The argmin of a tile and the WGMMAs of the next overlap *across* CTAs: the kernel is
small enough (288 threads, at most 96 registers, about 112 KiB of shared memory up to D = 256) that two
CTAs share each SM, and while one folds, the other's WGMMAs keep the tensor cores busy. Two accumulators per
consumer would overlap inside one CTA instead, but at 232 registers per thread only one CTA fits an SM, and on
the H200 that measured no faster than one accumulator (data/measured/h200/probes/kmeans_structures.csv).

Scores are ``0.5 * c_sq[k] - dot`` in fp32, the reference's expression (the 0.5 multiply is exact), so
on inputs whose dot products are exact the answer equals ``kmeans_kernels.reference.assign`` bit for bit.

Tails need no special code: TMA fills rows past N, centroids past K and columns past D with zeros, the
zero columns add exact zeros to the dot products, rows past N are never stored, and a centroid past K gets
the half norm +inf, so its score (+inf or NaN) can never win.

Variants (the tutorial's steps):

``serial``          one compare-select chain per row; each thread reads the half norm of each of its
                    columns from global memory (L1-cached).
``ilp2``            two chains per row (even / odd columns), merged by (score, index) at the end.
``norm_broadcast``  ``ilp2``, plus the norms of a tile are loaded once per warp, coalesced, into registers
                    and handed to the threads that need them with ``shuffle_sync``.
``wide``            ``norm_broadcast`` on 256-wide centroid tiles: a 64 x 256 accumulator (128 registers)
                    allows only one CTA per SM, but every WGMMA reads the point tile once per 256 centroids
                    instead of 128, and a tile costs half the barrier round trips. With no second CTA to
                    overlap with, the two consumer warpgroups **ping-pong**: they take turns issuing their
                    WGMMAs (two named barriers), so one folds tile t while the other's WGMMAs for tile t
                    run, and they give ring slots back one by one. ``auto`` picks it where that wins on
                    the H200 (``auto_variant``).
``lean_select``     ``norm_broadcast`` with the ``pairs`` scan (:func:`kmeans_kernels.reduce.scan_pairs`): each
                    chain takes two scores per step through one FMNMX, and column indices are immediates
                    relative to the tile, about 0.56 fewer instructions per score in the SASS (5.7 -> 5.1 at
                    D = 64). What ``auto`` runs at D > 128 where it does not run ``wide``.
``lean_ping_pong``  ``lean_select`` with the two consumer warpgroups taking turns at the tensor cores, as in
                    ``wide``, on 128-wide tiles with two CTAs per SM (not at D 208-256 or past 448:
                    ``ping_pong_fits``): one warpgroup folds tile t while the other's WGMMAs for tile t run,
                    instead of both waiting for one MMA and then folding at once.
``folded_norms``    ``lean_ping_pong`` with the half norms in the accumulator: the producer warp writes
                    ``-0.5 * c_sq`` of a tile (``-inf`` past K) beside the tile's first ring slot before that slot's
                    "full" arrive, each consumer thread copies its columns' values into both of its rows'
                    accumulators, and the WGMMAs accumulate onto them, so the accumulator holds ``dot - 0.5 *
                    c_sq``, the score negated: the fold has no subtraction, no norm shuffles, and scans ``-acc``.
                    Exact inputs stay exact (the sum of ``-h`` and exact products is exact); only where finite
                    products overflow fp32 in their sum can the sum that starts at ``-h`` stay finite where the
                    reference's dot is +inf. Each slot holds 512 more bytes: one slot fewer at D = 64 and 128.
                    What ``auto`` runs at D <= 128 with K < 4096.
``lazy_index``      ``folded_norms`` with :func:`kmeans_kernels.reduce.scan_lazy`: one FMNMX per score for a tile's
                    maxima, and the index searched only where the tile beats a row's winner. What ``auto`` runs at
                    D <= 128 with K >= 4096, where most tiles skip the search.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.tensor_utils
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
import torch

from kmeans_kernels import reduce, variants
from kmeans_kernels.variants import D_MAX, D_MULTIPLE, check_d  # noqa: F401  (D_MAX, D_MULTIPLE: the D rule)
from workbook import gpus, launch, sass

BLOCK_M = 128          # points per CTA: two consumer warpgroups x 64 rows (the WGMMA M of one warpgroup)
BLOCK_N = 128          # centroids per tile: the WGMMA N ...
WIDE_BLOCK_N = 256     # ... and in the "wide" variant
BLOCK_D = 64           # D per ring slot: one 128-byte swizzle atom of 16-bit elements
MAX_STAGES = 8
MAX_CTAS = 2**31 - 1   # a grid cap that never binds: a CTA per point tile
ARCH = "sm_90a"
SM_SMEM_BYTES = gpus.H200.smem_per_sm_bytes                    # shared memory of one sm_90 SM (228 KiB) ...
CTA_SMEM_RESERVED = gpus.H200.smem_reserved_per_block_bytes    # ... of which CUDA keeps 1 KiB per resident CTA
BLOCK_SMEM_MAX = gpus.H200.smem_per_block_bytes                # the most one CTA may opt in to (227 KiB)
LAZY_D_MAX, LAZY_K_MIN = 128, 4096  # auto runs lazy_index here: most tiles skip the index search
MIN_STAGES_TWO_CTAS = 3  # run two CTAs per SM only while each still gets a ring this deep
CONSUMER_WARPS = 8     # warps 0-7: two consumer warpgroups (WGMMA wants whole, aligned warpgroups)
PRODUCER_WARP = 8      # warp 8 issues every TMA
THREADS = 32 * (CONSUMER_WARPS + 1)
INLINE_PRODUCER_WARP = 4   # `inline_producer`: the first warp of warpgroup 1, which gives each tile back last
TURN_BARRIER = 1       # named barriers 1, 2: "warpgroup 0's / 1's turn to issue WGMMA" (0 is __syncthreads)

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass(frozen=True)
class VariantSpec:
    """What a variant changes in the one kernel: the scan (kmeans_kernels.reduce), where the half norms come
    from (`variants.NORMS`), the tile width, and whether the two consumer warpgroups take turns at the tensor
    cores."""
    scan: str
    norms: str = "load"
    block_n: int = BLOCK_N
    ping_pong: bool = False

    @property
    def staged_norms(self) -> bool:
        """The norms sit in shared memory beside each ring slot (and take their room from the ring)."""
        return self.norms == "accumulator"


# In tutorial order, from the one vocabulary (`kmeans_kernels.variants.RECIPES`): norms loaded by each thread,
# broadcast by shuffles, or staged beside the ring slots and started in the accumulator.
VARIANT_SPECS = {name: VariantSpec(r.scan, norms=r.norms, block_n=r.tile_n, ping_pong=r.ping_pong)
                 for name, r in variants.RECIPES[ARCH].items()}
VARIANTS = tuple(VARIANT_SPECS)


def auto_variant(N: int, D: int, K: int) -> str:
    """The variant `variant="auto"` runs, from the H200 measurements (notes/perf-log.md): "wide" (256-wide tiles,
    one CTA per SM, ping-pong warpgroups) where D >= 256 and each CTA walks a long row of centroid tiles
    (K >= 4096: 16 or more), where re-reading the point tile once per 256 centroids instead of 128 pays more
    than the second CTA's overlap; else 128-wide tiles, two CTAs per SM, with the pairs scan: lean_ping_pong
    (its warpgroups taking turns at the tensor cores) with the half norms in the accumulator (folded_norms) at
    D <= 128, its lazy scan (lazy_index) there with K >= 4096, lean_select above.

    At K = 512 (two tiles) the ping-pong has nothing to overlap: wide was 3-12 % slower there in both full runs
    that timed it, and 4-10 % faster at 65536 x 256 x 4096 (data/measured/h200/kmeans_floor.csv). lean_select
    against norm_broadcast: 6-8 % faster at every D = 128 shape with K >= 4096, level at D = 64 and at K = 512.
    lean_ping_pong against lean_select (kmeans_lean_ping_pong.csv): 5-7 % faster at D = 64 with K >= 4096, 1-3.5 %
    at D = 128, level at 1M x 128 x 4096 and at 65536 x 64 x 512; D from 144 to 192 was not timed. folded_norms
    against lean_ping_pong (kmeans_folded_norms.csv): 6-7 % faster at D = 64 with K >= 4096, 11-15 % at D = 128 (8 %
    at 65536 x 128 x 512), level at 65536 x 64 x 512; against wide at D = 256 level or 2 % slower (not used there).
    lazy_index against folded_norms (data/measured/nvidia_h100_80gb_hbm3/kmeans_lazy_rows.csv, an H100, the
    build then named lazy_rows): 14 % faster at 65536 x 64 x 16384 and 4 % at 65536 x 64 x 4096, where the fold
    sets the pace and most tiles skip the index search; 2 % slower at 65536 x 64 x 2048. The build whose CTAs walk
    point tiles (kmeans_lazy_index.csv, an H100, 263b938): 7.5 % faster at K = 16384 with D = 96 and 128, 1-2 % at
    D = 128 with K = 4096 (where the build before was 4-5 % slower), 4.5-9.5 % slower at 65536 x 128 x 512."""
    if D >= 256 and K >= 4096 and ping_pong_fits(D):
        return "wide"
    if D <= LAZY_D_MAX and K >= LAZY_K_MIN:
        return "lazy_index"
    return "folded_norms" if D <= 128 else "lean_select"


def ping_pong_fits(D: int, block_n: int = WIDE_BLOCK_N, staged_norms: bool = False) -> bool:
    """Whether the ring holds a whole tile's D blocks at this tile width. The ping-pong warpgroups must: a
    ring slot goes back to the producer only when both warpgroups are done with it, and the warpgroup waiting
    for its turn holds none of them, so with fewer slots than D blocks the issuing warpgroup waits forever
    for a slot only its partner could release (for 16-bit inputs: D > 256 at the wide width; at 128, D from 208
    to 256, where two CTAs share an SM's shared memory, and past 448; with staged norms, D from 192 to 256 and
    past 384)."""
    return stages_for(D, block_n, staged_norms) >= _d_padded(D) // BLOCK_D


def ctas_per_sm(D: int, block_n: int = BLOCK_N, staged_norms: bool = False) -> int:
    """2 while half an SM holds the kernel: the point tile and a MIN_STAGES_TWO_CTAS-deep ring in shared
    memory (D <= 256 for 16-bit inputs), and registers for 2 x 288 threads (at most 96 each, `gpus.register_cap`),
    which a 64 x 128 accumulator (64 registers) leaves room for and a 64 x 256 one (128) does not. Else 1."""
    fits_registers = block_n <= BLOCK_N
    return 2 if fits_registers and _ring_slots(D, 2, block_n, staged_norms) >= MIN_STAGES_TWO_CTAS else 1


def stages_for(D: int, block_n: int = BLOCK_N, staged_norms: bool = False) -> int:
    """Ring depth: what this CTA's share of shared memory holds after the resident point tile, at most
    MAX_STAGES; `staged_norms`: each slot also holds its tile's block_n fp32 norms."""
    return min(MAX_STAGES, _ring_slots(D, ctas_per_sm(D, block_n, staged_norms), block_n, staged_norms))


def _ring_slots(D: int, ctas: int, block_n: int, staged_norms: bool = False) -> int:
    budget = min(BLOCK_SMEM_MAX, SM_SMEM_BYTES // ctas - CTA_SMEM_RESERVED)
    x_bytes = BLOCK_M * _d_padded(D) * 2
    slot_bytes = block_n * BLOCK_D * 2 + (block_n * 4 if staged_norms else 0)
    barrier_bytes = 1024           # mbarriers, padded by the 1024-byte alignment of the tiles
    return (budget - x_bytes - barrier_bytes) // slot_bytes


def _d_padded(D: int) -> int:
    return -(-D // BLOCK_D) * BLOCK_D


# A thread's WGMMA accumulator (64 x block_n per warpgroup) holds rows {r0, r0 + 8} and, in every 8-column
# group g, the columns 8g + 2q + {0, 1} (q = lane % 4), at register 2*row + col%2 + 4*g. This layout views
# it as (row, j) with the thread's columns increasing in j, the order the scans rely on.
def _row_col_layout(block_n: int = BLOCK_N):
    return cute.make_layout((2, (2, block_n // 8)), stride=(2, (1, 4)))


def _col_offsets(block_n: int = BLOCK_N) -> tuple[int, ...]:
    """Column of (row, j) minus column of (row, 0) in the _row_col_layout view: 8 * (j // 2) + j % 2 (the
    8-column group and the pair inside it; the lane's 2q cancels), the same for every thread and row."""
    return tuple(8 * (j // 2) + j % 2 for j in range(block_n // 4))


def _flat_index(row: int, col: int) -> int:
    """Register index of (row, j) in the _row_col_layout view."""
    return (col % 2) + 2 * row + 4 * (col // 2)


def check_shape(D: int, dtype: torch.dtype = torch.bfloat16) -> None:
    if dtype not in _DTYPES:
        raise ValueError(f"the Hopper kernels take bf16 or fp16; got {dtype}")
    check_d(D)


def takes(variant: str, D: int) -> bool:
    """Whether `variant` (a name of VARIANTS) runs at D: a ping-pong variant only where its ring holds a whole
    tile's D blocks (`ping_pong_fits`)."""
    spec = VARIANT_SPECS[variant]
    return not spec.ping_pong or ping_pong_fits(D, spec.block_n, spec.staged_norms)


def check_variant(variant: str, D: int | None = None) -> None:
    """The variant exists on sm_90a (`kmeans_kernels.variants`) and, given D, can run it (`takes`)."""
    variants.recipe(ARCH, variant)
    if D is not None and not takes(variant, D):
        spec = VARIANT_SPECS[variant]
        raise ValueError(f"variant {variant!r} cannot take D={D}: its ring must hold a whole {spec.block_n}-wide "
                         f"tile's {_d_padded(D) // BLOCK_D} D blocks and has "
                         f"{stages_for(D, spec.block_n, spec.staged_norms)} slots there; use 'lean_select'")


# --------------------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------------------

class HopperAssign:
    """One compiled kernel per (variant, D, dtype, pdl); N and K are runtime values. `pdl`: launched as a
    programmatic dependent of the kernel before it in the stream (set up while it drains, wait for it before the
    first global access); off in `assign`: level within 4 % on an H100 (notes/perf-log.md).

    `inline_producer` (off in every variant; `probes/kmeans_points_in_registers_probe.py` sets it): no producer
    warp, 256 threads, so that two CTAs per SM get 128 registers a thread instead of 96 (`gpus.register_cap`); warp
    INLINE_PRODUCER_WARP loads each point tile and refills the ring between its own tiles, after its warpgroup gave
    a tile back (ping-pong variants only: warpgroup 1 gives each tile back last). A CTA with several point tiles
    starts each one's ring empty."""

    def __init__(self, variant: str, D: int, dtype, pdl: bool = False):
        self.variant = variant
        self.pdl = pdl
        spec = VARIANT_SPECS[variant]
        self.scan = spec.scan
        self.chains = reduce.chains_of(self.scan)
        self.broadcast_norms = spec.norms == "shuffle"
        self.norms_in_acc = spec.staged_norms
        self.block_n = spec.block_n
        self.ping_pong = spec.ping_pong
        self.D = D
        self.d_blocks = _d_padded(D) // BLOCK_D
        self.stages = stages_for(D, self.block_n, spec.staged_norms)
        self.ctas_per_sm = ctas_per_sm(D, self.block_n, spec.staged_norms)
        self.dtype = dtype
        self._inline_producer = False

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, c_ptr: cute.Pointer, c_sq_ptr: cute.Pointer, out_ptr: cute.Pointer,
                 N: cutlass.Int32, K: cutlass.Int32, ctas: cutlass.Int32, stream: cuda.CUstream):
        # Raw pointers and sizes rather than framework tensors: a launch then costs a few microseconds of
        # Python, not the ~40-80 us of four DLPack conversions, which small problems would pay in full.
        x = cute.make_tensor(x_ptr, cute.make_layout((N, self.D), stride=(self.D, 1)))
        c = cute.make_tensor(c_ptr, cute.make_layout((K, self.D), stride=(self.D, 1)))
        c_sq = cute.make_tensor(c_sq_ptr, cute.make_layout(K))
        out = cute.make_tensor(out_ptr, cute.make_layout(N))
        dtype = self.dtype
        d_pad = self.d_blocks * BLOCK_D
        tiled_mma = self._tiled_mma(dtype)
        row_major = cutlass.tensor_utils.LayoutEnum.ROW_MAJOR
        x_smem = sm90_utils.make_smem_layout_a(row_major, (BLOCK_M, self.block_n, d_pad), dtype, 1)
        c_smem = sm90_utils.make_smem_layout_b(row_major, (BLOCK_M, self.block_n, BLOCK_D), dtype, self.stages)
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_x, tma_x_tensor = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, x, cute.slice_(x_smem, (None, None, 0)), (BLOCK_M, d_pad))
        tma_c, tma_c_tensor = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, c, cute.slice_(c_smem, (None, None, 0)), (self.block_n, BLOCK_D))

        @cute.struct
        class SharedStorage:
            x_full: cute.struct.MemRange[cutlass.Int64, 2]
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            # -0.5 * c_sq of each slot's tile (norms in the accumulator; else one word, inside the barriers'
            # padding to the tiles' 1024-byte alignment)
            sn: cute.struct.Align[cute.struct.MemRange[cutlass.Float32, self.norm_words], 16]
            sx: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(x_smem)], 1024]
            sc: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(c_smem)], 1024]

        self.shared_storage = SharedStorage
        # at most `ctas` CTAs, each taking every ctas-th point tile (`grid_cap`)
        grid = (cutlass.min(cute.ceil_div(x.shape[0], BLOCK_M), ctas), 1, 1)
        self.kernel(tma_x, tma_x_tensor, tma_c, tma_c_tensor, c_sq, out, tiled_mma, x_smem, c_smem).launch(
            grid=grid, block=[self.threads, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream,
            # the register cap that lets ctas_per_sm CTAs share an SM; the carveout asks for all the shared
            # memory up front (and lets the kernel compile on a machine without a GPU)
            min_blocks_per_mp=self.ctas_per_sm, preferred_smem_carveout=100, use_pdl=self.pdl)

    @property
    def inline_producer(self) -> bool:
        return self._inline_producer

    @inline_producer.setter
    def inline_producer(self, on: bool):
        if on and not self.ping_pong:
            raise ValueError(f"{self.variant}: an inline producer refills the ring as warpgroup 1 gives tiles back, "
                             f"which only the ping-pong variants order")
        self._inline_producer = on

    @property
    def norm_words(self) -> int:
        """-0.5 * c_sq of each ring slot's tile, at this ring depth and tile width; one unused word for the variants
        that do not stage norms."""
        return self.stages * self.block_n if self.norms_in_acc else 1

    @property
    def threads(self) -> int:
        return THREADS - 32 if self.inline_producer else THREADS

    def _tiled_mma(self, dtype, points=cute.nvgpu.warpgroup.OperandSource.SMEM):
        """Two warpgroups stacked along M, each issuing 64 x block_n x 16 WGMMAs that read the points from
        `points` (shared memory here) and the centroids from shared memory."""
        major = cute.nvgpu.OperandMajorMode.K      # x and c are D-contiguous: "K-major"
        return sm90_utils.make_trivial_tiled_mma(dtype, dtype, major, major, cutlass.Float32, (2, 1, 1),
                                                 tiler_mn=(64, self.block_n), a_source=points)

    @cute.kernel
    def kernel(self, tma_x: cute.CopyAtom, mx: cute.Tensor, tma_c: cute.CopyAtom, mc: cute.Tensor,
               c_sq: cute.Tensor, out: cute.Tensor, tiled_mma: cute.TiledMma,
               x_smem: cute.ComposedLayout, c_smem: cute.ComposedLayout):
        N = mx.shape[0]
        K = mc.shape[0]
        num_tiles = cute.ceil_div(K, self.block_n)
        tidx, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        grid_size, _, _ = cute.arch.grid_dim()
        # this CTA's point tiles: block, block + grid_size, ... below ceil(N / BLOCK_M)
        my_point_tiles = (cute.ceil_div(N, BLOCK_M) - 1 - block) // grid_size + 1
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        producer_warp = INLINE_PRODUCER_WARP if self.inline_producer else PRODUCER_WARP

        if warp == producer_warp:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_x)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_c)

        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_WARPS)   # one arrive per warp
        x_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.x_full.data_ptr(), num_stages=1, producer_group=producer,
            consumer_group=consumers, tx_count=cute.size_in_bytes(self.dtype, cute.slice_(x_smem, (None, None, 0))),
            defer_sync=True)
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring_barriers.data_ptr(), num_stages=self.stages, producer_group=producer,
            consumer_group=consumers, tx_count=cute.size_in_bytes(self.dtype, cute.slice_(c_smem, (None, None, 0))),
            defer_sync=True)
        pipeline.pipeline_init_arrive(cluster_shape_mn=(1, 1), is_relaxed=True)

        sx = storage.sx.get_tensor(x_smem.outer, swizzle=x_smem.inner)
        sc = storage.sc.get_tensor(c_smem.outer, swizzle=c_smem.inner)
        sn = storage.sn.get_tensor(cute.make_layout(self.norm_words))
        # (BLOCK_M, d_pad, point tiles) and (block_n, BLOCK_D, centroid tiles, d blocks)
        gx = cute.local_tile(mx, (BLOCK_M, self.d_blocks * BLOCK_D), (None, 0))
        gc = cute.local_tile(mc, (self.block_n, BLOCK_D), (None, None))
        tma_sx, tma_gx = cute.nvgpu.cpasync.tma_partition(
            tma_x, 0, cute.make_layout(1), cute.group_modes(sx, 0, 2), cute.group_modes(gx, 0, 2))
        tma_sc, tma_gc = cute.nvgpu.cpasync.tma_partition(
            tma_c, 0, cute.make_layout(1), cute.group_modes(sc, 0, 2), cute.group_modes(gc, 0, 2))
        pipeline.pipeline_init_wait(cluster_shape_mn=(1, 1))
        if cutlass.const_expr(self.pdl):
            # the kernel before may have written x, c, c_sq or out: wait for it, then let the next one set up
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()

        put = _Handles(ring=ring, x_pipe=x_pipe, tma_x=tma_x, tma_gx=tma_gx, tma_sx=tma_sx, tma_c=tma_c,
                       tma_gc=tma_gc, tma_sc=tma_sc, c_sq=c_sq, sn=sn, K=K, lane=tidx % 32)
        # a Python False with an inline producer: no producer branch is traced at all
        producer_here = False if cutlass.const_expr(self.inline_producer) else warp == PRODUCER_WARP
        if producer_here:
            # ---------------- producer: one warp issues every TMA ----------------
            x_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
            slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
            for i in cutlass.range(my_point_tiles, unroll=1):
                point_tile = block + i * grid_size
                x_state = self._load_points(put, x_state, point_tile)
                if i + 1 < my_point_tiles:
                    # the next one into L2 now, so that its load waits for L2, not DRAM
                    cute.prefetch(tma_x, tma_gx[(None, point_tile + grid_size)])
                for tile in cutlass.range(num_tiles, unroll=1):
                    slot = self._fill_tile(put, slot, tile)
            ring.producer_tail(slot)
        else:
            # ---------------- consumers (warps 0-7): WGMMA, then the argmin of the tile ----------------
            lane = tidx % 32
            thr_mma = tiled_mma.get_slice(tidx)
            frag_x = tiled_mma.make_fragment_A(thr_mma.partition_A(sx))   # (MMA, 1, d_pad/16, 1)
            frag_c = tiled_mma.make_fragment_B(thr_mma.partition_B(sc))   # (MMA, 1, 4, stages)
            coords = thr_mma.partition_C(cute.make_identity_tensor((BLOCK_M, self.block_n)))
            best_score, best_index = reduce.new_winners(self.chains, 2)
            x_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            ctx = _Handles(frag_x=frag_x, frag_c=frag_c, ring=ring, coords=coords, c_sq=c_sq, K=K,
                           lane=lane, best_score=best_score, best_index=best_index, sn=sn, sx=sx,
                           thr_mma=thr_mma, x_pipe=x_pipe)
            acc = cute.make_rmem_tensor(coords.shape, cutlass.Float32)
            # The ring positions and the MMA atom (its ACCUMULATE flag is state) are rebound at every step,
            # so that the DSL carries them through the loop.
            mma = tiled_mma
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            consumer_wg = tidx // 128
            # the warpgroups' turns run on across point tiles (no count of them: tiles x centroid tiles can pass 2^31)
            last_point_tile = my_point_tiles - 1
            if cutlass.const_expr(self.inline_producer):
                x_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
                slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                ahead = self.stages // self.d_blocks     # whole tiles the ring holds
                # the next refill's c_sq, loaded a tile before it is stored: its latency off warp 4's turn
                upcoming = cute.make_rmem_tensor(cute.make_layout(self.block_n // 32), cutlass.Float32)
            for i in cutlass.range(my_point_tiles, unroll=1):
                point_tile = block + i * grid_size
                reduce.reset_winners(best_score, best_index)   # every tile, the first too: cheaper than a test
                if cutlass.const_expr(self.inline_producer):
                    if warp == INLINE_PRODUCER_WARP:
                        # the point tile once both warpgroups are done with the last, then the ring's first tiles
                        x_put = self._load_points(put, x_put, point_tile)
                        if cutlass.const_expr(self.norms_in_acc):
                            # the first tiles' c_sq all loaded before any is stored: one load latency, not one a tile
                            first = cute.make_rmem_tensor(cute.make_layout((self.block_n // 32, ahead + 1)),
                                                          cutlass.Float32)
                            for t in cutlass.range_constexpr(ahead + 1):
                                self._load_norms(c_sq, t, K, put.lane, first[None, t])
                        for t in cutlass.range_constexpr(ahead):
                            if t < num_tiles:
                                slot = self._fill_tile(put, slot, t, first[None, t] if self.norms_in_acc else None)
                        if cutlass.const_expr(self.norms_in_acc):
                            cute.autovec_copy(first[None, ahead], upcoming)
                x_pipe.consumer_wait(x_state)
                self._points_arrived(ctx, x_state)
                for tile in cutlass.range(num_tiles, unroll=1):
                    if cutlass.const_expr(self.norms_in_acc):
                        # the accumulator starts at -0.5 * c_sq (before my turn: it only needs the tile's first slot)
                        ring.consumer_wait(read)
                        self._norms_into_acc(ctx, acc, read.index)
                    if cutlass.const_expr(self.ping_pong):
                        # my turn at the tensor cores: warpgroup 0 opens, then they alternate tile by tile
                        if consumer_wg + i + tile > 0:
                            cute.arch.barrier(barrier_id=TURN_BARRIER + consumer_wg, number_of_threads=256)
                    mma, read, release, held = self._issue(ctx, mma, acc, read, release, 0)
                    if cutlass.const_expr(self.ping_pong):
                        # the other warpgroup's turn (its MMAs queue behind mine) - except after the last tile
                        # of warpgroup 1, which nobody waits for
                        if consumer_wg == 0 or i < last_point_tile or tile < num_tiles - 1:
                            cute.arch.barrier_arrive(barrier_id=TURN_BARRIER + 1 - consumer_wg, number_of_threads=256)
                        # slot by slot, oldest first: the producer refills a slot as soon as both are done with it
                        for _ in cutlass.range_constexpr(held):
                            release, held = self._retire(ctx, release, held, 1)
                        if cutlass.const_expr(self.inline_producer):
                            # warpgroup 1 gives a tile's slots back after warpgroup 0: refill them, `ahead` on
                            if warp == INLINE_PRODUCER_WARP and tile + ahead < num_tiles:
                                if cutlass.const_expr(self.norms_in_acc):
                                    slot = self._fill_tile(put, slot, tile + ahead, upcoming)
                                    self._load_norms(c_sq, tile + ahead + 1, K, put.lane, upcoming)
                                else:
                                    slot = self._fill_tile(put, slot, tile + ahead)
                    else:
                        # every slot back to the producer before the argmin, so it refills them while we fold
                        release, held = self._retire(ctx, release, held, held)
                    if tile == num_tiles - 1:
                        self._points_done(ctx, x_state)
                    self._argmin(ctx, acc, tile)
                x_state.advance()

                reduce.merge_chains(best_score, best_index)
                reduce.merge_lanes(best_score, best_index, 4)
                if lane % 4 == 0:
                    for r in cutlass.range_constexpr(2):
                        row = point_tile * BLOCK_M + coords[_flat_index(r, 0)][0]
                        if row < N:
                            out[row] = best_index[0, r]

    # ---- producer and consumer steps: plain Python, run at trace time; every loop here is unrolled ----

    def _load_points(self, p, x_state, point_tile):
        """Producer: the point tile into its buffer, once the consumers' last WGMMAs on the one before are done."""
        p.x_pipe.producer_acquire(x_state)
        cute.copy(p.tma_x, p.tma_gx[(None, point_tile)], p.tma_sx[(None, 0)],
                  tma_bar_ptr=p.x_pipe.producer_get_barrier(x_state))
        p.x_pipe.producer_commit(x_state)
        x_state.advance()
        return x_state

    def _fill_tile(self, p, slot, tile, loaded=None):
        """Producer: centroid tile `tile` into the ring, a slot per D block, each once the consumers gave it back;
        `loaded`: the tile's c_sq already in registers (`_load_norms`)."""
        for db in range(self.d_blocks):
            if cutlass.const_expr(self.norms_in_acc and db == 0):
                # the tile's norms go beside its first slot before the slot's "full" arrive, which publishes them
                # with the TMA bytes (the warp's stores ordered before it by sync_warp)
                p.ring.sync_object_empty.wait(slot.index, slot.phase)
                if cutlass.const_expr(loaded is None):
                    self._stage_norms(p.c_sq, p.sn, slot.index, tile, p.K, p.lane)
                else:
                    self._store_norms(p.sn, slot.index, tile, p.K, p.lane, loaded)
                cute.arch.sync_warp()
                p.ring.sync_object_full.arrive(slot.index, p.ring.producer_mask)
            else:
                p.ring.producer_acquire(slot)
            cute.copy(p.tma_c, p.tma_gc[(None, tile, db)], p.tma_sc[(None, slot.index)],
                      tma_bar_ptr=p.ring.producer_get_barrier(slot))
            p.ring.producer_commit(slot)
            slot.advance()
        return slot

    def _points_arrived(self, k, x_state):
        """The point tile is in shared memory, where the WGMMAs read it: nothing to do."""

    def _points_done(self, k, x_state):
        """My last WGMMAs on this point tile are done: its buffer may take the next one."""
        k.x_pipe.consumer_release(x_state)

    def _issue(self, k, mma, acc, read, release, held: int):
        """Issue the WGMMAs of one centroid tile into `acc`, one commit group per ring slot.

        Before waiting for a slot, retire the oldest in-flight group (wait for it, release its slot) while
        all `stages` slots are held: otherwise the producer could never fill the slot we wait for.
        Returns the ring positions and the new number of held slots.
        """
        cute.nvgpu.warpgroup.fence()
        for db in range(self.d_blocks):
            while held >= self.stages:
                release, held = self._retire(k, release, held, 1)
            k.ring.consumer_wait(read)
            self._slot_mmas(k, mma, acc, db, read.index)
            cute.nvgpu.warpgroup.commit_group()
            read.advance()
            held += 1
        return mma, read, release, held

    def _slot_mmas(self, k, mma, acc, db, slot_index):
        """The k16 WGMMAs of D block `db`, whose centroid columns ring slot `slot_index` holds."""
        steps = BLOCK_D // 16
        for s in range(steps):
            # onto the staged norms from the first step, else onto zero
            mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, self.norms_in_acc or db + s > 0)
            cute.gemm(mma, acc, k.frag_x[(None, None, db * steps + s, 0)], k.frag_c[(None, None, s, slot_index)], acc)

    def _retire(self, k, release, held: int, count: int):
        """Wait until the oldest `count` in-flight groups are done and give their slots back to the producer."""
        cute.nvgpu.warpgroup.wait_group(held - count)
        for _ in range(count):
            k.ring.consumer_release(release)
            release.advance()
        return release, held - count

    def _stage_norms(self, c_sq, sn, slot_index, tile, K, lane):
        """Producer warp: -0.5 * c_sq of the tile's columns (-inf past K) into the norms of ring slot
        `slot_index`, one coalesced load per lane and 32 columns."""
        # one load and its use together, in the order the library's builds were measured in (`_load_norms` and
        # `_store_norms` split them where the use comes a tile later)
        first = tile * self.block_n
        for t in range(self.block_n // 32):
            col = first + lane + 32 * t
            # clamp the address, then replace: a branch-free -inf for centroids past K
            norm = cutlass.Float32(-0.5) * c_sq[cutlass.min(col, K - 1)]
            sn[slot_index * self.block_n + lane + 32 * t] = cutlass.Float32(
                cutlass.select_(col < K, norm, float("-inf")))

    def _load_norms(self, c_sq, tile, K, lane, into):
        """The tile's c_sq this lane stages, into registers `into` and nothing else: its latency is paid where
        `_store_norms` uses them, a tile later in the inline producer's refills."""
        for t in range(self.block_n // 32):
            # clamp the address; `_store_norms` replaces what lies past K
            into[t] = c_sq[cutlass.min(tile * self.block_n + lane + 32 * t, K - 1)]

    def _store_norms(self, sn, slot_index, tile, K, lane, loaded):
        """-0.5 * the c_sq `_load_norms` put in registers (a branch-free -inf past K) into slot `slot_index`."""
        for t in range(self.block_n // 32):
            col = tile * self.block_n + lane + 32 * t
            sn[slot_index * self.block_n + lane + 32 * t] = cutlass.Float32(
                cutlass.select_(col < K, cutlass.Float32(-0.5) * loaded[t], float("-inf")))

    def _norms_into_acc(self, k, acc, slot_index):
        """The accumulator of both of this thread's rows := -0.5 * c_sq of its columns, from the slot's norms."""
        dots = cute.make_tensor(acc.iterator, _row_col_layout(self.block_n))
        base = slot_index * self.block_n
        for j in range(self.block_n // 4):
            norm = k.sn[base + k.coords[_flat_index(0, j)][1]]
            for r in range(2):
                dots[r, j] = norm

    def _argmin(self, k, acc, tile):
        """Fold the 64 x block_n dot products of one tile into the running winners of this thread's rows."""
        cols_per_row = self.block_n // 4
        dots = cute.make_tensor(acc.iterator, _row_col_layout(self.block_n))
        first = tile * self.block_n
        if cutlass.const_expr(self.norms_in_acc):
            # acc = dot - half norm: the scan minimises its negation, the score itself
            if cutlass.const_expr(self.scan == "lazy"):
                reduce.scan_lazy(dots, _col_offsets(self.block_n), first + k.coords[_flat_index(0, 0)][1],
                                 k.best_score, k.best_index)
                return
            reduce.scan_pairs(dots, dots, _col_offsets(self.block_n), first + k.coords[_flat_index(0, 0)][1],
                              k.best_score, k.best_index, folded=True)
            return
        cols = cute.make_rmem_tensor(cute.make_layout(cols_per_row), cutlass.Int32)
        half_norms = cute.make_rmem_tensor(cute.make_layout(cols_per_row), cutlass.Float32)
        if self.broadcast_norms:
            staged = reduce.stage_half_norms(k.c_sq, first, k.K, k.lane, self.block_n // 32)
            for j in range(cols_per_row):
                col = k.coords[_flat_index(0, j)][1]
                cols[j] = first + col
                half_norms[j] = reduce.broadcast_half_norm(staged, col, j // 8)
        else:
            for j in range(cols_per_row):
                col = first + k.coords[_flat_index(0, j)][1]
                cols[j] = col
                # clamp the address, then replace: a branch-free +inf for centroids past K
                norm = cutlass.Float32(0.5) * k.c_sq[cutlass.min(col, k.K - 1)]
                half_norms[j] = cutlass.Float32(cutlass.select_(col < k.K, norm, float("inf")))
        if self.scan == "serial":
            reduce.scan_serial(dots, half_norms, cols, k.best_score, k.best_index)
        elif self.scan == "pairs":
            # the same columns as base + compile-time offsets: cols[j] - cols[0] is fixed by the layout
            reduce.scan_pairs(dots, half_norms, _col_offsets(self.block_n), cols[0], k.best_score, k.best_index)
        else:
            reduce.scan_ilp2(dots, half_norms, cols, k.best_score, k.best_index)


class _Handles:
    """What the producer's or the consumers' steps share; a plain bag of trace-time handles."""

    def __init__(self, **handles):
        self.__dict__.update(handles)


# --------------------------------------------------------------------------------------------------
# Host side: compile (no GPU needed) and run
# --------------------------------------------------------------------------------------------------

def _cutlass_dtype(dtype: torch.dtype):
    import cutlass
    return {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}[dtype]


def _args(dtype: torch.dtype, x_addr: int, c_addr: int, c_sq_addr: int, out_addr: int, N: int, K: int, ctas: int,
          stream):
    """The kernel's arguments: global pointers (x and c 16-byte aligned, for TMA), sizes, the most CTAs to launch
    and a stream."""
    el = _cutlass_dtype(dtype)
    return (launch.gmem_pointer(el, x_addr, 16), launch.gmem_pointer(el, c_addr, 16),
            launch.gmem_pointer(cutlass.Float32, c_sq_addr, 4), launch.gmem_pointer(cutlass.Int32, out_addr, 4),
            cutlass.Int32(N), cutlass.Int32(K), cutlass.Int32(ctas), stream)


def _placeholder_args(dtype: torch.dtype):
    """Arguments to compile against: null pointers and zero sizes stand for the runtime values."""
    from cutlass.runtime import make_fake_stream
    return _args(dtype, 0, 0, 0, 0, 0, 0, 0, make_fake_stream())


def grid_cap(variant: str, D: int, device: int) -> int:
    """The most CTAs `variant` launches at D on `device`. Where one CTA holds an SM, one wave of them, each walking
    every grid-th point tile: set up once, the next tile's points prefetched into L2 and loaded under the last
    tile's fold, which nothing else on the SM would hide (wide at D = 256: 1-3 % faster on the H200). Where two
    CTAs share an SM they hide each other's start and end, and a CTA per point tile (MAX_CTAS) lets the block
    scheduler even out their progress (one wave measured 1-4 % slower at D = 64 and 128; notes/perf-log.md)."""
    spec = VARIANT_SPECS[variant]
    ctas = ctas_per_sm(D, spec.block_n, spec.staged_norms)
    return launch.sm_count(device) if ctas == 1 else MAX_CTAS


def compile(variant: str, N: int, D: int, K: int, dump_dir=None, dtype: torch.dtype = torch.bfloat16):
    """Compile `variant` for sm_90a with no GPU -> workbook.sass.Artifacts (.ptx, .cubin, .sass).

    N and K are runtime values of the kernel (one compilation serves all); D is baked in.
    """
    check_shape(D, dtype)
    check_variant(variant, D)
    return sass.compile_for(HopperAssign(variant, D, _cutlass_dtype(dtype)), *_placeholder_args(dtype),
                            arch="sm_90a", dump_dir=dump_dir)


@functools.lru_cache(maxsize=None)
def _launches(variant: str, D: int, dtype: torch.dtype, device: int, pdl: bool) -> launch.LaunchCache:
    """The compiled kernel for (variant, D, dtype, pdl) on one device, compiled on first use (with that device
    current), behind its launch cache; a ValueError (never cached) where the variant cannot take D. Every
    argument is positional and required: the cache keys on how they are passed, and one form means one entry."""
    check_shape(D, dtype)
    check_variant(variant, D)
    kernel = HopperAssign(variant, D, _cutlass_dtype(dtype), pdl)
    with launch.on_device(device):
        compiled = cute.compile(kernel, *_placeholder_args(dtype), options="--gpu-arch sm_90a")
    # c_sq and out are plain pointer parameters (x and c sit in TMA descriptors): a replay re-aims them
    return launch.LaunchCache(compiled, device=device, pointers=4, reaimable=(2, 3))   # x, c, c_sq, out


def launcher(variant: str, N: int, D: int, K: int, dtype: torch.dtype, device: int, pdl: bool = False,
             ctas: int | None = None):
    """`run` for one signature (sizes, dtype, device): a function of (x, c, c_sq, out) that launches, the
    compiled kernel and its launch cache looked up once (compiled here on first use); `pdl`: the build launched
    as a programmatic dependent (`HopperAssign`); `ctas`: the most CTAs to launch, `grid_cap` if None."""
    launches = _launches(variant, D, dtype, device, pdl)
    ctas = grid_cap(variant, D, device) if ctas is None else ctas

    def launch_on(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor, out: torch.Tensor) -> None:
        addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), N, K, ctas)
        launches(addrs, lambda s: _args(dtype, *addrs, cuda.CUstream(s)), launch.stream_handle(device))
    return launch_on


def run(variant: str, x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor, out: torch.Tensor) -> None:
    """Launch on CUDA tensors validated by kmeans_kernels.check_inputs (shapes, sizes, alignment); fills `out`
    (int32 [N]) on x's device, whatever the current device is."""
    (N, D), K = x.shape, c.shape[0]
    launcher(variant, N, D, K, x.dtype, x.get_device())(x, c, c_sq, out)
