"""fit's state on CUDA: x's fixed-point column totals and its spread about the mean, one read of x each.

    total = column_totals(x, s)             # int64 [D]: lloyd.fixed_point(x, s).sum(0), exactly
    spread = spread_about(x, mean)          # float64 []: sum over rows of ||x_i - mean||^2 (mean float64 [D])
    art = compile(D=128, dtype=torch.bfloat16, arch="sm_90a", spread=False)   # no GPU needed: .ptx, .sass

Both are reductions of x to D or to one number: the bytes of x are the whole cost (256 MiB at 1M x 128, about
60 us at the H200's DRAM rate). In torch each is several passes over 32- or 64-bit copies of chunks of x,
3.0 and 1.6 ms at that size. Here one kernel walks x once: a group of D / 8 threads reads a row (16 bytes per
thread), every group of the grid takes rows a grid apart, four loads in flight per thread, and each thread keeps
its 8 columns' running values in registers:

* totals: each coordinate by the fixed-point rule of the update (`lloyd.fixed_point`: fp32(x) * 2^s1 * 2^s2,
  truncated to int64), added in int64. Each group writes its D partial totals to a row of a [groups, D] buffer
  and torch adds the rows: integer sums, so the total is exact and the same whatever the grid;
* spread: (x - mean_d)^2 in float64, added in float64; each thread writes its one partial sum and torch adds
  them. The grid depends only on N, D and the SM count, so the same x gives the same bits, call after call.

Every group writes its partials whether it had rows or not, so the buffers need no zeroing. The kernel takes
16-bit x with D a multiple of 8 from a 16-byte aligned start (the update kernel's rule, `lloyd_update.check_x`); it
compiles for sm_90a and sm_100a (plain loads, nothing arch-specific).
"""
from __future__ import annotations

import functools

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch

import kmeans_kernels
from kmeans_kernels.lloyd import scale_factors
from kmeans_kernels.lloyd_update import _DTYPES, ARCHS, VEC, _vec, check_shape, check_x, row_groups
from workbook import launch, sass

UNROLL = 4           # rows a thread loads before it adds them
CTAS_PER_SM = 4      # the grid, at most: enough loads in flight to keep DRAM busy
MIN_ROWS = 16        # rows per group, at least: the partials stay small beside x


class ColumnPass:
    """One compiled kernel per (D, dtype, spread); N, the scale and the grid are runtime values."""

    def __init__(self, D: int, dtype, spread: bool):
        self.D = D
        self.dtype = dtype
        self.spread = spread
        self.lanes = D // VEC                        # threads per row
        self.groups = row_groups(D)

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, mean_ptr: cute.Pointer, out_ptr: cute.Pointer, N: cutlass.Int32,
                 f1: cutlass.Float32, f2: cutlass.Float32, ctas: cutlass.Int32, stream: cuda.CUstream):
        self.kernel(x_ptr, mean_ptr, out_ptr, N, f1, f2).launch(
            grid=(ctas, 1, 1), block=[self.groups * self.lanes, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, x_ptr: cute.Pointer, mean_ptr: cute.Pointer, out_ptr: cute.Pointer, N: cutlass.Int32,
               f1: cutlass.Float32, f2: cutlass.Float32):
        tidx, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        lane = tidx % self.lanes
        group = block * self.groups + tidx // self.lanes
        stride = ctas * self.groups                   # rows between one group's rows
        acc = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.Float64 if self.spread else cutlass.Int64)
        acc.fill(0)
        if cutlass.const_expr(self.spread):
            mean = _vec(mean_ptr, lane * VEC).load()
        for r in cutlass.range(group, N, stride * UNROLL, unroll=1):
            # every load first (past N, the last row again: in bounds, and never added) ...
            values = []
            for u in cutlass.range_constexpr(UNROLL):
                row = cutlass.Int64(cutlass.min(r + u * stride, N - 1))
                offset = cute.assume(row * self.D + lane * VEC, divby=VEC)
                values.append(_vec(x_ptr, offset).load())
            # ... then add them
            for u in cutlass.range_constexpr(UNROLL):
                if r + u * stride < N:
                    if cutlass.const_expr(self.spread):
                        d = values[u].to(cutlass.Float32).to(cutlass.Float64) - mean
                        acc.store(acc.load() + d * d)
                    else:
                        # the fixed-point rule: fp32(x) * 2^s1 * 2^s2, truncated toward zero to int64
                        acc.store(acc.load() + (values[u].to(cutlass.Float32) * f1 * f2).to(cutlass.Int64))
        if cutlass.const_expr(self.spread):
            total = cutlass.Float64(0.0)
            for e in cutlass.range_constexpr(VEC):
                total += acc[e]
            out = cute.make_tensor(out_ptr, cute.make_layout(ctas * self.groups * self.lanes))
            out[block * (self.groups * self.lanes) + tidx] = total
        else:
            offset = cute.assume(cutlass.Int64(group) * self.D + lane * VEC, divby=VEC)
            _vec(out_ptr, offset).store(acc.load())


