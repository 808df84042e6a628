"""What the lesson modules share: fake tensors to compile against, torch tensors to run with, input checks, and
the host side of the two `C = A @ B^T` tile lessons (`compile_tile`, `tile_matmul_t`)."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack, make_fake_compact_tensor, make_fake_stream

from workbook import gpus, sass

CUTLASS_DTYPES = {torch.float32: cutlass.Float32, torch.bfloat16: cutlass.BFloat16,
                  torch.float16: cutlass.Float16, torch.int32: cutlass.Int32}


def fake_matrix(dtype, cols: int, align: int = 16, rows_name: str = "M"):
    """A row-major [rows, cols] tensor of `dtype` with no memory: the rows a runtime value, `cols` compiled
    in. What `cute.compile` needs to know about an argument, and no more."""
    rows = cute.sym_int32(symbol=rows_name)
    return make_fake_compact_tensor(dtype, (rows, cols), stride_order=(1, 0), assumed_align=align)


def fake_vector(dtype, align: int = 4, name: str = "n"):
    return make_fake_compact_tensor(dtype, (cute.sym_int32(symbol=name),), assumed_align=align)


def fake_stream():
    return make_fake_stream()


def runtime_tensor(t: torch.Tensor, align: int = 16):
    """A torch CUDA tensor as a compiled kernel takes it: the length of mode 0 (rows) a runtime value, the
    rest of the layout compiled in, as `fake_matrix` / `fake_vector` describe it."""
    return from_dlpack(t, assumed_align=align).mark_compact_shape_dynamic(mode=0, stride_order=t.dim_order())


_ON_DEVICE: dict = {}


def compiled_for_device(key, fn, *args, arch: str):
    """`cute.compile(fn, *args)` for the GPU that is here, once per `key`; later calls with other tensors of
    the same kind (dtype, static extents) reuse it."""
    if key not in _ON_DEVICE:
        _ON_DEVICE[key] = cute.compile(fn, *args, options=f"--gpu-arch {arch}")
    return _ON_DEVICE[key]


def stream(device: torch.device):
    import cuda.bindings.driver as cuda_driver
    return cuda_driver.CUstream(torch.cuda.current_stream(device).cuda_stream)


def require(t, name: str, *, dtypes, ndim: int, align: int = 16) -> None:
    """A clear error for what the kernels cannot take: not a CUDA tensor, a dtype, a rank, strides, alignment."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    if t.dtype not in dtypes:
        raise ValueError(f"{name} must be one of {[str(d) for d in dtypes]}, got {t.dtype}")
    if t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major)")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty: shape {tuple(t.shape)}")
    if t.numel() >= 2**31:
        raise ValueError(f"{name} has {t.numel()} elements; these kernels index with 32 bits")
    if t.data_ptr() % align:
        raise ValueError(f"{name} must start on a {align}-byte boundary, its address is {t.data_ptr():#x}")
    if ndim == 2 and (t.shape[1] * t.element_size()) % align:
        raise ValueError(f"{name}'s rows must be a multiple of {align} bytes long (TMA and vector loads), "
                         f"got {t.shape[1]} x {t.element_size()} bytes")


def device_arch(device: torch.device, allowed: tuple[str, ...] = ("sm_90a", "sm_100a")) -> str:
    """The arch to compile for on `device`; a clear error where a lesson's kernel cannot run."""
    arch = gpus.arch_of_capability(*torch.cuda.get_device_capability(device))
    if arch not in allowed:
        raise RuntimeError(f"this kernel runs on {' or '.join(allowed)}; {torch.cuda.get_device_name(device)} "
                           f"is {arch}")
    return arch



def compile_tile(host, k: int, n_tile: int, arch: str) -> sass.Artifacts:
    """A tile lesson's `host(a, b, c, n_tile, stream)` compiled for `arch` with no GPU: A [M, k] and B [N, k]
    bf16, C [M, N] fp32 (M and N runtime values, N a multiple of 4)."""
    a = fake_matrix(cutlass.BFloat16, k, rows_name="M")
    b = fake_matrix(cutlass.BFloat16, k, rows_name="N")
    c = fake_matrix(cutlass.Float32, cute.sym_int32(symbol="N", divisibility=4), rows_name="M")
    return sass.compile_for(host, a, b, c, n_tile, fake_stream(), arch=arch)


def tile_matmul_t(host, name: str, a: torch.Tensor, b: torch.Tensor, n_tile: int, out: torch.Tensor | None,
                  check, arch: str) -> torch.Tensor:
    """a @ b.T in fp32 through a tile lesson's `host` for bf16 CUDA matrices a [M, K], b [N, K]: the inputs
    checked (`check(K, n_tile)`: the lesson's own limits), the kernel compiled once per (`name`, K, n_tile)
    for `arch`, which the device must be."""
    require(a, "a", dtypes=(torch.bfloat16,), ndim=2)
    require(b, "b", dtypes=(torch.bfloat16,), ndim=2)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must have the same K: {tuple(a.shape)} vs {tuple(b.shape)}")
    check(a.shape[1], n_tile)
    shape = (a.shape[0], b.shape[0])
    out = torch.empty(shape, dtype=torch.float32, device=a.device) if out is None else out
    require(out, "out", dtypes=(torch.float32,), ndim=2)
    if tuple(out.shape) != shape:
        raise ValueError(f"out must have shape {shape}, got {tuple(out.shape)}")
    arch = device_arch(a.device, allowed=(arch,))
    cute_out = runtime_tensor(out).mark_compact_shape_dynamic(mode=1, stride_order=(0, 1), divisibility=4)
    args = [runtime_tensor(a), runtime_tensor(b), cute_out]
    compiled = compiled_for_device((name, a.shape[1], n_tile), host, *args, n_tile, stream(a.device), arch=arch)
    compiled(*args, stream(a.device))
    return out
