"""k-means assignment: the nearest centroid of every point, as a fused GEMM + argmin.

    ids = kmeans_kernels.assign(x, c)                     # CUDA tensors, the fastest variant for this GPU
    ids = kmeans_kernels.assign(x, c, variant="ilp2")     # a named step of the tutorial
    art = kmeans_kernels.compile_assign("ilp2", N=65536, D=128, K=4096, arch="sm_90a")   # no GPU needed
    art.ptx, art.cubin, art.sass
    r = kmeans_kernels.fit(x, k)                          # k-means (Lloyd's loop) on it, CUDA or CPU: lloyd.py

The answer is defined by `kmeans_kernels.reference` (see its docstring for the numerical contract).
Each architecture has one backend module (`BACKENDS`) that exposes the same five names:

    VARIANTS                      the variant names it implements, in tutorial order
    auto_variant(N, D, K)         which one `variant="auto"` picks for a shape, from measurements
    run(variant, x, c, c_sq, out) launch on CUDA tensors already validated here, filling `out`
    launcher(variant, N, D, K, dtype, device)   `run` for one signature: a function of (x, c, c_sq, out)
    compile(variant, N, D, K, dump_dir)   compile with no GPU, returning a `workbook.sass.Artifacts`

What each variant name is made of on each arch, and the D every kernel takes, is `kmeans_kernels.variants`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

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
# The kernels index rows and centroids with 32-bit integers, tile by tile: the index of every row of the last
# (partial) tile must fit too, so N and K stay a tile (at most 256) below 2^31.
MAX_ROWS = 2**31 - 256
# TMA reads x and c from 16-byte aligned rows; c_sq and out are read and written element by element.
ALIGN = {"x": 16, "c": 16, "c_sq": 4, "out": 4}


def check_inputs(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor | None, out: torch.Tensor | None) -> None:
    """The kernels' preconditions, each failure named; the reference accepts more (any float dtype, any D)."""
    if _accepts(x, c, c_sq, out):
        return
    reference.check_inputs(x, c, c_sq)
    if x.device.type != "cuda":
        raise ValueError(f"the kernels run on CUDA tensors; x is on {x.device} "
                         f"(use kmeans_kernels.reference.assign on the CPU)")
    if x.dtype not in SUPPORTED_DTYPES or c.dtype != x.dtype:
        raise ValueError(f"the kernels take bf16 or fp16 x and c of one dtype; got x {x.dtype}, c {c.dtype}")
    check_sizes(N=x.shape[0], D=x.shape[1], K=c.shape[0])
    if c_sq is not None and c_sq.dtype != torch.float32:
        raise ValueError(f"c_sq must be a float32 [K] tensor; got {c_sq.dtype}")
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.shape != (x.shape[0],) or out.dtype != torch.int32 \
                or out.device != x.device:
            raise ValueError(f"out must be an int32 [{x.shape[0]}] tensor on {x.device}; got "
                             + (f"{out.dtype} {tuple(out.shape)} on {out.device}" if isinstance(out, torch.Tensor)
                                else type(out).__name__))
    for name, t in (("x", x), ("c", c), ("c_sq", c_sq), ("out", out)):
        if t is None:
            continue
        if not t.is_contiguous():
            what = "row-major contiguous" if t.dim() == 2 else "contiguous"
            raise ValueError(f"{name} must be {what} (call .contiguous()); got shape {tuple(t.shape)} "
                             f"with strides {t.stride()}")
        if t.data_ptr() % ALIGN[name]:
            raise ValueError(f"{name} must start on a {ALIGN[name]}-byte boundary for the kernels; its address is "
                             f"{t.data_ptr():#x} (a view that starts part-way into a row is not aligned; a fresh "
                             f"tensor is)")


def _accepts(x, c, c_sq, out) -> bool:
    """True only where every check of `check_inputs` passes, in about half its host time (a few microseconds per
    call, which small problems pay in full); False sends the call through the checks that name the failure.
    Plain tensors only (a subclass takes the named checks)."""
    if type(x) is not torch.Tensor or type(c) is not torch.Tensor or not (x.is_cuda and c.is_cuda):
        return False
    dtype = x.dtype
    if c.dtype is not dtype or dtype not in SUPPORTED_DTYPES:
        return False
    xs, cs = x.shape, c.shape
    if len(xs) != 2 or len(cs) != 2:
        return False
    (N, D), (K, D_c) = xs, cs
    if D != D_c or D % D_MULTIPLE or not (D_MULTIPLE <= D <= D_MAX and 0 < N <= MAX_ROWS and 0 < K <= MAX_ROWS):
        return False
    device = x.get_device()
    if c.get_device() != device or not (x.is_contiguous() and c.is_contiguous()) \
            or x.data_ptr() % ALIGN["x"] or c.data_ptr() % ALIGN["c"]:
        return False
    for name, t, dt, n in (("c_sq", c_sq, torch.float32, K), ("out", out, torch.int32, N)):
        if t is not None and (type(t) is not torch.Tensor or t.dtype is not dt or t.shape != (n,)
                              or t.get_device() != device or not t.is_contiguous() or t.data_ptr() % ALIGN[name]):
            return False
    return True


