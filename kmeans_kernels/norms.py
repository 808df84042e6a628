"""The centroid norms ||c_k||^2 of `kmeans_kernels.assign` in one launch, on CUDA.

    c_sq = centroid_norms(c)                    # c bf16 or fp16 [K, D] on CUDA -> float32 [K]
    centroid_norms(c, out=c_sq)                 # into a float32 [K] tensor of the caller's
    art = compile(D=128, dtype=torch.bfloat16, arch="sm_90a")   # no GPU needed: .ptx, .sass

`reference.centroid_norms(c)` is four eager torch operations (a float64 copy of c, its square, a row sum, a
rounding to float32). On the H200 they cost 50-53 us of host time per call at K = 512, more than the assignment
kernel itself (`notes/perf-log.md`), and `assign(x, c)` without `c_sq` paid them at every call. Here one thread
group of lanes per centroid reads its row in 16-byte vectors (one or two per lane, `lanes_per_row`), squares each
element and adds it in float64, the lanes' sums are added by warp shuffles, and the total is rounded once to
float32: the reference's arithmetic. A 16-bit value's square is exact in float64 (at most 22 significant
bits), and so is the sum wherever the row's squares span fewer than about 30 binades, which ordinary data does;
there the norm equals the reference's bit for bit, whatever order either adds in. Elsewhere both are float64 sums
rounded once to float32, within the contract's "at least as accurate as an fp32 accumulation". An inf in the row
gives inf, a NaN gives NaN, a square past float32's range gives inf: as in the reference.

Eight running sums per lane (one per element of a vector) keep eight float64 adds in flight. K is a runtime
value, D is compiled in.
It compiles for sm_90a and sm_100a (plain loads and float64 arithmetic: nothing arch-specific).
"""
from __future__ import annotations

import functools

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch

from kmeans_kernels.variants import check_d
from workbook import launch, sass

VEC = 8               # 16-bit elements per vector load: 16 bytes
THREADS = 128         # per CTA: whole groups of `lanes_per_row(D)` lanes, one centroid each
ARCHS = ("sm_90a", "sm_100a")
_DTYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}


