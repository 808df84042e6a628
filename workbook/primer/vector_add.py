"""The smallest complete CuTe DSL kernel, out[i] = a[i] + b[i], one element per thread: the subject of
notebook 00's first compile and of workbook.sass's tests (CuTe DSL compiles only functions whose source
lives in a file).

    art = workbook.sass.compile_for(vector_add, a, b, out, arch="sm_100a")   # no GPU needed
"""
from __future__ import annotations

import cutlass.cute as cute

THREADS = 128   # per block; the grid has ceil(n / 128) blocks


@cute.kernel
def vector_add_kernel(a: cute.Tensor, b: cute.Tensor, out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * THREADS + tidx
    if i < out.shape[0]:  # the last block may run past the end
        out[i] = a[i] + b[i]


@cute.jit
def vector_add(a: cute.Tensor, b: cute.Tensor, out: cute.Tensor):
    """out = a + b for 1-D tensors of one dtype: the smallest kernel worth disassembling."""
    n = out.shape[0]
    blocks = (n + THREADS - 1) // THREADS
    vector_add_kernel(a, b, out).launch(grid=(blocks, 1, 1), block=(THREADS, 1, 1))
