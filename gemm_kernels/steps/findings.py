"""Tables the GEMM notebooks (11-13) compute from recorded H200 data: each function reads committed files under
data/measured/h200/ and returns a DataFrame, so every number a notebook prints comes from a file it names.

    variant_gains("128x256x64 s4 staged uniform", "128x256x64 s4 register uniform")   # gemm.csv, run by run
    timeline_phases()            # probes/gemm_timeline_78d89e8: K loop, epilogue, waits per row, CTA by CTA
    ncu_table(path)              # an `ncu --metrics` text report, readable column names
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from workbook import records

H200 = records.MEASURED / "h200"
PROBES = H200 / "probes"
TIMELINE = PROBES / "gemm_timeline_78d89e8" / "gemm_timeline_summary.csv"
NCU_LABELS = {
    "gpu__time_duration.sum": "time (ms)",
    "sm__cycles_elapsed.avg.per_second": "SM clock (GHz)",
    "dram__bytes_read.sum": "DRAM read (GB)",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed": "tensor pipe busy (%)",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput (% of peak)",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct": "stall: barrier (%)",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct": "stall: long scoreboard (%)",
    "smsp__warp_issue_stalled_wait_per_warp_active.pct": "stall: wait (%)",
    "smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct": "stall: math pipe throttle (%)",
    "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct": "stall: global store/load queue (%)",
    "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct": "stall: MIO (shared memory) queue (%)",
    "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct": "stall: short scoreboard (%)",
    "smsp__warp_issue_stalled_sleeping_per_warp_active.pct": "stall: sleeping (%)",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": "shared-memory wavefronts (LSU)",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "shared-memory bank conflicts",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed": "L1/shared throughput (% of peak)",
    "lts__t_sector_hit_rate.pct": "L2 hit rate (%)",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2 throughput (% of peak)",
    "lts__t_sectors.sum": "L2 sectors",
    "lts__t_requests.sum": "L2 requests",
    "lts__t_sectors_op_read.sum": "L2 sectors read",
    "lts__t_sectors_op_write.sum": "L2 sectors written",
    "lts__t_sectors_srcunit_ltcfabric.sum": "L2 sectors from the other partition",
}


def relative(path: Path) -> str:
    """A data file's path as the notebooks cite it (data/measured/...)."""
    return str(Path(path).resolve().relative_to(records.DATA.parent))


def variant_gains(before: str, after: str, table: str = "gemm") -> pd.DataFrame:
    """Per shape, over every benchmark run that timed both variants of our kernel: the gain of `after` over
    `before` (before's median time / after's - 1, in %), its median, lowest and highest over the runs, and how
    many runs. A gain whose runs straddle 0 is not a result."""
    df = records.read("h200", table)
    ours = df[(df.kernel == "ours") & df.variant.isin([before, after])]
    runs = ours.pivot_table(index=["date", "M", "N", "K"], columns="variant", values="ms_median").dropna()
    if runs.empty:
        return pd.DataFrame(columns=["M", "N", "K", "median %", "lowest %", "highest %", "runs"])
    runs["gain"] = 100 * (runs[before] / runs[after] - 1)
    out = runs.groupby(["M", "N", "K"]).gain.agg(["median", "min", "max", "count"]).reset_index()
    return out.rename(columns={"median": "median %", "min": "lowest %", "max": "highest %", "count": "runs"})


def timeline_phases(path: Path = TIMELINE) -> pd.DataFrame:
    """The production kernel's own timeline (hopper_host.timeline, three launches per build): per shape and build,
    the medians of the launch's makespan and, per work row, the K loop, the epilogue, the wait for the row's
    first K-block and the gap between rows, in microseconds. Builds: "plain" = register epilogue, "staged" =
    the TMA-store epilogue, "default" = the register epilogue deferred behind the next row's first K-blocks."""
    t = pd.read_csv(path)
    cols = {"makespan_us": "launch (µs)", "kloop_us(med)": "K loop per row (µs)",
            "epilogue_us(med)": "epilogue per row (µs)", "row_wait_us(med)": "wait for 1st K-block (µs)",
            "gap_us(med)": "between rows (µs)"}
    return t.groupby(["shape", "variant"])[list(cols)].median().rename(columns=cols).reset_index()


# Few-tile K-heavy shapes, at most one wave of 128 x 64 tiles on 132 SMs, where cuBLAS runs a 128 x 64 tile in a
# 1 x 2 cluster (probes/gemm_kheavy_cublas_kernels_7158d30.csv); the pairings compared there, by label
FEW_TILE_KHEAVY = ((1024, 1024, 8192), (1024, 1024, 16384), (1024, 1024, 32768), (1536, 1024, 8192),
                   (512, 2048, 16384))
