"""The reference semantics of k-means assignment: every kernel must give these answers.

Inputs `x [N, D]` and `c [K, D]`, floating (bf16, fp16, fp32 or fp64; they need not match: the
reference computes in float64), on one device (CPU or CUDA). The kernels take bf16 or fp16 of one dtype.

* The score of centroid k for point i is ``s = 0.5 * ||c_k||^2 - <x_i, c_k>``, a float32 subtraction of
  float32 values. It ranks centroids exactly as the squared distance does, since
  ``||x - c||^2 = ||x||^2 + 2 * s`` and ``||x||^2`` is the same for every k.
* The dot product and the norm are float32 values at least as accurate as an fp32 accumulation: here they
  are accumulated in float64 and rounded once to float32. That makes a score depend only on the point and
  the centroid, never on the centroid's column (a CPU fp32 GEMM rounds identical columns differently at
  some positions, which would break ties between duplicate centroids). On inputs whose products and sums
  are exact in fp32 (small integers in bf16) every fp32 kernel must agree with it bit for bit; on random
  data, wherever no two scores of a row lie within fp32 accumulation error of each other.
* The winner is the smallest score under a strict ``<`` scanning k upward, so the **lowest index wins ties**;
  ``-0.0`` equals ``+0.0``; a NaN score never wins; ``+inf`` never wins; ``-inf`` beats every finite score.
* A row where no score wins (all NaN or +inf) gets ``-1``.

The work is chunked over N and K so that N = 1M, K = 16K never materialises the full N x K score matrix.
"""
from __future__ import annotations

import torch

NO_WINNER = -1
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# elements of one score block; 2^24 float32 = 64 MiB, small for a GPU and fine on a laptop
_BLOCK_ELEMENTS = 1 << 24


def check_inputs(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor | None = None) -> None:
    """Raise ValueError naming the problem when x, c (and c_sq) are not a valid assignment problem."""
    for name, t in (("x", x), ("c", c)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 2:
            raise ValueError(f"{name} must be 2-D [rows, D]; got shape {tuple(t.shape)}")
        if t.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"{name} must be a floating tensor (bf16, fp16, fp32, fp64); got {t.dtype}")
        if t.shape[0] < 1 or t.shape[1] < 1:
            raise ValueError(f"{name} must have at least one row and one column; got shape {tuple(t.shape)}")
    if x.shape[1] != c.shape[1]:
        raise ValueError(f"D mismatch: x is [N, {x.shape[1]}] but c is [K, {c.shape[1]}]")
    if x.device != c.device:
        raise ValueError(f"x and c must be on one device; x is on {x.device}, c on {c.device}")
    if c_sq is not None:
        if not isinstance(c_sq, torch.Tensor) or c_sq.shape != (c.shape[0],):
            raise ValueError(f"c_sq must be a [K]={c.shape[0]} tensor; got "
                             f"{tuple(c_sq.shape) if isinstance(c_sq, torch.Tensor) else type(c_sq).__name__}")
        if c_sq.device != c.device:
            raise ValueError(f"c_sq must be on {c.device}; it is on {c_sq.device}")
        if not c_sq.is_floating_point():
            raise ValueError(f"c_sq must be floating (float32); got {c_sq.dtype}")


def centroid_norms(c: torch.Tensor) -> torch.Tensor:
    """||c_k||^2 as float32 [K], accumulated in float64 (the 0.5 is applied in the score, not here)."""
    c64 = c.double()
    return (c64 * c64).sum(dim=1).float()


def _dots(x: torch.Tensor, c64: torch.Tensor) -> torch.Tensor:
    """<x_i, c_k> accumulated in float64 and rounded once to float32: independent of k's position."""
    return (x.double() @ c64.t()).float()


def _row_block(N: int, K: int) -> int:
    return max(1, min(N, _BLOCK_ELEMENTS // max(K, 1)))


def _col_block(K: int) -> int:
    return max(1, min(K, _BLOCK_ELEMENTS))


def _half_norms(c: torch.Tensor, c_sq: torch.Tensor | None) -> torch.Tensor:
    return 0.5 * (centroid_norms(c) if c_sq is None else c_sq.float())


def scores(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor | None = None) -> torch.Tensor:
    """The full float32 score matrix [N, K]. Materialises N x K: for inspection and tests, not for N = 1M."""
    check_inputs(x, c, c_sq)
    return _half_norms(c, c_sq) - _dots(x, c.double())


def _argmin_block(s: torch.Tensor, k0: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(best score, best global index) per row of one score block, under the contract.

    NaN and +inf are mapped to +inf and can then never win a strict `<`; torch.min returns the first
    (lowest) index among equal minima, which is the lowest-index tie rule; -0.0 == +0.0 in that comparison.
    """
    s = torch.where(torch.isnan(s), torch.full_like(s, float("inf")), s)
    best, idx = torch.min(s, dim=1)
    idx = (idx + k0).to(torch.int64)
    idx = torch.where(best == float("inf"), torch.full_like(idx, NO_WINNER), idx)
    return best, idx


def assign(x: torch.Tensor, c: torch.Tensor, c_sq: torch.Tensor | None = None) -> torch.Tensor:
    """Index of the winning centroid of every row, int32 [N] on x's device; -1 where none wins."""
    check_inputs(x, c, c_sq)
    N, K = x.shape[0], c.shape[0]
    half = _half_norms(c, c_sq)
    c64 = c.double()
    out = torch.empty(N, dtype=torch.int32, device=x.device)
    rb, cb = _row_block(N, K), _col_block(K)
    for r0 in range(0, N, rb):
        xr = x[r0:r0 + rb]
        best = idx = None
        for k0 in range(0, K, cb):
            s = half[k0:k0 + cb] - _dots(xr, c64[k0:k0 + cb])
            b, i = _argmin_block(s, k0)
            if best is None:
                best, idx = b, i
            else:
                # strict <: an earlier block keeps its winner on equal scores (lowest index wins)
                take = b < best
                best, idx = torch.where(take, b, best), torch.where(take, i, idx)
        out[r0:r0 + rb] = idx.to(torch.int32)
    return out