# ---- host side: compile (no GPU needed) and run --------------------------------------------------------

def grid(N: int, D: int, sm_count: int) -> int:
    """CTAs for N rows: CTAS_PER_SM per SM, fewer where a group would get fewer than MIN_ROWS rows, or where the
    walk's row indices (up to N + UNROLL x the grid's groups) would pass 32 bits."""
    groups = row_groups(D)
    room = (2**31 - 1 - N) // (UNROLL * groups)
    return max(1, min(CTAS_PER_SM * sm_count, N // (groups * MIN_ROWS), room))


def _args(dtype: torch.dtype, spread: bool, x: int, mean: int, out: int, N: int, f1: float, f2: float, ctas: int,
          stream):
    gp = launch.gmem_pointer
    out_type = cutlass.Float64 if spread else cutlass.Int64
    return (gp(_DTYPES[dtype], x, 16), gp(cutlass.Float64, mean, 8), gp(out_type, out, 8), cutlass.Int32(N),
            cutlass.Float32(f1), cutlass.Float32(f2), cutlass.Int32(ctas), stream)


def _placeholder_args(dtype: torch.dtype, spread: bool):
    from cutlass.runtime import make_fake_stream
    return _args(dtype, spread, 0, 0, 0, 0, 1.0, 1.0, 1, make_fake_stream())


def compile(D: int = 128, dtype: torch.dtype = torch.bfloat16, arch: str = "sm_90a", spread: bool = False,
            dump_dir=None) -> sass.Artifacts:
    """Compile the totals (or, with spread=True, the spread) kernel for `arch` with no GPU -> Artifacts."""
    check_shape(D, dtype)
    if arch not in ARCHS:
        raise ValueError(f"the state kernels are built for {ARCHS}; got {arch!r}")
    return sass.compile_for(ColumnPass(D, _DTYPES[dtype], spread), *_placeholder_args(dtype, spread), arch=arch,
                            dump_dir=dump_dir)


@functools.lru_cache(maxsize=None)
def _launches(D: int, dtype: torch.dtype, spread: bool, arch: str, device: int) -> launch.LaunchCache:
    with launch.on_device(device):
        compiled = cute.compile(ColumnPass(D, _DTYPES[dtype], spread), *_placeholder_args(dtype, spread),
                                options=f"--gpu-arch {arch}")
    return launch.LaunchCache(compiled, device=device, pointers=3)   # x, mean, out


def _buffer(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The partials' buffer, unzeroed: every group writes its part (tests hand in a poisoned one)."""
    return torch.empty(shape, dtype=dtype, device=device)


def _run(x: torch.Tensor, spread: bool, mean: torch.Tensor, out: torch.Tensor, s: int, ctas: int) -> None:
    device = x.device.index
    values = (x.data_ptr(), mean.data_ptr(), out.data_ptr(), x.shape[0], *scale_factors(s), ctas)
    run = _launches(x.shape[1], x.dtype, spread, kmeans_kernels.arch_of(x.device), device)
    run(values, lambda st: _args(x.dtype, spread, *values, cuda.CUstream(st)), launch.stream_handle(device))


def column_totals(x: torch.Tensor, s: int) -> torch.Tensor:
    """`lloyd.fixed_point_total(x, s)` (int64 [D], exact) in one read of x; launches, never waits."""
    check_x(x)
    N, D = x.shape
    ctas = grid(N, D, launch.sm_count(x.device.index))
    partial = _buffer((ctas * row_groups(D), D), torch.int64, x.device)
    _run(x, False, partial, partial, s, ctas)   # the totals kernel reads no mean: any address will do
    return partial.sum(0)


def spread_about(x: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """sum over rows of ||x_i - mean||^2, float64 [], in one read of x (mean: float64 [D] on x's device)."""
    check_x(x)
    N, D = x.shape
    if mean.dtype != torch.float64 or tuple(mean.shape) != (D,) or mean.device != x.device or not mean.is_contiguous():
        raise ValueError(f"mean must be a contiguous float64 tensor of shape ({D},) on {x.device}")
    ctas = grid(N, D, launch.sm_count(x.device.index))
    partial = _buffer((ctas * row_groups(D) * (D // VEC),), torch.float64, x.device)   # one per thread
    _run(x, True, mean, partial, 0, ctas)
    return partial.sum()
