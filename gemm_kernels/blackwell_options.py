"""What a caller can ask of the Blackwell GEMM, checked once, and the work list that follows from it.

    opts = Options()                               # 7-stage ring, register epilogue, uniform M256 x N256 items
    opts = Options(epilogue="staged")              # seed 004's staged build (4 stages)
    work = plan(4096, 4096, Options(schedule="balanced"))   # the items in schedule order, N256 + N192

`Options` is frozen and hashable: `blackwell_host` caches each compiled build on (shape, dtype, options).
Pure Python: no GPU and no CuTe DSL needed.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import gemm_kernels
from gemm_kernels import stages as stages_lib
from gemm_kernels import waves
from gemm_kernels.options import BackendOptions

ARCH = "sm_100a"
TILE_M = 256  # rows of C per CTA pair; each CTA of the pair owns 128 of them
TILE_N = 256  # the widest item: columns of C per item; each CTA loads 128 columns of B for it
TILE_WIDTHS = (256, 224, 192)  # item widths the balanced schedule may use (seed 004: N256, N224, N192)
TILE_K = 64  # one K-step: 64 x 2 bytes = one 128-byte swizzle row
CTAS_PER_PAIR = 2
ROWS_PER_CTA = TILE_M // CTAS_PER_PAIR
EPI_SUBTILE_N = 32  # columns moved TMEM -> registers per step: 32 fp32 registers per thread
ALIGN_ELEMENTS = 8  # 16 bytes of bf16/fp16: TMA's row-stride alignment, and one 128-bit store
EPILOGUES = ("register", "staged")
SCHEDULES = ("uniform", "balanced")
DEFAULT_STAGES = {"register": 7, "staged": 4}
DTYPES = (torch.bfloat16, torch.float16)


def stage_budget(stages: int, epilogue: str, dtype: torch.dtype = torch.bfloat16):
    """Where a build's shared memory goes (`gemm_kernels.stages`); ValueError when it does not fit.

    The kernel allocates exactly ``stages * stage_bytes + epilogue_bytes + reserved_bytes``: the 1 KiB
    reserve holds the mbarriers and the TMEM address, padded to the 1 KiB alignment of the swizzled ring.
    The ring is sized for the widest item; narrower items use a prefix of each B stage.
    """
    _check_build(stages, epilogue)
    nbytes = torch.empty((), dtype=dtype).element_size()
    return stages_lib.stages((TILE_M, TILE_N, TILE_K), epilogue, ARCH, cta_group=CTAS_PER_PAIR, in_bytes=nbytes,
                             out_bytes=nbytes, depth=stages)


def _check_build(stages: int, epilogue: str) -> None:
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {EPILOGUES}; got {epilogue!r}")
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 2:
        raise ValueError(f"stages must be an int >= 2 (a ring needs one buffer filling while one drains); "
                         f"got {stages!r}")


@dataclass(frozen=True)
class Options(BackendOptions):
    """Every choice a Blackwell GEMM call can make, each checked once, here. stages: the A/B ring's depth,
    None = the build's design (`DEFAULT_STAGES`: 7 with the register epilogue, 4 with the staged one).
    epilogue: "register" (TMEM -> registers -> 16-byte stores) or "staged" (through shared memory and a TMA
    store). schedule: "uniform" (M256 x N256 items) or "balanced" (seed 004's mixed widths that fill the
    last wave)."""
    stages: int | None = None
    epilogue: str = "register"
    schedule: str = "uniform"

    def __post_init__(self):
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"epilogue must be one of {EPILOGUES}; got {self.epilogue!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}; got {self.schedule!r}")
        stage_budget(self.ring_stages, self.epilogue)   # every dtype the kernel takes is 2 bytes
        self._seal()

    __hash__ = BackendOptions.cached_hash

    @property
    def ring_stages(self) -> int:
        return DEFAULT_STAGES[self.epilogue] if self.stages is None else self.stages


DEFAULT = Options.default()


def check_shape(M: int, N: int, K: int) -> None:
    """The kernel's shape preconditions, each failure named. Any M; N and K multiples of 8."""
    gemm_kernels.check_sizes(M=M, N=N, K=K)
    for name, value, rows in (("N", N, "b and c"), ("K", K, "a")):
        if value % ALIGN_ELEMENTS:
            raise ValueError(f"{name}={value} is not a multiple of {ALIGN_ELEMENTS}: TMA needs every row of {rows} "
                             f"to start 16-byte aligned ({ALIGN_ELEMENTS} bf16/fp16 elements); pad {name} "
                             f"or use torch.matmul")


def plan(M: int, N: int, options: Options | None = None, **overrides) -> waves.Plan:
    """The planner's work list for this kernel, in schedule order (item i runs on pair i % pairs launched).

    ``"uniform"``: M256 x N256 items, row-major. ``"balanced"``: the planner's choice among N256/N224/N192
    re-cuts that fills the last wave on B200's CTA pairs (the uniform list when no re-cut beats it).
    """
    o = Options.of(options, **overrides)
    if o.schedule == "uniform":
        work = waves.plan(M, N, gpu="b200", tile_m=TILE_M, tile_ns=(TILE_N,), balanced=False)
    else:
        work = waves.plan(M, N, gpu="b200", tile_m=TILE_M, tile_ns=TILE_WIDTHS, balanced=True)
    check_items(work.items, M, N)
    return work


def check_items(items, M: int, N: int) -> None:
    """Every item is one the kernel can run: a known width, a row of the M256 grid, a 32-column-aligned start
    (the epilogue addresses c in 128 x 32 subtiles) inside the matrix."""
    for m0, n0, width in items:
        if width not in TILE_WIDTHS or m0 % TILE_M or n0 % EPI_SUBTILE_N or not (0 <= m0 < M and 0 <= n0 < N):
            raise ValueError(f"work item (m0={m0}, n0={n0}, width={width}) is not one this kernel runs: widths "
                             f"{TILE_WIDTHS}, m0 a multiple of {TILE_M} and n0 of {EPI_SUBTILE_N}, inside "
                             f"{M} x {N}")


def widths_of(work: waves.Plan) -> tuple[int, ...]:
    """The item widths a build must handle, widest first: one MMA loop is compiled per width."""
    return tuple(sorted({width for _, _, width in work.items}, reverse=True))
