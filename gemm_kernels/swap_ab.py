"""Swapped operands (`hopper_options.Options.swap_ab`, notebook 17) in numbers, with no GPU: the rows of tensor-core
work a tiling of M makes, and the plans of swapped and unswapped configurations side by side.

    swap_ab.padding([96, 800, 1500])        # per M: rows of work in 128-row tiles and at the best swapped width
    swap_ab.plans(800, 5000, ["256 stream-k cluster2", "288 uniform cluster4 swapped"])   # items, slots, waves

Unswapped, our M runs along WGMMA's M: 64 rows a warpgroup, 128 a tile, so a tiling of M does ceil(M / 128) x 128
rows of work. Swapped, our M runs along WGMMA's N, a multiple of 8 up to 256; the staged epilogue stores 32 columns
at a time, so the library's swapped widths are multiples of 32, and 288 (three 96-wide WGMMAs).
"""
from __future__ import annotations

import math

import pandas as pd

from gemm_kernels import configs, hopper_options
from gemm_kernels.hopper_options import EPI_N, SWAPPED_WIDE, TILE_K, TILE_M, WGMMA_N_MAX
from workbook import gpus

WIDTHS = (*range(EPI_N, WGMMA_N_MAX + 1, EPI_N), SWAPPED_WIDE)   # every swapped width the library builds


def rows_of_work(M: int, width: int) -> int:
    """Rows of tensor-core work that tiles `width` rows of M apiece do for M rows: whole tiles, the last padded."""
    return math.ceil(M / width) * width


def best_width(M: int, widths=WIDTHS) -> int:
    """The swapped width that pads M least; of those that pad it equally, the widest (fewest tiles)."""
    return min(widths, key=lambda w: (rows_of_work(M, w), -w))


def padding(Ms, widths=WIDTHS) -> pd.DataFrame:
    """Per M: the rows of work of 128-row tiles and of the best swapped width among `widths`, and each as % of M
    wasted (rows of work past M)."""
    rows = []
    for M in Ms:
        w = best_width(M, widths)
        tiled, swapped = rows_of_work(M, TILE_M), rows_of_work(M, w)
        rows.append({"M": M, f"{TILE_M}-row tiles": tiled, "waste %": 100 * (tiled / M - 1),
                     "best swapped width": w, "swapped rows": swapped, "swapped waste %": 100 * (swapped / M - 1)})
    return pd.DataFrame(rows).set_index("M")


def plans(M: int, N: int, names, gpu=gpus.H200) -> pd.DataFrame:
    """Per configuration of `configs.HOPPER_CANDIDATES` named in `names`, its plan of an M x N output on `gpu`: the
    tile of c one work item covers (rows of M x columns of N, a cluster's CTAs together), the items, the slots
    (clusters that run at once), waves (items / slots) and makespan (the busiest slot's items)."""
    rows = []
    for name in names:
        o = configs.HOPPER_CANDIDATES[name]
        plan = hopper_options.plan_for(M, N, o, gpu)
        item = ((plan.wide, o.tile_m * o.cluster_m) if o.swap_ab
                else (o.tile_m * o.cluster_m, plan.wide * o.cluster_n))
        rows.append({"configuration": name, "item (M x N)": f"{item[0]} x {item[1]}", "CTAs per item": o.cluster_size,
                     "items": len(plan.items), "slots": plan.slots, "waves": plan.waves, "makespan": plan.makespan})
    return pd.DataFrame(rows).set_index("configuration")


