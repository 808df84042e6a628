"""The Blackwell (sm_100a) GEMM kernel in CuTe DSL: c = a @ b, bf16/fp16 in and out, fp32 accumulation.

    c = blackwell_host.gemm(a, b)                              # B200 only: a [M, K], b [K, N], both row-major
    c = blackwell_host.gemm(a, b, schedule="balanced")         # seed 004's wave-tail balancing (N224/N192 tiles)
    c = blackwell_host.gemm(a, b, stages=4, epilogue="staged") # the staged epilogue the register one replaces
    art = blackwell_host.compile_gemm(4096, 4096, 4096, schedule="balanced")   # no GPU needed

This file is the device code, one `Sm100Gemm` per build; the options, the work list and the shared-memory
budget are `blackwell_options`, compiling and launching is `blackwell_host`.

Structure of the kernel (one cluster = one pair of CTAs on two SMs, 192 threads each):

* **tcgen05 MMA across the pair** (`cta_group::2`): one M256 x N x K16 instruction, issued by one thread
  of the leader CTA, reads the A rows of *both* CTAs (128 each) and N/2 columns of B from each CTA's
  shared memory, and writes a 128 x N fp32 accumulator into each CTA's tensor memory (TMEM). Splitting B
  across the pair halves the shared memory one stage needs: 16 KiB of A + 16 KiB of B.
* **TMA loads** (warp 5) fill a ring of `stages` x 32 KiB; the MMA warp (warp 4) drains it.
* **Two accumulators** in TMEM (2 x 256 of the 512 columns), so the epilogue of item i overlaps the
  main loop of item i+1.
* **Epilogue** (warps 0-3, one TMEM lane = one output row per thread), in 128 x 32 subtiles, two builds:
  - ``"staged"``: TMEM -> registers -> shared memory -> TMA store. Eight 128 x 32 bf16 staging buffers (a
    whole 128 x 256 accumulator) are 64 KiB of shared memory that the A/B ring cannot use, so the ring has 4
    stages (the seed's; the arithmetic in `gemm_kernels.stages` has room for 5).
  - ``"register"``: TMEM -> registers -> 128-bit ``st.global`` straight from registers, each thread
    writing 16-byte pieces of its own row. No shared-memory epilogue buffer at all, so the ring has 7
    stages (7 x 32 KiB = 224 KiB of the 227 KiB a CTA may use). Deeper ring = more K-steps of DRAM
    latency hidden.
* **Persistent schedule**: the grid is one cluster per CTA pair that fits on the GPU; pair p walks the
  work list items p, p + P, p + 2P, ... (P = pairs launched). The work list comes from
  `gemm_kernels.waves.plan` in schedule order: ``"uniform"`` is every item M256 x N256;
  ``"balanced"`` (seed 004, section 2) re-cuts some groups of N256 items into N224 or N192 items, scheduled
  last, so that the item count is a multiple of the pairs and the last wave is full of shorter items.

How one kernel runs items of three widths (the balanced schedule). The shared-memory ring is laid out once,
for the widest item: each CTA's B stage is 128 columns x 64 K in the 128-byte swizzle (MN-major, because b is
row-major [K, N]: 64 columns = one 128-byte swizzle row, 8 K-rows = one 1 KiB swizzle atom). An item of width
w in {256, 224, 192} differs in three places only:

1. TMA: CTA r loads its usual 128-column box, but starting at column ``n0 + r * w / 2``, so that its first
   w/2 columns are exactly the columns the MMA wants from it (the last 128 - w/2 are loaded and ignored;
   past the edge of b the TMA engine fills zeros).
2. MMA: the leader issues the N=w instruction. The instruction shape is compile-time in the instruction
   descriptor, so the build holds one MMA loop per width it may meet and branches on the item's width once per
   item (not per instruction). The narrow MMA reuses the *same* shared-memory descriptors as the N256 one
   (start address, strides, swizzle mode): a descriptor does not encode N, and, as we read the PTX ISA's
   canonical layouts, the MMA addresses B in 16-byte (8-element) core-matrix columns with the swizzle applied
   to each address, so w/2 = 112 or 96 columns read 14 or 12 of the 16 core-matrix columns of the
   128-column buffer, the second 64-column swizzle atom only partly. The cta_group::2 rule
   (N a multiple of 16, at most 256) is what makes every per-CTA half a whole number of core-matrix columns.
   The alternatives cost more: a separate B layout per width needs a partial 64-column swizzle atom in the
   TMA box anyway (112 and 96 are not multiples of 64) or a 32-byte swizzle for every item (8 TMA boxes of B
   per stage instead of 2, and more bank conflicts for the common N256 item); and a fixed N256 MMA with a
   narrow store would keep the tile's full MMA time, which is the time balancing exists to remove.
3. Epilogue: it drains w / 32 subtiles of the accumulator instead of 8, and writes only the item's columns.

Tails. M and N need not be multiples of 256, nor K of 64: TMA fills zeros for every element of a load box
outside A or B (zeros add nothing to the dot products), the staged epilogue's TMA store clips at the edges
of c, and the register epilogue predicates its 16-byte stores on the row and the 8-column chunk. Alignment
is the one hard rule: TMA needs every row of a, b and c to start 16-byte aligned, so K and N must be
multiples of 8 (a clear ValueError otherwise).

We have no B200: this module is verified here by compiling for sm_100a and reading the SASS/PTX
(tests/test_gemm_blackwell.py); `pytest -m gpu` on a B200 checks the numbers against torch. In particular the
narrow MMAs' reading of a partial swizzle atom (point 2) follows from the descriptor format and has been
checked only by compilation until a B200 runs the gpu tests.
"""
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.memory as memory
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
import torch
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, tcgen05
from cutlass.tensor_utils import LayoutEnum