class CentroidNorms:
    """One compiled kernel per (D, dtype); K is a runtime value."""

    def __init__(self, D: int, dtype):
        self.D = D
        self.dtype = dtype
        self.lanes = lanes_per_row(D)
        self.rows = THREADS // self.lanes            # centroids per CTA

    @cute.jit
    def __call__(self, c_ptr: cute.Pointer, out_ptr: cute.Pointer, K: cutlass.Int32, stream: cuda.CUstream):
        self.kernel(c_ptr, out_ptr, K).launch(grid=((K + self.rows - 1) // self.rows, 1, 1), block=[THREADS, 1, 1],
                                              stream=stream)

    @cute.kernel
    def kernel(self, c_ptr: cute.Pointer, out_ptr: cute.Pointer, K: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        lane = tidx % self.lanes
        k = block * self.rows + tidx // self.lanes
        # past K, the last row again: every lane takes part in the shuffles below, and only rows < K are stored
        row = cutlass.Int64(cutlass.min(k, K - 1)) * self.D
        values = []
        for v in cutlass.range_constexpr(self.D // VEC // self.lanes):
            offset = cute.assume(row + (lane + v * self.lanes) * VEC, divby=VEC)
            values.append(cute.make_tensor(c_ptr + offset, cute.make_layout(VEC)).load())
        sums = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.Float64)
        sums.fill(0.0)
        for v in cutlass.range_constexpr(self.D // VEC // self.lanes):
            e = values[v].to(cutlass.Float32).to(cutlass.Float64)
            sums.store(sums.load() + e * e)
        total = cutlass.Float64(0.0)
        for e in cutlass.range_constexpr(VEC):
            total += sums[e]
        offset = 1
        while offset < self.lanes:                     # the row's lanes, butterfly: each ends with the sum
            total += cute.arch.shuffle_sync_bfly(total, offset=offset)
            offset *= 2
        if k < K and lane == 0:
            out = cute.make_tensor(out_ptr, cute.make_layout(K))
            out[k] = total.to(cutlass.Float32)


def lanes_per_row(D: int) -> int:
    """Threads that share a centroid's row, the same number of 16-byte vectors each: the largest power of two
    (the shuffles' butterfly) that divides the row's D / 8 vectors, a whole warp at most. More lanes per row
    spread a small K over more SMs (K = 512 at D = 256: 128 CTAs, not 4)."""
    vectors = D // VEC
    return min(32, vectors & -vectors)


# ---- host side: compile (no GPU needed) and run --------------------------------------------------------

def check_shape(D: int, dtype: torch.dtype) -> None:
    """The D rule of the assignment kernels (`variants.check_d`) and their two dtypes."""
    if dtype not in _DTYPES:
        raise ValueError(f"the norms kernel takes bf16 or fp16 centroids; got {dtype}")
    check_d(D)


def _args(dtype: torch.dtype, c: int, out: int, K: int, stream):
    gp = launch.gmem_pointer
    return gp(_DTYPES[dtype], c, 16), gp(cutlass.Float32, out, 4), cutlass.Int32(K), stream


def _placeholder_args(dtype: torch.dtype):
    from cutlass.runtime import make_fake_stream
    return _args(dtype, 0, 0, 0, make_fake_stream())


def compile(D: int = 128, dtype: torch.dtype = torch.bfloat16, arch: str = "sm_90a", dump_dir=None) -> sass.Artifacts:
    """Compile the kernel for D and dtype for `arch` with no GPU -> workbook.sass.Artifacts (.ptx, .sass)."""
    check_shape(D, dtype)
    if arch not in ARCHS:
        raise ValueError(f"the norms kernel is built for {ARCHS}; got {arch!r}")
    return sass.compile_for(CentroidNorms(D, _DTYPES[dtype]), *_placeholder_args(dtype), arch=arch,
                            dump_dir=dump_dir)


@functools.lru_cache(maxsize=None)
def _launches(D: int, dtype: torch.dtype, arch: str, device: int) -> launch.LaunchCache:
    """The compiled kernel for (D, dtype) on one device, compiled on first use with that device current."""
    check_shape(D, dtype)
    with launch.on_device(device):
        compiled = cute.compile(CentroidNorms(D, _DTYPES[dtype]), *_placeholder_args(dtype),
                                options=f"--gpu-arch {arch}")
    # out is a plain pointer parameter: a replay re-aims it at a new output
    return launch.LaunchCache(compiled, device=device, pointers=2, reaimable=(1,))   # c, out


def launcher(D: int, dtype: torch.dtype, arch: str, device: int):
    """A function of (c, out) that launches the norms of checked centroids into `out`: what `assign` keeps per
    signature. The kernel is compiled at its first launch (a caller that always passes c_sq never waits for it)
    and its launch cache looked up once."""
    check_shape(D, dtype)
    found = []

    def launch_on(c: torch.Tensor, out: torch.Tensor) -> None:
        if not found:
            found.append(_launches(D, dtype, arch, device))
        key = (c.data_ptr(), out.data_ptr(), c.shape[0])
        found[0](key, lambda s: _args(dtype, *key, cuda.CUstream(s)), launch.stream_handle(device))
    return launch_on


def check_inputs(c, out) -> None:
    """What the kernel needs of c (and out), each failure named."""
    if not isinstance(c, torch.Tensor) or c.ndim != 2 or not c.is_cuda:
        raise ValueError("c must be a 2-D CUDA tensor [K, D] (kmeans_kernels.reference.centroid_norms takes any)")
    K, D = c.shape
    check_shape(D, c.dtype)
    if not c.is_contiguous() or c.data_ptr() % 16:
        raise ValueError(f"c must be contiguous and start on a 16-byte boundary for the vector loads; got strides "
                         f"{c.stride()} at {c.data_ptr():#x}")
    if not 1 <= K <= 2**31 - THREADS:   # the grid's last row index in 32 bits
        raise ValueError(f"K={K} is out of range: the kernel indexes centroids with 32-bit integers")
    if out is not None and not (isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (K,)
                                and out.device == c.device and out.is_contiguous()):
        raise ValueError(f"out must be a contiguous float32 [{K}] tensor on {c.device}; got "
                         + (f"{out.dtype} {tuple(out.shape)} on {out.device}" if isinstance(out, torch.Tensor)
                            else type(out).__name__))


def centroid_norms(c: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """`reference.centroid_norms(c)` (float32 [K]) in one launch on c's device; into `out` when given. Launches,
    never waits."""
    check_inputs(c, out)
    if out is None:
        out = torch.empty(c.shape[0], dtype=torch.float32, device=c.device)
    import kmeans_kernels
    device = c.get_device()
    launcher(c.shape[1], c.dtype, kmeans_kernels.arch_of(device), device)(c, out)
    return out
