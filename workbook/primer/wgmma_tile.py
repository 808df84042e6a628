"""Lesson 4: one warpgroup MMA on Hopper (sm_90a): C[64, N] = A[64, K] @ B[N, K]^T, bf16 in, fp32 out.

`wgmma.mma_async` is issued by a whole **warpgroup** (4 warps, 128 threads) and computes a 64 x N x 16
product (N a multiple of 8 up to 256) straight from shared memory: A and B are read through 64-bit
*descriptors* of swizzled shared-memory tiles, and the fp32 accumulator is spread over the registers of
the 128 threads (`partition_C` says which thread holds which element). A K-wide tile takes K/16 of them,
issued back to back into one accumulator. Around them:

    warpgroup.fence()         registers the MMAs read or write are ready (wgmma.fence)
    cute.gemm(...) x K/16     the MMAs themselves, asynchronous
    warpgroup.commit_group()  close a group of MMAs (wgmma.commit_group)
    warpgroup.wait_group(0)   wait until no group is pending: the accumulator is final (wgmma.wait_group)

The operands arrive by TMA into layouts from `make_smem_layout_a/b`: rows of K contiguous elements
("K-major"), swizzled so that the 8 rows of a core matrix fall into different shared-memory banks.
Each CTA computes one (64, N) tile of C; rows of A past M and rows of B past the matrix are zeros (TMA)
and are not stored.
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.utils.hopper_helpers as sm90_utils
import torch
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from workbook import sass
from workbook.primer import _common

BLOCK_M = 64      # the M of one WGMMA: one warpgroup
THREADS = 128
MMA_K = 16        # the K of one WGMMA for 16-bit inputs
K_CHOICES = (16, 32, 64)


@cute.kernel
def wgmma_kernel(tiled_mma: cute.TiledMma, load_a: cute.CopyAtom, a: cute.Tensor, load_b: cute.CopyAtom,
                 b: cute.Tensor, c: cute.Tensor, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
                 tile: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()

    @cute.struct
    class Shared:
        full: cutlass.Int64
        sa: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, cute.cosize(a_smem)], 1024]
        sb: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, cute.cosize(b_smem)], 1024]

    shared = cutlass.memory.SmemAllocator().allocate(Shared)
    sa = shared.sa.get_tensor(a_smem.outer, swizzle=a_smem.inner)   # (64, K, 1 stage), swizzled
    sb = shared.sb.get_tensor(b_smem.outer, swizzle=b_smem.inner)   # (N, K, 1 stage)
    ta_s, ta_g = cpasync.tma_partition(load_a, 0, cute.make_layout(1), cute.group_modes(sa, 0, 2),
                                       cute.group_modes(cute.local_tile(a, (tile[0], tile[2]), (bm, 0)), 0, 2))
    tb_s, tb_g = cpasync.tma_partition(load_b, 0, cute.make_layout(1), cute.group_modes(sb, 0, 2),
                                       cute.group_modes(cute.local_tile(b, (tile[1], tile[2]), (bn, 0)), 0, 2))
    if tidx == 0:
        cute.arch.mbarrier_init(shared.full.ptr, 1)
        cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    if tidx < 32:   # warp 0: one elected thread announces the bytes and issues both loads
        with cute.arch.elect_one():
            nbytes = cute.size_in_bytes(cutlass.BFloat16, one_stage(a_smem)) + \
                cute.size_in_bytes(cutlass.BFloat16, one_stage(b_smem))
            cute.arch.mbarrier_arrive_and_expect_tx(shared.full.ptr, nbytes)
        cute.copy(load_a, ta_g, ta_s[(None, 0)], tma_bar_ptr=shared.full.ptr)
        cute.copy(load_b, tb_g, tb_s[(None, 0)], tma_bar_ptr=shared.full.ptr)
    cute.arch.mbarrier_wait(shared.full.ptr, 0)
    wgmma_tile(tiled_mma, sa, sb, c, bm, bn, tidx, tile)


@cute.jit
def wgmma_tile(tiled_mma: cute.TiledMma, sa: cute.Tensor, sb: cute.Tensor, c: cute.Tensor, bm, bn, tidx,
               tile: cutlass.Constexpr):
    """The warpgroup's part: K/16 WGMMAs from shared memory into registers, then store what lies inside C."""
    thr_mma = tiled_mma.get_slice(tidx)
    frag_a = tiled_mma.make_fragment_A(thr_mma.partition_A(sa))   # descriptors: (MMA, 1, K/16, 1)
    frag_b = tiled_mma.make_fragment_B(thr_mma.partition_B(sb))
    coords = thr_mma.partition_C(cute.make_identity_tensor((tile[0], tile[1])))  # (row, col) of my values
    acc = cute.make_rmem_tensor(coords.shape, cutlass.Float32)                   # N/2 fp32 registers

    warpgroup.fence()
    for k in cutlass.range_constexpr(tile[2] // MMA_K):
        tiled_mma.set(warpgroup.Field.ACCUMULATE, k > 0)   # the first MMA overwrites, the others add
        cute.gemm(tiled_mma, acc, frag_a[(None, None, k, 0)], frag_b[(None, None, k, 0)], acc)
    warpgroup.commit_group()
    warpgroup.wait_group(0)

    for v in cutlass.range_constexpr(cute.size(acc)):
        row, col = bm * tile[0] + coords[v][0], bn * tile[1] + coords[v][1]
        if row < c.shape[0] and col < c.shape[1]:
            c[row, col] = acc[v]


@cute.jit
def wgmma_host(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, n_tile: cutlass.Constexpr, stream):
    tile = (BLOCK_M, n_tile, a.shape[1])   # (M, N, K) of one CTA; K is compiled in
    k_major = cute.nvgpu.OperandMajorMode.K
    tiled_mma = sm90_utils.make_trivial_tiled_mma(cutlass.BFloat16, cutlass.BFloat16, k_major, k_major,
                                                  cutlass.Float32, (1, 1, 1), tiler_mn=(BLOCK_M, n_tile))
    a_smem, b_smem = _smem_layouts(tile)   # K-major, swizzled; one stage
    g2s = cpasync.CopyBulkTensorTileG2SOp()
    load_a, tma_a = cpasync.make_tiled_tma_atom(g2s, a, one_stage(a_smem), (tile[0], tile[2]))
    load_b, tma_b = cpasync.make_tiled_tma_atom(g2s, b, one_stage(b_smem), (tile[1], tile[2]))
    grid = (cute.ceil_div(a.shape[0], BLOCK_M), cute.ceil_div(b.shape[0], n_tile), 1)
    wgmma_kernel(tiled_mma, load_a, tma_a, load_b, tma_b, c, a_smem, b_smem, tile).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


def _smem_layouts(tile):
    a_smem = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile, cutlass.BFloat16, 1)
    b_smem = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, tile, cutlass.BFloat16, 1)
    return a_smem, b_smem


