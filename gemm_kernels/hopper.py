"""The Hopper (sm_90a) GEMM kernel in CuTe DSL: TMA + WGMMA + an mbarrier ring, warp-specialised, persistent.

    c = a @ b        a [M, K] and b [K, N] row-major (exactly what torch's `a @ b` takes), both bf16 or both
                     fp16 (`Config.dtype`), fp32 accumulation, c [M, N] row-major of that dtype.

This file is the device code, one `HopperGemm` per `hopper_options.Config`. The host side (checks, plan,
compile, launch) is `hopper_host`; the work list it walks is `hopper_worklist`; the epilogues are
`hopper_epilogue`; the traced build's stamps are read by `hopper_trace`.

Layouts. The tensor cores want A and B as (M, K) and (N, K) operands. `a` is K-major (K is contiguous).
`b` as torch stores it is [K, N] with N contiguous: we view it as an (N, K) tensor with strides (1, N),
which is an *N-major* (MN-major) operand. WGMMA reads MN-major 16-bit operands from shared memory directly
(the smem descriptor says which way the 128-byte swizzle runs), so no transpose is ever materialised.

One CTA per SM, 384 threads in three warpgroups for the 128-row tile (256 threads, two warpgroups, for the
64-row small-M tile, `Config.tile_m`):
  * warpgroup 0, the producer: one warp issues the TMA loads of A [tile_m x 64] and B [tile_n x 64] for each
    K-block into a ring of `stages` shared-memory slots; an mbarrier per slot says "full" (TMA landed, by
    byte count) and another says "empty" (every consumer warp is done reading it).
  * warpgroups 1 (and 2), the consumers: each owns 64 rows of the tile and issues WGMMA m64 x tile_n x k16
    from shared memory into fp32 registers (128 of them per thread for tile_n = 256), then runs the
    epilogue. Every count of consumer threads (barriers, queue readers, stream-K flags) follows from
    `Config.consumer_warpgroups`.

Persistent schedule. The grid is min(#work items, #slots). Slots take items from the work list
*dynamically*, in list order: the producer warp of each slot claims the next index from a global counter
and hands it to every warp of the slot through a small shared-memory queue (`claim`, `take`), so the items
in flight stay neighbours in the raster however the SMs drift (`dynamic=False` keeps the static walk: slot
i runs items i, i + slots, ...). A slot is one CTA, or with `cluster_m=2` a pair of CTAs stacked along M:
the pair runs a (2 x tile_m)-row item, each CTA TMA-loads half of the shared B tile and multicasts it to both, which
halves B's traffic from L2. With `cluster_n=2` the pair sits side by side along N instead: a (2 x tile_n)-column
item, each CTA loads half of the shared A tile and multicasts it, and its own B tile. The kernel handles two tile
widths:
  * B is always loaded with the wide TMA box, so the producer code and the byte count per stage never
    change; a narrow item just ignores the columns it does not own (they are real data or TMA's zero fill);
  * the consumers issue a narrower WGMMA (a second TiledMma, compile-time N = narrow width) over the first
    `width` rows of the B slot, into the first registers of the same accumulator (the WGMMA register layout
    puts the N/8 column groups outermost, so a narrow accumulator is a prefix of the wide one); it reads the
    wide slot through the wide operand descriptors, so its width need not be whole 64-column swizzle blocks;
  * the epilogue writes only the first `width` columns.
So one compiled kernel serves both widths; the branch is warp-uniform and sits outside the WGMMA issue.

Swapped operands (`Config.swap_ab`). WGMMA's M is 64 rows a warpgroup, its N any multiple of 8 up to 256: a tile
of our M in 64-row steps pads M = 96 to 128 rows of tensor-core work and M = 800 to 896. Swapped, the kernel
computes c^T = b^T a^T: its M' is our N, its N' our M, so our M runs along WGMMA's N (a tile 96 wide covers M = 96,
three of 288 cover M = 800). Only the views change (`views`, the major modes): A' is our b, M'-major, as B was;
B' our a, K-major; C' our c, column-major, written by the staged epilogue's transposing stmatrix. A width past
256 issues several 96-wide WGMMAs per k16 step (`tiled_mma_for`). Clusters along M' then share our A.

Tails. M and N tails: TMA zero-fills out-of-bounds loads, the TMA store clips, and the register epilogue
predicates every 16-byte store (the second CTA of a pair may own no rows of the last item; it still loads
and multicasts its half of B). K tail: zero-filled K-blocks add nothing. TMA needs 16-byte aligned row
strides, so K and N must be multiples of 8 (`hopper_options.check_shape`).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90
import torch
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from gemm_kernels.hopper_epilogue import Epilogues
from gemm_kernels.hopper_options import ALIGN, EPI_N, TILE_K, WGMMA_M, Config, wgmma_n
from gemm_kernels.hopper_trace import TRACE_COLS, TRACE_FIELDS, TRACE_SEGMENTS
from gemm_kernels.hopper_worklist import CONTRIBUTE, FINISH, SEGMENT_COLS

WARPGROUP = 128       # threads: the producer warpgroup, then Config.consumer_warpgroups consumer warpgroups
QUEUE_DEPTH = 2       # dynamic schedule: item indices in flight (claimed for the next item / read for this one)
PRODUCER_REGS, CONSUMER_REGS = 40, 232   # setmaxnreg: 128*40 + 256*232 <= 64K registers per SM (two consumers)
# the element type of a, b and c for each of hopper_options.DTYPES
ELEMENT_TYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}


class HopperGemm(Epilogues):
    """The kernel for one `Config`; `__call__` is the host-side @cute.jit entry point."""

    # How `views` lays out the operands (LayoutEnum: ROW_MAJOR is K-major for A and B): a K-major, b N-major; c's
    # is `Epilogues.c_major`. Swapped (`Config.swap_ab`), each is the other way (`__init__`).
    a_major, b_major = LayoutEnum.ROW_MAJOR, LayoutEnum.COL_MAJOR

    def __init__(self, config: Config):
        self.cfg = config
        if config.swap_ab:
            self.a_major, self.b_major, self.c_major = LayoutEnum.COL_MAJOR, LayoutEnum.ROW_MAJOR, LayoutEnum.COL_MAJOR
        self.element = ELEMENT_TYPES[config.dtype]
        self.tile = (config.tile_m, config.tile_n, TILE_K)
        self.staged = config.staged
        self.warpgroups = config.consumer_warpgroups
        self.consumer_threads = WARPGROUP * self.warpgroups

    # ---------------------------------------------------------------- host side (traced once per compile)
    @cute.jit
    def __call__(self, a_ptr: cute.Pointer, b_ptr: cute.Pointer, c_ptr: cute.Pointer, work_ptr: cute.Pointer,
                 counter_ptr: cute.Pointer, partials_ptr: cute.Pointer, trace_ptr: cute.Pointer, M: cutlass.Int32,
                 N: cutlass.Int32, K: cutlass.Int32,
                 num_items: cutlass.Int32, num_ctas: cutlass.Int32, stream):
        # Plain pointers and sizes make the launch cheap on the host (no DLPack per call); the layouts are
        # rebuilt here.
        a, b, c = self.views(a_ptr, b_ptr, c_ptr, M, N, K)
        row = SEGMENT_COLS * self.cfg.segments
        work = cute.make_tensor(work_ptr, cute.make_layout((num_items, row), stride=(row, 1)))
        # (next item, clusters done, stream-K flags...), all 0 between launches
        counter = cute.make_tensor(counter_ptr, cute.make_layout(2))
        partials = cute.make_tensor(partials_ptr, cute.make_layout(1))   # stream-K workspace (fp32), by pointer
        trace = cute.make_tensor(trace_ptr, cute.make_layout((num_ctas, TRACE_COLS), stride=(TRACE_COLS, 1)))
        cfg = self.cfg
        element = self.element

        tiled_mma = self.tiled_mma_for(cfg.tile_n)
        narrow_mma = self.tiled_mma_for(cfg.narrow_n) if cutlass.const_expr(cfg.narrow_n is not None) else tiled_mma

        a_layout = sm90.make_smem_layout_a(self.a_major, self.tile, element, cfg.stages)
        b_layout = sm90.make_smem_layout_b(self.b_major, self.tile, element, cfg.stages)
        tile_m = cfg.tile_m
        epi_layout = sm90.make_smem_layout_epi(element, self.c_major, (tile_m, EPI_N), cfg.epi_stages)

        a_rows = cfg.a_box_rows   # A's box: tile_m rows, or the top of each stage's A tile where M is shorter
        a_box = sm90.make_smem_layout_a(self.a_major, (a_rows, cfg.tile_n, TILE_K), element, 1)
        # The operand a pair shares is multicast: B along M (cluster_m), A along N (cluster_n).
        a_load = cpasync.CopyBulkTensorTileG2SMulticastOp() if cutlass.const_expr(cfg.cluster_n > 1) \
            else cpasync.CopyBulkTensorTileG2SOp()
        tma_a, tma_tensor_a = cpasync.make_tiled_tma_atom(
            a_load, a, cute.slice_(a_box, (None, None, 0)), (a_rows, TILE_K), num_multicast=cfg.cluster_n)
        b_load = cpasync.CopyBulkTensorTileG2SMulticastOp() if cutlass.const_expr(cfg.cluster_m > 1) \
            else cpasync.CopyBulkTensorTileG2SOp()
        tma_b, tma_tensor_b = cpasync.make_tiled_tma_atom(
            b_load, b, cute.slice_(b_layout, (None, None, 0)), (cfg.tile_n, TILE_K), num_multicast=cfg.cluster_m)
        if cutlass.const_expr(self.staged):
            tma_c, tma_tensor_c = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(), c, cute.slice_(epi_layout, (None, None, 0)), (tile_m, EPI_N))
        else:
            # the register epilogue stores with plain STG: encoding a TMA descriptor for C would cost host
            # time on every call for nothing, so the kernel gets A's in that unused argument
            tma_c, tma_tensor_c = tma_a, tma_tensor_a

        epi_elems = cute.cosize(epi_layout) if cutlass.const_expr(self.staged) else 0

        @cute.struct
        class SharedStorage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, cfg.stages * 2]
            queue_barriers: cute.struct.MemRange[cutlass.Int64, QUEUE_DEPTH * 2]
            queue: cute.struct.Align[cute.struct.MemRange[cutlass.Int32, QUEUE_DEPTH], 16]
            sA: cute.struct.Align[cute.struct.MemRange[element, cute.cosize(a_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[element, cute.cosize(b_layout)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[element, epi_elems], 1024]

        self.shared_storage = SharedStorage
        self.kernel(tma_a, tma_tensor_a, tma_b, tma_tensor_b, tma_c, tma_tensor_c, c, work, counter, partials, trace,
                    tiled_mma, narrow_mma, a_layout, b_layout, epi_layout).launch(
            grid=[num_ctas, 1, 1], block=[WARPGROUP + self.consumer_threads, 1, 1], cluster=[cfg.cluster_size, 1, 1],
            min_blocks_per_mp=1, stream=stream, use_pdl=cfg.pdl)

    def views(self, a_ptr, b_ptr, c_ptr, M, N, K):
        """The tensors over the three pointers: a (M, K) K-major, b [K, N] row-major as the N-major (N, K) operand,
        c (M, N) row-major. K and N are multiples of 8 (checked by the host API), which TMA needs to know.
        Swapped, the host passes our b, our a, c and the sizes (our N, our M, K): A' is our b as the M'-major
        (M', K), B' our a K-major, C' our c as the column-major (M', N')."""
        if cutlass.const_expr(self.cfg.swap_ab):
            k8, m8 = cute.assume(K, divby=ALIGN), cute.assume(M, divby=ALIGN)
            return (cute.make_tensor(a_ptr, cute.make_layout((M, K), stride=(1, m8))),
                    cute.make_tensor(b_ptr, cute.make_layout((N, K), stride=(k8, 1))),
                    cute.make_tensor(c_ptr, cute.make_layout((M, N), stride=(1, m8))))
        k8, n8 = cute.assume(K, divby=ALIGN), cute.assume(N, divby=ALIGN)
        return (cute.make_tensor(a_ptr, cute.make_layout((M, K), stride=(k8, 1))),
                cute.make_tensor(b_ptr, cute.make_layout((N, K), stride=(1, n8))),
                cute.make_tensor(c_ptr, cute.make_layout((M, N), stride=(n8, 1))))

    def tiled_mma_for(self, n):
        """The consumers' MMA at tile width n: (warpgroups, 1, 1), the consumer warpgroups split M; each issues
        m64 x n x k16 with the operands' major modes, or past WGMMA's widest several narrower ones per k16 step
        (`wgmma_n`: `cute.gemm` walks the MMA's N mode)."""
        return sm90.make_trivial_tiled_mma(self.element, self.element, self.a_major.sm90_mma_major_mode(),
                                           self.b_major.sm90_mma_major_mode(), cutlass.Float32,
                                           (self.warpgroups, 1, 1), tiler_mn=(WGMMA_M, wgmma_n(n)))

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC_tma: cute.Tensor, mC: cute.Tensor, work: cute.Tensor, counter: cute.Tensor,
               partials: cute.Tensor, trace: cute.Tensor, tiled_mma: cute.TiledMma, narrow_mma: cute.TiledMma,
               a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout, epi_layout: cute.ComposedLayout):
        cfg = self.cfg
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        cta, _, _ = cute.arch.block_idx()
        num_ctas, _, _ = cute.arch.grid_dim()
        # A cluster of cluster_m x cluster_n CTAs runs one work item of cluster_m x tile_m rows and cluster_n x
        # tile_n columns; CTA `rank` (rank_m, rank_n = rank % cluster_m, rank // cluster_m) owns one tile of it
        # (`corner`), loads 1/cluster_m of the B tile its column of CTAs shares and 1/cluster_n of the A tile its
        # row shares, each multicast to the CTAs that share it.
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster = cta // cfg.cluster_size
        num_clusters = num_ctas // cfg.cluster_size
        num_items = work.shape[0]

        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(self.staged):
                cpasync.prefetch_descriptor(tma_c)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        stage_bytes = (cfg.a_box_rows * TILE_K * self.element.width // 8
                       + cute.size_in_bytes(self.element, cute.slice_(b_layout, (None, None, 0))))
        # full[s]: one producer arrival + the TMA byte count (all of A and B land in every CTA);
        # empty[s]: one arrival per consumer warp of every CTA whose TMA writes into this slot.
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring_barriers.data_ptr(), num_stages=cfg.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     (cfg.cluster_m + cfg.cluster_n - 1) * self.consumer_threads // 32),
            tx_count=stage_bytes, cta_layout_vmnk=self.cta_layout(), defer_sync=True)
        # The dynamic schedule's queue: rank 0's producer warp writes each claimed item index into every CTA of
        # the cluster (4 bytes, counted by the 'full' barrier); its readers are the consumer warps and the
        # producer warp of every CTA, and an entry is reused only when all of them have read it (so its layout
        # puts every CTA in one column: each reader signals every CTA, not only its row and column as the ring's).
        queue_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.queue_barriers.data_ptr(), num_stages=QUEUE_DEPTH,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     cfg.cluster_size * (self.consumer_threads // 32 + 1)),
            tx_count=4, cta_layout_vmnk=cute.make_layout((1, cfg.cluster_size, 1, 1)), defer_sync=True)
        queue = storage.queue.data_ptr()
        pipeline.pipeline_init_arrive(cluster_shape_mn=(cfg.cluster_m, cfg.cluster_n), is_relaxed=True)

        sA = storage.sA.get_tensor(a_layout.outer, swizzle=a_layout.inner)   # (tile_m, 64, stages)
        sB = storage.sB.get_tensor(b_layout.outer, swizzle=b_layout.inner)   # (tile_n, 64, stages)

        pipeline.pipeline_init_wait(cluster_shape_mn=(cfg.cluster_m, cfg.cluster_n))
        if cutlass.const_expr(cfg.pdl):
            # set up while the kernel before drains; then wait for it (it may have written a, b, c or the
            # scratch), and let the next kernel's CTAs set up in turn
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()

        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp_idx == 0:
                self.produce(tma_a, mA, tma_b, mB, sA, sB, ring, work, queue_pipe, queue, counter, cluster,
                             num_clusters, rank, num_items)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            ctidx = tidx - WARPGROUP   # thread index among the consumer threads
            if cutlass.const_expr(self.staged):
                sC = storage.sC.get_tensor(epi_layout.outer, swizzle=epi_layout.inner)
            else:
                sC = None
            self.consume(tiled_mma, narrow_mma, sA, sB, sC, ring, work, queue_pipe, queue, counter, partials, trace,
                         cta, cluster, num_clusters, rank, num_items, ctidx, warp_idx, tma_c, mC_tma, mC)

    @cute.jit
    def produce(self, tma_a, mA, tma_b, mB, sA, sB, ring, work, queue_pipe, queue, counter, cluster, num_clusters,
                rank, num_items):
        """One warp: walk the work list, stream each segment's K-blocks of A and B into the ring."""
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.cfg.stages)
        claimed = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, QUEUE_DEPTH)
        taken = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, QUEUE_DEPTH)
        # The first item is known without the counter: load it at once; its queue entry (which this claim
        # publishes for the consumers) is read after those loads only to free the entry for reuse.
        item = self.first_item(cluster, num_clusters, num_items)
        claimed = self.claim(queue_pipe, queue, counter, rank, claimed, item, cluster, num_clusters, num_items,
                             first=True)
        if item < num_items:
            state = self.load_item(tma_a, mA, tma_b, mB, sA, sB, ring, work, item, rank, state)
            _, taken = self.take(queue_pipe, queue, item, num_clusters, taken)
            claimed = self.claim(queue_pipe, queue, counter, rank, claimed, item, cluster, num_clusters, num_items)
            item, taken = self.take(queue_pipe, queue, item, num_clusters, taken)
        while item < num_items:
            state = self.load_item(tma_a, mA, tma_b, mB, sA, sB, ring, work, item, rank, state)
            # the last loads of this item are issued: claim the next one now, while the ring still holds
            # `stages` K-blocks of work for the consumers, so the claim's round trip is hidden
            claimed = self.claim(queue_pipe, queue, counter, rank, claimed, item, cluster, num_clusters, num_items)
            item, taken = self.take(queue_pipe, queue, item, num_clusters, taken)
        ring.producer_tail(state)                     # do not exit while TMA writes are in flight
        if cutlass.const_expr(self.cfg.dynamic):
            queue_pipe.producer_tail(claimed)         # nor while the other CTA may still release queue entries
            self.reset_counter(counter, rank, num_clusters)

    @cute.jit
    def load_item(self, tma_a, mA, tma_b, mB, sA, sB, ring, work, item, rank, state):
        """Producer warp: stream the K-blocks of every segment of work-list row `item`; returns the ring position."""
        cm, cn = self.cfg.cluster_m, self.cfg.cluster_n
        for seg in cutlass.range_constexpr(self.cfg.segments):   # unrolled: a segment's fields load as one LDG.128
            col = seg * SEGMENT_COLS
            m0, n0 = self.corner(work[item, col], work[item, col + 1], rank)
            k0, k_count = work[item, col + 3], work[item, col + 4]
            # Offset the (coordinate) tensors to the item's corner: items need not sit on a tile grid.
            a_rows = self.cfg.a_box_rows
            gA = cute.local_tile(cute.domain_offset((self.a_origin(m0, mA.shape[0]), 0), mA), (a_rows, TILE_K),
                                 (0, None))
            sA_box = cute.local_tile(sA, (a_rows, TILE_K, self.cfg.stages), (0, 0, 0))
            gB = cute.local_tile(cute.domain_offset((n0, 0), mB), (self.cfg.tile_n, TILE_K), (0, None))
            # A shared operand's box is split between the CTAs that share it (each loads its share, the multicast
            # writes it into all of them): A's between the cn CTAs of a row, B's between the cm of a column.
            tAsA, tAgA = cpasync.tma_partition(tma_a, rank // cm, cute.make_layout(cn),
                                               cute.group_modes(sA_box, 0, 2), cute.group_modes(gA, 0, 2))
            tBsB, tBgB = cpasync.tma_partition(tma_b, rank % cm, cute.make_layout(cm),
                                               cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
            state = self.load_k_blocks(ring, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, k0, k_count, rank, state)
        return state

    @cute.jit
    def load_k_blocks(self, ring, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, k0, count, rank, state):
        """Producer warp: TMA-load K-blocks k0 .. k0 + count - 1 of A and B into the ring; returns its position.
        range(count) plus an offset, not range(k0, k0 + count): with the latter form ptxas serialized the
        consumers' WGMMAs (C7515; test_wgmmas_are_not_serialized)."""
        cm, cn = self.cfg.cluster_m, self.cfg.cluster_n
        # the multicasts' targets (ranks are column-major, rank = rank_m + cm * rank_n): A goes to the CTAs of
        # this CTA's row (its rank_m), B to those of its column (its rank_n)
        row_mask, column_mask = 0, (1 << cm) - 1
        for j in cutlass.range_constexpr(cn):
            row_mask |= 1 << (cm * j)
        to_row = cutlass.Int16(row_mask) << (rank % cm)
        to_column = cutlass.Int16(column_mask) << (cm * (rank // cm))
        for i in range(count):
            kb = k0 + i
            ring.producer_acquire(state)          # wait until slot is empty, arm its byte count
            full = ring.producer_get_barrier(state)
            if cutlass.const_expr(cn > 1):
                cute.copy(tma_a, tAgA[(None, kb)], tAsA[(None, state.index)], tma_bar_ptr=full, mcast_mask=to_row)
            else:
                cute.copy(tma_a, tAgA[(None, kb)], tAsA[(None, state.index)], tma_bar_ptr=full)
            if cutlass.const_expr(cm > 1):
                cute.copy(tma_b, tBgB[(None, kb)], tBsB[(None, state.index)], tma_bar_ptr=full, mcast_mask=to_column)
            else:
                cute.copy(tma_b, tBgB[(None, kb)], tBsB[(None, state.index)], tma_bar_ptr=full)
            state.advance()
        return state

    @cute.jit
    def consume(self, tiled_mma, narrow_mma, sA, sB, sC, ring, work, queue_pipe, queue, counter, partials, trace,
                cta, cluster, num_clusters, rank, num_items, ctidx, warp_idx, tma_c, mC_tma, mC):
        """The consumer warpgroups: WGMMA over the ring into fp32 registers, then the epilogue, segment after
        segment."""
        cfg = self.cfg
        tile_m = cfg.tile_m
        has_narrow = cutlass.const_expr(cfg.narrow_n is not None)
        # WGMMA partitions shared memory per warpgroup; registers per thread.
        wg_slice = tiled_mma.get_slice((ctidx // WARPGROUP) * WARPGROUP)
        tCrA = tiled_mma.make_fragment_A(wg_slice.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(wg_slice.partition_B(sB))
        acc = cute.make_rmem_tensor(wg_slice.partition_shape_C((tile_m, cfg.tile_n)), cutlass.Float32)

        if cutlass.const_expr(has_narrow):
            # The narrow WGMMA reads the same operands: its shared-memory descriptors (start, the stride between
            # 64-column swizzle blocks, the stride between 8-row K groups) are the wide ones', and its smaller
            # N just makes it read the first narrow_n columns of B, whole swizzle blocks or not. Its result is
            # a prefix of the wide accumulator's registers (column groups are the outermost value mode).
            acc_narrow_shape = narrow_mma.get_slice((ctidx // WARPGROUP) * WARPGROUP).partition_shape_C(
                (tile_m, cfg.narrow_n))
            acc_narrow = cute.make_tensor(acc.iterator, cute.make_layout(acc_narrow_shape))

        if cutlass.const_expr(self.staged):
            epi = self.staged_epilogue_setup(tiled_mma, sC, ctidx)
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, cfg.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, cfg.stages)
        tiles_done = cutlass.Int32(0)

        defer = cutlass.const_expr(cfg.defer_epilogue)
        if cutlass.const_expr(defer):
            # C of the previous item, as 16-bit pairs, stored 32 columns at a time behind this item's first K-blocks
            words = cute.make_rmem_tensor((cfg.tile_n // 32, 2, 4), cutlass.Int32)
            prev_m0, prev_n0, prev_width = cutlass.Int32(0), cutlass.Int32(0), cutlass.Int32(0)
        taken = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, QUEUE_DEPTH)
        tracing = cutlass.const_expr(cfg.trace)
        if cutlass.const_expr(tracing):
            self.stamp(trace, cta, 0, ctidx)
            traced = cutlass.Int32(0)          # segments recorded so far
        item, taken = self.take(queue_pipe, queue, cluster - num_clusters, num_clusters, taken)
        while item < num_items:
            for seg in range(cfg.segments):
                col = seg * SEGMENT_COLS
                m0, n0 = self.corner(work[item, col], work[item, col + 1], rank)
                width = work[item, col + 2]
                if cutlass.const_expr(cfg.cluster_n > 1):
                    # this CTA's share of the item's columns (uniform items: tile_n each)
                    width = cutlass.min(cutlass.max(width - rank // cfg.cluster_m * cfg.tile_n, 0), cfg.tile_n)
                k_count = work[item, col + 4]
                if k_count > 0:
                    if cutlass.const_expr(tracing):
                        at = 2 + cutlass.min(traced, TRACE_SEGMENTS - 1) * len(TRACE_FIELDS)
                        if ctidx < 32:
                            trace[cta, at] = cutlass.Int64(item)
                        self.stamp(trace, cta, at + 1, ctidx)
                        if ctidx < 32:
                            ring.consumer_wait(read)   # only to see when the first K-block lands; no state change
                        self.stamp(trace, cta, at + 2, ctidx)
                    is_narrow = width < cfg.tile_n
                    pending = None
                    if cutlass.const_expr(defer):
                        pending = (tiled_mma, words, mC, prev_m0, prev_n0, prev_width, ctidx)

                    tiled_mma.set(warpgroup.Field.ACCUMULATE, True)   # the K loop zeroes the accumulator first
                    if cutlass.const_expr(has_narrow):
                        narrow_mma.set(warpgroup.Field.ACCUMULATE, True)
                        if is_narrow:
                            read, release = self.mainloop(narrow_mma, acc_narrow, tCrA, tCrB, ring, read, release,
                                                          k_count, pending)
                        else:
                            read, release = self.mainloop(tiled_mma, acc, tCrA, tCrB, ring, read, release, k_count,
                                                          pending)
                    else:
                        read, release = self.mainloop(tiled_mma, acc, tCrA, tCrB, ring, read, release, k_count,
                                                      pending)
                    ring.consumer_release(release)
                    release.advance()
                    if cutlass.const_expr(tracing):
                        self.stamp(trace, cta, at + 3, ctidx)

                    to_c = cutlass.Boolean(True)
                    if cutlass.const_expr(cfg.stream_k):
                        to_c = self.settle(acc, work[item, col + 5], work[item, col + 6], work[item, col + 7],
                                           counter, partials, rank, ctidx)
                    if to_c:
                        if cutlass.const_expr(self.staged):
                            self.staged_epilogue(epi, acc, sC, tma_c, mC_tma, m0, n0, width, tiles_done, warp_idx)
                        elif cutlass.const_expr(defer):
                            self.pack_accumulator(acc, words)    # the accumulator is free again; C waits in `words`
                            prev_m0, prev_n0, prev_width = m0, n0, width
                        else:
                            self.register_epilogue(tiled_mma, acc, mC, m0, n0, width, ctidx)
                        tiles_done += 1
                    elif cutlass.const_expr(defer):
                        prev_width = cutlass.Int32(0)            # stored in this segment's first K-block already
                    if cutlass.const_expr(tracing):
                        self.stamp(trace, cta, at + 4, ctidx)
                        traced += 1
            item, taken = self.take(queue_pipe, queue, item, num_clusters, taken)
        if cutlass.const_expr(defer):
            self.store_words(tiled_mma, words, mC, prev_m0, prev_n0, prev_width, ctidx)   # the last item's C

        if cutlass.const_expr(self.staged):
            epi[-1].producer_tail()
        if cutlass.const_expr(tracing):
            self.stamp(trace, cta, 1, ctidx)

    def cta_layout(self):
        """The cluster as the pipelines' (V, M, N, K) layout: which CTAs multicast into each other's slots."""
        return cute.make_layout((1, self.cfg.cluster_m, self.cfg.cluster_n, 1))

    @cute.jit
    def a_origin(self, m0, M):
        """The first row of A this CTA loads for its rows from m0 (`Config.clamp_a`): m0 where a whole box fits
        below M, else the last box inside M (row 0 where M is shorter than a box), so that TMA fills no row with
        zeros; the accumulator's row r is then C's row a_origin + r, and the epilogue stores those from m0 on.
        The loads (`load_item`) and the stores (`store_words`) both ask here."""
        origin = m0
        if cutlass.const_expr(self.cfg.clamp_a):
            origin = cutlass.max(cutlass.min(m0, M - self.cfg.a_box_rows), 0)
        return origin

    @cute.jit
    def corner(self, m0, n0, rank):
        """This CTA's (first row, first column) in a work item whose corner is (m0, n0): the cluster's CTAs split
        the item's rows by rank_m = rank % cluster_m and its columns by rank_n = rank // cluster_m."""
        if cutlass.const_expr(self.cfg.cluster_m > 1):
            m0 = m0 + rank % self.cfg.cluster_m * self.cfg.tile_m
        if cutlass.const_expr(self.cfg.cluster_n > 1):
            n0 = n0 + rank // self.cfg.cluster_m * self.cfg.tile_n
        return m0, n0

    @cute.jit
    def stamp(self, trace, cta, col, ctidx):
        """Trace: the first consumer warp writes the global nanosecond timer into this CTA's column `col` (a
        whole warp: a branch on one lane, this near the WGMMAs, made ptxas serialize them, C7515)."""
        if ctidx < 32:
            trace[cta, col] = cute.arch.globaltimer()

    # ---------------------------------------------------------------- which item next
    # Static: cluster c runs items c, c + clusters, c + 2 * clusters, ... Dynamic: cluster c starts on item c,
    # then rank 0's producer warp claims each next item from a global counter and every warp of the cluster
    # reads it from the queue. Items then *start* in list order whatever each SM's speed, so the items in
    # flight stay neighbours in the banded raster; the static walk lets the SMs drift apart over many items,
    # and at 16384^3 read 1.6x the DRAM bytes of one-CTA-per-item launches (ncu on the H200:
    # data/measured/h200/probes/ncu_np_16384.txt).

    @cute.jit
    def first_item(self, cluster, num_clusters, num_items):
        """Cluster c's first item, known without the counter (which hands out the later ones), so that the
        first K-blocks are not behind a global atomic's round trip: row c, or with stream-K, when there are
        fewer whole rows than clusters, its unit."""
        item = cluster
        if cutlass.const_expr(self.cfg.dynamic and self.cfg.stream_k):
            whole = num_items - num_clusters
            if item >= whole:
                item = whole + cluster
        return item

    @cute.jit
    def claim(self, pipe, queue, counter, rank, claimed, current, cluster, num_clusters, num_items,
              first: cutlass.Constexpr = False):
        """Producer warp: wait until every reader is done with the next queue entry and arm its barrier for 4
        bytes; in rank 0, one lane takes a ticket from the counter and stores it into every CTA's entry.

        With stream-K the last `num_clusters` rows are the units, and cluster c runs unit c once its whole rows
        are done: were units claimed like rows, a cluster could claim (look ahead to) the very unit whose
        partial its own FINISH is waiting for, and wait forever. `current`: the row being loaded. `first`:
        publish `current`, the cluster's first item (`first_item`), and take no ticket."""
        if cutlass.const_expr(self.cfg.dynamic):
            pipe.producer_acquire(claimed)
            if rank == 0:
                if cute.arch.lane_idx() == 0:
                    if cutlass.const_expr(first):
                        ticket = current
                    else:
                        # tickets 0 .. num_clusters - 1 went out as first items
                        ticket = cute.arch.atomic_add(counter.iterator, cutlass.Int32(1)) + num_clusters
                    if cutlass.const_expr(self.cfg.stream_k and not first):
                        whole = num_items - num_clusters
                        if ticket >= whole:
                            ticket = whole + cluster
                            if current >= whole:
                                ticket = num_items       # this cluster's unit is loaded: it is done
                    for peer in cutlass.range_constexpr(self.cfg.cluster_size):
                        cute.arch.store_async_dsmem(queue + claimed.index, ticket,
                                                    pipe.producer_get_barrier(claimed), peer)
            claimed.advance()
        return claimed

    @cute.jit
    def take(self, pipe, queue, item, num_clusters, taken):
        """Every warp: the item after `item` (num_items or more: none left). `taken` is the queue position."""
        if cutlass.const_expr(self.cfg.dynamic):
            pipe.consumer_wait(taken)
            item = cute.make_tensor(queue, cute.make_layout(QUEUE_DEPTH))[taken.index]
            pipe.consumer_release(taken)
            taken.advance()
        else:
            item = item + num_clusters
        return item, taken

    @cute.jit
    def reset_counter(self, counter, rank, num_clusters):
        """The last cluster to finish zeroes the counter for the next launch (every cluster has taken its last
        ticket before it counts itself done, so nobody can read the counter after that)."""
        if rank == 0:
            if cute.arch.lane_idx() == 0:
                done = cute.arch.atomic_add(counter.iterator + 1, cutlass.Int32(1), sem="acq_rel", scope="gpu")
                if done == num_clusters - 1:
                    counter[0] = cutlass.Int32(0)
                    counter[1] = cutlass.Int32(0)

    # ---------------------------------------------------------------- stream-K: partial sums between slots
    @cute.jit
    def settle(self, acc, role, flag, arg, counter, partials, rank, ctidx):
        """After a segment's K loop: True if `acc` now holds the item's whole sum, to be written to C.

        CONTRIBUTE: store this warpgroup's fp32 partial in workspace slot `arg`, then count it on flag `flag`.
        FINISH: wait until `arg` partials are counted on `flag`, add them (slots flag .. flag + arg - 1) and reset
        the flag for the next launch. Every wait is for a segment that starts its unit and never waits itself,
        and each unit runs on a cluster of its own (`claim`), so the waits cannot form a cycle."""
        wg, t = ctidx // WARPGROUP, ctidx % WARPGROUP
        group = pipeline.NamedBarrier(barrier_id=2 + wg, num_threads=WARPGROUP)   # this warpgroup only
        flag_ptr = counter.iterator + 2 + (flag * self.cfg.cluster_size + rank) * self.warpgroups + wg
        if role == CONTRIBUTE:
            self.partial(acc, partials, arg, rank, ctidx).store(self.registers(acc).load())
            group.arrive_and_wait()            # all 128 threads' stores are issued ...
            if t == 0:                         # ... and one release makes them visible with the count
                cute.arch.fence_acq_rel_gpu()
                cute.arch.red(flag_ptr, cutlass.Int32(1), op="add", dtype=cutlass.Int32, sem="relaxed",
                              scope="gpu")
        if role == FINISH:
            if t == 0:
                seen = cute.arch.load(flag_ptr, cutlass.Int32, sem="acquire", scope="gpu")
                while seen != arg:
                    seen = cute.arch.load(flag_ptr, cutlass.Int32, sem="acquire", scope="gpu")
                cute.arch.store(flag_ptr, cutlass.Int32(0))   # nobody counts on it again in this launch
            group.arrive_and_wait()
            regs = self.registers(acc)
            for c in range(arg):
                regs.store(regs.load() + self.partial(acc, partials, flag + c, rank, ctidx).load())
        return role != CONTRIBUTE

    @cute.jit
    def registers(self, acc):
        """The accumulator's registers as (4, n / 4): the order does not matter, only that both sides agree."""
        return cute.make_tensor(acc.iterator, cute.make_layout((4, cute.size(acc) // 4)))

    @cute.jit
    def partial(self, acc, partials, slot, rank, ctidx):
        """This thread's (4, n / 4) floats of workspace slot `slot`: thread t's column j sits at
        ((j * 128) + t) * 4, so a warp's 16-byte accesses cover 512 contiguous bytes."""
        n = cute.size(acc)
        wg, t = ctidx // WARPGROUP, ctidx % WARPGROUP
        base = ((slot * self.cfg.cluster_size + rank) * self.warpgroups + wg) * (WARPGROUP * n) + t * 4
        return cute.make_tensor(partials.iterator + cute.assume(base, divby=4),
                                cute.make_layout((4, n // 4), stride=(1, 4 * WARPGROUP)))

    @cute.jit
    def mainloop(self, mma, acc, tCrA, tCrB, ring, read, release, k_blocks, pending=None):
        """The K loop of one item at one tile width; returns the advanced ring positions.

        One copy per width, chosen once per item: a width branch *inside* this loop makes ptxas close the
        WGMMA group at the join and insert an empty one, so `wait_group(1)` would wait on the k-block just
        issued (notes/gemm-vs-cutlass.md). `pending`: the previous item's C (`store_words` arguments), stored
        one 32-column group behind each of the first 8 K-blocks' WGMMAs, so the stores overlap them.

        The loop zeroes its own width's accumulator and waits for its last WGMMA group itself: zeroing all of it
        before the width branch, or waiting after the join, let ptxas see other instructions define accumulator
        registers inside a WGMMA group, and it then serialized every WGMMA (warnings C7511/C7515: each WGMMA
        waits for the one before, 8-30 % slower; test_wgmmas_are_not_serialized)."""
        acc.fill(0.0)
        warpgroup.fence()
        first = 0
        if cutlass.const_expr(pending is not None):
            # The first K-blocks, peeled: behind each one's WGMMAs goes one 32-column group of the last item's
            # C, so its stores trickle out over several K-blocks instead of stalling one (all SMs end their rows
            # together; stored at once, their C meets in the L2 and takes ~1.8 us per row: `hopper_host.timeline`).
            groups = self.cfg.tile_n // 32
            for j in cutlass.range_constexpr(groups):
                if j < k_blocks:
                    ring.consumer_wait(read)
                    self.mma_k_block(mma, acc, tCrA, tCrB, read.index)
                    warpgroup.commit_group()
                    read.advance()
                self.store_words(*pending, groups=(j,))
                if j < k_blocks:
                    warpgroup.wait_group(1)
                    if cutlass.const_expr(j > 0):
                        ring.consumer_release(release)
                        release.advance()
            first = cutlass.min(k_blocks, groups)
        for kb in range(first, k_blocks):
            ring.consumer_wait(read)              # slot full: the TMA bytes have landed
            self.mma_k_block(mma, acc, tCrA, tCrB, read.index)
            warpgroup.commit_group()
            read.advance()
            # Keep one K-block of WGMMAs in flight; the one before it is finished, so free its slot.
            warpgroup.wait_group(1)
            if kb > 0:
                ring.consumer_release(release)
                release.advance()
        warpgroup.wait_group(0)
        return read, release

    @cute.jit
    def mma_k_block(self, mma, acc, tCrA, tCrB, slot):
        """Issue the WGMMAs (k16 each) of one 64-deep K-block held in ring slot `slot`."""
        for k in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            crd = (None, None, k, slot)
            cute.gemm(mma, acc, tCrA[crd], tCrB[crd], acc)
