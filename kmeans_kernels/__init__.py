"""k-means assignment: the nearest centroid of every point, as a fused GEMM + argmin.

    ids = kmeans_kernels.assign(x, c)                     # CUDA tensors, the fastest variant for this GPU
    ids = kmeans_kernels.assign(x, c, variant="ilp2")     # a named step of the tutorial
    art = kmeans_kernels.compile_assign("ilp2", N=65536, D=128, K=4096, arch="sm_90a")   # no GPU needed
    art.ptx, art.cubin, art.sass
    r = kmeans_kernels.fit(x, k)                          # k-means (Lloyd's loop) on it, CUDA or CPU: lloyd.py

The answer is defined by `kmeans_kernels.reference` (see its docstring for the numerical contract).
Each architecture has one backend module that exposes the same four names:

    VARIANTS                      the variant names it implements, in tutorial order
    auto_variant(N, D, K)         which one `variant="auto"` picks for a shape, from measurements
    run(variant, x, c, c_sq, out) launch on CUDA tensors already validated here, filling `out`
    compile(variant, N, D, K, dump_dir)   compile with no GPU, returning a `workbook.sass.Artifacts`
"""
from __future__ import annotations

import importlib

import torch

from kmeans_kernels import reference
from workbook import gpus
from kmeans_kernels.reference import scores  # noqa: F401  (re-exported for users)

# arch -> backend module; sm_120 (consumer Blackwell) has no tcgen05 2-SM MMA and gets none of these.
BACKENDS = {"sm_90a": "kmeans_kernels.hopper", "sm_100a": "kmeans_kernels.blackwell"}
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
D_MULTIPLE = 16
D_MAX = 512


def backend(arch: str):
    if arch not in BACKENDS:
        raise ValueError(f"no k-means kernels for arch {arch!r}; kernels exist for {sorted(BACKENDS)}")
    return importlib.import_module(BACKENDS[arch])


def arch_of(device: torch.device) -> str:
    """The kernel arch for a CUDA device: sm_90a for compute capability 9.0, sm_100a for 10.0."""
    return gpus.kernel_arch(device, instead="kmeans_kernels.reference.assign")


def check_inputs(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor | None, out: torch.Tensor | None) -> None:
    """The kernels' preconditions, each failure named; the reference accepts more (any float dtype, any D)."""
    reference.check_inputs(x, c, c_sq)
    if x.device.type != "cuda":
        raise ValueError(f"the kernels run on CUDA tensors; x is on {x.device} "
                         f"(use kmeans_kernels.reference.assign on the CPU)")
    if x.dtype not in SUPPORTED_DTYPES or c.dtype != x.dtype:
        raise ValueError(f"the kernels take bf16 or fp16 x and c of one dtype; got x {x.dtype}, c {c.dtype}")
    D = x.shape[1]
    if D % D_MULTIPLE or D > D_MAX:
        raise ValueError(f"D={D} is unsupported by the tensor-core kernels: D must be a multiple of {D_MULTIPLE} "
                         f"up to {D_MAX} (use kmeans_kernels.reference.assign for other D)")
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
    if D % D_MULTIPLE or D > D_MAX or min(N, D, K) < 1:
        raise ValueError(f"unsupported shape N={N}, D={D}, K={K}: N, K >= 1 and D a multiple of {D_MULTIPLE} "
                         f"up to {D_MAX}")
    be = backend(arch)
    if variant == "auto":
        variant = be.auto_variant(N, D, K)
    if variant not in be.VARIANTS:
        raise ValueError(f"variant {variant!r} does not exist for {arch}; choose from {tuple(be.VARIANTS)}")
    return be.compile(variant, N, D, K, dump_dir)


from kmeans_kernels.lloyd import FitResult, fit  # noqa: E402  (lloyd.py uses assign, defined above)
