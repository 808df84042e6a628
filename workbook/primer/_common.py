"""What the lesson modules share: fake tensors to compile against, torch tensors to run with, input checks."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack, make_fake_compact_tensor, make_fake_stream

from workbook import gpus

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

