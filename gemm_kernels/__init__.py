"""GEMM, step by step: a 4-stage then a 7-stage TMA/MMA pipeline, the register-direct epilogue that frees
the shared memory for those stages, and wave-tail tile balancing across the GPU's SMs.

    c = gemm_kernels.gemm(a, b)                               # bf16 [M,K] x [K,N] -> bf16 [M,N], fp32 accumulate
    art = gemm_kernels.compile_gemm(4096, 4096, 4096, arch="sm_90a")   # no GPU needed: .ptx/.cubin/.sass
    gemm_kernels.waves.plan(4096, 4096, gpu="b200", tile_m=256, tile_ns=(256, 192))
    gemm_kernels.stages.stages((128, 256, 64), "register", "sm_90a")

Hopper (sm_90a) kernels live in `hopper.py`, Blackwell (sm_100a) in `blackwell.py`; the planner and the
stage arithmetic are pure Python and know every GPU in `workbook.gpus`.
"""
from __future__ import annotations

import torch

from workbook import dispatch

BACKENDS = dispatch.Backends("GEMM", {"sm_90a": "gemm_kernels.hopper", "sm_100a": "gemm_kernels.blackwell"},
                             instead="torch.matmul")
backend = BACKENDS.module
arch_of = BACKENDS.arch_of


def gemm(a: torch.Tensor, b: torch.Tensor, **kwargs) -> torch.Tensor:
    """a @ b on the tensor cores of this GPU; keyword arguments go to the backend (tile, stages, epilogue, ...)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise ValueError("a and b must be torch tensors")
    if a.device.type != "cuda" or b.device != a.device:
        raise ValueError(f"a and b must be CUDA tensors on one device; got {a.device} and {b.device}")
    return backend(arch_of(a.device)).gemm(a, b, **kwargs)


def compile_gemm(M: int, N: int, K: int, *, arch: str = "sm_90a", **kwargs):
    """Compile for `arch` with no GPU; returns an object with .ptx, .cubin and .sass."""
    return backend(arch).compile_gemm(M, N, K, arch=arch, **kwargs)
