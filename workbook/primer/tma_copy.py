"""Lesson 3: copy a matrix tile by tile with TMA (sm_90a and later).

The Tensor Memory Accelerator copies a whole box of a tensor between global and shared memory on behalf
of one thread. The host encodes a **descriptor** once (`make_tiled_tma_atom`: the tensor's base, shape,
strides and the box size); in the kernel one thread issues the copy with box coordinates, and the others
do not take part. Completion is counted in bytes on an **mbarrier** in shared memory: the issuing thread
announces how many bytes will arrive (`mbarrier_arrive_and_expect_tx`), the TMA unit decrements that
transaction count as the data lands, and the barrier's phase flips once the count reaches zero and every
expected thread has arrived. Whoever waits on the phase (`mbarrier_wait`) then sees the whole tile.

Here each CTA loads one (64, 64) tile of `x` into shared memory and stores it back to `out` with a TMA
store. TMA clips the box at the tensor's edge: a load fills what lies past the edge with zeros, a store
writes nothing there, so the tail tiles need no code at all.
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
import cutlass.memory
import torch
from cutlass.cute.nvgpu import cpasync

from workbook import sass
from workbook.primer import _common

TILE = (64, 64)   # rows x columns per CTA: 16 KiB of fp32, 8 KiB of bf16
THREADS = 32      # one warp: one elected thread issues, all of them wait on the barrier


def tx_bytes(dtype, tile=TILE) -> int:
    """The transaction count of one tile: every byte of the box, including any part past the tensor's edge
    (TMA still writes those bytes to shared memory, as zeros)."""
    return tile[0] * tile[1] * dtype.width // 8


@cute.kernel
def tma_copy_kernel(load: cute.CopyAtom, x: cute.Tensor, store: cute.CopyAtom, out: cute.Tensor,
                    smem_layout: cute.Layout, dtype: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()

    @cute.struct
    class Shared:
        full: cutlass.Int64                                   # the mbarrier: 8 bytes of shared memory
        tile: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(smem_layout)], 128]

    shared = cutlass.memory.SmemAllocator().allocate(Shared)
    full = shared.full.ptr
    s_tile = shared.tile.get_tensor(smem_layout)
    # the TMA views of this CTA's box: x and out are coordinate tensors, s_tile is addresses
    s_in, g_in = cpasync.tma_partition(load, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2),
                                       cute.group_modes(cute.local_tile(x, TILE, (bm, bn)), 0, 2))
    s_out, g_out = cpasync.tma_partition(store, 0, cute.make_layout(1), cute.group_modes(s_tile, 0, 2),
                                         cute.group_modes(cute.local_tile(out, TILE, (bm, bn)), 0, 2))
    if tidx == 0:
        cute.arch.mbarrier_init(full, 1)      # one arrival expected: the issuing thread's
        cute.arch.mbarrier_init_fence()       # make the initialised barrier visible to the TMA unit
    cute.arch.sync_threads()

    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(full, cute.size_in_bytes(dtype, smem_layout))
    cute.copy(load, g_in, s_in, tma_bar_ptr=full)   # global -> shared; the DSL elects one thread to issue it
    cute.arch.mbarrier_wait(full, 0)          # phase 0 completes when all the bytes have landed

    with cute.arch.elect_one():
        cute.copy(store, s_out, g_out)        # shared -> global; the unit reads shared memory asynchronously
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(0, read=True)  # shared memory must outlive the store's reads


@cute.jit
def tma_copy_host(x: cute.Tensor, out: cute.Tensor, stream):
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))   # row-major, unswizzled
    load, tma_x = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), x, smem_layout, TILE)
    store, tma_out = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), out, smem_layout, TILE)
    grid = (cute.ceil_div(x.shape[0], TILE[0]), cute.ceil_div(x.shape[1], TILE[1]), 1)
    tma_copy_kernel(load, tma_x, store, tma_out, smem_layout, x.element_type).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


_DTYPES = (torch.float32, torch.bfloat16)


@functools.lru_cache(maxsize=None)
def compile(cols: int = 200, dtype: torch.dtype = torch.float32, arch: str = "sm_90a") -> sass.Artifacts:
    """The TMA copy for [rows, cols] matrices of `dtype` (rows a runtime value), with no GPU."""
    el = _common.CUTLASS_DTYPES[dtype]
    x, out = (_common.fake_matrix(el, cols) for _ in range(2))
    return sass.compile_for(tma_copy_host, x, out, _common.fake_stream(), arch=arch)


def copy(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x through shared memory by TMA (fp32 or bf16 CUDA matrix, rows a multiple of 16 bytes)."""
    _common.require(x, "x", dtypes=_DTYPES, ndim=2)
    out = torch.empty_like(x) if out is None else out
    _common.require(out, "out", dtypes=(x.dtype,), ndim=2)
    if out.shape != x.shape:
        raise ValueError(f"out must have x's shape {tuple(x.shape)}, got {tuple(out.shape)}")
    arch = _common.device_arch(x.device)
    args = [_common.runtime_tensor(x), _common.runtime_tensor(out), _common.stream(x.device)]
    _common.compiled_for_device(("tma_copy", x.shape[1], x.dtype, arch), tma_copy_host, *args, arch=arch)(*args)
    return out
