"""Lesson 1: layouts and tensors.

A **layout** is a function from coordinates to offsets, written `shape:stride`: `(8,16):(16,1)` sends
(i, j) to 16*i + 1*j (a row-major 8 x 16 matrix). A **tensor** is a pointer (or an iterator of coordinates)
composed with a layout. Static layouts are plain values while Python traces a `@cute.jit` function, so
their algebra (`coalesce`, `composition`, `zipped_divide`, ...) can be computed and printed on any machine:
`trace(lambda: ...)` below runs a function inside such a trace and hands back what it computed.

The kernel, `scale` (out = alpha * x for a row-major fp32 matrix), uses the four moves every later kernel
uses: cut out this CTA's tile (`local_tile`), give each thread its share of the tile (`local_partition`
by a thread layout), guard the tail with a tensor of coordinates (`make_identity_tensor`), and compute in a
register fragment (`make_rmem_tensor`).
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
import numpy as np
import torch

from workbook import sass
from workbook.primer import _common

TILE = (16, 64)         # the rows x columns of x one CTA handles
THREADS = (4, 32)       # threads over the tile: 32 along a row (one warp reads 128 contiguous bytes), 4 rows
THREAD_STRIDE = (32, 1)  # thread t sits at (t // 32, t % 32) of that 4 x 32 grid


# ---------------------------------------------------------------------------------------------------
# The kernel

@cute.kernel
def scale_kernel(x: cute.Tensor, out: cute.Tensor, alpha: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    # this CTA's (16, 64) tile of x, of out, and of the coordinates (i, j) of x
    g_x = cute.local_tile(x, TILE, (bm, bn))
    g_out = cute.local_tile(out, TILE, (bm, bn))
    g_ij = cute.local_tile(cute.make_identity_tensor(x.shape), TILE, (bm, bn))
    # this thread's share: (16/4, 64/32) = (4, 2) elements, 4 rows apart and 32 columns apart
    threads = cute.make_layout(THREADS, stride=THREAD_STRIDE)
    t_x = cute.local_partition(g_x, threads, tidx)
    t_out = cute.local_partition(g_out, threads, tidx)
    t_ij = cute.local_partition(g_ij, threads, tidx)
    # load into registers what lies inside x (the last tiles hang over its edge), scale, store
    frag = cute.make_rmem_tensor(t_x.shape, cutlass.Float32)
    for k in cutlass.range_constexpr(cute.size(frag)):
        if cute.elem_less(t_ij[k], x.shape):
            frag[k] = t_x[k]
    frag.store(frag.load() * alpha)
    for k in cutlass.range_constexpr(cute.size(frag)):
        if cute.elem_less(t_ij[k], x.shape):
            t_out[k] = frag[k]


@cute.jit
def scale_host(x: cute.Tensor, out: cute.Tensor, alpha: cutlass.Float32, stream):
    grid = (cute.ceil_div(x.shape[0], TILE[0]), cute.ceil_div(x.shape[1], TILE[1]), 1)
    scale_kernel(x, out, alpha).launch(grid=grid, block=(THREADS[0] * THREADS[1], 1, 1), stream=stream)


@functools.lru_cache(maxsize=None)
def compile(cols: int = 200, arch: str = "sm_90a") -> sass.Artifacts:
    """`scale` for fp32 matrices of `cols` columns (compiled in) and any number of rows, with no GPU."""
    x, out = (_common.fake_matrix(cutlass.Float32, cols) for _ in range(2))
    return sass.compile_for(scale_host, x, out, cutlass.Float32(1.0), _common.fake_stream(), arch=arch)


def scale(x: torch.Tensor, alpha: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """alpha * x on the GPU, for a contiguous fp32 CUDA matrix whose rows are a multiple of 16 bytes."""
    _common.require(x, "x", dtypes=(torch.float32,), ndim=2)
    out = torch.empty_like(x) if out is None else out
    _common.require(out, "out", dtypes=(torch.float32,), ndim=2)
    if out.shape != x.shape:
        raise ValueError(f"out must have x's shape {tuple(x.shape)}, got {tuple(out.shape)}")
    arch = _common.device_arch(x.device)
    args = [_common.runtime_tensor(x), _common.runtime_tensor(out), cutlass.Float32(alpha),
            _common.stream(x.device)]
    _common.compiled_for_device(("scale", x.shape[1], arch), scale_host, *args, arch=arch)(*args)
    return out


# ---------------------------------------------------------------------------------------------------
# Layout algebra on the host: evaluated while Python traces, no GPU

def _plain(value):
    """What a trace hands back: layouts and tensors as their printed form, tuples and ints as they are."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value
    return str(value)


@cute.jit
def _run(box: cutlass.Constexpr):
    box["result"] = _plain(box["fn"]())


def trace(fn, arch: str = "sm_90a"):
    """Call `fn()` while CuTe DSL traces a function for `arch`, and return what it returned: layouts as
    their `shape:stride` text, tuples of ints as tuples. Nothing runs on a GPU.

        trace(lambda: cute.coalesce(cute.make_layout((2, 4), stride=(1, 2))))   # -> '8:1'
    """
    box = {"fn": fn}
    cute.compile(_run, box, options=f"--gpu-arch {arch}")
    return box["result"]


