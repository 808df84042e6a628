"""bf16 GEMM for Hopper (sm_90a) in CuTe DSL: TMA + WGMMA + an mbarrier ring, warp-specialised, persistent.

    c = a @ b        a [M, K] row-major bf16, b [K, N] row-major bf16 (exactly what torch's `a @ b` takes),
                     fp32 accumulation, c [M, N] row-major bf16.

Layouts. The tensor cores want A and B as (M, K) and (N, K) operands. `a` is K-major (K is contiguous).
`b` as torch stores it is [K, N] with N contiguous: we view it as an (N, K) tensor with strides (1, N),
which is an *N-major* (MN-major) operand. WGMMA reads MN-major 16-bit operands from shared memory directly
(the smem descriptor says which way the 128-byte swizzle runs), so no transpose is ever materialised.

One CTA per SM, 384 threads, three warpgroups:
  * warpgroup 0, the producer: one warp issues the TMA loads of A [128 x 64] and B [tile_n x 64] for each
    K-block into a ring of `stages` shared-memory slots; an mbarrier per slot says "full" (TMA landed, by
    byte count) and another says "empty" (both consumers are done reading it).
  * warpgroups 1 and 2, the consumers: each owns 64 rows of the 128-row tile and issues WGMMA
    m64 x tile_n x k16 from shared memory into fp32 registers (128 of them per thread for tile_n = 256),
    then runs the epilogue.

Persistent schedule. The grid is min(#work items, #slots). The work list (rows of (m0, n0, width, ...) int32,
`work_rows`) is made by the planner (`gemm_kernels.waves.plan`) and reordered in bands of tile rows for
L2 reuse (`banded`, `band_rows_for`). Slots take items from it *dynamically*, in list order: the producer
warp of each slot claims the next index from a global counter and hands it to every warp of the slot
through a small shared-memory queue (`claim`, `take`), so the items in flight stay neighbours in the raster
however the SMs drift (`dynamic=False` keeps the static walk: slot i runs items i, i + slots, ...). The
"uniform" schedule is every tile at the widest width; the "balanced" one replaces some wide tiles by
narrower ones so that the last wave fills the GPU. A slot is one CTA, or with `cluster_m=2` (the default) a
pair of CTAs stacked along M: the pair runs a 256-row item, each CTA TMA-loads half of the shared B tile and
multicasts it to both, which halves B's traffic from L2. The kernel handles two tile widths:
  * B is always loaded with the wide TMA box, so the producer code and the byte count per stage never
    change; a narrow item just ignores the columns it does not own (they are real data or TMA's zero fill);
  * the consumers issue a narrower WGMMA (a second TiledMma, compile-time N = narrow width) over the first
    `width` rows of the B slot, into the first registers of the same accumulator (the WGMMA register layout
    puts the N/8 column groups outermost, so a narrow accumulator is a prefix of the wide one); it reads the
    wide slot through the wide operand descriptors, so its width need not be whole 64-column swizzle blocks:
    with the register epilogue, narrow widths go in steps of 16 (240, 224, 192, 128 for 256; `WIDTH_STEP`);
  * the epilogue writes only the first `width` columns.
So one compiled kernel serves both widths; the branch is warp-uniform and sits outside the WGMMA issue.

Epilogues:
  * "staged": registers -> bf16 -> `stmatrix` into a shared-memory buffer of (128 x 32) sub-tiles ->
    TMA store (cp.async.bulk.tensor shared -> global). Costs `epi_stages` x 8 KiB of shared memory.
  * "register": registers -> bf16 -> a 4x4 transpose of 32-bit words inside each quad of lanes (two
    butterfly shuffles) so that each lane holds 8 consecutive columns -> one 128-bit `st.global.v4` per
    lane. Uses no shared memory, which can go to pipeline stages instead (`gemm_kernels.stages`); with
    128x256x64 tiles it frees 16 KiB, less than one 48 KiB stage, so the ring stays 4 deep on Hopper.
    By default it is *deferred* (`defer_epilogue`): the accumulator is packed to bf16 registers and the
    stores go out 32 columns at a time behind the next item's first 8 K-blocks, instead of holding the tensor
    cores for the ~1.8 us that 132 SMs storing C at once take (`mainloop`; measured with `timeline`).

Timeline. `timeline(a, b)` runs a separate build (Config.trace) in which every CTA stamps the global timer
around each row it runs; notebook 08 section 7 draws what it shows.

Tails. M and N tails: TMA zero-fills out-of-bounds loads, the TMA store clips, and the register epilogue
predicates every 16-byte store (the second CTA of a pair may own no rows of the last item; it still loads
and multicasts its half of B). K tail: zero-filled K-blocks add nothing. TMA needs 16-byte aligned row
strides, so K and N must be multiples of 8 (a ValueError says so otherwise).
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field, replace

import cuda.bindings.driver as cuda_driver
import torch

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.cute.runtime import make_fake_stream
from cutlass.tensor_utils import LayoutEnum

import gemm_kernels
from workbook import launch

ARCH = "sm_90a"
TILE_M = 128          # two consumer warpgroups x 64 rows (the WGMMA M)
TILE_K = 64           # 64 bf16 = 128 bytes: one 128-byte swizzle row of the K-major A tile
EPI_N = 32            # staged epilogue sub-tile: 128 x 32 bf16 = 8 KiB per buffer
B_ATOM_N = 64         # N-major B in smem: 128-byte swizzle atoms of 64 bf16 columns
# Register epilogue: tile widths in steps of 16 columns. WGMMA's N and one lane's 16-byte store go in steps of 8,
# but on the H200 a 248-wide row's K loop took as long as a 256-wide one's, while a 240-wide row took 0.95 of it
# (notes/perf-log.md, session 6; either the tensor cores step through N 16 columns at a time, or 16 columns =
# 32 bytes, one L2 sector, keeps neighbouring items from sharing sectors): an 8-column step only adds items.
WIDTH_STEP = 16
EPILOGUES = ("staged", "register")
SCHEDULES = ("uniform", "balanced")
ALIGN = 8             # elements: TMA wants 16-byte aligned strides
THREADS = 384         # producer warpgroup + two consumer warpgroups
QUEUE_DEPTH = 2       # dynamic schedule: item indices in flight (claimed for the next item / read for this one)
PRODUCER_REGS, CONSUMER_REGS = 40, 232   # setmaxnreg: 128*40 + 256*232 <= 64K registers per SM
# A work-list row is one or two segments (two with stream-K) of SEGMENT_COLS int32 each:
# (m0, n0, width, first K-block, K-blocks, role, flag, slot-or-count); a segment with 0 K-blocks is absent.
SEGMENT_COLS = 8
WHOLE, CONTRIBUTE, FINISH = 0, 1, 2   # roles: all of K -> C; a partial sum -> the workspace; add them -> C
# A trace (Config.trace, `timeline`): per CTA, int64 globaltimer stamps [entry, exit] then, per segment run,
# (row, start, first K-block landed, last WGMMA done, C written); TRACE_SEGMENTS per CTA at most.
TRACE_SEGMENTS = 64
TRACE_FIELDS = ("row", "start", "data", "mma_done", "stored")
TRACE_COLS = 2 + len(TRACE_FIELDS) * TRACE_SEGMENTS


@dataclass(frozen=True)
class Config:
    """One compiled kernel: the tile (wide width), the optional narrow width, the ring depth, the epilogue."""
    tile_n: int = 256
    narrow_n: int | None = None
    stages: int = 4
    epilogue: str = "register"
    epi_stages: int = 2   # staged epilogue only: sub-tile buffers in flight
    cluster_m: int = 1    # 2: CTA pairs stacked along M share each B tile by TMA multicast
    dynamic: bool = True  # items handed out in list order by a global counter (False: slot i runs i, i + slots, ...)
    defer_epilogue: bool = False   # register epilogue: item j's C goes out behind item j+1's first K-blocks
    stream_k: bool = False         # the last partial wave's items are split along K over every slot
    trace: bool = False            # record a timeline of every CTA's segments (`timeline`)

    def __post_init__(self):
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"epilogue must be one of {EPILOGUES}, got {self.epilogue!r}")
        if not (self.tile_n % B_ATOM_N == 0 and 64 <= self.tile_n <= 256):
            raise ValueError(f"tile_n must be a multiple of {B_ATOM_N} in [64, 256], got {self.tile_n}")
        step = self.width_step
        if self.narrow_n is not None and not (self.narrow_n < self.tile_n and self.narrow_n % step == 0):
            raise ValueError(f"narrow_n ({self.narrow_n}) must be a multiple of {step} below tile_n ({self.tile_n}) "
                             f"with the {self.epilogue} epilogue")
        if self.staged and (self.tile_n // EPI_N) % self.epi_stages:
            raise ValueError(f"tile width {self.tile_n} is not a whole number of {self.epi_stages} x {EPI_N} columns")
        if self.cluster_m not in (1, 2):
            raise ValueError(f"cluster_m must be 1 or 2, got {self.cluster_m}")
        if self.stages < 2:
            raise ValueError(f"stages must be >= 2, got {self.stages}")
        if self.defer_epilogue and self.epilogue != "register":
            raise ValueError("defer_epilogue needs the register epilogue")
        if self.stream_k and self.narrow_n is not None:
            raise ValueError("stream_k splits uniform tiles; a balanced plan with narrow tiles fills its last wave "
                             "already")

    @property
    def staged(self) -> bool:
        return self.epilogue == "staged"

    @property
    def width_step(self) -> int:
        """Tile widths come in steps of this many columns: the staged epilogue TMA-stores whole 32-column
        sub-tiles and takes its `epi_stages` buffers in turn, so a narrow tile must end on a whole round of
        them; the register epilogue's WGMMA and stores could go in steps of 8, but 16 is what pays (WIDTH_STEP)."""
        return EPI_N * self.epi_stages if self.staged else WIDTH_STEP

    @property
    def segments(self) -> int:
        """Segments per work-list row: a stream-K unit may end one item and start the next."""
        return 2 if self.stream_k else 1


