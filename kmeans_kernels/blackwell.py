"""k-means assignment on Blackwell (sm_100a): tcgen05 MMAs into tensor memory, argmin on CUDA cores.

One CTA owns 128 points (one TMEM lane, one epilogue thread each) and walks every centroid tile of
128 centroids. For each tile the tensor cores compute the 128 x 128 block of dot products
``<x_i, c_k>`` into TMEM (fp32); the epilogue threads load their row of it into registers, turn each
dot product into the score ``0.5 * ||c_k||^2 - <x_i, c_k>`` and fold it into a running
(best score, best index) with the strict ``<`` of the contract (kmeans_kernels.reference).

The warp-specialised kernel ("WS", 6 warps) splits the CTA by role, coupled only through mbarriers:

    warp 5      TMA load   the point tile once (it stays resident in shared memory), then every
                           centroid tile, D/64 chunks of 128 x 64, through a ring of shared-memory stages
    warp 4      MMA        one elected thread issues tcgen05.mma: tile j into TMEM accumulator j % 2
    warps 0-3   epilogue   wait for accumulator j % 2, tcgen05.ld it into registers, fence
                           (tcgen05.wait::ld), hand the accumulator back, then score and select

Two accumulators (2 x 128 TMEM columns) let the MMA of tile j+1 run while the epilogue reduces tile j.
The fence before the hand-back matters: tcgen05.ld is asynchronous, so without tcgen05.wait::ld the MMA
warp could overwrite the accumulator while the load is still reading it.

The variants are the steps of flashlib PR #22 (seed 000_1326c6fcbc937f5e.txt), one change each:

    serial          the baseline WS kernel: one compare-select chain scans the 128 columns of a tile;
                    the tile's half-norms are staged in shared memory (two named barriers per tile)
    ilp2            WS + two independent chains (even and odd columns) merged once at the end by
                    (score, index): half the dependency depth, so the scan is no longer latency bound
    norm_broadcast  WS + each warp loads the tile's 128 half-norms into registers (4 per lane) and
                    broadcasts norm n with shuffle_sync from lane n % 32: no shared-memory norm buffer
                    and none of its barriers
    x_resident      one 4-warp CTA without specialised warps, for large N: warp 0 issues TMA and MMA
                    between its epilogue steps, one TMEM accumulator (the registers are the second
                    buffer: the next MMA starts as soon as the current tile is loaded). Smaller than WS
                    in threads, TMEM and shared memory, so two CTAs share an SM and interleave.

Every variant keeps the point tile resident; they differ in roles and in the reduction. Rows past N and
centroids past K are handled: TMA fills out-of-range rows with zeros, out-of-range centroids get a
half-norm of +inf (a score of +inf or NaN, which never wins), and only rows < N are written.

We have no B200: these kernels are compiled for sm_100a and checked through their PTX and SASS
(tests/test_kmeans_blackwell.py) and against the reference on a B200 by `pytest -m gpu`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import cuda.bindings.driver as cuda_driver
import torch

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.cute.runtime import from_dlpack, make_fake_compact_tensor, make_fake_stream

from kmeans_kernels import reduce, variants
from workbook import gpus, launch
from workbook import sass as sass_tools

ARCH = "sm_100a"
BLOCK_M = 128        # points per CTA = TMEM lanes = epilogue threads (one row each)
BLOCK_N = 128        # centroids per tile = TMEM columns per accumulator
BLOCK_K = 64         # D per TMA chunk: 64 bf16 = one 128-byte swizzle row
MMA_K = 16           # D per tcgen05.mma for 16-bit inputs
EPILOGUE_WARPS = 4   # warps 0-3: tcgen05.ld lets warp w read TMEM lanes 32w..32w+31 only
# a round budget below the 227 KiB a CTA may use, leaving room for barriers and the norm buffer
SMEM_BUDGET = 200 * 1024
assert SMEM_BUDGET < gpus.B200.smem_per_block_bytes
MAX_C_STAGES = 8
TMEM_ALLOC_BARRIER_ID = 1
NORM_BARRIER_ID = 2      # the named barrier of the shared-memory norm buffer (epilogue warps only)
X_RESIDENT_MAX_D = 256    # its ring holds two whole centroid tiles next to the point tile
_DTYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}


@dataclass(frozen=True)
class Design:
    """What distinguishes one variant: who issues the loads and MMAs, how norms arrive, how the scan runs."""

    warp_specialized: bool
    reduction: str     # "serial" or "ilp2" (kmeans_kernels.reduce)
    norms: str         # "smem" (staged, two barriers per tile) or "shuffle" (registers + shuffle_sync)


# In tutorial order, from the one vocabulary (`kmeans_kernels.variants.RECIPES`): on Blackwell each variant is
# one change from the warp-specialised serial kernel, so norm_broadcast keeps the serial scan.
DESIGNS = {name: Design(warp_specialized=r.warp_specialized, reduction=r.scan, norms=r.norms)
           for name, r in variants.RECIPES[ARCH].items()}
VARIANTS = tuple(DESIGNS)


def auto_variant(N: int, D: int, K: int) -> str:
    """The PR author's B200 choice (seed 000_1326c6fcbc937f5e.txt): ILP2 at D=64 and D=256, norm broadcast
    at D=128, for every N and K of their table. Not our measurement: we have no B200. Other D take the
    choice of the nearest measured D (D <= 96 -> 64, D <= 192 -> 128, else 256), an untested extrapolation.
    """
    if D <= 96:
        return "ilp2"
    if D <= 192:
        return "norm_broadcast"
    return "ilp2"


# ---------------------------------------------------------------------------------------------------
# The kernel

@dataclass(frozen=True)
class Plan:
    """Static sizes of one compiled kernel, derived from D and the design (all Python ints)."""

    D: int
    k_chunks: int      # TMA chunks of BLOCK_K along D
    c_stages: int      # centroid ring depth in chunks
    acc_stages: int    # TMEM accumulators
    threads: int

    @staticmethod
    def of(design: Design, D: int) -> "Plan":
        k_chunks = math.ceil(D / BLOCK_K)
        chunk_bytes = BLOCK_N * BLOCK_K * 2
        x_bytes = k_chunks * BLOCK_M * BLOCK_K * 2
        if design.warp_specialized:
            c_stages = min(MAX_C_STAGES, (SMEM_BUDGET - x_bytes) // chunk_bytes)
            return Plan(D, k_chunks, c_stages, acc_stages=2, threads=32 * (EPILOGUE_WARPS + 2))
        if D > X_RESIDENT_MAX_D:
            raise ValueError(f"x_resident supports D <= {X_RESIDENT_MAX_D} (its ring holds two centroid tiles "
                             f"next to the point tile); got D={D}: use the WS variants")
        # two tiles in flight: the MMA warp reads tile j+1 while TMA fills tile j+2
        return Plan(D, k_chunks, 2 * k_chunks, acc_stages=1, threads=32 * EPILOGUE_WARPS)


class AssignKernel:
    """One compiled variant for one D and input dtype; N and K are runtime values."""

    def __init__(self, design: Design, D: int):
        self.design = design
        self.plan = Plan.of(design, D)

    @cute.jit
    def __call__(self, mX: cute.Tensor, mC: cute.Tensor, mCsq: cute.Tensor, mOut: cute.Tensor, stream):
        self.dtype = mX.element_type
        tiled_mma = sm100_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, tcgen05.OperandMajorMode.K, tcgen05.OperandMajorMode.K,
            cutlass.Float32, tcgen05.CtaGroup.ONE, (BLOCK_M, BLOCK_N))
        mma_tiler = (BLOCK_M, BLOCK_N, BLOCK_K)
        # the point tile: one stage per D chunk, all resident; the centroids: a ring of chunks
        x_smem = sm100_utils.make_smem_layout_a(tiled_mma, mma_tiler, self.dtype, self.plan.k_chunks)
        c_smem = sm100_utils.make_smem_layout_b(tiled_mma, mma_tiler, self.dtype, self.plan.c_stages)
        tma_op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        tma_x = cute.nvgpu.make_tiled_tma_atom_A(tma_op, mX, cute.select(x_smem, mode=[0, 1, 2]),
                                                 mma_tiler, tiled_mma)
        tma_c = cute.nvgpu.make_tiled_tma_atom_B(tma_op, mC, cute.select(c_smem, mode=[0, 1, 2]),
                                                 mma_tiler, tiled_mma)
        grid = (cute.ceil_div(mX.shape[0], BLOCK_M), 1, 1)
        self.kernel(tiled_mma, tma_x.atom, tma_x.tma_tensor, tma_c.atom, tma_c.tma_tensor, mCsq, mOut,
                    x_smem, c_smem).launch(grid=grid, block=(self.plan.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_atom_x: cute.CopyAtom, mX: cute.Tensor,
               tma_atom_c: cute.CopyAtom, mC: cute.Tensor, mCsq: cute.Tensor, mOut: cute.Tensor,
               x_smem: cute.ComposedLayout, c_smem: cute.ComposedLayout):
        plan, design = self.plan, self.design
        c_stages, acc_stages = plan.c_stages, plan.acc_stages
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        N, K = mOut.shape[0], mCsq.shape[0]

        @cute.struct
        class Storage:
            x_bar: cute.struct.MemRange[cutlass.Int64, 2]
            c_bar: cute.struct.MemRange[cutlass.Int64, c_stages * 2]
            acc_bar: cute.struct.MemRange[cutlass.Int64, acc_stages * 2]
            tmem_addr: cutlass.Int32
            half_norms: cute.struct.MemRange[cutlass.Float32, BLOCK_N]  # used by the "smem" norm path only

        smem = utils.SmemAllocator()
        storage = smem.allocate(Storage)
        sX = smem.allocate_tensor(self.dtype, x_smem.outer, 128, swizzle=x_smem.inner)
        sC = smem.allocate_tensor(self.dtype, c_smem.outer, 128, swizzle=c_smem.inner)

        load_warp = EPILOGUE_WARPS + 1 if design.warp_specialized else 0
        mma_warp = EPILOGUE_WARPS if design.warp_specialized else 0
        if warp == load_warp:
            cpasync.prefetch_descriptor(tma_atom_x)
            cpasync.prefetch_descriptor(tma_atom_c)

        # x: the whole point tile behind one barrier; c: one barrier pair per ring stage;
        # acc: TMEM accumulators, released by one elected thread per epilogue warp
        x_producer, x_consumer = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.x_bar.data_ptr(), num_stages=1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            tx_count=cute.size_in_bytes(self.dtype, x_smem.outer), defer_sync=True).make_participants()
        c_producer, c_consumer = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.c_bar.data_ptr(), num_stages=c_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            tx_count=cute.size_in_bytes(self.dtype, cute.select(c_smem.outer, mode=[0, 1, 2])),
            defer_sync=True).make_participants()
        acc_producer, acc_consumer = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_bar.data_ptr(), num_stages=acc_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, EPILOGUE_WARPS),
            defer_sync=True).make_participants()
        tmem = cutlass.memory.TmemAllocator(storage.tmem_addr.ptr,
                                   barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=TMEM_ALLOC_BARRIER_ID,
                                                                              num_threads=plan.threads))
        norm_barrier = pipeline.NamedBarrier(barrier_id=NORM_BARRIER_ID, num_threads=BLOCK_M)
        pipeline.pipeline_init_arrive(is_relaxed=True)

        # (128, 64, chunk) of this CTA's points; (128, 64, tile, chunk) of all centroids
        gX = cute.local_tile(mX, (BLOCK_M, BLOCK_K), (bidx, None))
        gC = cute.local_tile(mC, (BLOCK_N, BLOCK_K), (None, None))
        thr_mma = tiled_mma.get_slice(0)
        tXsX, tXgX = cpasync.tma_partition(tma_atom_x, 0, cute.make_layout(1), cute.group_modes(sX, 0, 3),
                                           cute.group_modes(thr_mma.partition_A(gX), 0, 3))
        tCsC, tCgC = cpasync.tma_partition(tma_atom_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 3),
                                           cute.group_modes(thr_mma.partition_B(gC), 0, 3))
        tCrX = tiled_mma.make_fragment_A(sX)
        tCrC = tiled_mma.make_fragment_B(sC)
        acc_layout = tiled_mma.make_fragment_C(
            cute.append(tiled_mma.partition_shape_C((BLOCK_M, BLOCK_N)), acc_stages)).layout
        n_tiles = cute.size(gC, mode=[2])

        pipeline.pipeline_init_wait()
        tmem.allocate(BLOCK_N * acc_stages)
        tmem.wait_for_alloc()
        tAcc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), acc_layout)

        kc = plan.k_chunks
        if cutlass.const_expr(design.warp_specialized):
            if warp == load_warp:
                x_producer = _load_points(tma_atom_x, tXgX, tXsX, x_producer, kc)
                for t in cutlass.range(n_tiles):
                    c_producer = _load_centroid_tile(tma_atom_c, tCgC, tCsC, c_producer, t, kc)
                c_producer.tail()
            if warp == mma_warp:
                x_consumer.wait_and_advance()  # the point tile has landed
                for t in cutlass.range(n_tiles):
                    tiled_mma, acc_producer, c_consumer = _mma_tile(tiled_mma, tCrX, tCrC, tAcc, acc_producer, c_consumer, kc)
                acc_producer.tail()
        else:
            # prologue: the point tile, centroid tiles 0 and 1 in flight, the MMA of tile 0 issued
            if warp == mma_warp:
                x_producer = _load_points(tma_atom_x, tXgX, tXsX, x_producer, kc)
                c_producer = _load_centroid_tile(tma_atom_c, tCgC, tCsC, c_producer, 0, kc)
                if n_tiles > 1:
                    c_producer = _load_centroid_tile(tma_atom_c, tCgC, tCsC, c_producer, 1, kc)
                x_consumer.wait_and_advance()  # the point tile has landed
                tiled_mma, acc_producer, c_consumer = _mma_tile(tiled_mma, tCrX, tCrC, tAcc, acc_producer, c_consumer, kc)

        if warp < EPILOGUE_WARPS:
            self.epilogue(tiled_mma, tCrX, tCrC, tAcc, tma_atom_c, tCgC, tCsC, mCsq, mOut,
                          acc_consumer, acc_producer, c_producer, c_consumer,
                          storage, norm_barrier, n_tiles, N, K, warp, tidx, bidx)

        cute.arch.sync_threads()
        if warp == 0:
            tmem.relinquish_alloc_permit()
            tmem.free(tAcc.iterator)

    @cute.jit
    def epilogue(self, tiled_mma, tCrX, tCrC, tAcc, tma_atom_c, tCgC, tCsC, mCsq, mOut,
                 acc_consumer, acc_producer, c_producer, c_consumer,
                 storage, norm_barrier, n_tiles, N, K, warp, tidx, bidx):
        """Warps 0-3: thread tidx owns point row tidx; score every centroid tile and keep the winner."""
        design = self.design
        t2r = tcgen05.make_tmem_copy(
            cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x128), cutlass.Float32),
            tAcc[((None, None), 0, 0, 0)])
        thr_t2r = t2r.get_slice(tidx)
        tTR_tAcc = thr_t2r.partition_S(tAcc[((None, None), 0, 0, None)])
        dots = cute.make_rmem_tensor(
            thr_t2r.partition_D(cute.make_identity_tensor((BLOCK_M, BLOCK_N))).shape, cutlass.Float32)
        # one row of dot products: thread tidx's tcgen05.ld fragment, value j = column j of the tile
        row_dots = cute.make_tensor(dots.iterator, cute.make_layout((1, BLOCK_N)))
        cols = cute.make_rmem_tensor(cute.make_layout(BLOCK_N), cutlass.Int32)
        shared_norms = storage.half_norms.get_tensor(cute.make_layout(BLOCK_N))
        lane = tidx % 32
        K32 = cutlass.Int32(K)
        chains = reduce.chains_of(design.reduction)

        best_score, best_index = reduce.new_winners(chains, 1)
        for t in cutlass.range(n_tiles):
            col0 = cutlass.Int32(t * BLOCK_N)
            if cutlass.const_expr(design.norms == "smem"):
                # thread tidx stages column tidx's half-norm; the barrier below publishes the tile
                mine = reduce.stage_half_norms(mCsq, col0 + 32 * warp, K32, lane, 1)
                shared_norms[tidx] = mine[0]
            else:
                # lane l holds columns l, l+32, l+64, l+96 in registers: no shared memory, no barrier
                lane_norms = reduce.stage_half_norms(mCsq, col0, K32, lane, BLOCK_N // 32)

            full = acc_consumer.wait_and_advance()
            cute.copy(t2r, tTR_tAcc[(None, None, None, full.index)], dots)
            cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld: the load has landed, reuse is safe
            with cute.arch.elect_one():
                full.release()

            if cutlass.const_expr(not design.warp_specialized):
                # warp 0 keeps the tensor cores busy: the next tile's MMA, then the loads for the one after
                if warp == 0:
                    if t + 1 < n_tiles:
                        tiled_mma, acc_producer, c_consumer = _mma_tile(tiled_mma, tCrX, tCrC, tAcc, acc_producer, c_consumer, self.plan.k_chunks)
                    if t + 2 < n_tiles:
                        c_producer = _load_centroid_tile(tma_atom_c, tCgC, tCsC, c_producer, t + 2, self.plan.k_chunks)

            for j in cutlass.range_constexpr(BLOCK_N):
                cols[j] = col0 + j
            if cutlass.const_expr(design.norms == "smem"):
                norm_barrier.arrive_and_wait()  # the staged half-norms are visible
                half_norms = shared_norms
            else:
                half_norms = cute.make_rmem_tensor(cute.make_layout(BLOCK_N), cutlass.Float32)
                for j in cutlass.range_constexpr(BLOCK_N):
                    half_norms[j] = reduce.broadcast_half_norm(lane_norms, j, j // 32)

            if cutlass.const_expr(design.reduction == "ilp2"):
                reduce.scan_ilp2(row_dots, half_norms, cols, best_score, best_index)
            else:
                reduce.scan_serial(row_dots, half_norms, cols, best_score, best_index)
            if cutlass.const_expr(design.norms == "smem"):
                norm_barrier.arrive_and_wait()  # everyone has read them before the next tile overwrites

        if cutlass.const_expr(not design.warp_specialized):
            if warp == 0:
                acc_producer.tail()
                c_producer.tail()
        reduce.merge_chains(best_score, best_index)
        row = bidx * BLOCK_M + tidx
        if row < N:
            mOut[row] = best_index[0, 0]


@cute.jit
def _load_points(atom_x, tXgX, tXsX, producer, k_chunks: cutlass.Constexpr):
    """TMA the CTA's whole point tile, D/64 chunks behind one barrier; it stays resident."""
    stage = producer.acquire_and_advance()
    for kc in cutlass.range_constexpr(k_chunks):
        cute.copy(atom_x, tXgX[(None, kc)], tXsX[(None, kc)], tma_bar_ptr=stage.barrier)
    return producer


