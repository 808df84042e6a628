"""Lesson 5: the same product on Blackwell (sm_100a): C[128, N] = A[128, K] @ B[N, K]^T with tcgen05.

What changes from Hopper's WGMMA (lesson 4):

* **One thread issues the MMA.** `tcgen05.mma` is a single-thread instruction: one elected thread of one
  warp launches a 128 x N x 16 product for the whole CTA (the DSL inserts the election for `cute.gemm`).
  The other warps are free to do anything else meanwhile.
* **The accumulator lives in tensor memory (TMEM)**, 128 lanes x 512 columns of 32-bit cells per SM, not in
  registers. It is allocated (`TmemAllocator`, in columns, a power of two >= 32) and freed explicitly; a
  128 x N fp32 accumulator takes N columns: lane i holds row i.
* **Completion goes to an mbarrier.** `tcgen05.commit` makes the mbarrier arrive once all MMAs issued before
  it are done; waiters then know the accumulator is final (Hopper waits in registers: `wgmma.wait_group`).
* **tcgen05.ld brings it to registers.** Warp w may read only lanes 32w..32w+31, so with 4 warps thread t
  reads row t. The load is asynchronous: `tcgen05.wait::ld` (`fence_view_async_tmem_load`) must come
  before the registers are used.
* **Two CTAs can share one MMA** (`CtaGroup.TWO`, a 2-CTA cluster on neighbouring SMs): one thread of the
  pair issues a 256 x N x 16 MMA, each CTA holds half of A and of the accumulator and half of B, so each
  SM loads half of B for the same work. This lesson uses one CTA (`CtaGroup.ONE`).

We have no Blackwell GPU: this kernel is compiled for sm_100a and read in SASS here; `matmul_t` runs it on
a B200 and `tests/test_primer.py` checks it there.
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.memory
import cutlass.utils.blackwell_helpers as sm100_utils
import torch
from cutlass.cute.nvgpu import cpasync, tcgen05

from workbook import sass
from workbook.primer import _common

BLOCK_M = 128     # one tcgen05.mma with cta_group::1: M = 128 = TMEM lanes
THREADS = 128     # 4 warps: warp w reads TMEM lanes 32w..32w+31
MMA_K = 16
K_CHOICES = (16, 32, 64)
N_CHOICES = (32, 64, 128, 256)   # TMEM is allocated in powers of two of at least 32 columns
LOAD_COLUMNS = 32  # columns per tcgen05.ld: Ld32x32bOp x32, one register per column and thread
TMEM_BARRIER = 1   # named barrier for the TMEM address hand-off (0 is __syncthreads)


@cute.kernel
def tcgen05_kernel(tiled_mma: cute.TiledMma, load_a: cute.CopyAtom, a: cute.Tensor, load_b: cute.CopyAtom,
                   b: cute.Tensor, c: cute.Tensor, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
                   tile: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    @cute.struct
    class Shared:
        loaded: cutlass.Int64      # TMA -> MMA: A and B are in shared memory
        computed: cutlass.Int64    # MMA -> everyone: the accumulator in TMEM is final
        tmem_address: cutlass.Int32

    smem = cutlass.memory.SmemAllocator()
    shared = smem.allocate(Shared)
    sa = smem.allocate_tensor(cutlass.BFloat16, a_smem.outer, 128, swizzle=a_smem.inner)
    sb = smem.allocate_tensor(cutlass.BFloat16, b_smem.outer, 128, swizzle=b_smem.inner)
    thr_mma = tiled_mma.get_slice(0)
    ta_s, ta_g = cpasync.tma_partition(load_a, 0, cute.make_layout(1), cute.group_modes(sa, 0, 3), cute.group_modes(
        thr_mma.partition_A(cute.local_tile(a, (tile[0], tile[2]), (bm, None))), 0, 3))
    tb_s, tb_g = cpasync.tma_partition(load_b, 0, cute.make_layout(1), cute.group_modes(sb, 0, 3), cute.group_modes(
        thr_mma.partition_B(cute.local_tile(b, (tile[1], tile[2]), (bn, None))), 0, 3))
    frag_a, frag_b = tiled_mma.make_fragment_A(sa), tiled_mma.make_fragment_B(sb)   # smem descriptors
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(shared.loaded.ptr, 1)
            cute.arch.mbarrier_init(shared.computed.ptr, 1)
        cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    # TMEM: warp 0 allocates tile[1] columns and writes their address to shared memory
    tmem = cutlass.memory.TmemAllocator(shared.tmem_address.ptr,
                               barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=TMEM_BARRIER, num_threads=THREADS))
    tmem.allocate(tile[1])
    tmem.wait_for_alloc()
    acc_layout = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C((tile[0], tile[1]))).layout
    acc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), acc_layout)

    if warp == 0:
        issue_mma(tiled_mma, load_a, ta_g, ta_s, load_b, tb_g, tb_s, frag_a, frag_b, acc, shared, tile)
    cute.arch.mbarrier_wait(shared.computed.ptr, 0)
    store_accumulator(acc, c, bm, bn, tidx, tile)

    cute.arch.sync_threads()       # every warp has read TMEM before it is freed
    if warp == 0:
        tmem.relinquish_alloc_permit()
        tmem.free(acc.iterator)


@cute.jit
def issue_mma(tiled_mma, load_a, ta_g, ta_s, load_b, tb_g, tb_s, frag_a, frag_b, acc, shared, tile: cutlass.Constexpr):
    """Warp 0: TMA both operands, wait for them, then one thread issues K/16 MMAs and commits."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(shared.loaded.ptr, (tile[0] + tile[1]) * tile[2] * 2)
    cute.copy(load_a, ta_g[(None, 0)], ta_s[(None, 0)], tma_bar_ptr=shared.loaded.ptr)  # elected inside
    cute.copy(load_b, tb_g[(None, 0)], tb_s[(None, 0)], tma_bar_ptr=shared.loaded.ptr)
    cute.arch.mbarrier_wait(shared.loaded.ptr, 0)
    for k in cutlass.range_constexpr(tile[2] // MMA_K):
        tiled_mma.set(tcgen05.Field.ACCUMULATE, k != 0)
        cute.gemm(tiled_mma, acc, frag_a[(None, None, k, 0)], frag_b[(None, None, k, 0)], acc)
    with cute.arch.elect_one():
        tcgen05.commit(shared.computed.ptr)   # arrives on `computed` when the MMAs above are complete


@cute.jit
def store_accumulator(acc, c, bm, bn, tidx, tile: cutlass.Constexpr):
    """All 4 warps: tcgen05.ld my TMEM lane (row tidx) into registers, wait for the load, store to C."""
    t2r = tcgen05.make_tmem_copy(cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32), cutlass.Float32),
                                 acc[((None, None), 0, 0)])
    thr_t2r = t2r.get_slice(tidx)
    coords = thr_t2r.partition_D(cute.make_identity_tensor((tile[0], tile[1])))
    frag = cute.make_rmem_tensor(coords.shape, cutlass.Float32)
    cute.copy(t2r, thr_t2r.partition_S(acc[((None, None), 0, 0)]), frag)
    cute.arch.fence_view_async_tmem_load()    # tcgen05.wait::ld: the registers now hold the values
    for v in cutlass.range_constexpr(cute.size(frag)):
        row, col = bm * tile[0] + coords[v][0], bn * tile[1] + coords[v][1]
        if row < c.shape[0] and col < c.shape[1]:
            c[row, col] = frag[v]


