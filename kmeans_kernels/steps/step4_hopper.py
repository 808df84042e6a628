"""Step 4: keep the tensor cores busy while the argmin runs: two CTAs per SM, or one CTA with wide tiles whose
two warpgroups take turns (ping-pong).

What changed from step 3. In steps 1-3 a CTA alternates: both warpgroups issue a tile's WGMMAs, wait for them,
and fold the tile on the CUDA cores while the tensor cores of the SM have nothing to do. Two ways to fill that gap:

* two CTAs per SM (`wide=False`): while one CTA folds, the other's WGMMAs run. Each CTA then gets half the SM's
  shared memory, so the ring shrinks (`stages_for`), and at most 65536 / (2 x 288) = 113 registers per thread
  (112: whole warps' allocations), which the launch asks ptxas for with `min_blocks_per_mp=2`. A 64 x 128 fp32
  accumulator is 64 registers, so the kernel fits. At D = 128: point tile 32 KiB + 5 slots of 16 KiB per CTA
  (was 8 slots). Beyond D = 256 a second CTA would get fewer than 3 ring slots, and the kernel runs one CTA per SM.
* one CTA with 256-wide centroid tiles (`wide=True`): a 64 x 256 accumulator (128 registers) leaves no room for a
  second CTA, so the two warpgroups ping-pong: warpgroup 0 issues tile t, then lets warpgroup 1 issue its tile t
  (named barriers 1 and 2), and folds tile t while warpgroup 1's WGMMAs run. Each warpgroup gives its ring slots
  back one by one as its WGMMAs retire. A WGMMA 64 x 256 x 16 reads the point tile's 64 x 16 slice once for
  256 centroids instead of 128, and a tile costs half the barrier round trips per centroid. Ping-pong needs the
  ring to hold a whole tile (slots >= D / 64): D <= 256.

`assign(..., wide=None)` picks as the production kernel does (`kmeans_kernels.hopper.auto_variant`): wide where
D >= 256 and K >= 4096 (16 or more tiles per CTA to ping-pong over), two CTAs per SM elsewhere.

The argmin is step 3's (two chains, norms staged per warp and shuffled), on 64 columns per thread in wide tiles.

Supports bf16 and fp16 inputs, D a multiple of 16 from 16 to 512 (wide: to 256), any N, K >= 1 below 2^31.
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
BLOCK_N = 128          # centroids per tile: the WGMMA N ...
WIDE_BLOCK_N = 256     # ... and with wide=True
BLOCK_D = 64           # columns of D per ring slot: one 128-byte swizzle atom of 16-bit elements
MAX_STAGES = 8
CTA_SMEM_BYTES = 232448          # the most shared memory one CTA may use on sm_90 (227 KiB) ...
SM_SMEM_BYTES = 233472           # ... of the SM's 228 KiB, less 1 KiB the hardware reserves per resident CTA
MIN_STAGES_TWO_CTAS = 3          # two CTAs per SM only while each still gets a ring this deep
TURN_BARRIER = 1                 # named barriers 1, 2: "warpgroup 0's / 1's turn to issue" (0 is __syncthreads)
CONSUMER_WARPS = 8
PRODUCER_WARP = 8
THREADS = 32 * (CONSUMER_WARPS + 1)
NO_WINNER = -1


def _ring_slots(D: int, block_n: int, ctas: int) -> int:
    budget = min(CTA_SMEM_BYTES, SM_SMEM_BYTES // ctas - 1024)
    return (budget - BLOCK_M * _d_padded(D) * 2 - 1024) // (block_n * BLOCK_D * 2)


def ctas_per_sm(D: int, block_n: int = BLOCK_N) -> int:
    """2 where a 128-wide accumulator fits the 96-register cap and half an SM still holds a 3-slot ring, else 1."""
    return 2 if block_n == BLOCK_N and _ring_slots(D, block_n, 2) >= MIN_STAGES_TWO_CTAS else 1


def stages_for(D: int, block_n: int = BLOCK_N) -> int:
    """Ring slots: what this CTA's share of shared memory holds after the resident point tile and barriers."""
    return min(MAX_STAGES, _ring_slots(D, block_n, ctas_per_sm(D, block_n)))


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