PAIRINGS = {"128×64 alone": "64 uniform cluster1", "64×128, pair along M": "64x128 uniform cluster2",
            "128×64, pair along N": "64 uniform cluster2n", "torch.matmul (cuBLAS)": "torch.matmul"}
# The 2 x 2 cluster beside the best pairs: 128 x 128 tiles (items of 256 x 256, few enough for the 30 four-CTA
# clusters the H200 holds), stream-K spreading the items' K over every cluster.
CLUSTERS_2X2 = {"64×128, pair along M": "64x128 uniform cluster2", "128×64, pair along N": "64 uniform cluster2n",
                "128×128, 2 × 2, stream-K": "128 stream-k cluster2x2", "torch.matmul (cuBLAS)": "torch.matmul"}
PAIRS_NCU = PROBES / "ncu_kheavy_pairs.txt"   # tools/ncu_gemm_steps.py --candidates, at 1024 x 1024 x 8192
PAIRS_L2_NCU = PROBES / "ncu_kheavy_pairs_l2.txt"   # the same with the L2's sector counters
CLUSTER_2X2_NCU = PROBES / "ncu_kheavy_2x2_l2.txt"   # the 2 x 2 stream-K one, the pair along M and cuBLAS, the same


def pairings(shapes=FEW_TILE_KHEAVY, labels=None) -> pd.DataFrame:
    """GPU time per call (µs: the sweep's CUPTI kernel durations) of each of `labels` ({label: variant}, PAIRINGS
    by default) at the few-tile K-heavy shapes, from the k-heavy class's latest run in gemm_config_sweep.csv: one
    row per shape ("M×N×K"), one column per label; `attrs["commit"]` is the run's commit."""
    from gemm_kernels import rule, sweep
    frame = rule.latest_run(records.read("h200", sweep.TABLE))
    rows = frame[(frame["class"] == "k-heavy") & (frame.timing == sweep.GPU)]
    us = rows.pivot_table(index=["M", "N", "K"], columns="variant", values="ms_median") * 1e3
    labels = PAIRINGS if labels is None else labels
    out = us.loc[list(shapes), list(labels.values())].set_axis(list(labels), axis=1)
    out.index = [f"{m}×{n}×{k}" for m, n, k in out.index]
    out.attrs["commit"] = ", ".join(sorted(set(rows.commit.astype(str))))
    return out


def ncu_table(path: Path) -> pd.DataFrame:
    """An ncu text report (`workbook.ncu.read`) with one row per contender and readable metric names."""
    from workbook import ncu
    df = ncu.read(path).drop(columns=["kernel"]).set_index("contender")
    return df.rename(columns=NCU_LABELS)


# Seed 004, section 2 ("Wave-Tail Tile Balancing Across 74 B200 CTA Pairs"), transcribed: M256 x N256 pair tiles.
SEED_004_BALANCING = pd.DataFrame([
    dict(size=4096, tiles=256, waves=3.46, idle_pairs=40, recut="3 x 256 -> 4 x 192", recuts=40, items=296),
    dict(size=8192, tiles=1024, waves=13.84, idle_pairs=12, recut="7 x 256 -> 8 x 224", recuts=12, items=1036),
    dict(size=16384, tiles=4096, waves=55.35, idle_pairs=48, recut="7 x 256 -> 8 x 224", recuts=48, items=4144),
])
SEED_004_CONFIG = dict(gpu="b200", tile_m=256, tile_ns=(256, 224, 192))   # the seed's tile widths, 74 CTA pairs


def seed_vs_planner() -> pd.DataFrame:
    """What gemm_kernels.waves.plan derives for the seed's three squares on a B200 (74 CTA pairs, M256 pair tiles,
    widths 256 / 224 / 192), in the columns of SEED_004_BALANCING, plus the makespans and the predicted gain."""
    from gemm_kernels import waves
    rows = []
    for size in SEED_004_BALANCING["size"]:
        u = waves.plan(size, size, balanced=False, **SEED_004_CONFIG)
        b = waves.plan(size, size, **SEED_004_CONFIG)
        g = b.narrow // (u.wide - b.narrow)
        rows.append(dict(size=size, tiles=len(u.items), waves=round(u.waves, 2),
                         idle_pairs=round((1 - u.last_wave_fill) * u.slots), recut=f"{g} x 256 -> {g + 1} x {b.narrow}",
                         recuts=b.groups, items=len(b.items), makespan_uniform=u.makespan,
                         makespan_balanced=b.makespan, predicted_gain_pct=100 * (u.makespan / b.makespan - 1)))
    return pd.DataFrame(rows)