@cute.jit
def tcgen05_host(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, n_tile: cutlass.Constexpr, stream):
    tile = (BLOCK_M, n_tile, a.shape[1])
    k_major = cute.nvgpu.OperandMajorMode.K
    tiled_mma = sm100_utils.make_trivial_tiled_mma(cutlass.BFloat16, cutlass.BFloat16, k_major, k_major,
                                                   cutlass.Float32, tcgen05.CtaGroup.ONE, (BLOCK_M, n_tile))
    a_smem = sm100_utils.make_smem_layout_a(tiled_mma, tile, cutlass.BFloat16, 1)
    b_smem = sm100_utils.make_smem_layout_b(tiled_mma, tile, cutlass.BFloat16, 1)
    op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
    tma_a = cute.nvgpu.make_tiled_tma_atom_A(op, a, cute.select(a_smem, mode=[0, 1, 2]), tile, tiled_mma)
    tma_b = cute.nvgpu.make_tiled_tma_atom_B(op, b, cute.select(b_smem, mode=[0, 1, 2]), tile, tiled_mma)
    grid = (cute.ceil_div(a.shape[0], BLOCK_M), cute.ceil_div(b.shape[0], n_tile), 1)
    tcgen05_kernel(tiled_mma, tma_a.atom, tma_a.tma_tensor, tma_b.atom, tma_b.tma_tensor, c, a_smem, b_smem,
                   tile).launch(grid=grid, block=(THREADS, 1, 1), stream=stream)


def _check(k: int, n_tile: int) -> None:
    if k not in K_CHOICES:
        raise ValueError(f"K must be one of {K_CHOICES}, got {k}")
    if n_tile not in N_CHOICES:
        raise ValueError(f"the tile's N must be one of {N_CHOICES} (TMEM columns), got {n_tile}")


@functools.lru_cache(maxsize=None)
def compile(k: int = 16, n_tile: int = 64, arch: str = "sm_100a") -> sass.Artifacts:
    """C = A @ B^T for A [M, k], B [N, k] bf16 and fp32 C (M, N runtime values) for sm_100a, with no GPU."""
    _check(k, n_tile)
    return _common.compile_tile(tcgen05_host, k, n_tile, arch)


def matmul_t(a: torch.Tensor, b: torch.Tensor, n_tile: int = 64, out: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b.T in fp32 on a B200 for bf16 CUDA matrices a [M, K], b [N, K], K in (16, 32, 64), N % 4 == 0."""
    return _common.tile_matmul_t(tcgen05_host, "tcgen05", a, b, n_tile, out, _check, arch="sm_100a")