def check_sizes(*, N, D, K) -> None:
    """N, D and K as the kernels can take them: N and K ints from 1 to MAX_ROWS (32-bit row indices), D by the
    D rule (`variants.check_d`)."""
    for name, v in (("N", N), ("K", K)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{name} must be an int, got {v!r} ({type(v).__name__})")
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    check_d(D)
    for name, v in (("N", N), ("K", K)):
        if v > MAX_ROWS:
            raise ValueError(f"{name}={v} is too large: the kernels index rows with 32-bit integers, so N and K "
                             f"must be at most {MAX_ROWS} (2^31 - 256); split the problem into chunks")


def assign(x: torch.Tensor, c: torch.Tensor, *, variant: str = "auto",
           c_sq: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Index of the nearest centroid for every row of x, int32 [N]; -1 where no centroid scores finitely.

    `c_sq` (float32 [K], 0.5 is *not* folded in) may be passed to skip recomputing the norms across Lloyd
    iterations; without it they are computed on the GPU first, in one launch (`kmeans_kernels.norms`). `out`
    (int32 [N]) is filled and returned when given.
    """
    call = _call(x, c, c_sq, out, variant)
    if c_sq is None:
        c_sq = torch.empty_like(call.c_sq_like)
        call.norms(c, c_sq)
    if out is None:
        out = torch.empty_like(call.out_like)   # parses no size, dtype or device: cheaper than torch.empty
    call.launch(x, c, c_sq, out)
    return out


class _Call(NamedTuple):
    """What an assign call's signature fixes, worked out once (`_checked_call`)."""
    launch: Callable[..., None]     # (x, c, c_sq, out) -> None: the backend's launch of the chosen variant
    norms: Callable[..., None]      # (c, c_sq) -> None: the launch of the centroid norms (`kmeans_kernels.norms`)
    out_like: torch.Tensor          # one int32 expanded to [N] on x's device
    c_sq_like: torch.Tensor         # one float32 expanded to [K] on x's device
    N: int
    K: int


# (x.shape, c.shape, dtype, device, variant) -> the _Call of a signature that passed every check (`_call`)
_signatures: dict = {}
SIGNATURES = 64      # entries before the oldest go


def _call(x, c, c_sq, out, variant: str) -> _Call:
    """The _Call of checked inputs. A signature that passed once is only checked for what can differ between
    tensors of that signature: contiguity, alignment, the device, and c_sq's and out's dtype, length and device
    (each tensor of its own; a subclass takes the full checks)."""
    if type(x) is torch.Tensor and type(c) is torch.Tensor and x.is_cuda:
        device = x.get_device()
        found = _signatures.get((x.shape, c.shape, x.dtype, c.dtype, device, variant))
        if found is not None and c.get_device() == device and x.is_contiguous() and c.is_contiguous() \
                and not (x.data_ptr() | c.data_ptr()) % ALIGN["x"] \
                and _fits("c_sq", c_sq, torch.float32, found.K, device) \
                and _fits("out", out, torch.int32, found.N, device):
            return found
    return _checked_call(x, c, c_sq, out, variant)


def _fits(name: str, t, dtype: torch.dtype, n: int, device: int) -> bool:
    """Whether an optional 1-d argument (`name`: c_sq or out) is None or passes every check."""
    return t is None or (type(t) is torch.Tensor and t.dtype is dtype and t.shape == (n,)
                         and t.get_device() == device and t.is_contiguous() and not t.data_ptr() % ALIGN[name])


def _checked_call(x, c, c_sq, out, variant: str) -> _Call:
    """`_call` by every check (each failure a ValueError that names it), the variant resolved and the backend's
    launch for it looked up; remembered by signature."""
    check_inputs(x, c, c_sq, out)
    device = x.get_device()
    arch = arch_of(device)        # the index: cheaper than building x.device
    be = backend(arch)
    (N, D), K = x.shape, c.shape[0]
    chosen = be.auto_variant(N, D, K) if variant == "auto" else variant
    if chosen not in be.VARIANTS:
        raise ValueError(f"variant {chosen!r} does not exist for {arch}; choose from {('auto',) + tuple(be.VARIANTS)}")
    from kmeans_kernels import norms
    found = _Call(be.launcher(chosen, N, D, K, x.dtype, device), norms.launcher(D, x.dtype, arch, device),
                  x.new_empty(1, dtype=torch.int32).expand(N), x.new_empty(1, dtype=torch.float32).expand(K), N, K)
    if len(_signatures) >= SIGNATURES:
        _signatures.clear()
    _signatures[x.shape, c.shape, x.dtype, c.dtype, device, variant] = found
    return found


def compile_assign(variant: str, *, N: int, D: int, K: int, arch: str = "sm_90a", dump_dir=None):
    """Compile one variant for `arch` with no GPU; returns an object with .ptx, .cubin and .sass."""
    check_sizes(N=N, D=D, K=K)
    be = backend(arch)
    if variant == "auto":
        variant = be.auto_variant(N, D, K)
    if variant not in be.VARIANTS:
        raise ValueError(f"variant {variant!r} does not exist for {arch}; choose from {tuple(be.VARIANTS)}")
    return be.compile(variant, N, D, K, dump_dir)


from kmeans_kernels.lloyd import FitResult, fit  # noqa: E402  (lloyd.py uses assign, defined above)
