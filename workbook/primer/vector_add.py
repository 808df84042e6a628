"""Lesson 0: the smallest complete kernel, out = a + b, one element per thread.

A CuTe DSL program has two halves. The `@cute.kernel` function is device code: every thread runs it once.
The `@cute.jit` function is host code: it decides the grid and launches the kernel. `compile` turns both
into PTX and SASS with no GPU; `add` runs them on one. (It is also the test subject of `workbook.sass`.)

    art = workbook.sass.compile_for(vector_add, a, b, out, arch="sm_100a")   # no GPU needed
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
import torch

from workbook import sass
from workbook.primer import _common

THREADS = 128  # per block; the grid has ceil(n / 128) blocks


@cute.kernel
def vector_add_kernel(a: cute.Tensor, b: cute.Tensor, out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * THREADS + tidx
    if i < out.shape[0]:  # the last block may run past the end
        out[i] = a[i] + b[i]


@cute.jit
def vector_add(a: cute.Tensor, b: cute.Tensor, out: cute.Tensor, stream=None):
    """out = a + b for 1-D tensors of one dtype, launched on `stream` (or on the default stream)."""
    kernel = vector_add_kernel(a, b, out)
    grid, block = (cute.ceil_div(out.shape[0], THREADS), 1, 1), (THREADS, 1, 1)
    if cutlass.const_expr(stream is None):   # decided while tracing: called without a stream
        kernel.launch(grid=grid, block=block)
    else:
        kernel.launch(grid=grid, block=block, stream=stream)


@functools.lru_cache(maxsize=None)
def compile(arch: str = "sm_90a", dtype=torch.float32, n: int | None = None) -> sass.Artifacts:
    """vector_add for 1-D tensors of `dtype`, compiled for `arch` with no GPU: for any length (a runtime value),
    or for length `n` only (compiled in as a constant)."""
    el = _common.CUTLASS_DTYPES[dtype]
    if n is None:
        args = [_common.fake_vector(el, name="n") for _ in range(3)]
    else:
        from cutlass.cute.runtime import make_fake_compact_tensor
        args = [make_fake_compact_tensor(el, (n,), assumed_align=4) for _ in range(3)]
    return sass.compile_for(vector_add, *args, _common.fake_stream(), arch=arch)


def add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """a + b on the GPU by the kernel above (1-D CUDA tensors of one dtype, the same length)."""
    dtypes = tuple(_common.CUTLASS_DTYPES)
    for name, t in (("a", a), ("b", b)):
        _common.require(t, name, dtypes=dtypes, ndim=1, align=4)
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"a and b must match: {a.dtype} {tuple(a.shape)} on {a.device} vs "
                         f"{b.dtype} {tuple(b.shape)} on {b.device}")
    out = torch.empty_like(a) if out is None else out
    _common.require(out, "out", dtypes=(a.dtype,), ndim=1, align=4)
    if out.shape != a.shape:
        raise ValueError(f"out must have shape {tuple(a.shape)}, got {tuple(out.shape)}")
    arch = _common.device_arch(a.device)
    args = [_common.runtime_tensor(t, align=4) for t in (a, b, out)] + [_common.stream(a.device)]
    _common.compiled_for_device(("vector_add", a.dtype, arch), vector_add, *args, arch=arch)(*args)
    return out