@cute.jit
def stage_half_norms(c_sq: cute.Tensor, first: cutlass.Int32, K: cutlass.Int32, lane: cutlass.Int32,
                     slots: cutlass.Constexpr[int]):
    """Lane l's registers t < slots hold 0.5 * c_sq of tile column l + 32t (+inf past K): one coalesced load
    per register for the warp."""
    staged = cute.make_rmem_tensor(cute.make_layout(slots), cutlass.Float32)
    for t in cutlass.range_constexpr(slots):
        col = first + lane + 32 * t
        staged[t] = float("inf")
        if col < K:
            staged[t] = cutlass.Float32(0.5) * c_sq[col]
    return staged


# A thread's accumulator, viewed as (row, j): rows r0, r0 + 8 and its columns in increasing order j (register
# 2*row + col%2 + 4*(col//2) of the WGMMA fragment), the order the scan's tie rule needs.
def row_col(block_n: int) -> dict:
    return dict(shape=(2, (2, block_n // 8)), stride=(2, (1, 4)))


def _register(row: int, j: int) -> int:
    return (j % 2) + 2 * row + 4 * (j // 2)


# ---------------------------------------------------------------------------------------------------- the kernel

class AssignKernel:
    """One compiled kernel per (D, dtype, wide); N and K are runtime values."""

    def __init__(self, D: int, dtype, wide: bool = False):
        self.D, self.dtype = D, dtype
        self.d_blocks = _d_padded(D) // BLOCK_D
        self.block_n = WIDE_BLOCK_N if wide else BLOCK_N
        self.ping_pong = wide
        self.ctas = ctas_per_sm(D, self.block_n)
        self.stages = stages_for(D, self.block_n)
        if wide and self.stages < self.d_blocks:
            raise ValueError(f"wide tiles need a ring that holds a whole tile: D={D} leaves {self.stages} slots "
                             f"for {self.d_blocks}; use D <= 256 or wide=False")

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
                                                (2, 1, 1), tiler_mn=(64, self.block_n))   # 2 warpgroups along M
        row_major = cutlass.tensor_utils.LayoutEnum.ROW_MAJOR
        x_smem = sm90_utils.make_smem_layout_a(row_major, (BLOCK_M, self.block_n, d_pad), self.dtype, 1)
        c_smem = sm90_utils.make_smem_layout_b(row_major, (BLOCK_M, self.block_n, BLOCK_D), self.dtype, self.stages)
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_x, gx = cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, x, cute.slice_(x_smem, (None, None, 0)),
                                                           (BLOCK_M, d_pad))
        tma_c, gc = cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, c, cute.slice_(c_smem, (None, None, 0)),
                                                           (self.block_n, BLOCK_D))

        @cute.struct
        class Shared:
            x_full: cute.struct.MemRange[cutlass.Int64, 2]
            ring: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sx: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(x_smem)], 1024]
            sc: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(c_smem)], 1024]

        self.shared = Shared
        self.kernel(tma_x, gx, tma_c, gc, c_sq, out, mma, x_smem, c_smem).launch(
            grid=(cute.ceil_div(N, BLOCK_M), 1, 1), block=[THREADS, 1, 1], smem=Shared.size_in_bytes(),
            stream=stream, preferred_smem_carveout=100, min_blocks_per_mp=self.ctas)   # the register cap

    @cute.kernel
    def kernel(self, tma_x: cute.CopyAtom, mx: cute.Tensor, tma_c: cute.CopyAtom, mc: cute.Tensor,
               c_sq: cute.Tensor, out: cute.Tensor, mma: cute.TiledMma,
               x_smem: cute.ComposedLayout, c_smem: cute.ComposedLayout):
        N, K = mx.shape[0], mc.shape[0]
        tiles = cute.ceil_div(K, self.block_n)
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
        # global tiles: x as (BLOCK_M, d_pad, point tile), c as (block_n, BLOCK_D, centroid tile, d block)
        gx = cute.local_tile(mx, (BLOCK_M, self.d_blocks * BLOCK_D), (None, 0))
        gc = cute.local_tile(mc, (self.block_n, BLOCK_D), (None, None))
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
            coords = thr.partition_C(cute.make_identity_tensor((BLOCK_M, self.block_n)))   # (row, col) of each register
            acc = cute.make_rmem_tensor(coords.shape, cutlass.Float32)
            best_score = cute.make_rmem_tensor(cute.make_layout((CHAINS, 2)), cutlass.Float32)
            best_index = cute.make_rmem_tensor(cute.make_layout((CHAINS, 2)), cutlass.Int32)
            best_score.fill(float("inf"))
            best_index.fill(NO_WINNER)
            x_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            x_pipe.consumer_wait(x_state)
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            wg = tidx // 128
            for tile in cutlass.range(tiles, unroll=1):
                if cutlass.const_expr(self.ping_pong):
                    if wg + tile > 0:                   # my turn at the tensor cores (warpgroup 0 opens)
                        cute.arch.barrier(barrier_id=TURN_BARRIER + wg, number_of_threads=256)
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
                if cutlass.const_expr(self.ping_pong):
                    if wg + tile < tiles:               # the other's turn (not after warpgroup 1's last tile)
                        cute.arch.barrier_arrive(barrier_id=TURN_BARRIER + 1 - wg, number_of_threads=256)
                    for _ in cutlass.range_constexpr(held):   # slots back oldest first, as the WGMMAs retire
                        held -= 1
                        cute.nvgpu.warpgroup.wait_group(held)
                        ring.consumer_release(release)
                        release.advance()
                else:
                    cute.nvgpu.warpgroup.wait_group(0)     # the tile's dot products are in acc
                    for _ in cutlass.range_constexpr(held):
                        ring.consumer_release(release)
                        release.advance()
                self.argmin(acc, coords, c_sq, tile * self.block_n, K, lane, best_score, best_index)

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
        """Scores of this thread's 2 x block_n/4 tile entries, folded into its running winners."""
        dots = cute.make_tensor(acc.iterator, cute.make_layout(**row_col(self.block_n)))
        cols = cute.make_rmem_tensor(cute.make_layout(self.block_n // 4), cutlass.Int32)
        half_norms = cute.make_rmem_tensor(cute.make_layout(self.block_n // 4), cutlass.Float32)
        staged = stage_half_norms(c_sq, first, K, lane, self.block_n // 32)
        for j in cutlass.range_constexpr(self.block_n // 4):
            col = coords[_register(0, j)][1]          # column within the tile
            cols[j] = first + col
            # column col is register col // 32 (= j // 8) of lane col % 32
            half_norms[j] = cute.arch.shuffle_sync(staged[j // 8], offset=col % 32)
        scan_tile(dots, half_norms, cols, best_score, best_index)


# ---------------------------------------------------------------------------------------------------- host side

def compile(D: int, dtype: torch.dtype = torch.bfloat16, arch: str = "sm_90a", wide: bool = False) -> sass.Artifacts:
    """Compile for sm_90a with no GPU: a workbook.sass.Artifacts with .ptx, .cubin and .sass."""
    host.check_shape(D, dtype)
    return host.compile(AssignKernel(D, host.DTYPES[dtype], wide), dtype, arch)


def wide_for(N: int, D: int, K: int) -> bool:
    """The production rule (kmeans_kernels.hopper.auto_variant): wide tiles where D >= 256 and K >= 4096."""
    return D >= 256 and K >= 4096 and stages_for(D, WIDE_BLOCK_N) >= _d_padded(D) // BLOCK_D


_launch = host.Launcher(AssignKernel)


def assign(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor | None = None,
           out: torch.Tensor | None = None, wide: bool | None = None) -> torch.Tensor:
    """Index of the winning centroid of every row of x (int32 [N], -1 where none wins), on an H100/H200.
    `wide=None` picks by `wide_for`."""
    if wide is None:
        wide = x.ndim == 2 and c.ndim == 2 and wide_for(x.shape[0], x.shape[1], c.shape[0])
    return _launch(x, c, c_sq, out, wide=bool(wide))