@cute.jit
def _load_centroid_tile(atom_c, tCgC, tCsC, producer, t, k_chunks: cutlass.Constexpr):
    """TMA centroid tile t, one ring stage per D/64 chunk."""
    for kc in cutlass.range_constexpr(k_chunks):
        stage = producer.acquire_and_advance()
        cute.copy(atom_c, tCgC[(None, t, kc)], tCsC[(None, stage.index)], tma_bar_ptr=stage.barrier)
    return producer


@cute.jit
def _mma_tile(tiled_mma, tCrX, tCrC, tAcc, acc_producer, c_consumer, k_chunks: cutlass.Constexpr):
    """One centroid tile's dot products into the next free TMEM accumulator."""
    empty = acc_producer.acquire_and_advance()
    acc = tAcc[(None, None, None, empty.index)]
    for kc in cutlass.range_constexpr(k_chunks):
        chunk = c_consumer.wait_and_advance()
        for k in cutlass.range_constexpr(cute.size(tCrX, mode=[2])):
            # the first MMA of a tile overwrites the accumulator, the rest add to it
            tiled_mma.set(tcgen05.Field.ACCUMULATE, kc != 0 or k != 0)
            cute.gemm(tiled_mma, acc, tCrX[(None, None, k, kc)], tCrC[(None, None, k, chunk.index)], acc)
        chunk.release()  # tcgen05.commit: the stage is free once these MMAs have read it
    empty.commit()       # tcgen05.commit: the accumulator is full once all of them are done
    # the ACCUMULATE field is runtime state of tiled_mma: hand it back so that loops and branches carry it
    return tiled_mma, acc_producer, c_consumer


