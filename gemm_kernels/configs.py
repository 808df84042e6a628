"""The named GEMM configurations of both architectures: the one place a name like "128x256x64 s4 staged uniform"
is given its options. The benchmark records these names in data/measured/<gpu>/gemm.csv; the notebooks and
the explorer look them up here.

    configs.for_arch("sm_90a")            # {name: hopper_options.Options}, in the order of the tutorial's steps
    configs.HOPPER[configs.HOPPER_DEFAULT]   # the configuration `gemm_kernels.gemm(a, b)` runs
    configs.table()                       # one row per name: its arch and every option, as a DataFrame

Hopper (H200, measured): each step of the story alone. The 4-stage ring with the staged epilogue; the
register epilogue at the same depth; the 7-stage ring that fits once the epilogue buffer is gone (only with
a 128-wide tile: a 128x256x64 stage is 48 KiB, so 4 is the most that fit either way); the balanced schedule.
All but the first walk the work list in bands of tile rows for L2 reuse (`hopper_worklist.banded`); the
first keeps the planner's row-major order, to measure that step. The "cluster2" ones pair CTAs along M to
share each B tile by TMA multicast; the last two defer the epilogue (and add stream-K). Every register
configuration says whether it defers, since the default does.

Blackwell (B200, compile-checked here, never measured by us): seed 004's builds, 4-stage staged, 7-stage
register, and 7-stage register with the balanced schedule.
"""
from __future__ import annotations

from gemm_kernels import blackwell_options, hopper_options

_H = hopper_options.Options
_REGISTER = dict(tile=(128, 256, 64), stages=4, epilogue="register")
_SWAPPED = dict(swap_ab=True, epilogue="staged", schedule="uniform", cluster_m=4)

HOPPER = {
    "128x256x64 s4 register uniform rowmajor": _H(**_REGISTER, schedule="uniform", band_rows=1, cluster_m=1,
                                                  defer_epilogue=False),
    "128x256x64 s4 staged uniform": _H(tile=(128, 256, 64), stages=4, epilogue="staged", schedule="uniform",
                                       cluster_m=1),
    "128x256x64 s4 register uniform": _H(**_REGISTER, schedule="uniform", cluster_m=1, defer_epilogue=False),
    "128x128x64 s6 staged uniform": _H(tile=(128, 128, 64), stages=6, epilogue="staged", schedule="uniform",
                                       cluster_m=1),
    "128x128x64 s7 register uniform": _H(tile=(128, 128, 64), stages=7, epilogue="register", schedule="uniform",
                                         cluster_m=1, defer_epilogue=False),
    "128x256x64 s4 register balanced": _H(**_REGISTER, schedule="balanced", cluster_m=1, defer_epilogue=False),
    "128x256x64 s4 register uniform cluster2": _H(**_REGISTER, schedule="uniform", cluster_m=2,
                                                  defer_epilogue=False),
    "128x256x64 s4 register balanced cluster2": _H(**_REGISTER, schedule="balanced", cluster_m=2,
                                                   defer_epilogue=False),
    "128x256x64 s4 deferred register balanced cluster2": _H(**_REGISTER, schedule="balanced", cluster_m=2,
                                                            defer_epilogue=True),
    "128x256x64 s4 deferred register uniform cluster2 stream-k": _H(**_REGISTER, schedule="uniform", cluster_m=2,
                                                                    defer_epilogue=True, stream_k=True),
}
HOPPER_DEFAULT = "128x256x64 s4 deferred register balanced cluster2"   # what gemm_kernels.gemm runs by default

# The traced builds whose timelines data/measured/h200/probes/gemm_timeline_*/ holds, by the names of those
# files (`hopper_host.timeline(a, b, HOPPER_TIMELINES[name])`): the default and one departure each.
HOPPER_TIMELINES = {
    "default": _H(),
    "plain": _H(defer_epilogue=False),
    "staged": _H(epilogue="staged"),
    "narrow64": _H(narrow_ns=(192, 128)),     # the narrow widths of 64-column steps only
}

