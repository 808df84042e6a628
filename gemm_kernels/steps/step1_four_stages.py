"""GEMM step 1: a 4-stage TMA -> WGMMA pipeline with a staged epilogue (Hopper, sm_90a).

    c = gemm(a, b)                    # a [M, K], b [K, N] row-major bf16 or fp16 (what torch's a @ b takes),
                                      # fp32 accumulation, c [M, N] row-major, the dtype of a and b
    art = compile(4096, 4096, 4096)   # no GPU needed: art.ptx, art.sass (workbook.sass.Artifacts)

The kernel. One CTA computes one 128 x 256 tile of c; the grid is every tile once. A CTA is 384 threads in
three warpgroups:
  * warpgroup 0, the producer: one warp issues the TMA loads of A [128 x 64] and B [64 x 256] of each 64-deep
    K-block into the next free stage of a ring in shared memory; its other three warps only hand their
    registers over (setmaxnreg: 40 per producer thread, 232 per consumer thread);
  * warpgroups 1 and 2, the consumers: 64 rows of the tile each, WGMMA m64 x n256 x k16 from shared memory
    into 128 fp32 registers per thread, keeping one K-block of WGMMAs in flight while the next is issued.
Two mbarriers per stage: *full* (the producer arms it with the stage's byte count; the TMA engine completes
it when the bytes have landed) and *empty* (each consumer warp arrives when its WGMMAs on the stage are done).

The arithmetic (gemm_kernels.stages). A stage is A 128 x 64 + B 64 x 256 in bf16: 16 KiB + 32 KiB = 48 KiB.
The epilogue buffer is two 128 x 32 sub-tiles, 2 x 8 KiB = 16 KiB, plus 1 KiB for the mbarriers:
4 x 48 + 16 + 1 = 209 KiB of the 227 KiB a CTA may use; a fifth stage would need 257. Four stages are enough
to hide the memory: one K-block is 2 x 128 x 256 x 64 = 4.2 MFLOP of WGMMA, 0.7 us at ~790 TFLOP/s over 132
SMs, so the producer runs up to 4 x 0.7 = 2.8 us ahead of the tensor cores, well past a DRAM round trip.

The staged epilogue, per 32-column sub-tile of the accumulator: fp32 -> bf16 in registers; `stmatrix`
(SASS STSM) into a swizzled shared-memory buffer; a proxy fence (the TMA engine reads shared memory through
the async proxy) and a named barrier of the 256 consumer threads; one warp issues the TMA store (UTMASTG).
The two buffers take turns, so one store drains while the next sub-tile is written.

Layouts. b [K, N] row-major is an N-major (N, K) operand with strides (1, N); WGMMA reads MN-major 16-bit
operands from shared memory directly, so nothing is transposed. The grid walks the tiles in bands of
BAND_ROWS tile rows, column by column within a band: a wave of 132 CTAs then touches about 8 panels of A and
17 of B, not 132 panels of one operand, and they stay in L2 while the wave runs.

Tails. TMA zero-fills every element of a load box outside A or B (zeros add nothing) and the TMA store
clips at the edges of c: M, N and K need not be multiples of the tile. N and K must be multiples of 8
(16-byte rows for TMA), or a ValueError says so.
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90
import torch
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from gemm_kernels.steps import common

TILE_M, TILE_K = 128, 64       # two consumer warpgroups x 64 rows; 64 bf16 = one 128-byte swizzle row of A
EPI_N, EPI_BUFFERS = 32, 2     # staged epilogue: 128 x 32 sub-tiles, two buffers in turn
BAND_ROWS = 8                  # tile rows per band of the raster
THREADS = 384                  # producer warpgroup + two consumer warpgroups
PRODUCER_REGS, CONSUMER_REGS = 40, 232   # 128 x 40 + 256 x 232 <= 64K registers of the SM


class Gemm:
    """The kernel for one dtype, tile width and ring depth; `__call__` is the host-side @cute.jit entry."""

    def __init__(self, dtype, tile_n: int, stages: int):
        self.dtype, self.tile_n, self.stages = dtype, tile_n, stages

    @cute.jit
    def __call__(self, a_ptr: cute.Pointer, b_ptr: cute.Pointer, c_ptr: cute.Pointer, M: cutlass.Int32,
                 N: cutlass.Int32, K: cutlass.Int32, stream):
        k8, n8 = cute.assume(K, divby=common.ALIGN), cute.assume(N, divby=common.ALIGN)
        a = cute.make_tensor(a_ptr, cute.make_layout((M, K), stride=(k8, 1)))
        b = cute.make_tensor(b_ptr, cute.make_layout((N, K), stride=(1, n8)))   # [K, N] row-major = (N, K) N-major
        c = cute.make_tensor(c_ptr, cute.make_layout((M, N), stride=(n8, 1)))
        tile, dt = (TILE_M, self.tile_n, TILE_K), self.dtype
        # (2, 1, 1): the two consumer warpgroups split the tile's rows; each issues m64 x tile_n x k16
        tiled_mma = sm90.make_trivial_tiled_mma(dt, dt, OperandMajorMode.K, OperandMajorMode.MN, cutlass.Float32,
                                                (2, 1, 1), tiler_mn=(64, self.tile_n))
        a_layout = sm90.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile, dt, self.stages)
        b_layout = sm90.make_smem_layout_b(LayoutEnum.COL_MAJOR, tile, dt, self.stages)
        c_layout = sm90.make_smem_layout_epi(dt, LayoutEnum.ROW_MAJOR, (TILE_M, EPI_N), EPI_BUFFERS)
        tma_a, mA = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), a,
                                                cute.slice_(a_layout, (None, None, 0)), (TILE_M, TILE_K))
        tma_b, mB = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), b,
                                                cute.slice_(b_layout, (None, None, 0)), (self.tile_n, TILE_K))
        tma_c, mC = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), c,
                                                cute.slice_(c_layout, (None, None, 0)), (TILE_M, EPI_N))

        @cute.struct
        class Shared:
            ring: cute.struct.MemRange[cutlass.Int64, self.stages * 2]    # full[s], empty[s]
            sA: cute.struct.Align[cute.struct.MemRange[dt, cute.cosize(a_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[dt, cute.cosize(b_layout)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[dt, cute.cosize(c_layout)], 1024]

        self.shared = Shared
        tiles = ((M + TILE_M - 1) // TILE_M) * ((N + self.tile_n - 1) // self.tile_n)
        self.kernel(tma_a, mA, tma_b, mB, tma_c, mC, tiled_mma, a_layout, b_layout, c_layout).launch(
            grid=[tiles, 1, 1], block=[THREADS, 1, 1], min_blocks_per_mp=1, stream=stream)

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, tiled_mma: cute.TiledMma, a_layout: cute.ComposedLayout,
               b_layout: cute.ComposedLayout, c_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        m_tile, n_tile = self.raster(mC)
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_c)
        storage = cutlass.memory.SmemAllocator().allocate(self.shared)
        stage_bytes = (cute.size_in_bytes(self.dtype, cute.slice_(a_layout, (None, None, 0)))
                       + cute.size_in_bytes(self.dtype, cute.slice_(b_layout, (None, None, 0))))
        # full: one producer arrival + the TMA bytes; empty: one arrival per consumer warp (8)
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 8), tx_count=stage_bytes)
        sA = storage.sA.get_tensor(a_layout.outer, swizzle=a_layout.inner)    # (128, 64, stages)
        sB = storage.sB.get_tensor(b_layout.outer, swizzle=b_layout.inner)    # (tile_n, 64, stages)
        gA = cute.local_tile(mA, (TILE_M, TILE_K), (m_tile, None))            # (128, 64, K-blocks)
        gB = cute.local_tile(mB, (self.tile_n, TILE_K), (n_tile, None))       # (tile_n, 64, K-blocks)
        k_blocks = cute.size(gA, mode=[2])

        if warp < 4:
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp == 0:
                self.produce(ring, tma_a, gA, sA, tma_b, gB, sB, k_blocks)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            ctidx = tidx - 128                                                  # 0..255 among the consumers
            acc = self.consume(tiled_mma, ring, sA, sB, k_blocks, ctidx)
            sC = storage.sC.get_tensor(c_layout.outer, swizzle=c_layout.inner)
            self.epilogue(tiled_mma, acc, sC, tma_c, mC, m_tile, n_tile, ctidx, warp)

    @cute.jit
    def raster(self, mC):
        """This CTA's (tile row, tile column): in bands of BAND_ROWS tile rows, column by column in a band."""
        bid, _, _ = cute.arch.block_idx()
        m_tiles = (mC.shape[0] + TILE_M - 1) // TILE_M
        n_tiles = (mC.shape[1] + self.tile_n - 1) // self.tile_n
        band = bid // (BAND_ROWS * n_tiles)
        rows = cutlass.min(BAND_ROWS, m_tiles - band * BAND_ROWS)   # the last band may be shorter
        within = bid - band * BAND_ROWS * n_tiles
        return band * BAND_ROWS + within % rows, within // rows

    @cute.jit
    def produce(self, ring, tma_a, gA, sA, tma_b, gB, sB, k_blocks):
        """One warp: every K-block of A and B into the next free stage; `producer_acquire` waits on *empty*."""
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                           cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                           cute.group_modes(gB, 0, 2))
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        for kb in range(k_blocks):
            ring.producer_acquire(state)                  # the stage is empty; arm *full* with its byte count
            full = ring.producer_get_barrier(state)
            cute.copy(tma_a, tAgA[(None, kb)], tAsA[(None, state.index)], tma_bar_ptr=full)
            cute.copy(tma_b, tBgB[(None, kb)], tBsB[(None, state.index)], tma_bar_ptr=full)
            state.advance()
        ring.producer_tail(state)                         # do not exit while TMA writes are in flight

    @cute.jit
    def consume(self, tiled_mma, ring, sA, sB, k_blocks, ctidx):
        """Two warpgroups: WGMMA over the ring into fp32 registers; `consumer_wait` waits on *full*."""
        wg = tiled_mma.get_slice((ctidx // 128) * 128)
        tCrA = tiled_mma.make_fragment_A(wg.partition_A(sA))    # shared-memory descriptors, per stage
        tCrB = tiled_mma.make_fragment_B(wg.partition_B(sB))
        acc = cute.make_rmem_tensor(wg.partition_shape_C((TILE_M, self.tile_n)), cutlass.Float32)
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        acc.fill(0.0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.fence()
        for kb in range(k_blocks):
            ring.consumer_wait(read)                      # the stage's bytes have landed
            for k in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):   # 64 / 16 = 4 WGMMAs
                crd = (None, None, k, read.index)
                cute.gemm(tiled_mma, acc, tCrA[crd], tCrB[crd], acc)
            warpgroup.commit_group()
            read.advance()
            warpgroup.wait_group(1)                       # one K-block in flight: the one before it is done,
            if kb > 0:                                    # so its stage goes back to the producer
                ring.consumer_release(release)
                release.advance()
        warpgroup.wait_group(0)
        ring.consumer_release(release)
        return acc

    @cute.jit
    def epilogue(self, tiled_mma, acc, sC, tma_c, mC, m_tile, n_tile, ctidx, warp):
        """Registers -> bf16 -> stmatrix into a sub-tile buffer -> TMA store, 32 columns at a time."""
        copy_r2s = cute.make_tiled_copy_S(
            sm90.get_smem_store_op(LayoutEnum.ROW_MAJOR, self.dtype, cutlass.Float32),
            cute.make_tiled_copy_C_atom(cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4),
                                                            self.dtype), tiled_mma))
        thr = copy_r2s.get_slice(ctidx)
        tRS_sC = thr.partition_D(sC)                                   # (R2S, R2S_M, R2S_N, buffer)
        sub_f32 = cute.make_rmem_tensor(cute.shape(thr.partition_S(sC))[:3], cutlass.Float32)
        sub = cute.make_rmem_tensor(sub_f32.shape, self.dtype)
        tRS_acc = copy_r2s.retile(acc)
        per_sub = cute.size(sub_f32)
        gC = cute.zipped_divide(cute.local_tile(mC, (TILE_M, self.tile_n), (m_tile, n_tile)), (TILE_M, EPI_N))
        tCsC, tCgC = cpasync.tma_partition(tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC)
        stores = pipeline.PipelineTmaStore.create(
            num_stages=EPI_BUFFERS, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 256))
        sync = pipeline.NamedBarrier(barrier_id=1, num_threads=256)   # the consumers only
        for j in cutlass.range_constexpr(self.tile_n // EPI_N):
            for v in cutlass.range_constexpr(per_sub):                 # sub-tile j: a contiguous range of values
                sub_f32[v] = tRS_acc[j * per_sub + v]
            sub.store(sub_f32.load().to(self.dtype))
            buf = j % EPI_BUFFERS
            cute.copy(copy_r2s, sub, tRS_sC[(None, None, None, buf)])
            cute.arch.fence_proxy("async.shared", space="cta")         # stmatrix visible to the TMA engine
            sync.arrive_and_wait()
            if warp == 4:
                cute.copy(tma_c, tCsC[(None, buf)], tCgC[(None, (0, j))])
                stores.producer_commit()
                stores.producer_acquire()                              # the buffer written next is read out
            sync.arrive_and_wait()
        stores.producer_tail()


# ------------------------------------------------------------------------------------------------ host API

def _args(kernel: Gemm, a: int, b: int, c: int, M: int, N: int, K: int, stream):
    return (*common.pointers(kernel.dtype, a, b, c), *common.sizes(M, N, K), stream)


def _kernel(dtype: torch.dtype, tile_n: int, stages: int | None) -> Gemm:
    if tile_n not in (128, 256):
        raise ValueError(f"tile_n must be 128 or 256 (whole 64-column swizzle blocks of B), got {tile_n!r}")
    stages = 4 if stages is None else stages
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 2:
        raise ValueError(f"stages must be an int >= 2, got {stages!r}")
    from gemm_kernels.stages import stages as budget
    budget((TILE_M, tile_n, TILE_K), "staged", common.ARCH, epilogue_tile=(TILE_M, EPI_N),
           epilogue_buffers=EPI_BUFFERS, depth=stages)       # ValueError when that many stages do not fit
    return Gemm(common.cute_dtype(dtype), tile_n, stages)


def compile(M: int, N: int, K: int, *, dtype: torch.dtype = torch.bfloat16, tile_n: int = 256,
            stages: int | None = None, arch: str = common.ARCH, dump_dir=None):
    """Compile for `arch` with no GPU; workbook.sass.Artifacts (.ptx, .cubin, .sass). The kernel is
    shape-generic (M, N, K are arguments); the shape is checked as `gemm` would check it."""
    common.check_shape(M, N, K)
    kernel = _kernel(dtype, tile_n, stages)
    return common.compile_step(kernel, _args(kernel, 16, 16, 16, M, N, K, common.fake_stream()), arch, dump_dir)


@functools.lru_cache(maxsize=None)
def _launches(dtype: torch.dtype, tile_n: int, stages: int | None):
    kernel = _kernel(dtype, tile_n, stages)
    return kernel, common.launches_for(kernel, _args(kernel, 16, 16, 16, 1, 8, 8, common.fake_stream()))


def gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *, tile_n: int = 256,
         stages: int | None = None) -> torch.Tensor:
    """c = a @ b on an H100/H200 (see the module doc); written into `out` [M, N] when given."""
    M, N, K, out = common.operands(a, b, out)
    kernel, launches = _launches(a.dtype, tile_n, stages)
    addrs = (a.data_ptr(), b.data_ptr(), out.data_ptr())
    common.run(launches, addrs + (M, N, K), lambda s: _args(kernel, *addrs, M, N, K, s), a.device)
    return out
