"""The Blackwell GEMM from the host: compile a build for sm_100a with no GPU, or check the operands and run it.

    c = gemm(a, b)                                   # a B200: bf16/fp16 a [M, K] @ b [K, N], row-major
    c = gemm(a, b, Options(schedule="balanced"))     # any `blackwell_options.Options`, or its fields by name
    art = compile_gemm(4096, 4096, 4096, epilogue="staged")   # no GPU needed: workbook.sass.Artifacts

Each build is compiled for static shapes (the K loop's trip count is known) and cached per (shape, dtype,
options); the work list is planned and copied to the device once per shape.
"""
import functools

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack, make_fake_compact_tensor, make_fake_stream

from gemm_kernels.blackwell import Sm100Gemm, _cute_dtype
from gemm_kernels.blackwell_options import ARCH, DTYPES, Options, check_shape, plan, widths_of
from workbook import launch, sass


def _fake_args(M: int, N: int, K: int, num_items: int, dtype: torch.dtype):
    """Compile-time stand-ins for (a, b viewed as (N, K), c, items, pairs, stream): static shapes, so the
    compiler knows the K-loop trip count and that every row starts 16-byte aligned."""
    t = _cute_dtype(dtype)
    a = make_fake_compact_tensor(t, (M, K), stride_order=(1, 0), assumed_align=16)
    b_nk = make_fake_compact_tensor(t, (N, K), stride_order=(0, 1), assumed_align=16)  # [K, N] row-major
    c = make_fake_compact_tensor(t, (M, N), stride_order=(1, 0), assumed_align=16)
    items = make_fake_compact_tensor(cutlass.Int32, (num_items, 3), stride_order=(1, 0), assumed_align=16)
    return a, b_nk, c, items, cutlass.Int32(1), make_fake_stream()


def compile_gemm(M: int, N: int, K: int, options: Options | None = None, *, arch: str = ARCH, dump_dir=None,
                 dtype: torch.dtype = torch.bfloat16, **overrides):
    """Compile one build for sm_100a with no GPU; returns `workbook.sass.Artifacts` (.ptx, .cubin, .sass).

    `stages` defaults to the build's design: 7 with the register epilogue, 4 with the staged one. The build
    holds one MMA loop per item width of the shape's plan (`widths_of(plan(M, N, options))`).
    """
    if arch != ARCH:
        raise ValueError(f"the Blackwell GEMM compiles for {ARCH} only; got arch={arch!r}")
    o = Options.of(options, **overrides)
    check_shape(M, N, K)
    work = plan(M, N, o)
    kernel = Sm100Gemm(o.ring_stages, o.epilogue, dtype, widths_of(work))
    return sass.compile_for(kernel, *_fake_args(M, N, K, len(work.items), dtype), arch=arch, dump_dir=dump_dir)


@functools.lru_cache(maxsize=32)
def _compiled(M: int, N: int, K: int, num_items: int, dtype: torch.dtype, options: Options,
              widths: tuple[int, ...], device: int):
    """The launchable kernel for one shape and build, compiled once per process and device (that one current)."""
    kernel = Sm100Gemm(options.ring_stages, options.epilogue, dtype, widths)
    with launch.on_device(device):
        return cute.compile(kernel, *_fake_args(M, N, K, num_items, dtype), options=f"--gpu-arch {ARCH}")


def check_inputs(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None) -> None:
    """The runtime preconditions of `gemm`, each failure named."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise ValueError("a and b must be torch tensors")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need a [M, K] and b [K, N]; got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype not in DTYPES or b.dtype != a.dtype:
        raise ValueError(f"a and b must both be bf16 or both fp16; got {a.dtype} and {b.dtype}")
    if a.device.type != "cuda" or b.device != a.device:
        raise ValueError(f"a and b must be CUDA tensors on one device; got {a.device} and {b.device}")
    major, minor = torch.cuda.get_device_capability(a.device)
    if (major, minor) != (10, 0):
        raise ValueError(f"the Blackwell GEMM runs on sm_100 (B200/GB200); {torch.cuda.get_device_name(a.device)} "
                         f"is sm_{major}{minor} (gemm_kernels.gemm picks the kernel for this GPU)")
    check_shape(a.shape[0], b.shape[1], a.shape[1])
    for name, t in (("a", a), ("b", b)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be row-major contiguous (call .contiguous()); got strides {t.stride()}")
        if t.data_ptr() % 16:
            raise ValueError(f"{name} must start 16-byte aligned (TMA reads it)")
    if out is not None:
        M, N = a.shape[0], b.shape[1]
        if not isinstance(out, torch.Tensor) or out.shape != (M, N) or out.dtype != a.dtype \
                or out.device != a.device or not out.is_contiguous() or out.data_ptr() % 16:
            raise ValueError(f"out must be a contiguous, 16-byte aligned {a.dtype} [{M}, {N}] tensor on {a.device}")


def gemm(a: torch.Tensor, b: torch.Tensor, options: Options | None = None, *, out: torch.Tensor | None = None,
         **overrides) -> torch.Tensor:
    """a @ b on a B200: bf16/fp16 a [M, K] and b [K, N], row-major; fp32 accumulation; returns c [M, N].

    The default build is the 7-stage ring with the register-direct epilogue; `epilogue="staged"` (4 stages)
    is the build it replaces; `schedule="balanced"` runs seed 004's mixed-width work list. Runs on the
    current CUDA stream.
    """
    o = Options.of(options, **overrides)
    check_inputs(a, b, out)
    M, K = a.shape
    N = b.shape[1]
    items, pairs, widths = _work_items(M, N, o.schedule, a.device)
    c = torch.empty(M, N, dtype=a.dtype, device=a.device) if out is None else out
    device = a.device.index
    compiled = _compiled(M, N, K, items.shape[0], a.dtype, o, widths, device)
    stream = cuda.CUstream(launch.stream_handle(device))
    with launch.on_device(device):
        compiled(from_dlpack(a, assumed_align=16), from_dlpack(b.t(), assumed_align=16),
                 from_dlpack(c, assumed_align=16), from_dlpack(items, assumed_align=16), cutlass.Int32(pairs),
                 stream)
    return c


@functools.lru_cache(maxsize=64)
def _work_items(M: int, N: int, schedule: str, device: torch.device):
    """(items on the GPU as an int32 [num_items, 3] tensor, CTA pairs to launch, the build's widths) for one
    shape, made once: planning and the host-to-device copy stay out of every timed call after the first."""
    work = plan(M, N, schedule=schedule)
    items = torch.tensor([tuple(t) for t in work.items], dtype=torch.int32, device=device)
    return items, min(len(work.items), work.slots), widths_of(work)
