"""GEMM, step by step: a 4-stage then a 7-stage TMA/MMA pipeline, the register-direct epilogue that frees
the shared memory for those stages, and wave-tail tile balancing across the GPU's SMs.

    c = gemm_kernels.gemm(a, b)                               # [M,K] x [K,N] -> [M,N], bf16 or fp16, fp32 sums
    c = gemm_kernels.gemm(a, b, schedule="uniform")           # any option of this GPU's backend, by name
    art = gemm_kernels.compile_gemm(4096, 4096, 4096, arch="sm_90a")   # no GPU needed: .ptx/.cubin/.sass
    gemm_kernels.waves.plan(4096, 4096, gpu="b200", tile_m=256, tile_ns=(256, 192))
    gemm_kernels.stages.stages((128, 256, 64), "register", "sm_90a")

The rooms, per backend (Hopper sm_90a, Blackwell sm_100a):
    *_options.py   Options (every choice of a call, checked once), the plan, the shape rules: pure Python
    hopper.py / blackwell.py   the kernel (device code)
    *_host.py      compile with no GPU, check operands, launch
    hopper_worklist.py, hopper_epilogue.py, hopper_trace.py   the Hopper kernel's work list, epilogues, timeline
and shared by both: `configs` (the named configurations), `waves` (the planner), `stages` (shared-memory
arithmetic), `sass_checks` (reading the builds), `bench` (`python -m gemm_kernels.bench`).
"""
from __future__ import annotations

import torch

from workbook import dispatch

BACKENDS = dispatch.Backends("GEMM", {"sm_90a": "gemm_kernels.hopper_host", "sm_100a": "gemm_kernels.blackwell_host"},
                             instead="torch.matmul")
backend = BACKENDS.module
arch_of = BACKENDS.arch_of

# The kernels index rows and columns with 32-bit integers (so do TMA's coordinates), tile by tile: M, N and K
# stay a tile (at most 256) below 2^31 so that every index of the last tile fits too. Offsets into c are 64-bit:
# M * N may pass 2^31 (32768 tokens x a 128256-word vocabulary does).
MAX_SIZE = 2**31 - 256


def check_sizes(**sizes) -> None:
    """Each size a positive int no larger than MAX_SIZE, or a ValueError that names it."""
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
        if v > MAX_SIZE:
            raise ValueError(f"{name}={v} is too large: the GEMM kernels index rows and columns with 32-bit "
                             f"integers, so each of M, N, K must be at most {MAX_SIZE} (2^31 - 256)")


def check_operand(name: str, t, dtypes: tuple) -> None:
    """`t` a contiguous (row-major) 2-D CUDA tensor of one of `dtypes` that starts on a 16-byte boundary (TMA's
    rule), or a ValueError that names it. Every call pays for these checks in the synchronised timing: cheap
    attribute reads only."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise ValueError(f"{name} must be {' or '.join(str(d).removeprefix('torch.') for d in dtypes)}, "
                         f"got {t.dtype}")
    if not t.is_cuda:
        raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    if t.dim() != 2 or not t.is_contiguous():
        raise ValueError(f"{name} must be a contiguous (row-major) 2-D tensor, got shape {tuple(t.shape)}, "
                         f"strides {t.stride()}")
    if t.data_ptr() % 16:
        raise ValueError(f"{name} must start on a 16-byte boundary for TMA (a fresh tensor does)")


def gemm(a: torch.Tensor, b: torch.Tensor, options=None, **overrides) -> torch.Tensor:
    """a @ b on the tensor cores of this GPU: a [M, K] and b [K, N] row-major, both bf16 or both fp16, fp32
    accumulation, c [M, N] of their dtype. `options`: the backend's Options (`hopper_options.Options` on an
    H100/H200, `blackwell_options.Options` on a B200); keyword arguments override its fields (tile, stages,
    epilogue, schedule, ...) or give `out`; on an H100/H200, `autotune=True` times the rule's nearby favourites
    once per shape and keeps the fastest (`hopper_host.gemm`)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise ValueError("a and b must be torch tensors")
    index = a.get_device()               # -1 off CUDA; an int is cheaper than a.device on every call
    if index < 0 or b.get_device() != index:
        raise ValueError(f"a and b must be CUDA tensors on one device; got {a.device} and {b.device}")
    return backend(arch_of(index)).gemm(a, b, options, **overrides)


def compile_gemm(M: int, N: int, K: int, options=None, *, arch: str = "sm_90a", **overrides):
    """Compile for `arch` with no GPU; returns an object with .ptx, .cubin and .sass. `dtype=torch.float16`
    (a keyword, default bf16) builds for fp16 operands."""
    return backend(arch).compile_gemm(M, N, K, options, arch=arch, **overrides)
