"""Shared-memory arithmetic of a GEMM: how many mainloop pipeline stages fit beside the epilogue.

One stage is one K-slice of the operands a CTA needs for one MMA step: ``tile_m x tile_k`` of A and
``tile_k x tile_n`` of B. TMA fills stages ahead of the MMA, so more stages hide more memory latency. The
CTA's shared memory is shared by

* the stages: ``stages x stage_bytes``;
* the epilogue's output buffer, if the accumulator leaves through shared memory ("staged": registers ->
  shared memory -> TMA store); an epilogue that transposes in registers with warp shuffles and stores
  128 bits per thread straight to global memory ("register") needs none;
* a reserve for the pipeline's mbarriers, the tile scheduler's ring and the like (1 KiB, as CUTLASS's
  examples reserve).

On Blackwell a 2-CTA MMA (``cta_group::2``, a CTA pair) computes a ``tile_m x tile_n`` tile with each CTA
holding half of it: CTA ``r`` of the pair loads rows ``r * tile_m/2 ..`` of A and columns ``r * tile_n/2 ..``
of B (the MMA reads B from both CTAs), and its tensor memory holds its ``tile_m/2`` rows of the
accumulator across all ``tile_n`` columns, so its output buffer is ``tile_m/2 x tile_n``.

Seed 004 (B200, M256 x N256 pair tile, tile_k 64): 32 KiB a stage per CTA, 64 KiB output buffer. Its
previous kernel ran 4 stages beside that buffer (this arithmetic fits 5), and 7 once the buffer was gone.
"""
from __future__ import annotations

from dataclasses import dataclass

from workbook import gpus

EPILOGUES = ("staged", "register")
KIB = 1024
# mbarriers (two per stage, two per accumulator buffer), a tile-info ring, the TMEM address: well under this
RESERVED_BYTES = 1 * KIB
MMA_ROWS_PER_CTA = {"sm_100a": 128}  # one CTA's tcgen05 MMA has at most 128 rows; a taller tile is a pair


def cta_group_for(arch: str, tile_m: int) -> int:
    """CTAs that compute one tile of ``tile_m`` rows: 2 for a Blackwell tile taller than one CTA's MMA, else 1."""
    limit = MMA_ROWS_PER_CTA.get(arch)
    return 2 if limit is not None and tile_m > limit else 1


@dataclass(frozen=True)
class StageBudget:
    """One CTA's shared memory, in bytes: ``stages * stage_bytes + epilogue_bytes + reserved_bytes +
    leftover == capacity``."""
    arch: str
    tile: tuple[int, int, int]  # the MMA tile (M, N, K) of one work item
    cta_group: int  # CTAs sharing the tile
    epilogue: str
    a_bytes: int  # one stage of A in one CTA
    b_bytes: int  # one stage of B in one CTA
    stage_bytes: int
    epilogue_bytes: int
    reserved_bytes: int
    capacity: int  # what one CTA may use (the GPU's per-block opt-in maximum)
    stages: int
    leftover: int

    @property
    def per_cta(self) -> str:
        """What one CTA holds, in words."""
        m, n, k = self.tile
        if self.cta_group == 1:
            return f"A {m}x{k}, B {k}x{n}, accumulator {m}x{n}"
        g = self.cta_group
        return (f"of the {m}x{n} tile, CTA r of {g} holds A rows r*{m // g}.. ({m // g}x{k}), B columns "
                f"r*{n // g}.. ({k}x{n // g}) and accumulator rows r*{m // g}.. ({m // g}x{n})")

    def describe(self) -> str:
        return (f"{self.arch} tile {'x'.join(map(str, self.tile))}, {self.epilogue} epilogue: "
                f"{self.stages} x {_kib(self.stage_bytes)} stages + {_kib(self.epilogue_bytes)} epilogue + "
                f"{_kib(self.reserved_bytes)} reserved + {_kib(self.leftover)} left = {_kib(self.capacity)}")


def _kib(nbytes: int) -> str:
    return f"{nbytes / KIB:g} KiB"