class HopperGemm:
    """The kernel for one `Config`; `__call__` is the host-side @cute.jit entry point."""

    def __init__(self, config: Config):
        self.cfg = config
        self.tile = (TILE_M, config.tile_n, TILE_K)
        self.staged = config.staged
        self.consumer_threads = 256

    # ---------------------------------------------------------------- host side (traced once per compile)
    @cute.jit
    def __call__(self, a_ptr: cute.Pointer, b_ptr: cute.Pointer, c_ptr: cute.Pointer, work_ptr: cute.Pointer,
                 counter_ptr: cute.Pointer, partials_ptr: cute.Pointer, trace_ptr: cute.Pointer, M: cutlass.Int32,
                 N: cutlass.Int32, K: cutlass.Int32,
                 num_items: cutlass.Int32, num_ctas: cutlass.Int32, stream):
        # Plain pointers and sizes make the launch cheap on the host (no DLPack per call); the layouts are
        # rebuilt here. K and N are multiples of 8 (checked by the host API), which TMA needs to know.
        k8, n8 = cute.assume(K, divby=ALIGN), cute.assume(N, divby=ALIGN)
        a = cute.make_tensor(a_ptr, cute.make_layout((M, K), stride=(k8, 1)))
        b = cute.make_tensor(b_ptr, cute.make_layout((N, K), stride=(1, n8)))   # [K, N] row-major = N-major (N, K)
        c = cute.make_tensor(c_ptr, cute.make_layout((M, N), stride=(n8, 1)))
        row = SEGMENT_COLS * self.cfg.segments
        work = cute.make_tensor(work_ptr, cute.make_layout((num_items, row), stride=(row, 1)))
        # (next item, clusters done, stream-K flags...), all 0 between launches
        counter = cute.make_tensor(counter_ptr, cute.make_layout(2))
        partials = cute.make_tensor(partials_ptr, cute.make_layout(1))   # stream-K workspace (fp32), by pointer
        trace = cute.make_tensor(trace_ptr, cute.make_layout((num_ctas, TRACE_COLS), stride=(TRACE_COLS, 1)))
        cfg = self.cfg
        bf16 = cutlass.BFloat16

        def tiled_mma_for(n):
            # (2, 1, 1): the two consumer warpgroups split M; each issues m64 x n x k16.
            return sm90.make_trivial_tiled_mma(bf16, bf16, OperandMajorMode.K, OperandMajorMode.MN,
                                               cutlass.Float32, (2, 1, 1), tiler_mn=(64, n))

        tiled_mma = tiled_mma_for(cfg.tile_n)
        narrow_mma = tiled_mma_for(cfg.narrow_n) if cutlass.const_expr(cfg.narrow_n is not None) else tiled_mma

        a_layout = sm90.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.tile, bf16, cfg.stages)
        b_layout = sm90.make_smem_layout_b(LayoutEnum.COL_MAJOR, self.tile, bf16, cfg.stages)
        epi_layout = sm90.make_smem_layout_epi(bf16, LayoutEnum.ROW_MAJOR, (TILE_M, EPI_N), cfg.epi_stages)

        tma_a, tma_tensor_a = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), a, cute.slice_(a_layout, (None, None, 0)), (TILE_M, TILE_K))
        b_load = cpasync.CopyBulkTensorTileG2SMulticastOp() if cutlass.const_expr(cfg.cluster_m > 1) \
            else cpasync.CopyBulkTensorTileG2SOp()
        tma_b, tma_tensor_b = cpasync.make_tiled_tma_atom(
            b_load, b, cute.slice_(b_layout, (None, None, 0)), (cfg.tile_n, TILE_K), num_multicast=cfg.cluster_m)
        if cutlass.const_expr(self.staged):
            tma_c, tma_tensor_c = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(), c, cute.slice_(epi_layout, (None, None, 0)), (TILE_M, EPI_N))
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
            sA: cute.struct.Align[cute.struct.MemRange[bf16, cute.cosize(a_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[bf16, cute.cosize(b_layout)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[bf16, epi_elems], 1024]

        self.shared_storage = SharedStorage
        self.kernel(tma_a, tma_tensor_a, tma_b, tma_tensor_b, tma_c, tma_tensor_c, c, work, counter, partials, trace,
                    tiled_mma, narrow_mma, a_layout, b_layout, epi_layout).launch(
            grid=[num_ctas, 1, 1], block=[THREADS, 1, 1], cluster=[cfg.cluster_m, 1, 1], min_blocks_per_mp=1,
            stream=stream)

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
        # A cluster of cluster_m CTAs runs one work item of cluster_m x 128 rows; CTA `rank` owns rows
        # rank*128.. of it and loads 1/cluster_m of the shared B tile, multicast to every CTA of the cluster.
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster = cta // cfg.cluster_m
        num_clusters = num_ctas // cfg.cluster_m
        num_items = work.shape[0]

        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(self.staged):
                cpasync.prefetch_descriptor(tma_c)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        stage_bytes = (cute.size_in_bytes(cutlass.BFloat16, cute.slice_(a_layout, (None, None, 0)))
                       + cute.size_in_bytes(cutlass.BFloat16, cute.slice_(b_layout, (None, None, 0))))
        # full[s]: one producer arrival + the TMA byte count (all of A and B land in every CTA);
        # empty[s]: one arrival per consumer warp of every CTA whose TMA writes into this slot.
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring_barriers.data_ptr(), num_stages=cfg.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     cfg.cluster_m * self.consumer_threads // 32),
            tx_count=stage_bytes, cta_layout_vmnk=cute.make_layout((1, cfg.cluster_m, 1, 1)), defer_sync=True)
        # The dynamic schedule's queue: rank 0's producer warp writes each claimed item index into every CTA of
        # the cluster (4 bytes, counted by the 'full' barrier); its readers are the 8 consumer warps and the
        # producer warp of every CTA, and an entry is reused only when all of them have read it.
        queue_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.queue_barriers.data_ptr(), num_stages=QUEUE_DEPTH,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     cfg.cluster_m * (self.consumer_threads // 32 + 1)),
            tx_count=4, cta_layout_vmnk=cute.make_layout((1, cfg.cluster_m, 1, 1)), defer_sync=True)
        queue = storage.queue.data_ptr()
        pipeline.pipeline_init_arrive(cluster_shape_mn=(cfg.cluster_m, 1), is_relaxed=True)

        sA = storage.sA.get_tensor(a_layout.outer, swizzle=a_layout.inner)   # (128, 64, stages)
        sB = storage.sB.get_tensor(b_layout.outer, swizzle=b_layout.inner)   # (tile_n, 64, stages)

        pipeline.pipeline_init_wait(cluster_shape_mn=(cfg.cluster_m, 1))

        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp_idx == 0:
                self.produce(tma_a, mA, tma_b, mB, sA, sB, ring, work, queue_pipe, queue, counter, cluster,
                             num_clusters, rank, num_items)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            ctidx = tidx - 128   # thread index among the 256 consumer threads
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
        cm = self.cfg.cluster_m
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.cfg.stages)
        claimed = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, QUEUE_DEPTH)
        taken = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, QUEUE_DEPTH)
        claimed = self.claim(queue_pipe, queue, counter, rank, claimed, -1, cluster, num_clusters, num_items)
        item, taken = self.take(queue_pipe, queue, cluster - num_clusters, num_clusters, taken)
        while item < num_items:
            for seg in cutlass.range_constexpr(self.cfg.segments):   # unrolled: a segment's fields load as one LDG.128
                col = seg * SEGMENT_COLS
                m0, n0 = work[item, col] + rank * TILE_M, work[item, col + 1]
                k0, k_count = work[item, col + 3], work[item, col + 4]
                # Offset the (coordinate) tensors to the item's corner: items need not sit on a tile grid.
                gA = cute.local_tile(cute.domain_offset((m0, 0), mA), (TILE_M, TILE_K), (0, None))
                gB = cute.local_tile(cute.domain_offset((n0, 0), mB), (self.cfg.tile_n, TILE_K), (0, None))
                tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1),
                                                   cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
                # With a cluster, this CTA's share of the B box (1/cm of it); the multicast writes it everywhere.
                tBsB, tBgB = cpasync.tma_partition(tma_b, rank, cute.make_layout(cm),
                                                   cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
                state = self.load_k_blocks(ring, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, k0, k_count, state)
            # the last loads of this item are issued: claim the next one now, while the ring still holds
            # `stages` K-blocks of work for the consumers, so the claim's round trip is hidden
            claimed = self.claim(queue_pipe, queue, counter, rank, claimed, item, cluster, num_clusters, num_items)
            item, taken = self.take(queue_pipe, queue, item, num_clusters, taken)
        ring.producer_tail(state)                     # do not exit while TMA writes are in flight
        if cutlass.const_expr(self.cfg.dynamic):
            queue_pipe.producer_tail(claimed)         # nor while the other CTA may still release queue entries
            self.reset_counter(counter, rank, num_clusters)

    @cute.jit
    def load_k_blocks(self, ring, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, k0, count, state):
        """Producer warp: TMA-load K-blocks k0 .. k0 + count - 1 of A and B into the ring; returns its position.
        range(count) plus an offset, not range(k0, k0 + count): with the latter form ptxas serialized the
        consumers' WGMMAs (C7515; test_wgmmas_are_not_serialized)."""
        cm = self.cfg.cluster_m
        for i in range(count):
            kb = k0 + i
            ring.producer_acquire(state)          # wait until slot is empty, arm its byte count
            full = ring.producer_get_barrier(state)
            cute.copy(tma_a, tAgA[(None, kb)], tAsA[(None, state.index)], tma_bar_ptr=full)
            if cutlass.const_expr(cm > 1):
                cute.copy(tma_b, tBgB[(None, kb)], tBsB[(None, state.index)], tma_bar_ptr=full,
                          mcast_mask=cutlass.Int16((1 << cm) - 1))
            else:
                cute.copy(tma_b, tBgB[(None, kb)], tBsB[(None, state.index)], tma_bar_ptr=full)
            state.advance()
        return state

    @cute.jit
    def consume(self, tiled_mma, narrow_mma, sA, sB, sC, ring, work, queue_pipe, queue, counter, partials, trace,
                cta, cluster, num_clusters, rank, num_items, ctidx, warp_idx, tma_c, mC_tma, mC):
        """Two warpgroups: WGMMA over the ring into fp32 registers, then the epilogue, segment after segment."""
        cfg = self.cfg
        has_narrow = cutlass.const_expr(cfg.narrow_n is not None)
        # WGMMA partitions shared memory per warpgroup; registers per thread.
        wg_slice = tiled_mma.get_slice((ctidx // 128) * 128)
        tCrA = tiled_mma.make_fragment_A(wg_slice.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(wg_slice.partition_B(sB))
        acc = cute.make_rmem_tensor(wg_slice.partition_shape_C((TILE_M, cfg.tile_n)), cutlass.Float32)

        if cutlass.const_expr(has_narrow):
            # The narrow WGMMA reads the same operands: its shared-memory descriptors (start, the stride between
            # 64-column swizzle blocks, the stride between 8-row K groups) are the wide ones', and its smaller
            # N just makes it read the first narrow_n columns of B, whole swizzle blocks or not. Its result is
            # a prefix of the wide accumulator's registers (column groups are the outermost value mode).
            acc_narrow_shape = narrow_mma.get_slice((ctidx // 128) * 128).partition_shape_C((TILE_M, cfg.narrow_n))
            acc_narrow = cute.make_tensor(acc.iterator, cute.make_layout(acc_narrow_shape))

        if cutlass.const_expr(self.staged):
            epi = self.staged_epilogue_setup(tiled_mma, sC, ctidx)
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, cfg.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, cfg.stages)
        tiles_done = cutlass.Int32(0)

        defer = cutlass.const_expr(cfg.defer_epilogue)
        if cutlass.const_expr(defer):
            # C of the previous item, as bf16 pairs, stored 32 columns at a time behind this item's first K-blocks
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
                m0, n0, width = work[item, col] + rank * TILE_M, work[item, col + 1], work[item, col + 2]
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

    @cute.jit
    def stamp(self, trace, cta, col, ctidx):
        """Trace: the first consumer warp writes the global nanosecond timer into this CTA's column `col` (a
        whole warp: a branch on one lane, this near the WGMMAs, made ptxas serialize them, C7515)."""
        if ctidx < 32:
            trace[cta, col] = cute.arch.globaltimer()

    # ---------------------------------------------------------------- which item next
    # Static: cluster c runs items c, c + clusters, c + 2 * clusters, ... Dynamic: rank 0's producer warp claims
    # the next item from a global counter and every warp of the cluster reads it from the queue. Items then
    # *start* in list order whatever each SM's speed, so the items in flight stay neighbours in the banded
    # raster; the static walk lets the SMs drift apart over many items, and at 16384^3 read 1.6x the DRAM bytes
    # of one-CTA-per-item launches (ncu, data/measured/h200/probes/ncu_np_16384.txt; the dynamic schedule with
    # `band_rows_for`: ncu_dyn_16384.txt).

    @cute.jit
    def claim(self, pipe, queue, counter, rank, claimed, current, cluster, num_clusters, num_items):
        """Producer warp: wait until every reader is done with the next queue entry and arm its barrier for 4
        bytes; in rank 0, one lane takes a ticket from the counter and stores it into every CTA's entry.

        With stream-K the last `num_clusters` rows are the units, and cluster c runs unit c once its whole rows
        are done: were units claimed like rows, a cluster could claim (look ahead to) the very unit whose
        partial its own FINISH is waiting for, and wait forever. `current`: the row being loaded (-1: none)."""
        if cutlass.const_expr(self.cfg.dynamic):
            pipe.producer_acquire(claimed)
            if rank == 0:
                if cute.arch.lane_idx() == 0:
                    ticket = cute.arch.atomic_add(counter.iterator, cutlass.Int32(1))
                    if cutlass.const_expr(self.cfg.stream_k):
                        whole = num_items - num_clusters
                        if ticket >= whole:
                            ticket = whole + cluster
                            if current >= whole:
                                ticket = num_items       # this cluster's unit is loaded: it is done
                    for peer in cutlass.range_constexpr(self.cfg.cluster_m):
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
        wg, t = ctidx // 128, ctidx % 128
        group = pipeline.NamedBarrier(barrier_id=2 + wg, num_threads=128)   # this warpgroup only
        flag_ptr = counter.iterator + 2 + (flag * self.cfg.cluster_m + rank) * 2 + wg
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
        wg, t = ctidx // 128, ctidx % 128
        base = ((slot * self.cfg.cluster_m + rank) * 2 + wg) * (128 * n) + t * 4
        return cute.make_tensor(partials.iterator + cute.assume(base, divby=4),
                                cute.make_layout((4, n // 4), stride=(1, 4 * 128)))

    @cute.jit
    def mainloop(self, mma, acc, tCrA, tCrB, ring, read, release, k_blocks, pending=None):
        """The K loop of one item at one tile width; returns the advanced ring positions.

        One copy per width, chosen once per item: a width branch *inside* this loop makes ptxas close the
        WGMMA group at the join and insert an empty one, so `wait_group(1)` would wait on the k-block just
        issued (notes/gemm-vs-cutlass.md). `pending`: the previous item's C (`store_words` arguments), stored
        one 32-column group behind each of the first 8 K-blocks' WGMMAs, so the stores overlap them.

        The loop zeroes its own width's accumulator and waits for its last WGMMA group itself: zeroing all of it
        before the width branch, or waiting after the join, let ptxas see other instructions define accumulator
        registers inside a WGMMA group, and it then serialized every WGMMA (warnings C7511/C7515; the first
        deferred-epilogue build ran 8-30 % slower; test_wgmmas_are_not_serialized)."""
        acc.fill(0.0)
        warpgroup.fence()
        first = 0
        if cutlass.const_expr(pending is not None):
            # The first K-blocks, peeled: behind each one's WGMMAs goes one 32-column group of the last item's
            # C, so its stores trickle out over several K-blocks instead of stalling one (all SMs end their rows
            # together; stored at once, their C met in the L2 and took ~1.8 us per row, probe_timeline.py).
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

    # ---------------------------------------------------------------- epilogue 1: registers -> smem -> TMA
    @cute.jit
    def staged_epilogue_setup(self, tiled_mma, sC, ctidx):
        """Once per CTA: the stmatrix copy from the accumulator layout to the sub-tile buffers, staging
        registers for one sub-tile, and the bulk-store group counter that guards buffer reuse."""
        copy_r2s = cute.make_tiled_copy_S(
            sm90.get_smem_store_op(LayoutEnum.ROW_MAJOR, cutlass.BFloat16, cutlass.Float32),
            cute.make_tiled_copy_C_atom(
                cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma))
        thr_r2s = copy_r2s.get_slice(ctidx)
        tRS_sC = thr_r2s.partition_D(sC)                         # (R2S, R2S_M, R2S_N, buffer)
        rd_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
        tRS_f32 = cute.make_rmem_tensor(rd_shape, cutlass.Float32)
        tRS_bf16 = cute.make_rmem_tensor(rd_shape, cutlass.BFloat16)
        store_ring = pipeline.PipelineTmaStore.create(
            num_stages=self.cfg.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumer_threads))
        return copy_r2s, tRS_sC, tRS_f32, tRS_bf16, store_ring

    @cute.jit
    def staged_epilogue(self, epi, acc, sC, tma_c, mC_tma, m0, n0, width, tiles_done, warp_idx):
        """Per item: for each 32-column sub-tile the item owns, registers -> bf16 -> stmatrix into a buffer,
        then one warp TMA-stores the buffer; the store clips rows and columns outside C."""
        copy_r2s, tRS_sC, tRS_f32, tRS_bf16, store_ring = epi
        cfg = self.cfg
        sync = pipeline.NamedBarrier(barrier_id=1, num_threads=self.consumer_threads)
        tRS_acc = copy_r2s.retile(acc)
        per_sub = cute.size(tRS_f32)
        gC = cute.local_tile(cute.domain_offset((m0, n0), mC_tma), (TILE_M, cfg.tile_n), (0, 0))
        gC_sub = cute.zipped_divide(gC, (TILE_M, EPI_N))        # ((128, 32), (1, tile_n / 32))
        tCsC, tCgC = cpasync.tma_partition(tma_c, 0, cute.make_layout(1),
                                           cute.group_modes(sC, 0, 2), gC_sub)
        n_sub = cfg.tile_n // EPI_N
        for j in cutlass.range_constexpr(n_sub):
            if j * EPI_N < width:
                # Accumulator values of sub-tile j (column groups are outermost, so a contiguous range).
                for v in cutlass.range_constexpr(per_sub):
                    tRS_f32[v] = tRS_acc[j * per_sub + v]
                tRS_bf16.store(tRS_f32.load().to(cutlass.BFloat16))
                buf = (tiles_done * n_sub + j) % cfg.epi_stages
                cute.copy(copy_r2s, tRS_bf16, tRS_sC[(None, None, None, buf)])
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
        """128-bit stores straight from registers: the accumulator packed to bf16 pairs, then stored.

        WGMMA leaves lane q of each quad (q = lane % 4) with columns 8g + 2q and 8g + 2q + 1 of every
        8-column group g, at rows r and r + 8. Four adjacent groups (32 columns) are thus a 4x4 matrix of
        32-bit bf16 pairs spread over the quad, one row per lane; transposing it with two butterfly
        shuffles (xor 1, xor 2) leaves lane q with all 8 columns of group 4j + q: one 16-byte store.
        """
        words = cute.make_rmem_tensor((self.cfg.tile_n // 32, 2, 4), cutlass.Int32)
        self.pack_accumulator(acc, words)
        self.store_words(tiled_mma, words, mC, m0, n0, width, ctidx)

    @cute.jit
    def pack_accumulator(self, acc, words):
        """words[j, h, t]: the bf16 pair this thread holds in column group 4j + t, row half h."""
        block = cute.make_rmem_tensor((2, 2, 4), cutlass.Float32)      # (pair, row half, group) of 32 cols
        block_bf16 = cute.make_rmem_tensor((2, 2, 4), cutlass.BFloat16)
        for j in cutlass.range_constexpr(self.cfg.tile_n // 32):
            for h in cutlass.range_constexpr(2):
                for t in cutlass.range_constexpr(4):
                    for p in cutlass.range_constexpr(2):
                        block[p, h, t] = acc[(p, h, 4 * j + t), 0, 0]
            block_bf16.store(block.load().to(cutlass.BFloat16))
            packed = cute.recast_tensor(block_bf16, cutlass.Int32)      # (1, 2, 4): word (h, t)
            for h in cutlass.range_constexpr(2):
                for t in cutlass.range_constexpr(4):
                    words[j, h, t] = packed[0, h, t]

    @cute.jit
    def store_words(self, tiled_mma, words, mC, m0, n0, width, ctidx, groups=None):
        """The quad transpose and one 16-byte store per (32 columns, row half); only the first `width` columns
        (a multiple of 8: one lane's store), only inside C. `groups`: which 32-column groups (default all)."""
        cfg = self.cfg
        M, N = mC.shape
        ldc = mC.stride[0]
        col_end = cutlass.min(N, n0 + width)       # this item's last column + 1, inside C
        q = ctidx % 4
        # The (row, col) of this thread's value (0, h, g) comes from the MMA's own partition of the tile.
        coords = tiled_mma.get_slice(ctidx).partition_C(cute.make_identity_tensor((TILE_M, cfg.tile_n)))
        out = cute.make_rmem_tensor((4,), cutlass.Int32)
        for j in (range(cfg.tile_n // 32) if groups is None else groups):
            if j * 32 < width:
                for h in cutlass.range_constexpr(2):
                    w = _quad_transpose([words[j, h, 0], words[j, h, 1], words[j, h, 2], words[j, h, 3]], q)
                    row_in_tile, col0 = coords[(0, h, 4 * j), 0, 0]
                    row = m0 + row_in_tile
                    col = n0 + (col0 - 2 * q) + 8 * q        # first column of group 4j + q
                    if row < M and col < col_end:
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


# -------------------------------------------------------------------- host API

DEFAULT_TILE = (TILE_M, 256, TILE_K)
BAND_A_BYTES = 32 * 2**20   # a band's rows of A (band_rows x 128 x K bf16) must stay in L2 (see `band_rows_for`)
DEFAULT_CLUSTER_M = 2 # measured best overall on H200 (notes/perf-log.md, "GEMM on H200")
STAGED_BUFFERS = 2    # staged epilogue: (128 x 32) sub-tile buffers, so one TMA store overlaps the next stmatrix


def narrow_widths(tile_n: int, epilogue: str = "register") -> tuple[int, ...]:
    """Widths the balanced schedule may use beside `tile_n` with `epilogue` (the planner's g*W/(g+1) rule),
    in that epilogue's steps (`Config.width_step`: 16 columns for the register epilogue, 64 for the staged
    one). Widest first: for 256, (240, 224, 192, 128) and (192, 128)."""
    from gemm_kernels import waves
    return waves.narrow_widths(tile_n, multiple_of=Config(tile_n=tile_n, epilogue=epilogue,
                                                          epi_stages=STAGED_BUFFERS).width_step)


def _stage_budget(tile, epilogue: str, depth: int | None = None):
    from gemm_kernels.stages import stages as stage_budget
    extra = dict(epilogue_tile=(TILE_M, EPI_N), epilogue_buffers=STAGED_BUFFERS) if epilogue == "staged" else {}
    return stage_budget(tuple(tile), epilogue, ARCH, depth=depth, **extra)


def stage_count(tile, epilogue: str) -> int:
    """The deepest ring that fits beside `epilogue` in one CTA's shared memory (gemm_kernels.stages)."""
    return _stage_budget(tile, epilogue).stages


def _check_tile(tile):
    tile = DEFAULT_TILE if tile is None else tuple(tile)
    if len(tile) != 3 or tile[0] != TILE_M or tile[2] != TILE_K or tile[1] % B_ATOM_N or not 64 <= tile[1] <= 256:
        raise ValueError(f"Hopper tiles are ({TILE_M}, tile_n, {TILE_K}) with tile_n one of 64, 128, 192, 256 "
                         f"(whole 64-column swizzle blocks of B); got {tile}")
    return tile


def _check_options(epilogue: str, schedule: str):
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {EPILOGUES}, got {epilogue!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


def check_shape(M: int, N: int, K: int):
    gemm_kernels.check_sizes(M=M, N=N, K=K)
    if K % ALIGN or N % ALIGN:
        raise ValueError(f"K ({K}) and N ({N}) must be multiples of {ALIGN}: TMA needs the rows of a [M, K] "
                         f"and b [K, N] to start on 16-byte boundaries")


def plan_for(M: int, N: int, tile_n: int, schedule: str, gpu=None, cluster_m: int = 1, epilogue: str = "register",
             narrow_ns=None):
    """The planner's work list for this GEMM: uniform tiles, or balanced so the last wave fills the GPU.
    With clusters an item is a cluster's tile (cluster_m x 128 rows) and a slot is a cluster. narrow_ns: the
    narrow widths the balanced plan may choose from (default: every one of `narrow_widths(tile_n, epilogue)`)."""
    from gemm_kernels import waves
    from workbook import gpus
    gpu = gpu or gpus.current() or gpus.H200
    narrow_ns = _check_narrow(narrow_ns, tile_n, epilogue)
    return waves.plan(M, N, gpu=gpu, tile_m=TILE_M * cluster_m, tile_ns=(tile_n, *narrow_ns),
                      balanced=schedule == "balanced", schedule="static", ctas_per_item=cluster_m)


def _check_narrow(narrow_ns, tile_n: int, epilogue: str) -> tuple[int, ...]:
    """The narrow widths to offer the planner, widest first: all this tile and epilogue allow, or a subset."""
    allowed = narrow_widths(tile_n, epilogue)
    if narrow_ns is None:
        return allowed
    chosen = tuple(sorted({int(w) for w in narrow_ns}, reverse=True))
    wrong = [w for w in chosen if w not in allowed]
    if wrong:
        raise ValueError(f"narrow widths {wrong} are not available for {tile_n}-wide tiles with the {epilogue} "
                         f"epilogue; choose from {allowed}")
    return chosen


def config_for(M: int, N: int, *, tile=None, stages=None, epilogue="register", schedule="balanced",
               cluster_m: int = DEFAULT_CLUSTER_M, dynamic: bool = True, defer_epilogue: bool | None = None,
               stream_k: bool = False, narrow_ns=None, gpu=None):
    """(Config, Plan) for one GEMM: the compiled kernel's parameters and the work list it walks."""
    _check_options(epilogue, schedule)
    tile = _check_tile(tile)
    defer_epilogue = _deferred(epilogue, defer_epilogue)
    if cluster_m not in (1, 2):
        raise ValueError(f"cluster_m must be 1 or 2, got {cluster_m!r}")
    plan = plan_for(M, N, tile[1], schedule, gpu, cluster_m, epilogue, narrow_ns)
    if stages is not None:
        _stage_budget(tile, epilogue, depth=stages)   # ValueError when that many do not fit
    cfg = Config(tile_n=tile[1], narrow_n=plan.narrow, epilogue=epilogue, epi_stages=STAGED_BUFFERS,
                 stages=stage_count(tile, epilogue) if stages is None else stages, cluster_m=cluster_m,
                 dynamic=dynamic, defer_epilogue=defer_epilogue, stream_k=stream_k)
    return cfg, plan


def _deferred(epilogue: str, defer_epilogue: bool | None) -> bool:
    """None (the default) defers the register epilogue (faster at every square, notes/perf-log.md session 5);
    the staged one is not deferred (its TMA store runs asynchronously already)."""
    return epilogue == "register" if defer_epilogue is None else defer_epilogue


def compile_gemm(M: int, N: int, K: int, *, tile=None, stages=None, epilogue="register", schedule="balanced",
                 cluster_m: int = DEFAULT_CLUSTER_M, dynamic: bool = True, defer_epilogue: bool | None = None,
                 stream_k: bool = False, narrow_ns=None, variant: dict | None = None, arch: str = ARCH,
                 dump_dir=None):
    """Compile the kernel `gemm` would run for this shape on an H200, with no GPU: workbook.sass.Artifacts
    (.ptx, .cubin, .sass). The kernel itself is shape-generic; M and N pick the balanced plan's narrow width."""
    if arch != ARCH:
        raise ValueError(f"the Hopper GEMM compiles for {ARCH} only, not {arch!r}")
    check_shape(M, N, K)
    from workbook import gpus, sass
    cfg, _ = config_for(M, N, tile=tile, stages=stages, epilogue=epilogue, schedule=schedule,
                        cluster_m=cluster_m, dynamic=dynamic, defer_epilogue=defer_epilogue, stream_k=stream_k,
                        narrow_ns=narrow_ns, gpu=gpus.H200)
    cfg = replace(cfg, **dict(variant or ()))
    return sass.compile_for(HopperGemm(cfg), *_args(16, 16, 16, 16, 16, 16, 16, M, N, K, 1, cluster_m,
                                                    make_fake_stream()), arch=arch, dump_dir=dump_dir)


def band_rows_for(K: int) -> int:
    """Tile rows per band of the raster: the most of 16, 8, 4, 2, 1 whose rows of A (band_rows x 128 x K bf16)
    fit in BAND_A_BYTES (32 MiB, about half the H200's L2), so the band's A stays resident while its windows
    of B stream past. 16 keeps a window of 132 tiles near square (8 x 8 CTA pairs); at K = 16384 it would
    need 64 MiB of A, and 8 rows read fewer DRAM bytes there. Measured with ncu on the H200, dynamic
    schedule (data/measured/h200/probes/ncu_dyn_*.txt): 16 rows beat 8 at 4096^3 (146 vs 187 MB) and
    8192^3 (1.49 vs 1.76 GB); 8 beat 16 at 16384^3 (16.4 vs 19.8 GB, torch.matmul reads 14.8)."""
    for rows in (16, 8, 4, 2):
        if rows * TILE_M * K * 2 <= BAND_A_BYTES:
            return rows
    return 1


def banded(items, band_rows: int):
    """The planner's items with the wide tiles in L2-friendly order; the narrow tail stays last.

    Row-major order sends one wave of 132 tiles across ~4 tile rows and *every* column of B: at
    16384^3 that is 512 MiB of B per wave, far more than the 50 MiB L2. Walking the wide tiles in bands of
    `band_rows` tile rows, column by column within a band, makes a wave touch `band_rows` panels of A and
    ~132 / band_rows panels of B. Each slot still runs the same widths in the same order, so the planner's
    prediction is unchanged. band_rows=1 is the planner's own (row-major) order.

    The narrow tail stays last (its items are what make the last wave full) and is banded the same way: the
    planner lays it out row by row, the last few tile rows of C in narrow columns, and a wave of those in row
    order would read every column of B from DRAM once per row.
    """
    if band_rows < 1:
        raise ValueError(f"band_rows must be >= 1, got {band_rows}")
    if band_rows == 1:
        return list(items)
    wide = max(t.width for t in items)
    key = lambda t: (t.m0 // (TILE_M * band_rows), t.n0, t.m0)   # band_rows counts 128-row CTA rows
    return (sorted((t for t in items if t.width == wide), key=key)
            + sorted((t for t in items if t.width != wide), key=key))


def work_rows(items, band_rows: int, slots: int, k_blocks: int, stream_k: bool):
    """The kernel's work list, one row per item (or stream-K unit), and how many partial-sum slots it uses.

    Each row holds `Config.segments` segments of SEGMENT_COLS ints: (m0, n0, width, k0, k_count, role, flag,
    arg). Without stream-K every row is one WHOLE segment over all K-blocks. With it, the banded list's last
    partial wave becomes `waves.stream_k` units, padded with empty rows to one per slot (`HopperGemm.claim`
    hands unit c to cluster c). A segment that starts mid-item CONTRIBUTEs its partial sum to workspace slot
    `arg` and counts it on flag `flag`; the segment holding the item's first K-block is the FINISH, which
    waits for `arg` partials on `flag` (the item's first slot) and writes C."""
    from gemm_kernels import waves
    ordered = banded(items, band_rows)
    segments = 2 if stream_k else 1
    whole = lambda t: (t.m0, t.n0, t.width, 0, k_blocks, WHOLE, 0, 0)
    absent = (0, 0, 0, 0, 0, WHOLE, 0, 0)
    if not stream_k:
        return [whole(t) for t in ordered], 0
    full, units = waves.stream_k(len(ordered), slots, k_blocks)
    pieces = {}                                  # item -> its segments, in K order
    for unit in units:
        for seg in unit:
            pieces.setdefault(seg.item, []).append(seg)
    first_slot, slot_of, used = {}, {}, 0        # contributors of one item take consecutive slots
    for item in sorted(pieces):
        first_slot[item] = used
        for seg in pieces[item]:
            if seg.k0 > 0:
                slot_of[seg] = used
                used += 1

    def row(seg):
        t = ordered[seg.item]
        if seg.k0 == 0 and seg.k1 == k_blocks:
            return whole(t)
        if seg.k0 == 0:
            role, arg = FINISH, len(pieces[seg.item]) - 1
        else:
            role, arg = CONTRIBUTE, slot_of[seg]
        return (t.m0, t.n0, t.width, seg.k0, seg.k1 - seg.k0, role, first_slot[seg.item], arg)

    rows = [whole(t) + absent for t in ordered[:full]]
    rows += [tuple(x for seg in unit for x in row(seg)) + absent * (segments - len(unit)) for unit in units]
    if units:                                    # one unit row per slot: the kernel hands unit c to cluster c
        rows += [absent * segments] * (slots - len(units))
    return rows, used


@dataclass(frozen=True)
class _Call:
    """Everything about a GEMM call that its shape and options fix, worked out once (`_prepare`)."""
    cfg: Config
    plan: object          # gemm_kernels.waves.Plan
    work: torch.Tensor    # the work list on the device, [rows, SEGMENT_COLS * segments] int32 (`work_rows`)
    launches: launch.LaunchCache
    sizes: tuple          # (M, N, K, rows, CTAs): the kernel's size arguments
    partial_slots: int = 0   # stream-K workspace slots (0: no stream-K)
    scratches: dict = field(default_factory=dict)   # stream -> (counter and flags, partial sums)

    def scratch(self, stream: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For launches on `stream`: the [next item, clusters done, stream-K flags...] int32 counter, zero
        between launches (the last cluster resets the first two, each FINISH its flag), the fp32 stream-K
        workspace (one (cluster_m x 128) x tile_n partial per slot) and, with `cfg.trace`, the int64 timeline
        [CTAs, TRACE_COLS]. One set per stream: launches on one stream never overlap, launches on two could."""
        found = self.scratches.get(stream)
        if found is None:
            cfg, device = self.cfg, self.work.device
            slots = self.partial_slots
            counter = torch.zeros(2 + slots * cfg.cluster_m * 2, dtype=torch.int32, device=device)
            partials = (torch.empty(slots * cfg.cluster_m * TILE_M * cfg.tile_n, dtype=torch.float32, device=device)
                        if slots else counter)   # never read without stream-K
            trace = (torch.zeros(self.sizes[4], TRACE_COLS, dtype=torch.int64, device=device) if cfg.trace
                     else counter)               # never written without the trace
            found = self.scratches[stream] = (counter, partials, trace)
        return found


@functools.lru_cache(maxsize=64)
def _prepare(M: int, N: int, K: int, tile, stages, epilogue: str, schedule: str, cluster_m: int, band_rows: int,
             device: int, persistent: bool, dynamic: bool, defer_epilogue: bool, stream_k: bool,
             narrow_ns: tuple | None = None, variant: tuple = ()) -> _Call:
    """Check the shape and the GPU, plan the work list and compile the kernel, once per shape and options
    (planning is Python, milliseconds; the compile is seconds): a call then only reads this back. Reach it
    through `_call_for`, which passes every option in one form, so equal options share one cache entry.
    `variant`: (Config field, value) pairs that `gemm` does not expose (the trace, kernel experiments)."""
    check_shape(M, N, K)
    if stream_k and not persistent:
        raise ValueError("stream_k needs persistent CTAs: a FINISH waits for units that must be running too")
    if torch.cuda.get_device_capability(device) != (9, 0):
        raise ValueError(f"this kernel is for sm_90a (H100/H200); {torch.cuda.get_device_name(device)} is not")
    cfg, plan = config_for(M, N, tile=tile, stages=stages, epilogue=epilogue, schedule=schedule,
                           cluster_m=cluster_m, dynamic=dynamic, defer_epilogue=defer_epilogue, stream_k=stream_k,
                           narrow_ns=narrow_ns)
    cfg = replace(cfg, **dict(variant))
    rows, partial_slots = work_rows(plan.items, band_rows, plan.slots, -(-K // TILE_K), cfg.stream_k)
    work = torch.tensor(rows, dtype=torch.int32, device=torch.device("cuda", device))
    slots = min(len(rows), plan.slots) if persistent else len(rows)
    sizes = (M, N, K, len(rows), slots * cfg.cluster_m)
    return _Call(cfg, plan, work, _launches(cfg, device), sizes, partial_slots)


def _call_for(M: int, N: int, K: int, device: int, *, tile=None, stages=None, epilogue: str = "register",
              schedule: str = "balanced", cluster_m: int = DEFAULT_CLUSTER_M, band_rows: int | None = None,
              persistent: bool = True, dynamic: bool = True, defer_epilogue: bool | None = None,
              stream_k: bool = False, narrow_ns=None, variant: dict | None = None) -> _Call:
    """`_prepare` with `gemm`'s keyword options, each given in one canonical form (so equal options share
    one cached _Call)."""
    return _prepare(M, N, K, None if tile is None else tuple(tile), stages, epilogue, schedule, cluster_m,
                    band_rows_for(K) if band_rows is None else band_rows, device, persistent, dynamic,
                    _deferred(epilogue, defer_epilogue), stream_k,
                    None if narrow_ns is None else tuple(sorted(set(narrow_ns), reverse=True)),
                    tuple(sorted((variant or {}).items())))


def _args(a_addr: int, b_addr: int, c_addr: int, work_addr: int, counter_addr: int, partials_addr: int,
          trace_addr: int, M: int, N: int, K: int, num_items: int, num_ctas: int, stream):
    """The kernel's arguments: 16-byte aligned global pointers, sizes, the grid and a stream."""
    ptr = functools.partial(launch.gmem_pointer, align=16)
    bf16 = cutlass.BFloat16
    return (ptr(bf16, a_addr), ptr(bf16, b_addr), ptr(bf16, c_addr), ptr(cutlass.Int32, work_addr),
            ptr(cutlass.Int32, counter_addr), ptr(cutlass.Float32, partials_addr), ptr(cutlass.Int64, trace_addr),
            *(cutlass.Int32(v) for v in (M, N, K, num_items, num_ctas)), stream)


@functools.lru_cache(maxsize=None)
def _launches(cfg: Config, device: int) -> launch.LaunchCache:
    """The kernel for `cfg` on one device, compiled on first use (with that device current), behind its launch
    cache. It is shape-generic: one compile serves every M, N, K."""
    dummy = _args(16, 16, 16, 16, 16, 16, 16, 1, ALIGN, ALIGN, 1, 1, make_fake_stream())
    with launch.on_device(device):
        compiled = cute.compile(HopperGemm(cfg), *dummy, options=f"--gpu-arch {ARCH}")
    return launch.LaunchCache(compiled, device=device)


def _check_operand(name: str, t) -> None:
    # Every call pays for these checks in the synchronised timing: cheap attribute reads only.
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype is not torch.bfloat16:
        raise ValueError(f"{name} must be bfloat16, got {t.dtype}")
    if not t.is_cuda:
        raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    if t.dim() != 2 or not t.is_contiguous():
        raise ValueError(f"{name} must be a contiguous (row-major) 2-D tensor, got shape {tuple(t.shape)} "
                         f"strides {t.stride()}")
    if t.data_ptr() % 16:
        raise ValueError(f"{name} must start on a 16-byte boundary for TMA (a fresh tensor does)")


def gemm(a: torch.Tensor, b: torch.Tensor, *, tile=None, stages=None, epilogue: str = "register",
         schedule: str = "balanced", out: torch.Tensor | None = None, cluster_m: int = DEFAULT_CLUSTER_M,
         band_rows: int | None = None, persistent: bool = True, dynamic: bool = True,
         defer_epilogue: bool | None = None, stream_k: bool = False, narrow_ns=None) -> torch.Tensor:
    """c = a @ b on an H100/H200: a [M, K], b [K, N] (both row-major bf16, as torch lays out `a @ b`),
    fp32 accumulation, c [M, N] bf16 (written into `out` if given).

    tile: (128, tile_n, 64), default (128, 256, 64). stages: ring depth, default the most that fit
    (gemm_kernels.stages). epilogue: "register" or "staged". schedule: "balanced" or "uniform".
    narrow_ns: the narrow widths the balanced plan may choose from, default all that `narrow_widths(tile_n,
    epilogue)` lists (for 256 and the register epilogue: 240, 224, 192, 128).
    cluster_m: 2 pairs CTAs along M to share B tiles by TMA multicast (halves B's L2 -> SMEM traffic).
    band_rows: the L2 raster of the work list (`banded`), default `band_rows_for(K)`; 1 keeps the planner's
    row-major order.
    persistent: False launches one CTA (pair) per work item and lets the hardware hand them out in order.
    dynamic: persistent CTAs take the next item of the list from a global counter (False: slot i runs items
    i, i + slots, ...).
    defer_epilogue: (register epilogue; None = on with it) store each item's C 32 columns at a time behind the
    next item's first 8 K-blocks, not all at once between the two (notes/perf-log.md, session 5).
    An option measured on the H200 and left off (notes/perf-log.md, session 4):
    stream_k: split a uniform plan's partial last wave along K over every slot (`work_rows`); at 4096^3
    handing a partial sum over cost ~10 us, more than the 0.12-wave tail it removes (-2 to -3 %).
    """
    M, N, K, device = _operands(a, b)
    call = _call_for(M, N, K, device, tile=tile, stages=stages, epilogue=epilogue, schedule=schedule,
                     cluster_m=cluster_m, band_rows=band_rows, persistent=persistent, dynamic=dynamic,
                     defer_epilogue=defer_epilogue, stream_k=stream_k, narrow_ns=narrow_ns)
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    else:
        _check_operand("out", out)
        if out.shape != (M, N) or out.get_device() != device:
            raise ValueError(f"out must be [{M}, {N}] on {a.device}, got {tuple(out.shape)} on {out.device}")

    # The launch goes to the current device and stream; only switch devices when `a` lives elsewhere
    # (the switch costs host time, which the per-call-synchronised benchmark would count).
    with contextlib.nullcontext() if device == torch.cuda.current_device() else torch.cuda.device(device):
        _launch(call, a, b, out, launch.stream_handle(device))
    return out


def _operands(a, b) -> tuple[int, int, int, int]:
    """(M, N, K, device) of checked operands for c = a @ b."""
    _check_operand("a", a)
    _check_operand("b", b)
    device = a.get_device()
    if b.get_device() != device:
        raise ValueError(f"a and b must be on one device, got {a.device} and {b.device}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    return M, N, K, device


def _launch(call: _Call, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, stream: int) -> None:
    """Launch `call`'s kernel on checked operands (through its launch cache: a graph replay after the first)."""
    addrs = (a.data_ptr(), b.data_ptr(), out.data_ptr(), call.work.data_ptr(),
             *(t.data_ptr() for t in call.scratch(stream)))
    call.launches(addrs + call.sizes, lambda s: _args(*addrs, *call.sizes, cuda_driver.CUstream(s)), stream)


def timeline(a: torch.Tensor, b: torch.Tensor, *, variant: dict | None = None, **options):
    """Run `gemm(a, b, **options)` once in a build that stamps the global nanosecond timer as each CTA runs
    (Config.trace; a separate compile, the timed kernel carries none of it). Returns (c, frame): the
    `trace_frame` of that launch, one row per segment a CTA ran, with the `width` of its work-list row.
    `variant`: extra Config fields to trace."""
    M, N, K, device = _operands(a, b)
    call = _call_for(M, N, K, device, variant={**(variant or {}), "trace": True}, **options)
    out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    stream = launch.stream_handle(device)
    trace = call.scratch(stream)[2]
    trace.fill_(-1)                      # a stamp never written reads -1, not an old launch's value
    _launch(call, a, b, out, stream)
    torch.cuda.synchronize(device)
    frame = trace_frame(trace.cpu().numpy(), call.cfg.cluster_m)
    frame.insert(frame.columns.get_loc("row") + 1, "width", call.work[:, 2].cpu().numpy()[frame.row.to_numpy()])
    return out, frame


def trace_frame(trace, cluster_m: int):
    """The timeline buffer [CTAs, TRACE_COLS] as a pandas DataFrame, one row per segment a CTA ran: cta,
    cluster, seq (its position in the CTA's run), row (of the work list), entry, start, data, mma_done, stored,
    exit, in microseconds from the first CTA's entry. start: the consumers have the row; data: its first
    K-block has landed; mma_done: its last WGMMA has finished; stored: C (or the partial) is written.
    A CTA that ran more than TRACE_SEGMENTS segments wrote its later ones over its last record."""
    import numpy as np
    import pandas as pd
    trace = np.asarray(trace, dtype=np.int64)
    if trace.ndim != 2 or trace.shape[1] != TRACE_COLS:
        raise ValueError(f"a trace is [CTAs, {TRACE_COLS}] int64, got shape {trace.shape}")
    if (trace[:, :2] < 0).any():
        raise ValueError("a CTA left no entry or exit stamp: the launch did not run to the end")
    t0 = trace[:, 0].min()
    nf = len(TRACE_FIELDS)
    records = []
    for cta, stamps in enumerate(trace):
        for seq in range(TRACE_SEGMENTS):
            fields = stamps[2 + seq * nf: 2 + (seq + 1) * nf]
            if fields[0] < 0:
                break
            rec = dict(cta=cta, cluster=cta // cluster_m, seq=seq, row=int(fields[0]),
                       entry=(stamps[0] - t0) / 1e3, exit=(stamps[1] - t0) / 1e3)
            rec.update({name: (v - t0) / 1e3 for name, v in zip(TRACE_FIELDS[1:], fields[1:])})
            records.append(rec)
    return pd.DataFrame.from_records(
        records, columns=["cta", "cluster", "seq", "row", "entry", *TRACE_FIELDS[1:], "exit"])