def schedule_gains(config: str = "128x256x64 s4 register", widths=((240, 224, 192, 128), (192, 128))):
    """Balanced against uniform for one configuration of the production kernel over every gemm.csv run that timed
    both (`variant_gains`), beside the planner's predicted gain for one CTA per 128 x 256 item on the H200 with
    each set of narrow widths the kernel has offered: 16-column steps (now) and 64-column steps (earlier runs)."""
    from gemm_kernels import waves
    from workbook import gpus
    measured = variant_gains(f"{config} uniform", f"{config} balanced")
    for ws in widths:
        predicted = []
        for M, N in zip(measured.M, measured.N):
            u = waves.plan(M, N, gpu=gpus.H200, tile_m=128, tile_ns=(256,), balanced=False)
            b = waves.plan(M, N, gpu=gpus.H200, tile_m=128, tile_ns=(256, *ws))
            predicted.append(100 * (u.makespan / b.makespan - 1))
        measured[f"predicted % (widths {', '.join(map(str, ws))})"] = predicted
    return measured


# ------------------------------------------------------------------------------- notebook 13, the appendix

def clock_runs() -> pd.DataFrame:
    """The retired probe_clocks.py (data/measured/h200/probes/README.md: each kernel back to back for 3 s while
    nvidia-smi sampled): per kernel build and shape, ours against torch.matmul in %: SM clock, work per clock
    (TFLOP/s per GHz), TFLOP/s."""
    builds = {"static walk (a1f3516)": "gemm_clocks.txt", "dynamic schedule (7062732)": "gemm_clocks_after.txt"}
    rows = []
    for build, name in builds.items():
        runs = pd.read_csv(PROBES / name, sep=r"\s+").rename(columns={"TFLOP/s/GHz": "per_GHz"})
        by = runs.groupby(["shape", "kernel"])[["TFLOP/s", "MHz", "W", "per_GHz"]].mean().unstack("kernel")
        for shape in by.index:
            rows.append({"build": build, "shape": shape, "board W (ours)": by.loc[shape, ("W", "ours")],
                         **{f"{label} vs torch (%)": 100 * (by.loc[shape, (col, "ours")] / by.loc[shape, (col, "torch")] - 1)
                            for col, label in (("MHz", "clock"), ("per_GHz", "work per clock"), ("TFLOP/s", "TFLOP/s"))}})
    return pd.DataFrame(rows)


# (what, file, contender as probe_ncu.py printed it): the 16384^3 kernel of each commit, one process per file
DRAM_STEPS = (
    ("static walk, bands of 8 rows", "ncu_bytes_16384.txt", "16384^3 ours default"),
    ("static walk, bands of 32 rows", "ncu_bytes_16384.txt", "16384^3 ours {'band_rows': 32}"),
    ("static walk, no CTA pairs", "ncu_bytes_16384.txt", "16384^3 ours {'cluster_m': 1}"),
    ("one CTA pair per item, hardware order", "ncu_np_16384.txt", "16384^3 ours {'persistent': 0}"),
    ("static walk, bands of 16 rows", "ncu_dyn_16384.txt", "16384^3 ours {'dynamic': 0}"),
    ("dynamic schedule, bands of 16", "ncu_dyn_16384.txt", "16384^3 ours default"),
    ("dynamic schedule, bands of 8", "ncu_dyn_16384.txt", "16384^3 ours {'band_rows': 8}"),
    ("dynamic, bands of 8, banded tail", "ncu_tail_16384.txt", "16384^3 ours default"),
)


def dram_vs_cublas() -> pd.DataFrame:
    """At 16384^3, each schedule's DRAM bytes, clock and time against cuBLAS's in the same ncu profile."""
    from workbook import ncu
    rows = []
    for what, name, contender in DRAM_STEPS:
        prof = ncu.read(PROBES / name).set_index("contender")
        ours, cublas = prof.loc[contender], prof.loc["16384^3 torch"]
        rows.append({"schedule": what, "file": name, "DRAM read (GB)": ours["dram__bytes_read.sum"],
                     "bytes vs cuBLAS": ours["dram__bytes_read.sum"] / cublas["dram__bytes_read.sum"],
                     "clock (GHz)": ours["sm__cycles_elapsed.avg.per_second"],
                     "cuBLAS clock (GHz)": cublas["sm__cycles_elapsed.avg.per_second"],
                     "time vs cuBLAS": ours["gpu__time_duration.sum"] / cublas["gpu__time_duration.sum"]})
    return pd.DataFrame(rows)