# The per-shape choice (`gemm_kernels.rule`): the configurations the sweep (`gemm_kernels.sweep`) times on every
# shape class, and from which the rule picks one per shape. Each is a tile width, a cluster shape and a schedule:
# balanced (narrow tiles fill the last wave) or stream-K (the last partial wave, or the whole grid when the tiles
# are fewer than the SMs, split along K: split-K for skinny and K-heavy problems) or uniform; "one-per-item"
# launches a CTA per tile instead of persistent CTAs (no work counter: small grids). All but the swapped ones defer
# the register epilogue.
HOPPER_CANDIDATES = {
    "256 balanced cluster2": _H(),      # what gemm(a, b, <any options>) runs when it is given options
    "256 balanced cluster1": _H(**_REGISTER, schedule="balanced", cluster_m=1),
    "192 balanced cluster2": _H(tile=(128, 192, 64), schedule="balanced", cluster_m=2),
    "192 balanced cluster1": _H(tile=(128, 192, 64), schedule="balanced", cluster_m=1),
    "128 balanced cluster2": _H(tile=(128, 128, 64), schedule="balanced", cluster_m=2),
    "128 balanced cluster1": _H(tile=(128, 128, 64), schedule="balanced", cluster_m=1),
    "256 stream-k cluster2": _H(**_REGISTER, schedule="uniform", cluster_m=2, stream_k=True),
    "256 stream-k cluster1": _H(**_REGISTER, schedule="uniform", cluster_m=1, stream_k=True),
    "192 stream-k cluster1": _H(tile=(128, 192, 64), schedule="uniform", cluster_m=1, stream_k=True),
    "128 stream-k cluster2": _H(tile=(128, 128, 64), schedule="uniform", cluster_m=2, stream_k=True),
    # every item cut into the same pieces along K where they fit the slots twice or more (`Options.split_k`)
    "128 split-k cluster2": _H(tile=(128, 128, 64), schedule="uniform", cluster_m=2, stream_k=True, split_k=True),
    "128 stream-k cluster1": _H(tile=(128, 128, 64), schedule="uniform", cluster_m=1, stream_k=True),
    "64 stream-k cluster1": _H(tile=(128, 64, 64), schedule="uniform", cluster_m=1, stream_k=True),
    "64 uniform cluster1": _H(tile=(128, 64, 64), schedule="uniform", cluster_m=1),
    "64 one-per-item cluster1": _H(tile=(128, 64, 64), schedule="uniform", cluster_m=1, persistent=False),
    "128 one-per-item cluster1": _H(tile=(128, 128, 64), schedule="uniform", cluster_m=1, persistent=False),
    # The small-M tile: 64 rows, one consumer warpgroup (`hopper_options.TILE_MS`), for skinny problems, where a
    # 128-row tile's A box is mostly TMA's zero fill and its WGMMAs mostly padding. Named by the whole tile.
    "64x64 uniform cluster1": _H(tile=(64, 64, 64), schedule="uniform", cluster_m=1),
    "64x128 uniform cluster1": _H(tile=(64, 128, 64), schedule="uniform", cluster_m=1),
    "64x256 uniform cluster1": _H(tile=(64, 256, 64), schedule="uniform", cluster_m=1),
    "64x128 stream-k cluster1": _H(tile=(64, 128, 64), schedule="uniform", cluster_m=1, stream_k=True),
    "64x128 uniform cluster2": _H(tile=(64, 128, 64), schedule="uniform", cluster_m=2),
    "64x64 uniform cluster2": _H(tile=(64, 64, 64), schedule="uniform", cluster_m=2),
    "64x128 stream-k cluster2": _H(tile=(64, 128, 64), schedule="uniform", cluster_m=2, stream_k=True),
    # Pairs side by side along N sharing A ("cluster2n"): a 128-row tile's two MMA streams with the L2 traffic per
    # CTA of a 64-row tile pair, what cuBLAS runs on few-tile K-heavy shapes (notes/perf-log.md).
    "64 uniform cluster2n": _H(tile=(128, 64, 64), schedule="uniform", cluster_m=1, cluster_n=2),
    "128 uniform cluster2n": _H(tile=(128, 128, 64), schedule="uniform", cluster_m=1, cluster_n=2),
    "64 stream-k cluster2n": _H(tile=(128, 64, 64), schedule="uniform", cluster_m=1, cluster_n=2, stream_k=True),
    # 2 x 2 clusters ("cluster2x2"): A shared along each row of CTAs, B along each column, so a CTA loads half of
    # each tile; four-CTA clusters fit 30 at once on the H200 (not 33), so stream-K fills the last wave.
    "128 uniform cluster2x2": _H(tile=(128, 128, 64), schedule="uniform", cluster_m=2, cluster_n=2),
    "128 stream-k cluster2x2": _H(tile=(128, 128, 64), schedule="uniform", cluster_m=2, cluster_n=2, stream_k=True),
    "64 stream-k cluster2x2": _H(tile=(128, 64, 64), schedule="uniform", cluster_m=2, cluster_n=2, stream_k=True),
    # Swapped operands ("swapped", `Options.swap_ab`): c^T = b^T a^T, our M along WGMMA's N (the tile's width, in
    # steps of 32) and clusters of four CTAs along our N sharing each tile of our A: what cuBLAS runs where M is not
    # a whole number of 128-row tiles (probes/gemm_cublas_census_probe.py). On an H100, against the rule's pick
    # (probes/gemm_swap_ab_probe.py): 288 wide at 800 x 5000 x 3000 took 0.67 of its time, 96 wide at 96 x 12288 x
    # 8192 0.93, 128 wide at 384 x 5120 x 10240 0.76; 256 wide at 1500 x 2504 x 3000 0.66, 160 wide at 1536 x 1536 x
    # 12288 0.69 (where the wave model, `swap_ab.widths`, ranks those widths first).
    "288 uniform cluster4 swapped": _H(**_SWAPPED, tile=(128, 288, 64)),
    "256 uniform cluster4 swapped": _H(**_SWAPPED, tile=(128, 256, 64)),
    "160 uniform cluster4 swapped": _H(**_SWAPPED, tile=(128, 160, 64)),
    "128 uniform cluster4 swapped": _H(**_SWAPPED, tile=(128, 128, 64)),
    "96 uniform cluster4 swapped": _H(**_SWAPPED, tile=(128, 96, 64)),
}
HOPPER_FALLBACK = "256 balanced cluster2"   # the rule's choice where the sweep has nothing nearby (= HOPPER_DEFAULT)

_B = blackwell_options.Options
BLACKWELL = {
    "b200 4-stage, staged epilogue": _B(stages=4, epilogue="staged", schedule="uniform"),
    "b200 7-stage, register epilogue": _B(stages=7, epilogue="register", schedule="uniform"),
    "b200 7-stage, register epilogue, balanced tiles": _B(stages=7, epilogue="register", schedule="balanced"),
}


def for_arch(arch: str) -> dict:
    """The named configurations an arch's benchmark times, in story order."""
    named = {"sm_90a": HOPPER, "sm_100a": BLACKWELL}
    if arch not in named:
        raise ValueError(f"no GEMM configurations for arch {arch!r}; there are some for {sorted(named)}")
    return named[arch]


def table():
    """Every named configuration as a row: name, arch, and the value of each of its options."""
    import dataclasses

    import pandas as pd
    rows = [{"name": name, "arch": arch, **dataclasses.asdict(options)}
            for arch in ("sm_90a", "sm_100a") for name, options in for_arch(arch).items()]
    return pd.DataFrame(rows)
