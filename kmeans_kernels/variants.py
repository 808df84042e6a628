"""The k-means kernels' vocabulary: which D every kernel takes, and what each variant name is made of on each
architecture.

    check_d(D)                          # ValueError unless D is a multiple of 16 from 16 up to 512
    recipe("sm_100a", "norm_broadcast") # Recipe(scan='serial', norms='shuffle', tile_n=128, ...)
    names("sm_90a")                     # ('serial', 'ilp2', 'norm_broadcast', 'wide', 'lean_select', ..., 'folded_norms')
    table()                             # one row per (variant, arch): what it is made of

A variant name means one step of the tutorial, but the steps are not cut the same way on both machines. On
Hopper each step adds to the previous one: `norm_broadcast` is `ilp2` plus the broadcast norms. On Blackwell
the steps are those of flashlib PR #22, each one change from the warp-specialised baseline: its
`norm_broadcast` keeps the *serial* scan. RECIPES says so per arch; the backends build their kernels from it.
"""
from __future__ import annotations

from dataclasses import dataclass

D_MULTIPLE = 16        # the MMA K of 16-bit operands
D_MAX = 512            # a [128, 512] bf16 point tile is 128 KiB resident; beyond that too few ring slots remain
SCANS = ("serial", "ilp2", "pairs", "lazy")   # `kmeans_kernels.reduce`
NORMS = ("load", "smem", "shuffle", "accumulator")


@dataclass(frozen=True)
class Recipe:
    """What one variant is made of on one arch.

    scan: the argmin over a tile's columns (`kmeans_kernels.reduce`): "serial" (one compare-select chain per
    row), "ilp2" (two chains, even and odd columns, merged by (score, index) at the end) or "pairs" (ilp2's
    chains fed two scores at a time through one FMNMX, with immediate column offsets: fewer instructions
    per score, `kmeans_kernels.reduce.scan_pairs`).
    norms: how a thread gets the half norms 0.5 * ||c_k||^2 of its columns: "load" (each thread reads them
    from global memory, L1-cached), "smem" (staged in shared memory once per tile, two named barriers) or
    "shuffle" (each warp loads the tile's norms coalesced into registers and hands them out by shuffle_sync)
    or "accumulator" (the producer warp stages -0.5 * ||c_k||^2 in shared memory beside each ring slot, and the
    consumers load it into the accumulator before the tile's MMAs, which then add the dot products onto it: the
    fold reads finished scores, negated).
    tile_n: centroids per tile. ping_pong: the two consumer warpgroups take turns at the tensor cores.
    warp_specialized: separate load, MMA and epilogue warps (False: one warp issues loads and MMAs between
    its epilogue steps).
    """
    scan: str
    norms: str
    tile_n: int = 128
    ping_pong: bool = False
    warp_specialized: bool = True

    def __post_init__(self):
        if self.scan not in SCANS or self.norms not in NORMS:
            raise ValueError(f"scan must be one of {SCANS} and norms one of {NORMS}; got {self.scan!r}, {self.norms!r}")
        if self.scan == "lazy" and self.norms != "accumulator":
            raise ValueError("the lazy scan reads finished scores: it needs the norms in the accumulator")


RECIPES = {
    "sm_90a": {
        "serial": Recipe("serial", "load"),
        "ilp2": Recipe("ilp2", "load"),
        "norm_broadcast": Recipe("ilp2", "shuffle"),
        # 256-wide tiles: a 128-register accumulator allows one CTA per SM, which leaves no other CTA to
        # overlap with, so the warpgroups ping-pong. (The 128-wide variants also run alone on an SM at D > 256;
        # ping-pong there is not measured, so they keep the plain loop.) Past D = 256 its ring cannot hold a
        # whole tile's D blocks, which the ping-pong needs: refused there (`hopper.ping_pong_fits`).
        "wide": Recipe("ilp2", "shuffle", tile_n=256, ping_pong=True),
        # norm_broadcast with the leaner scan (about 3.75 instead of 4.4 scan instructions per score, in the
        # SASS); `auto` runs it, or folded_norms, where it does not run wide (`hopper.auto_variant`).
        "lean_select": Recipe("pairs", "shuffle"),
        # lean_select with wide's turns at the tensor cores, on 128-wide tiles (two CTAs per SM up to D = 256)
        "lean_ping_pong": Recipe("pairs", "shuffle", ping_pong=True),
        # lean_ping_pong with the half norms in the accumulator: no subtraction, shuffle or norm staging per score
        "folded_norms": Recipe("pairs", "accumulator", ping_pong=True),
        # folded_norms with the index searched only where a tile beats a row's winner; `auto` at D <= 128, K >= 4096
        "lazy_index": Recipe("lazy", "accumulator", ping_pong=True),
    },
    "sm_100a": {   # the steps of flashlib PR #22, each one change from the warp-specialised "serial"
        "serial": Recipe("serial", "smem"),
        "ilp2": Recipe("ilp2", "smem"),
        "norm_broadcast": Recipe("serial", "shuffle"),
        "x_resident": Recipe("serial", "smem", warp_specialized=False),
    },
}


def names(arch: str) -> tuple[str, ...]:
    """The variant names of `arch`, in tutorial order."""
    if arch not in RECIPES:
        raise ValueError(f"no k-means kernels for arch {arch!r}; kernels exist for {sorted(RECIPES)}")
    return tuple(RECIPES[arch])


def recipe(arch: str, variant: str) -> Recipe:
    """What `variant` is made of on `arch`; a ValueError naming the variants that exist there."""
    found = RECIPES.get(arch, {}).get(variant) if arch in RECIPES else None
    if found is None:
        raise ValueError(f"variant {variant!r} does not exist for {arch}; choose from {names(arch)}")
    return found


def check_d(D: int) -> None:
    """The one rule on D every tensor-core kernel shares: an int, a multiple of the MMA's K (16), 16 to 512."""
    if isinstance(D, bool) or not isinstance(D, int):
        raise ValueError(f"D={D!r} is unsupported by the tensor-core kernels: D must be an int, got {D!r} "
                         f"({type(D).__name__})")
    if D < D_MULTIPLE or D % D_MULTIPLE or D > D_MAX:
        raise ValueError(f"D={D!r} is unsupported by the tensor-core kernels: D must be a multiple of {D_MULTIPLE} "
                         f"from {D_MULTIPLE} up to {D_MAX} (use kmeans_kernels.reference.assign for other D)")


def table():
    """One row per (variant, arch): the recipe's fields, as a DataFrame (a variant absent on an arch has no row)."""
    import dataclasses

    import pandas as pd
    return pd.DataFrame([{"variant": v, "arch": arch, **dataclasses.asdict(r)}
                         for arch, named in RECIPES.items() for v, r in named.items()])
