"""GEMM step 2: the register-direct epilogue (Hopper, sm_90a). One change from step 1: how c leaves.

    c = gemm(a, b)                    # as step 1: a [M, K], b [K, N] row-major bf16/fp16, fp32 accumulation
    art = compile(4096, 4096, 4096)   # no GPU needed

What changed. Step 1 moved the accumulator out through shared memory: stmatrix into a 128 x 32 buffer,
a fence, a barrier of 256 threads, a TMA store, a wait before the buffer is reused, eight times per tile.
Here each thread stores its part of c straight from registers with 16-byte `st.global.v4` (SASS STG.E.128):
no shared memory, no barrier, no TMA store. Everything else (the ring, the WGMMAs, the raster) is step 1's.

Why it needs a transpose. A 16-byte store is 8 consecutive bf16 columns of one row. After WGMMA, lane q of
each quad (q = lane % 4) holds only columns 8g + 2q and 8g + 2q + 1 of every 8-column group g of its two
rows: one 32-bit word (a bf16 pair) per group. Four adjacent groups (32 columns) are therefore a 4 x 4
matrix of words spread over the quad, one *row* per lane, while a store wants one *column* per lane.
Two butterfly shuffles (SHFL.BFLY, xor 1 then xor 2) transpose it: 4 shuffles per row half and 32 columns,
2 x 8 x 4 = 64 per thread for a 256-wide tile. Then lane q holds all 8 columns of group 4j + q.

The shared memory it frees (gemm_kernels.stages). The two 128 x 32 bf16 sub-tile buffers, 16 KiB: the CTA
now needs 4 x 48 + 1 = 193 KiB of its 227, and 34 KiB sit unused. A stage of this 128 x 256 tile is
48 KiB, so the freed bytes do not buy a fifth stage (5 x 48 + 1 = 241 > 227): step 3 is about where they do.
On this tile the register epilogue can only pay by being a cheaper epilogue, not by a deeper ring.

On the B200 the accumulator sits in tensor memory, and the shape of the `tcgen05.ld` that reads it decides:
our gemm_kernels.blackwell loads 32x32b, one row of c per thread, and needs no shuffle; seed 004 loads
16x256b, which hands each lane exactly the WGMMA layout above, and shuffles as this step does
(gemm_kernels.steps.evidence shows both).

Tails. Every 16-byte store is predicated on its row (< M) and its first column (< N; both multiples of 8,
so the whole store is inside c). The loads are step 1's: TMA zero-fills what lies outside A and B.
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
        tma_a, mA = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), a,
                                                cute.slice_(a_layout, (None, None, 0)), (TILE_M, TILE_K))
        tma_b, mB = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), b,
                                                cute.slice_(b_layout, (None, None, 0)), (self.tile_n, TILE_K))

        @cute.struct
        class Shared:
            ring: cute.struct.MemRange[cutlass.Int64, self.stages * 2]    # full[s], empty[s]
            sA: cute.struct.Align[cute.struct.MemRange[dt, cute.cosize(a_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[dt, cute.cosize(b_layout)], 1024]

        self.shared = Shared
        tiles = ((M + TILE_M - 1) // TILE_M) * ((N + self.tile_n - 1) // self.tile_n)
        self.kernel(tma_a, mA, tma_b, mB, c, tiled_mma, a_layout, b_layout).launch(
            grid=[tiles, 1, 1], block=[THREADS, 1, 1], min_blocks_per_mp=1, stream=stream)

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               mC: cute.Tensor, tiled_mma: cute.TiledMma, a_layout: cute.ComposedLayout,
               b_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        m_tile, n_tile = self.raster(mC)
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
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
            self.epilogue(tiled_mma, acc, mC, m_tile, n_tile, ctidx)

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
    def epilogue(self, tiled_mma, acc, mC, m_tile, n_tile, ctidx):
        """fp32 -> bf16 pairs, a 4 x 4 transpose of 32-bit words inside each quad of lanes, one 16-byte store
        per lane, row half and 32 columns, straight from registers to c (predicated on the row and column)."""
        M, N = mC.shape
        q = ctidx % 4                                                  # lane within its quad
        coords = tiled_mma.get_slice(ctidx).partition_C(cute.make_identity_tensor((TILE_M, self.tile_n)))
        block = cute.make_rmem_tensor((2, 2, 4), cutlass.Float32)      # (pair, row half, group) of 32 columns
        block_c = cute.make_rmem_tensor((2, 2, 4), self.dtype)
        out = cute.make_rmem_tensor((4,), cutlass.Int32)
        for j in cutlass.range_constexpr(self.tile_n // 32):
            for h in cutlass.range_constexpr(2):
                for t in cutlass.range_constexpr(4):
                    for p in cutlass.range_constexpr(2):
                        block[p, h, t] = acc[(p, h, 4 * j + t), 0, 0]
            block_c.store(block.load().to(self.dtype))
            words = cute.recast_tensor(block_c, cutlass.Int32)         # (1, 2, 4): word (h, t) is one bf16 pair
            for h in cutlass.range_constexpr(2):
                w = quad_transpose([words[0, h, t] for t in range(4)], q)
                row_in_tile, col0 = coords[(0, h, 4 * j), 0, 0]        # col0 = 32 j + 2 q: this lane's pair
                row = m_tile * TILE_M + row_in_tile
                col = n_tile * self.tile_n + col0 - 2 * q + 8 * q      # after the transpose: group 4 j + q
                if row < M and col < N:                                # col and N are multiples of 8
                    for t in cutlass.range_constexpr(4):
                        out[t] = w[t]
                    cute.arch.store(mC.iterator + (cutlass.Int64(row) * mC.stride[0] + col), out.load().ir_value())


def quad_transpose(w, q):
    """Lane q of a quad holds row q of a 4 x 4 matrix of 32-bit words (w[t] = W[q][t]); afterwards it holds
    column q (w[t] = W[t][q]). Two butterfly steps (xor 1, then xor 2), each swapping the 2 x 2 blocks that
    are out of place between lanes q and q ^ m, one shuffle per pair of words: 4 SHFL.BFLY per call.
    Plain Python on purpose: the loops unroll while tracing."""
    w = list(w)
    for m in (1, 2):
        upper = (q & m) != 0                       # this lane keeps the high half of each pair
        for t in range(4):
            if t & m == 0:
                lo, hi = w[t], w[t | m]
                got = cute.arch.shuffle_sync_bfly(cutlass.select_(upper, lo, hi), offset=m)
                w[t] = cutlass.select_(upper, got, lo)
                w[t | m] = cutlass.select_(upper, hi, got)
    return w


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
    budget((TILE_M, tile_n, TILE_K), "register", common.ARCH, depth=stages)   # ValueError when they do not fit
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
