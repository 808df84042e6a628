"""Lesson 2: what runs while Python traces, and what runs on the GPU.

A `@cute.jit` / `@cute.kernel` function is run once by Python to *trace* it into IR; the IR is compiled
and the compiled code runs later, on the GPU (or, for host code, on the CPU). The DSL rewrites the function's
loops and branches into IR, so by default they run in the compiled code; two markers make Python run them
during the trace instead, leaving no instruction behind:

    print(...)                      prints while tracing (a runtime value prints as `?`)
    cute.printf(...)                prints when the compiled code runs, with the runtime values
    if cutlass.const_expr(c): ...   c is decided while tracing; the branch not taken is not compiled
    for i in cutlass.range_constexpr(n): ...   unrolled while tracing: n copies of the body
    for i in cutlass.range(a, b, s): ...       a loop in the compiled code (bounds may be runtime values);
                                               Python's own `range` in a kernel is the same
    if c: ...                       a branch in the compiled code (c may be a runtime value)

The kernel, `polyval`, evaluates a polynomial whose coefficients are compile-time constants by Horner's
rule: `range_constexpr` over the coefficients becomes one FFMA each in SASS, and `const_expr(relu)` adds
one FMNMX or nothing. The loop over the elements is `cutlass.range`: a grid-stride loop, a branch back.
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
import torch

from workbook import sass
from workbook.primer import _common

THREADS = 128
BLOCKS = 264  # a fixed grid (2 per H100/H200 SM); the grid-stride loop covers any n


@cute.kernel
def polyval_kernel(x: cute.Tensor, out: cute.Tensor, coeffs: cutlass.Constexpr, relu: cutlass.Constexpr):
    """out[i] = p(x[i]) with p(t) = coeffs[0] + coeffs[1] t + ... (then max(., 0) if relu)."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    print(f"tracing polyval_kernel: degree {len(coeffs) - 1}, relu={relu}, x is {x.layout}")
    for i in cutlass.range(bidx * THREADS + tidx, x.shape[0], BLOCKS * THREADS):  # on the GPU
        t = x[i]
        acc = cutlass.Float32(coeffs[-1])
        for k in cutlass.range_constexpr(len(coeffs) - 1):  # unrolled while tracing: one FFMA each
            acc = acc * t + coeffs[len(coeffs) - 2 - k]
        if cutlass.const_expr(relu):  # decided while tracing
            acc = cute.arch.fmax(acc, cutlass.Float32(0.0))
        out[i] = acc


@cute.jit
def polyval_host(x: cute.Tensor, out: cute.Tensor, coeffs: cutlass.Constexpr, relu: cutlass.Constexpr, stream):
    polyval_kernel(x, out, coeffs, relu).launch(grid=(BLOCKS, 1, 1), block=(THREADS, 1, 1), stream=stream)


def _coeffs(coeffs) -> tuple[float, ...]:
    coeffs = tuple(float(c) for c in coeffs)
    if not coeffs:
        raise ValueError("a polynomial needs at least one coefficient")
    return coeffs


@functools.lru_cache(maxsize=None)
def _compile(coeffs: tuple[float, ...], relu: bool, arch: str) -> sass.Artifacts:
    x, out = _common.fake_vector(cutlass.Float32), _common.fake_vector(cutlass.Float32)
    return sass.compile_for(polyval_host, x, out, coeffs, relu, _common.fake_stream(), arch=arch)


def compile(coeffs=(1.0, -3.0, 0.5), relu: bool = False, arch: str = "sm_90a") -> sass.Artifacts:
    """polyval for fp32 vectors of any length, the coefficients and `relu` compiled in; no GPU needed."""
    return _compile(_coeffs(coeffs), bool(relu), arch)


def polyval(x: torch.Tensor, coeffs, relu: bool = False, out: torch.Tensor | None = None) -> torch.Tensor:
    """p(x) elementwise on the GPU (fp32 CUDA vector), p's coefficients lowest power first."""
    coeffs = _coeffs(coeffs)
    _common.require(x, "x", dtypes=(torch.float32,), ndim=1, align=4)
    out = torch.empty_like(x) if out is None else out
    _common.require(out, "out", dtypes=(torch.float32,), ndim=1, align=4)
    if out.shape != x.shape:
        raise ValueError(f"out must have x's shape {tuple(x.shape)}, got {tuple(out.shape)}")
    arch = _common.device_arch(x.device)
    args = [_common.runtime_tensor(x, align=4), _common.runtime_tensor(out, align=4)]
    compiled = _common.compiled_for_device(("polyval", coeffs, bool(relu), arch), polyval_host,
                                           *args, coeffs, bool(relu), _common.stream(x.device), arch=arch)
    compiled(*args, _common.stream(x.device))  # Constexpr arguments are compiled in, not passed
    return out


def reference(x: torch.Tensor, coeffs, relu: bool = False) -> torch.Tensor:
    """The same Horner evaluation in torch."""
    coeffs = _coeffs(coeffs)
    acc = torch.full_like(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * x + c
    return acc.clamp_min(0.0) if relu else acc


@cute.jit
def trace_then_run(n: cutlass.Int32, unrolled: cutlass.Constexpr):
    """Host code (no GPU): `print` runs while tracing, `cute.printf` when the compiled code runs."""
    print(f"trace: n = {n}, unrolled = {unrolled}")
    for k in cutlass.range_constexpr(unrolled):
        print(f"trace: unrolled step {k}")
    total = cutlass.Int32(0)
    for k in cutlass.range(n):
        total += k
    cute.printf("run:   n = {}, 0 + 1 + ... + (n-1) = {}\n", n, total)
