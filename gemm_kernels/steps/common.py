"""The host side every GEMM step shares: operand checks, the dtype map, compiling and launching a step kernel.

A step file holds its whole kernel; this module holds only what is the same in all of them, so that the diff
from one step to the next is the idea of the step and nothing else.

    M, N, K, out = operands(a, b, out)           # ValueError on anything a step cannot take
    art = compile_step(kernel, args, arch)       # workbook.sass.Artifacts, no GPU needed
    launches = launches_for(kernel, args)        # compiled per GPU at first use, launched via workbook.launch
    run(launches, key, make_args, device)
"""
from __future__ import annotations

import functools

import cuda.bindings.driver as cuda_driver
import torch

import cutlass
from cutlass.cute.runtime import make_fake_stream

from gemm_kernels import check_operand
from workbook import launch, sass

ARCH = "sm_90a"
ALIGN = 8                 # elements: TMA wants every row of a, b and c to start on a 16-byte boundary
INT32_MAX = 2**31 - 1     # the kernels take M, N, K as Int32
DTYPES = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}


def cute_dtype(dtype: torch.dtype):
    """The CuTe DSL element type of a torch dtype the steps take (bf16, fp16)."""
    if dtype not in DTYPES:
        raise ValueError(f"the GEMM steps take {sorted(map(str, DTYPES))}; got {dtype}")
    return DTYPES[dtype]


def check_arch(arch: str) -> None:
    if arch != ARCH:
        raise ValueError(f"the GEMM steps are Hopper kernels ({ARCH}); got arch={arch!r}. The Blackwell side of "
                         f"the story is gemm_kernels.blackwell_host (compile_gemm(..., epilogue=...)).")


def check_shape(M: int, N: int, K: int) -> None:
    for name, v in (("M", M), ("N", N), ("K", K)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= INT32_MAX:
            raise ValueError(f"{name} must be an int in [1, 2^31 - 1]; got {v!r}")
    if N % ALIGN or K % ALIGN:
        raise ValueError(f"N ({N}) and K ({K}) must be multiples of {ALIGN}: TMA needs the rows of a [M, K], "
                         f"b [K, N] and c [M, N] to start on 16-byte boundaries")


@functools.lru_cache(maxsize=None)
def _check_hopper(device: int) -> None:
    # once per device: every call pays for its checks in the synchronised timing
    if torch.cuda.get_device_capability(device) != (9, 0):
        raise ValueError(f"the GEMM steps run on Hopper (sm_90a, H100/H200); {torch.cuda.get_device_name(device)}"
                         f" is not one")


def operands(a, b, out=None):
    """(M, N, K, out) for c = a @ b with a [M, K] and b [K, N] row-major, one dtype (bf16 or fp16), one CUDA
    device; `out` [M, N] of that dtype is allocated when not given. ValueError on anything else."""
    check_operand("a", a, tuple(DTYPES))           # the production GEMM's operand rule, with the steps' dtypes
    check_operand("b", b, (a.dtype,))
    if b.device != a.device:
        raise ValueError(f"a and b must be on one device, got {a.device} and {b.device}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    check_shape(M, N, K)
    _check_hopper(a.get_device())
    if out is None:
        return M, N, K, torch.empty((M, N), dtype=a.dtype, device=a.device)
    check_operand("out", out, (a.dtype,))
    if tuple(out.shape) != (M, N) or out.device != a.device:
        raise ValueError(f"out must be [{M}, {N}] on {a.device}, got {tuple(out.shape)} on {out.device}")
    return M, N, K, out


def pointers(dtype, *addresses):
    """16-byte aligned global pointers of element type `dtype` (a cutlass type) at raw addresses."""
    return tuple(launch.gmem_pointer(dtype, addr, align=16) for addr in addresses)


def sizes(*values):
    return tuple(cutlass.Int32(v) for v in values)


def fake_stream():
    return make_fake_stream()


def compile_step(kernel, args, arch: str = ARCH, dump_dir=None) -> sass.Artifacts:
    """Compile `kernel(*args)` for `arch` with no GPU: PTX, cubin and SASS."""
    check_arch(arch)
    return sass.compile_for(kernel, *args, arch=arch, dump_dir=dump_dir)


class StepLaunches:
    """`kernel(*args)` compiled for each Hopper GPU on first use there (with that device current, as the
    production GEMM compiles), each compile behind a launch cache of its device (workbook.launch: the arguments
    of each call marshalled once and replayed as a CUDA graph). The step kernels are shape-generic, so `args`
    may hold dummy addresses and sizes."""

    def __init__(self, kernel, args):
        self.kernel, self.args = kernel, tuple(args)
        self._by_device: dict[int, launch.LaunchCache] = {}

    def on(self, device: int) -> launch.LaunchCache:
        """The launch cache of CUDA device `device`, compiling the kernel there on first use."""
        found = self._by_device.get(device)
        if found is None:
            import cutlass.cute as cute
            with launch.on_device(device):
                compiled = cute.compile(self.kernel, *self.args, options=f"--gpu-arch {ARCH}")
            found = self._by_device[device] = launch.LaunchCache(compiled, device=device)
        return found


def launches_for(kernel, args) -> StepLaunches:
    """`kernel(*args)`'s compiles and launch caches, one per device (`StepLaunches`)."""
    return StepLaunches(kernel, args)


def run(launches: StepLaunches, key, make_args, device: torch.device) -> None:
    """Launch on the current stream of `device`: `make_args(stream)` builds the arguments for a CUstream, `key`
    is every value they encode but the stream. The launch runs with `device` current (the cache switches only
    when it is not current already: a switch costs host time, which the synchronised timing counts)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    launches.on(index)(key, lambda s: make_args(cuda_driver.CUstream(s)), launch.stream_handle(index))