# ---------------------------------------------------------------------------------------------------
# Compile and run

def _fake_args(D: int, dtype: torch.dtype):
    """Shape-only arguments: N and K are runtime values, D is compiled in, rows are 16-byte aligned."""
    n, k = cute.sym_int64(symbol="N"), cute.sym_int64(symbol="K")
    el = _DTYPES[dtype]
    return (make_fake_compact_tensor(el, (n, D), stride_order=(1, 0), assumed_align=16),
            make_fake_compact_tensor(el, (k, D), stride_order=(1, 0), assumed_align=16),
            make_fake_compact_tensor(cutlass.Float32, (k,), assumed_align=4),
            make_fake_compact_tensor(cutlass.Int32, (n,), assumed_align=4),
            make_fake_stream())


def _check_variant(variant: str) -> Design:
    variants.recipe(ARCH, variant)
    return DESIGNS[variant]


def _compile(variant: str, D: int, dtype: torch.dtype, dump_dir: Path | None):
    design = _check_variant(variant)
    variants.check_d(D)
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {list(_DTYPES)}; got {dtype}")
    return sass_tools.compile_for(AssignKernel(design, D), *_fake_args(D, dtype), arch=ARCH, dump_dir=dump_dir)


@functools.lru_cache(maxsize=None)
def _compiled(variant: str, D: int, dtype: torch.dtype, device: int | None):
    """The artifacts of one build, compiled once per process and device (with that device current; None: the
    current one). Every argument is positional and required: the cache keys on how they are passed."""
    with launch.on_device(device):
        return _compile(variant, D, dtype, None)