def widths(M: int, N: int, cluster: int = 4, gpu=gpus.H200, choices=WIDTHS) -> pd.DataFrame:
    """Per swapped width, the planner's uniform plan (`hopper_options.plan_for`) of an M x N output in clusters of
    `cluster` CTAs along N (each item `cluster` x 128 columns of N by `width` rows of M): tiles along M, items, waves
    and makespan on `gpu`, the wave model's time (makespan x width, in units of one row of M's work per item) and the
    operand rows an item loads per K-block for each row x column of its MACs (rows of N + width, over rows of N x
    width: lower is more reuse)."""
    n_rows = TILE_M * cluster
    rows = []
    for w in choices:
        o = hopper_options.Options(swap_ab=True, epilogue="staged", schedule="uniform", tile=(TILE_M, w, TILE_K),
                                   cluster_m=cluster)
        plan = hopper_options.plan_for(M, N, o, gpu)
        rows.append({"width": w, "tiles along M": math.ceil(M / w), "rows of work": rows_of_work(M, w),
                     "items": len(plan.items), "waves": plan.waves, "makespan": plan.makespan,
                     "makespan x width": plan.makespan * w,
                     "loads per MAC (x1000)": 1000 * (n_rows + w) / (n_rows * w)})
    return pd.DataFrame(rows).set_index("width")


# the round `candidates` of probes/gemm_swap_ab_probe.py, on an H100
PROBE = "data/measured/nvidia_h100_80gb_hbm3/probes/gemm_swap_ab_candidates_37bf898.csv"


def probe_table(path=PROBE, timing: str = "gpu") -> pd.DataFrame:
    """The probe round `candidates` (`probes/gemm_swap_ab_probe.py`: the swapped candidates, the rule's pick and
    torch.matmul taking turns at the rule check's 24 slowest shapes), one row per shape: µs per call in `timing`
    ("gpu": CUPTI kernel durations; "kernel": back to back; "latency": synchronised) of the pick, the fastest swapped
    candidate and torch.matmul, and the swapped one's time over the pick's with its 95 % interval (none for "gpu")."""
    d = _round(path, timing)
    rows = []
    for (M, N, K), g in d.groupby(["M", "N", "K"], sort=False):
        g = g.set_index("contender")
        pick = next(c for c in g.index if c.startswith("pick: "))
        swapped = g.loc[[c for c in g.index if c.startswith("swapped")], "us_median"].idxmin()
        rows.append({"M": M, "N": N, "K": K, "pick": pick.removeprefix("pick: "), "pick µs": g.us_median[pick],
                     "swapped": swapped, "swapped µs": g.us_median[swapped], "torch µs": g.us_median["torch.matmul"],
                     "swapped / pick": g.ratio[swapped], "lo": g.ratio_lo[swapped], "hi": g.ratio_hi[swapped]})
    out = pd.DataFrame(rows).sort_values("swapped / pick").reset_index(drop=True)
    out.attrs.update(d.attrs)
    return out


# the round `widths` of the same probe: other widths where the wave model ranks one first
WIDTHS_PROBE = "data/measured/nvidia_h100_80gb_hbm3/probes/gemm_swap_ab_widths_e163303.csv"


def widths_table(path=WIDTHS_PROBE, timing: str = "gpu") -> pd.DataFrame:
    """The probe round `widths`: per shape (rows "MxNxK"), each swapped width's time in `timing` over the rule's
    pick's (columns: widths, in clusters of four; NaN where not timed there), and torch.matmul's."""
    d = _round(path, timing)
    ours = d[d.contender.str.startswith("swapped")]
    table = ours.assign(width=ours.contender.str.split().str[1].astype(int)).pivot_table(
        index=["M", "N", "K"], columns="width", values="ratio", sort=False)
    table = table[sorted(table.columns)]
    table["torch.matmul"] = d[d.contender == "torch.matmul"].set_index(["M", "N", "K"]).ratio
    table.index = [f"{m}x{n}x{k}" for m, n, k in table.index]
    table.attrs.update(d.attrs)
    return table


def _round(path, timing: str) -> pd.DataFrame:
    """A recorded round's rows of one timing, with its GPU, commit and path in `attrs`."""
    from workbook import ROOT
    d = pd.read_csv(ROOT / path)
    d = d[d.timing == timing]
    d.attrs.update(gpu=str(d.gpu.iloc[0]), commit=str(d.commit.iloc[0]), path=path)
    return d
