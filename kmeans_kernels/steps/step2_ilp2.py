"""Step 2: ILP2, two compare-select chains per row instead of one.

What changed from step 1: `scan_tile` keeps two running winners per row, one over the thread's even columns
and one over its odd columns, and `merge_chains` folds the two by (score, index) once, after the last tile,
before the lanes merge. Nothing else.

Why. In step 1 every compare waits for the select before it: per row and tile a chain of 32 compare-selects,
64 dependent instructions (FSETP -> FSEL -> FSETP ...). An FSETP -> FSEL pair has a latency of several
cycles, and a warp with nothing else to issue waits it out. Two independent chains halve the depth (32
dependent instructions per row and tile) at the same instruction count, plus one merge per row per kernel
(not per tile): 2 rows x (compare + 2 selects). This is the first change of the seed PR, where it paid on a
B200.

What to expect on Hopper. The WGMMA layout already gives each thread two rows (r0 and r0 + 8): step 1 has two
independent chains per thread, and ptxas interleaves them. ILP2 turns two chains into four. With 8 consumer
warps on 4 schedulers, each scheduler has 2 warps x 2 chains to pick from in step 1; whether 4 chains per warp
help depends on whether the scan's issue rate, not its latency, bounds the tile. The notebook measures it.

The answer does not change: each chain is a serial scan in increasing column order (lowest index among its
equal scores, NaN never wins), and (score, index) is a total order, so merging chains then lanes in any order
gives the lowest index of the row's best score.

Supports bf16 and fp16 inputs, D a multiple of 16 from 16 to 512, any N, K >= 1 below 2^31.
"""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.tensor_utils
import cutlass.utils.hopper_helpers as sm90_utils
import torch

from kmeans_kernels.steps import host
from workbook import sass

BLOCK_M = 128          # points per CTA: two consumer warpgroups x 64 rows
BLOCK_N = 128          # centroids per tile: the WGMMA N
BLOCK_D = 64           # columns of D per ring slot: one 128-byte swizzle atom of 16-bit elements
MAX_STAGES = 8
CTA_SMEM_BYTES = 232448          # the most shared memory one CTA may use on sm_90 (227 KiB)
CONSUMER_WARPS = 8
PRODUCER_WARP = 8
THREADS = 32 * (CONSUMER_WARPS + 1)
NO_WINNER = -1