def stages(tile, epilogue: str, arch: str, *, cta_group: int | None = None, in_bytes: int = 2,
           out_bytes: int = 2, epilogue_tile: tuple[int, int] | None = None, epilogue_buffers: int = 1,
           reserved_bytes: int = RESERVED_BYTES, depth: int | None = None, min_stages: int = 2) -> StageBudget:
    """How many pipeline stages fit in one CTA's shared memory, and where every byte goes.

    tile: the MMA tile ``(tile_m, tile_n, tile_k)`` of one work item (for a Blackwell CTA pair, the pair's
    tile, e.g. (256, 256, 64); see the module doc for which half each CTA holds). epilogue: "staged" or
    "register". arch: "sm_90a" or "sm_100a" (capacity from ``workbook.gpus``). cta_group: CTAs per tile,
    default ``cta_group_for(arch, tile_m)``. in_bytes / out_bytes: element sizes of A, B and of the output
    (bf16: 2). epilogue_tile, epilogue_buffers: the staged epilogue's buffer, ``(rows, cols)`` per buffer,
    default one buffer of the CTA's whole accumulator (a subtile with 2 buffers is a common smaller choice).
    depth: report that many stages instead of the most that fit (ValueError if they do not fit).
    min_stages: ValueError when fewer fit (a pipeline needs two to overlap loads with math).
    """
    tile_m, tile_n, tile_k = _check_tile(tile)
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {EPILOGUES}; got {epilogue!r}")
    spec = _spec_for(arch)
    group = cta_group_for(spec.arch, tile_m) if cta_group is None else cta_group
    _check_cta_group(spec.arch, tile, group)
    for name, v in (("in_bytes", in_bytes), ("out_bytes", out_bytes), ("epilogue_buffers", epilogue_buffers)):
        _check_int(name, v, low=1)
    _check_int("reserved_bytes", reserved_bytes, low=0)
    _check_int("min_stages", min_stages, low=0)

    a_bytes = (tile_m // group) * tile_k * in_bytes
    b_bytes = (tile_n // group) * tile_k * in_bytes
    stage_bytes = a_bytes + b_bytes
    acc_rows = tile_m // group
    if epilogue == "register":
        if epilogue_tile is not None:
            raise ValueError("a register epilogue has no shared-memory buffer; drop epilogue_tile")
        epilogue_bytes = 0
    else:
        rows, cols = (acc_rows, tile_n) if epilogue_tile is None else _check_epilogue_tile(epilogue_tile,
                                                                                          acc_rows, tile_n)
        epilogue_bytes = rows * cols * out_bytes * epilogue_buffers

    capacity = spec.smem_per_block_kib * KIB
    room = capacity - epilogue_bytes - reserved_bytes  # what the stages may use
    if room < 0:
        raise ValueError(f"the {epilogue_bytes / KIB:g} KiB epilogue buffer and {reserved_bytes / KIB:g} KiB "
                         f"reserve alone exceed the {capacity / KIB:g} KiB a {spec.arch} CTA may use")
    fit = room // stage_bytes

    def budget(n: int) -> StageBudget:
        return StageBudget(arch=spec.arch, tile=(tile_m, tile_n, tile_k), cta_group=group, epilogue=epilogue,
                           a_bytes=a_bytes, b_bytes=b_bytes, stage_bytes=stage_bytes,
                           epilogue_bytes=epilogue_bytes, reserved_bytes=reserved_bytes, capacity=capacity,
                           stages=n, leftover=room - n * stage_bytes)

    if depth is not None:
        _check_int("depth", depth, low=1)
        if depth > fit:
            raise ValueError(f"{depth} stages do not fit; at most: {budget(fit).describe()}")
        return budget(depth)
    if fit < min_stages:
        raise ValueError(f"only {fit} stage(s) fit, fewer than min_stages={min_stages}: {budget(fit).describe()}")
    return budget(fit)


def _spec_for(arch) -> gpus.GpuSpec:
    """The spec whose shared memory is that of ``arch`` ("sm_90a", "sm_100a"), or a GPU spec / name."""
    if isinstance(arch, str):
        for spec in (gpus.H200, gpus.B200):
            if spec.arch == arch:
                return spec
        if not arch.startswith("sm_"):
            return gpus.get(arch)
    elif isinstance(arch, gpus.GpuSpec):
        return arch
    raise ValueError(f"arch must be 'sm_90a' or 'sm_100a' (or a workbook.gpus spec); got {arch!r}")


def _check_int(name: str, v, *, low: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{name} must be an int >= {low}; got {v!r}")


def _check_tile(tile) -> tuple[int, int, int]:
    if not isinstance(tile, (tuple, list)) or len(tile) != 3:
        raise ValueError(f"tile must be (tile_m, tile_n, tile_k); got {tile!r}")
    for name, v in zip(("tile_m", "tile_n", "tile_k"), tile):
        _check_int(name, v, low=1)
    return tuple(tile)


def _check_cta_group(arch: str, tile, group: int) -> None:
    tile_m, tile_n, _ = tile
    if group not in (1, 2):
        raise ValueError(f"cta_group must be 1 or 2; got {group!r}")
    if group == 2 and arch not in MMA_ROWS_PER_CTA:
        raise ValueError(f"{arch} has no 2-CTA MMA: each CTA of a cluster holds its whole tile (cta_group=1)")
    limit = MMA_ROWS_PER_CTA.get(arch)
    if limit is not None and tile_m // group > limit:
        raise ValueError(f"a {arch} CTA's MMA has at most {limit} rows; tile_m={tile_m} needs "
                         f"cta_group={-(-tile_m // limit)}, got {group}")
    if tile_m % group or tile_n % group:
        raise ValueError(f"a {group}-CTA tile splits M and N in {group}; {tile_m}x{tile_n} does not split evenly")


def _check_epilogue_tile(epilogue_tile, acc_rows: int, tile_n: int) -> tuple[int, int]:
    if not isinstance(epilogue_tile, (tuple, list)) or len(epilogue_tile) != 2:
        raise ValueError(f"epilogue_tile must be (rows, cols); got {epilogue_tile!r}")
    rows, cols = epilogue_tile
    _check_int("epilogue_tile rows", rows, low=1)
    _check_int("epilogue_tile cols", cols, low=1)
    if rows > acc_rows or cols > tile_n:
        raise ValueError(f"epilogue_tile {rows}x{cols} is larger than the CTA's {acc_rows}x{tile_n} accumulator")
    return rows, cols