def one_stage(smem: cute.ComposedLayout) -> cute.ComposedLayout:
    """Stage 0, (rows, K), of a staged swizzled shared-memory layout, with its swizzle.

    Not `cute.slice_(smem, (None, None, 0))`: in CuTe DSL 4.8.1 the slice simplifies the swizzle against
    the tile's offsets in elements, but the swizzle acts on byte addresses. An 8 x 16 bf16 tile (N = 8,
    K = 16) has element offsets below 128, bytes up to 255: the slice drops SW32 (byte bit 7 into bit 4)
    as if it did nothing, the TMA then stores B unswizzled while the WGMMA reads it swizzled (rows 4-7
    with their two 16-byte halves swapped). For N = 24, 40, 56, ... (an odd number of 8-row groups) the
    slice aborts the process. `select` takes the modes as they are."""
    return cute.select(smem, mode=[0, 1])


def tx_bytes(k: int = 16, n_tile: int = 64) -> int:
    """The bytes the kernel's one mbarrier is armed with: the A tile and the B tile in shared memory."""
    from workbook.primer import layouts
    _check(k, n_tile)

    def fn():
        a_smem, b_smem = _smem_layouts((BLOCK_M, n_tile, k))
        return sum(cute.size_in_bytes(cutlass.BFloat16, one_stage(s)) for s in (a_smem, b_smem))
    return layouts.trace(fn)


def _check(k: int, n_tile: int) -> None:
    if k not in K_CHOICES:
        raise ValueError(f"K must be one of {K_CHOICES} (one swizzle atom of bf16 at most), got {k}")
    if n_tile % 8 or not 8 <= n_tile <= 256:
        raise ValueError(f"the WGMMA N must be a multiple of 8 from 8 to 256, got {n_tile}")


@functools.lru_cache(maxsize=None)
def compile(k: int = 16, n_tile: int = 64, arch: str = "sm_90a") -> sass.Artifacts:
    """C = A @ B^T for A [M, k], B [N, k] bf16 (M, N runtime values) and fp32 C, with no GPU."""
    _check(k, n_tile)
    return _common.compile_tile(wgmma_host, k, n_tile, arch)


def matmul_t(a: torch.Tensor, b: torch.Tensor, n_tile: int = 64, out: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b.T in fp32 for bf16 CUDA matrices a [M, K], b [N, K], K in (16, 32, 64), N a multiple of 4."""
    return _common.tile_matmul_t(wgmma_host, "wgmma", a, b, n_tile, out, _check, arch="sm_90a")
