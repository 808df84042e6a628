"""The host side the step kernels share: input checks, compiling with no GPU, and launching.

A step file holds its kernel; this module turns a kernel class into the step's `compile` and `assign`:
the same checks, the same raw-pointer arguments and the same launch path (`workbook.launch.LaunchCache`,
CUDA graphs replayed) as the production kernels, so a timing compares kernel against kernel.
"""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch

from kmeans_kernels import variants
from kmeans_kernels.variants import D_MAX
from workbook import launch, sass

DTYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}


def check_shape(D: int, dtype: torch.dtype = torch.bfloat16, d_max: int = D_MAX) -> None:
    """Raise ValueError unless the kernels support (D, dtype): the D rule of every kernel
    (`kmeans_kernels.variants.check_d`), and at most `d_max` where a step takes less."""
    if dtype not in DTYPES:
        raise ValueError(f"the step kernels take bf16 or fp16 inputs; got {dtype}")
    variants.check_d(D)
    if D > d_max:
        raise ValueError(f"D={D} is unsupported by this step: it takes D up to {d_max}")


def check_inputs(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor | None, out: torch.Tensor | None,
                 d_max: int = D_MAX) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a call (each failure named); returns (c_sq, out), computed or allocated when not given."""
    import kmeans_kernels
    kmeans_kernels.check_inputs(x, c, c_sq, out)   # dtypes, shapes, sizes (32-bit rows), devices, alignment
    if kmeans_kernels.arch_of(x.device) != "sm_90a":
        raise ValueError(f"the step kernels are Hopper kernels (sm_90a); {x.device} is not an H100/H200")
    check_shape(x.shape[1], x.dtype, d_max)
    if c_sq is None:
        from kmeans_kernels import norms
        c_sq = norms.centroid_norms(c)
    if out is None:
        out = torch.empty(x.shape[0], dtype=torch.int32, device=x.device)
    return c_sq, out


def kernel_args(dtype: torch.dtype, x_addr: int, c_addr: int, c_sq_addr: int, out_addr: int, N: int, K: int, stream):
    """What the compiled kernel takes: global pointers (x and c 16-byte aligned, for TMA), N, K and a stream."""
    el = DTYPES[dtype]
    return (launch.gmem_pointer(el, x_addr, 16), launch.gmem_pointer(el, c_addr, 16),
            launch.gmem_pointer(cutlass.Float32, c_sq_addr, 4), launch.gmem_pointer(cutlass.Int32, out_addr, 4),
            cutlass.Int32(N), cutlass.Int32(K), stream)


def placeholder_args(dtype: torch.dtype):
    """Arguments to compile against with no GPU: null pointers and zero sizes stand for the runtime values."""
    from cutlass.runtime import make_fake_stream
    return kernel_args(dtype, 0, 0, 0, 0, 0, 0, make_fake_stream())


def compile(kernel, dtype: torch.dtype, arch: str = "sm_90a") -> sass.Artifacts:
    """Compile a step's kernel object for sm_90a with no GPU: PTX, cubin, SASS."""
    if arch != "sm_90a":
        raise ValueError(f"the step kernels use WGMMA and TMA: they compile for sm_90a only, not {arch!r}")
    return sass.compile_for(kernel, *placeholder_args(dtype), arch=arch)


class Launcher:
    """`assign` for one kernel class: `make(D, cutlass dtype, **options)` builds the kernel, compiled on first
    use per (D, dtype, options, device) with that device current, and launched through a
    workbook.launch.LaunchCache of that device, so x on another GPU than the current one runs there."""

    def __init__(self, make, d_max: int = D_MAX):
        self.make, self.d_max = make, d_max
        self._compiled: dict[tuple, launch.LaunchCache] = {}

    def launches(self, D: int, dtype: torch.dtype, device: int, **options) -> launch.LaunchCache:
        """The compiled kernel for (D, dtype, options) on CUDA device `device`, behind its launch cache."""
        key = (D, dtype, tuple(sorted(options.items())), device)
        found = self._compiled.get(key)
        if found is None:
            kernel = self.make(D, DTYPES[dtype], **options)
            with launch.on_device(device):
                compiled = cute.compile(kernel, *placeholder_args(dtype), options="--gpu-arch sm_90a")
            found = self._compiled[key] = launch.LaunchCache(compiled, device=device, pointers=4)  # x, c, c_sq, out
        return found

    def __call__(self, x, c, c_sq=None, out=None, **options) -> torch.Tensor:
        c_sq, out = check_inputs(x, c, c_sq, out, self.d_max)
        device = x.device.index
        addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), x.shape[0], c.shape[0])
        self.launches(x.shape[1], x.dtype, device, **options)(
            addrs, lambda s: kernel_args(x.dtype, *addrs, cuda.CUstream(s)), launch.stream_handle(device))
        return out