def compile(variant: str, N: int, D: int, K: int, dump_dir=None, dtype: torch.dtype = torch.bfloat16):
    """Compile one variant for sm_100a with no GPU; returns workbook.sass.Artifacts (.ptx, .cubin, .sass).

    The kernel is compiled for D and the dtype; N and K are runtime values, so the artifacts are those
    `run` launches for any N and K (which are validated here all the same).
    """
    if min(N, K) < 1:
        raise ValueError(f"N and K must be >= 1; got N={N}, K={K}")
    if dump_dir is not None:
        return _compile(variant, D, dtype, Path(dump_dir))
    return _compiled(variant, D, dtype, None)


def run(variant: str, x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor, out: torch.Tensor) -> None:
    """Launch on CUDA tensors already validated by kmeans_kernels.check_inputs (shapes, sizes, alignment);
    fills `out` (int32 [N]) on x's device, whatever the current device is."""
    device = x.device.index
    art = _compiled(variant, x.shape[1], x.dtype, device)
    # N and K are the compiled kernel's runtime values: mark mode 0 of each tensor dynamic, as in _fake_args
    args = [from_dlpack(t, assumed_align=16 if t.ndim == 2 else 4).mark_compact_shape_dynamic(
        mode=0, stride_order=t.dim_order()) for t in (x, c, c_sq, out)]
    with launch.on_device(device):
        art.compiled(*args, cuda_driver.CUstream(launch.stream_handle(device)))


def launcher(variant: str, N: int, D: int, K: int, dtype: torch.dtype, device: int):
    """`run` for one signature, as the backends expose it (here `run` itself: its tensors carry the sizes)."""
    return functools.partial(run, variant)


# ---------------------------------------------------------------------------------------------------
# For `python -m kmeans_kernels.bench --gpu b200`

# kmeans_kernels.seeds' path ids (the seed's "WS", "X-resident", ...) -> the variant of this module that implements it
PR_PATHS = {"ws": "serial", "x_resident": "x_resident", "ilp2": "ilp2", "norm_broadcast": "norm_broadcast"}


def pr_cases() -> list[tuple[int, int, int, str, str]]:
    """The 13 shapes of flashlib PR #22 as (N, D, K, main variant, PR variant): what a B200 bench times,
    both variants on the same inputs, to set our numbers next to the seed's table."""
    from kmeans_kernels import seeds
    return [(int(r.N), int(r.D), int(r.K), PR_PATHS[r.main_path], PR_PATHS[r.pr_path])
            for r in seeds.main_table().itertuples()]