def _grid(layout_fn, shape):
    return np.array([[layout_fn((i, j)) for j in range(shape[1])] for i in range(shape[0])])


def offsets(shape, stride) -> np.ndarray:
    """The offset of every coordinate (i, j) of the rank-2 layout shape:stride, as an array of `shape`'s
    two mode sizes (a nested mode is indexed by its 1-D, column-major coordinate, as CuTe does)."""
    def fn():
        layout = cute.make_layout(shape, stride=stride)
        return _grid(lambda ij: layout(ij), (cute.size(layout, mode=[0]), cute.size(layout, mode=[1])))
    return trace(fn)


def partition_owners(tile, thread_shape, thread_stride):
    """Who owns each element of a `tile` that `local_partition` splits by the thread layout
    thread_shape:thread_stride: (thread, value) arrays of `tile`'s shape."""
    def fn():
        threads = cute.make_layout(thread_shape, stride=thread_stride)
        coords = cute.make_identity_tensor(tile)
        return [[cute.local_partition(coords, threads, cutlass.Int32(t))[v] for v in range(cute.size(tile) // cute.size(threads))]
                for t in range(cute.size(threads))]
    return _owners(trace(fn), tile)


def mma_accumulator_owners(n: int = 16):
    """Who owns each element of the fp32 accumulator of one Hopper WGMMA 64 x n (bf16 inputs): the thread of
    the warpgroup (0-127) and the index of the value in its fragment, as (thread, value) arrays [64, n].
    Computed by `partition_C` of an identity tensor, the way a kernel finds the coordinates of its values."""
    import cutlass.utils.hopper_helpers as sm90_utils

    def fn():
        major = cute.nvgpu.OperandMajorMode.K
        mma = sm90_utils.make_trivial_tiled_mma(cutlass.BFloat16, cutlass.BFloat16, major, major,
                                                cutlass.Float32, (1, 1, 1), tiler_mn=(64, n))
        coords = cute.make_identity_tensor((64, n))
        owned = []
        for t in range(cute.size(mma.thr_id)):
            mine = mma.get_slice(t).partition_C(coords)
            owned.append([mine[v] for v in range(cute.size(mine))])
        return owned
    return _owners(trace(fn), (64, n))


def _owners(owned, shape):
    thread = np.full(shape, -1)
    value = np.full(shape, -1)
    for t, coords in enumerate(owned):
        for v, (i, j) in enumerate(coords):
            if thread[i, j] != -1:
                raise AssertionError(f"element {(i, j)} is owned twice: by {thread[i, j]} and {t}")
            thread[i, j], value[i, j] = t, v
    if (thread < 0).any():
        raise AssertionError(f"{int((thread < 0).sum())} elements have no owner")
    return thread, value


def swizzle(bits: int, base: int, shift: int, offset: int) -> int:
    """CuTe's Swizzle<bits, base, shift> of an offset: XOR the `bits` bits above position base + shift into
    the `bits` bits above position `base`. The swizzle of a shared-memory layout acts on byte addresses."""
    mask = ((1 << bits) - 1) << (base + shift)
    return offset ^ ((offset & mask) >> shift)


def wgmma_smem_chunks(k: int = 64, rows: int = 8):
    """Where the K-major bf16 shared-memory layout of `make_smem_layout_a` for a (64, k) WGMMA tile puts
    each 16-byte chunk (8 elements) of its first `rows` rows. Returns (the layout as text, an int array
    [rows, k // 8]: the chunk's position within its 128-byte line, 0-7, after the swizzle)."""
    import re

    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass.tensor_utils import LayoutEnum

    def fn():
        staged = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (64, 64, k), cutlass.BFloat16, 1)
        tile = cute.slice_(staged, (None, None, 0))
        return str(tile), str(tile.inner), [[tile.outer((r, 8 * c)) for c in range(k // 8)] for r in range(rows)]
    text, inner, elements = trace(fn)
    bits, base, shift = (int(v) for v in re.fullmatch(r"S<(\d+),(\d+),(\d+)>", inner).groups())
    byte = np.array([[swizzle(bits, base, shift, 2 * e) for e in row] for row in elements])
    return text, (byte % 128) // 16


def tile_index(shape, tiler) -> np.ndarray:
    """Which tile `local_tile(tensor, tiler, (ti, tj))` puts each element of a `shape` tensor in, numbered
    column-major over the grid of tiles (ti + tj * tiles_down), computed from an identity tensor."""
    def fn():
        coords = cute.make_identity_tensor(shape)
        down, across = -(-shape[0] // tiler[0]), -(-shape[1] // tiler[1])
        owned = []
        for tj in range(across):
            for ti in range(down):
                tile = cute.local_tile(coords, tiler, (ti, tj))
                owned.append([tile[v] for v in range(cute.size(tile))])
        return owned
    index = np.full(shape, -1)
    for t, coords in enumerate(trace(fn)):
        for i, j in coords:
            if i < shape[0] and j < shape[1]:   # the last tiles may hang over the edge
                index[i, j] = t
    return index
