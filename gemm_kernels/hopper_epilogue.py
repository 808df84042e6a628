"""The Hopper GEMM's epilogues: from the consumers' fp32 accumulator to C, two ways (`Options.epilogue`).

c has the operands' dtype, bf16 or fp16 (`Config.dtype`): both epilogues round the fp32 sums to it.

  * "staged": registers -> c's dtype -> `stmatrix` into a shared-memory buffer of (tile_m x 32) sub-tiles ->
    TMA store (cp.async.bulk.tensor shared -> global). Costs STAGED_BUFFERS x 8 KiB of shared memory.
  * "register": registers -> c's dtype -> a 4x4 transpose of 32-bit words inside each quad of lanes (two
    butterfly shuffles) so that each lane holds 8 consecutive columns -> one 128-bit `st.global.v4` per
    lane. Uses no shared memory, which can go to pipeline stages instead (`gemm_kernels.stages`); with
    128x256x64 tiles it frees 16 KiB, less than one 48 KiB stage, so the ring stays 4 deep on Hopper.
    By default it is *deferred* (`Options.defer_epilogue`): the accumulator is packed to 16-bit registers
    (`pack_accumulator`) and the stores go out 32 columns at a time behind the next item's first 8 K-blocks
    (`HopperGemm.mainloop`), instead of holding the tensor cores while 132 SMs store C at once (~1.8 us a row
    on the H200, measured with `hopper_host.timeline`).

`Epilogues` is the part of `hopper.HopperGemm` that does this; it reads the kernel's `cfg`, `element` (the
element type of c) and `consumer_threads`.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90
from cutlass.cute.nvgpu import cpasync
from cutlass.tensor_utils import LayoutEnum

from gemm_kernels.hopper_options import EPI_N


class Epilogues:
    """The epilogue methods of `hopper.HopperGemm` (a mixin: `self.cfg` is the kernel's Config, `self.element`
    c's element type)."""

    # c's layout (`HopperGemm.views`): row-major; column-major makes the staged epilogue's stmatrix transpose. The
    # register epilogue stores rows of a row-major c only.
    c_major = LayoutEnum.ROW_MAJOR

    # ---------------------------------------------------------------- epilogue 1: registers -> smem -> TMA
    @cute.jit
    def staged_epilogue_setup(self, tiled_mma, sC, ctidx):
        """Once per CTA: the stmatrix copy from the accumulator layout to the sub-tile buffers, staging
        registers for one sub-tile, and the bulk-store group counter that guards buffer reuse."""
        copy_r2s = cute.make_tiled_copy_S(
            sm90.get_smem_store_op(self.c_major, self.element, cutlass.Float32),
            cute.make_tiled_copy_C_atom(
                cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(self.c_major.is_m_major_c(), 4), self.element),
                tiled_mma))
        thr_r2s = copy_r2s.get_slice(ctidx)
        tRS_sC = thr_r2s.partition_D(sC)                         # (R2S, R2S_M, R2S_N, buffer)
        rd_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
        tRS_f32 = cute.make_rmem_tensor(rd_shape, cutlass.Float32)
        tRS_c = cute.make_rmem_tensor(rd_shape, self.element)
        store_ring = pipeline.PipelineTmaStore.create(
            num_stages=self.cfg.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumer_threads))
        return copy_r2s, tRS_sC, tRS_f32, tRS_c, store_ring

    @cute.jit
    def staged_epilogue(self, epi, acc, sC, tma_c, mC_tma, m0, n0, width, tiles_done, warp_idx):
        """Per item: for each 32-column sub-tile the item owns, registers -> c's dtype -> stmatrix into a buffer,
        then one warp TMA-stores the buffer; the store clips rows and columns outside C."""
        copy_r2s, tRS_sC, tRS_f32, tRS_c, store_ring = epi
        cfg = self.cfg
        sync = pipeline.NamedBarrier(barrier_id=1, num_threads=self.consumer_threads)
        tRS_acc = copy_r2s.retile(acc)
        per_sub = cute.size(tRS_f32)
        gC = cute.local_tile(cute.domain_offset((m0, n0), mC_tma), (cfg.tile_m, cfg.tile_n), (0, 0))
        gC_sub = cute.zipped_divide(gC, (cfg.tile_m, EPI_N))    # ((tile_m, 32), (1, tile_n / 32))
        tCsC, tCgC = cpasync.tma_partition(tma_c, 0, cute.make_layout(1),
                                           cute.group_modes(sC, 0, 2), gC_sub)
        n_sub = cfg.tile_n // EPI_N
        for j in cutlass.range_constexpr(n_sub):
            if j * EPI_N < width:
                # Accumulator values of sub-tile j (column groups are outermost, so a contiguous range).
                for v in cutlass.range_constexpr(per_sub):
                    tRS_f32[v] = tRS_acc[j * per_sub + v]
                tRS_c.store(tRS_f32.load().to(self.element))
                buf = (tiles_done * n_sub + j) % cfg.epi_stages
                cute.copy(copy_r2s, tRS_c, tRS_sC[(None, None, None, buf)])
                cute.arch.fence_proxy("async.shared", space="cta")   # make stmatrix visible to TMA
                sync.arrive_and_wait()
                if warp_idx == 4:
                    cute.copy(tma_c, tCsC[(None, buf)], tCgC[(None, (0, j))])
                    store_ring.producer_commit()
                    store_ring.producer_acquire()      # the buffer we reuse next is read out
                sync.arrive_and_wait()

    # ---------------------------------------------------------------- epilogue 2: registers -> global
    @cute.jit
    def register_epilogue(self, tiled_mma, acc, mC, m0, n0, width, ctidx):
        """128-bit stores straight from registers: the accumulator packed to pairs of c's dtype, then stored.

        WGMMA leaves lane q of each quad (q = lane % 4) with columns 8g + 2q and 8g + 2q + 1 of every
        8-column group g, at rows r and r + 8. Four adjacent groups (32 columns) are thus a 4x4 matrix of
        32-bit pairs of 16-bit values spread over the quad, one row per lane; transposing it with two butterfly
        shuffles (xor 1, xor 2) leaves lane q with all 8 columns of group 4j + q: one 16-byte store.
        """
        words = cute.make_rmem_tensor((self.cfg.tile_n // 32, 2, 4), cutlass.Int32)
        self.pack_accumulator(acc, words)
        self.store_words(tiled_mma, words, mC, m0, n0, width, ctidx)

    @cute.jit
    def pack_accumulator(self, acc, words):
        """words[j, h, t]: the pair of c's dtype this thread holds in column group 4j + t, row half h."""
        block = cute.make_rmem_tensor((2, 2, 4), cutlass.Float32)      # (pair, row half, group) of 32 cols
        block_c = cute.make_rmem_tensor((2, 2, 4), self.element)
        for j in cutlass.range_constexpr(self.cfg.tile_n // 32):
            for h in cutlass.range_constexpr(2):
                for t in cutlass.range_constexpr(4):
                    for p in cutlass.range_constexpr(2):
                        block[p, h, t] = acc[(p, h, 4 * j + t), 0, 0]
            block_c.store(block.load().to(self.element))
            packed = cute.recast_tensor(block_c, cutlass.Int32)      # (1, 2, 4): word (h, t)
            for h in cutlass.range_constexpr(2):
                for t in cutlass.range_constexpr(4):
                    words[j, h, t] = packed[0, h, t]

    @cute.jit
    def store_words(self, tiled_mma, words, mC, m0, n0, width, ctidx, groups=None):
        """The quad transpose and one 16-byte store per (32 columns, row half); only the first `width` columns
        (a multiple of 8: one lane's store), only inside C, only this CTA's rows (from m0 on: the accumulator's
        rows start at `a_origin`, which lies above m0 where A's box was kept inside M). `groups`: which
        32-column groups (default all)."""
        cfg = self.cfg
        M, N = mC.shape
        origin = self.a_origin(m0, M)
        ldc = mC.stride[0]
        col_end = cutlass.min(N, n0 + width)       # this item's last column + 1, inside C
        q = ctidx % 4
        # The (row, col) of this thread's value (0, h, g) comes from the MMA's own partition of the tile.
        coords = tiled_mma.get_slice(ctidx).partition_C(cute.make_identity_tensor((cfg.tile_m, cfg.tile_n)))
        out = cute.make_rmem_tensor((4,), cutlass.Int32)
        for j in (range(cfg.tile_n // 32) if groups is None else groups):
            if j * 32 < width:
                for h in cutlass.range_constexpr(2):
                    w = _quad_transpose([words[j, h, 0], words[j, h, 1], words[j, h, 2], words[j, h, 3]], q)
                    row_in_tile, col0 = coords[(0, h, 4 * j), 0, 0]
                    row = origin + row_in_tile
                    col = n0 + (col0 - 2 * q) + 8 * q        # first column of group 4j + q
                    mine = row < M and col < col_end
                    if cutlass.const_expr(cfg.clamp_a):
                        mine = mine and row >= m0
                    if mine:
                        for t in cutlass.range_constexpr(4):
                            out[t] = w[t]
                        ptr = mC.iterator + (cutlass.Int64(row) * ldc + col)
                        cute.arch.store(ptr, out.load().ir_value())


def _quad_transpose(w, q):
    """Transpose a 4x4 matrix of 32-bit words held one row per lane by the 4 lanes of a quad.

    Lane q holds w[t] = W[q][t]; afterwards it holds W[t][q]. Each of the two steps swaps 2x2 blocks of
    the matrix between lanes q and q ^ m with one butterfly shuffle per pair of words. Plain Python on
    purpose: the loops unroll while tracing.
    """
    w = list(w)
    for m in (1, 2):
        upper = (q & m) != 0                     # does this lane keep the high half of each pair?
        for t in range(4):
            if t & m == 0:
                lo, hi = w[t], w[t | m]
                got = cute.arch.shuffle_sync_bfly(cutlass.select_(upper, lo, hi), offset=m)
                w[t] = cutlass.select_(upper, got, lo)
                w[t | m] = cutlass.select_(upper, hi, got)
    return w