from gemm_kernels.blackwell_options import (ALIGN_ELEMENTS, CTAS_PER_PAIR, DTYPES, EPI_SUBTILE_N, ROWS_PER_CTA,
                                            TILE_K, TILE_M, TILE_N, TILE_WIDTHS, stage_budget)

MMA_K = 16  # K of one tcgen05 bf16 MMA instruction
ACC_BUFFERS = 2  # 2 x 256 fp32 TMEM columns = all 512
TMEM_COLUMNS = 512
EPILOGUE_WARPS = (0, 1, 2, 3)  # 128 threads = the 128 TMEM lanes = the CTA's 128 rows
MMA_WARP = 4
TMA_WARP = 5
THREADS_PER_CTA = 32 * (len(EPILOGUE_WARPS) + 2)


def _cute_dtype(dtype: torch.dtype):
    if dtype not in DTYPES:
        raise ValueError(f"the Blackwell GEMM takes bf16 or fp16; got {dtype}")
    return cutlass.BFloat16 if dtype == torch.bfloat16 else cutlass.Float16


class Sm100Gemm:
    """One build of the kernel: `stages` A/B buffers, one epilogue, and the item widths it runs (a sub-tuple of
    TILE_WIDTHS, widest first); shapes come with the tensors."""

    def __init__(self, stages: int, epilogue: str, dtype: torch.dtype, widths: tuple[int, ...] = (TILE_N,)):
        self.budget = stage_budget(stages, epilogue, dtype)
        if not widths or any(w not in TILE_WIDTHS for w in widths) or tuple(sorted(set(widths), reverse=True)) != widths:
            raise ValueError(f"widths must be distinct members of {TILE_WIDTHS}, widest first; got {widths!r}")
        self.stages = stages
        self.epilogue = epilogue
        self.widths = widths
        self.io_dtype = _cute_dtype(dtype)
        self.acc_dtype = cutlass.Float32
        self.mma_tiler = (TILE_M, TILE_N, TILE_K)
        self.epi_tile = (ROWS_PER_CTA, EPI_SUBTILE_N)
        self.cluster_shape = (CTAS_PER_PAIR, 1, 1)

    def _tiled_mma(self, width: int):
        """The pair's M256 x N`width` x K16 MMA: A K-major (a is row-major), B MN-major (b is row-major [K, N])."""
        return cute.make_tiled_mma(tcgen05.MmaF16BF16Op(
            self.io_dtype, self.acc_dtype, (TILE_M, width, MMA_K), tcgen05.CtaGroup.TWO,
            tcgen05.OperandSource.SMEM, OperandMajorMode.K, OperandMajorMode.MN))

    @cute.jit
    def __call__(self, a: cute.Tensor, b_nk: cute.Tensor, c: cute.Tensor, items: cute.Tensor,
                 pairs: cutlass.Int32, stream: cuda.CUstream):
        """a (M, K) K-major, b_nk (N, K) N-major (the row-major [K, N] b, viewed), c (M, N) row-major,
        items (num_items, 3) int32 (m0, n0, width); launches `pairs` clusters of two CTAs."""
        tiled_mma = self._tiled_mma(TILE_N)  # the widest MMA lays out the ring and the TMA boxes
        a_smem = sm100_utils.make_smem_layout_a(tiled_mma, self.mma_tiler, self.io_dtype, self.stages)
        b_smem = sm100_utils.make_smem_layout_b(tiled_mma, self.mma_tiler, self.io_dtype, self.stages)

        pair_layout = cute.tiled_divide(cute.make_layout(self.cluster_shape), (tiled_mma.thr_id,))
        load_op = cpasync.CopyBulkTensorTileG2SMulticastOp(tcgen05.CtaGroup.TWO)
        tma_a, tma_a_tensor = cute.nvgpu.make_tiled_tma_atom_A(
            load_op, a, cute.slice_(a_smem, (None, None, None, 0)), self.mma_tiler, tiled_mma,
            pair_layout.shape)
        tma_b, tma_b_tensor = cute.nvgpu.make_tiled_tma_atom_B(
            load_op, b_nk, cute.slice_(b_smem, (None, None, None, 0)), self.mma_tiler, tiled_mma,
            pair_layout.shape)

        if cutlass.const_expr(self.epilogue == "staged"):
            c_kind = LayoutEnum.from_tensor(c)
            # as many staging buffers as fit the budget (8 x 8 KiB): the TMA stores of one item drain
            # while the next item's subtiles are being staged
            epi_buffers = self.budget.epilogue_bytes // (
                cute.size(self.epi_tile[0]) * cute.size(self.epi_tile[1]) * (self.io_dtype.width // 8))
            c_smem = sm100_utils.make_smem_layout_epi(self.io_dtype, c_kind, self.epi_tile, epi_buffers)
            tma_c, c_tensor = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(), c, cute.slice_(c_smem, (None, None, 0)), self.epi_tile)
        else:
            c_smem, tma_c, c_tensor = None, None, c

        self.kernel(tiled_mma, tma_a, tma_a_tensor, tma_b, tma_b_tensor, tma_c, c_tensor, items,
                    a_smem, b_smem, c_smem, pair_layout).launch(
            grid=(pairs * CTAS_PER_PAIR, 1, 1), block=(THREADS_PER_CTA, 1, 1),
            cluster=self.cluster_shape, stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor,
               tma_b: cute.CopyAtom, mB: cute.Tensor, tma_c, mC: cute.Tensor, items: cute.Tensor,
               a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout, c_smem, pair_layout: cute.Layout):
        io_dtype, acc_dtype, stages, epi_tile = self.io_dtype, self.acc_dtype, self.stages, self.epi_tile
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        rank_in_pair = cute.arch.block_idx_in_cluster()
        pair_coord = pair_layout.get_flat_coord(rank_in_pair)
        is_leader = rank_in_pair == 0
        pair = bidx // CTAS_PER_PAIR
        pairs = gdim // CTAS_PER_PAIR
        num_items = cute.size(items, mode=[0])

        if warp == TMA_WARP:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(self.epilogue == "staged"):
                cpasync.prefetch_descriptor(tma_c)

        @cute.struct
        class Barriers:
            ab_full_empty: cute.struct.MemRange[cutlass.Int64, stages * 2]
            acc_full_empty: cute.struct.MemRange[cutlass.Int64, ACC_BUFFERS * 2]
            tmem_dealloc: cutlass.Int64
            tmem_address: cutlass.Int32

        smem = memory.SmemAllocator()
        bars = smem.allocate(Barriers)

        tmem = memory.TmemAllocator(
            bars.tmem_address.ptr,
            barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=2, num_threads=32 * (len(EPILOGUE_WARPS) + 1)),
            allocator_warp_id=EPILOGUE_WARPS[0], is_two_cta=True,
            two_cta_tmem_dealloc_mbar_ptr=bars.tmem_dealloc.ptr)

        # A/B ring: the TMA warp produces, the leader's MMA warp consumes; one stage's bytes arrive
        # in both CTAs, so the leader's barrier counts the pair's bytes. A box is always full size (zeros
        # past the edges count too), so every item and every tail transfers the same bytes.
        stage_tx_bytes = (cute.size_in_bytes(io_dtype, cute.select(a_smem, mode=[0, 1, 2]))
                          + cute.size_in_bytes(io_dtype, cute.select(b_smem, mode=[0, 1, 2]))) * CTAS_PER_PAIR
        ab_producer, ab_consumer = pipeline.PipelineTmaUmma.create(
            barrier_storage=bars.ab_full_empty.data_ptr(), num_stages=stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread,
                cute.size(pair_layout, mode=[1]) + cute.size(pair_layout, mode=[2]) - 1),
            tx_count=stage_tx_bytes, cta_layout_vmnk=pair_layout).make_participants()
        # accumulators: the MMA warp produces, the epilogue warps of both CTAs consume
        acc_producer, acc_consumer = pipeline.PipelineUmmaAsync.create(
            barrier_storage=bars.acc_full_empty.data_ptr(), num_stages=ACC_BUFFERS,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, CTAS_PER_PAIR * len(EPILOGUE_WARPS)),
            cta_layout_vmnk=pair_layout).make_participants()
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_shape, is_relaxed=True)

        sA = smem.allocate_tensor(element_type=io_dtype, layout=a_smem.outer, byte_alignment=1024,
                                  swizzle=a_smem.inner)
        sB = smem.allocate_tensor(element_type=io_dtype, layout=b_smem.outer, byte_alignment=1024,
                                  swizzle=b_smem.inner)
        sC = None
        if cutlass.const_expr(self.epilogue == "staged"):
            sC = smem.allocate_tensor(element_type=io_dtype, layout=c_smem.outer, byte_alignment=1024,
                                      swizzle=c_smem.inner)

        thr_mma = tiled_mma.get_slice(rank_in_pair)
        # (bM, bK, RestM, RestK): A by M256 row blocks of the item grid; its K tail is zero-filled by TMA
        gA = cute.local_tile(mA, cute.slice_(self.mma_tiler, (None, 0, None)), (None, None))
        tCgA = thr_mma.partition_A(gA)
        tCrA = tiled_mma.make_fragment_A(sA)
        # the B descriptors of the N256 MMA; the narrow MMAs use them too (module doc, point 2)
        tCrB = tiled_mma.make_fragment_B(sB)
        acc_shape = tiled_mma.partition_shape_C(self.mma_tiler[:2])
        acc_layout = tiled_mma.make_fragment_C(cute.append(acc_shape, ACC_BUFFERS)).layout

        tAsA, tAgA = cpasync.tma_partition(
            tma_a, pair_coord[2], cute.make_layout(cute.size(pair_layout, mode=[2])),
            cute.group_modes(sA, 0, 3), cute.group_modes(tCgA, 0, 3))
        mask_a = cpasync.create_tma_multicast_mask(pair_layout, pair_coord, mcast_mode=2)
        mask_b = cpasync.create_tma_multicast_mask(pair_layout, pair_coord, mcast_mode=1)
        k_steps = cute.size(gA, mode=[3])

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_shape)

        if warp == TMA_WARP:
            # B's box is placed per item: CTA r starts at n0 + r * width / 2, so slice the N256 tile as the
            # leader would (its half starts at the tile's origin) and move the origin instead
            thr_mma_origin = tiled_mma.get_slice(0)
            item = pair
            while item < num_items:
                m_tile = items[item, 0] // TILE_M
                b_origin = items[item, 1] + rank_in_pair * (items[item, 2] // CTAS_PER_PAIR)
                gB = cute.local_tile(cute.domain_offset((b_origin, 0), mB),
                                     cute.slice_(self.mma_tiler, (0, None, None)), (0, None))
                tBsB, tBgB = cpasync.tma_partition(
                    tma_b, pair_coord[1], cute.make_layout(cute.size(pair_layout, mode=[1])),
                    cute.group_modes(sB, 0, 3), cute.group_modes(thr_mma_origin.partition_B(gB), 0, 3))
                tAgA_tile = tAgA[(None, m_tile, None)]
                for k in cutlass.range(k_steps):
                    slot = ab_producer.acquire_and_advance()
                    cute.copy(tma_a, tAgA_tile[(None, k)], tAsA[(None, slot.index)],
                              tma_bar_ptr=slot.barrier, mcast_mask=mask_a)
                    cute.copy(tma_b, tBgB[(None, k)], tBsB[(None, slot.index)],
                              tma_bar_ptr=slot.barrier, mcast_mask=mask_b)
                item += pairs
            # keep this CTA alive until the peer's MMA has released every stage it will signal
            ab_producer.tail()

        elif warp == MMA_WARP:
            tmem.wait_for_alloc()
            tAcc = cute.make_tensor(tmem.retrieve_ptr(acc_dtype), acc_layout)
            item = pair
            while item < num_items:
                if is_leader:  # one thread of the leader CTA issues the pair's MMAs
                    width = items[item, 2]
                    acc = acc_producer.acquire_and_advance()
                    tAcc_tile = tAcc[(None, None, None, acc.index)]
                    # one branch per item on its width (the instruction shape is compile-time), each with its own
                    # K loop. Kept inline: the ring's consumer state must flow from item to item, and a @cute.jit
                    # helper would get a copy of it.
                    for i in cutlass.range_constexpr(len(self.widths)):
                        if width == self.widths[i]:
                            mma = self._tiled_mma(self.widths[i])
                            # the buffer's first `width` TMEM columns, in this MMA's accumulator layout
                            acc_w = cute.make_tensor(tAcc_tile.iterator, mma.make_fragment_C(
                                mma.partition_shape_C((TILE_M, self.widths[i]))).layout)
                            mma.set(tcgen05.Field.ACCUMULATE, False)
                            for k in cutlass.range(k_steps):
                                slot = ab_consumer.wait_and_advance()
                                for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                                    cute.gemm(mma, acc_w, tCrA[(None, None, kb, slot.index)],
                                              tCrB[(None, None, kb, slot.index)], acc_w)
                                    mma.set(tcgen05.Field.ACCUMULATE, True)
                                slot.release()
                    acc.commit()
                item += pairs
            acc_producer.tail()

        elif warp < MMA_WARP:
            tmem.allocate(TMEM_COLUMNS)
            tmem.wait_for_alloc()
            tmem_ptr = tmem.retrieve_ptr(acc_dtype)
            tAcc = cute.make_tensor(tmem_ptr, acc_layout)

            # TMEM -> registers: a 32 x 32-bit load per warp gives each thread 32 columns of one row
            t2r = tcgen05.make_tmem_copy(
                cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32, tcgen05.Pack.NONE), acc_dtype),
                cute.flat_divide(tAcc[((None, None), 0, 0, 0)], epi_tile)[(None, None, 0, 0)])
            thr_t2r = t2r.get_slice(tidx)
            # (T2R, T2R_M, T2R_N, 1, EPI_N, ACC_BUFFER): subtile s of a buffer is its columns 32s .. 32s + 31
            tTR_tAcc = thr_t2r.partition_S(cute.flat_divide(tAcc[((None, None), 0, 0, None)], epi_tile))
            # one thread's registers for one subtile: shaped as its piece of a 128 x 32 subtile of c
            tTR_rAcc = cute.make_rmem_tensor(
                thr_t2r.partition_D(cute.local_tile(mC, epi_tile, (0, 0))).shape, acc_dtype)
            tTR_rC = cute.make_rmem_tensor(tTR_rAcc.shape, io_dtype)

            if cutlass.const_expr(self.epilogue == "register"):
                # c in 128 x 32 subtiles: (T2R, T2R_M, T2R_N, RestM, RestN), and the coordinates of each element
                tTR_gC = thr_t2r.partition_D(cute.local_tile(mC, epi_tile, (None, None)))
                tTR_cC = thr_t2r.partition_D(
                    cute.local_tile(cute.make_identity_tensor(mC.shape), epi_tile, (None, None)))
                self.register_epilogue(t2r, tTR_tAcc, tTR_rAcc, tTR_rC, tTR_gC, tTR_cC, items, acc_consumer,
                                       pair, pairs, num_items, rank_in_pair, mC.shape)
            else:
                self.staged_epilogue(t2r, tTR_tAcc, tTR_rAcc, tTR_rC, tidx, warp, sC, tma_c, mC, items,
                                     acc_consumer, pair, pairs, num_items, rank_in_pair)

            tmem.relinquish_alloc_permit()
            tmem.free(tmem_ptr)

    @cute.jit
    def register_epilogue(self, t2r, tTR_tAcc, tTR_rAcc, tTR_rC, tTR_gC, tTR_cC, items, acc_consumer,
                          pair, pairs, num_items, rank_in_pair, shape_mn):
        """TMEM -> registers -> 16-byte global stores, each thread its own row; predicated at the edges of c.
        Walks all of this pair's items itself, so the accumulator consumer's state stays inside one function."""
        store = cute.make_copy_atom(cute.nvgpu.CopyR2GOp(), self.io_dtype, num_bits_per_copy=128)
        M, N = shape_mn
        chunks = EPI_SUBTILE_N // ALIGN_ELEMENTS  # 16-byte stores per thread per subtile
        item = pair
        while item < num_items:
            row_tile = items[item, 0] // ROWS_PER_CTA + rank_in_pair
            col_tile = items[item, 1] // EPI_SUBTILE_N
            subtiles = items[item, 2] // EPI_SUBTILE_N
            acc = acc_consumer.wait_and_advance()
            for s in cutlass.range(subtiles):
                cute.copy(t2r, tTR_tAcc[(None, None, None, 0, s, acc.index)], tTR_rAcc)
                if s == subtiles - 1:
                    # the accumulator is in registers: hand TMEM back to the MMA warp before the last stores
                    cute.arch.fence_view_async_tmem_load()
                    with cute.arch.elect_one():
                        acc.release()
                tTR_rC.store(tTR_rAcc.load().to(self.io_dtype))
                gC = tTR_gC[(None, None, None, cutlass.Int64(row_tile), col_tile + s)]
                row, col = tTR_cC[(None, None, None, row_tile, col_tile + s)][0]
                if row < M:
                    if col + EPI_SUBTILE_N <= N:
                        cute.copy(store, tTR_rC, gC)
                    else:  # the right edge of c: N is a multiple of 8, so each 16-byte chunk is all in or all out
                        # the thread's 32 columns are contiguous in its row: (8 elements, chunks) views of them
                        rC_chunks = cute.flat_divide(cute.coalesce(tTR_rC), (ALIGN_ELEMENTS,))
                        gC_chunks = cute.flat_divide(cute.coalesce(gC), (ALIGN_ELEMENTS,))
                        for j in cutlass.range_constexpr(chunks):
                            if col + j * ALIGN_ELEMENTS < N:
                                cute.copy(store, rC_chunks[(None, j)], gC_chunks[(None, j)])
            item += pairs

    @cute.jit
    def staged_epilogue(self, t2r, tTR_tAcc, tTR_rAcc, tTR_rC, tidx, warp, sC, tma_c, mC, items, acc_consumer,
                        pair, pairs, num_items, rank_in_pair):
        """TMEM -> registers -> shared memory -> TMA store, one 128 x 32 subtile per store; the TMA store clips
        at the edges of c. Walks all of this pair's items itself, like `register_epilogue`."""
        epi_buffers = cute.size(sC, mode=[2])
        r2s = cute.make_tiled_copy_D(
            sm100_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, self.io_dtype, self.acc_dtype, t2r), t2r)
        thr_r2s = r2s.get_slice(tidx)
        tRS_sC = thr_r2s.partition_D(sC)
        tRS_rC = r2s.retile(tTR_rC)
        # (TMA, buffers) and (TMA, RestM, RestN): c in 128 x 32 subtiles
        tCsC, tCgC = cpasync.tma_partition(
            tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2),
            cute.group_modes(cute.local_tile(mC, self.epi_tile, (None, None)), 0, 2))
        stores = pipeline.PipelineTmaStore.create(
            num_stages=epi_buffers,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32 * len(EPILOGUE_WARPS)))
        epi_sync = pipeline.NamedBarrier(barrier_id=1, num_threads=32 * len(EPILOGUE_WARPS))
        # buffers are used round-robin across items: an item of 7 subtiles must not restart at buffer 0
        # while the previous item's store from buffer 0 may still be reading it
        stored = cutlass.Int32(0)
        item = pair
        while item < num_items:
            row_tile = items[item, 0] // ROWS_PER_CTA + rank_in_pair
            col_tile = items[item, 1] // EPI_SUBTILE_N
            subtiles = items[item, 2] // EPI_SUBTILE_N
            acc = acc_consumer.wait_and_advance()
            for s in cutlass.range(subtiles):
                cute.copy(t2r, tTR_tAcc[(None, None, None, 0, s, acc.index)], tTR_rAcc)
                if s == subtiles - 1:
                    cute.arch.fence_view_async_tmem_load()
                    with cute.arch.elect_one():
                        acc.release()
                tTR_rC.store(tTR_rAcc.load().to(self.io_dtype))
                buffer = stored % epi_buffers
                cute.copy(r2s, tRS_rC, tRS_sC[(None, None, None, buffer)])
                # the TMA engine reads shared memory through the async proxy
                cute.arch.fence_view_async_shared()
                epi_sync.arrive_and_wait()
                if warp == EPILOGUE_WARPS[0]:
                    cute.copy(tma_c, tCsC[(None, buffer)], tCgC[(None, row_tile, col_tile + s)])
                    stores.producer_commit()
                    stores.producer_acquire()  # the next buffer's old store has been read
                epi_sync.arrive_and_wait()
                stored += 1
            item += pairs
        stores.producer_tail()