def rounds_medians(name: str) -> pd.DataFrame:
    """A probe_gemm_order.py / probe_stream_k.py file: per shape and config, the median over rounds of the
    synchronised and the back-to-back time, in microseconds."""
    runs = pd.read_csv(PROBES / name)
    return (runs.groupby(["shape", "config"], sort=False)[["synced_ms", "b2b_ms"]].median() * 1000).rename(
        columns={"synced_ms": "synced (µs)", "b2b_ms": "back to back (µs)"})


def stream_k_costs() -> dict:
    """From gemm_stream_k_diagnosis.csv (4096^3, back to back): what the stream-K build itself costs (every row
    whole), one hand-over round (each tail item in two halves) and stream-K as designed, in µs against no stream-K."""
    m = rounds_medians("gemm_stream_k_diagnosis.csv").loc["4096x4096x4096", "back to back (µs)"]
    base = m["no stream-k"]
    return {"the build, no split": m["stream-k whole rows"] - base, "one hand-over round": m["stream-k halves"] - base,
            "stream-K as designed": m["stream-k"] - base}


def deferral_gains() -> pd.DataFrame:
    """The spread deferred epilogue against the plain register one, in alternating rounds (three files): its
    gain in % per timing, and its share of torch.matmul's speed."""
    files = (("gemm_spread_rounds.csv", "launch default", "launch deferred"),
             ("gemm_spread_rounds2.csv", "launch default", "launch deferred"),
             ("gemm_deferral_forms_rounds.csv", "plain register", "default"))
    rows = []
    for name, plain, spread in files:
        m = rounds_medians(name)
        for shape in m.index.get_level_values(0).unique():
            s = m.loc[shape]
            row = {"file": name, "shape": shape}
            for col in s.columns:
                how = col.split(" (")[0]
                row[f"gain, {how} (%)"] = 100 * (s.loc[plain, col] / s.loc[spread, col] - 1)
                row[f"% of torch, {how}"] = 100 * s.loc["torch", col] / s.loc[spread, col]
            rows.append(row)
    return pd.DataFrame(rows)


def narrow_kloops() -> pd.DataFrame:
    """K loop of a narrow row against a 256-wide row of the 64-column-step build at the same shape (the traced
    builds of probes/gemm_timeline_step8), next to the model's width / 256."""
    folder = PROBES / "gemm_timeline_step8"
    rows = []
    for shape in ("4096x4096x4096", "8192x8192x8192"):
        ref = None
        for build in ("narrow64", "default"):
            frame = pd.read_csv(folder / f"gemm_timeline_{shape}_{build}.csv")
            kloop = (frame.mma_done - frame.data).groupby(frame.width).median()
            ref = kloop[256] if build == "narrow64" else ref
            rows += [dict(shape=shape, build=build, width=w, kloop_us=us) for w, us in kloop.items()]
        for r in rows:
            if r["shape"] == shape:
                r["vs 256-wide"], r["model"] = r["kloop_us"] / ref, r["width"] / 256
    return pd.DataFrame(rows)


def turns() -> pd.DataFrame:
    """torch.matmul's median ms timed alone, taking turns with itself and with our kernel, in two probes."""
    both = pd.concat([pd.read_csv(PROBES / "gemm_turns.csv").assign(probe="first"),
                      pd.read_csv(PROBES / "gemm_turns_settled.csv").assign(probe="second")])
    both = both[(both.contender == "torch") & (both.graphs == 1)]
    return both.pivot_table(index=["shape", "method"], columns="probe", values="ms_median", sort=False)


def sweep_grid() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The latest `gemm_kernels.bench --sweep` run (gemm_sweep.csv): torch.matmul's time over our default's in %
    on the M x N grid at K = 8192 (> 100: ours faster), as an (M rows, N columns) table, and the run's rows."""
    sweep = records.read("h200", "gemm_sweep")
    if sweep.empty:
        return pd.DataFrame(), sweep
    last = sweep[sweep.date == sweep.date.max()]
    grid = last.pivot_table(index=["M", "N"], columns="kernel", values="ms_median")
    return (100 * grid["torch"] / grid["ours"]).unstack("N"), last


def traced_launch(shape: str = "4096x4096x4096", build: str = "plain", launch: int = 0):
    """One launch of probes/gemm_timeline_78d89e8: every row each CTA ran (hopper_trace.trace_frame's columns)."""
    path = PROBES / "gemm_timeline_78d89e8" / f"gemm_timeline_{shape}_{build}.csv"
    runs = pd.read_csv(path)
    return runs[runs.launch == launch], relative(path)
