"""GEMM step 4: a persistent grid whose last wave is balanced by narrower tiles (Hopper, sm_90a). One change
from step 3: which CTA computes which tile, and how wide the tiles of the last wave are.

    c = gemm(a, b)                          # as step 3; default tile 128 x 256 (4 stages), balanced schedule
    c = gemm(a, b, schedule="uniform")      # the same persistent kernel with every tile 256 wide
    plan(4096, 4096).describe()             # the work list the kernel walks (gemm_kernels.waves)

The tail. Up to step 3 the grid had one CTA per tile and the hardware started a CTA wherever one finished.
The tiles run in *waves* of 132 (one CTA per SM: a CTA holds ~193 KiB of shared memory): 4096 x 4096 in
128 x 256 tiles is 512 tiles = 3.88 waves, so the fourth wave keeps 116 SMs busy and 16 idle, and the
*makespan* (the time until the last SM finishes) is 4 tile times for 3.88 tiles of work per SM.

The re-cut (gemm_kernels.waves.plan, seed 004's rule). A group of g wide tiles side by side in one tile row
(g x W columns) is re-cut into g + 1 narrow tiles of width w = g W / (g + 1): the same columns, one item
more. (-512) mod 132 = 16 re-cuts make 528 = 4 x 132 items, and with g = 15 (w = 240) the 16 re-cut rows
hold 256 narrow tiles. Scheduled last, they fill the last wave with shorter items: the planner's model
(a tile's time proportional to its width) predicts a makespan of 3 + 240/256 = 3.94 instead of 4.00, at
most 1.6 % here and more where the last wave is emptier (the poor-wave shapes of notebook 12). Widths go in
steps of 16 columns (WIDTH_STEP: for 256, the planner may pick 240, 224, 192 or 128).

The kernel. A persistent grid of min(items, 132) CTAs; CTA s runs items s, s + grid, s + 2 grid, ...
(the "static" schedule, which is exactly what the planner simulates). The work list holds (m0, n0, width)
per item: the wide tiles in bands of BAND_ROWS tile rows (step 1's raster), then the narrow ones. The ring
keeps running across items, so the producer loads the next item's first K-blocks while the consumers
store this one's c. A narrow item loads the same 256-wide box of B (so the producer and its byte count
never change) and the consumers issue a second, narrower WGMMA (N = w, compile-time) over the first w
columns of the same shared-memory stage, into the first registers of the same accumulator (WGMMA keeps
the 8-column groups outermost, so a narrow accumulator is a prefix of the wide one); the epilogue stores
only the item's w columns. One compiled kernel serves both widths; the branch is once per item.

Tails: step 3's, with every store also predicated on the item's last column n0 + width.
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

from gemm_kernels import waves
from gemm_kernels.steps import common
from gemm_kernels.steps.step2_register_epilogue import quad_transpose

TILE_M, TILE_K = 128, 64       # two consumer warpgroups x 64 rows; 64 bf16 = one 128-byte swizzle row of A
DEFAULT_TILE_N = 256           # back to the wide tile: on the H200, step 3's 7 stages on 128 x 128 did not beat it
WIDTH_STEP = 16                # narrow widths in steps of 16 columns (module doc)
BAND_ROWS = 8                  # tile rows per band of the work list
SCHEDULES = ("balanced", "uniform")
THREADS = 384                  # producer warpgroup + two consumer warpgroups
PRODUCER_REGS, CONSUMER_REGS = 40, 232   # 128 x 40 + 256 x 232 <= 64K registers of the SM


class Gemm:
    """The kernel for one dtype, tile width, narrow width (None: uniform) and ring depth."""

    def __init__(self, dtype, tile_n: int, narrow_n: int | None, stages: int):
        self.dtype, self.tile_n, self.narrow_n, self.stages = dtype, tile_n, narrow_n, stages

    @cute.jit
    def __call__(self, a_ptr: cute.Pointer, b_ptr: cute.Pointer, c_ptr: cute.Pointer, work_ptr: cute.Pointer,
                 M: cutlass.Int32, N: cutlass.Int32, K: cutlass.Int32, num_items: cutlass.Int32,
                 num_ctas: cutlass.Int32, stream):
        k8, n8 = cute.assume(K, divby=common.ALIGN), cute.assume(N, divby=common.ALIGN)
        a = cute.make_tensor(a_ptr, cute.make_layout((M, K), stride=(k8, 1)))
        b = cute.make_tensor(b_ptr, cute.make_layout((N, K), stride=(1, n8)))   # [K, N] row-major = (N, K) N-major
        c = cute.make_tensor(c_ptr, cute.make_layout((M, N), stride=(n8, 1)))
        work = cute.make_tensor(work_ptr, cute.make_layout((num_items, 3), stride=(3, 1)))   # (m0, n0, width)
        tile, dt = (TILE_M, self.tile_n, TILE_K), self.dtype

        def mma_for(n):   # (2, 1, 1): the two consumer warpgroups split the rows; each issues m64 x n x k16
            return sm90.make_trivial_tiled_mma(dt, dt, OperandMajorMode.K, OperandMajorMode.MN, cutlass.Float32,
                                               (2, 1, 1), tiler_mn=(64, n))
        tiled_mma = mma_for(self.tile_n)
        narrow_mma = mma_for(self.narrow_n) if cutlass.const_expr(self.narrow_n is not None) else tiled_mma
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
        self.kernel(tma_a, mA, tma_b, mB, c, work, tiled_mma, narrow_mma, a_layout, b_layout).launch(
            grid=[num_ctas, 1, 1], block=[THREADS, 1, 1], min_blocks_per_mp=1, stream=stream)

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               mC: cute.Tensor, work: cute.Tensor, tiled_mma: cute.TiledMma, narrow_mma: cute.TiledMma,
               a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
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
        k_blocks = (mA.shape[1] + TILE_K - 1) // TILE_K

        if warp < 4:
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp == 0:
                self.produce(ring, tma_a, mA, sA, tma_b, mB, sB, work, k_blocks)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            self.consume(tiled_mma, narrow_mma, ring, sA, sB, mC, work, k_blocks, tidx - 128)

    @cute.jit
    def produce(self, ring, tma_a, mA, sA, tma_b, mB, sB, work, k_blocks):
        """One warp: for each of this CTA's items, every K-block of A and B into the next free stage."""
        cta, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        for item in range(cta, work.shape[0], grid):                          # the static schedule
            # offset the coordinate tensors to the item's corner: a narrow item is not on the wide grid
            gA = cute.local_tile(cute.domain_offset((work[item, 0], 0), mA), (TILE_M, TILE_K), (0, None))
            gB = cute.local_tile(cute.domain_offset((work[item, 1], 0), mB), (self.tile_n, TILE_K), (0, None))
            tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                               cute.group_modes(gA, 0, 2))
            tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                               cute.group_modes(gB, 0, 2))
            for kb in range(k_blocks):
                ring.producer_acquire(state)
                full = ring.producer_get_barrier(state)
                cute.copy(tma_a, tAgA[(None, kb)], tAsA[(None, state.index)], tma_bar_ptr=full)
                cute.copy(tma_b, tBgB[(None, kb)], tBsB[(None, state.index)], tma_bar_ptr=full)
                state.advance()
        ring.producer_tail(state)

    @cute.jit
    def consume(self, tiled_mma, narrow_mma, ring, sA, sB, mC, work, k_blocks, ctidx):
        """Two warpgroups: per item, the K loop at the item's width, then the register epilogue."""
        cta, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        wg = tiled_mma.get_slice((ctidx // 128) * 128)
        tCrA = tiled_mma.make_fragment_A(wg.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(wg.partition_B(sB))
        acc = cute.make_rmem_tensor(wg.partition_shape_C((TILE_M, self.tile_n)), cutlass.Float32)
        has_narrow = cutlass.const_expr(self.narrow_n is not None)
        if cutlass.const_expr(has_narrow):   # the narrow accumulator: a prefix of the wide one's registers
            narrow_shape = narrow_mma.get_slice((ctidx // 128) * 128).partition_shape_C((TILE_M, self.narrow_n))
            acc_narrow = cute.make_tensor(acc.iterator, cute.make_layout(narrow_shape))
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)     # every K loop zeroes its accumulator first
        narrow_mma.set(warpgroup.Field.ACCUMULATE, True)    # (set out here: a set inside a branch stays there)
        for item in range(cta, work.shape[0], grid):
            m0, n0, width = work[item, 0], work[item, 1], work[item, 2]
            if cutlass.const_expr(has_narrow):
                if width < self.tile_n:
                    read, release = self.mainloop(narrow_mma, acc_narrow, tCrA, tCrB, ring, read, release, k_blocks)
                else:
                    read, release = self.mainloop(tiled_mma, acc, tCrA, tCrB, ring, read, release, k_blocks)
            else:
                read, release = self.mainloop(tiled_mma, acc, tCrA, tCrB, ring, read, release, k_blocks)
            self.epilogue(tiled_mma, acc, mC, m0, n0, width, ctidx)

    @cute.jit
    def mainloop(self, mma, acc, tCrA, tCrB, ring, read, release, k_blocks):
        """One item's K loop at one width (one copy per width: a width branch inside the loop would split its
        WGMMA groups); it zeroes its own accumulator and waits for its own last WGMMAs."""
        acc.fill(0.0)
        warpgroup.fence()
        for kb in range(k_blocks):
            ring.consumer_wait(read)
            for k in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                crd = (None, None, k, read.index)
                cute.gemm(mma, acc, tCrA[crd], tCrB[crd], acc)
            warpgroup.commit_group()
            read.advance()
            warpgroup.wait_group(1)
            if kb > 0:
                ring.consumer_release(release)
                release.advance()
        warpgroup.wait_group(0)
        ring.consumer_release(release)
        release.advance()
        return read, release

    @cute.jit
    def epilogue(self, tiled_mma, acc, mC, m0, n0, width, ctidx):
        """Step 2's register epilogue, for the item's first `width` columns only."""
        M, N = mC.shape
        col_end = cutlass.min(N, n0 + width)
        q = ctidx % 4
        coords = tiled_mma.get_slice(ctidx).partition_C(cute.make_identity_tensor((TILE_M, self.tile_n)))
        block = cute.make_rmem_tensor((2, 2, 4), cutlass.Float32)      # (pair, row half, group) of 32 columns
        block_c = cute.make_rmem_tensor((2, 2, 4), self.dtype)
        out = cute.make_rmem_tensor((4,), cutlass.Int32)
        for j in cutlass.range_constexpr(self.tile_n // 32):
            if j * 32 < width:
                for h in cutlass.range_constexpr(2):
                    for t in cutlass.range_constexpr(4):
                        for p in cutlass.range_constexpr(2):
                            block[p, h, t] = acc[(p, h, 4 * j + t), 0, 0]
                block_c.store(block.load().to(self.dtype))
                words = cute.recast_tensor(block_c, cutlass.Int32)
                for h in cutlass.range_constexpr(2):
                    w = quad_transpose([words[0, h, t] for t in range(4)], q)
                    row_in_tile, col0 = coords[(0, h, 4 * j), 0, 0]
                    row = m0 + row_in_tile
                    col = n0 + col0 - 2 * q + 8 * q
                    if row < M and col < col_end:
                        for t in cutlass.range_constexpr(4):
                            out[t] = w[t]
                        ptr = mC.iterator + (cutlass.Int64(row) * mC.stride[0] + col)
                        cute.arch.store(ptr, out.load().ir_value())


# ------------------------------------------------------------------------------------------------ host API

def plan(M: int, N: int, *, tile_n: int = DEFAULT_TILE_N, schedule: str = "balanced", gpu=None) -> waves.Plan:
    """The planner's items for this GEMM on `gpu` (default: this GPU, else the H200), one CTA per item."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    from workbook import gpus
    widths = (tile_n, *waves.narrow_widths(tile_n, multiple_of=WIDTH_STEP))
    return waves.plan(M, N, gpu=gpu or gpus.current() or gpus.H200, tile_m=TILE_M, tile_ns=widths,
                      balanced=schedule == "balanced", schedule="static", ctas_per_item=1)


def work_list(plan: waves.Plan) -> list[tuple[int, int, int]]:
    """(m0, n0, width) per item: the wide tiles in bands of BAND_ROWS tile rows, column by column, then the
    narrow ones the same way. Slot s still runs the same widths in the same order, so the plan's makespan holds."""
    key = lambda t: (t.m0 // (TILE_M * BAND_ROWS), t.n0, t.m0)   # noqa: E731
    wide = sorted((t for t in plan.items if t.width == plan.wide), key=key)
    return [tuple(t) for t in wide + sorted((t for t in plan.items if t.width != plan.wide), key=key)]


def _args(kernel: Gemm, a: int, b: int, c: int, work: int, M: int, N: int, K: int, items: int, ctas: int, stream):
    return (*common.pointers(kernel.dtype, a, b, c), *common.pointers(cutlass.Int32, work),
            *common.sizes(M, N, K, items, ctas), stream)


@functools.lru_cache(maxsize=None)
def _kernel(dtype: torch.dtype, tile_n: int, narrow_n: int | None, stages: int | None) -> Gemm:
    if tile_n not in (128, 256):
        raise ValueError(f"tile_n must be 128 or 256 (whole 64-column swizzle blocks of B), got {tile_n!r}")
    if stages is not None and (isinstance(stages, bool) or not isinstance(stages, int) or stages < 2):
        raise ValueError(f"stages must be an int >= 2, got {stages!r}")
    from gemm_kernels.stages import stages as budget
    stages = budget((TILE_M, tile_n, TILE_K), "register", common.ARCH, depth=stages).stages   # step 3's rule
    return Gemm(common.cute_dtype(dtype), tile_n, narrow_n, stages)


def compile(M: int, N: int, K: int, *, dtype: torch.dtype = torch.bfloat16, tile_n: int = DEFAULT_TILE_N,
            stages: int | None = None, schedule: str = "balanced", arch: str = common.ARCH, dump_dir=None):
    """Compile, with no GPU, the kernel `gemm` runs for this shape on an H200 (the plan picks the narrow width)."""
    from workbook import gpus
    common.check_shape(M, N, K)
    work = plan(M, N, tile_n=tile_n, schedule=schedule, gpu=gpus.H200)
    kernel = _kernel(dtype, tile_n, work.narrow, stages)
    args = _args(kernel, 16, 16, 16, 16, M, N, K, len(work.items), min(len(work.items), work.slots),
                 common.fake_stream())
    return common.compile_step(kernel, args, arch, dump_dir)


@functools.lru_cache(maxsize=None)
def _launches(dtype: torch.dtype, tile_n: int, narrow_n: int | None, stages: int | None):
    kernel = _kernel(dtype, tile_n, narrow_n, stages)
    return kernel, common.launches_for(kernel, _args(kernel, 16, 16, 16, 16, 1, 8, 8, 1, 1, common.fake_stream()))


@functools.lru_cache(maxsize=64)
def _work(M: int, N: int, tile_n: int, schedule: str, device: torch.device):
    """The plan's work list on the device and the grid: planned once per shape (Python, milliseconds)."""
    p = plan(M, N, tile_n=tile_n, schedule=schedule)
    return p, torch.tensor(work_list(p), dtype=torch.int32, device=device), min(len(p.items), p.slots)


def gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *, tile_n: int = DEFAULT_TILE_N,
         stages: int | None = None, schedule: str = "balanced") -> torch.Tensor:
    """c = a @ b on an H100/H200 (see the module doc); written into `out` [M, N] when given."""
    M, N, K, out = common.operands(a, b, out)
    p, work, ctas = _work(M, N, tile_n, schedule, a.device)
    kernel, launches = _launches(a.dtype, tile_n, p.narrow, stages)
    addrs = (a.data_ptr(), b.data_ptr(), out.data_ptr(), work.data_ptr())
    sizes = (M, N, K, work.shape[0], ctas)
    common.run(launches, addrs + sizes, lambda s: _args(kernel, *addrs, *sizes, s), a.device)
    return out
