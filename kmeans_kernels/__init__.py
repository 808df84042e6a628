"""k-means assignment: the nearest centroid of every point, as a fused GEMM + argmin.

    ids = kmeans_kernels.assign(x, c)                     # CUDA tensors, the fastest variant for this GPU
    ids = kmeans_kernels.assign(x, c, variant="ilp2")     # a named step of the tutorial
    art = kmeans_kernels.compile_assign("ilp2", N=65536, D=128, K=4096, arch="sm_90a")   # no GPU needed
    art.ptx, art.cubin, art.sass

The answer is defined by `kmeans_kernels.reference` (see its docstring for the numerical contract).
Each architecture has one backend module (`BACKENDS`) that exposes the same four names:

    VARIANTS                      the variant names it implements, in tutorial order
    auto_variant(N, D, K)         which one `variant="auto"` picks for a shape, from measurements
    run(variant, x, c, c_sq, out) launch on CUDA tensors already validated here, filling `out`
    compile(variant, N, D, K, dump_dir)   compile with no GPU, returning a `workbook.sass.Artifacts`

What each variant name is made of on each arch, and the D every kernel takes, is `kmeans_kernels.variants`.
"""
from __future__ import annotations

import torch

from kmeans_kernels import reference
from kmeans_kernels.reference import scores  # noqa: F401  (re-exported for users)
from kmeans_kernels.variants import D_MAX, D_MULTIPLE, check_d  # noqa: F401  (D_MAX, D_MULTIPLE: for users)
from workbook import dispatch

BACKENDS = dispatch.Backends("k-means", {"sm_90a": "kmeans_kernels.hopper", "sm_100a": "kmeans_kernels.blackwell"},
                             instead="kmeans_kernels.reference.assign")
backend = BACKENDS.module
arch_of = BACKENDS.arch_of
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)


def check_inputs(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor | None, out: torch.Tensor | None) -> None:
    """The kernels' preconditions, each failure named; the reference accepts more (any float dtype, any D)."""
    reference.check_inputs(x, c, c_sq)
    if x.device.type != "cuda":
        raise ValueError(f"the kernels run on CUDA tensors; x is on {x.device} "
                         f"(use kmeans_kernels.reference.assign on the CPU)")
    if x.dtype not in SUPPORTED_DTYPES or c.dtype != x.dtype:
        raise ValueError(f"the kernels take bf16 or fp16 x and c of one dtype; got x {x.dtype}, c {c.dtype}")
    check_d(x.shape[1])
    for name, t in (("x", x), ("c", c)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be row-major contiguous (call .contiguous()); got strides {t.stride()}")
    if c_sq is not None and (c_sq.dtype != torch.float32 or not c_sq.is_contiguous()):
        raise ValueError(f"c_sq must be a contiguous float32 [K] tensor; got {c_sq.dtype}")
    if out is not None:
        if out.shape != (x.shape[0],) or out.dtype != torch.int32 or out.device != x.device or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous int32 [{x.shape[0]}] tensor on {x.device}; "
                             f"got {out.dtype} {tuple(out.shape)} on {out.device}")


def assign(x: torch.Tensor, c: torch.Tensor, *, variant: str = "auto",
           c_sq: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Index of the nearest centroid for every row of x, int32 [N]; -1 where no centroid scores finitely.

    `c_sq` (float32 [K], 0.5 is *not* folded in) may be passed to skip recomputing the norms across Lloyd
    iterations. `out` (int32 [N]) is filled and returned when given.
    """
    check_inputs(x, c, c_sq, out)
    arch = arch_of(x.device)
    be = backend(arch)
    N, D = x.shape
    K = c.shape[0]
    if variant == "auto":
        variant = be.auto_variant(N, D, K)
    if variant not in be.VARIANTS:
        raise ValueError(f"variant {variant!r} does not exist for {arch}; choose from {('auto',) + tuple(be.VARIANTS)}")
    if c_sq is None:
        c_sq = reference.centroid_norms(c)
    if out is None:
        out = torch.empty(N, dtype=torch.int32, device=x.device)
    be.run(variant, x, c, c_sq, out)
    return out


def compile_assign(variant: str, *, N: int, D: int, K: int, arch: str = "sm_90a", dump_dir=None):
    """Compile one variant for `arch` with no GPU; returns an object with .ptx, .cubin and .sass."""
    if min(N, K) < 1:
        raise ValueError(f"unsupported shape N={N}, D={D}, K={K}: N and K must be >= 1")
    check_d(D)
    be = backend(arch)
    if variant == "auto":
        variant = be.auto_variant(N, D, K)
    if variant not in be.VARIANTS:
        raise ValueError(f"variant {variant!r} does not exist for {arch}; choose from {tuple(be.VARIANTS)}")
    return be.compile(variant, N, D, K, dump_dir)