def stages_for(D: int) -> int:
    """Ring slots: what a CTA's shared memory holds after the resident point tile and 1 KiB of barriers."""
    x_bytes = BLOCK_M * _d_padded(D) * 2
    return min(MAX_STAGES, (CTA_SMEM_BYTES - x_bytes - 1024) // (BLOCK_N * BLOCK_D * 2))


def _d_padded(D: int) -> int:
    return -(-D // BLOCK_D) * BLOCK_D


# ---------------------------------------------------------------------------------------------------- the argmin

@cute.jit
def beats(score: cutlass.Float32, index: cutlass.Int32, best_score: cutlass.Float32, best_index: cutlass.Int32):
    """(score, index) comes first: smaller score, or an equal score with a smaller index (the tie rule)."""
    return score < best_score or (score == best_score and index < best_index)


CHAINS = 2


@cute.jit
def scan_tile(dots: cute.Tensor, half_norms: cute.Tensor, cols: cute.Tensor, best_score: cute.Tensor,
              best_index: cute.Tensor):
    """Fold a tile into the running winners of each row: chain h takes the columns j with j % 2 == h, in
    increasing order, strict <."""
    for r in cutlass.range_constexpr(cute.size(dots, mode=[0])):
        score0, index0 = best_score[0, r], best_index[0, r]
        score1, index1 = best_score[1, r], best_index[1, r]
        for j in cutlass.range_constexpr(0, cute.size(dots, mode=[1]), 2):
            s0 = half_norms[j] - dots[r, j]
            s1 = half_norms[j + 1] - dots[r, j + 1]
            take0 = s0 < score0                # NaN compares false: it never wins
            take1 = s1 < score1
            score0 = cutlass.Float32(cutlass.select_(take0, s0, score0))
            index0 = cutlass.Int32(cutlass.select_(take0, cols[j], index0))
            score1 = cutlass.Float32(cutlass.select_(take1, s1, score1))
            index1 = cutlass.Int32(cutlass.select_(take1, cols[j + 1], index1))
        best_score[0, r], best_index[0, r] = score0, index0
        best_score[1, r], best_index[1, r] = score1, index1


@cute.jit
def merge_chains(best_score: cute.Tensor, best_index: cute.Tensor):
    """Fold chain 1 into chain 0 by (score, index): an odd column wins a tie only with a lower index."""
    for r in cutlass.range_constexpr(cute.size(best_score, mode=[1])):
        take = beats(best_score[1, r], best_index[1, r], best_score[0, r], best_index[0, r])
        best_score[0, r] = cutlass.Float32(cutlass.select_(take, best_score[1, r], best_score[0, r]))
        best_index[0, r] = cutlass.Int32(cutlass.select_(take, best_index[1, r], best_index[0, r]))


@cute.jit
def merge_lanes(best_score: cute.Tensor, best_index: cute.Tensor):
    """Merge the winners of the 4 lanes that share each row (lanes 4q .. 4q+3), by (score, index)."""
    for r in cutlass.range_constexpr(cute.size(best_score, mode=[1])):
        score = best_score[0, r]
        index = best_index[0, r]
        for offset in cutlass.range_constexpr(1, 3):       # butterfly: exchange with lane ^ 1, then lane ^ 2
            other_score = cute.arch.shuffle_sync_bfly(score, offset=offset)
            other_index = cute.arch.shuffle_sync_bfly(index, offset=offset)
            take = beats(other_score, other_index, score, index)
            score = cutlass.Float32(cutlass.select_(take, other_score, score))
            index = cutlass.Int32(cutlass.select_(take, other_index, index))
        best_score[0, r] = score
        best_index[0, r] = index


# A thread's accumulator, viewed as (row, j): rows r0, r0 + 8 and its columns in increasing order j (register
# 2*row + col%2 + 4*(col//2) of the WGMMA fragment), the order the scan's tie rule needs.
ROW_COL = dict(shape=(2, (2, BLOCK_N // 8)), stride=(2, (1, 4)))


def _register(row: int, j: int) -> int:
    return (j % 2) + 2 * row + 4 * (j // 2)


# ---------------------------------------------------------------------------------------------------- the kernel

class AssignKernel:
    """One compiled kernel per (D, dtype); N and K are runtime values."""

    def __init__(self, D: int, dtype):
        self.D, self.dtype = D, dtype
        self.d_blocks = _d_padded(D) // BLOCK_D
        self.stages = stages_for(D)

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, c_ptr: cute.Pointer, c_sq_ptr: cute.Pointer, out_ptr: cute.Pointer,
                 N: cutlass.Int32, K: cutlass.Int32, stream: cuda.CUstream):
        x = cute.make_tensor(x_ptr, cute.make_layout((N, self.D), stride=(self.D, 1)))
        c = cute.make_tensor(c_ptr, cute.make_layout((K, self.D), stride=(self.D, 1)))
        c_sq = cute.make_tensor(c_sq_ptr, cute.make_layout(K))
        out = cute.make_tensor(out_ptr, cute.make_layout(N))
        d_pad = self.d_blocks * BLOCK_D
        k_major = cute.nvgpu.OperandMajorMode.K            # x and c are D-contiguous
        mma = sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, k_major, k_major, cutlass.Float32,
                                                (2, 1, 1), tiler_mn=(64, BLOCK_N))   # 2 warpgroups along M
        row_major = cutlass.tensor_utils.LayoutEnum.ROW_MAJOR
        x_smem = sm90_utils.make_smem_layout_a(row_major, (BLOCK_M, BLOCK_N, d_pad), self.dtype, 1)
        c_smem = sm90_utils.make_smem_layout_b(row_major, (BLOCK_M, BLOCK_N, BLOCK_D), self.dtype, self.stages)
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_x, gx = cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, x, cute.slice_(x_smem, (None, None, 0)),
                                                           (BLOCK_M, d_pad))
        tma_c, gc = cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, c, cute.slice_(c_smem, (None, None, 0)),
                                                           (BLOCK_N, BLOCK_D))

        @cute.struct
        class Shared:
            x_full: cute.struct.MemRange[cutlass.Int64, 2]
            ring: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sx: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(x_smem)], 1024]
            sc: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(c_smem)], 1024]

        self.shared = Shared
        self.kernel(tma_x, gx, tma_c, gc, c_sq, out, mma, x_smem, c_smem).launch(
            grid=(cute.ceil_div(N, BLOCK_M), 1, 1), block=[THREADS, 1, 1], smem=Shared.size_in_bytes(),
            stream=stream, preferred_smem_carveout=100)

    @cute.kernel
    def kernel(self, tma_x: cute.CopyAtom, mx: cute.Tensor, tma_c: cute.CopyAtom, mc: cute.Tensor,
               c_sq: cute.Tensor, out: cute.Tensor, mma: cute.TiledMma,
               x_smem: cute.ComposedLayout, c_smem: cute.ComposedLayout):
        N, K = mx.shape[0], mc.shape[0]
        tiles = cute.ceil_div(K, BLOCK_N)
        tidx, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp == PRODUCER_WARP:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_x)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_c)

        shared = cutlass.memory.SmemAllocator().allocate(self.shared)
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_WARPS)   # one arrive per warp
        x_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=shared.x_full.data_ptr(), num_stages=1, producer_group=producer,
            consumer_group=consumers, tx_count=cute.size_in_bytes(self.dtype, cute.slice_(x_smem, (None, None, 0))),
            defer_sync=True)
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=shared.ring.data_ptr(), num_stages=self.stages, producer_group=producer,
            consumer_group=consumers, tx_count=cute.size_in_bytes(self.dtype, cute.slice_(c_smem, (None, None, 0))),
            defer_sync=True)
        pipeline.pipeline_init_arrive(cluster_shape_mn=(1, 1), is_relaxed=True)
        sx = shared.sx.get_tensor(x_smem.outer, swizzle=x_smem.inner)
        sc = shared.sc.get_tensor(c_smem.outer, swizzle=c_smem.inner)
        # global tiles: x as (BLOCK_M, d_pad, point tile), c as (BLOCK_N, BLOCK_D, centroid tile, d block)
        gx = cute.local_tile(mx, (BLOCK_M, self.d_blocks * BLOCK_D), (None, 0))
        gc = cute.local_tile(mc, (BLOCK_N, BLOCK_D), (None, None))
        tma_sx, tma_gx = cute.nvgpu.cpasync.tma_partition(
            tma_x, 0, cute.make_layout(1), cute.group_modes(sx, 0, 2), cute.group_modes(gx, 0, 2))
        tma_sc, tma_gc = cute.nvgpu.cpasync.tma_partition(
            tma_c, 0, cute.make_layout(1), cute.group_modes(sc, 0, 2), cute.group_modes(gc, 0, 2))
        pipeline.pipeline_init_wait(cluster_shape_mn=(1, 1))

        if warp == PRODUCER_WARP:
            x_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
            x_pipe.producer_acquire(x_state)
            cute.copy(tma_x, tma_gx[(None, block)], tma_sx[(None, 0)], tma_bar_ptr=x_pipe.producer_get_barrier(x_state))
            x_pipe.producer_commit(x_state)
            slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
            for tile in cutlass.range(tiles, unroll=1):
                for db in cutlass.range_constexpr(self.d_blocks):
                    ring.producer_acquire(slot)
                    cute.copy(tma_c, tma_gc[(None, tile, db)], tma_sc[(None, slot.index)],
                              tma_bar_ptr=ring.producer_get_barrier(slot))
                    ring.producer_commit(slot)
                    slot.advance()
            ring.producer_tail(slot)
        else:
            lane = tidx % 32
            thr = mma.get_slice(tidx)
            frag_x = mma.make_fragment_A(thr.partition_A(sx))     # (MMA, 1, d_pad / 16, 1)
            frag_c = mma.make_fragment_B(thr.partition_B(sc))     # (MMA, 1, 4, stages)
            coords = thr.partition_C(cute.make_identity_tensor((BLOCK_M, BLOCK_N)))   # (row, col) of each register
            acc = cute.make_rmem_tensor(coords.shape, cutlass.Float32)
            best_score = cute.make_rmem_tensor(cute.make_layout((CHAINS, 2)), cutlass.Float32)
            best_index = cute.make_rmem_tensor(cute.make_layout((CHAINS, 2)), cutlass.Int32)
            best_score.fill(float("inf"))
            best_index.fill(NO_WINNER)
            x_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            x_pipe.consumer_wait(x_state)
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            for tile in cutlass.range(tiles, unroll=1):
                # WGMMA over the tile's d blocks, one commit group per ring slot; while every slot is held,
                # retire the oldest group first, or the producer could never fill the slot we wait for
                held = 0
                cute.nvgpu.warpgroup.fence()
                for db in cutlass.range_constexpr(self.d_blocks):
                    if cutlass.const_expr(held == self.stages):
                        cute.nvgpu.warpgroup.wait_group(held - 1)
                        ring.consumer_release(release)
                        release.advance()
                        held -= 1
                    ring.consumer_wait(read)
                    for s in cutlass.range_constexpr(BLOCK_D // 16):
                        mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, db + s > 0)
                        cute.gemm(mma, acc, frag_x[(None, None, db * (BLOCK_D // 16) + s, 0)],
                                  frag_c[(None, None, s, read.index)], acc)
                    cute.nvgpu.warpgroup.commit_group()
                    read.advance()
                    held += 1
                cute.nvgpu.warpgroup.wait_group(0)     # the tile's dot products are in acc
                for _ in cutlass.range_constexpr(held):
                    ring.consumer_release(release)
                    release.advance()
                self.argmin(acc, coords, c_sq, tile * BLOCK_N, K, lane, best_score, best_index)

            merge_chains(best_score, best_index)
            merge_lanes(best_score, best_index)
            if lane % 4 == 0:
                for r in cutlass.range_constexpr(2):
                    row = block * BLOCK_M + coords[_register(r, 0)][0]
                    if row < N:
                        out[row] = best_index[0, r]

    @cute.jit
    def argmin(self, acc: cute.Tensor, coords: cute.Tensor, c_sq: cute.Tensor, first: cutlass.Int32,
               K: cutlass.Int32, lane: cutlass.Int32, best_score: cute.Tensor, best_index: cute.Tensor):
        """Scores of this thread's 2 x 32 tile entries, folded into its running winners."""
        dots = cute.make_tensor(acc.iterator, cute.make_layout(**ROW_COL))
        cols = cute.make_rmem_tensor(cute.make_layout(BLOCK_N // 4), cutlass.Int32)
        half_norms = cute.make_rmem_tensor(cute.make_layout(BLOCK_N // 4), cutlass.Float32)
        for j in cutlass.range_constexpr(BLOCK_N // 4):
            col = first + coords[_register(0, j)][1]
            cols[j] = col
            # one load per column per thread (L1-cached); clamp the address, then +inf past K, branch-free
            norm = cutlass.Float32(0.5) * c_sq[cutlass.min(col, K - 1)]
            half_norms[j] = cutlass.Float32(cutlass.select_(col < K, norm, float("inf")))
        scan_tile(dots, half_norms, cols, best_score, best_index)


# ---------------------------------------------------------------------------------------------------- host side

def compile(D: int, dtype: torch.dtype = torch.bfloat16, arch: str = "sm_90a") -> sass.Artifacts:
    """Compile for sm_90a with no GPU: a workbook.sass.Artifacts with .ptx, .cubin and .sass."""
    host.check_shape(D, dtype)
    return host.compile(AssignKernel(D, host.DTYPES[dtype]), dtype, arch)


_launch = host.Launcher(AssignKernel)


def assign(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """Index of the winning centroid of every row of x (int32 [N], -1 where none wins), on an H100/H200."""
    return _launch(x, c, c_sq, out)
